"""Round chaining without root: the harness's plans and the driver's ``after`` gate.

RC stripes a message over one QP per plane. A transfer ``after`` an earlier one
must wait for *every* lane's part of it: chaining each lane to its own previous
part let one plane's QP run rounds ahead of the other (round latencies grew
steadily, and the "round" was no longer synchronous).
"""

import pytest

from emu.errors import EmuError
from topologies import MultiPlaneClos
from transports.plan import AfterGate, message_bytes, placed_exactly
from transports.testing.harness import Transfer, plan_transfers

SPEC = MultiPlaneClos(planes=2, spines=2, leaves=2, hosts_per_leaf=2)


def rounds(n, src="h0", dst="h2"):
    return [Transfer(src, dst, 10_001, after=i - 1 if i else None) for i in range(n)]


@pytest.mark.parametrize("transport,lanes", [("rc", 2), ("mrc", 1), ("dblp", 1)])
def test_after_names_every_lane_of_the_previous_round(transport, lanes):
    plans, parts = plan_transfers(SPEC, transport, rounds(4))
    assert all(len(parts[i]) == lanes for i in range(4))
    sends = {m.msg: m for m in plans["h0"].sends}
    recvs = {m.msg: m for m in plans["h2"].recvs}
    assert len(plans["h0"].conns) == lanes
    for i in range(4):
        for mid in parts[i]:
            want = [] if i == 0 else sorted(parts[i - 1])
            for m in (sends[mid], recvs[mid]):
                assert sorted(m.after) == want
    assert sum(sends[m].size for m in parts[0]) == 10_001  # striped, nothing lost


def test_after_must_name_an_earlier_transfer():
    with pytest.raises(EmuError, match="earlier"):
        plan_transfers(SPEC, "rc", [Transfer("h0", "h2", 1, after=0)])


def test_gate_waits_for_every_listed_message():
    g = AfterGate()
    assert g.add(None, "first") is False  # nothing to wait for
    assert g.add([1, 2], "round 2 lane 0") is True
    assert g.add([1, 2], "round 2 lane 1") is True
    assert g.add(3, "single id") is True
    assert g.done(1) == []  # lane 1 of round 1 still out: nothing starts
    assert g.done(2) == ["round 2 lane 0", "round 2 lane 1"]
    assert g.done(2) == []  # a duplicate completion releases nothing twice
    assert g.add([1, 2], "late") is False  # already complete
    assert g.add([2, 4], "half") is True and g.done(4) == ["half"]
    assert g.done(3) == ["single id"]


def test_gated_rounds_stay_in_lockstep():
    """Lane 0 completes each part at once, lane 1 slowly: with the gate, no part of
    round i + 1 is posted before both parts of round i completed."""
    plans, parts = plan_transfers(SPEC, "rc", rounds(5))
    lane_of = {m: parts[i].index(m) for i in parts for m in parts[i]}
    g = AfterGate()
    posted: dict[int, float] = {}
    pending = []  # (completion time, msg)
    t = 0.0
    for s in plans["h0"].sends:
        if not g.add(s.after, s.msg):
            posted[s.msg] = t
    lane_time = {parts[0][0]: 1.0, parts[0][1]: 5.0}
    pending = sorted((posted[m] + lane_time[m], m) for m in posted)
    done_at: dict[int, float] = {}
    while pending:
        t, m = pending.pop(0)
        done_at[m] = t
        for nxt in g.done(m):
            posted[nxt] = t
            pending.append((t + (1.0 if lane_of[nxt] == 0 else 5.0), nxt))
            pending.sort()
    for i in range(1, 5):
        prev_done = max(done_at[m] for m in parts[i - 1])
        assert all(posted[m] == prev_done for m in parts[i])  # both lanes start together
    assert max(done_at.values()) == 25.0  # 5 rounds of the slow lane, no drift


def test_placed_exactly_compares_every_placed_byte():
    ref = message_bytes(7, 3 * 1000 + 500)  # three whole chunks and a partial one
    assert placed_exactly(bytearray(ref), ref)
    assert not placed_exactly(bytearray(ref[:-1]), ref)  # a short message
    for at in (0, 999, 1000, 2500, len(ref) - 1):  # first, last of a chunk, the tail
        got = bytearray(ref)
        got[at] ^= 1
        assert not placed_exactly(got, ref), at
        # the same byte inside a chunk the receive left unplaced does not count
        assert placed_exactly(got, ref, missing=[at // 1000], chunk=1000), at
    got = bytearray(ref)
    got[1500] ^= 1
    assert not placed_exactly(got, ref, missing=[0, 2, 3], chunk=1000)  # chunk 1 placed
