"""Experiment files: one TOML file describes a training run on an emulated fabric.

``load(path)`` reads and validates a file; ``parse(data, where)`` does the same for a dict
already read. Everything is checked before anything is built: unknown keys at any level,
wrong types, impossible values, missing required fields, contradicting options, and the
failure timeline against the fabric it will run on (a link that does not exist fails here,
not minutes later), and what this machine can hold (a batch larger than the training
set, a compute time no sleep can take, a name no directory can have: limits.py). Every
error is an :class:`emu.errors.EmuError` whose message names the file, the key path
(``workload.batch_size``), the bad value and what is valid.

A Python timeline (``timeline = "x.py"``) is code: one that only declares events is read
without running it, but any other runs, as root, when ``emu run`` starts (before the
fabric is built), with everything root can do. Name only scripts you trust.

Every key, its default, the values it takes and what it is: ``emu run --keys`` (from
schema.py, which reads them off the dataclasses that own them; the docs' reference page
is generated from the same). An example::

    name = "digits-mrc-linkcut"
    seed = 1
    timeline = "../failures/spine_link_cut.py"

    [fabric]
    planes = 2
    rate_mbit = 100.0

    [transport]
    name = "mrc"

    [transport.mrc]                # the chosen transport's own settings (optional)
    rto_max = 1.0
    [transport.mrc.nscc]
    target_frac = 0.5

    [workload]
    model = "digits_cnn"
    workers = 4
    steps = 200
    compute = "modelled"
    compute_ms = 20.0

A bounded-loss transport's table also holds its tolerance policy::

    [transport.dblp]               # only with name = "dblp" (optional there): DBLP's
                                   # settings (as [transport.mrc]'s, close = "needed" |
                                   # "first_pass" and linger_s) and its tolerance policy:
    policy = "phase_aware"         # "phase_aware" | "fixed" | "optireduce"
    fill = "error_feedback"        # workloads.collectives.fill.FILLS
    tolerance = 0.05               # fixed only: 0.05; in [0, 1)
    base = 0.05                    # phase_aware only: every PhaseAwareConfig field
    cap = 0.2                      #   (base, cap, critical_epochs, window, eta, lr_scaling,
    critical_epochs = 2            #   epoch_steps), its defaults and checks;
    epoch_steps = 20               #   accuracy_gain and begin_accuracy are refused (no
                                   #   accuracy signal); epoch_steps: rounds per epoch
                                   #   of the critical period (default: the data's epoch)
    window = 10
    eta = 0.5
    deadline_ms = 50.0             # optional, > 0: every round's deadline (optireduce: the
                                   # first round's, later ones adapt)
    margin_ms = 1.0                # optireduce only: 1.0; >= 0
    bounded_gather = false         # false; true bounds the all-gather too: an entry that
                                   # does not arrive is estimated from the rank's own
                                   # gradient, so replicas may drift (see collectives.py)
                                   # Without a deadline, the model's smallest transpose
                                   # block must have enough chunks (8000 B) for the largest
                                   # tolerance (fixed: tolerance; phase_aware: cap, or base
                                   # with lr_scaling off or a constant LR) to let one go,
                                   # else DBLP would run as reliable MRC: refused, naming
                                   # that key (the digits CNN's blocks are 2 chunks: a
                                   # tolerance >= 0.5; blocks.py)

    [[event]]                      # optional failure timeline, the emu/timeline.py TOML format;
    at = 5.0                       # seconds from the start of training (see `clock`), or
    # at_step = 40                 # instead: after training step 40, before step 41, on
                                   # every rank (an integer in [0, workload.steps - 2]);
                                   # one timeline uses one of the two for every event
    do = "fail_link"               # a verb of emu.timeline, its arguments as keys
    link = "p0l0-p0s1"
    id = "cut"                     # optional; a later event {do = "restore", id = "cut"}
                                   # undoes it (or do = "restore", what = "fail_link" and
                                   # the same arguments)

The default placement (``Experiment.hosts()``) spreads workers over DCs, then racks
(placement.py). ``with_overrides(exp, {"transport.name": "rc"})`` re-validates the
experiment with dotted keys replaced, ``parse_override("workload.steps=50")`` reads one
``KEY=VALUE`` (overrides.py).

The package, one module per job: config.py (the frozen dataclasses and vocabularies),
reader.py (the typed TOML table reader), tables.py (each table's rules), timeline.py (the
failure timeline, by emu.timeline's parser), limits.py (what this machine can hold),
blocks.py (DBLP's gradient blocks against its tolerance), placement.py, overrides.py,
and loading.py (``load``, ``parse``).
"""

from __future__ import annotations

from emu.tomlfile import parse_override
from workloads.experiment.config import (
    CLOCKS,
    COLLECTIVES,
    COMPUTE_MODES,
    CONTROL_PLANES,
    KINDS,
    LR_SCHEDULES,
    MAX_STAGES,
    MODELS,
    TRANSPORTS,
    Experiment,
    FabricConfig,
    TransportConfig,
    WorkloadConfig,
)
from workloads.experiment.dblp import POLICIES, DblpConfig
from workloads.experiment.loading import load, parse, parse_fabric
from workloads.experiment.overrides import with_overrides
from workloads.experiment.placement import default_placement

__all__ = [
    "CLOCKS", "COLLECTIVES", "COMPUTE_MODES", "CONTROL_PLANES", "KINDS", "LR_SCHEDULES",
    "MAX_STAGES", "MODELS", "POLICIES", "TRANSPORTS", "DblpConfig", "Experiment",
    "FabricConfig", "TransportConfig", "WorkloadConfig", "default_placement", "load", "parse",
    "parse_fabric", "parse_override", "with_overrides",
]
