"""The systems the claims and the demo compare, each with its switches: MRC and RC in their
production forms, today's forms beside them, and MRC with each congestion mechanism
switched off in turn (the ablation).

A system is a transport, its settings (changes to the transport's run defaults) and what
the switch ports do (topologies/signals.py); the fabric is one, its ports set for each
run (``Fabric.set_signals``):

- ``mrc``: MRC on ECN-marking, trimming switches (UEC-style, as MRC is deployed): trims
  NACKed and resent without blame, NSCC's quadrants, NIC shares by plane congestion;
- ``mrc-no-trim``, ``mrc-no-ecn``, ``mrc-equal-nics``: the same with one mechanism off
  (no trimming; no marking and NSCC delay-only; equal NIC turns);
- ``mrc-reps``: the EV choice steered by ECN (REPS recycling EVs whose ACKs come back
  unmarked) instead of the oblivious permutation;
- ``mrc-plain``: MRC on today's switches (a FIFO that drops, no marks);
- ``rc``: RoCE as operators run it: DCQCN on a lossless fabric (PFC: buffers deep enough
  that no FIFO drops) with ECN marking;
- ``rc-dcqcn``: DCQCN on a lossy fabric with ECN marking;
- ``rc-lossy``: today's RC (AIMD window, go-back-N) on a plain lossy fabric;
- ``tcp``: the kernel's TCP on a plain lossy fabric;
- ``dblp``: DBLP on MRC's switches.

``production(transport)``: a transport's production form; ``calibrated(transport)``: the
form a calibration measures it in (its production form, but RC as today's lossy RC: the
explorer files the emulator's RC as ``rc_lossy`` and takes its lossless RC from the
deep-FIFO law record, scripts/calibrate_laws.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from topologies.signals import MRC_SWITCHES, PLAIN, ROCE_SWITCHES, SwitchSignals


@dataclass(frozen=True)
class System:
    """One compared system (see the module docstring)."""

    label: str
    transport: str
    summary: str
    signals: SwitchSignals
    changes: Mapping[str, Any] = field(default_factory=dict)  # nested: {"nscc": {...}}

    def settings(self) -> Any:
        """The transport's run defaults with ``changes``."""
        from transports import registry

        return _changed(registry.get(self.transport).defaults, self.changes)

    def plan_config(self) -> dict[str, Any] | None:
        """The settings as a transfer plan's ``config`` (None for the kernel's TCP, whose
        harness configuration is the calibration's)."""
        from transports import registry

        if self.transport == "tcp":
            return dict(TCP_CONFIG)
        return registry.get(self.transport).plan_config(self.settings())

    def overrides(self) -> dict[str, Any]:
        """The experiment overrides that run it (a training variant)."""
        sig = self.signals
        out: dict[str, Any] = {"transport.name": self.transport, "fabric.ecn": sig.ecn,
                               "fabric.trim": sig.trim, "fabric.lossless": sig.lossless}
        for key, value in _flat(self.changes):
            out[f"transport.{self.transport}.{key}"] = value
        return out


def _changed(obj: Any, changes: Mapping[str, Any]) -> Any:
    kw = {k: _changed(getattr(obj, k), v) if isinstance(v, Mapping) else v
          for k, v in changes.items()}
    return dataclasses.replace(obj, **kw)


def _flat(changes: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for k, v in changes.items():
        if isinstance(v, Mapping):
            out.extend(_flat(v, f"{prefix}{k}."))
        else:
            out.append((f"{prefix}{k}", v))
    return out


TCP_CONFIG = {"cc": "cubic"}  # Linux's default (this host's namespaces may default to BBR)
NO_ECN_SWITCHES = SwitchSignals(trim=True)
ECN_SWITCHES = SwitchSignals(ecn=True)
DCQCN = {"dcqcn": True, "aimd": False}
# On a lossless fabric a RoCE QP's timeout is thousands of RTTs (4.096 us x 2^14 = 67 ms
# against ~10 us): it must never fire behind a queue that PFC keeps instead of dropping.
# Here: at least 64 of its minimum RTTs and 0.5 s (the emulated fabric's RTTs are ~100x).
LOSSLESS_RTO = {"rto_init": 0.5, "rto_min": 0.5, "rto_min_rtts": 64.0, "rto_max": 8.0,
                "give_up_s": 30.0}

SYSTEMS: dict[str, System] = {s.label: s for s in (
    System("mrc", "mrc", "MRC, ECN + trimming switches", MRC_SWITCHES),
    System("mrc-no-trim", "mrc", "MRC, ECN switches, no trimming", ECN_SWITCHES),
    System("mrc-no-ecn", "mrc", "MRC, trimming switches, no marks (NSCC delay-only)",
           NO_ECN_SWITCHES, {"nscc": {"ecn": False}}),
    System("mrc-equal-nics", "mrc", "MRC, ECN + trimming, equal NIC turns", MRC_SWITCHES,
           {"nic_shares": "equal"}),
    System("mrc-reps", "mrc", "MRC, ECN + trimming, REPS (ECN-steered EVs)", MRC_SWITCHES,
           {"selector": "reps"}),
    System("mrc-plain", "mrc", "MRC on plain lossy switches (no marks, no trims)", PLAIN),
    System("rc", "rc", "RC over ECMP, DCQCN on a lossless (PFC-like) ECN fabric",
           ROCE_SWITCHES, {**DCQCN, **LOSSLESS_RTO}),
    System("rc-dcqcn", "rc", "RC over ECMP, DCQCN on a lossy ECN fabric", ECN_SWITCHES, DCQCN),
    System("rc-lossy", "rc", "RC over ECMP, AIMD window on a plain lossy fabric", PLAIN),
    System("tcp", "tcp", "kernel TCP over ECMP, plain lossy fabric", PLAIN),
    System("dblp", "dblp", "DBLP (MRC with loss bounds), ECN + trimming switches",
           MRC_SWITCHES),
)}


def production(transport: str) -> System:
    """``transport`` in its production form: its system of the same name (MRC and DBLP
    on ECN + trimming switches, RC with DCQCN on a lossless ECN fabric, TCP on plain
    switches)."""
    return system(transport)


# RC measured on the emulator's FIFOs is the explorer's rc_lossy (explorer/calibration.py:
# a record's RC is lossless only if its recorded FIFOs hold RC's window), so a calibration
# measures RC as today's lossy RC; the other transports in their production forms.
CALIBRATED = {"rc": "rc-lossy"}


def calibrated(transport: str) -> System:
    """The system a calibration measures for ``transport`` (``CALIBRATED``, else its
    production form)."""
    return system(CALIBRATED.get(transport, transport))


def system(label: str) -> System:
    """The system called ``label``; ValueError naming the valid ones."""
    try:
        return SYSTEMS[label]
    except KeyError:
        raise ValueError(f"system {label!r} is invalid: one of "
                         f"{', '.join(SYSTEMS)}") from None
