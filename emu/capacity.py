"""Whether this machine can hold a fabric, estimated before anything is built.

A fabric costs one network namespace, one node shell process and a little kernel
memory per node, two veth ends per link and, under BGP, three FRR daemons (zebra,
bfdd, bgpd) per switch. Measured on this development machine (2026-12-01, a
32-node fabric, MemAvailable before and after the build): 0.62 MB and 1 process per
node with static routes, 10.6 MB and 2.5 processes per node under BGP (about 20 MB
and 3 daemons per switch). The estimate uses those figures with a margin and is
compared with what the kernel and the machine allow now: available memory, the
process limit (``pid_max`` and ``RLIMIT_NPROC``) and ``user.max_net_namespaces``.
A fabric that does not fit is refused with the estimate and the limit it exceeds,
instead of failing half-built (or taking the machine down) after minutes.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass

from emu.errors import EmuError
from topologies import MultiPlaneClos, ScaleAcross

MB = 1 << 20
# Per-node and per-switch costs (measured, see the module docstring) with a margin
NODE_BYTES = 2 * MB  # namespace, node shell, neighbour and route tables, HTB qdiscs
LINK_BYTES = 64 << 10  # a veth pair with its queues
FRR_BYTES_PER_SWITCH = 32 * MB  # zebra + bfdd + bgpd
FRR_PROCS_PER_SWITCH = 3
MEMORY_SHARE = 0.8  # of what is available: the workload (drivers, torch workers) needs the rest


@dataclass(frozen=True)
class Estimate:
    """What a fabric needs: namespaces, veth pairs, processes and memory."""

    namespaces: int
    veth_pairs: int
    processes: int
    memory_bytes: int

    def describe(self) -> str:
        return (f"{self.namespaces} namespaces, {self.veth_pairs} veth pairs, "
                f"{self.processes} processes, {self.memory_bytes / MB:.0f} MB")


def _clos_counts(dc: MultiPlaneClos) -> tuple[int, int, int]:
    """(hosts, switches, links) of one DC, by arithmetic: materialising the node and link
    lists of a large fabric takes minutes, which is what this check is there to save."""
    hosts = dc.leaves * dc.hosts_per_leaf
    switches = dc.planes * (dc.leaves + dc.spines)
    links = hosts * dc.planes + dc.planes * dc.leaves * dc.spines
    return hosts, switches, links


def counts(spec: MultiPlaneClos | ScaleAcross) -> tuple[int, int, int]:
    """(hosts, switches, links) of ``spec`` (DCI routers are switches)."""
    if isinstance(spec, MultiPlaneClos):
        return _clos_counts(spec)
    hosts = switches = links = 0
    for dc in spec.dcs:
        h, s, n = _clos_counts(dc)
        hosts, switches, links = hosts + h, switches + s, links + n
        links += spec.planes * dc.spines  # spine <-> DCI router
    d = len(spec.dcs)
    switches += spec.planes * d  # a DCI router per DC and plane
    links += spec.planes * d * (d - 1) // 2  # long-haul: every DC pair, per plane
    return hosts, switches, links


def estimate(spec: MultiPlaneClos | ScaleAcross, bgp: bool) -> Estimate:
    """The resources fabric ``spec`` takes (``bgp``: FRR in every switch)."""
    hosts, all_switches, links = counts(spec)
    nodes = hosts + all_switches
    switches = all_switches if bgp else 0
    return Estimate(namespaces=nodes, veth_pairs=links,
                    processes=nodes + FRR_PROCS_PER_SWITCH * switches,
                    memory_bytes=nodes * NODE_BYTES + links * LINK_BYTES
                    + switches * FRR_BYTES_PER_SWITCH)


@dataclass(frozen=True)
class Limits:
    """What this machine allows now."""

    memory_bytes: int  # MemAvailable
    processes: int  # process slots left: min(pid_max, RLIMIT_NPROC) - running
    namespaces: int  # user.max_net_namespaces


def machine_limits() -> Limits:
    """Read the limits from /proc and getrlimit."""
    avail = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
                break
    with open("/proc/sys/kernel/pid_max") as f:
        pid_max = int(f.read())
    soft = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    nproc = pid_max if soft == resource.RLIM_INFINITY else min(pid_max, soft)
    running = sum(1 for e in os.scandir("/proc") if e.name.isdigit())
    try:
        with open("/proc/sys/user/max_net_namespaces") as f:
            max_ns = int(f.read())
    except OSError:
        max_ns = 1 << 31
    return Limits(avail, max(0, nproc - running), max_ns)


def check(spec: MultiPlaneClos | ScaleAcross, bgp: bool, limits: Limits | None = None) -> Estimate:
    """The estimate of ``spec``; EmuError naming the estimate and the exceeded limit if this
    machine cannot hold it."""
    est = estimate(spec, bgp)
    lim = limits or machine_limits()
    problems = []
    if est.memory_bytes > MEMORY_SHARE * lim.memory_bytes:
        problems.append(f"{est.memory_bytes / MB:.0f} MB of memory, more than "
                        f"{MEMORY_SHARE:.0%} of the {lim.memory_bytes / MB:.0f} MB available")
    if est.processes > lim.processes:
        problems.append(f"{est.processes} processes, more than the {lim.processes} this "
                        "machine has left (pid_max, RLIMIT_NPROC)")
    if est.namespaces > lim.namespaces:
        problems.append(f"{est.namespaces} network namespaces, more than "
                        f"user.max_net_namespaces={lim.namespaces}")
    if problems:
        raise EmuError(f"this fabric needs about {est.describe()}: "
                       + "; ".join(problems) + ". Use fewer planes, spines, leaves or hosts "
                       "per leaf" + (", or static routes" if bgp else ""))
    return est
