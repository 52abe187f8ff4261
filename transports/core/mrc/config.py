"""MRC's settings: one frozen dataclass, validated on construction."""

from __future__ import annotations

from dataclasses import dataclass, field

from transports.core import wire
from transports.core.cc import NsccConfig
from transports.core.rto import check_rto_config


@dataclass(frozen=True)
class MrcConfig:
    """MRC knobs (times in seconds, sizes in bytes). Unknown keys are errors (dataclass)."""

    mtu_payload: int = 8000
    selector: str = "oblivious"  # "oblivious", "bitmap", "reps" (mrc/pathsel.py)
    ev_min_active: int = 2
    ack_every: int = 4
    ack_delay: float = 50e-6
    max_sack_blocks: int = 32
    rto_init: float = 10e-3  # before any RTT sample
    rto_min: float = 250e-6  # the RTO floor's absolute part: timer granularity, ACK delay
    rto_min_rtts: float = 4.0  # ... and its part in minimum RTTs (transports/core/rto.py)
    rto_max: float = 0.25
    max_retries: int = 7  # RTO rounds without progress before the connection fails ...
    give_up_s: float = 10.0  # ... and the least time since the first of them (as RC's)
    reorder_frac: float = 0.25
    reorder_min: float = 5e-6
    dupthresh: int = 3  # rule B on an ACK: this many later transmissions acknowledged
    probe_min: float = 1e-3
    probe_max: float = 0.1
    pto: bool = True  # tail probes two smoothed RTTs after the last activity (probes.py)
    reorder_timer: bool = True  # rule B on a timer too, without dupthresh (evidence.py)
    window_pkts: int = 4096  # PSNs outstanding (sender) and accepted beyond rcv_nxt
    unposted_limit: int = 64 << 20
    use_crc: bool = True
    nscc: NsccConfig = field(default_factory=NsccConfig)

    def __post_init__(self) -> None:
        if isinstance(self.nscc, dict):  # from JSON plans
            object.__setattr__(self, "nscc", NsccConfig(**self.nscc))
        if not 0 < self.mtu_payload <= wire.MAX_PAYLOAD:
            raise ValueError(f"mtu_payload must be in 1..{wire.MAX_PAYLOAD}")
        if self.ack_every < 1 or self.max_sack_blocks < 1 or self.window_pkts < 1:
            raise ValueError("ack_every, max_sack_blocks and window_pkts must be >= 1")
        if self.ev_min_active < 1 or self.max_retries < 0 or self.dupthresh < 1:
            raise ValueError("ev_min_active >= 1, max_retries >= 0, dupthresh >= 1")
        check_rto_config("MrcConfig", self.rto_init, self.rto_min, self.rto_min_rtts,
                         self.rto_max)
        if not self.give_up_s >= 0:
            raise ValueError(f"MrcConfig.give_up_s={self.give_up_s!r} must be >= 0 seconds")
        if not 0 < self.probe_min <= self.probe_max:
            raise ValueError("need 0 < probe_min <= probe_max")
