"""How long the ECMP control plane takes to route around a failure.

For each failure, the remote switches that must withdraw a next hop are known
from the topology: every failure kind says which (its ``expected_withdrawals``,
emu.failure_kinds.base); ``measure`` waits for all of them on netlink and
reports the slowest. Local detection (a switch losing light on its own port) is
immediate and not what this measures: a cut leaf-spine link is seen by the other
leaves of the plane only through BFD + BGP. A failure that chooses what to break
when it fires (the busiest uplink) is measured as what it chose: the timeline
runner hands ``after_apply`` its ``concrete`` failure, as ``measure`` does when
given the handle ``apply`` returned.
"""

from __future__ import annotations

import threading
import time

from emu import frr
from emu.failure_kinds import base
from emu.failure_kinds.base import Failure, Withdrawal
from topologies import MultiPlaneClos

__all__ = ["Withdrawal", "expected_withdrawals", "measure"]


def expected_withdrawals(spec: MultiPlaneClos, failure: Failure,
                         handle: object = None) -> tuple[Withdrawal, ...]:
    """Remote next hops that a converged control plane removes after ``failure``
    (``handle``: what its ``apply`` returned, for a kind that chooses when it fires)."""
    if handle is not None:
        failure = base.concrete(failure, handle)
    return base.expected_withdrawals(failure, spec)


def measure(fab, failure: Failure, timeout: float = 10.0, handle: object = None) -> dict:
    """Wait for every expected withdrawal after ``failure`` (just applied; ``handle``:
    what its ``apply`` returned).

    Returns ``{"convergence_s": slowest, "withdrawals": n}``, or the reason
    there is nothing to measure (static routes, no remote effect, timeout).
    """
    if fab.control_plane != "bgp":
        return {"convergence_s": None, "convergence": "static ECMP: no control plane"}
    wanted = expected_withdrawals(fab.spec, failure, handle)
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
