"""Collective schedules as data (workloads/collectives/schedules.py): every send meets
its receive, the shapes of the builders, and the bytes a run sends follow them (helpers
in tests/unit/workloads/test_collectives.py)."""

import numpy as np
import pytest
from test_collectives import CFG, GROUPS, NOISY, inputs, run

from workloads.collectives.fakecomm import FakeCluster
from workloads.collectives.ops import (
    all_to_all,
    hierarchical_allreduce,
    ring_allreduce,
)
from workloads.collectives.schedules import (
    Step,
    all_gather_schedule,
    all_to_all_recv_len,
    all_to_all_schedule,
    block_bounds,
    hierarchical_allreduce_schedule,
    reduce_scatter_schedule,
    ring_allreduce_schedule,
    transpose_allreduce_schedule,
)
from workloads.collectives.transpose import transpose_allreduce

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
