"""Router counters: interface packet counts and egress queue statistics per node.

Where the switch ports run their signals program (emu/signals.py), a packet that would
overflow the buffer is dropped by the program, ahead of the FIFO: ``with_port_drops``
adds those to the FIFO's, so "drops at a port" means the same with and without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from emu.kernel import FIFO_HANDLE, NodeKernel


@dataclass(frozen=True)
class QueueStats:
    """The bounded FIFO of one egress: what it sent and what overflowed."""

    packets: int
    bytes: int
    drops: int
    backlog: int


def interface_packets(kernel: NodeKernel) -> dict[str, tuple[int, int]]:
    """(rx_packets, tx_packets) of every interface of a node, from one netlink dump."""
    out = {}
    for link in kernel.ipr.get_links():
        stats = link.get_attr("IFLA_STATS64")
        out[link.get_attr("IFLA_IFNAME")] = (stats["rx_packets"], stats["tx_packets"])
    return out


def queue_stats(kernel: NodeKernel) -> dict[str, QueueStats]:
    """The FIFO statistics of every egress queue of a node (drops are buffer overflows;
    a port that trims has a byte FIFO: emu/signals.py)."""
    names = {i: n for n, i in kernel.ifindex.items()}
    out = {}
    for q in kernel.ipr.get_qdiscs():
        if q.get_attr("TCA_KIND") not in ("pfifo", "bfifo") or q["handle"] != FIFO_HANDLE:
            continue
        stats2 = q.get_attr("TCA_STATS2")
        basic = stats2.get_attr("TCA_STATS_BASIC")
        queue = stats2.get_attr("TCA_STATS_QUEUE")
        out[names[q["index"]]] = QueueStats(basic["packets"], basic["bytes"], queue["drops"],
                                            queue["backlog"])
    return out


def with_port_drops(stats: Mapping[tuple[str, str], QueueStats],
                    program: Mapping[tuple[str, str], object]) -> dict[tuple[str, str], QueueStats]:
    """``stats`` ((node, ifname) -> FIFO) with each port's program drops added
    (``program``: emu.signals.SignalStats by port, from ``Fabric.signal_stats``)."""
    out = {}
    for port, q in stats.items():
        extra = int(getattr(program.get(port), "dropped", 0))
        out[port] = replace(q, drops=q.drops + extra) if extra else q
    return out
