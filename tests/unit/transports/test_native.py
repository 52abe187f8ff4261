"""The compiled helpers (transports/native): the same results as the Python they replace,
and a missing build is an error that says how to make it, never a slower fallback."""

import random
import socket
import subprocess
import sys
import time
import zlib

import pytest

from transports.core import wire
from transports.native import batchio, packet


@pytest.mark.parametrize("n", [0, 1, 7, 64, 8000, 8999])
def test_crc32_is_zlibs(n):
    data = random.Random(n).randbytes(n)
    assert packet.crc32_raw(data) == zlib.crc32(data)
    assert packet.crc32(memoryview(bytearray(data))[:n]) == (zlib.crc32(data) or 1)


@pytest.mark.parametrize("seed", range(8))
def test_a_compiled_datagram_is_the_header_packed_by_its_layout(seed):
    r = random.Random(seed)
    data = r.randbytes(20_000)
    fields = [r.randrange(256), r.randrange(1 << 16)] + [r.randrange(1 << 32) for _ in range(5)]
    ev, ts, echo, crc = r.randrange(1 << 16), r.randrange(1 << 64), r.randrange(1 << 64), \
        r.randrange(1 << 32)
    for start, n in ((0, 0), (r.randrange(10_000), r.randrange(1, 9_000)), (20_000 - 64, 64)):
        got = wire.datagram(wire.WIRE_VERSION, *fields, ev, ts, echo, crc, data, start, n)
        want = bytearray(wire.HEADER_LEN + n)
        wire.HEADER.pack_into(want, 0, wire.WIRE_VERSION, *fields, ev, n, ts, echo, crc)
        want[wire.HEADER_LEN:] = data[start:start + n]
        assert got == want
        assert wire.peek(got).length == n
        if n:
            assert wire.crc32_range(data, start, n) == packet.crc32(data[start:start + n])


def test_a_compiled_datagram_refuses_what_does_not_fit():
    with pytest.raises(ValueError, match="payload 100\\+8000 outside 4096 bytes"):
        wire.datagram(1, wire.DATA, 0, 1, 0, 0, 0, 8000, 0, 0, 0, 0, bytes(4096), 100, 8000)
    with pytest.raises(OverflowError, match="ev 70000"):
        wire.datagram(1, wire.DATA, 0, 1, 0, 0, 0, 0, 70000, 0, 0, 0, b"", 0, 0)
    with pytest.raises(ValueError, match="range 10\\+10 outside 12 bytes"):
        wire.crc32_range(bytes(12), 10, 10)


class _Reference:
    """The Python interval set the compiled one replaced (as it was at 08db896)."""

    def __init__(self):
        self.r: list[tuple[int, int]] = []

    def add(self, a, b):
        if a >= b:
            return []
        covered = sorted(self.r)
        new, cur = [], a
        for s, e in covered:
            if e <= cur or s >= b:
                continue
            if s > cur:
                new.append((cur, s))
            cur = max(cur, e)
        if cur < b:
            new.append((cur, b))
        merged: list[list[int]] = []
        for s, e in sorted(self.r + [(a, b)]):
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        self.r = [tuple(x) for x in merged]
        return new


def test_interval_set_matches_a_reference_on_random_operations():
    rng = random.Random(7)
    for _ in range(200):
        ref, got = _Reference(), packet.IntervalSet()
        for _ in range(60):
            a = rng.randrange(0, 300)
            b = a + rng.randrange(0, 25)
            assert got.add(a, b) == ref.add(a, b)
            assert got.ranges() == ref.r
            assert got.covered() == sum(e - s for s, e in ref.r)
            x = rng.randrange(0, 330)
            assert (x in got) == any(s <= x < e for s, e in ref.r)
        if got.ranges():
            s0, e0 = got.ranges()[0]
            assert got.pop_front_from(s0) == e0 and got.pop_front_from(-1) == -1
        got.discard_below(150)
        assert all(s >= 150 for s in got.starts)


def test_a_missing_build_is_an_error_naming_the_command():
    code = ("import importlib.util, sys\n"
            "real = importlib.util.find_spec\n"
            "importlib.util.find_spec = lambda n, *a: None if n.startswith("
            "'transports.native.') else real(n, *a)\n"
            "try:\n"
            "    import transports.core.wire\n"
            "except ImportError as e:\n"
            "    print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.startswith("NotBuilt") and "scripts/setup.sh" in out and "make native" in out


def test_batches_carry_datagrams_with_kernel_arrival_times():
    rx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        rx.bind(("::1", 0))
        rx.setblocking(False)
        batchio.enable_timestamps(rx)
        dest = batchio.sockaddr("::1", rx.getsockname()[1])
        out = batchio.TxBatch(4, 0xB8, 1, 3, 1, 0x80)  # 4 per sendmmsg: 10 take 3 calls
        grams = [bytes([1, 2, 0, 0, 0, 0, 0, i]) + bytes(i) for i in range(10)]
        t_send = time.monotonic()
        assert out.send(tx.fileno(), dest, grams) == 10  # the loopback delivers within it
        t_sent = time.monotonic()
        time.sleep(0.05)  # read well after they arrived: the stamps still say when
        batch = batchio.RxBatch(8, 9216)
        got = batch.recv(rx.fileno()) + batch.recv(rx.fileno())
        t_read = time.monotonic()
        assert [c for c, _, _ in got] == list(range(10))
        assert all(len(v) == 8 + c for c, v, _ in got)
        # within the send calls (2 ms for turning the realtime stamp into monotonic
        # time), never the read's time, 50 ms later
        assert all(t_send - 0.002 <= t <= t_sent + 0.002 for _, _, t in got)
        assert t_read - t_sent >= 0.05
        assert batch.recv(rx.fileno()) == []  # drained: an empty list, no exception
    finally:
        rx.close()
        tx.close()


def test_placement_through_the_compiled_set_matches_the_reference():
    """Overlapping segments of odd sizes, in random order and repeated, placed into a
    posted buffer: each call's verdict is the reference set's (new bytes or a duplicate),
    the bytes end exact, counted once, and the message completes on its last new byte."""
    from transports.core.message import DUPLICATE, PLACED, Reassembly

    for seed in range(20):
        rng = random.Random(seed)
        data = rng.randbytes(rng.randrange(1, 5000))
        n = len(data)
        segs = [(a, min(n, a + rng.randrange(150, 400))) for a in range(0, n, 150)]  # all
        segs += [(a, min(n, a + rng.randrange(1, 300)))
                 for a in (rng.randrange(n) for _ in range(30))]
        rng.shuffle(segs)
        stats: dict[str, int] = {"rx_data_bytes": 0}
        done: list = []
        r = Reassembly(1 << 20, stats, done)
        buf = bytearray(n)
        r.post(5, buf, 0.0)
        ref = _Reference()
        for a, b in segs:  # (a completed message is the receiver's to remember: stop)
            want = PLACED if ref.add(a, b) else DUPLICATE
            assert r.place(5, a, memoryview(data)[a:b], n, 1.0) == want
            assert (len(done) == 1) == (ref.r == [(0, n)])  # complete exactly when covered
            if done:
                break
        assert buf == data and stats["rx_data_bytes"] == n and 5 not in r
        assert done[0].ok and done[0].nbytes == n
