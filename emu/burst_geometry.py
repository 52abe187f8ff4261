"""Burst geometry: will a microburst overflow its target FIFO, and how long must it be to?

A burst brings ``arrival`` Mbit/s to a target egress that drains ``target`` Mbit/s
into a FIFO of ``queue_packets`` frames (pure arithmetic; no root)::

    excess_bytes   = (arrival - target) * 1e6 / 8 * on_s      (0 if arrival <= target)
    excess_packets = excess_bytes / frame_bytes
    buffer_bytes   = queue_packets * frame_bytes
    drops          ~ max(0, excess_packets - queue_packets)    (the queue starts empty)

A burst whose excess stays below the buffer only delays (a queue of up to
``excess_packets`` frames: ``peak_delay_ms``); above it, the FIFO overflows. The
measured drops run a few frames above this estimate (the senders' and the target's
HTB let a short burst through at once) and above it again when other traffic shares
the port, so the estimate errs on the side of "does not drop". Dimensionless figures
(the calibration's terms): on-time in the target's frame times and, if an RTT is
known, in RTTs; excess over the buffer.

``min_on_ms`` sizes a burst that drops (excess = ``margin`` x the buffer),
``max_delay_on_ms`` one that only delays (excess = ``fill`` x the buffer);
``sized_burst`` builds the MicroburstSpec for a fabric; ``geometry`` reads a spec's
geometry off a fabric and ``check_mode`` holds a spec to its ``mode``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from emu.burst_routes import (
    BurstRoute,
    Egress,
    egress_link,
    parse_target,
    plan_routes,
    route_frame_bytes,
)
from emu.burst_spec import MicroburstError, MicroburstSpec, check_number

if TYPE_CHECKING:
    from topologies import MultiPlaneClos, ScaleAcross

DROP_MARGIN = 1.5  # a burst sized to drop brings this many buffers of excess
DELAY_FILL = 0.5  # a delay-only burst fills at most this fraction of the buffer


@dataclass(frozen=True)
class BurstGeometry:
    """One burst against its target FIFO (see the module docstring for the formulas).

    ``arrival_mbit``: what all ``sources`` together bring to the target while they
    burst; ``target_mbit`` and ``queue_packets``: the target egress's rate and FIFO;
    ``frame_bytes``: one burst frame on the wire; ``every_ms`` (optional): the period
    (the shortest one, if jittered);
    ``rtt_ms`` (optional): an RTT of the traffic through the target.
    """

    sources: int
    arrival_mbit: float
    target_mbit: float
    queue_packets: int
    frame_bytes: int
    on_ms: float
    every_ms: float | None = None
    rtt_ms: float | None = None

    def __post_init__(self) -> None:
        for name in ("sources", "queue_packets", "frame_bytes"):
            v = getattr(self, name)
            if type(v) is not int or v < 1:
                raise MicroburstError(f"{name}={v!r} is invalid: must be an integer >= 1")
        for name in ("arrival_mbit", "target_mbit", "on_ms"):
            check_number(name, getattr(self, name), 0.0)
        for name in ("every_ms", "rtt_ms"):
            if getattr(self, name) is not None:
                check_number(name, getattr(self, name), 0.0)

    @property
    def frame_ms(self) -> float:
        """One frame's transmission time at the target's rate (ms)."""
        return self.frame_bytes * 8 / (self.target_mbit * 1e3)

    @property
    def excess_mbit(self) -> float:
        """Arrival above the drain rate (<= 0: the queue never grows)."""
        return self.arrival_mbit - self.target_mbit

    @property
    def excess_bytes(self) -> float:
        return max(0.0, self.excess_mbit) * 1e6 / 8 * self.on_ms / 1e3

    @property
    def excess_packets(self) -> float:
        return self.excess_bytes / self.frame_bytes

    @property
    def buffer_bytes(self) -> int:
        return self.queue_packets * self.frame_bytes

    @property
    def excess_over_buffer(self) -> float:
        """Excess of one burst in buffers (> 1: the FIFO overflows)."""
        return self.excess_bytes / self.buffer_bytes

    @property
    def can_drop(self) -> bool:
        return self.excess_packets > self.queue_packets

    @property
    def expected_drops(self) -> float:
        """Frames one burst overflows by, starting from an empty queue."""
        return max(0.0, self.excess_packets - self.queue_packets)

    @property
    def on_frames(self) -> float:
        """On-time in the target's frame times."""
        return self.on_ms / self.frame_ms

    @property
    def on_rtts(self) -> float | None:
        return None if self.rtt_ms is None else self.on_ms / self.rtt_ms

    @property
    def peak_delay_ms(self) -> float:
        """Queueing delay at the target at the end of a burst (the queue it leaves)."""
        return min(self.excess_packets, self.queue_packets) * self.frame_ms

    @property
    def queue_empties(self) -> bool | None:
        """Whether the queue a burst leaves drains before the next burst (None: no period)."""
        if self.every_ms is None:
            return None
        return self.every_ms - self.on_ms >= self.peak_delay_ms

    def record(self) -> dict[str, Any]:
        """The geometry as a JSON-able record (rounded for reading)."""

        def r(x: float | None) -> float | None:
            return None if x is None else round(x, 4)

        return {"sources": self.sources, "arrival_mbit": r(self.arrival_mbit),
                "target_mbit": r(self.target_mbit), "queue_packets": self.queue_packets,
                "frame_bytes": self.frame_bytes, "on_ms": r(self.on_ms),
                "every_ms": r(self.every_ms), "on_frames": r(self.on_frames),
                "on_rtts": r(self.on_rtts), "excess_packets": r(self.excess_packets),
                "excess_over_buffer": r(self.excess_over_buffer),
                "expected_drops": r(self.expected_drops), "can_drop": self.can_drop,
                "peak_delay_ms": r(self.peak_delay_ms), "queue_empties": self.queue_empties}


def _excess_mbit(target_mbit: float, sources: int, source_mbit: float) -> float:
    check_number("target_mbit", target_mbit, 0.0)
    check_number("source_mbit", source_mbit, 0.0)
    if type(sources) is not int or sources < 1:
        raise MicroburstError(f"sources={sources!r} is invalid: must be an integer >= 1")
    return sources * source_mbit - target_mbit


def min_on_ms(target_mbit: float, queue_packets: int, sources: int, source_mbit: float,
              frame_bytes: int, margin: float = DROP_MARGIN) -> float:
    """The shortest on-time (ms, rounded up to 0.1 ms) whose excess is ``margin`` (> 1)
    buffers: a burst that overflows the target FIFO by ``margin - 1`` buffers.

    MicroburstError if the sources cannot outrun the target at any on-time.
    """
    excess = _excess_mbit(target_mbit, sources, source_mbit)
    if type(margin) is bool or not isinstance(margin, int | float) or not (
            1 < margin < math.inf):
        raise MicroburstError(f"margin={margin!r} is invalid: must be a number > 1 (the "
                              "excess of a dropping burst in buffers)")
    if excess <= 0:
        raise MicroburstError(
            f"{sources} sources at {source_mbit:g} Mbit/s bring {sources * source_mbit:g} "
            f"Mbit/s to a {target_mbit:g} Mbit/s port: no burst of any length overflows it; "
            "add sources or raise their rate")
    on = margin * queue_packets * frame_bytes * 8 / (excess * 1e3)
    return math.ceil(round(on * 10, 6)) / 10


def max_delay_on_ms(target_mbit: float, queue_packets: int, sources: int, source_mbit: float,
                    frame_bytes: int, fill: float = DELAY_FILL) -> float:
    """The longest on-time (ms, rounded down to 0.1 ms) whose excess fills ``fill`` (in
    (0, 1)) of the buffer: a delay spike that never overflows (inf: none ever does)."""
    excess = _excess_mbit(target_mbit, sources, source_mbit)
    if type(fill) is bool or not isinstance(fill, int | float) or not 0 < fill < 1:
        raise MicroburstError(f"fill={fill!r} is invalid: must be a fraction in (0, 1) of the "
                              "buffer a delay-only burst may fill")
    if excess <= 0:
        return math.inf
    on = fill * queue_packets * frame_bytes * 8 / (excess * 1e3)
    return math.floor(round(on * 10, 6)) / 10


def arrival_mbit(topo: MultiPlaneClos | ScaleAcross, routes: tuple[BurstRoute, ...], target: Egress,
                 rate_mbit: float | None) -> float:
    """What the routed sources bring to ``target`` while bursting (Mbit/s).

    Each source sends at ``rate_mbit`` (None: its NIC's line rate), no faster than the
    slowest link before the target; sources that reach the target's node over the same
    link share that link's rate.
    """
    feeders: dict[Egress, float] = {}
    for r in routes:
        before = r.before(target)
        rate = min(egress_link(topo, e).spec.rate_mbit for e in before)
        if rate_mbit is not None:
            rate = min(rate, rate_mbit)
        feeders[before[-1]] = feeders.get(before[-1], 0.0) + rate
    return sum(min(v, egress_link(topo, e).spec.rate_mbit) for e, v in feeders.items())


def geometry(topo: MultiPlaneClos | ScaleAcross, spec: MicroburstSpec,
             routes: tuple[BurstRoute, ...] | None = None,
             rtt_ms: float | None = None) -> BurstGeometry:
    """The geometry of ``spec``'s longest burst on ``topo`` (routes: ``plan_routes``'s)."""
    target = parse_target(topo, spec.target)
    routes = plan_routes(topo, spec) if routes is None else routes
    link = egress_link(topo, target)
    frames = [route_frame_bytes(r, spec.payload) for r in routes]
    # a jittered pattern's closest bursts decide whether its queue empties between them
    # (step-locked bursts: the steps decide, unknown here)
    every = (spec.every_ms - spec.jitter_ms
             if spec.schedule is None and spec.every_ms is not None else None)
    return BurstGeometry(len(routes), arrival_mbit(topo, routes, target, spec.rate_mbit),
                         link.spec.rate_mbit, link.spec.queue_packets,
                         round(sum(frames) / len(frames)), spec.longest_on_ms, every, rtt_ms)


def check_mode(spec: MicroburstSpec, geo: BurstGeometry) -> None:
    """MicroburstError if ``spec.mode`` promises what ``geo`` cannot do ("drop" that
    cannot overflow, "delay_only" that can), naming the on-time that would."""
    if spec.mode == "any" or (spec.mode == "drop") == geo.can_drop:
        return
    args = (geo.target_mbit, geo.queue_packets, geo.sources,
            geo.arrival_mbit / geo.sources, geo.frame_bytes)
    what = (f"{geo.excess_packets:.1f} packets of excess per burst against a "
            f"{geo.queue_packets}-packet FIFO at {spec.target}")
    if spec.mode == "drop":
        try:
            hint = f"on_ms >= {min_on_ms(*args, margin=DROP_MARGIN):g} drops with margin " \
                   f"{DROP_MARGIN:g}"
        except MicroburstError as e:
            hint = str(e)
        raise MicroburstError(f"mode='drop' but on_ms={spec.longest_on_ms:g} cannot drop: "
                              f"{what}; {hint}, or use mode='delay_only' or 'any'")
    hint = f"on_ms <= {max_delay_on_ms(*args, fill=DELAY_FILL):g} fills half of it"
    raise MicroburstError(f"mode='delay_only' but on_ms={spec.longest_on_ms:g} overflows: "
                          f"{what}; {hint}, or use mode='drop' or 'any'")


def sized_burst(topo: MultiPlaneClos | ScaleAcross, target: str, sources: tuple[str, ...], *,
                mode: str = "drop", margin: float = DROP_MARGIN, fill: float = DELAY_FILL,
                every_ms: float | None = None, rate_mbit: float | None = None,
                payload: int = 8000, seed: int = 0) -> MicroburstSpec:
    """A periodic burst from ``sources`` onto ``target`` sized for ``mode``.

    ``"drop"``: the shortest on-time with ``margin`` buffers of excess (``min_on_ms``);
    ``"delay_only"``: the longest that fills ``fill`` of the buffer (``max_delay_on_ms``;
    MicroburstError if no length overflows, which makes every length delay-only: then
    give the on-time yourself). ``every_ms`` (default): the on-time plus twice the
    drain time of a full FIFO, rounded up to 10 ms, so the queue empties between bursts.
    The spec's ``mode`` is ``mode``: it is checked again against the fabric when run.
    """
    if mode not in ("drop", "delay_only"):
        raise MicroburstError(f"mode={mode!r} is invalid for sizing: must be 'drop' or "
                              "'delay_only'")
    probe = MicroburstSpec(target, tuple(sources), 1.0, 2.0, rate_mbit, payload=payload,
                           seed=seed)
    geo = geometry(topo, probe)
    args = (geo.target_mbit, geo.queue_packets, geo.sources, geo.arrival_mbit / geo.sources,
            geo.frame_bytes)
    if mode == "drop":
        on = min_on_ms(*args, margin=margin)
    else:
        on = max_delay_on_ms(*args, fill=fill)
        if math.isinf(on):
            raise MicroburstError(
                f"{geo.sources} sources bring {geo.arrival_mbit:g} Mbit/s to a "
                f"{geo.target_mbit:g} Mbit/s port: every burst is delay-only; choose on_ms "
                "yourself (MicroburstSpec(..., mode='delay_only'))")
        if on <= 0:
            raise MicroburstError(f"fill={fill!r} of a {geo.queue_packets}-packet FIFO is "
                                  "less than 0.1 ms of excess: raise fill")
    if every_ms is None:
        drain = geo.queue_packets * geo.frame_ms
        every_ms = math.ceil((on + 2 * drain) / 10) * 10
    return MicroburstSpec(target, tuple(sources), on, every_ms, rate_mbit, payload=payload,
                          seed=seed, mode=mode)
