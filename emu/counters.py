"""Router counters: interface packet counts and egress queue statistics per node."""

from __future__ import annotations

from dataclasses import dataclass

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
    """The FIFO statistics of every egress queue of a node (drops are buffer overflows)."""
    names = {i: n for n, i in kernel.ifindex.items()}
    out = {}
    for q in kernel.ipr.get_qdiscs():
        if q.get_attr("TCA_KIND") != "pfifo" or q["handle"] != FIFO_HANDLE:
            continue
        stats2 = q.get_attr("TCA_STATS2")
        basic = stats2.get_attr("TCA_STATS_BASIC")
        queue = stats2.get_attr("TCA_STATS_QUEUE")
        out[names[q["index"]]] = QueueStats(basic["packets"], basic["bytes"], queue["drops"],
                                            queue["backlog"])
    return out
