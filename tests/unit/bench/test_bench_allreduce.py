"""The all-reduce bench's arithmetic (no root)."""

from __future__ import annotations

import pytest

from commands.bench.allreduce import iteration_times, ring_bound_s


def test_ring_bound():
    # 4 ranks, 8 MB at 25 MB/s: 2 * 3/4 * 8e6 / 25e6 s
    assert ring_bound_s(8_000_000, 4, 25e6) == pytest.approx(0.48)
    with pytest.raises(ValueError, match="ranks=1"):
        ring_bound_s(1, 1, 1.0)


def test_an_iteration_spans_the_earliest_entry_to_the_latest_exit():
    ranks = [[(0.0, 1.0), (1.0, 2.5)], [(0.2, 1.3), (1.4, 2.1)]]
    assert iteration_times(ranks) == pytest.approx([1.3, 1.5])
    with pytest.raises(ValueError, match="different iteration counts"):
        iteration_times([[(0.0, 1.0)], []])
