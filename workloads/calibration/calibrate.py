"""`emu calibrate`: measure the transports' dimensionless figures; write calibration v2.

Its one job is the run: the fabrics built and torn down, the phases in order, the
record kept on disk throughout. One fabric, built once (under FRR BGP + BFD when
recovery is measured: RC and TCP need the control plane to route around a cut; MRC's
SRv6 paths are static either way): ``FABRIC`` (workloads/calibration/plan.py, with the
``Plan``). Then, if asked, a 2-DC ``DCI_FABRIC`` whose DCI links bind. Phases, each
repeated ``reps`` times, interleaved (repetition 1 of every transport, then repetition
2, ...: workloads/calibration/session.py), host h0 to the first host of the next rack
unless said, each in a module of its own:

1. RTT, and the regime it sets (workloads/calibration/regime.py).
2. eta: one message per size, in BDPs of the regime (workloads/calibration/eta.py).
3. Load balance: every host to ``k`` hosts of the next rack (calibration_load.py).
4. Tails: chained rounds, healthy and through microbursts (calibration_tails.py).
5. Recovery: a transfer with the busiest uplink into the receiver's rack cut
   (calibration_recovery.py).
6. RTT and eta over the DCI (no RC: its per-plane QP addresses are not routed across
   DCs).

The record (workloads/calibration/measured.py) is rewritten after every measurement
(Ctrl-C keeps what was measured) and the fabrics always come down.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from emu.errors import EmuError, require_root
from emu.fabric import Fabric
from topologies import MultiPlaneClos, ScaleAcross
from workloads.calibration.eta import measure_eta
from workloads.calibration.load import measure_load
from workloads.calibration.measured import Measured
from workloads.calibration.plan import DCI_FABRIC, FABRIC, FULL, QUICK, Plan
from workloads.calibration.recovery import measure_recovery
from workloads.calibration.regime import probe_rtt
from workloads.calibration.samples import steps_from_training
from workloads.calibration.session import Session
from workloads.calibration.tails import measure_tails
from workloads.training.results import read_jsonl

if TYPE_CHECKING:
    from topologies.routing import EcmpMode


class Calibration:
    """A calibration run: ``run()`` measures per ``plan`` and writes ``out`` as it goes."""

    def __init__(self, out: Path, plan: Plan = FULL, *, say: Callable[[str], None] = print,
                 spec: MultiPlaneClos = FABRIC, dci_spec: ScaleAcross | None = DCI_FABRIC,
                 command: str = "emu calibrate", training_results: Path | None = None,
                 name: str = "calib") -> None:
        if spec.leaves < 2:
            raise EmuError(f"leaves={spec.leaves} is invalid for calibration: the measured "
                           "paths cross racks (>= 2 leaves)")
        self.out, self.plan, self.say, self.spec = out, plan, say, spec
        self.dci_spec = dci_spec if "dci" in plan.measure else None
        self.name = name
        self.training_results = training_results
        self.measured = Measured(out, plan, spec, self.dci_spec, command)
        self.session = Session(plan, self.measured, spec, say)

    def run(self) -> dict:
        """Every phase of the plan; the record (also on disk)."""
        require_root("emu calibrate")
        p, s = self.plan, self.session
        if "load" in p.measure and max(p.flows_per_host) > self.spec.hosts_per_leaf:
            raise EmuError(f"flows_per_host={p.flows_per_host} is invalid: at most "
                           f"hosts_per_leaf={self.spec.hosts_per_leaf} (distinct receivers)")
        if self.training_results is not None:
            self._load_training()
        self.say(f"calibrate: {', '.join(p.transports)}; {p.reps} repetitions; record in "
                 f"{self.out}")
        s.t0 = time.monotonic()
        try:
            # the control plane only matters to recovery (RC and TCP wait for it there)
            cp: EcmpMode = "bgp" if "recovery" in p.measure else "static"
            with Fabric(self.spec, name=self.name, control_plane=cp,
                        progress=lambda m: self.say(f"  fabric: {m}")) as fab:
                probe_rtt(s, fab, self.spec, s.src, s.dst, dci=False)
                if "eta" in p.measure:
                    measure_eta(s, fab, s.src, s.dst, dci=False)
                if "load" in p.measure:
                    measure_load(s, fab)
                if "tails" in p.measure:
                    measure_tails(s, fab)
                if "recovery" in p.measure:
                    measure_recovery(s, fab)
            if self.dci_spec is not None:
                self._dci(self.dci_spec)
        finally:
            rec = self.measured.write()
        self.say(f"calibrate: done in {time.monotonic() - s.t0:.0f} s; record in {self.out}")
        return rec

    def _dci(self, spec: ScaleAcross) -> None:
        """RTT and eta over the DCI, on a fabric of their own."""
        s = self.session
        if "rc" in self.measured.acc:
            self.measured.acc["rc"].notes.append(
                "eta_dci: not measured: RC's per-plane QP addresses are not routed across DCs")
        if not s.dci_transports():
            return
        src, dst = spec.hosts[0].name, spec.hosts[-1].name
        with Fabric(spec, name=self.name + "x",
                    progress=lambda m: self.say(f"  dci fabric: {m}")) as fab:
            probe_rtt(s, fab, spec, src, dst, dci=True)
            measure_eta(s, fab, src, dst, dci=True)

    def _load_training(self) -> None:
        """DBLP's step samples from a training bench's results (``--training-results``)."""
        path = self.training_results
        assert path is not None
        f = path / "results.jsonl" if path.is_dir() else path
        if not f.exists():
            raise EmuError(f"--training-results {str(path)!r}: no results.jsonl there (the "
                           "output directory of `emu bench training`)")
        m = self.measured
        m.steps, m.steps_reason = steps_from_training(read_jsonl(f))
        self.say(f"  training results {f}: {len(m.steps)} DBLP / MRC pairs"
                 + (f" ({m.steps_reason})" if m.steps_reason else ""))


def calibrate(out: Path, *, quick: bool = False, transports: tuple[str, ...] | None = None,
              training_results: Path | None = None, say: Callable[[str], None] = print,
              command: str | None = None) -> dict:
    """`emu calibrate`: the full (or ``quick``) plan on the default fabrics; the record."""
    plan = QUICK if quick else FULL
    if transports:
        plan = replace(plan, transports=transports)
    if command is None:
        command = shlex.join(["emu", "calibrate", "--out", str(out)]
                             + (["--quick"] if quick else [])
                             + (["--transports", ",".join(transports)] if transports else [])
                             + (["--training-results", str(training_results)]
                                if training_results else []))
    return Calibration(out, plan, say=say, command=command,
                       training_results=training_results).run()
