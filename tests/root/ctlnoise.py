"""The host's part in the control-plane and failure tests: on two shared vCPUs the
hypervisor now and then takes a core away (10 ms to 1 s). The daemons and drivers keep
their own record of being late (a BFD session that went down with nothing cut, a
driver's loop that sampled nothing for a stretch); a check is measured again only when
such a record, or the per-CPU sampling of ``burstnoise.CpuWakeups``, shows the host
disturbed beyond what the check allows."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable

from emu.fabric import Fabric

Session = tuple[str, str]  # (switch, interface) of one BFD session


def bfd_downs(fab: Fabric) -> dict[Session, int]:
    """Per BFD session of every switch, how often bfdd saw it go down."""
    out: dict[Session, int] = {}
    for node in sorted(fab.bgp):
        for p in json.loads(fab.frr.vtysh(node, "show bfd peers counters json") or "[]"):
            out[(node, p.get("interface", p.get("peer")))] = int(p.get("session-down", 0))
    return out


def flapped(fab: Fabric, before: dict[Session, int],
            caused: Iterable[Session] = ()) -> Callable[[], str | None]:
    """An excuse for ``burstnoise.excused``: a BFD session the test did not touch
    (``caused``) went down since ``before``. With nothing cut, a session goes down only
    when a bfdd went without the CPU for its whole detection time: the host stalled."""
    skip = set(caused)

    def why() -> str | None:
        now = bfd_downs(fab)
        bad = {s: n - before.get(s, 0) for s, n in now.items()
               if s not in skip and n > before.get(s, 0)}
        if not bad:
            return None
        return "BFD sessions nothing cut went down meanwhile: " + ", ".join(
            f"{node} {ifname} x{n}" for (node, ifname), n in sorted(bad.items()))
    return why


def loop_gap(timeline: list, a: float, b: float) -> float:
    """The longest stretch overlapping [a, b] (seconds from the common start) in which a
    driver's loop took no timeline sample: it samples on every pass at least each
    ``TIMELINE_S``, so a long gap is time the driver did not run."""
    ts = [float(t) for t, _ in timeline]
    return max((t1 - t0 for t0, t1 in zip(ts, ts[1:], strict=False) if t1 >= a and t0 <= b),
               default=b - a)


def wait_for(cond: Callable[[], object], timeout: float, what: Callable[[], str],
             every: float = 0.02) -> float:
    """Poll ``cond`` until true; seconds waited, or AssertionError with ``what()``."""
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"not within {timeout:g} s: {what()}")
        time.sleep(every)
    return time.monotonic() - t0
