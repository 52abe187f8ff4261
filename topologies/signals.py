"""Congestion signals from the switches: what each fabric port marks, trims and buffers.

``SwitchSignals`` is one experiment's choice for every switch port of its fabric (pure
data; emu/signals.py makes it real, in the kernel's path):

- ``ecn``: an ECN-capable data packet entering a port whose queue holds more than
  ``ecn_kmin`` packets' worth of bytes is marked CE with a probability rising linearly
  to ``ecn_pmax`` at ``ecn_kmax``, and always above it (RED's ramp as DCQCN configures
  switches; ``ecn_kmin == ecn_kmax`` is a step, as DCTCP's K);
- ``trim``: a data packet that would overflow the port's buffer is cut to its transport
  header and forwarded ahead of the data (the priority class) if its sender allowed it
  (MRC: packet trimming as UEC switches do); any other packet that would overflow is
  dropped, as today;
- ``lossless``: the FIFO is ``lossless_queue_packets`` deep, so it never drops: what PFC
  gives RoCE (pause frames are not emulated; the deep buffer stands in for them, so a
  full port delays its senders instead of dropping their packets). Marking is what keeps
  its queues short (DCQCN), so ``lossless`` needs ``ecn``.

``PLAIN`` (the default) is today's fabric: a bounded FIFO that drops what does not fit.
``port(spec, mtu)`` turns the choice into one port's numbers (bytes, at its rate).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from topologies.clos import LinkSpec
from topologies.validate import InvalidValue, check_int, check_number

FRAME_EXTRA = 14  # the Ethernet header: a frame of an MTU-sized packet is mtu + 14 bytes
# With trimming, the kernel's FIFO holds this many times the buffer's bytes: the buffer
# is enforced ahead of it by the port's program, which trims or drops what would overflow,
# so the FIFO behind it only absorbs the difference between its virtual queue and the
# real one (a rate the HTB class does not quite reach). It is a byte FIFO (bfifo), as the
# program's buffer is bytes: a FIFO of packets fills with small ones (MRC's tail probes
# queue as data) long before the bytes reach the buffer, and then drops trimmable data
# the program never saw overflow (measured in the spraying claim's all-to-all: 1.1-1.3k
# FIFO drops, no trim, ~1.2-2.9 kB per packet in the data FIFOs).
TRIM_FIFO_SLACK = 2


@dataclass(frozen=True)
class PortParams:
    """One port's signals as numbers: what the port's program and FIFO are given."""

    mark: bool
    trim: bool
    rate_bytes_s: int  # what the port drains (its link rate)
    cap_bytes: int  # the buffer (trimming or dropping above it, with ``trim``)
    kmin_bytes: int
    kmax_bytes: int
    pmax: float
    fifo_packets: int  # the kernel FIFO's limit in packets (a pfifo), 0 with fifo_bytes
    fifo_bytes: int = 0  # with ``trim``: its limit in bytes (a bfifo)


@dataclass(frozen=True)
class SwitchSignals:
    """What every switch port of a fabric does under congestion (see the module)."""

    ecn: bool = False
    # packets (of MTU frames) queued where marking starts, and where every packet is
    # marked: about a quarter of a BDP and one BDP of the emulated fabrics (~9 frames of a
    # host's two ports; the time scale keeps the BDP in packets), as DCTCP's K and
    # DCQCN's Kmin/Kmax are set against the BDP
    ecn_kmin: float = 2.0
    ecn_kmax: float = 10.0
    ecn_pmax: float = 0.25  # the marking probability at ecn_kmax
    trim: bool = False
    lossless: bool = False
    lossless_queue_packets: int = 100_000

    def __post_init__(self) -> None:
        for name in ("ecn", "trim", "lossless"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidValue(name, getattr(self, name), "true or false")
        check_number("ecn_kmin", self.ecn_kmin, 0.0)
        check_number("ecn_kmax", self.ecn_kmax, 0.0)
        check_number("ecn_pmax", self.ecn_pmax, 0.0, 1.0, lo_open=True)
        check_int("lossless_queue_packets", self.lossless_queue_packets, 1, 10_000_000)
        if self.ecn_kmax < self.ecn_kmin:
            raise InvalidValue("ecn_kmax", self.ecn_kmax,
                               f"at least ecn_kmin={self.ecn_kmin!r}")
        if self.lossless and self.trim:
            raise InvalidValue("trim", self.trim, "false when lossless = true (a lossless "
                               "port never overflows: there is nothing to trim)")
        if self.lossless and not self.ecn:
            raise InvalidValue("ecn", self.ecn, "true when lossless = true (PFC fabrics run "
                               "ECN marking, DCQCN's signal; without it the queues only grow)")

    @property
    def active(self) -> bool:
        """Whether the ports need their program (anything beyond a plain FIFO)."""
        return self.ecn or self.trim

    @property
    def label(self) -> str:
        """A short name of the choice: plain, ecn, trim, ecn+trim, lossless+ecn."""
        parts = (["lossless"] if self.lossless else []) + \
            [n for n in ("ecn", "trim") if getattr(self, n)]
        return "+".join(parts) or "plain"

    def port(self, spec: LinkSpec, mtu: int) -> PortParams:
        """The numbers of one port with link ``spec`` (bytes; frames of ``mtu`` + 14)."""
        frame = mtu + FRAME_EXTRA
        queue = self.lossless_queue_packets if self.lossless else spec.queue_packets
        cap = queue * frame
        return PortParams(
            mark=self.ecn, trim=self.trim,
            rate_bytes_s=int(spec.rate_mbit * 1e6 / 8),
            cap_bytes=cap,
            kmin_bytes=int(self.ecn_kmin * frame), kmax_bytes=int(self.ecn_kmax * frame),
            pmax=self.ecn_pmax, fifo_packets=0 if self.trim else min(queue, 2**31 - 1),
            fifo_bytes=min(cap * TRIM_FIFO_SLACK, 2**31 - 1) if self.trim else 0)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


PLAIN = SwitchSignals()
# MRC's production form (UEC-style switches): ECN marking and trimming.
MRC_SWITCHES = SwitchSignals(ecn=True, trim=True)
# RoCE's production form: a lossless fabric (PFC) with ECN marking for DCQCN.
ROCE_SWITCHES = SwitchSignals(ecn=True, lossless=True)
