"""Claim 3's tables and figures from the measurements' record (dblp_measure.measure):
rounds per setting, DBLP's factors over each baseline, the map and its fabric points,
the training. The verdicts are dblp_report.py's."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from commands.reproduce.claim import Figure, Table
from commands.reproduce.verdict import spread

NAMES = {"mrc": "reliable MRC", "tcp": "kernel TCP", "mlt": "MLT-style fixed",
         "dblp": "DBLP", "gloo": "gloo/TCP"}
# round baseline -> its training counterpart
TRAINING_OF = {"mlt": "mlt", "tcp": "gloo", "mrc": "mrc"}


def of(rows: Sequence[Mapping[str, Any]], system: str, key: str) -> list[float]:
    """``key`` of ``system``'s rows, by repetition."""
    return [r[key] for r in sorted(rows, key=lambda r: r["rep"]) if r["system"] == system]


def cell(xs: Sequence[float], digits: int = 1) -> str:
    med, lo, hi = spread(xs)
    return f"{med:.{digits}f} [{lo:.{digits}f}-{hi:.{digits}f}]"


def factor(rows: Sequence[Mapping[str, Any]], base: str, key: str = "p99_ms") -> list[float]:
    """``base``'s figure over DBLP's, paired per repetition."""
    return [b / d for b, d in zip(of(rows, base, key), of(rows, "dblp", key), strict=True)]


def settings(m: Mapping[str, Any]) -> list[tuple[str, list[dict]]]:
    """(name, rows) of every one-DC setting: host loss, then each burst setting."""
    out = [("host_loss", list(m["host_loss"]))]
    names = list(dict.fromkeys(r["setting"] for r in m["bursts"]))
    return out + [(n, [r for r in m["bursts"] if r["setting"] == n]) for n in names]


def cross_points(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[dict]]]:
    """(name, rows) of every cross-DC point."""
    pts = sorted({(r["delay_ms"], r["loss"]) for r in rows})
    return [(f"cross-DC {d:g} ms, {x:.1%}",
             [dict(r) for r in rows if (r["delay_ms"], r["loss"]) == (d, x)]) for d, x in pts]


def round_table(points: Sequence[tuple[str, list[dict]]], systems: Sequence[str]
                ) -> tuple[Table, list[Figure]]:
    """Every setting's rounds per system (P50, P99, delivered, drops) and DBLP's P99
    factor over each baseline; the figures."""
    rows, figs = [], []
    for where, rs in points:
        for s in systems:
            p50, p99 = of(rs, s, "p50_ms"), of(rs, s, "p99_ms")
            frac = of(rs, s, "delivered_mean")
            drops = of(rs, s, "burst_drops") if "burst_drops" in rs[0] else []
            f = "-" if s == "dblp" else cell(factor(rs, s), 2)
            rows.append((where, NAMES[s], cell(p50), cell(p99), cell(frac, 3),
                         cell(drops, 0) if drops else "-", f))
            figs.append(Figure(f"P99 round latency, {where}", s, "ms", "emulated",
                               *spread(p99), len(p99)))
            if s != "dblp":
                figs.append(Figure(f"P99: {NAMES[s]} / DBLP, {where}", s, "x",
                                   "dimensionless", *spread(factor(rs, s)), len(p99)))
    table = Table("Rounds: P50 / P99 round latency (ms, emulated), delivered fraction, drops "
                  "at the burst targets, and each baseline's P99 over DBLP's (paired per "
                  "repetition), median [min-max]",
                  ("setting", "system", "P50", "P99", "delivered", "burst drops",
                   "baseline P99 / DBLP"), tuple(rows))
    return table, figs


def best_burst(m: Mapping[str, Any], base: str) -> tuple[str, tuple[float, float, float]] | None:
    """The burst setting where ``base``'s P99 over DBLP's is largest (median), and its
    (median, lo, hi); None without bursts."""
    best = None
    for where, rs in settings(m)[1:]:
        f = spread(factor(rs, base))
        if best is None or f[0] > best[1][0]:
            best = (where, f)
    return best


def map_table(cells: Sequence[Mapping[str, Any]]) -> Table:
    """The map, cell by cell (virtual time)."""
    def g(c: Mapping[str, Any], b: str) -> str:
        x = c[f"gain_vs_{b}"]
        mark = " *" if x["above"] else (" (<1)" if x["below"] else "")
        return f"{x['median']:.2f} [{x['lo']:.2f}-{x['hi']:.2f}]{mark}"

    rows = tuple((f"{c['loss']:.1%}", f"{c['rtt_ms']:g}", f"{c['ratio']:g}",
                  f"{c['p99_mrc']['median']:.1f}", f"{c['p99_mlt']['median']:.1f}",
                  f"{c['p99_dblp']['median']:.1f}", g(c, "mlt"), g(c, "mrc"),
                  f"{c['dblp_delivered']:.3f}", f"{c['burst_drops']:g}") for c in cells)
    return Table("The map (virtual time, the fake network): P99 round latency (ms) per "
                 "system and DBLP's P99 gain over each baseline, median [min-max] over the "
                 "seeds (* above 1 for every seed; (<1) below 1 for every seed)",
                 ("loss", "RTT (ms)", "burst / round", "MRC P99", "MLT P99", "DBLP P99",
                  "gain vs MLT", "gain vs MRC", "DBLP delivered", "burst drops"), rows)


def heat_panels(cells: Sequence[Mapping[str, Any]], base: str) -> list:
    """``plots.heatmap`` panels of DBLP's gain over ``base``: one per burst/round ratio,
    RTT across, loss up."""
    losses = sorted({c["loss"] for c in cells})
    rtts = sorted({c["rtt_ms"] for c in cells})
    panels = []
    for ratio in sorted({c["ratio"] for c in cells}):
        at = {(c["loss"], c["rtt_ms"]): c[f"gain_vs_{base}"] for c in cells
              if c["ratio"] == ratio}
        vals = [[at[(x, y)]["median"] if (x, y) in at else None for y in rtts] for x in losses]
        marks = [[bool(at.get((x, y), {}).get("above")) for y in rtts] for x in losses]
        name = "no bursts" if ratio == 0 else f"bursts of {ratio:g} round"
        panels.append((name, [f"{y:g}" for y in rtts], [f"{x:.1%}" for x in losses], vals,
                       marks))
    return panels


def _nearest(cells: Sequence[Mapping[str, Any]], loss: float, rtt: float,
             ratio: float) -> Mapping[str, Any] | None:
    """The map cell at ``loss`` and ``ratio`` whose RTT is nearest ``rtt`` (within a
    factor of 2), None if there is none."""
    cands = [c for c in cells if c["loss"] == loss and c["ratio"] == ratio]
    if not cands:
        return None
    c = min(cands, key=lambda c: abs(c["rtt_ms"] - rtt))
    return c if rtt / 2 <= max(c["rtt_ms"], 0.3) <= 2 * max(rtt, 0.3) else None


def fabric_checks(m: Mapping[str, Any], base_rtt_ms: float) -> Table | None:
    """The map's points measured on the fabric: the map's gains beside the fabric's."""
    cells = m["map"]["cells"]
    rows = []
    one_dc = settings(m)
    for where, rs in one_dc:
        if where == "host_loss":
            c = _nearest(cells, rs[0]["loss"], base_rtt_ms, 0.0)
        else:
            c = _nearest(cells, 0.0, base_rtt_ms, rs[0]["ratio"]) \
                if rs[0]["placement"] == "all_paths" else None
        if c is not None:
            rows.append(_check_row(where, c, rs))
    for (where, rs), d in zip(cross_points(m["cross_dc"]),
                              sorted({(r["delay_ms"], r["loss"]) for r in m["cross_dc"]}),
                              strict=True):
        c = _nearest(cells, d[1], 2 * d[0] + base_rtt_ms, 0.0)
        if c is not None:
            rows.append(_check_row(where, c, rs))
    if not rows:
        return None
    return Table("The map against the fabric: DBLP's P99 gain over each baseline at the "
                 "map's cell nearest each fabric setting (map: virtual time, median "
                 "[min-max] over seeds; fabric: emulated clock, over repetitions)",
                 ("fabric setting", "map cell (loss, RTT ms, burst/round)", "vs MLT: map",
                  "vs MLT: fabric", "vs MRC: map", "vs MRC: fabric", "vs TCP: fabric"),
                 tuple(rows))


def _check_row(where: str, c: Mapping[str, Any], rs: Sequence[Mapping[str, Any]]) -> tuple:
    def mg(b: str) -> str:
        x = c[f"gain_vs_{b}"]
        return f"{x['median']:.2f} [{x['lo']:.2f}-{x['hi']:.2f}]"

    return (where, f"{c['loss']:.1%}, {c['rtt_ms']:g}, {c['ratio']:g}", mg("mlt"),
            cell(factor(rs, "mlt"), 2), mg("mrc"), cell(factor(rs, "mrc"), 2),
            cell(factor(rs, "tcp"), 2))


def training_runs(t: Mapping[str, Any]) -> dict[str, list[dict]]:
    """Per system, its repetitions' summaries in repetition order."""
    per: dict[str, list[dict]] = {}
    for label in t["aggregate"]:
        s = label.split("/", 1)[1]
        per[s] = sorted((r for r in t["runs"] if r["label"] == label), key=lambda r: r["rep"])
    return per


def training_table(t: Mapping[str, Any]) -> tuple[Table, list[Figure]]:
    """Per system: time to target, final loss, share of communication, step, delivered,
    tolerance, overruns, drops; the figures."""
    rows, figs = [], []
    for s, runs in training_runs(t).items():
        tt = [r.get("time_to_target_s") for r in runs]
        fl = [r["final_loss"] for r in runs if r.get("final_loss") is not None]
        reached = [x for x in tt if x is not None]
        share = [r["comm_share"] for r in runs if r.get("comm_share") is not None]
        rows.append((NAMES.get(s, s), cell(reached, 2) if reached else "not reached",
                     f"{len(reached)}/{len(tt)}", cell(fl, 3) if fl else "-",
                     cell(share, 2) if share else "-",
                     cell([r["healthy_step_ms"] for r in runs if r.get("healthy_step_ms")]),
                     cell([r.get("delivered_min", 1.0) for r in runs], 3),
                     "-" if runs[0].get("late_tolerance") is None else
                     cell([r["late_tolerance"] for r in runs], 2),
                     cell([r.get("tolerance_zero_steps", 0) for r in runs], 0),
                     cell([r.get("overrun_fraction", 0.0) for r in runs], 3),
                     cell([r["burst_drops"] for r in runs], 0)
                     if all("burst_drops" in r for r in runs) else "not recorded"))
        if reached:
            figs.append(Figure("time to target loss (training)", s, "s", "modelled",
                               *spread(reached), len(reached)))
        if fl:
            figs.append(Figure("final validation loss (training)", s, "loss",
                               "dimensionless", *spread(fl), len(fl)))
        if share:
            figs.append(Figure("communication's share of the step (training)", s,
                               "fraction", "dimensionless", *spread(share), len(share)))
    table = Table(f"Training: {t['model']} through host-port microbursts, links "
                  f"{t['rate_mbit']:g} Mbit/s (modelled clock; target loss "
                  f"{t['target_loss']}; gradient blocks of {t['block_chunks']} chunks)",
                  ("system", "time to target (s)", "reached", "final loss",
                   "communication / step", "healthy step (ms)", "delivered (min)",
                   "late tolerance", "steps at tolerance 0", "compute overruns",
                   "burst drops"), tuple(rows))
    return table, figs


def final_gap(t: Mapping[str, Any], base: str) -> list[float] | None:
    """DBLP's final validation loss minus ``base``'s, per repetition (> 0: DBLP worse)."""
    per = training_runs(t)
    if "dblp" not in per or base not in per:
        return None
    gaps = [d["final_loss"] - b["final_loss"] for d, b in zip(per["dblp"], per[base], strict=False)
            if d.get("final_loss") is not None and b.get("final_loss") is not None]
    return gaps or None


def time_factor(t: Mapping[str, Any], base: str) -> list[float] | None:
    """``base``'s time to target over DBLP's, per repetition; None unless both reached it
    in every repetition."""
    per = training_runs(t)
    if "dblp" not in per or base not in per:
        return None
    pairs = list(zip(per[base], per["dblp"], strict=False))
    if not pairs or any(b.get("time_to_target_s") is None or d.get("time_to_target_s") is None
                        for b, d in pairs):
        return None
    return [b["time_to_target_s"] / d["time_to_target_s"] for b, d in pairs]


def mean_share(t: Mapping[str, Any], system: str) -> float | None:
    runs = training_runs(t).get(system, [])
    xs = [r["comm_share"] for r in runs if r.get("comm_share") is not None]
    return statistics.median(xs) if xs else None
