"""Path selectors: Oblivious spreads evenly, Bitmap skips penalised EVs, REPS recycles."""

import random
from collections import Counter

import pytest

from transports.core.mrc.pathsel import (
    DELAY,
    GOOD,
    NACK,
    TIMEOUT,
    Bitmap,
    Oblivious,
    Reps,
    make_selector,
)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_oblivious_uses_all_evs_evenly(seed):
    s = Oblivious(16, random.Random(seed))
    c = Counter(s.next_ev(i) for i in range(16 * 100))
    assert set(c) == set(range(16)) and set(c.values()) == {100}
    s.set_active([1, 5, 9])
    assert set(s.next_ev(i) for i in range(30)) == {1, 5, 9}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_bitmap_skips_penalised_evs(seed):
    s = Bitmap(8, random.Random(seed))
    s.feedback(3, TIMEOUT)  # +15: skipped for 15 passes
    s.feedback(5, NACK)  # +4
    picks = [s.next_ev(i) for i in range(8 * 4)]
    assert 3 not in picks
    c = Counter(picks)
    assert c[5] < c[0]
    for _ in range(8 * 12):  # the penalty decays by one each time the EV is passed over
        s.next_ev(0)
    assert 3 in [s.next_ev(i) for i in range(16)]
    s.feedback(2, DELAY)
    assert s.penalty[2] == 1
    s.feedback(2, GOOD)
    assert s.penalty[2] == 1  # good feedback does not erase a penalty


def test_bitmap_all_penalised_picks_least():
    s = Bitmap(3, random.Random(0))
    for ev, kind in ((0, TIMEOUT), (1, TIMEOUT), (2, NACK)):
        s.feedback(ev, kind)
    assert s.next_ev(0) == 2


def test_reps_recycles_good_evs():
    s = Reps(64, random.Random(1))
    first = [s.next_ev(i) for i in range(4)]  # explore
    for ev in first:
        s.feedback(ev, GOOD)
    assert [s.next_ev(i) for i in range(4)] == first  # recycled in order
    s.feedback(first[0], DELAY)  # congested: not recycled
    s.feedback(first[1], GOOD)
    assert s.next_ev(0) == first[1]


def test_reps_freezes_on_timeout_then_explores():
    s = Reps(64, random.Random(2), buffer=8, freeze_pkts=10, explore_pkts=5)
    for ev in (1, 2, 3):
        s.feedback(ev, GOOD)
    s.feedback(3, TIMEOUT)
    frozen = [s.next_ev(i) for i in range(10)]
    assert set(frozen) == {1, 2}  # cycles the cached good EVs without consuming them
    s.feedback(7, GOOD)  # frozen: not cached
    explore = [s.next_ev(i) for i in range(5)]
    assert not set(explore) <= {1, 2}
    s.set_active([4, 5])
    assert {s.next_ev(i) for i in range(20)} <= {4, 5}


def test_make_selector_rejects_unknown():
    with pytest.raises(ValueError):
        make_selector("ecmp", 4, random.Random(0))


@pytest.mark.parametrize("cls", [Oblivious, Bitmap])
def test_nics_keep_equal_shares_when_some_of_their_evs_are_out(cls):
    nics = [0, 0, 0, 0, 1, 1, 1, 1]
    sel = make_selector(cls.__name__.lower(), 8, random.Random(1), nics)
    assert isinstance(sel, cls)
    sel.set_active([1, 2, 3, 4, 5, 6, 7])  # EV 0 (NIC 0) out of service
    picks = Counter(sel.next_ev(i) for i in range(4200))
    per_nic = Counter(nics[ev] for ev in picks.elements())
    assert per_nic[0] == per_nic[1] == 2100  # not 3/7 and 4/7 of the packets
    assert 0 not in picks
    assert {picks[e] for e in (1, 2, 3)} == {700} and {picks[e] for e in (4, 5, 6, 7)} == {525}
    # without the NICs: an equal share per EV, so NIC 1 carries 4/7
    plain = make_selector(cls.__name__.lower(), 8, random.Random(1))
    plain.set_active([1, 2, 3, 4, 5, 6, 7])
    assert sum(nics[plain.next_ev(i)] for i in range(4200)) == 2400


def test_a_nic_with_no_active_ev_leaves_the_others_all_the_packets():
    sel = Oblivious(4, random.Random(2), nics=[0, 0, 1, 1])
    sel.set_active([2, 3])
    assert set(Counter(sel.next_ev(i) for i in range(100))) == {2, 3}
