"""The kernel's transports: TCP (the transfer driver's baseline, transports/io/tcp.py) and
gloo (torch.distributed's collectives over TCP, in a training worker). Neither has a
userspace core; these are their settings, as every transport has (transports/registry.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from transports.core.knobs import check_knobs, knob

TCP_PORT = 4792  # the baseline's listening port (MRC and RC use UDP 4791)


@dataclass(frozen=True)
class TcpConfig:
    """The kernel-TCP baseline's knobs; the kernel's TCP is otherwise left as it is."""

    cc: str | None = knob(None)  # a congestion control for TCP_CONGESTION; None: the default
    sport: int = knob(0, lo=0, hi=65535)  # the source port of connections opened; 0: any
    port: int = knob(TCP_PORT, lo=1, hi=65535)  # the listening port

    def __post_init__(self) -> None:
        check_knobs(self)


@dataclass(frozen=True)
class GlooConfig:
    """gloo has no knob here: torch.distributed's defaults (its process group's timeout is
    the worker's, workloads/records.py ``pg_timeout_s``)."""
