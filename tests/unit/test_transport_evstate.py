"""Per-EV states of an MRC connection (transports/evstate.py): transitions, probe schedule,
the minimum-active guard."""

from collections import Counter

from transports.evstate import EV_ASSUMED_BAD, EV_DENIED, EV_GOOD, EvStates


def states(evs=4, min_active=2):
    pushed = []
    st = Counter()
    return EvStates(evs, min_active, 1e-3, 8e-3, st, pushed.append), pushed, st


def test_retire_probe_schedule_and_readmit():
    p, pushed, st = states()
    assert p.retire(1, 10.0, backoff=3e-3)
    assert not p.retire(1, 10.5, backoff=3e-3)  # already retired: nothing changes
    assert p.state[1] == EV_ASSUMED_BAD and p.active == [0, 2, 3] and pushed[-1] == [0, 2, 3]
    assert p.failed_at[1] == 10.0 and st["ev_retired"] == 1
    assert p.next_probe() == 10.0
    # probes at once, then every backoff, doubling from 3 ms up to probe_max (8 ms)
    times = []
    t = 10.0
    for _ in range(4):
        t = p.next_probe()
        times.append((round(t - 10.0, 6), p.due(t)))
    assert times == [(0.0, [(1, 1)]), (0.003, [(1, 2)]), (0.009, [(1, 3)]), (0.017, [(1, 4)])]
    assert p.answers(1, 4) and not p.answers(1, 5) and not p.answers(0, 1)
    p.readmit(1, 10.02)
    assert p.state[1] == EV_GOOD and p.active == [0, 1, 2, 3] and p.next_probe() == float("inf")
    assert p.retire(1, 11.0, backoff=0.0)
    assert not p.answers(1, 4)  # an answer to a probe of the last episode does not count
    assert [c[1:] for c in p.changes()] == [(1, EV_GOOD, EV_ASSUMED_BAD),
                                            (1, EV_ASSUMED_BAD, EV_GOOD),
                                            (1, EV_GOOD, EV_ASSUMED_BAD)]
    assert p.changes() == []


def test_guard_brings_back_the_least_recently_failed():
    p, pushed, st = states(evs=3, min_active=2)
    p.retire(0, 1.0, 1e-3)
    p.retire(1, 2.0, 1e-3)  # only EV 2 left GOOD: EV 0 (failed first) comes back unprobed
    assert p.state == [EV_GOOD, EV_ASSUMED_BAD, EV_GOOD] and st["ev_forced_back"] == 1
    assert p.bad == {1} and pushed[-1] == [0, 2]


def test_deny_and_allow():
    p, pushed, st = states(evs=2, min_active=2)
    p.deny(0, 1.0)
    assert p.state == [EV_DENIED, EV_GOOD] and p.active == [1]  # 1 of 1 allowed EVs is GOOD
    p.allow(0, 2.0, backoff=0.0)
    assert p.state[0] == EV_ASSUMED_BAD and p.due(2.0) == [(0, 1)]
    p.allow(1, 2.0, backoff=0.0)  # not denied: nothing to allow
    assert p.state[1] == EV_GOOD
