"""Microbursts: line-rate cross traffic onto one egress FIFO (see emu.microburst).

Its senders can be armed before the run (``arm``) and fired on a common instant
(``apply(fab, armed, start)``); records say whether it dropped at its target or only
delayed. It breaks no link, so it overlaps no failure and routing does not react.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, ClassVar, Self, cast

from emu.burst_geometry import check_mode, geometry
from emu.burst_report import spread
from emu.errors import EmuError
from emu.failure_kinds.base import FailureKind, Topology
from emu.failure_kinds.registry import register
from emu.microburst import Microburst, MicroburstSpec, plan_routes, start_all
from topologies import Link

if TYPE_CHECKING:
    from emu.fabric import Fabric

STARTED_WAIT_S = 0.1  # after a burst's first window opens, for its senders to report
MAX_WAIT_S = 1.0  # a first window further away than this is not waited for


@register("microburst", via="timeline")
@dataclass(frozen=True)
class Microbursts(FailureKind):
    """Line-rate cross-traffic bursts onto one egress (see emu.microburst) until restored.

    Two ways to run it. Plain: ``apply(fab)`` starts the senders then and there (a few
    hundred ms on a busy machine) and fires them ``START_LEAD_S`` later. Armed: ``arm(fab)``
    before the run starts the senders and leaves them waiting; ``apply(fab, armed,
    start)`` hands them the common CLOCK_MONOTONIC instant ``start`` (or the instant an
    earlier ``armed.fire(t)`` gave), so bursts of several events, on several planes,
    begin together; ``disarm`` ends an armed burst that never fired.

    Bursts due together align only if every one is handed the instant before any is
    applied (``armed.fire(t)`` for each, then ``apply`` each): applying counts FIFOs and
    waits, which holds up the next burst's handing-over by a few ms (tens under load).

    ``apply`` waits (briefly) for every sender's first datagram; its handle's ``record()``
    (the timeline's apply record) holds ``burst_start``: ``armed``, the instant ``t0``
    (CLOCK_MONOTONIC s), each sender's actual start offset from it and their spread (ms),
    how late the instant was handed over, which FIFOs are counted, and the burst's
    geometry (on-time in frame times / RTTs, excess over the buffer, ``can_drop``, with a
    ``note`` when the burst can only delay). ``restore`` stops the senders and returns the
    drops measured at the target FIFO, ``delay_only`` (true: nothing dropped there),
    drops per burst, the final start offsets, and ``burst_start`` again, so that the two
    records pair up (workloads.training.metrics.failure_windows matches a restore to its apply by
    their keys).
    """

    kind: ClassVar[str] = "microburst"
    burst: MicroburstSpec

    @classmethod
    def timeline(cls, target: Annotated[str, "a string 'node:ifname'"],
                 sources: Annotated[list[str] | tuple[str, ...], "an array of host names"],
                 on_ms: float, every_ms: float | None = None, rate_mbit: float | None = None,
                 payload: int = 8000, seed: int = 0, mode: str = "any",
                 jitter_ms: float = 0.0, every_steps: int = 0) -> Self:
        """The timeline verb ``microburst``: line-rate bursts of ``on_ms`` every
        ``every_ms`` from ``sources`` onto egress ``target`` ("node:ifname", e.g.
        "p0l3:h13"), each starting up to ``jitter_ms`` after its slot (drawn from
        ``seed``); or, with ``every_steps`` instead of ``every_ms``, one burst every
        that many training steps, up to ``jitter_ms`` after the ranks resume from the
        step boundary. ``mode`` "drop" or "delay_only" makes the burst's effect at its
        target a checked promise (emu/burst_spec.py)."""
        return cls(MicroburstSpec(target, tuple(sources), on_ms, every_ms, rate_mbit,
                                  payload=payload, seed=seed, mode=mode, jitter_ms=jitter_ms,
                                  every_steps=every_steps))

    @property
    def every_steps(self) -> int:
        """Step-locked bursts: a window every this many step boundaries (0: timed)."""
        return self.burst.every_steps

    def validate(self, spec: Topology) -> None:
        check_mode(self.burst, geometry(spec, self.burst, plan_routes(spec, self.burst)))

    def links(self, spec: Topology) -> tuple[Link, ...]:
        return ()  # cross traffic: it breaks nothing, so it overlaps no failure

    def arm(self, fab: Fabric) -> Microburst:
        """Start the senders and leave them waiting for their instant (before the run)."""
        mb = Microburst(fab, self.burst)
        mb.arm()
        return mb

    def disarm(self, fab: Fabric, armed: Microburst) -> None:
        """End an armed burst (fired or not) without a report."""
        armed.stop()

    def apply(self, fab: Fabric, armed: Microburst | None = None,
              start: float | None = None) -> BurstStart:
        """Fire the burst at ``start`` (CLOCK_MONOTONIC; default: the instant ``armed``
        already has, else now + START_LEAD_S) and wait for its senders' first datagrams.
        Step-locked bursts only get ready here (armed now if they were not, their FIFOs
        counted): ``open_window`` opens each window."""
        if self.burst.step_locked:
            return self._ready_step_locked(fab, armed)
        if armed is None:
            mb = Microburst(fab, self.burst)
            start_all([mb], start)
        else:
            mb = armed
            if mb.spec != self.burst:
                raise EmuError(f"armed burst {mb!r} is not this one ({self.describe()})")
            if mb.t0 is None:
                mb.fire(start)
            elif start is not None and start != mb.t0:
                raise EmuError(f"the armed burst already fired for t0={mb.t0!r}, not "
                               f"start={start!r}")
            mb.count("paths")  # a few nodes: the next event is not held up
        try:
            return BurstStart(mb, self._started(mb, armed is not None))
        except BaseException:
            if armed is None:  # nobody else holds it
                mb.stop()
            raise

    def _ready_step_locked(self, fab: Fabric, armed: Microburst | None) -> BurstStart:
        mb = self.arm(fab) if armed is None else armed
        if mb.spec != self.burst:
            raise EmuError(f"armed burst {mb!r} is not this one ({self.describe()})")
        try:
            mb.count("paths")
        except BaseException:
            if armed is None:  # nobody else holds it
                mb.stop()
            raise
        return BurstStart(mb, {"armed": armed is not None,
                               "every_steps": self.burst.every_steps, "counted": mb.scope,
                               **self._geometry_record(mb)})

    def open_window(self, fab: Fabric, handle: object, t_resume: float) -> dict:
        """Step-locked: open the next window, ``window_start(k)`` after ``t_resume`` (the
        instant the ranks resume from its step boundary); its number and opening."""
        mb = cast(BurstStart, handle).burst
        k = len(mb.handed)
        t = t_resume + self.burst.window_start(k)
        mb.next_window(t)
        return {"burst": k, "opens": t}

    def _started(self, mb: Microburst, armed: bool) -> dict:
        assert mb.t0 is not None and mb.t_fired is not None
        first = mb.t0 + self.burst.window_start(0) - time.monotonic()
        wait = first + STARTED_WAIT_S if first < MAX_WAIT_S else 0.0
        offsets = mb.started_offsets(max(0.0, wait))
        return {"armed": armed, "t0": round(mb.t0, 6),
                "start_offsets_ms": offsets, "start_spread_ms": spread(offsets),
                "fired_late_ms": round((mb.t_fired - mb.t0) * 1e3, 4), "counted": mb.scope,
                **self._geometry_record(mb)}

    def _geometry_record(self, mb: Microburst) -> dict:
        """The burst's geometry for its apply record, with a note when it can only delay."""
        geo = mb.geometry
        rec: dict = {"geometry": geo.record()}
        if not geo.can_drop:
            rec["note"] = (f"delay-only: {geo.excess_packets:.1f} packets of excess per burst "
                           f"do not fill the {geo.queue_packets}-packet FIFO at "
                           f"{self.burst.target}")
        return rec

    def restore(self, fab: Fabric, handle: object = None) -> dict:
        if not isinstance(handle, BurstStart):  # a bare Microburst: no start record
            handle = BurstStart(cast(Microburst, handle), {})
        h = handle
        h.burst.stop()
        if self.burst.step_locked and h.burst.t0 is None:  # restored before any window
            return {"burst_start": h.started, "bursts": 0, "target_drops": None,
                    "delay_only": None, "note": "no window opened: restored at or before "
                    "the first step boundary it was due at"}
        rep = h.burst.report()
        return {"burst_start": h.started,
                "target_drops": rep["target"]["drops"],
                "target_packets": rep["target"]["packets"],
                "delay_only": rep["delay_only"],
                "drops_per_burst": rep["drops_per_burst"],
                "bursts": max((s.get("bursts", 0) for s in rep["sources"].values()),
                              default=0),
                "start_offsets_ms": rep["start_offsets_ms"],
                "start_spread_ms": rep["start_spread_ms"],
                "drops_on_burst_paths": sum(rep["drops_on_burst_paths"].values()),
                "drops_elsewhere": (None if rep["drops_elsewhere"] is None
                                    else sum(rep["drops_elsewhere"].values()))}

    def describe(self) -> dict:
        b = self.burst
        return {"kind": self.kind, "target": b.target, "sources": list(b.sources),
                "on_ms": b.on_ms, "every_ms": b.every_ms, "jitter_ms": b.jitter_ms,
                "rate_mbit": b.rate_mbit, "mode": b.mode,
                **({"every_steps": b.every_steps} if b.step_locked else {})}


@dataclass(frozen=True)
class BurstStart:
    """What ``Microbursts.apply`` returns: the running burst and the record of its start
    (``record()`` goes into the timeline's apply record; ``restore`` repeats it)."""

    burst: Microburst
    started: dict

    def record(self) -> dict:
        return {"burst_start": self.started}
