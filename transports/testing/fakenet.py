"""A deterministic (seeded) in-memory network for sans-I/O transport cores.

Discrete-event, virtual time (seconds). Cores are connected in pairs; each
connection has one path per EV in each direction, described by a ``PathSpec``:
propagation delay (+ uniform jitter), loss, duplication, reordering (with
probability ``reorder`` a packet gets up to ``reorder_delay`` extra delay), and
optionally a FIFO of ``rate`` bytes/s with a ``buffer`` of bytes (tail drop), so
queueing delay builds up, followed by ``hops - 1`` more store-and-forward hops at that
rate (a switched path: each hop sends a datagram whole, so a header-sized probe behind
a full frame waits for it at every hop); EVs may share that first FIFO
(``share_first_hop``: a sender's NIC on one plane). Paths die at a time (``kill``:
every packet on that EV, both directions, sent or arriving while dead, is lost) and
revive.

A receiver's port (``port(a, b, rate, buffer)``): one FIFO that every datagram
a -> b crosses after its EV's own path, whatever its EV, as the egress port of the
last switch in front of a host. Other traffic enters it (``port_burst``: bytes at
a rate for a while, as microburst senders), so every EV of the connection meets the
same queue: a common-mode delay spike, with tail drops once the buffer is full.
A port may also hold at most ``frames`` datagrams whatever their size (a pfifo's
limit, as the fabric's switch ports: a 48-byte probe takes a slot as a full frame
does), its other traffic then arriving as whole frames (``port_burst(frame=...)``).
A port may serve only some EVs (``evs``: one port per plane, each plane's NIC
reaching the receiver through its own switch), so each plane queues on its own.

Switch signals (topologies/signals.py) on a path's FIFO (``PathSpec.mark``, ``trim``) or a
port's (``port(mark=, trim=)``): DATA entering above ``mark`` bytes of backlog gets
FLAG_CE, and DATA with FLAG_TRIM_OK that does not fit goes on as its header alone
(FLAG_TRIMMED), ahead of the queue (transports/testing/fakeport.py).

``run(until, stop)`` advances time: it calls each core's ``on_timer`` at its
``next_deadline``, delivers packets with ``on_packet``, sends what cores return
and gathers completions in ``done[name]``. With ``tick_s``, cores are woken as the
engine wakes them (transports/testing/tickdrive.py: at least a tick apart, a wake-up
carrying every datagram that arrived since, then its ACK, then the timers due).
Every datagram is logged (``log``: ``Rec`` rows with its time, direction, EV, kind,
flags, PSN, size and fate), so tests can check what crossed which EV when.

    net = FakeNet(seed=1)
    net.connect("a", core_a, "b", core_b, [PathSpec(delay=10e-6)] * 8)
    net.post_recv("b", 1, buf); net.post_send("a", 1, data)
    net.run(until=1.0, stop=lambda: len(net.done["a"]) == 1)
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Unpack

from transports.core.api import Completion, Core, Tx
from transports.core.wire import DATA, FLAG_CE, FLAG_TRIMMED, HEADER_LEN, peek
from transports.testing.fakepath import PathChanges, PathSpec, Rec
from transports.testing.fakeport import Port, marked, trimmable, trimmed
from transports.testing.tickdrive import TickDrive

__all__ = ["FakeNet", "PathChanges", "PathSpec", "Rec", "exchange"]

INF = float("inf")


# What the event heap holds besides the time: a callback (``at``) or a datagram on its way
_Event = Callable[[], None] | tuple[Rec, bytes]


@dataclass
class _Fifo:
    busy_until: float = 0.0


@dataclass
class _Dir:
    spec: PathSpec
    first: _Fifo = field(default_factory=_Fifo)  # the first hop's FIFO (EVs may share one)
    later: list[float] = field(init=False)  # each later hop's busy_until
    dead: list[tuple[float, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.later = [0.0] * (self.spec.hops - 1)

    def is_dead(self, t: float) -> bool:
        return any(a <= t < b for a, b in self.dead)


class FakeNet:
    """Seeded discrete-event network between pairs of cores."""

    def __init__(self, seed: int = 0, max_events_per_instant: int = 100_000,
                 tick_s: float | None = None) -> None:
        self.rng = random.Random(seed)
        # cores woken in ticks, as the engine wakes them (None: at every event)
        self.tick = None if tick_s is None else TickDrive(self, tick_s)
        self.now = 0.0
        self.cores: dict[str, Core] = {}
        self.peer: dict[str, str] = {}
        self.paths: dict[tuple[str, str], list[_Dir]] = {}
        self.log: list[Rec] = []
        self.done: dict[str, list[Completion]] = {}
        self.delivered: dict[tuple[str, str], list[int]] = {}  # payload bytes per EV
        self.ports: dict[tuple[str, str], Port] = {}  # the port every EV a -> b crosses
        # (a, b) -> the port each EV a -> b crosses, one per plane (None: none)
        self.ev_ports: dict[tuple[str, str], list[Port | None]] = {}
        self.stalls: dict[str, tuple[float, float, float]] = {}  # name -> start, every, length
        self._heap: list[tuple[float, int, int, _Event]] = []
        self._seq = 0
        self._max_same = max_events_per_instant
        self.events = 0
        # tests: ``tamper(rec, data)`` sees every datagram put on the wire and may return
        # other bytes (a corrupted copy) to carry instead, or b"" to lose it; None keeps it
        self.tamper: Callable[[Rec, bytes], bytes | None] | None = None

    # ---- building -------------------------------------------------------------------------

    def connect(self, a: str, core_a: Core, b: str, core_b: Core,
                paths: Sequence[PathSpec], paths_back: Sequence[PathSpec] | None = None) -> None:
        """Join two cores (one connection); EV i is ``paths[i]`` a->b and back b->a."""
        for name, core in ((a, core_a), (b, core_b)):
            if name in self.cores:
                raise ValueError(f"core {name!r} already connected")
            self.cores[name] = core
            self.done[name] = []
        self.peer[a], self.peer[b] = b, a
        back = paths if paths_back is None else paths_back
        if len(back) != len(paths):
            raise ValueError("paths and paths_back differ in length")
        self.paths[(a, b)] = [_Dir(s) for s in paths]
        self.paths[(b, a)] = [_Dir(s) for s in back]
        self.delivered[(a, b)] = [0] * len(paths)
        self.delivered[(b, a)] = [0] * len(paths)

    def set_path(self, a: str, b: str, ev: int, **changes: Unpack[PathChanges]) -> None:
        """Change one direction of a path (e.g. ``rate=...``) from now on."""
        d = self.paths[(a, b)][ev]
        d.spec = replace(d.spec, **changes)

    def kill(self, a: str, b: str, ev: int, at: float, until: float = INF) -> None:
        """EV ``ev`` between a and b is dead (both directions) in [at, until)."""
        for key in ((a, b), (b, a)):
            self.paths[key][ev].dead.append((at, until))

    def port(self, a: str, b: str, rate: float, buffer: int = 1 << 20,
             delay: float = 0.0, evs: Sequence[int] | None = None,
             frames: int | None = None, mark: int | None = None, trim: bool = False) -> Port:
        """The receiver's port: every datagram a -> b (on ``evs`` only: one plane's) crosses
        a FIFO of ``rate`` bytes/s, ``buffer`` bytes, ``frames`` datagrams, then ``delay``."""
        if (a, b) not in self.paths:
            raise ValueError(f"no connection {a!r} -> {b!r}: connect them first")
        if not rate > 0 or buffer < 1 or delay < 0 or (frames is not None and frames < 1):
            raise ValueError(f"port rate={rate!r} must be > 0 bytes/s, buffer={buffer!r} "
                             f">= 1 byte, delay={delay!r} >= 0 s, frames={frames!r} None "
                             f"or >= 1")
        p = Port(rate, buffer, delay, frames, mark, trim)
        if evs is None:
            if (a, b) in self.ev_ports:
                raise ValueError(f"{a!r} -> {b!r} has a port per plane already")
            self.ports[(a, b)] = p
            return p
        n = len(self.paths[(a, b)])
        if (a, b) in self.ports or not evs or any(not 0 <= ev < n for ev in evs):
            raise ValueError(f"port evs={evs!r}: EVs of {a!r} -> {b!r} are 0..{n - 1}, each "
                             f"crossing one port at most")
        of = self.ev_ports.setdefault((a, b), [None] * n)
        taken = [ev for ev in evs if of[ev] is not None]
        if taken:
            raise ValueError(f"EVs {taken} of {a!r} -> {b!r} cross a port already")
        for ev in evs:
            of[ev] = p
        return p

    def _port_of(self, a: str, b: str, ev: int) -> Port | None:
        """The port EV ``ev`` of a -> b crosses (None: none)."""
        port = self.ports.get((a, b))
        if port is None and (per_ev := self.ev_ports.get((a, b))) is not None:
            port = per_ev[ev]
        return port

    def port_burst(self, a: str, b: str, at: float, until: float, rate: float,
                   step: float = 50e-6, port: Port | None = None,
                   frame: int | None = None) -> None:
        """Other traffic at ``rate`` bytes/s enters the a -> b port (``port``, if the
        direction has one per plane) during [at, until), in slices of ``step`` seconds
        (what does not fit in its buffer is dropped), or with ``frame`` as whole frames
        of that many bytes, one every ``frame / rate`` seconds, each queued or dropped
        whole (a port that counts ``frames`` needs them)."""
        if port is None:
            port = self.ports.get((a, b))
        if port is None:
            raise ValueError(f"no port on {a!r} -> {b!r}: call port() first (or pass the "
                             f"plane's)")
        if not (rate > 0 and step > 0 and until > at) or (frame is not None and frame < 1):
            raise ValueError(f"port_burst needs rate > 0, step > 0, until > at and frame None "
                             f"or >= 1 byte, not rate={rate!r}, step={step!r}, "
                             f"[{at!r}, {until!r}), frame={frame!r}")
        if port.frames is not None and frame is None:
            raise ValueError("this port counts frames: give port_burst the burst's frame size")
        if frame is not None:
            step = frame / rate
        n = int(round(rate * step))
        target = port

        def slice_(t: float) -> None:
            target.other_bytes += n
            if target.enqueue(n, self.now) is None:
                room = 0  # a whole frame is dropped whole; of a slice, the part that fits gets in
                if frame is None:
                    room = int(max(0.0, target.buffer - target.backlog(self.now)))
                    target.enqueue(room, self.now)
                target.other_dropped += n - room
            if t + step < until:
                self.at(t + step, lambda: slice_(t + step))

        self.at(at, lambda: slice_(at))

    def stall(self, name: str, every: float, length: float, start: float = 0.0) -> None:
        """Core ``name`` is not scheduled for ``length`` seconds out of every ``every``
        from ``start`` (a host process waiting for a CPU): what arrives for it meanwhile
        is handed to it when the stall ends."""
        if name not in self.cores:
            raise ValueError(f"no core {name!r}: have {sorted(self.cores)}")
        if not 0 < length < every:
            raise ValueError(f"stall needs 0 < length < every, not length={length!r}, "
                             f"every={every!r}")
        self.stalls[name] = (start, every, length)

    def _stalled_until(self, name: str, t: float) -> float:
        """When the stall of ``name`` that covers ``t`` ends (``t`` if none does)."""
        st = self.stalls.get(name)
        if st is None or t < st[0]:
            return t
        start, every, length = st
        k = (t - start) // every
        end = start + k * every + length
        return end if t < end else t

    def at(self, t: float, fn: Callable[[], None]) -> None:
        """Call ``fn()`` at virtual time ``t``."""
        self._push(t, 1, fn)

    def share_first_hop(self, a: str, b: str, evs: Sequence[int]) -> None:
        """EVs ``evs`` of a -> b leave through one FIFO, their first hop's (a sender's NIC on
        one plane: its EVs queue behind each other there); their paths need a rate."""
        dirs = self.paths[(a, b)]
        bad = [ev for ev in evs if not 0 <= ev < len(dirs) or not dirs[ev].spec.rate]
        if bad:
            raise ValueError(f"share_first_hop: EVs {bad} of {a}->{b} do not exist or have no "
                             f"rate (EVs 0..{len(dirs) - 1}, each with a PathSpec rate)")
        fifo = _Fifo()
        for ev in evs:
            dirs[ev].first = fifo

    def cross_traffic(self, a: str, b: str, ev: int, nbytes: int, at: float) -> None:
        """``nbytes`` of other traffic enter the a->b FIFO of ``ev`` at ``at`` (needs a rate)."""
        def occupy() -> None:
            d = self.paths[(a, b)][ev]
            if d.spec.rate:
                d.first.busy_until = max(self.now, d.first.busy_until) + nbytes / d.spec.rate
        self.at(at, occupy)

    # ---- driving the cores ------------------------------------------------------------------

    def post_send(self, name: str, msg: int, data: bytes | memoryview) -> None:
        self.send(name, self.cores[name].post_send(msg, data, self.now))
        self._collect(name)

    def post_recv(self, name: str, msg: int, buf: bytearray | memoryview) -> None:
        self.send(name, self.cores[name].post_recv(msg, buf, self.now))
        self._collect(name)

    def deliver_raw(self, name: str, data: bytes | memoryview) -> None:
        """Feed core ``name`` a datagram out of nowhere, now (tests of malformed input)."""
        self.send(name, self.cores[name].on_packet(data, self.now))
        self._collect(name)

    def send(self, src: str, txs: list[Tx]) -> None:
        """Put what core ``src`` returned on the wire."""
        if not txs:
            return
        dst = self.peer[src]
        dirs = self.paths[(src, dst)]
        rng = self.rng
        now = self.now
        for ev, data in txs:
            data = bytes(data)
            size = len(data)
            if size >= HEADER_LEN:
                h = peek(data)
                rec = Rec(now, src, dst, ev, h.kind, h.flags, h.psn, size)
            else:
                rec = Rec(now, src, dst, ev, -1, 0, -1, size)
            self.log.append(rec)
            if self.tamper is not None:
                tampered = self.tamper(rec, data)
                if tampered is not None:
                    if not tampered:  # b"": the datagram is lost
                        rec.fate = "tampered"
                        continue
                    data = tampered
            if not 0 <= ev < len(dirs):
                rec.fate = "bad_ev"
                continue
            d = dirs[ev]
            spec = d.spec
            if d.is_dead(now):
                rec.fate = "dead"
                continue
            if spec.loss and rng.random() < spec.loss:
                rec.fate = "lost"
                continue
            t = now
            if spec.rate:
                fifo = d.first
                start = max(now, fifo.busy_until)
                backlog = (start - now) * spec.rate
                if backlog + size > spec.buffer:
                    if not (spec.trim and trimmable(data)):
                        rec.fate = "queue_drop"
                        continue
                    data = trimmed(data)  # the header goes on, ahead of the data
                    size = rec.size = len(data)
                    rec.flags |= FLAG_TRIMMED
                    start = now
                elif spec.mark is not None and backlog > spec.mark and data[1] == DATA:
                    data = marked(data)
                    rec.flags |= FLAG_CE
                t = start + size / spec.rate
                if not rec.flags & FLAG_TRIMMED:
                    fifo.busy_until = t
                later = d.later  # store and forward: each hop sends it whole, in order
                for k in range(len(later)):
                    t = later[k] = max(t, later[k]) + size / spec.rate
            t += spec.delay
            if spec.jitter:
                t += rng.random() * spec.jitter
            if spec.reorder and rng.random() < spec.reorder:
                t += rng.random() * spec.reorder_delay
            hop = 0 if self._port_of(src, dst, ev) is None else 2  # the receiver's port first
            self._push(t, hop, (rec, data))
            if spec.dup and rng.random() < spec.dup:
                dup = Rec(now, src, dst, ev, rec.kind, rec.flags, rec.psn, size, "in_flight")
                self.log.append(dup)
                self._push(t + rng.random() * max(spec.delay, 1e-6), hop, (dup, data))

    def _push(self, t: float, kind: int, item: _Event) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, item))

    def collect(self, name: str) -> None:
        """Gather core ``name``'s completions into ``done[name]``."""
        self._collect(name)

    def _collect(self, name: str) -> None:
        c = self.cores[name].completions()
        if c:
            self.done[name].extend(c)

    def run(self, until: float, stop: Callable[[], bool] | None = None) -> float:
        """Advance virtual time up to ``until`` (or until ``stop()``); return the time reached."""
        heap = self._heap
        cores = self.cores
        tick = self.tick
        same, last_t = 0, -1.0
        while True:
            if stop is not None and stop():
                break
            t_timer, who = INF, None
            for name, core in cores.items():
                deadline = core.next_deadline()
                if deadline is not None and tick is not None:
                    deadline = tick.timer_at(name, deadline)
                if deadline is not None and deadline < t_timer:
                    t_timer, who = deadline, name
            t_ev = heap[0][0] if heap else INF
            t = min(t_timer, t_ev)
            if t > until:
                self.now = until
                break
            t = max(t, self.now)
            if t == last_t:
                same += 1
                if same > self._max_same:
                    raise RuntimeError(f"no progress at t={t}: a core keeps asking for a timer")
            else:
                same, last_t = 0, t
            self.now = t
            self.events += 1
            if t_timer <= t_ev:
                # a core's timer is due (both are INF only if until is INF: nothing is left)
                assert who is not None
                if tick is not None:
                    tick.wake(who, t)
                    continue
                self.send(who, cores[who].on_timer(t))
                self._collect(who)
                continue
            _, _, kind, item = heapq.heappop(heap)
            if not isinstance(item, tuple):  # kind 1: a callback of at()
                item()
                continue
            rec, data = item
            if kind == 2:  # at the receiver's port: queue (or drop), then deliver
                port = self._port_of(rec.src, rec.dst, rec.ev)
                assert port is not None
                if port.mark is not None and port.backlog(t) > port.mark and data[1] == DATA:
                    item = (rec, marked(data))
                    rec.flags |= FLAG_CE
                    port.marked += 1
                leave = port.enqueue(rec.size, t)
                if leave is None and port.trim and trimmable(item[1]):
                    item = (rec, trimmed(item[1]))
                    rec.flags |= FLAG_TRIMMED
                    rec.size = HEADER_LEN
                    port.trimmed += 1
                    leave = t + HEADER_LEN / port.rate  # ahead of the data
                if leave is None:
                    rec.fate = "port_drop"
                    port.dropped += 1
                else:
                    self._push(leave + port.delay, 0, item)
                continue
            d = self.paths[(rec.src, rec.dst)][rec.ev]
            if d.is_dead(t):
                rec.fate = "dead"
                continue
            if self.stalls and (late := self._stalled_until(rec.dst, t)) > t:
                self._push(late, 0, item)  # handed over when the receiver runs again
                continue
            rec.fate, rec.t_arrive = "delivered", t
            if rec.size >= HEADER_LEN:
                self.delivered[(rec.src, rec.dst)][rec.ev] += rec.size - HEADER_LEN
            if tick is not None:
                tick.arrive(rec.dst, data, t)
                continue
            self.send(rec.dst, cores[rec.dst].on_packet(data, t))
            self._collect(rec.dst)
        return self.now

    # ---- inspection -------------------------------------------------------------------------

    def sent(self, src: str, ev: int | None = None, kind: int | None = None,
             after: float = -INF, before: float = INF) -> list[Rec]:
        """Datagrams ``src`` sent (on ``ev``, of ``kind``) in [after, before)."""
        return [r for r in self.log if r.src == src and after <= r.t < before
                and (ev is None or r.ev == ev) and (kind is None or r.kind == kind)]


def exchange(net: FakeNet, src: str, dst: str, messages: dict[int, bytes], until: float,
             post_recv_first: bool = True) -> dict[int, bytearray]:
    """Post a receive buffer on ``dst`` and a send on ``src`` per message; run until every
    completion of both sides arrived (or ``until``); return the receive buffers."""
    done_src, done_dst = len(net.done[src]), len(net.done[dst])  # from earlier exchanges
    bufs = {m: bytearray(len(d)) for m, d in messages.items()}
    if post_recv_first:
        for m, b in bufs.items():
            net.post_recv(dst, m, b)
    for m, d in messages.items():
        net.post_send(src, m, d)
    if not post_recv_first:
        for m, b in bufs.items():
            net.post_recv(dst, m, b)
    n = len(messages)
    net.run(until, stop=lambda: (len(net.done[src]) >= done_src + n
                                 and len(net.done[dst]) >= done_dst + n))
    return bufs
