"""The bounded-loss Transpose AllReduce (workloads/collectives/transpose.py) on the fake
network: every lost entry accounted for, exact outside the lost ranges, deadlines, and
the bounded all-gather (helpers and conventions in tests/unit/workloads/test_collectives.py)."""

import numpy as np
import pytest
from test_collectives import MTU, NOISY, check_result, inputs, ref_sum, run

from transports.core.dblp import LossBound
from transports.testing.fakenet import PathSpec
from workloads.collectives.comm import CommError
from workloads.collectives.executor import merge_ranges
from workloads.collectives.schedules import block_bounds
from workloads.collectives.transpose import transpose_allreduce

# ---- bounded-loss Transpose AllReduce ------------------------------------------------------


def powers(size, n):
    """Rank k contributes 2**k everywhere: a sum names exactly the contributions it holds."""
    return [np.full(n, 2.0 ** k, dtype=np.float32) for k in range(size)]


def bounded(size, n, bound, average, path, seed, mtu=MTU, close="needed"):
    bufs = powers(size, n)
    results = run("dblp", size, lambda c: transpose_allreduce(c, bufs[c.rank], average=average,
                                                                bound=bound),
                  path=path, seed=seed, config={"mtu_payload": mtu, "close": close})
    return bufs, results


@pytest.mark.parametrize("seed,mtu", [(1, MTU), (2, MTU), (3, MTU), (4, 62)])
@pytest.mark.parametrize("size", [3, 5])
def test_bounded_transpose_accounts_for_every_lost_entry(seed, mtu, size):
    """Exact accounting; with a 62-byte chunk, floats straddle chunks: a float one of
    whose chunks is missing is lost as a whole."""
    n, full = 160 * size, 2 ** size - 1
    bound = LossBound(0.3)
    path = PathSpec(delay=10e-6, jitter=2e-6, loss=0.15)
    sums, res_sum = bounded(size, n, bound, False, path, seed, mtu)
    for b in sums[1:]:
        assert np.array_equal(b, sums[0])  # the all-gather is reliable: all ranks agree
    mask = sums[0].astype(np.int64)
    total_pairs = 0
    for r, ((lo, hi), res) in enumerate(zip(block_bounds(n, size), res_sum, strict=True)):
        m = mask[lo:hi]
        assert np.all(m & (1 << r))  # the owner's own contribution is never lost
        short = m != full
        # the reported ranges are exactly the entries missing something
        flagged = np.zeros(hi - lo, dtype=bool)
        for a, b in res.lost:
            assert lo <= a < b <= hi
            flagged[a - lo:b - lo] = True
        assert np.array_equal(flagged, short)
        missing_pairs = sum(size - bin(int(x)).count("1") for x in m)
        assert res.lost_pairs == missing_pairs
        total_pairs += res.lost_pairs
        # the reduce-scatter messages (first size - 1) may be short, the all-gather is whole
        rs, ag = res.delivered[:size - 1], res.delivered[size - 1:]
        assert all(d >= 1 - bound.tolerance - 1e-12 for d in rs) and all(d == 1 for d in ag)
        # every lost pair is one float32 that did not arrive (when chunks are whole floats)
        whole = 4 * ((size - 1) * (hi - lo) + n - (hi - lo))
        if mtu % 4 == 0:
            assert res.bytes_received == whole - 4 * res.lost_pairs
        else:
            assert whole - 4 * res.lost_pairs <= res.bytes_received <= whole
    assert total_pairs > 0
    # the senders know the same losses: rank k's unsent entries are where bit k is missing
    for k, res in enumerate(res_sum):
        unsent = np.zeros(n, dtype=bool)
        for a, b in res.unsent:
            unsent[a:b] = True
        assert np.array_equal(unsent, (mask & (1 << k)) == 0)
        if res.unsent:
            assert np.all(res.sent_values[unsent] == 2.0 ** k)
            assert np.all(res.sent_values[~unsent] == 0)
        else:
            assert res.sent_values is None
    assert sum(b - a for r in res_sum for a, b in r.unsent) == total_pairs
    # the same seed loses the same chunks: the average is the sum over the arrived count
    avgs, res_avg = bounded(size, n, bound, True, path, seed, mtu)
    assert [r.lost for r in res_avg] == [r.lost for r in res_sum]
    counts = np.array([bin(int(x)).count("1") for x in mask], dtype=np.float32)
    want = sums[0] / counts
    for b in avgs:
        assert np.array_equal(b, want)
    outside = counts == size
    assert outside.any() and np.all(want[outside] == np.float32(full) / np.float32(size))


def test_bounded_transpose_random_values_exact_outside_lost_ranges():
    size, n = 4, 700
    data = inputs(size, n, seed=9)
    bufs = [d.copy() for d in data]
    results = run("dblp", size, lambda c: transpose_allreduce(c, bufs[c.rank],
                                                              bound=LossBound(0.25)),
                  path=PathSpec(delay=10e-6, loss=0.15), seed=9)
    lost = merge_ranges([x for r in results for x in r.lost])
    assert lost and sum(r.lost_pairs for r in results) > 0
    keep = np.ones(n, dtype=bool)
    for a, b in lost:
        keep[a:b] = False
    want = ref_sum(data)
    for b in bufs:
        assert np.array_equal(b, bufs[0])
        assert np.array_equal(b[keep], want[keep])


def test_loss_on_one_link_is_charged_to_that_contributor_only():
    """With the first-pass close rule a round waits for every chunk's first pass, so only
    the lossy link's contributor goes missing (with close = "needed" a round closes at
    its needed chunk, and healthy contributors' late chunks may go too: below)."""
    size, n = 4, 640
    path = lambda s, d: PathSpec(loss=0.3 if (s, d) == (1, 2) else 0.0)  # noqa: E731
    bufs, results = bounded(size, n, LossBound(0.4), False, path, seed=5, close="first_pass")
    mask = bufs[0].astype(np.int64)
    lo, hi = block_bounds(n, size)[2]
    assert set(np.unique(mask[lo:hi])) == {15, 15 & ~2}  # only rank 1's part goes missing
    assert np.all(np.delete(mask, np.arange(lo, hi)) == 15)
    assert results[2].lost_pairs == int(np.sum(mask[lo:hi] != 15)) > 0
    assert all(r.lost_pairs == 0 for i, r in enumerate(results) if i != 2)
    assert sum(b - a for a, b in results[1].unsent) == results[2].lost_pairs
    assert all(not r.unsent and r.sent_values is None for i, r in enumerate(results) if i != 1)


def test_a_round_closed_at_its_needed_chunk_loses_no_more_than_the_bound():
    """close = "needed": every contributor's reduce-scatter message to a rank closes once
    60 % of its chunks arrived; what is missing is reported exactly and stays in the bound."""
    size, n = 4, 640
    path = lambda s, d: PathSpec(loss=0.3 if (s, d) == (1, 2) else 0.0)  # noqa: E731
    bufs, results = bounded(size, n, LossBound(0.4), False, path, seed=5)
    mask = bufs[0].astype(np.int64)
    for r, ((lo, hi), res) in enumerate(zip(block_bounds(n, size), results, strict=True)):
        m = mask[lo:hi]
        assert np.all(m & (1 << r))  # the owner's own contribution is never lost
        assert res.lost_pairs == sum(size - bin(int(x)).count("1") for x in m)
        assert all(d >= 0.6 - 1e-12 for d in res.delivered[:size - 1])
    assert results[2].lost_pairs > 0


@pytest.mark.parametrize("average", [False, True])
def test_bounded_tolerance_zero_is_exact_under_loss(average):
    size, n = 4, 500
    data = inputs(size, n, seed=6)
    bufs = [d.copy() for d in data]
    results = run("dblp", size, lambda c: transpose_allreduce(
        c, bufs[c.rank], average=average, bound=LossBound(0.0)), path=NOISY, seed=6)
    want = ref_sum(data) / np.float32(size) if average else ref_sum(data)
    for b, res in zip(bufs, results, strict=True):
        assert np.array_equal(b, want)
        check_result(res)


def test_bounded_deadline_closes_the_round():
    """A slow path and a 200 us deadline: the rounds end short, the result says where."""
    size, n = 3, 3000
    slow = PathSpec(delay=10e-6, rate=2e6)  # a 4 kB block takes ~1 ms on 4 paths
    bufs, results = bounded(size, n, LossBound(0.0, deadline_s=200e-6), False, slow, seed=7)
    assert all(np.array_equal(b, bufs[0]) for b in bufs)
    assert all(r.lost_pairs > 0 and min(r.delivered) < 1 for r in results)
    mask = bufs[0].astype(np.int64)
    flagged = np.zeros(n, dtype=bool)
    for r in results:
        for a, b in r.lost:
            flagged[a:b] = True
    assert np.array_equal(flagged, mask != 7)


def test_bounded_messages_need_dblp():
    bufs = powers(2, 40)
    with pytest.raises(CommError, match="'mrc' has no bounded-loss messages"):
        run("mrc", 2, lambda c: transpose_allreduce(c, bufs[c.rank], bound=LossBound(0.1)))
    # a reliable bound is plain reliable messaging, on any transport
    run("rc", 2, lambda c: transpose_allreduce(c, bufs[c.rank], bound=LossBound(0.0)))
    assert np.array_equal(bufs[0], np.full(40, 3.0, np.float32))




def test_bounded_gather_estimates_lost_entries_from_own_input():
    """bounded_gather: entries a rank did not get in the all-gather hold its own input x
    size (an estimate of the sum); everything else is the sum of what arrived."""
    size, n = 4, 6000
    data = inputs(size, n, seed=3)
    bufs = [d.copy() for d in data]
    results = run("dblp", size, lambda c: transpose_allreduce(
        c, bufs[c.rank], bound=LossBound(0.3), bounded_gather=True),
        path=PathSpec(delay=10e-6, loss=0.15), seed=3)
    assert any(r.gather_lost for r in results)
    lost = merge_ranges([x for r in results for x in r.lost])
    want = ref_sum(data)
    for rank, (b, res) in enumerate(zip(bufs, results, strict=True)):
        est = np.zeros(n, dtype=bool)
        for a, z in res.gather_lost:
            est[a:z] = True
            np.testing.assert_array_equal(b[a:z], data[rank][a:z] * size)
        keep = ~est
        for a, z in lost:
            keep[a:z] = False
        np.testing.assert_array_equal(b[keep], want[keep])
        assert not any(lo <= a < hi for a, _ in res.gather_lost
                       for lo, hi in [block_bounds(n, size)[rank]])  # own block is exact


def test_bounded_gather_off_keeps_replicas_identical_under_loss():
    size, n = 3, 3000
    bufs = [d.copy() for d in inputs(size, n, seed=4)]
    results = run("dblp", size, lambda c: transpose_allreduce(c, bufs[c.rank],
                                                              bound=LossBound(0.3)),
                  path=PathSpec(delay=10e-6, loss=0.15), seed=4)
    assert not any(r.gather_lost for r in results)
    assert all(np.array_equal(b, bufs[0]) for b in bufs)
