"""What collectives need from a transport: numbered point-to-point messages between ranks.

A ``Comm`` is one rank's view of a group of ``size`` ranks. ``isend(peer, data)``
sends one message to ``peer``; ``irecv(peer, buf)`` gives the buffer the next
message from ``peer`` is placed into. The n-th ``isend`` from a to b pairs with
b's n-th ``irecv`` from a (both ends number their messages per peer and
direction), so two ranks that run the same schedule always match, whatever order
messages complete in. Both return a ``Handle`` that is done once the transport's
``Completion`` for the message is there.

Collective code never blocks: it is a generator that yields lists of handles
and is resumed once all of them are done (``drive`` does that for one rank
with a blocking ``Comm.wait``; the fake-network runner interleaves many
ranks in virtual time). ``bound`` (a ``transports.core.dblp.LossBound``) asks for a
bounded-loss message; a transport without bounded loss refuses it.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Protocol

from transports.core.api import Completion


class Handle:
    """One posted message; ``completion`` is set (once) by the comm that posted it."""

    __slots__ = ("peer", "kind", "nbytes", "completion", "t_post")

    def __init__(self, peer: int, kind: str, nbytes: int, t_post: float = 0.0) -> None:
        self.peer = peer
        self.kind = kind  # "send" or "recv"
        self.nbytes = nbytes
        self.t_post = t_post
        self.completion: Completion | None = None

    @property
    def done(self) -> bool:
        return self.completion is not None

    def __repr__(self) -> str:
        return f"Handle({self.kind} peer={self.peer} {self.nbytes} B done={self.done})"


class CommError(RuntimeError):
    """A message failed (the transport gave up on the peer, or a bad request)."""


class Comm(Protocol):
    """One rank's point-to-point messaging (see the module docstring)."""

    rank: int
    size: int
    mtu_payload: int  # bytes per chunk: ``Completion.missing`` indexes chunks of this size

    def isend(self, peer: int, data: bytes | memoryview, bound: Any = None) -> Handle:
        """Send ``data`` (not modified until the handle is done) as the next message to peer."""

    def irecv(self, peer: int, buf: memoryview, bound: Any = None) -> Handle:
        """Place the next message from ``peer`` into ``buf`` (its length is the message's)."""

    def wait(self, handles: list[Handle]) -> None:
        """Block until every handle is done (raises CommError on a transport failure)."""


Waits = Generator[list[Handle], None, Any]


def drive(gen: Waits, comm: Comm) -> Any:
    """Run a collective generator to its end on a blocking ``comm``; return its value."""
    try:
        handles = next(gen)
        while True:
            comm.wait(handles)
            handles = gen.send(None)
    except StopIteration as stop:
        return stop.value
