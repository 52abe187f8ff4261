"""How fast one message of each size goes, in BDPs of its transport (calibration phase 2).

Its one job: the eta samples. One message src -> dst per size, the sizes a fixed list
of BDPs of the transport's regime (``Plan.eta_bdp``; over the DCI, ``eta_dci_bdp`` of
its DCI regime), timed from post to delivery, with the drivers' CPU use;
workloads/calibration/stats.py fits eta and the overhead in RTTs to them.
"""

from __future__ import annotations

from emu.fabric import Fabric
from transports.testing import harness
from transports.testing.harness import Transfer
from workloads.calibration.samples import TransferSample
from workloads.calibration.session import Session
from workloads.calibration.transfers import checked, cpu_use, transport_config


def measure_eta(s: Session, fab: Fabric, src: str, dst: str, dci: bool) -> None:
    """Every transport's eta samples src -> dst on ``fab`` (over the DCI: ``dci``)."""
    def one(rep: int, t: str) -> None:
        a = s.samples(t)
        regime = a.dci_regime if dci else a.regime
        assert regime is not None  # set by the RTT probes, which run first
        for bdp in s.plan.eta_dci_bdp if dci else s.plan.eta_bdp:
            size = max(1, round(bdp * regime.bdp_bytes))
            res = harness.run_transfers(fab, t, [Transfer(src, dst, size)],
                                        config=transport_config(t, dict(s.plan.rc_config)),
                                        deadline_s=120)
            checked(res)
            sample = TransferSample(rep, size, res.messages[0]["latency"], cpu_use(res))
            (a.eta_dci if dci else a.eta).append(sample)
            s.say(f"  eta {'dci ' if dci else ''}{t} rep {rep}: {bdp:g} BDP ({size} B) "
                  f"in {sample.seconds * 1e3:.1f} ms, cpu {sample.cpu.max_core:.2f}")

    s.reps("eta_dci" if dci else "eta", one, s.dci_transports() if dci else None)
