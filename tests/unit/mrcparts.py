"""What the tests of MRC's parts share: each part built alone, with only the small
objects it is given (no MrcCore), and packets transmitted by hand at a fake clock's
instants."""

import random
from collections import Counter

from transports.core.cc import Nscc
from transports.core.message import OutMsg
from transports.core.mrc.config import MrcConfig
from transports.core.mrc.evtable import EvTable
from transports.core.mrc.flight import Flight, SentPacket
from transports.core.mrc.lossdetect import LossDetector
from transports.core.mrc.pathsel import make_selector
from transports.core.mrc.spray import Spray
from transports.core.mrc.timeouts import Timeouts
from transports.core.spurious import RetxLedger
from transports.core.wire import HEADER_LEN

SIZE = 1000


def packets(n: int, size: int = SIZE, msg: int = 1) -> list[SentPacket]:
    """``n`` packets of one message, PSNs 0..n-1, not sent yet."""
    om = OutMsg(msg, bytes(n * size), size, 0.0)
    return [SentPacket(i, om, i * size, size, 0, 0) for i in range(n)]


def transmit(flight: Flight, p: SentPacket, ev: int, now: float, loss=None) -> None:
    """What the sender does for one transmission of ``p`` on ``ev`` (sender.py)."""
    if flight.get(p.psn) is None:
        flight.add(p)
    seq, ts = flight.stamp(now)
    p.ev, p.sent, p.ts, p.seq, p.lost = ev, now, ts, seq, False
    flight.on_wire(p)
    if loss is not None:
        loss.on_sent(p, now)


def spray_over(evs: int, nics=None, sel=None, seed: int = 1):
    """A ``Spray`` over ``evs`` EVs (oblivious selector unless ``sel``) and its EvTable."""
    stats: Counter[str] = Counter()
    sel = sel if sel is not None else make_selector("oblivious", evs, random.Random(seed), nics)
    paths = EvTable(evs, 1, 1e-3, 8e-3, stats, sel.set_active)
    return Spray(sel, paths, nics), paths


class Parts:
    """A LossDetector and the parts it is given, built without a core."""

    def __init__(self, evs: int = 4, cfg: MrcConfig | None = None, nics=None,
                 seed: int = 1) -> None:
        self.cfg = cfg or MrcConfig(mtu_payload=SIZE)
        self.stats: Counter[str] = Counter()
        self.rng = random.Random(seed)
        sel = make_selector(self.cfg.selector, evs, self.rng, nics)
        self.paths = EvTable(evs, self.cfg.ev_min_active, self.cfg.probe_min,
                             self.cfg.probe_max, self.stats, sel.set_active)
        self.spray = Spray(sel, self.paths, nics)
        self.flight = Flight()
        self.cc = Nscc(self.cfg.nscc, self.cfg.mtu_payload + HEADER_LEN)
        self.ledger = RetxLedger(1.0)
        self.timeouts = Timeouts(self.cfg, evs, self.rng)
        self.loss = LossDetector(1, self.cfg, self.stats, self.flight, self.spray, self.paths,
                                 self.cc, self.ledger, nics, self.timeouts)

    def send(self, p: SentPacket, ev: int, now: float) -> None:
        transmit(self.flight, p, ev, now, self.loss)

    def ack(self, p: SentPacket, now: float) -> None:
        """A first copy acknowledged, as the sender reports it."""
        assert self.flight.acked(p.psn) is p
        self.loss.first_copy_acked(p, now)
        self.loss.progress(now)
