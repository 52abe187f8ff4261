"""Failure kinds: the failure protocol (base.py), the registry that makes a kind a timeline
verb (registry.py), the kinds by family (links.py, impair.py, bursts.py) and the kernel
operations they use on a fabric (ports.py).

Adding a kind is one class in one file: a frozen dataclass deriving from
``FailureKind`` with ``@register("verb")``, imported here (or by whoever uses it) so that
it registers. Timeline scripts, TOML timelines, experiment files and convergence then
know it; emu.failures re-exports the built-in ones.
"""

from emu.failure_kinds import bursts, impair, links  # noqa: F401 - each registers its kinds
