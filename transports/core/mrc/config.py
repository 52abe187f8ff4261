"""MRC's settings: one frozen dataclass whose fields declare the values they take
(transports/core/knobs.py), validated on construction."""

from __future__ import annotations

from dataclasses import dataclass, field

from topologies.validate import InvalidValue
from transports.core import wire
from transports.core.cc import NsccConfig
from transports.core.knobs import check_knobs, knob
from transports.core.mrc.pathsel import SELECTORS
from transports.core.rto import check_rto_config


@dataclass(frozen=True)
class MrcConfig:
    """MRC knobs (times in seconds, sizes in bytes). Unknown keys are errors (dataclass);
    each field's rule is its ``knob``."""

    mtu_payload: int = knob(8000, lo=1, hi=wire.MAX_PAYLOAD)
    # "oblivious", "bitmap", "reps" (mrc/pathsel.py)
    selector: str = knob("oblivious", choices=tuple(SELECTORS))
    ev_min_active: int = knob(2, lo=1)  # EVs kept GOOD (of those not DENIED)
    ack_every: int = knob(4, lo=1)
    ack_delay: float = knob(50e-6, lo=0.0)
    # one ACK per wake-up of a batching I/O loop (or per ack_every): transports/core/receiver.py
    ack_wakeup: bool = knob(False)
    max_sack_blocks: int = knob(32, lo=1)
    rto_init: float = knob(10e-3, lo=0.0, lo_open=True)  # before any RTT sample
    # the RTO floor's absolute part: timer granularity, ACK delay
    rto_min: float = knob(250e-6, lo=0.0, lo_open=True)
    # ... and its part in minimum RTTs (transports/core/rto.py)
    rto_min_rtts: float = knob(4.0, lo=0.0, hi=1e6, hi_open=True)
    rto_max: float = knob(0.25, lo=0.0, lo_open=True)
    # RTO rounds without progress before the connection fails ...
    max_retries: int = knob(7, lo=0)
    # ... and the least time since the first of them (as RC's)
    give_up_s: float = knob(10.0, lo=0.0)
    reorder_frac: float = knob(0.25, lo=0.0)
    reorder_min: float = knob(5e-6, lo=0.0)
    # rule B on an ACK: this many later transmissions acknowledged
    dupthresh: int = knob(3, lo=1)
    probe_min: float = knob(1e-3, lo=0.0, lo_open=True)
    probe_max: float = knob(0.1, lo=0.0, lo_open=True)
    pto: bool = knob(True)  # tail probes two smoothed RTTs after the last activity (probes.py)
    reorder_timer: bool = knob(True)  # rule B on a timer too, without dupthresh (evidence.py)
    # PSNs outstanding (sender) and accepted beyond rcv_nxt
    window_pkts: int = knob(4096, lo=1)
    unposted_limit: int = knob(64 << 20, lo=0)  # bytes of messages received before posted
    use_crc: bool = knob(True)
    # DATA carries FLAG_TRIM_OK: a switch whose buffer is full trims it to its header
    # (answered by a NACK and resent at once) instead of dropping it
    trim_ok: bool = knob(True)
    # the NICs' shares of the packets: "congestion" (each plane's share follows its ECN
    # marks and trims, mrc/pathsel.py NicShares) or "equal" (the NICs take turns)
    nic_shares: str = knob("congestion", choices=("congestion", "equal"))
    nscc: NsccConfig = field(default_factory=NsccConfig)

    def __post_init__(self) -> None:
        if isinstance(self.nscc, dict):  # from JSON plans
            object.__setattr__(self, "nscc", NsccConfig(**self.nscc))
        if not isinstance(self.nscc, NsccConfig):
            raise InvalidValue("nscc", self.nscc, "NSCC's settings (an NsccConfig or a table)")
        check_knobs(self)
        check_rto_config("MrcConfig", self.rto_init, self.rto_min, self.rto_min_rtts,
                         self.rto_max)
        if not self.probe_min <= self.probe_max:
            raise ValueError(f"MrcConfig: need probe_min <= probe_max, not "
                             f"probe_min={self.probe_min!r}, probe_max={self.probe_max!r}")
