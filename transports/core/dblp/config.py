"""DBLP's settings: MRC's (DBLP is a mode of the MRC connection), how a bounded round
closes, and the linger."""

from __future__ import annotations

from dataclasses import dataclass

from transports.core.knobs import check_knobs, knob
from transports.core.mrc.config import MrcConfig

# How a bounded round closes (transports/core/dblp/recv.py):
#   "needed": as soon as ceil((1 - tolerance) x chunks) are placed, wherever the sender's
#             first pass is (the DBLP prototype's rule: received / chunks >= 1 - tolerance);
#   "first_pass": the needed chunks and the sender's first pass over (or the linger).
CLOSES = ("needed", "first_pass")


@dataclass(frozen=True)
class DblpCoreConfig(MrcConfig):
    """The DBLP core's knobs: every MRC knob; how a bounded round closes (``close``, one
    of CLOSES); and, with ``close = "first_pass"``, how long a round that has its needed
    chunks waits for the sender's first pass to end (``linger_s``; None: until the first
    pass should be over at the arrival rate seen, at most an RTO: recv.py)."""

    close: str = knob("needed", choices=CLOSES)
    linger_s: float | None = knob(None, lo=0.0)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_knobs(self)
        if not self.use_crc:
            raise ValueError("DBLP needs use_crc=True: every chunk carries a CRC32")
