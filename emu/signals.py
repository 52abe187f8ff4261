"""Congestion signals at the fabric's ports, made real: ECN marking and packet trimming
in the kernel's path (topologies/signals.py says what; this module does it).

One eBPF object (emu/bpf/port.c, built from source: emu/bpf/build.py) is loaded per
fabric; its ``port_egress`` program is attached (tc clsact + cls_bpf, direct action) at
the egress of every switch port, before the port's HTB + FIFO, and ``nic_ingress`` at
the ingress of every host port (the NIC copies an IP CE mark into the transport header).
Each attachment's classid is the port's index in the object's ``ports`` map, which
holds the port's rate, buffer, ECN ramp, virtual queue and counters. No packet passes
through userspace.

``PortSignals(fabric)``: ``attach(signals)`` once the fabric's queues exist, ``apply``
to change what the ports do between runs (the map and the FIFO limits: an ablation runs
on one fabric), ``stats()`` the counters (marked, trimmed, dropped, CE seen by NICs),
``close()`` at teardown. ``mechanism()`` says what this kernel uses.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pyroute2.netlink.rtnl.tcmsg import plugins as tc_plugins
from pyroute2.netlink.rtnl.tcmsg import sched_pfifo

from emu.bpf.build import object_path
from emu.bpf.libbpf import BPF_F_LOCK, BpfObject
from emu.errors import EmuError
from emu.kernel import FIFO_HANDLE, HTB_DATA, NodeKernel
from topologies import LinkSpec
from topologies.signals import PLAIN, PortParams, SwitchSignals

TC_H_CLSACT_EGRESS = 0xFFFFFFF3
TC_H_CLSACT_INGRESS = 0xFFFFFFF2
MAX_PORTS = 4096  # the map's size (port.c)
# struct port (port.c): lock, flags, rate, cap, kmin, kmax, pmax, pad, vq, last_ns,
# packets, marked, trimmed, dropped, ce_seen, vq_max
PORT = struct.Struct("=IIQQQQIIQQQQQQQQ")
P_MARK, P_TRIM = 1, 2
MECHANISM = "tc-bpf"  # clsact + cls_bpf with a virtual queue per port
# pyroute2 encodes a bfifo's options only if it knows the kind; they are a pfifo's (the
# kernel's struct tc_fifo_qopt: the limit, here in bytes)
tc_plugins.setdefault("bfifo", sched_pfifo)


@dataclass(frozen=True)
class SignalStats:
    """One port's counters since the fabric was built."""

    packets: int  # seen by the port's program
    marked: int  # ECN CE marks set
    trimmed: int  # payloads cut (the header went on, ahead of the data)
    dropped: int  # overflows the program dropped (not trimmable)
    ce_seen: int  # host ports: CE-marked packets the NIC passed up
    vq_max: int  # the deepest virtual queue, bytes

    def minus(self, before: SignalStats) -> SignalStats:
        return SignalStats(self.packets - before.packets, self.marked - before.marked,
                           self.trimmed - before.trimmed, self.dropped - before.dropped,
                           self.ce_seen - before.ce_seen, self.vq_max)


Port = tuple[str, str]  # (node, ifname)


def _value(p: PortParams) -> bytes:
    flags = (P_MARK if p.mark else 0) | (P_TRIM if p.trim else 0)
    return PORT.pack(0, flags, p.rate_bytes_s, p.cap_bytes, p.kmin_bytes, p.kmax_bytes,
                     min(int(p.pmax * 0xFFFFFFFF), 0xFFFFFFFF), 0, 0, 0, 0, 0, 0, 0, 0, 0)


def _fifo_kind(signals: SwitchSignals) -> str:
    """The data FIFO's qdisc at a switch port under ``signals`` (topologies/signals.py)."""
    return "bfifo" if signals.trim else "pfifo"


class PortSignals:
    """The signals of one fabric's ports (see the module docstring)."""

    def __init__(self, kernels: Mapping[str, NodeKernel], switch_ports: Mapping[Port, LinkSpec],
                 host_ports: Iterable[Port], mtu: int) -> None:
        self.kernels = kernels
        self.switch_ports = dict(switch_ports)
        self.host_ports = list(host_ports)
        self.mtu = mtu
        ids = list(self.switch_ports) + self.host_ports
        if len(ids) >= MAX_PORTS:
            raise EmuError(f"{len(ids)} ports: the ports' program serves at most "
                           f"{MAX_PORTS - 1}")
        self.ids: dict[Port, int] = {port: i + 1 for i, port in enumerate(ids)}
        self.obj: BpfObject | None = None
        self.signals = PLAIN

    def __repr__(self) -> str:
        return (f"PortSignals({self.signals.label}, switch_ports={len(self.switch_ports)}, "
                f"attached={self.obj is not None})")

    def attach(self, signals: SwitchSignals) -> None:
        """Load the program and attach it to every port, with ``signals``' numbers."""
        self.obj = BpfObject.load(str(object_path()))
        egress, ingress = self.obj.prog_fd("port_egress"), self.obj.prog_fd("nic_ingress")
        for (node, ifname), pid in self.ids.items():
            k = self.kernels[node]
            idx = k.ifindex[ifname]
            k.ipr.tc("add", "clsact", idx)
            if (node, ifname) in self.switch_ports:
                k.ipr.tc("add-filter", "bpf", idx, ":1", fd=egress, name="port_egress",
                         parent=TC_H_CLSACT_EGRESS, classid=pid, direct_action=True)
            else:
                k.ipr.tc("add-filter", "bpf", idx, ":1", fd=ingress, name="nic_ingress",
                         parent=TC_H_CLSACT_INGRESS, classid=pid, direct_action=True)
                self.obj.update("ports", pid, PORT.pack(*([0] * 16)))
        self.apply(signals)

    def apply(self, signals: SwitchSignals) -> None:
        """Every switch port as ``signals`` says: its program's numbers and its FIFO's
        limit (call it while the fabric is idle: the virtual queues start empty, and a FIFO
        whose kind changes (bytes with trimming, packets without) starts its counters
        anew)."""
        if self.obj is None:
            raise EmuError("PortSignals.apply before attach")
        for port, spec in self.switch_ports.items():
            p = signals.port(spec, self.mtu)
            self.obj.update("ports", self.ids[port], _value(p))
            node, ifname = port
            k = self.kernels[node]
            idx = k.ifindex[ifname]
            kind, limit = ("bfifo", p.fifo_bytes) if p.fifo_bytes else ("pfifo", p.fifo_packets)
            if kind != _fifo_kind(self.signals):  # the kernel changes a qdisc of its kind only
                k.ipr.tc("del", index=idx, handle=FIFO_HANDLE, parent=HTB_DATA)
                k.ipr.tc("replace", kind, idx, FIFO_HANDLE, parent=HTB_DATA, limit=limit)
            else:
                k.ipr.tc("change", kind, idx, FIFO_HANDLE, parent=HTB_DATA, limit=limit)
        self.signals = signals

    def program_ids(self) -> tuple[int, int]:
        """The kernel's ids of the ports' two programs (egress, NIC ingress): a teardown
        leaves neither loaded."""
        if self.obj is None:
            raise EmuError("PortSignals.program_ids before attach")
        return self.obj.prog_id("port_egress"), self.obj.prog_id("nic_ingress")

    def stats(self) -> dict[Port, SignalStats]:
        """Every port's counters (switch ports and host ports)."""
        out: dict[Port, SignalStats] = {}
        if self.obj is None:
            return out
        for port, pid in self.ids.items():
            v = PORT.unpack(self.obj.lookup("ports", pid, PORT.size, BPF_F_LOCK))
            out[port] = SignalStats(v[10], v[11], v[12], v[13], v[14], v[15])
        return out

    def close(self) -> None:
        if self.obj is not None:
            self.obj.close()
            self.obj = None


def totals(stats: Mapping[Port, SignalStats]) -> dict[str, int]:
    """Marked, trimmed, dropped and CE seen, summed over ports."""
    return {k: sum(getattr(s, k) for s in stats.values())
            for k in ("marked", "trimmed", "dropped", "ce_seen")}


def signal_record(signals: SwitchSignals, before: Mapping[Port, SignalStats],
                  after: Mapping[Port, SignalStats]) -> dict[str, object]:
    """A run's record of its switch ports: what they did (``signals``: its label and
    settings, the mechanism) and, over the run, the packets the ports' programs saw and the
    marked, trimmed, dropped and CE-seen totals, with every port that did any of it
    ("node:ifname" -> its counts)."""
    ports: dict[str, dict[str, int]] = {}
    for port, s in after.items():
        d = s.minus(before[port]) if port in before else s
        counts = {k: getattr(d, k) for k in ("marked", "trimmed", "dropped", "ce_seen")
                  if getattr(d, k)}
        if counts:
            ports[f"{port[0]}:{port[1]}"] = counts
    total = {k: sum(c.get(k, 0) for c in ports.values())
             for k in ("marked", "trimmed", "dropped", "ce_seen")}
    total["packets"] = sum(s.packets - (before[p].packets if p in before else 0)
                           for p, s in after.items())
    return {"signals": signals.label, "settings": signals.as_dict(),
            "mechanism": MECHANISM if after else "none", **total, "ports": ports}
