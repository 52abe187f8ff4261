"""What a microburst did: drops per FIFO, per-source counts and timing (pure; no root).

``build_report`` turns the senders' JSON results and two FIFO snapshots into the
report of ``Microburst.report()``:

* ``target``: drops and packets at the target FIFO between the snapshots;
  ``delay_only``: true when the target dropped nothing (the burst was a delay spike,
  not a loss event); ``drops_per_burst``: target drops / bursts that ran.
* ``geometry``: the burst against its target (emu.burst_geometry: on-time in frame
  times and RTTs, excess over the buffer, whether it can drop at all).
* ``start_offsets_ms``: per source, how late its first datagram left after the
  pattern's first scheduled burst (a sender that missed whole windows counts them);
  ``start_spread_ms``: the largest minus the smallest; ``fired_late_ms``: how long
  after the start instant handing it to the senders began (> 0: it was already past,
  and no sender can have started earlier than that).
* ``alignment_ms``: per burst, the spread of the sources' first sends (statistics).
* ``crossed`` / ``drops_on_burst_paths``: the other egresses the burst paths cross;
  ``drops_elsewhere``: egresses no burst crosses (None unless ``counted`` is "all").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from emu.burst_geometry import BurstGeometry
from emu.burst_routes import BurstRoute, Egress, shared_upstream
from emu.burst_spec import MicroburstSpec

if TYPE_CHECKING:
    from emu.counters import QueueStats

SOURCE_KEYS = ("bursts", "datagrams", "eagain", "errors", "late_skipped", "cpu_s", "wall_s",
               "realtime")


@dataclass(frozen=True)
class Counts:
    """FIFO snapshots before and after a burst; ``scope``: "all" egresses or the "paths"
    nodes (None and empty: never counted)."""

    scope: str | None
    before: dict[Egress, QueueStats] | None
    after: dict[Egress, QueueStats] | None

    def deltas(self) -> tuple[dict[Egress, int], dict[Egress, int]]:
        """(drops, packets) per egress between the snapshots."""
        drops: dict[Egress, int] = {}
        sent: dict[Egress, int] = {}
        if self.before is not None and self.after is not None:
            for k, a in self.after.items():
                b = self.before.get(k)
                if b is not None:
                    drops[k] = a.drops - b.drops
                    sent[k] = a.packets - b.packets
        return drops, sent


def stats(xs: list[float]) -> dict[str, float] | None:
    """Mean, median, P99 and max of ``xs`` (None when empty)."""
    if not xs:
        return None
    xs = sorted(xs)
    return {"mean": sum(xs) / len(xs), "p50": xs[len(xs) // 2],
            "p99": xs[min(len(xs) - 1, int(0.99 * len(xs)))], "max": xs[-1]}


def timing(records: list[list[float]]) -> dict[str, Any]:
    """Start lag (first send - scheduled start) and end offset (last send - scheduled end)."""
    return {"start_lag": stats([r[1] * 1000 for r in records]),
            "end_offset": stats([r[2] * 1000 for r in records])}


def alignment(results: dict[str, dict[str, Any] | None]) -> dict[str, float] | None:
    """Per burst, the spread of the sources' first sends (ms)."""
    firsts: dict[int, list[float]] = {}
    for res in results.values():
        if res is None:
            continue
        for k, lag, _end, _n in res["records"]:
            firsts.setdefault(int(k), []).append(lag)
    spreads = [(max(v) - min(v)) * 1000 for v in firsts.values() if len(v) > 1]
    return stats(spreads)


def start_offset_ms(spec: MicroburstSpec, k: int, lag: float) -> float:
    """A sender's first datagram, sent ``lag`` s after burst ``k``'s scheduled start, as
    an offset from the pattern's first scheduled burst (ms; step-locked bursts: from burst
    ``k``'s own start, the pattern having no schedule to place it on)."""
    if spec.step_locked:
        return round(lag * 1e3, 4)
    return round((spec.window_start(k) - spec.window_start(0) + lag) * 1e3, 4)


def spread(offsets: dict[str, float | None]) -> float | None:
    """Largest minus smallest known offset (None when none is known)."""
    known = [v for v in offsets.values() if v is not None]
    return round(max(known) - min(known), 4) if known else None


def build_report(spec: MicroburstSpec, routes: tuple[BurstRoute, ...], geo: BurstGeometry,
                 counts: Counts, results: dict[str, dict[str, Any] | None],
                 stderr: dict[str, str], fired_late_s: float,
                 duration_s: float, handed_out: int = 0) -> dict[str, Any]:
    """The report of one burst (see the module docstring); ``handed_out``: the windows a
    step-locked pattern was given (it has no schedule of its own)."""
    node, _, ifname = spec.target.partition(":")
    target = (node, ifname)
    crossed = {k for r in routes for k in r.egresses}
    drops, sent = counts.deltas()
    name = ":".join
    scheduled = handed_out if spec.step_locked else len(spec.windows(duration_s))
    sources: dict[str, dict[str, Any]] = {}
    offsets: dict[str, float | None] = {}
    for r in routes:
        res = results.get(r.source)
        entry: dict[str, Any] = {"dst": r.dst, "plane": r.path.plane, "spine": r.path.spine,
                                 "hops": [name(k) for k in r.egresses]}
        offsets[r.source] = None
        if res is None:
            entry["error"] = (stderr.get(r.source) or "no result")[-800:]
        else:
            entry.update({k: res[k] for k in SOURCE_KEYS})
            entry["timing_ms"] = timing(res["records"])
            if res.get("started"):
                k, lag = res["started"]
                offsets[r.source] = start_offset_ms(spec, int(k), float(lag))
        entry["start_offset_ms"] = offsets[r.source]
        sources[r.source] = entry
    tdrops = drops.get(target)
    ran = max((s.get("bursts", 0) for s in sources.values()), default=0)
    everywhere = counts.scope == "all"
    return {
        "target": {"egress": name(target), "drops": tdrops, "packets": sent.get(target)},
        "delay_only": None if tdrops is None else tdrops == 0,
        "drops_per_burst": None if tdrops is None or not ran else round(tdrops / ran, 3),
        "mode": spec.mode,
        "geometry": geo.record(),
        "scheduled_bursts": scheduled,
        "duration_s": duration_s,
        "fired_late_ms": round(fired_late_s * 1e3, 4),
        "start_offsets_ms": offsets,
        "start_spread_ms": spread(offsets),
        "sources": sources,
        "alignment_ms": alignment(results),
        "counted": counts.scope,
        "shared_upstream": {name(k): n for k, n in shared_upstream(routes, target).items()},
        "crossed": {name(k): {"packets": sent.get(k), "drops": drops.get(k)}
                    for k in sorted(crossed)},
        "drops_on_burst_paths": {name(k): v for k, v in drops.items()
                                 if v and k in crossed and k != target},
        "drops_elsewhere": ({name(k): v for k, v in drops.items() if v and k not in crossed}
                            if everywhere else None),
        "drops_other_total": sum(v for k, v in drops.items()
                                 if k != target and (everywhere or k in crossed)),
    }

