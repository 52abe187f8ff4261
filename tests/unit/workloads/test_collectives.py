"""Collectives (workloads/collectives/ops.py) on the fake network
(workloads/collectives/fakecomm.py):
exact results on every transport, also under loss, reordering and duplication.

Values are small integers in float32, so every sum is exact whatever order a schedule
adds in, and results are compared for equality with numpy references. The helpers and
constants here (``inputs``, ``ref_sum``, ``run``, ``check_result``, ``GROUPS``, ...) are
shared by the other collective tests: test_collective_bounded.py (bounded-loss Transpose
AllReduce), test_collective_schedules.py, test_collective_runner.py (the fake comm) and
test_collective_inputs.py (bad inputs).
"""

import numpy as np
import pytest

from transports.testing.fakenet import PathSpec
from workloads.collectives.executor import CollectiveResult
from workloads.collectives.fakecomm import FakeCluster, run_collective
from workloads.collectives.ops import (
    all_gather,
    all_to_all,
    hierarchical_allreduce,
    reduce_scatter,
    ring_allreduce,
)
from workloads.collectives.schedules import (
    all_to_all_recv_len,
    block_bounds,
    hierarchical_allreduce_schedule,
)
from workloads.collectives.transpose import transpose_allreduce

TRANSPORTS = ("mrc", "rc", "dblp")
MTU = 64  # 16 floats a chunk: a few hundred elements make multi-packet messages
CFG = {"mtu_payload": MTU}
NOISY = PathSpec(delay=10e-6, jitter=3e-6, loss=0.08, dup=0.05, reorder=0.3,
                 reorder_delay=40e-6)


def inputs(size, n, seed=0):
    rng = np.random.default_rng(seed * 1000 + size * 10 + n)
    return [rng.integers(-9, 10, n).astype(np.float32) for _ in range(size)]


def ref_sum(data):
    return np.sum(np.stack(data).astype(np.float64), axis=0).astype(np.float32)


def run(transport, size, gen, **kw):
    kw.setdefault("config", CFG)
    return run_collective(transport, size, gen, **kw)


def check_result(res, lossless=True):
    assert isinstance(res, CollectiveResult)
    if lossless:
        assert res.lost == () and res.lost_pairs == 0 and res.exact
        assert all(d == 1.0 for d in res.delivered)
    assert len(res.delivered) == res.messages_received


# ---- exact results on every transport ------------------------------------------------------

SIZES_LENGTHS = [(1, 0), (1, 5), (2, 0), (2, 1), (2, 33), (3, 2), (3, 100), (3, 2000),
                 (4, 3), (4, 257), (5, 1), (5, 7), (5, 301)]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("size,n", SIZES_LENGTHS)
@pytest.mark.parametrize("algo", ["ring", "transpose"])
def test_allreduce_is_exact(transport, size, n, algo):
    data = inputs(size, n)
    fn = ring_allreduce if algo == "ring" else transpose_allreduce
    average = n % 2 == 1  # both modes over the grid
    bufs = [d.copy() for d in data]
    results = run(transport, size, lambda c: fn(c, bufs[c.rank], average=average))
    want = ref_sum(data)
    if average:
        want = want / np.float32(size)
    for b, res in zip(bufs, results, strict=True):
        assert b.dtype == np.float32 and np.array_equal(b, want)
        check_result(res)
    # every byte sent was received once
    assert sum(r.bytes_sent for r in results) == sum(r.bytes_received for r in results)
    assert sum(r.messages_sent for r in results) == sum(r.messages_received for r in results)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("size,n", [(1, 4), (2, 0), (2, 41), (3, 2), (4, 130), (5, 203)])
def test_reduce_scatter_and_all_gather(transport, size, n):
    data = inputs(size, n, seed=1)
    blocks = block_bounds(n, size)
    bufs = [d.copy() for d in data]
    results = run(transport, size, lambda c: reduce_scatter(c, bufs[c.rank]))
    want = ref_sum(data)
    for r, (b, res) in enumerate(zip(bufs, results, strict=True)):
        lo, hi = blocks[r]
        assert np.array_equal(b[lo:hi], want[lo:hi])
        check_result(res)
    # all-gather: rank r holds only its block; everything else is NaN and must be replaced
    gat = [np.full(n, np.nan, dtype=np.float32) for _ in range(size)]
    for r, (lo, hi) in enumerate(blocks):
        gat[r][lo:hi] = data[r][lo:hi]
    want = np.concatenate([data[r][lo:hi] for r, (lo, hi) in enumerate(blocks)])
    for res in run(transport, size, lambda c: all_gather(c, gat[c.rank])):
        check_result(res)
    for g in gat:
        assert np.array_equal(g, want)


def test_reduce_scatter_average():
    data = inputs(3, 50, seed=2)
    bufs = [d.copy() for d in data]
    run("mrc", 3, lambda c: reduce_scatter(c, bufs[c.rank], average=True))
    want = ref_sum(data) / np.float32(3)
    for r, (lo, hi) in enumerate(block_bounds(50, 3)):
        assert np.array_equal(bufs[r][lo:hi], want[lo:hi])


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("size,n", [(1, 3), (2, 0), (2, 9), (3, 3), (3, 100), (4, 2),
                                    (5, 160)])
def test_all_to_all(transport, size, n):
    data = inputs(size, n, seed=3)
    blocks = block_bounds(n, size)
    outs = [np.full(all_to_all_recv_len(n, size, r), np.nan, dtype=np.float32)
            for r in range(size)]
    results = run(transport, size, lambda c: all_to_all(c, data[c.rank], outs[c.rank]))
    for r in range(size):
        lo, hi = blocks[r]
        assert np.array_equal(outs[r], np.concatenate([data[j][lo:hi] for j in range(size)]))
        check_result(results[r])
    # the inputs are left alone
    assert all(np.array_equal(d, e) for d, e in zip(data, inputs(size, n, seed=3), strict=True))


GROUPS = [
    [[0, 1], [2, 3]],
    [[0, 2, 4], [1, 3, 5]],
    [[3, 1], [0, 2]],  # ring order is list order, any ranks
    [[0], [1], [2]],  # one rank per DC: a plain inter-DC ring
    [[0, 1, 2]],  # one DC: a plain ring
]


@pytest.mark.parametrize("groups", GROUPS)
@pytest.mark.parametrize("n", [0, 1, 5, 203])
def test_hierarchical_equals_the_flat_reference(groups, n):
    size = sum(len(g) for g in groups)
    data = inputs(size, n, seed=4)
    average = n == 203
    bufs = [d.copy() for d in data]
    transport = "mrc" if n % 2 else "rc"
    results = run(transport, size,
                  lambda c: hierarchical_allreduce(c, bufs[c.rank], groups, average=average))
    want = ref_sum(data) / np.float32(size) if average else ref_sum(data)
    for b, res in zip(bufs, results, strict=True):
        assert np.array_equal(b, want)
        check_result(res)


def test_hierarchical_keeps_cross_dc_traffic_to_one_block():
    """Only the inter-DC stage crosses DCs, and each rank sends 2 (D-1)/D of its block."""
    groups = [[0, 1, 2, 3], [4, 5, 6, 7]]
    n = 800
    sched = hierarchical_allreduce_schedule(n, groups)
    dc = {r: d for d, g in enumerate(groups) for r in g}
    for r, steps in enumerate(sched):
        cross = sum(s.hi - s.lo for st in steps for s in st.sends if dc[s.peer] != dc[r])
        block, dcs = n // 4, 2
        assert cross == 2 * (dcs - 1) * block // dcs


# ---- impaired paths ------------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("seed", [1, 2])
def test_reliable_collectives_exact_under_loss_reorder_dup(transport, seed):
    size, n = 4, 301
    data = inputs(size, n, seed)
    want = ref_sum(data)
    fates = {}
    outs = [np.zeros(all_to_all_recv_len(n, size, r), np.float32) for r in range(size)]
    cases = {
        "ring": lambda c, b: ring_allreduce(c, b[c.rank]),
        "transpose": lambda c, b: transpose_allreduce(c, b[c.rank]),
        "hierarchical": lambda c, b: hierarchical_allreduce(c, b[c.rank], [[0, 1], [2, 3]]),
        "all_to_all": lambda c, b: all_to_all(c, b[c.rank], outs[c.rank]),
    }
    for name, gen in cases.items():
        bufs = [d.copy() for d in data]
        cl = FakeCluster(transport, size, path=NOISY, seed=seed, config=CFG)
        for res in cl.run(lambda c, g=gen, b=bufs: g(c, b)):
            check_result(res)
        if name == "all_to_all":
            for r, (lo, hi) in enumerate(block_bounds(n, size)):
                assert np.array_equal(outs[r], np.concatenate([d[lo:hi] for d in data]))
        else:
            assert all(np.array_equal(b, want) for b in bufs), name
        log = cl.net.log
        fates["lost"] = fates.get("lost", 0) + sum(r.fate == "lost" for r in log)
        # a duplicate is logged as a second record of the same datagram at the same instant
        fates["dup"] = fates.get("dup", 0) + len(log) - len(
            {(r.t, r.src, r.ev, r.kind, r.flags, r.psn) for r in log})
    assert fates["lost"] > 10 and fates["dup"] > 10  # the impairments did happen
