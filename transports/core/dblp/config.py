"""DBLP's settings: MRC's (DBLP is a mode of the MRC connection) and the linger."""

from __future__ import annotations

from dataclasses import dataclass

from transports.core.knobs import check_knobs, knob
from transports.core.mrc.config import MrcConfig


@dataclass(frozen=True)
class DblpCoreConfig(MrcConfig):
    """The DBLP core's knobs: every MRC knob, and how long a bounded round that has its
    needed chunks waits for the sender's first pass to end (``linger_s``; None: until the
    first pass should be over at the arrival rate seen, at most an RTO: recv.py)."""

    linger_s: float | None = knob(None, lo=0.0)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_knobs(self)
        if not self.use_crc:
            raise ValueError("DBLP needs use_crc=True: every chunk carries a CRC32")
