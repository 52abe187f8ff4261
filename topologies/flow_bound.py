"""The least time a set of equal flows can take on a multi-plane Clos, from its cuts.

A failure that takes links down may leave a fabric too thin for a workload's traffic,
whatever the transport does; this module says by how much, so a transport is judged
against what the fabric still allows. Every flow carries the same volume (a ring's
neighbours in a reduce-scatter or all-gather), and the fabric's links run at their
``LinkSpec`` rates (both directions; a link named in ``down`` carries nothing).

``least_time`` is a lower bound on the time per megabit of each flow: the largest, over
a family of cuts, of the flows that must cross the cut divided by the cut's capacity.
No transport, however it sprays, can move the flows faster. The cuts, per direction:

- **a host's NICs**: the flows it sends (receives) over the sum of its alive host links;
- **a rack**: its hosts (all of them, and those with a flow off the rack) with the
  leaves of any subset of planes. The best subset is per plane,
  ``min(alive uplinks of the plane's leaf, the hosts' alive links into it)``, so a
  plane whose leaf lost uplinks counts only what is left;
- **a pair of racks**: the flows from one to the other over what a single commodity
  could carry between them, per plane ``min(NICs out, sum over spines of
  min(up link, down link), NICs in)``: a spine reachable from one leaf but not from the
  other carries nothing between them (paths climb once and descend once: hosts do not
  forward, and no path turns back up at a leaf);
- **a pair of hosts**: the flows between them over what they could carry alone, per
  plane ``min(NIC out, NIC in, the spines' paths across racks)``: a flow whose hosts
  share no plane that is up takes for ever.

On a healthy Clos with full bisection the bound is the NICs' and is reached, so
``slowdown`` (the bound with ``down`` over the healthy one) is how much slower the flows
must be through the failure. It is a lower bound on the time with the failure, not
always the least time itself: another cut (or no cut) can be tighter.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

from topologies.clos import MultiPlaneClos
from topologies.errors import TopologyError

__all__ = ["least_time", "ring_flows", "slowdown"]

Flow = tuple[str, str]


def ring_flows(hosts: Sequence[str]) -> tuple[Flow, ...]:
    """The flows of a ring collective over ``hosts`` in rank order: each rank to the next
    (a ring reduce-scatter and all-gather both move equal volumes this way)."""
    n = len(hosts)
    if n < 2:
        return ()
    return tuple((hosts[i], hosts[(i + 1) % n]) for i in range(n))


class _Fabric:
    """Alive capacities of ``spec`` in Mbit/s with the links ``down`` gone."""

    def __init__(self, spec: MultiPlaneClos, down: Collection[str]) -> None:
        names = {lk.name for lk in spec.links}
        unknown = sorted(set(down) - names)
        if unknown:
            raise TopologyError(f"down={unknown!r} names no link of the fabric; links are "
                                f"named like {spec.links[0].name!r}")
        self.spec = spec
        self.nic: dict[tuple[str, int], float] = {}  # (host, plane) -> rate
        self.fabric: dict[tuple[int, int, int], float] = {}  # (plane, rack, spine) -> rate
        for lk in spec.links:
            rate = 0.0 if lk.name in down else lk.spec.rate_mbit
            if lk.tier == "host":
                self.nic[(lk.a.node, lk.plane)] = rate
            else:
                rack, spine = spec.node(lk.a.node).rack, spec.node(lk.b.node).index
                assert rack is not None
                self.fabric[(lk.plane, rack, spine)] = rate

    def nics(self, host: str) -> float:
        return sum(self.nic[(host, p)] for p in range(self.spec.planes))

    def rack_out(self, hosts: Collection[str], rack: int) -> float:
        """The least capacity of a cut around ``hosts`` (all in ``rack``) and the rack's
        leaves of any subset of planes."""
        spec = self.spec
        return sum(min(sum(self.fabric[(p, rack, s)] for s in range(spec.spines)),
                       sum(self.nic[(h, p)] for h in hosts))
                   for p in range(spec.planes))

    def between(self, a: Collection[str], ra: int, b: Collection[str], rb: int) -> float:
        """The most a single commodity can carry from hosts ``a`` (rack ``ra``) to hosts
        ``b`` (rack ``rb``; within one rack the leaf alone joins them)."""
        spec = self.spec
        return sum(min(sum(self.nic[(h, p)] for h in a),
                       sum(min(self.fabric[(p, ra, s)], self.fabric[(p, rb, s)])
                           for s in range(spec.spines)) if ra != rb else math.inf,
                       sum(self.nic[(h, p)] for h in b))
                   for p in range(spec.planes))


def _ratio(count: int, capacity: float) -> float:
    if count == 0:
        return 0.0
    return math.inf if capacity <= 0 else count / capacity


def least_time(spec: MultiPlaneClos, flows: Sequence[Flow],
               down: Collection[str] = ()) -> float:
    """A lower bound on the seconds each of ``flows`` needs per megabit it carries, all
    flows at once, with the links named in ``down`` gone (inf: some flow has no path);
    0.0 for no flow that leaves its host."""
    fab = _Fabric(spec, down)
    rack = {h.name: spec.rack_of(h.name) for h in spec.hosts}
    for src, dst in flows:
        for h in (src, dst):
            if h not in rack:
                raise TopologyError(f"host {h!r} is not in the fabric; hosts are "
                                    f"{spec.hosts[0].name}..{spec.hosts[-1].name}")
    flows = [(s, d) for s, d in flows if s != d]
    worst = 0.0
    for end in (0, 1):  # 0: a cut's flows leave it, 1: they enter it
        by_host: dict[str, int] = {}  # a host's NICs
        for f in flows:
            by_host[f[end]] = by_host.get(f[end], 0) + 1
        for h, count in by_host.items():
            worst = max(worst, _ratio(count, fab.nics(h)))
        for r in range(spec.leaves):  # a rack with its leaves of any set of planes
            members = [h for h, hr in rack.items() if hr == r]
            off = [f for f in flows if rack[f[end]] == r and rack[f[1 - end]] != r]
            busy = sorted({f[end] for f in off})
            for group in (members, busy):
                if group:
                    worst = max(worst, _ratio(len(off), fab.rack_out(group, r)))
    by_pair: dict[Flow, int] = {}  # a pair of hosts
    racks: dict[tuple[int, int], list[Flow]] = {}  # a pair of racks
    for s, d in flows:
        by_pair[(s, d)] = by_pair.get((s, d), 0) + 1
        if rack[s] != rack[d]:
            racks.setdefault((rack[s], rack[d]), []).append((s, d))
    for (s, d), count in by_pair.items():
        worst = max(worst, _ratio(count, fab.between([s], rack[s], [d], rack[d])))
    for (rs, rd), group_flows in racks.items():
        a = sorted({s for s, _ in group_flows})
        b = sorted({d for _, d in group_flows})
        worst = max(worst, _ratio(len(group_flows), fab.between(a, rs, b, rd)))
    return worst


def slowdown(spec: MultiPlaneClos, flows: Sequence[Flow], down: Collection[str]) -> float:
    """How many times longer ``flows`` must take with the links ``down`` gone than on the
    healthy fabric, by their cuts (``least_time``); 1.0 when the failure takes nothing
    they need, inf when some flow has no path left."""
    healthy = least_time(spec, flows)
    if healthy == 0.0:
        return 1.0
    return least_time(spec, flows, down) / healthy
