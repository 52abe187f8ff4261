"""Pure planning of transport connections: no sockets, no processes, no root.

What a driver or an in-process endpoint needs to know before it opens a socket, and
what the benches, collectives and training workers share: one host's end of a
connection as a plan entry (``conn_spec``: a transports/planrecord.py ``ConnPlan``), the
content of a test message (``message_bytes``, ``placed_exactly``) and the ordering of a
plan's messages (``AfterGate``). The transports themselves, their settings and cores are declared in
transports/registry.py; ``DEFAULT_CONFIG`` is each one's run defaults as plan data.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from emu.errors import EmuError
from topologies import MultiPlaneClos, ScaleAcross
from transports import registry
from transports.planrecord import ConnPlan

T = TypeVar("T")

# Every transport's run defaults as a plan's ``config`` (registry ``plan_config``): what
# a driver plan carries when its caller sets nothing.
DEFAULT_CONFIG: Mapping[str, dict[str, Any]] = MappingProxyType(
    {t.name: t.plan_config() for t in registry.REGISTRY})


RC_SPORT_BASE = 49152  # a per-plane transport's source ports: this + the connection id


def conn_spec(spec: MultiPlaneClos | ScaleAcross, transport: str, a: str, b: str, conn: int,
              lane: int = 0, sport_base: int = RC_SPORT_BASE) -> ConnPlan:
    """Host ``a``'s end of connection ``conn`` to ``b``, as a driver/endpoint plan entry.

    A transport whose paths are SRv6 (MRC, DBLP): every SRv6 path of the pair (transit
    segments) as its EVs, and the NIC (plane) of each. One connection per plane (RC): the
    QP of plane ``lane % planes`` between the hosts' plane addresses (a connection split
    over several QPs per plane has lanes beyond the planes), with one fixed source port
    per connection, ``sport_base`` + ``conn`` (ECMP picks its spine: another base is
    another draw of the hash). Otherwise (TCP): the loopbacks.
    """
    caps = registry.get(transport).caps
    if caps.needs_srv6:
        paths = spec.paths(a, b)
        return ConnPlan(conn=conn, peer=b, peer_addr=str(spec.address(b)),
                        paths=tuple(tuple(str(s) for s in p.segments[:-1]) for p in paths),
                        nics=tuple(p.plane for p in paths))  # the NIC (plane) each EV leaves by
    if caps.per_plane:
        if not hasattr(spec, "plane_address"):
            multi = " or ".join(registry.names(lambda t: t.caps.needs_srv6))
            raise EmuError(f"{transport} needs a single-DC fabric: its per-plane QP addresses "
                           f"are not routed across DCs (use {multi})")
        return ConnPlan(conn=conn, peer=b,
                        peer_addr=str(spec.plane_address(b, lane % spec.planes)),
                        src_addr=str(spec.plane_address(a, lane % spec.planes)),
                        sport=sport_base + conn)  # one fixed 5-tuple: ECMP picks the spine
    return ConnPlan(conn=conn, peer=b, peer_addr=str(spec.address(b)))


def message_bytes(seed: int, size: int) -> bytes:
    """The deterministic content of a message (both ends derive it from the seed)."""
    return random.Random(seed).randbytes(size)


def placed_exactly(got: bytes | bytearray, ref: bytes, missing: Iterable[int] = (),
                   chunk: int = 0) -> bool:
    """Whether every byte of ``got`` equals ``ref`` outside the ``chunk``-byte chunks in
    ``missing`` (a bounded-loss receive leaves those unplaced). Byte comparisons
    (``memcmp``), against a reference made before the run: checking costs a few ms per
    24 MiB instead of generating and hashing during it, where it would take the CPU from
    the transfers still running."""
    if len(got) != len(ref):
        return False
    start = 0
    for i in sorted(set(missing)):
        if got[start:i * chunk] != ref[start:i * chunk]:
            return False
        start = (i + 1) * chunk
    return got[start:] == ref[start:] if start else got == ref


class AfterGate(Generic[T]):
    """Items that wait for earlier messages to complete (a plan's ``after``: one message
    id or several). ``add`` holds an item until every id it names is ``done``;
    ids already done count as done."""

    def __init__(self) -> None:
        # msg id -> (item, ids still awaited): one entry per item, under each id it awaits
        self._waits: dict[int, list[tuple[T, set[int]]]] = {}
        self._done: set[int] = set()

    def add(self, after: int | Iterable[int] | None, item: T) -> bool:
        """Hold ``item`` until ``after`` completed; False if there is nothing to wait for."""
        ids: set[int] = (set() if after is None else {after} if isinstance(after, int)
                         else set(after))
        ids -= self._done
        if not ids:
            return False
        entry = (item, ids)
        for m in ids:
            self._waits.setdefault(m, []).append(entry)
        return True

    def done(self, msg: int) -> list[T]:
        """Message ``msg`` completed: the items no longer waiting for anything, in order."""
        self._done.add(msg)
        ready = []
        for item, ids in self._waits.pop(msg, ()):
            ids.discard(msg)
            if not ids:
                ready.append(item)
        return ready
