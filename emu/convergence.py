"""How long the ECMP control plane takes to route around a failure.

For each failure, the remote switches that must withdraw a next hop are known
from the topology (``expected_withdrawals``); ``measure`` waits for all of them
on netlink and reports the slowest. Local detection (a switch losing light on
its own port) is immediate and not what this measures: a cut leaf-spine link
is seen by the other leaves of the plane only through BFD + BGP.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from ipaddress import IPv6Network

from emu import frr
from emu.failures import Failure, GrayLink, LinkDown, LinkFlap, PlaneDown, SwitchDown
from topologies import MultiPlaneClos, Role
from topologies.routing import originated_prefixes


@dataclass(frozen=True)
class Withdrawal:
    """``node`` must stop using ``ifname`` for ``prefix``."""

    node: str
    prefix: IPv6Network
    ifname: str


def expected_withdrawals(spec: MultiPlaneClos, failure: Failure) -> tuple[Withdrawal, ...]:
    """Remote next hops that a converged control plane removes after ``failure``."""
    if isinstance(failure, LinkDown | LinkFlap | GrayLink):
        lk = spec.link(failure.link)
        if lk.tier == "fabric":  # leaf (a) - spine (b): the other leaves of the plane
            leaf, spine = spec.node(lk.a.node), spec.node(lk.b.node)
            return tuple(
                Withdrawal(other.name, net, f"s{spine.index}")
                for other in spec.leaf_nodes if other.plane == leaf.plane and other != leaf
                for net in originated_prefixes(spec, leaf.name))
        # host (a) - leaf (b): the host's prefix disappears from the plane's other leaves
        host, leaf = spec.node(lk.a.node), spec.node(lk.b.node)
        net = next(n for n in originated_prefixes(spec, leaf.name)
                   if spec.address(host.name) in n)
        return tuple(Withdrawal(other.name, net, f"s{s}")
                     for other in spec.leaf_nodes if other.plane == leaf.plane and other != leaf
                     for s in range(spec.spines))
    if isinstance(failure, SwitchDown):
        node = spec.node(failure.switch)
        if node.role is Role.LEAF:  # its racks' prefixes vanish from the plane
            return tuple(Withdrawal(other.name, net, f"s{s}")
                         for other in spec.leaf_nodes if other.plane == node.plane
                         and other != node
                         for net in originated_prefixes(spec, node.name)
                         for s in range(spec.spines))
        return ()  # a dead spine is seen locally by every leaf (loss of light)
    if isinstance(failure, PlaneDown):
        return ()  # no alternative inside the plane; hosts see their NIC go down locally
    return ()  # rate degradation: routing does not react


def measure(fab, failure: Failure, timeout: float = 10.0) -> dict:
    """Wait for every expected withdrawal after ``failure`` (just applied).

    Returns ``{"convergence_s": slowest, "withdrawals": n}``, or the reason
    there is nothing to measure (static routes, no remote effect, timeout).
    """
    if fab.control_plane != "bgp":
        return {"convergence_s": None, "convergence": "static ECMP: no control plane"}
    wanted = expected_withdrawals(fab.spec, failure)
    if not wanted:
        return {"convergence_s": None, "convergence": "no remote route changes expected"}
    t0 = time.monotonic()
    done: list[float] = []
    errors: list[str] = []

    def one(w: Withdrawal) -> None:
        try:
            frr.wait_withdrawn(fab, w.node, w.prefix, w.ifname, timeout=timeout)
            done.append(time.monotonic() - t0)
        except TimeoutError as e:
            errors.append(str(e))

    # One waiter per remote leaf (its withdrawals in sequence), all leaves at once.
    by_node: dict[str, list[Withdrawal]] = {}
    for w in wanted:
        by_node.setdefault(w.node, []).append(w)

    def each(ws: list[Withdrawal]) -> None:
        for w in ws:
            one(w)

    threads = [threading.Thread(target=each, args=(ws,), daemon=True)
               for ws in by_node.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        return {"convergence_s": None, "withdrawals": len(wanted),
                "convergence": f"not withdrawn within {timeout} s", "detail": errors[:3]}
    return {"convergence_s": round(max(done), 4), "withdrawals": len(wanted)}
