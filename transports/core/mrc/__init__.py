"""MRC: the multipath reliable connection (transports/core/mrc/connection.py) and its parts."""

from transports.core.mrc.connection import (
    EV_ASSUMED_BAD,
    EV_DENIED,
    EV_GOOD,
    INF,
    CorePolicy,
    MrcConfig,
    MrcCore,
)

__all__ = ["EV_ASSUMED_BAD", "EV_DENIED", "EV_GOOD", "INF", "CorePolicy", "MrcConfig", "MrcCore"]
