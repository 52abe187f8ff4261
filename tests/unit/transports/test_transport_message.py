"""Message bookkeeping: segmentation, exact byte counting, direct placement, unposted data."""

import random

import pytest

from transports.core.message import (
    DROPPED,
    DUPLICATE,
    PLACED,
    IntervalSet,
    OutMsg,
    Reassembly,
    segments,
)


def test_segments():
    assert segments(0, 8000) == [(0, 0)]
    assert segments(8000, 8000) == [(0, 8000)]
    assert segments(8001, 8000) == [(0, 8000), (8000, 1)]
    assert OutMsg(1, b"", 8000, 0.0).npkts == 1
    assert OutMsg(1, bytes(16001), 8000, 0.0).npkts == 3


@pytest.mark.parametrize("seed", range(5))
def test_interval_set_counts_each_unit_once(seed):
    r = random.Random(seed)
    s, seen = IntervalSet(), set()
    for _ in range(300):
        a = r.randrange(0, 500)
        b = a + r.randrange(0, 30)
        new = s.add(a, b)
        want = set(range(a, b)) - seen
        assert sum(e - x for x, e in new) == len(want)
        assert set().union(*(range(x, e) for x, e in new)) == want if new else not want
        seen |= want
        assert s.covered() == len(seen)
        assert all(e1 < s2 for e1, s2 in zip(s.ends, s.starts[1:], strict=False))  # merged
    for x in range(0, 530):
        assert (x in s) == (x in seen)
    s.discard_below(250)
    assert s.covered() == len({x for x in seen if x >= 250})


def _reasm(limit=1 << 20):
    stats, done = {}, []
    return Reassembly(limit, stats, done), stats, done


def test_placement_duplicates_and_overlaps():
    r, stats, done = _reasm()
    data = random.Random(1).randbytes(10_000)
    buf = bytearray(10_000)
    r.post(1, buf, 0.0)
    mv = memoryview(data)
    assert r.place(1, 4000, mv[4000:8000], 10_000, 0.1) == PLACED
    assert r.place(1, 4000, mv[4000:8000], 10_000, 0.2) == DUPLICATE
    assert r.place(1, 2000, mv[2000:6000], 10_000, 0.3) == PLACED  # overlap: 2000 new bytes
    assert stats["rx_data_bytes"] == 6000 and not done
    assert r.place(1, 8000, mv[8000:], 10_000, 0.4) == PLACED
    assert r.place(1, 0, mv[:2000], 10_000, 0.5) == PLACED
    assert [(c.msg, c.ok, c.nbytes) for c in done] == [(1, True, 10_000)]
    assert buf == data and stats["rx_data_bytes"] == 10_000


def test_unposted_copied_on_post_and_limit():
    r, stats, done = _reasm(limit=1000)
    assert r.place(5, 0, memoryview(b"hello"), 10, 0.0) == PLACED
    assert r.place(6, 0, memoryview(b"x" * 10), 995, 0.0) == DROPPED  # over the limit
    assert stats["unposted_limit"] == 1
    assert r.place(5, 5, memoryview(b"world"), 10, 0.1) == PLACED
    assert not done  # complete but not posted
    assert r.place(5, 0, memoryview(b"hello"), 11, 0.1) == DROPPED  # wrong length
    buf = bytearray(10)
    r.post(5, buf, 0.2)
    assert buf == b"helloworld" and done[0].ok and done[0].t == 0.2
    assert r.unposted_bytes == 0


def test_zero_byte_message_and_bad_posts():
    r, stats, done = _reasm()
    r.post(1, bytearray(0), 0.0)
    assert r.place(1, 0, memoryview(b""), 0, 0.1) == PLACED
    assert done[-1].ok and done[-1].nbytes == 0
    r.post(2, bytes(4), 0.0)
    assert not done[-1].ok  # read-only buffer
    r.place(3, 0, memoryview(b"ab"), 4, 0.0)
    r.post(3, bytearray(5), 0.0)
    assert not done[-1].ok and "bytes" in done[-1].error
    r.post(4, bytearray(3), 0.0)
    r.post(4, bytearray(3), 0.0)
    assert not done[-1].ok and "already posted" in done[-1].error
