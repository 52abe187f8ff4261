"""Pure planning of transport connections: no sockets, no processes, no root.

What a driver or an in-process endpoint needs to know before it opens a socket, and
what the benches, collectives and training workers share: the transports a run can
use and their default knobs (``DEFAULT_CONFIG``), one host's end of a connection as a
plan entry (``conn_spec``), the core of a connection (``make_core``), the content of a
test message (``message_bytes``) and the ordering of a plan's messages (``AfterGate``).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

from emu.errors import EmuError
from transports.api import Core

TRANSPORTS = ("mrc", "rc", "tcp", "dblp")
# RC runs with AIMD on its window, standing in for RoCE's rate control (DCQCN): a
# fixed window overflowing shallow switch buffers would only measure go-back-N storms.
# Emulated links are 1000x slower than real ones, so a full queue holds tens to
# hundreds of ms: the RTO cap is raised to match (the cores' defaults suit real rates).
DEFAULT_CONFIG: dict[str, dict[str, Any]] = {
    "mrc": {"rto_max": 2.0}, "rc": {"aimd": True, "rto_max": 2.0}, "tcp": {},
    "dblp": {"rto_max": 2.0}}


RC_SPORT_BASE = 49152  # RC's source ports: this + the connection id


def conn_spec(spec, transport: str, a: str, b: str, conn: int, lane: int = 0,
              sport_base: int = RC_SPORT_BASE) -> dict:
    """Host ``a``'s end of connection ``conn`` to ``b``, as a driver/endpoint plan entry.

    MRC/DBLP: every SRv6 path of the pair (transit segments) as its EVs, and the NIC
    (plane) of each. RC: the
    QP of plane ``lane % planes`` between the hosts' plane addresses (a connection split
    over several QPs per plane has lanes beyond the planes), with one fixed source port
    per connection, ``sport_base`` + ``conn`` (ECMP picks its spine: another base is
    another draw of the hash). TCP: the loopbacks.
    """
    c: dict = {"conn": conn, "peer": b, "peer_addr": str(spec.address(b))}
    if transport in ("mrc", "dblp"):
        paths = spec.paths(a, b)
        c["paths"] = [[str(s) for s in p.segments[:-1]] for p in paths]
        c["nics"] = [p.plane for p in paths]  # the NIC (plane) each EV leaves by
    elif transport == "rc":
        if not hasattr(spec, "plane_address"):
            raise EmuError("rc needs a single-DC fabric: its per-plane QP addresses are not "
                           "routed across DCs (use mrc or dblp)")
        c["src_addr"] = str(spec.plane_address(a, lane % spec.planes))
        c["peer_addr"] = str(spec.plane_address(b, lane % spec.planes))
        c["sport"] = sport_base + conn  # one fixed 5-tuple: ECMP picks the spine
    return c


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


def make_core(transport: str, conn: int, evs: int, config: dict, seed: int,
              nics: list[int] | None = None) -> Core:
    """A core of ``transport`` ("mrc", "rc", "dblp") for one connection; ``nics``: the NIC
    (plane) of each EV (MRC, DBLP)."""
    if transport == "mrc":
        from transports.mrc import MrcConfig, MrcCore

        return MrcCore(conn, evs, MrcConfig(**config), seed, nics=nics)
    if transport == "rc":
        from transports.rc import RcConfig, RcCore

        return RcCore(conn, RcConfig(**config), seed)
    if transport == "dblp":
        from transports.dblp import DblpCore
        from transports.mrc import MrcConfig

        return DblpCore(conn, evs, MrcConfig(**config), seed, nics=nics)
    raise ValueError(f"transport={transport!r} is not a UDP core: use 'mrc', 'rc' or 'dblp'")


class AfterGate:
    """Items that wait for earlier messages to complete (a plan's ``after``: one message
    id or a list of them). ``add`` holds an item until every id it names is ``done``;
    ids already done count as done."""

    def __init__(self) -> None:
        self._waits: dict[int, list[list]] = {}  # msg id -> [item, ids still awaited]
        self._done: set[int] = set()

    def add(self, after: int | list[int] | None, item: object) -> bool:
        """Hold ``item`` until ``after`` completed; False if there is nothing to wait for."""
        ids = set() if after is None else {after} if isinstance(after, int) else set(after)
        ids -= self._done
        if not ids:
            return False
        entry = [item, ids]
        for m in ids:
            self._waits.setdefault(m, []).append(entry)
        return True

    def done(self, msg: int) -> list:
        """Message ``msg`` completed: the items no longer waiting for anything, in order."""
        self._done.add(msg)
        ready = []
        for entry in self._waits.pop(msg, ()):
            entry[1].discard(msg)
            if not entry[1]:
                ready.append(entry[0])
        return ready
