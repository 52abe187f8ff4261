"""MRC's Flight (the packets a sender owns, its retransmission queue, its stamps) and Spray
(the EV of each transmission), each built and driven alone at a fake clock."""

from collections import deque

from transports.core.mrc.flight import Flight
from transports.core.mrc.pathsel import DELAY, GOOD
from transports.core.wire import HEADER_LEN
from transports.testing.clock import FakeClock

from mrcparts import SIZE, packets, spray_over, transmit

ONE = HEADER_LEN + SIZE


def test_bytes_in_flight_follow_transmissions_acks_and_losses():
    clock, flight = FakeClock(1.0), Flight()
    ps = packets(3)
    for p in ps:
        transmit(flight, p, 0, clock.now)
    assert len(flight) == 3 and flight.bytes_in_flight == 3 * ONE
    assert flight.acked(0) is ps[0] and flight.get(0) is None
    assert flight.bytes_in_flight == 2 * ONE
    flight.requeue(ps[1], "loss_same_ev")
    assert ps[1].lost and ps[1].why == "loss_same_ev" and flight.bytes_in_flight == ONE
    assert flight.acked(1) is ps[1] and flight.bytes_in_flight == ONE  # lost: counted out already
    assert flight.acked(1) is None and flight.acked(99) is None
    flight.forget(ps[2])
    assert flight.bytes_in_flight == 0 and not flight.packets


def test_every_transmission_has_its_own_seq_and_timestamp_even_at_one_instant():
    flight = Flight()
    assert flight.stamp(2.0) == (1, 2_000_000_000)
    assert flight.stamp(2.0) == (2, 2_000_000_001)  # 1 ns later: an echo names one copy
    seq, ts = flight.stamp(2.5)
    assert seq == 3 and ts >= 2_500_000_000 - 1 and flight.tx_seq == 3


def test_the_retransmission_queue_drops_what_is_no_longer_lost_and_forces_its_head():
    clock, flight = FakeClock(), Flight()
    ps = packets(3)
    for p in ps:
        transmit(flight, p, 0, clock.now)
    flight.requeue(ps[0], "loss_rto")
    flight.requeue(ps[2], "loss_rto")
    flight.force_first()
    assert flight.next_waiting() is ps[0] and flight.forced(0) and not flight.forced(2)
    flight.acked(0)  # acknowledged while it waited (a late ACK): it leaves the queue
    assert flight.next_waiting() is ps[2] and not flight.forced(0)
    flight.pop_waiting()
    assert not flight.waiting() and flight.next_waiting() is None
    assert flight.requeue_front(2) and flight.next_waiting() is ps[2]  # still lost: back first
    assert not flight.requeue_front(1)  # not lost
    flight.clear()
    assert not flight.waiting() and not flight.packets and flight.bytes_in_flight == 0


def test_live_head_keeps_only_the_latest_transmission_of_a_live_packet():
    clock, flight = FakeClock(), Flight()
    ps = packets(3)
    for p in ps:
        transmit(flight, p, 0, clock.advance(1e-3))
    q = deque((p.seq, p.psn) for p in ps)
    flight.acked(0)
    flight.requeue(ps[1], "loss_same_ev")
    assert flight.live_head(q) is ps[2] and list(q) == [(ps[2].seq, 2)]
    old = ps[2].seq
    transmit(flight, ps[2], 1, clock.advance(1e-3))  # resent: a new transmission
    assert flight.live_head(deque([(old, 2)])) is None


class Always:
    """A selector that always picks one EV (to exercise the fallbacks)."""

    def __init__(self, ev: int) -> None:
        self.ev = ev
        self.feedbacks: list = []

    def next_ev(self, psn: int) -> int:
        return self.ev

    def feedback(self, ev: int, kind: int) -> None:
        self.feedbacks.append((ev, kind))

    def set_active(self, evs) -> None:
        pass


def test_pick_sprays_over_good_evs_and_not_on_the_ev_to_avoid():
    spray, paths = spray_over(4)
    paths.retire(2, 0.0, 1e-3)
    picks = [spray.pick(psn, -1) for psn in range(40)]
    assert set(picks) == {0, 1, 3}
    assert all(spray.pick(psn, 1) != 1 for psn in range(40))


def test_an_ev_out_of_service_gives_its_packets_to_its_nics_others():
    spray, paths = spray_over(4, nics=[0, 0, 1, 1], sel=Always(0))
    paths.retire(0, 0.0, 1e-3)
    assert {spray.pick(psn, -1) for psn in range(8)} == {1}  # NIC 0's other EV
    flat, flat_paths = spray_over(4, sel=Always(0))
    flat_paths.retire(0, 0.0, 1e-3)
    assert [flat.pick(psn, -1) for psn in range(3)] == [1, 2, 3]  # no NIC plan: any active
    assert flat.pick(0, avoid=1) != 1


def test_silent_transmissions_take_turns_over_the_active_evs():
    spray, paths = spray_over(4, nics=[0, 0, 1, 1])
    assert [spray.next_silent(-1) for _ in range(5)] == [0, 1, 2, 3, 0]
    assert spray.next_silent(avoid=1) == 2  # the next in turn is the packet's last: skipped
    assert spray.next_silent(-1, nic=1) == 3 and spray.next_silent(-1, nic=1) == 2
    assert spray.next_silent(-1, nic=1, other=True) in (0, 1)  # around its NIC
    assert spray.nic(3) == 1 and spray.has_nics


def test_acknowledged_evs_are_good_or_delayed_for_the_selector():
    sel = Always(0)
    spray, _ = spray_over(2, sel=sel)
    spray.acked(1)
    spray.set_congested(1, True)
    spray.acked(1)
    spray.feedback(0, 3)
    assert sel.feedbacks == [(1, GOOD), (1, DELAY), (0, 3)]
