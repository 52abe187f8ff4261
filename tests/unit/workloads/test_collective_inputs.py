"""Bad inputs to the collectives, their schedules and the fake comm: each a clear error
naming the bad value (helpers in tests/unit/workloads/test_collectives.py)."""

import itertools

import numpy as np
import pytest
from test_collectives import run

from workloads.collectives.fakecomm import FakeCluster
from workloads.collectives.ops import (
    all_gather,
    all_to_all,
    hierarchical_allreduce,
    reduce_scatter,
    ring_allreduce,
)
from workloads.collectives.schedules import (
    Step,
    all_to_all_schedule,
    check_groups,
    ring_allreduce_schedule,
)
from workloads.collectives.transpose import transpose_allreduce

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
    with pytest.raises(TypeError, match="bound must be a transports.core.bound.LossBound"):
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
