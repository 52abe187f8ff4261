"""Hostile datagrams, and a child process that sends one kind of them at a paced rate.

The kinds are what an off-path or confused peer can send without knowing the live
PSN window (the property test tests/unit/transports/test_core_fuzz.py feeds them to cores on the
fake network; ``emu bench robustness`` sends them over the fabric to a receiving
driver while a transfer runs):

kind (what an MRC receiver counts it as):

- ``junk``: 0-199 random bytes (``unknown_conn``, the driver's)
- ``truncated``: a DATA header cut short, 1-47 bytes (``malformed_truncated``; under
  8 bytes: ``unknown_conn``)
- ``wrong_conn``: DATA / ACK / PROBE of another connection (``unknown_conn``)
- ``bad_crc``: DATA whose CRC does not match its payload (``crc``)
- ``data_beyond_window``: DATA a billion PSNs ahead, of a message nobody posted
  (``out_of_window``)
- ``ack_beyond_sent``: a cumulative ACK beyond anything sent (``ack_beyond_sent``)
- ``sack_flood``: an ACK with 40-299 SACK blocks, a peer sends at most 32
  (``sack_too_many``)
- ``stop_unknown``: DBLP's STOP / STOP_OK for a message that does not exist
  (``stop_unexpected``)
- ``probe_ack_unsolicited``: a PROBE_ACK nobody asked for (``stale_probe_ack``)
- ``nack_unknown``: a NACK for a PSN never sent (``nack_unknown``)
- ``wrong_version``: a header of another wire version (``malformed_version``)

(The driver hands a datagram to a core by the connection id at offset 4: one naming
no connection of the host, or shorter than 8 bytes, is counted by the driver as
``unknown_conn`` and never reaches a core.) An ACK forged inside the live window is
outside this model: without authentication (RoCE has none either) it can make a
sender forget data.

The sender (``python -m transports.testing.hostile``, started by ``emu.launch`` in a host's
namespace; ``emu.childproto``): config ``{"kind", "rate", "dst", "port", "src", "conn",
"evs", "seed"}``; it builds a pool of datagrams of the kind, says ``ready``, and from
the start instant sends them round-robin at ``rate`` datagrams per second (a token
bucket refilled every millisecond, at most ``BURST_S`` of credit: a sender starved
of the CPU does not catch up in a burst, it falls short, and says so) until its stdin
ends, then writes one ``result`` record: datagrams sent, the rate achieved, send
errors and its own CPU.
"""

from __future__ import annotations

import os
import random
import resource
import select
import socket
import sys
import time

from transports.core import wire
from transports.core.wire import (
    ACK,
    DATA,
    FLAG_SACK,
    FLAG_STOP,
    FLAG_STOP_OK,
    HEADER_LEN,
    NACK,
    PROBE,
    PROBE_ACK,
    pack_header,
)

KINDS = ("junk", "truncated", "wrong_conn", "bad_crc", "data_beyond_window",
         "ack_beyond_sent", "sack_flood", "stop_unknown", "probe_ack_unsolicited",
         "nack_unknown", "wrong_version")

# What an MRC receiver (its driver and core) counts each kind as: stats keys, a key
# ending in "_" is a prefix (malformed_<reason>). transports/io/driver.py reports the
# driver's own count as "unknown_conn", the core's in "stats".
COUNTED_AS: dict[str, tuple[str, ...]] = {
    "junk": ("unknown_conn", "malformed_", "wrong_conn"),
    "truncated": ("malformed_truncated", "unknown_conn"),
    "wrong_conn": ("unknown_conn", "wrong_conn"),
    "bad_crc": ("crc",),
    "data_beyond_window": ("out_of_window",),
    "ack_beyond_sent": ("ack_beyond_sent",),
    "sack_flood": ("sack_too_many",),
    "stop_unknown": ("stop_unexpected",),
    "probe_ack_unsolicited": ("stale_probe_ack",),
    "nack_unknown": ("nack_unknown",),
    "wrong_version": ("malformed_version",),
}

TICK_S = 0.001  # the sender's pacing tick
BURST_S = 0.005  # most credit a sender may hold (it never catches up a stall in a burst)
POOL = 64  # distinct datagrams a sender cycles through


def counted(kind: str, stats: dict[str, int]) -> int:
    """How many datagrams of ``kind`` the counters ``stats`` (a core's stats with the
    driver's ``unknown_conn`` merged in) recorded."""
    keys = COUNTED_AS[kind]
    return sum(v for k, v in stats.items()
               if any(k.startswith(p) if p.endswith("_") else k == p for p in keys))


def datagram(kind: str, rng: random.Random, conn: int, evs: int) -> bytes:
    """One datagram of ``kind`` aimed at connection ``conn`` with ``evs`` EVs.

    The draws from ``rng`` are in a fixed order per kind (the property test's examples
    replay them): ``junk`` draws its length and bytes, every other kind first an EV and
    a 40-bit timestamp."""
    if kind == "junk":
        return rng.randbytes(rng.randrange(0, 200))
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r} is not one of {', '.join(KINDS)}")
    buf = bytearray(HEADER_LEN)
    ev = rng.randrange(evs)
    ts = rng.getrandbits(40)
    if kind == "truncated":  # a header cut short
        pack_header(buf, DATA, 0, conn, 0, 1, 0, 10, ev, 10, ts)
        return bytes(buf[:rng.randrange(1, HEADER_LEN)])
    if kind == "wrong_conn":  # another connection
        pack_header(buf, rng.choice((DATA, ACK, PROBE)), 0, conn + 1, 0, 1, 0, 0, ev, 0, ts)
        return bytes(buf)
    if kind == "bad_crc":  # DATA with a wrong CRC
        payload = rng.randbytes(100)
        buf = bytearray(HEADER_LEN + 100)
        pack_header(buf, DATA, 0, conn, rng.randrange(64), 1, 0, 100, ev, 100, ts, 0,
                    wire.crc32(payload) ^ 1)
        buf[HEADER_LEN:] = payload
        return bytes(buf)
    if kind == "data_beyond_window":  # DATA far beyond any window, a message nobody uses
        payload = rng.randbytes(16)
        buf = bytearray(HEADER_LEN + 16)
        pack_header(buf, DATA, 0, conn, 10**9 + rng.randrange(1000), 999_999, 0, 16, ev, 16,
                    ts, 0, wire.crc32(payload))
        buf[HEADER_LEN:] = payload
        return bytes(buf)
    if kind == "ack_beyond_sent":  # a cumulative ACK beyond anything sent
        pack_header(buf, ACK, 0, conn, 10**9, 0, 0, 0, ev, 0, ts, ts)
        return bytes(buf)
    if kind == "sack_flood":  # more SACK blocks than any peer sends
        blocks = [(10**8 + 2 * i, 10**8 + 2 * i + 1) for i in range(rng.randrange(40, 300))]
        payload = wire.pack_sack(blocks)
        buf = bytearray(HEADER_LEN + len(payload))
        pack_header(buf, ACK, FLAG_SACK, conn, 0, 0, 0, 0, ev, len(payload), ts)
        buf[HEADER_LEN:] = payload
        return bytes(buf)
    if kind == "stop_unknown":  # STOP or STOP_OK for a message that does not exist
        flag = rng.choice((FLAG_STOP, FLAG_STOP_OK))
        bitmap = rng.randbytes(rng.randrange(0, 4))
        buf = bytearray(HEADER_LEN + len(bitmap))
        pack_header(buf, ACK, flag, conn, rng.randrange(8), 500_000 + rng.randrange(10**6),
                    rng.randrange(8), rng.randrange(10**6), ev, len(bitmap), ts)
        buf[HEADER_LEN:] = bitmap
        return bytes(buf)
    if kind == "probe_ack_unsolicited":  # a PROBE_ACK nobody asked for
        pack_header(buf, PROBE_ACK, 0, conn, rng.randrange(1 << 20), 0, 0, 0, ev, 0, ts, ts)
        return bytes(buf)
    if kind == "nack_unknown":  # a NACK for a PSN never sent
        pack_header(buf, NACK, 0, conn, 10**9 + rng.randrange(1000), 0, 0, 0, ev, 0, ts)
        return bytes(buf)
    # wrong_version: another wire version (the connection id is this one's, so the
    # datagram reaches the core, which refuses it)
    wire.pack_version(buf, rng.randrange(2, 256), conn)
    return bytes(buf)


def hostile(rng: random.Random, evs: int, conn: int) -> bytes:
    """One datagram of a kind drawn from ``rng`` (uniformly over ``KINDS``)."""
    return datagram(KINDS[rng.randrange(len(KINDS))], rng, conn, evs)


def pool(kind: str, seed: int, conn: int, evs: int, n: int = POOL) -> list[bytes]:
    """``n`` datagrams of ``kind`` (a sender cycles through them: no work per datagram)."""
    rng = random.Random(seed)
    return [datagram(kind, rng, conn, evs) for _ in range(n)]


class Credit:
    """A token bucket: ``rate`` per second, refilled by ``refill(now)``, holding at most
    ``burst_s`` seconds' worth (a sender that stalls falls short instead of bursting)."""

    def __init__(self, rate: float, now: float, burst_s: float = BURST_S) -> None:
        self.rate, self.cap = rate, max(1.0, rate * burst_s)
        self.tokens, self.last = 0.0, now

    def refill(self, now: float) -> int:
        """Whole datagrams that may leave now (taken from the bucket)."""
        self.tokens = min(self.cap, self.tokens + (now - self.last) * self.rate)
        self.last = now
        n = int(self.tokens)
        self.tokens -= n
        return n

    def give_back(self, n: int) -> None:
        """``n`` datagrams taken but not sent (the socket was full)."""
        self.tokens = min(self.cap, self.tokens + n)


def send_loop(sock: socket.socket, datagrams: list[bytes], rate: float, t0: float,
              stop_fd: int | None) -> dict:
    """Send ``datagrams`` round-robin at ``rate`` per second from ``t0`` until ``stop_fd``
    (stdin) reaches end of file; the counts."""
    credit = Credit(rate, t0)
    sent = eagain = errors = 0
    n = len(datagrams)
    i = 0
    watch = [stop_fd] if stop_fd is not None else []
    send = sock.send
    while True:
        r, _, _ = select.select(watch, [], [], TICK_S)
        if r and not os.read(stop_fd, 4096):  # type: ignore[arg-type]  # r implies an fd
            break
        due = credit.refill(time.monotonic())
        for k in range(due):
            try:
                send(datagrams[i])
            except BlockingIOError:
                eagain += 1
                credit.give_back(due - k)
                break
            except OSError:
                errors += 1
                continue
            sent += 1
            i = i + 1 if i + 1 < n else 0
    seconds = time.monotonic() - t0
    return {"sent": sent, "seconds": round(seconds, 4),
            "rate": round(sent / seconds, 1) if seconds > 0 else 0.0,
            "eagain": eagain, "errors": errors}


def main() -> int:
    from emu import childproto

    childproto.die_with_parent()
    cfg = childproto.read_config()
    datagrams = pool(cfg["kind"], cfg.get("seed", 0), cfg["conn"], cfg.get("evs", 1))
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    sock.bind((cfg.get("src", "::"), 0))
    sock.connect((cfg["dst"], cfg.get("port", wire.UDP_PORT)))
    sock.setblocking(False)
    t0 = childproto.ready_then_start(kind=cfg["kind"], pool=len(datagrams))
    if t0 is None:
        return 0
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    out = send_loop(sock, datagrams, float(cfg["rate"]), t0, sys.stdin.fileno())
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    out["cpu_s"] = round(cpu, 4)
    out["target_rate"] = cfg["rate"]
    full, part = divmod(out["sent"], len(datagrams))
    out["bytes"] = full * sum(map(len, datagrams)) + sum(map(len, datagrams[:part]))
    childproto.emit("result", kind=cfg["kind"], **out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
