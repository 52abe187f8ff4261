"""What every sans-I/O transport core offers to drivers (sockets, fake network) and users.

A core is one end of one connection. It never touches a socket or a clock:
the driver passes ``now`` (seconds, CLOCK_MONOTONIC) and sends what the core
returns. Each datagram to send is a ``Tx``: the entropy value (path) it must
take, and its bytes. For MRC the EV indexes the peer's paths (one pinned socket
per path); RC and TCP-like cores always use EV 0 (ECMP decides).

Messages (as MRC's RDMA Write): ``post_send(msg, data)`` sends a buffer;
``post_recv(msg, buf)`` gives the buffer its bytes are placed into, by offset,
as they arrive (no reorder buffer). A ``Completion`` reports each message once
every byte is placed (receiver) or acknowledged (sender), or once it failed.
A bounded-loss core (DBLP) may complete a message early: ``delivered`` and
``missing`` then say which chunks did not arrive.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

# The datagram is usually the bytearray the core packed it into; drivers only send it.
Tx = tuple[int, bytes | bytearray]


class Completion(NamedTuple):
    """One finished message: ``ok`` with every byte, or failed with ``error``."""

    msg: int
    kind: str  # "send" or "recv"
    ok: bool
    nbytes: int
    t: float  # when it completed (the driver's clock)
    error: str | None = None
    # bounded-loss (DBLP) rounds; the defaults describe a reliable message
    delivered: float = 1.0  # fraction of the message's chunks delivered
    missing: tuple[int, ...] = ()  # indices (offset // mtu_payload) of chunks not delivered
    deadline: bool = False  # the receiver's deadline ended the message


class Core(Protocol):
    """The interface of MRC, RC and DBLP cores."""

    conn: int

    def post_send(self, msg: int, data: bytes | memoryview, now: float) -> list[Tx]:
        """Queue a message to the peer; returns what may be sent at once."""

    def post_recv(self, msg: int, buf: bytearray | memoryview, now: float) -> list[Tx]:
        """Give the buffer message ``msg`` is placed into (its length is the message's)."""

    def on_packet(self, data: bytes | memoryview, now: float,
                  rx_t: float | None = None) -> list[Tx]:
        """Feed one received datagram; malformed ones are counted and dropped. ``rx_t``:
        when it reached the host (the kernel's receive timestamp; None: ``now``), which
        RTT samples and ACK hold times are measured from; ``now`` stamps what is sent."""

    def flush(self, now: float) -> list[Tx]:
        """The end of a wake-up of the I/O loop: the coalesced ACK of every packet taken
        since the last ACK (a receiver set to ``ack_wakeup`` acknowledges once per
        wake-up or per ``ack_every`` packets; transports/core/receiver.py)."""

    def on_timer(self, now: float) -> list[Tx]:
        """Advance timers (retransmission, probes, pacing) to ``now``."""

    def next_deadline(self) -> float | None:
        """When ``on_timer`` must be called next (None: no timer armed)."""

    def completions(self) -> list[Completion]:
        """Messages finished since the last call (drained)."""

    def set_host_delay(self, delay: float) -> None:
        """The I/O loop's measured scheduling delay, added to the RTO floor
        (transports/core/rto.py)."""
