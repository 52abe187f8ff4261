"""What a link cut costs each transport's transfer (calibration phase 5).

Its one job: the recovery samples. A transfer of ``Plan.recovery_s`` at the binding
rate src -> dst, once clean and once with the leaf-spine link busiest into the
receiver's rack cut ``Plan.cut_at_s`` (+ a 0.1 s traffic sample) after the start
(emu.failures.BusiestUplinkDown); RC and TCP, whose paths the control plane moves, also
time its withdrawals (emu.convergence) and report when their sender's retransmission
timeouts fired (``rto_log``: the first at or after convergence, within the time the cut
cost, is the retry that gets through, ``RecoverySample.retry_s``). The link is restored
and the fabric reconverged before the next transfer.
"""

from __future__ import annotations

import threading
import time

from emu.fabric import Fabric
from emu.failures import BusiestUplinkDown, LinkDown
from transports.testing import harness
from transports.testing.harness import Transfer
from workloads.calibration.samples import RecoverySample
from workloads.calibration.session import Session
from workloads.calibration.transfers import ECMP, checked, cpu_use, transport_config


def measure_recovery(s: Session, fab: Fabric) -> None:
    """Every transport's clean and cut transfers on the main fabric ``fab`` (under the
    control plane: RC and TCP route around the cut only with it)."""
    spec, src, dst = s.spec, s.src, s.dst
    leaves = ",".join(spec.leaf_of(dst, p).name for p in range(spec.planes))

    def one(rep: int, t: str) -> None:
        regime = s.samples(t).regime
        assert regime is not None  # set by the RTT probes, which run first
        size = round(regime.binding_mbit * 1e6 / 8 * s.plan.recovery_s)
        clean = harness.run_transfers(fab, t, [Transfer(src, dst, size)],
                                      config=transport_config(t, dict(s.plan.rc_config)),
                                      deadline_s=120)
        cut: dict = {}
        failure = BusiestUplinkDown(leaves, sample_s=0.1)

        def cutter(t0: float) -> None:
            time.sleep(max(0.0, t0 + s.plan.cut_at_s - time.monotonic()))
            cut["chosen"] = failure.apply(fab)
            cut["t"] = time.monotonic()
            cut["at"] = cut["t"] - t0
            if t in ECMP:
                from emu import convergence

                cut["conv"] = convergence.measure(fab, LinkDown(cut["chosen"].link))

        th: list[threading.Thread] = []

        def on_start(t0: float) -> None:
            th.append(threading.Thread(target=cutter, args=(t0,), daemon=True))
            th[0].start()

        try:
            res = harness.run_transfers(fab, t, [Transfer(src, dst, size)],
                                        config=transport_config(t, dict(s.plan.rc_config)),
                                        deadline_s=120, on_start=on_start)
        finally:
            if th:
                th[0].join(30)
            if "chosen" in cut:
                failure.restore(fab, cut["chosen"])
            fab.wait_converged(60)
        checked(clean)
        checked(res)
        conv = cut.get("conv", {}).get("convergence_s")
        cpu = max(cpu_use(clean), cpu_use(res), key=lambda c: c.max_core)
        lost = res.completion_s - clean.completion_s
        retry = logged_retry(res.drivers[src].get("rto_log") or {}, cut["t"], conv, lost)
        sample = RecoverySample(rep, clean.completion_s, res.completion_s, conv,
                                t in ECMP, cpu, retry)
        s.samples(t).recovery.append(sample)
        s.say(f"  recovery {t} rep {rep}: cut {cut['chosen'].link} at {cut['at']:.2f} s;"
              f" {lost:.3f} s lost, convergence {conv} s, retry after it "
              f"{'none' if retry is None else f'{retry:.3f} s'} after the cut")

    s.reps("recovery", one)


def logged_retry(rto_log: dict, cut_t: float, convergence_s: float | None,
                lost_s: float) -> float | None:
    """Seconds from the cut (``cut_t``, monotonic) to the first retransmission timeout any
    connection logged at or after convergence (``convergence_s`` after the cut; 0 for a
    transport that does not wait for it) and within the ``lost_s`` the cut cost: the
    retry the explorer's model charges (explorer/failures.py ``first_retry``). None when
    none fired there."""
    lo = convergence_s or 0.0
    times = [t - cut_t for log in rto_log.values() for t in log if lo <= t - cut_t <= lost_s]
    return min(times) if times else None
