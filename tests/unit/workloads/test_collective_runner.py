"""The fake comm and its runner (workloads/collectives/fakecomm.py, workloads/collectives/comm.py)
under the
collectives: deterministic runs, message pairing, ``drive``, and the errors that name
stuck ranks or dead links (helpers in tests/unit/workloads/test_collectives.py)."""

import numpy as np
import pytest
from test_collectives import CFG, NOISY, inputs, run

from workloads.collectives.comm import CommError, drive
from workloads.collectives.fakecomm import CollectiveStuck, FakeCluster
from workloads.collectives.ops import ring_allreduce

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
