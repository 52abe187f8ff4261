"""Per-EV states of an MRC connection (transports/core/mrc/evtable.py): the explicit transition
table (every state x event pair), the probe schedule tied to ASSUMED_BAD, the
minimum-active guard and the bounded change log."""

import random
from collections import Counter

import pytest

from transports.core.mrc.evtable import (
    CHANGES_MAX,
    EV_ASSUMED_BAD,
    EV_DENIED,
    EV_GOOD,
    EVENTS,
    STATES,
    TRANSITIONS,
    EvTable,
)

INF = float("inf")


def table(evs=4, min_active=2):
    pushed = []
    st = Counter()
    return EvTable(evs, min_active, 1e-3, 8e-3, st, pushed.append), pushed, st


# ---- the states, probe schedule and guard -----------------------------------------------


def test_retire_probe_schedule_and_readmit():
    p, pushed, st = table()
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
    assert p.readmit(1, 10.02)
    assert p.state[1] == EV_GOOD and p.active == [0, 1, 2, 3] and p.next_probe() == INF
    assert p.retire(1, 11.0, backoff=0.0)
    assert not p.answers(1, 4)  # an answer to a probe of the last episode does not count
    assert [c[1:] for c in p.changes()] == [(1, EV_GOOD, EV_ASSUMED_BAD),
                                            (1, EV_ASSUMED_BAD, EV_GOOD),
                                            (1, EV_GOOD, EV_ASSUMED_BAD)]
    assert p.changes() == []


def test_guard_brings_back_the_least_recently_failed():
    p, pushed, st = table(evs=3, min_active=2)
    p.retire(0, 1.0, 1e-3)
    p.retire(1, 2.0, 1e-3)  # only EV 2 left GOOD: EV 0 (failed first) comes back unprobed
    assert p.state == [EV_GOOD, EV_ASSUMED_BAD, EV_GOOD] and st["ev_forced_back"] == 1
    assert p.bad == {1} and pushed[-1] == [0, 2]


def test_deny_and_allow():
    p, pushed, st = table(evs=2, min_active=2)
    assert p.deny(0, 1.0)
    assert p.state == [EV_DENIED, EV_GOOD] and p.active == [1]  # 1 of 1 allowed EVs is GOOD
    assert p.allow(0, 2.0, backoff=0.0)
    assert p.state[0] == EV_ASSUMED_BAD and p.due(2.0) == [(0, 1)]
    assert not p.allow(1, 2.0, backoff=0.0)  # not denied: nothing to allow
    assert p.state[1] == EV_GOOD


# ---- the transition table ---------------------------------------------------------------


def test_the_table_is_exactly_this():
    # A literal copy: changing the table must be deliberate and change this test too.
    assert TRANSITIONS == {
        ("GOOD", "retire"): "ASSUMED_BAD",
        ("ASSUMED_BAD", "readmit"): "GOOD",
        ("GOOD", "deny"): "DENIED",
        ("ASSUMED_BAD", "deny"): "DENIED",
        ("DENIED", "deny"): "DENIED",
        ("DENIED", "allow"): "ASSUMED_BAD",
        ("ASSUMED_BAD", "forced_back"): "GOOD",
    }
    assert (EV_GOOD, EV_ASSUMED_BAD, EV_DENIED) == STATES == ("GOOD", "ASSUMED_BAD", "DENIED")
    assert EVENTS == ("retire", "readmit", "deny", "allow", "forced_back")
    assert {s for s, _ in TRANSITIONS} | set(TRANSITIONS.values()) <= set(STATES)
    assert {e for _, e in TRANSITIONS} == set(EVENTS)  # no event is dead or unknown


def snapshot(p, st):
    return (list(p.state), set(p.bad), list(p.active), list(p.probe_at), list(p.failed_at),
            list(p.probe_backoff), list(p.probe_base), Counter(st))


@pytest.mark.parametrize("event", EVENTS)
@pytest.mark.parametrize("start", STATES)
def test_every_state_and_event(start, event):
    """EV 0 is driven into ``start`` and hit by ``event``, both through public methods
    (``forced_back`` by retiring the others until the guard fires); it ends in
    TRANSITIONS.get((start, event), start), and ignored events change nothing."""
    p, pushed, st = table(evs=3, min_active=2)
    if start == EV_ASSUMED_BAD:
        assert p.retire(0, 1.0, 2e-3)
    elif start == EV_DENIED:
        assert p.deny(0, 1.0)
    assert p.state[0] == start
    p.changes()
    before = snapshot(p, st)
    expect = TRANSITIONS.get((start, event), start)
    listed = (start, event) in TRANSITIONS

    if event == "forced_back":
        forced = st["ev_forced_back"]
        p.retire(1, 2.0, 1e-3)
        p.retire(2, 3.0, 1e-3)
        assert st["ev_forced_back"] > forced  # the guard did fire: the check is not vacuous
        mine = [c[2:] for c in p.changes() if c[1] == 0]
        applied = any(old == start for old, _ in mine)
        assert applied == listed
        assert p.state[0] == expect
        return

    now = 5.0
    call = {"retire": lambda: p.retire(0, now, 4e-3),
            "readmit": lambda: p.readmit(0, now),
            "deny": lambda: p.deny(0, now),
            "allow": lambda: p.allow(0, now, 4e-3)}[event]
    applied = call()
    assert type(applied) is bool and applied == listed
    assert p.state[0] == expect
    changes = [c for c in p.changes() if c[1] == 0]
    if not applied or expect == start:
        # ignored, or the DENIED --deny--> DENIED self-transition: no state, schedule,
        # counter or log entry moves
        assert changes == [] and snapshot(p, st) == before
    else:
        assert changes == [(now, 0, start, expect)]


def test_old_readmit_from_denied_no_longer_allows_the_path():
    # EvStates.readmit did not check the state: a DENIED EV became GOOD (and carried
    # data) without the controller's allow. Now the table refuses it.
    p, pushed, st = table(evs=3, min_active=1)
    p.deny(0, 1.0)
    n = len(pushed)
    assert not p.readmit(0, 2.0)
    assert p.state[0] == EV_DENIED and p.active == [1, 2] and len(pushed) == n


def test_random_walk_keeps_the_invariants():
    """Random events on random EVs: every logged change is a table entry, ``bad`` is the
    ASSUMED_BAD set, ``active`` the GOOD list, and after an applied retire/deny the guard
    holds."""
    rng = random.Random(7)
    for evs, min_active in ((1, 1), (3, 2), (5, 3), (4, 4)):
        p, pushed, st = table(evs, min_active)
        alias = p.state
        moves = {(s, t) for (s, _), t in TRANSITIONS.items() if s != t}
        seen = set()
        for i in range(3000):
            ev, now = rng.randrange(evs), i * 1e-3
            event = rng.choice(("retire", "readmit", "deny", "allow", "allow", "readmit"))
            applied = None
            if event == "retire":
                applied = p.retire(ev, now, 1e-3)
            elif event == "readmit":
                p.readmit(ev, now)
            elif event == "deny":
                if rng.random() < 0.3:  # rarer than allow, or most EVs stay DENIED
                    applied = p.deny(ev, now)
            else:
                p.allow(ev, now, 1e-3)
            p.due(now)
            for _, _, old, new in p.changes():
                assert (old, new) in moves
                seen.add((old, new))
            assert p.state is alias
            assert p.bad == {e for e in range(evs) if p.state[e] == EV_ASSUMED_BAD}
            assert all((p.probe_at[e] < INF) == (e in p.bad) for e in range(evs))
            assert p.active == [e for e in range(evs) if p.state[e] == EV_GOOD]
            if applied:  # the guard runs after an applied retire or deny (not after allow)
                allowed = sum(s != EV_DENIED for s in p.state)
                assert len(p.active) >= min(min_active, allowed) or not p.bad
        assert seen == moves  # the walk exercised every state-changing entry


# ---- the probe schedule belongs to ASSUMED_BAD ------------------------------------------


def test_probing_starts_only_on_entering_assumed_bad():
    p, pushed, st = table(evs=4, min_active=1)
    assert p.next_probe() == INF and p.due(100.0) == []  # GOOD EVs are never probed
    p.deny(2, 1.0)
    assert p.next_probe() == INF and p.due(100.0) == []  # nor DENIED ones
    assert p.retire(1, 2.0, backoff=2e-3)
    assert p.due(2.0) == [(1, 1)] and p.probe_at[1] == pytest.approx(2.002)
    # a retire that does not apply (already ASSUMED_BAD) neither restarts the episode nor
    # resets the backoff
    assert not p.retire(1, 2.001, backoff=5e-3)
    assert p.probe_at[1] == pytest.approx(2.002) and p.probe_backoff[1] == pytest.approx(4e-3)
    assert p.due(2.001) == []
    assert p.due(2.002) == [(1, 2)]
    # allow enters ASSUMED_BAD: probed at once, the backoff given (at least probe_min)
    assert p.allow(2, 3.0, backoff=0.0)
    assert p.probe_at[2] == 3.0 and p.probe_backoff[2] == 1e-3 and 2 in p.bad
    assert sorted(p.due(3.0)) == [(1, 3), (2, 1)]
    assert not p.allow(2, 3.5, backoff=0.0)  # no longer DENIED: the schedule is left alone
    assert p.probe_at[2] == pytest.approx(3.001)


@pytest.mark.parametrize("leave", ["readmit", "deny", "forced_back"])
def test_probing_stops_on_leaving_assumed_bad(leave):
    p, pushed, st = table(evs=3, min_active=2)
    assert p.retire(0, 1.0, backoff=1e-3)
    assert p.due(1.0) == [(0, 1)]
    if leave == "readmit":
        assert p.readmit(0, 1.5)
    elif leave == "deny":
        assert p.deny(0, 1.5)
    else:
        p.retire(1, 1.5, 1e-3)  # only EV 2 left GOOD: EV 0 is forced back
        assert st["ev_forced_back"] == 1
    assert p.state[0] != EV_ASSUMED_BAD
    assert 0 not in p.bad and p.probe_at[0] == INF
    assert all(ev != 0 for ev, _ in p.due(100.0))
    assert not p.answers(0, 1)  # and its outstanding probe no longer counts


def test_clear_stops_every_probe_but_keeps_the_states():
    p, pushed, st = table(evs=3, min_active=1)
    p.retire(0, 1.0, 1e-3)
    p.deny(1, 1.0)
    p.allow(1, 1.0, 1e-3)
    p.clear()
    assert p.next_probe() == INF and p.due(100.0) == []
    assert p.state == [EV_ASSUMED_BAD, EV_ASSUMED_BAD, EV_GOOD]


# ---- the bounded change log -------------------------------------------------------------


def test_change_log_is_bounded_and_counts_what_it_drops():
    p, pushed, st = table(evs=2, min_active=1)
    flaps = CHANGES_MAX // 2 + 50  # a flapping link, its owner never draining the log
    for i in range(flaps):
        assert p.retire(1, 2.0 * i, 1e-3)
        assert p.readmit(1, 2.0 * i + 1.0)
    total = 2 * flaps
    assert len(p.events) == CHANGES_MAX
    assert st["ev_changes_dropped"] == total - CHANGES_MAX == 100
    got = p.changes()
    assert len(got) == CHANGES_MAX
    # the newest are kept, in order: the last one is the last readmit
    assert got[-1] == (total - 1.0, 1, EV_ASSUMED_BAD, EV_GOOD)
    assert got[0] == (float(total - CHANGES_MAX), 1, EV_GOOD, EV_ASSUMED_BAD)
    assert [c[0] for c in got] == sorted(c[0] for c in got)
    # drained: below the bound again, nothing more is dropped
    assert p.changes() == []
    p.retire(1, 1e9, 1e-3)
    assert p.changes() == [(1e9, 1, EV_GOOD, EV_ASSUMED_BAD)]
    assert st["ev_changes_dropped"] == 100


def test_change_log_below_the_bound_drops_nothing():
    p, pushed, st = table(evs=2, min_active=1)
    for i in range(CHANGES_MAX // 2):
        p.retire(1, 2.0 * i, 1e-3)
        p.readmit(1, 2.0 * i + 1.0)
    assert len(p.changes()) == CHANGES_MAX and st["ev_changes_dropped"] == 0
