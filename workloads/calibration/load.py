"""How evenly each transport spreads many flows over the fabric (calibration phase 3).

Its one job: the load-balance samples. Every host sends to ``k`` hosts of the next rack
(the same local indices onward), ``k`` in ``Plan.flows_per_host``, each source's bytes
sized to ``Plan.load_s`` seconds at its ideal rate; the goodput against the ideal, per
flows per uplink. RC runs once per ``Plan.rc_qps`` (its connections split over that many
queue pairs per plane, each its own 5-tuple), its source ports moved every repetition
(another draw of the hash). A sample of a transport ECMP hashes also carries its F hashed
flows and the N uplinks they hash onto.
"""

from __future__ import annotations

from emu.fabric import Fabric
from transports.plan import RC_SPORT_BASE
from transports.testing import harness
from transports.testing.harness import Transfer
from workloads.calibration.samples import LoadSample
from workloads.calibration.session import Session
from workloads.calibration.transfers import ECMP, checked, cpu_use, transport_config

# RC's source ports move by this much every repetition: each repetition is another draw
# of the ECMP hash (the same 5-tuples would land where they did, every time), so the
# mean over repetitions estimates the hashing's expectation the explorer's law uses.
SPORT_STRIDE = 1024


def measure_load(s: Session, fab: Fabric) -> None:
    """Every transport's load-balance samples on the main fabric ``fab``."""
    spec = s.spec
    hosts, h, racks = [n.name for n in spec.hosts], spec.hosts_per_leaf, spec.leaves

    def one(rep: int, t: str) -> None:
        regime = s.samples(t).regime
        assert regime is not None  # set by the RTT probes, which run first
        nic = regime.line_mbit * regime.payload_bytes / regime.frame_bytes
        for qps in (s.plan.rc_qps if t == "rc" else (1,)):
            for k in s.plan.flows_per_host:
                per_host = min(k * regime.lanes, spec.planes) * nic
                size = max(1, round(per_host * 1e6 / 8 * s.plan.load_s / k))
                transfers = [Transfer(hosts[i],
                                      hosts[((i // h + 1) % racks) * h + (i + m) % h], size)
                             for i in range(len(hosts)) for m in range(k)]
                res = harness.run_transfers(fab, t, transfers,
                                            config=transport_config(t, dict(s.plan.rc_config)),
                                            deadline_s=120, qps=qps,
                                            sport_base=RC_SPORT_BASE + rep * SPORT_STRIDE)
                checked(res)
                fpu = k * h * regime.lanes / (spec.planes * spec.spines)
                f = n = None
                if t in ECMP:
                    f, n = k * h * qps, spec.spines * (spec.planes if t == "tcp" else 1)
                sample = LoadSample(rep, fpu, res.goodput_mbit, per_host * len(hosts),
                                    cpu_use(res), f, n, qps)
                s.samples(t).load.append(sample)
                s.say(f"  load {t} rep {rep}: {fpu:g} flows/uplink x {qps} QPs: "
                      f"{sample.goodput_mbit / sample.ideal_mbit:.3f} of ideal, cpu "
                      f"{sample.cpu.max_core:.2f} max / "
                      f"{sum(c for _, c in sample.cpu.drivers):.2f}")

    s.reps("load", one)
