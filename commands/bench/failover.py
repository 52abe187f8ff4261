"""`emu bench failover`: how an ECMP fabric under BFD + BGP rides out failures.

For each failure kind, ECMP flows run from every other rack into rack 0 while a
timeline fails one element at t=1 s and restores it at t=3 s. Reported: the
control plane's convergence (until every remote leaf withdrew the dead next
hop, measured on netlink), the datagrams lost, and the longest delivery gap of
any flow. These are the baseline figures a spraying transport must beat.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from emu import convergence
from emu.errors import require_root
from emu.fabric import Fabric
from emu.failures import Failure, GrayLink, LinkDown, LinkFlap, SwitchDown
from emu.frr import BfdTimers
from emu.timeline import Timeline, TimelineRunner, at, restore
from emu.traffic import Flow, run_flows
from topologies import LinkSpec, MultiPlaneClos

SPEC = MultiPlaneClos(planes=2, spines=4, leaves=4, hosts_per_leaf=2,
                      host_link=LinkSpec(100.0, 100), fabric_link=LinkSpec(100.0, 100))
KINDS: tuple[tuple[str, Failure], ...] = (
    ("leaf-spine link cut", LinkDown("p0l0-p0s1")),
    ("spine down", SwitchDown("p0s1")),
    ("link flap 1 s, 50 % down", LinkFlap("p0l0-p0s1", period_s=1.0, duty=0.5)),
    ("gray link, 5 % loss", GrayLink("p0l0-p0s1", 0.05)),
)
FAIL_AT, RESTORE_AT, RUN_S = 1.0, 3.0, 4.0
RATE_MBIT, PAYLOAD, PORTS = 6.0, 3000, 2


def _flows(spec: MultiPlaneClos) -> list[Flow]:
    """``PORTS`` flows (source ports) from every host off rack 0 to each rack-0 host: enough
    5-tuples that ECMP puts some on every (plane, spine)."""
    rack0 = [h.name for h in spec.hosts if h.rack == 0]
    others = [h.name for h in spec.hosts if h.rack != 0]
    return [Flow(src, dst, None, sport=51000 + 100 * i + 10 * j + k)
            for i, src in enumerate(others) for j, dst in enumerate(rack0)
            for k in range(PORTS)]


def bench_failover(say: Callable[[str], None] = print, bfd: BfdTimers | None = None) -> dict:
    """Run every failure kind on one BGP fabric; returns the results."""
    require_root("emu bench failover")
    bfd = bfd or BfdTimers()
    out: dict = {"fabric": {"planes": SPEC.planes, "spines": SPEC.spines,
                            "leaves": SPEC.leaves, "hosts": SPEC.host_count},
                 "bfd": {"receive_ms": bfd.receive_ms, "transmit_ms": bfd.transmit_ms,
                         "multiplier": bfd.detect_multiplier, "detection_s": bfd.detection_s},
                 "flows": None, "rate_mbit": RATE_MBIT, "kinds": []}
    with Fabric(SPEC, name="failover", control_plane="bgp", bfd=bfd,
                progress=lambda m: say(f"  fabric: {m}")) as fab:
        flows = _flows(SPEC)
        out["flows"] = len(flows)
        gap = (PAYLOAD + 62) * 8 / (RATE_MBIT * 1e6)
        for label, failure in KINDS:
            say(f"{label}: {failure.describe()}")
            events: list[dict] = []
            tl = Timeline((at(FAIL_AT, failure), at(RESTORE_AT, restore(failure))))
            runner = TimelineRunner(fab, tl, events.append,
                                    after_apply=lambda f: convergence.measure(fab, f, 5.0))
            t0 = time.monotonic()
            runner.start(t0)
            res = run_flows(fab, flows, rate_mbit=RATE_MBIT, seconds=RUN_S - 0.3,
                            payload=PAYLOAD)
            runner.join(timeout=10)
            runner.stop()  # also waits for the convergence measurement
            sent = sum(r.sent for r in res)
            lost = sum(r.lost for r in res)
            hit = [r for r in res if r.lost]
            applied = next((e for e in events if e["action"] == "measured"), {})
            row: dict[str, Any] = {
                "kind": label, "failure": failure.describe(),
                "convergence_s": applied.get("convergence_s"),
                "convergence_note": applied.get("convergence"),
                "sent": sent, "lost": lost, "lost_fraction": round(lost / sent, 4),
                "flows_hit": len(hit), "flows": len(res),
                "longest_gap_s": round(max(r.max_gap_s for r in res), 4),
                "nominal_gap_s": round(gap, 4), "events": events}
            out["kinds"].append(row)
            conv = (f"{row['convergence_s'] * 1000:.0f} ms" if row["convergence_s"] is not None
                    else row["convergence_note"])
            say(f"  convergence {conv}; lost {lost}/{sent} datagrams "
                f"({len(hit)}/{len(res)} flows hit), longest gap {row['longest_gap_s']:.3f} s")
            fab.wait_converged(timeout=30)
    return out
