"""Collectives (workloads/collectives.py) on the fake network (workloads/fakecomm.py).

Values are small integers in float32, so every sum is exact whatever order a schedule
adds in, and results are compared for equality with numpy references.
"""

import itertools

import numpy as np
import pytest

from transports.dblp import LossBound
from transports.fakenet import PathSpec
from workloads.collective_executor import CollectiveResult, merge_ranges
from workloads.collective_schedules import (
    Step,
    all_gather_schedule,
    all_to_all_recv_len,
    all_to_all_schedule,
    block_bounds,
    check_groups,
    hierarchical_allreduce_schedule,
    reduce_scatter_schedule,
    ring_allreduce_schedule,
    transpose_allreduce_schedule,
)
from workloads.collective_transpose import transpose_allreduce
from workloads.collectives import (
    all_gather,
    all_to_all,
    hierarchical_allreduce,
    reduce_scatter,
    ring_allreduce,
)
from workloads.comm import CommError, drive
from workloads.fakecomm import CollectiveStuck, FakeCluster, run_collective

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


# ---- bounded-loss Transpose AllReduce ------------------------------------------------------


def powers(size, n):
    """Rank k contributes 2**k everywhere: a sum names exactly the contributions it holds."""
    return [np.full(n, 2.0 ** k, dtype=np.float32) for k in range(size)]


def bounded(size, n, bound, average, path, seed, mtu=MTU):
    bufs = powers(size, n)
    results = run("dblp", size, lambda c: transpose_allreduce(c, bufs[c.rank], average=average,
                                                                bound=bound),
                  path=path, seed=seed, config={"mtu_payload": mtu})
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
    size, n = 4, 640
    path = lambda s, d: PathSpec(loss=0.3 if (s, d) == (1, 2) else 0.0)  # noqa: E731
    bufs, results = bounded(size, n, LossBound(0.4), False, path, seed=5)
    mask = bufs[0].astype(np.int64)
    lo, hi = block_bounds(n, size)[2]
    assert set(np.unique(mask[lo:hi])) == {15, 15 & ~2}  # only rank 1's part goes missing
    assert np.all(np.delete(mask, np.arange(lo, hi)) == 15)
    assert results[2].lost_pairs == int(np.sum(mask[lo:hi] != 15)) > 0
    assert all(r.lost_pairs == 0 for i, r in enumerate(results) if i != 2)
    assert sum(b - a for a, b in results[1].unsent) == results[2].lost_pairs
    assert all(not r.unsent and r.sent_values is None for i, r in enumerate(results) if i != 1)


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


# ---- schedules -----------------------------------------------------------------------------


def _flows(scheds):
    """Per (a, b): a's sends to b and b's receives from a, in posting order, with sizes."""
    sends, recvs = {}, {}
    for r, steps in enumerate(scheds):
        for st in steps:
            for s in st.sends:
                sends.setdefault((r, s.peer), []).append((s.hi - s.lo, st.bounded))
            for x in st.recvs:
                recvs.setdefault((x.peer, r), []).append((x.hi - x.lo, st.bounded))
    return sends, recvs


BUILDERS = {
    "ring_allreduce": ring_allreduce_schedule,
    "reduce_scatter": reduce_scatter_schedule,
    "all_gather": all_gather_schedule,
    "transpose": transpose_allreduce_schedule,
    "all_to_all": all_to_all_schedule,
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 7])
@pytest.mark.parametrize("n", [0, 1, 3, 10, 97])
def test_schedule_sends_match_receives(name, size, n):
    scheds = BUILDERS[name](n, size)
    assert len(scheds) == size
    sends, recvs = _flows(scheds)
    assert sends == recvs
    for r, steps in enumerate(scheds):
        for st in steps:
            assert isinstance(st, Step) and (st.sends or st.recvs)
            assert all(x.peer != r and x.hi > x.lo for x in st.sends + st.recvs)


@pytest.mark.parametrize("groups", GROUPS + [[[0, 5, 2], [4, 1, 3]]])
@pytest.mark.parametrize("n", [0, 2, 11, 120])
def test_hierarchical_schedule_sends_match_receives(groups, n):
    sends, recvs = _flows(hierarchical_allreduce_schedule(n, groups))
    assert sends == recvs


def test_schedule_shapes():
    # ring: 2 (p - 1) steps to the right neighbour, 2 (p - 1) / p of the array each way
    for r, steps in enumerate(ring_allreduce_schedule(100, 4)):
        assert len(steps) == 6
        assert {s.peer for st in steps for s in st.sends} == {(r + 1) % 4}
        assert sum(s.hi - s.lo for st in steps for s in st.sends) == 150
        assert [x.op for st in steps for x in st.recvs] == ["sum"] * 3 + ["copy"] * 3
    # transpose: a bounded step of sums, then a reliable step of copies, p - 1 peers each
    for steps in transpose_allreduce_schedule(100, 4):
        (rs, ag) = steps
        assert rs.bounded and not ag.bounded
        assert {x.op for x in rs.recvs} == {"sum"} and {x.op for x in ag.recvs} == {"copy"}
        assert len(rs.sends) == len(rs.recvs) == len(ag.sends) == len(ag.recvs) == 3
    # n < size: empty blocks carry nothing
    # (ring sends every block but its own in the reduce-scatter, every block but its right
    # neighbour's in the all-gather; with 2 elements on 4 ranks only blocks 0 and 1 exist)
    sent = [[s.lo for st in steps for s in st.sends] for steps in ring_allreduce_schedule(2, 4)]
    assert sent == [[1, 0], [0, 1, 0], [1, 0, 1, 0], [1, 0, 1]]
    assert ring_allreduce_schedule(0, 3) == [(), (), ()]
    assert block_bounds(7, 3) == [(0, 3), (3, 5), (5, 7)]
    assert [hi - lo for lo, hi in block_bounds(7, 3)] == [len(x) for x in np.array_split(
        np.zeros(7), 3)]


@pytest.mark.parametrize("transport", ["mrc", "dblp"])
def test_bytes_sent_follow_the_schedule(transport):
    size, n = 5, 123
    data = inputs(size, n)
    for fn, builder in ((ring_allreduce, ring_allreduce_schedule),
                        (transpose_allreduce, transpose_allreduce_schedule)):
        bufs = [d.copy() for d in data]
        results = run(transport, size, lambda c, f=fn, b=bufs: f(c, b[c.rank]))
        for res, steps in zip(results, builder(n, size), strict=True):
            assert res.bytes_sent == 4 * sum(s.hi - s.lo for st in steps for s in st.sends)
            assert res.messages_sent == sum(len(st.sends) for st in steps)


@pytest.mark.parametrize("name", ["ring", "transpose", "hierarchical", "all_to_all"])
def test_send_bytes_stay_unchanged_until_the_send_completes(name):
    """The Comm contract: what a collective hands to isend is not touched until done."""
    size, n = 4, 400
    cl = FakeCluster("dblp", size, path=NOISY, seed=3, config=CFG)
    posted, checked = {}, []
    for comm in cl.comms:
        def isend(peer, data, bound=None, _orig=comm.isend):
            h = _orig(peer, data, bound)
            posted[h] = (data, bytes(data))
            return h
        comm.isend = isend
    complete = cl._complete

    def check(core_name, c):  # at the send's completion its bytes are still the posted ones
        h = cl.pending.get((core_name, c.kind, c.msg))
        complete(core_name, c)
        if c.kind == "send":
            data, snap = posted[h]
            assert bytes(data) == snap
            checked.append(h)

    cl._complete = check
    data = inputs(size, n)
    outs = [np.zeros(all_to_all_recv_len(n, size, r), np.float32) for r in range(size)]
    gens = {
        "ring": lambda c: ring_allreduce(c, data[c.rank]),
        "transpose": lambda c: transpose_allreduce(c, data[c.rank]),
        "hierarchical": lambda c: hierarchical_allreduce(c, data[c.rank], [[0, 1], [2, 3]]),
        "all_to_all": lambda c: all_to_all(c, data[c.rank], outs[c.rank]),
    }
    cl.run(gens[name])
    assert len(checked) == len(posted) > 0


# ---- the fake comm and runner --------------------------------------------------------------


def test_runs_are_deterministic():
    def once():
        data = inputs(4, 200, seed=8)
        cl = FakeCluster("mrc", 4, path=NOISY, seed=8, config=CFG)
        cl.run(lambda c: ring_allreduce(c, data[c.rank]))
        return [(r.t, r.src, r.ev, r.psn, r.fate) for r in cl.net.log], cl.net.now
    assert once() == once()


def test_messages_pair_in_posting_order_per_peer_and_direction():
    cl = FakeCluster("dblp", 2, config=CFG)
    c0, c1 = cl.comms
    a, b = np.arange(50, dtype=np.float32), np.arange(7, dtype=np.float32) + 100
    ra, rb = np.zeros(50, np.float32), np.zeros(7, np.float32)
    back = np.zeros(3, np.float32)
    hs = [c0.isend(1, a.tobytes()), c0.isend(1, b.tobytes()),
          c1.isend(0, np.ones(3, np.float32).tobytes())]
    hs += [c1.irecv(0, memoryview(ra).cast("B")), c1.irecv(0, memoryview(rb).cast("B"))]
    c0.wait(hs[:2])
    c1.wait(hs[3:])
    h = c0.irecv(1, memoryview(back).cast("B"))
    c0.wait([h])
    c1.wait([hs[2]])
    assert np.array_equal(ra, a) and np.array_equal(rb, b) and np.array_equal(back, np.ones(3))
    assert all(x.done and x.completion.ok for x in hs + [h])


def test_drive_runs_a_collective_on_one_rank():
    buf = np.arange(5, dtype=np.float32)
    cl = FakeCluster("rc", 1)
    res = drive(ring_allreduce(cl.comms[0], buf, average=True), cl.comms[0])
    assert np.array_equal(buf, np.arange(5, dtype=np.float32)) and res.bytes_sent == 0


def test_deadlock_names_the_waiting_ranks():
    buf = np.zeros(10, np.float32)

    def gen(c):
        if c.rank == 0:
            yield [c.irecv(2, memoryview(buf).cast("B"))]  # rank 2 never sends
        return None
        yield

    with pytest.raises(CollectiveStuck, match=r"deadlock: rank 0 waits on \[Handle\(recv "
                                              r"peer=2 40 B"):
        run("mrc", 3, gen)


def test_time_limit_names_the_waiting_ranks():
    data = inputs(3, 300)
    with pytest.raises(CollectiveStuck, match="time limit passed: rank 0 waits on .*rank 2"):
        run("mrc", 3, lambda c: ring_allreduce(c, data[c.rank]), time_limit=30e-6)


def test_dead_link_fails_with_comm_error():
    cl = FakeCluster("rc", 2, config={**CFG, "give_up_s": 0.5})
    for ev in range(cl.evs):
        cl.net.kill(cl.name(0, 1), cl.name(1, 0), ev, at=0.0)
    data = inputs(2, 20)
    with pytest.raises(CommError, match=r"rank [01]: send of message 1 to rank [01] failed"):
        cl.run(lambda c: ring_allreduce(c, data[c.rank]))


# ---- bad inputs ----------------------------------------------------------------------------


def _comm(size=3, rank=0):
    return FakeCluster("mrc", size).comms[rank]


@pytest.mark.parametrize("buf,exc,words", [
    (np.zeros(4, np.float64), TypeError, "dtype=float64: float32"),
    (np.zeros((2, 2), np.float32), ValueError, r"shape \(2, 2\)"),
    (np.zeros(8, np.float32)[::2], ValueError, "not contiguous"),
    ([1.0, 2.0], TypeError, "not list"),
])
@pytest.mark.parametrize("fn", [ring_allreduce, reduce_scatter, all_gather,
                                transpose_allreduce])
def test_bad_arrays(fn, buf, exc, words):
    with pytest.raises(exc, match=words):
        fn(_comm(), buf)


def test_read_only_and_flags():
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="buf is read-only"):
        ring_allreduce(_comm(), ro)
    with pytest.raises(TypeError, match="average='yes' must be True or False"):
        ring_allreduce(_comm(), np.zeros(4, np.float32), average="yes")
    with pytest.raises(TypeError, match="bound must be a transports.bound.LossBound"):
        transpose_allreduce(_comm(), np.zeros(4, np.float32), bound=0.1)


def test_bad_all_to_all():
    c = _comm(3, 1)
    with pytest.raises(ValueError, match="recv has 5 elements: rank 1 of 3 receives 9"):
        all_to_all(c, np.zeros(8, np.float32), np.zeros(5, np.float32))
    x = np.zeros(18, np.float32)
    with pytest.raises(ValueError, match="send and recv overlap"):
        all_to_all(c, x[:9], x[3:12])
    ro = np.zeros(9, np.float32)
    ro.flags.writeable = False  # a read-only send is fine
    all_to_all(c, ro, np.zeros(9, np.float32))
    with pytest.raises(TypeError, match="recv.dtype=int32"):
        all_to_all(c, ro, np.zeros(9, np.int32))


@pytest.mark.parametrize("groups,words", [
    ([[0, 1], [2]], r"sizes \[2, 1\]"),
    ([[0, 1], [1, 2]], r"ranks \[1\] appear more than once"),
    ([[0, 1], [2, 5]], r"partition range\(4\): ranks \[5\] are not in it; ranks \[3\] are "
                       "missing"),
    ([[0, 1]], r"ranks \[2, 3\] are missing"),
    ([], "non-empty list of lists"),
    ([[0, 1], []], r"groups\[1\]=\[\] must be a non-empty list"),
    ([[0, "1"], [2, 3]], r"groups\[0\] holds '1'"),
    ("0123", "non-empty list of lists"),
])
def test_bad_groups(groups, words):
    with pytest.raises(ValueError, match=words):
        hierarchical_allreduce(_comm(4), np.zeros(4, np.float32), groups)


def test_check_groups_and_builders_reject_bad_sizes():
    assert check_groups([[2, 0], [1, 3]]) == ((2, 0), (1, 3))
    with pytest.raises(ValueError, match="size=0 must be an int >= 1"):
        ring_allreduce_schedule(4, 0)
    with pytest.raises(ValueError, match="n=-1 must be an int >= 0"):
        all_to_all_schedule(-1, 2)
    with pytest.raises(ValueError, match="Recv.op='max'"):
        Step(recvs=((0, 0, 1, "max"),))


def test_bad_comm_requests():
    c = _comm(3, 1)
    buf = memoryview(bytearray(4))
    with pytest.raises(ValueError, match="peer=1 is this rank"):
        c.isend(1, b"abcd")
    with pytest.raises(ValueError, match=r"peer=3 must be a rank in 0..2"):
        c.irecv(3, buf)
    with pytest.raises(ValueError, match="transport='tcp': valid are mrc, rc, dblp"):
        FakeCluster("tcp", 2)
    with pytest.raises(TypeError, match=r"a generator \(a collective\) expected"):
        run("mrc", 2, lambda c: ring_allreduce)
    with pytest.raises(TypeError, match=r"a generator \(a collective\) expected"):
        run("mrc", 2, lambda c: itertools.repeat([]))

    def gen(c):
        yield 5

    with pytest.raises(TypeError, match=r"rank 0's collective yielded 5: a list of Handles"):
        run("mrc", 2, gen)


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
