"""What a calibration run has measured so far, and the v2 record written from it.

Its one job is the record side of `emu calibrate`: :class:`TransportSamples` holds one
transport's samples as the phases add them; :class:`Measured` holds every transport's,
the fabric descriptions and the provenance, builds the record
(``workloads.calibration.record.calibration_record``) and rewrites the file atomically, which
the run does after every measurement so that Ctrl-C keeps what was measured.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emu import safefs
from topologies import MultiPlaneClos, ScaleAcross
from workloads.calibration import record as cal
from workloads.calibration.plan import Plan
from workloads.calibration.samples import Regime, StepsSample, TransportMeasurements
from workloads.provenance import host_info, software_versions


@dataclass
class TransportSamples:
    """One transport's samples so far (mutable while measuring)."""

    probes: list[float] = field(default_factory=list)
    regime: Regime | None = None
    dci_probes: list[float] = field(default_factory=list)
    dci_regime: Regime | None = None
    eta: list = field(default_factory=list)
    eta_dci: list = field(default_factory=list)
    load: list = field(default_factory=list)
    healthy: list = field(default_factory=list)
    bursts: list = field(default_factory=list)
    recovery: list = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # what its switch ports did over its measurements (emu/signals.py signal_record)
    switches: dict[str, Any] = field(default_factory=dict)

    def add_switches(self, rec: dict[str, Any]) -> None:
        """Add one measurement's switch record (its signals, mechanism and totals)."""
        sw = self.switches
        sw["signals"], sw["mechanism"] = rec["signals"], rec["mechanism"]
        for k in ("packets", "marked", "trimmed", "dropped", "ce_seen"):
            sw[k] = sw.get(k, 0) + int(rec[k])


class Measured:
    """Every transport's samples (``acc``) of a run of ``plan`` on ``spec`` (and
    ``dci_spec``), DBLP's training steps, and the record written to ``out``."""

    def __init__(self, out: Path, plan: Plan, spec: MultiPlaneClos,
                 dci_spec: ScaleAcross | None, command: str) -> None:
        self.out, self.plan, self.spec, self.dci_spec = out, plan, spec, dci_spec
        self.command = command
        self.acc = {t: TransportSamples() for t in plan.transports}
        self.steps: tuple[StepsSample, ...] = ()
        self.steps_reason: str | None = "no --training-results given"
        self.versions, self.host = software_versions(), host_info()
        # sections of transports whose samples did not change are not recomputed
        # (bootstrap) on every rewrite
        self._memo: dict = {}

    def record(self) -> dict:
        """The v2 record from everything measured so far."""
        transports = {}
        for t, a in self.acc.items():
            if a.regime is None:
                continue
            transports[t] = TransportMeasurements(
                regime=a.regime, eta=tuple(a.eta), dci_regime=a.dci_regime,
                eta_dci=tuple(a.eta_dci), load=tuple(a.load), healthy_rounds=tuple(a.healthy),
                burst_rounds=tuple(a.bursts), recovery=tuple(a.recovery),
                dblp_tolerance=self.plan.dblp_tolerance if t == "dblp" else None,
                steps=self.steps if t == "dblp" else (),
                steps_reason=self.steps_reason if t == "dblp" else None, notes=tuple(a.notes),
                switches=tuple(sorted(a.switches.items())) or None)
        s = self.spec
        fabric = {"planes": s.planes, "spines": s.spines, "leaves": s.leaves,
                  "hosts_per_leaf": s.hosts_per_leaf, "rate_mbit": s.host_link.rate_mbit,
                  "fabric_rate_mbit": s.fabric_link.rate_mbit,
                  "queue_packets": s.host_link.queue_packets, "mtu": s.mtu,
                  "nominal_gbit": s.host_link.nominal_gbit, "dci": self._dci_desc()}
        return cal.calibration_record(
            fabric=fabric, transports=transports, command=self.command, versions=self.versions,
            host=self.host, generated=time.time(), seed=self.plan.seed,
            resamples=self.plan.resamples, memo=self._memo)

    def _dci_desc(self) -> dict | None:
        d = self.dci_spec
        if d is None:
            return None
        dc = d.dcs[0]
        return {"dcs": d.dc_count, "planes": d.planes, "spines": dc.spines,
                "leaves": dc.leaves, "hosts_per_leaf": dc.hosts_per_leaf,
                "host_rate_mbit": dc.host_link.rate_mbit, "rate_mbit": d.dci.rate_mbit,
                "queue_packets": d.dci.queue_packets, "delay_ms": d.dci.delay_ms,
                "nominal_gbit": d.dci.nominal_gbit,
                "rtt_s": {t: a.dci_regime.rtt_s for t, a in self.acc.items() if a.dci_regime},
                "bdp_bytes": {t: a.dci_regime.bdp_bytes for t, a in self.acc.items()
                              if a.dci_regime}}

    def write(self) -> dict:
        """Rewrite the record file (atomically) and return the record."""
        rec = self.record() if any(a.regime for a in self.acc.values()) else None
        if rec is not None:
            safefs.mkdir_private(self.out.parent)
            safefs.write_json(self.out, rec, indent=1, allow_nan=False)
        return rec or {}
