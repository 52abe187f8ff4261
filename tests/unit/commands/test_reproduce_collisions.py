"""The ECMP expectations the spraying claim is judged against."""

from __future__ import annotations

import itertools

import pytest

from commands.reproduce import collisions as c

CLOS = c.Clos(planes=2, spines=4, leaves=4, hosts_per_leaf=4)


def test_pairs() -> None:
    perm = c.pairs("permutation", CLOS)
    assert perm[:2] == [(0, 4), (1, 5)] and perm[-1] == (15, 3)
    assert sorted(b for _, b in perm) == list(range(16))  # a permutation
    a2a = c.pairs("all_to_all", CLOS)
    assert len(a2a) == 16 * 12 and all(a // 4 != b // 4 for a, b in a2a)
    with pytest.raises(ValueError, match="pattern 'ring' is invalid"):
        c.pairs("ring", CLOS)
    with pytest.raises(ValueError, match="not hashed by ECMP"):
        c.lanes("mrc", CLOS)


def test_occupancy_is_balls_into_bins() -> None:
    # RC: 4 QPs of a plane onto its 4 spines: the 1 - (1 - 1/N)^N
    assert c.occupancy("permutation", "rc", CLOS) == pytest.approx(1 - 0.75 ** 4)
    # TCP: 4 connections onto 8 (plane, spine) uplinks, each using one of two NICs
    assert c.occupancy("permutation", "tcp", CLOS) == pytest.approx(1 - (7 / 8) ** 4)
    assert c.occupancy("all_to_all", "rc", CLOS) == pytest.approx(1 - 0.75 ** 48)


def test_ideal_load_is_the_sprayed_bottleneck() -> None:
    # one unit per pair, sprayed over 2 planes: each NIC carries half of its host's bytes
    assert c.ideal_load(c.pairs("permutation", CLOS), CLOS) == pytest.approx(0.5)
    assert c.ideal_load(c.pairs("all_to_all", CLOS), CLOS) == pytest.approx(6.0)


def test_completion_without_choice_is_ideal() -> None:
    one = c.Clos(planes=1, spines=1, leaves=2, hosts_per_leaf=2)
    assert c.completion("permutation", "rc", one, samples=100) == (1.0, 1.0, 1.0)


def test_completion_matches_exact_enumeration() -> None:
    # one plane, 2 racks of 4 hosts, 4 spines: 8 connections, each hashed onto a spine
    clos = c.Clos(planes=1, spines=4, leaves=2, hosts_per_leaf=4)
    exact = 0.0
    for choice in itertools.product(range(4), repeat=8):
        up0 = max(choice[:4].count(s) for s in range(4))  # rack 0 -> rack 1
        up1 = max(choice[4:].count(s) for s in range(4))
        exact += 1 / max(up0, up1)
    exact /= 4 ** 8
    mean, lo, hi = c.completion("permutation", "rc", clos, samples=20000, seed=1)
    assert mean == pytest.approx(exact, abs=0.01)
    assert (lo, hi) == (pytest.approx(1 / 3), pytest.approx(0.5))
    assert c.completion("permutation", "rc", clos, samples=1000, seed=1) == \
        c.completion("permutation", "rc", clos, samples=1000, seed=1)  # seeded


def test_completion_below_occupancy_on_the_bench_fabric() -> None:
    for pattern in c.PATTERNS:
        for system in ("rc", "tcp"):
            mean, lo, hi = c.completion(pattern, system, CLOS, samples=500)
            assert 0 < lo <= mean <= hi <= 1
            assert mean < c.occupancy(pattern, system, CLOS)  # the last link, not the busy ones
