"""The DBLP bench's rounds and percentile, shared with the reproduce claim (no root)."""

from __future__ import annotations

from commands.bench.dblp_rounds import DST, ROUND_BYTES, SRC, p99, round_transfers
from transports.testing.harness import Transfer


def test_round_transfers_are_chained_one_per_bound() -> None:
    b = {"tolerance": 0.1, "deadline_s": None}
    assert round_transfers([None, b, None]) == [
        Transfer(SRC, DST, ROUND_BYTES),
        Transfer(SRC, DST, ROUND_BYTES, after=0, bound=b),
        Transfer(SRC, DST, ROUND_BYTES, after=1)]
    assert [t.src for t in round_transfers([None], "h1", "h9")] == ["h1"]
    assert round_transfers([]) == []


def test_p99_by_rank() -> None:
    assert p99([3.0, 1.0, 2.0]) == 3.0  # fewer than 100: the slowest
    assert p99([float(i) for i in range(1, 201)]) == 198.0  # rank ceil(0.99 x 200) = 198
