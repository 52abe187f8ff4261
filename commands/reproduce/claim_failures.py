"""Claim 1 (MRC): MRC rides out failures that interrupt a routed fabric.

One fabric under eBGP + BFD (the ECMP baselines' control plane: 2 planes x 4 spines x 4
racks x 4 hosts). Two measurements on it, each system in the same run, repetitions
interleaved, every failure fired at the same point of the workload for every system:

1. Transfers (commands/reproduce/failures_transfers.py): a long transfer rack 0 -> last
   rack through a link cut, a spine down, a plane down, a flapping link and a gray link
   (each aimed at the link that carried most of the transfer, fired at a fixed fraction
   of the same repetition's clean transfer and restored ``outage_s`` later): the time
   lost, in emulated seconds, in RTTs of the fabric and projected to full scale through
   the Explorer (commands/reproduce/failures_project.py).
2. Training (commands/reproduce/failures_training.py): the digits CNN on 4 workers
   through failures scheduled by step: healthy step time, worst step in the failure and
   time lost, on the modelled clock.

The verdict judges the best baseline's time lost over MRC's per failure kind (paired per
repetition; a loss below one RTT counts as one RTT, the resolution), and the claim on the
geometric mean over the kinds; the reason names the kinds where MRC's gain is not beyond
the spread.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from typing import Any

from commands.reproduce.claim import ClaimContext, ClaimResult, ClaimSpec, Figure, Table
from commands.reproduce.failures_tables import training_figures
from commands.reproduce.params import Param, check_params, positive, positive_int, subset_of
from commands.reproduce.plots import bars
from commands.reproduce.verdict import judge, spread

KINDS = ("link_cut", "spine_down", "plane_down", "flap", "gray")
SYSTEMS = ("mrc", "rc", "tcp")
TRAINING_KINDS = ("link_cut", "spine_down", "gray")
NAMES = {"mrc": "MRC", "rc": "RC over ECMP (BGP/BFD)", "tcp": "TCP (gloo in training)"}


def _fraction(lo: float, hi: float) -> Any:
    return lambda v: isinstance(v, int | float) and lo < v < hi


def _systems_ok(v: object) -> bool:
    return isinstance(v, list) and subset_of(SYSTEMS)(v) and "mrc" in v and len(v) >= 2


def _training_kinds_ok(v: object) -> bool:
    return isinstance(v, list) and (not v or subset_of(TRAINING_KINDS)(v))


SCHEMA = {
    "systems": Param(list, "a list of distinct systems among mrc, rc, tcp, with mrc and at "
                     "least one baseline", _systems_ok),
    "kinds": Param(list, f"a list of distinct failure kinds among {', '.join(KINDS)}",
                   subset_of(KINDS)),
    "transfer_mib": Param(int, "MiB per transfer, an integer > 0 (long enough to outlast "
                          "the failure)", positive_int),
    "outage_s": Param((int, float), "seconds a failure lasts, in (0, 10)", _fraction(0, 10)),
    "fire_at": Param((int, float), "the fraction of the clean transfer at which the "
                     "failure fires, in (0, 1)", _fraction(0, 1)),
    "gray_loss": Param((int, float), "the gray link's loss, in (0, 0.5)", _fraction(0, 0.5)),
    "flap_period_s": Param((int, float), "the flap's period in s, in [0.02, 10)",
                           lambda v: isinstance(v, int | float) and 0.02 <= v < 10),
    "flap_duty": Param((int, float), "the flap's fraction down, in (0, 1)", _fraction(0, 1)),
    "training_kinds": Param(list, f"a list of distinct kinds among "
                            f"{', '.join(TRAINING_KINDS)} (empty: no training)",
                            _training_kinds_ok),
    "training_steps": Param(int, "training steps, an integer >= 20",
                            lambda v: isinstance(v, int) and v >= 20),
    "fail_step": Param(int, "the step after which the failure fires, >= 5",
                       lambda v: isinstance(v, int) and v >= 5),
    "restore_step": Param(int, "the step after which it is restored (> fail_step, < "
                          "training_steps)", positive_int),
    "training_reps": Param(int, "training repetitions per system, an integer > 0",
                           positive_int),
    "claimed_factor": Param((int, float), "the paper's factor of time lost (baseline over "
                            "MRC), > 1; absent: the direction only", lambda v: positive(v)
                            and v > 1, required=False),  # type: ignore[operator]
}


class FailuresKind:
    """The "failures" kind of claim."""

    name = "failures"
    needs_root = True

    def check(self, params: Mapping[str, object]) -> None:
        """The parameters against `SCHEMA`, and the training steps' order."""
        check_params(params, SCHEMA)
        f, r, n = params["fail_step"], params["restore_step"], params["training_steps"]
        assert isinstance(f, int) and isinstance(r, int) and isinstance(n, int)
        if not f < r < n:
            from commands.reproduce.claim import ClaimSpecError
            raise ClaimSpecError(f"fail_step = {f}, restore_step = {r}, training_steps = {n} "
                                 "are invalid: must be fail_step < restore_step < "
                                 "training_steps")

    def run(self, spec: ClaimSpec, ctx: ClaimContext) -> ClaimResult:
        """Build the fabric, run the transfers and the training, judge."""
        from commands.reproduce.failures_measure import measure

        p = spec.effective_params(ctx.quick)
        m = measure(p, ctx)
        return result(spec, ctx, p, m)


KIND = FailuresKind()


def _geomean(xs: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(x) for x in xs))


def factors(runs: list[dict], systems: list[str], kinds: list[str], reps: int,
            rtt_s: float) -> dict[str, list[float]]:
    """Per kind, per repetition: the best baseline's time lost over MRC's (each at least
    one RTT, the resolution); and ``all``: their geometric mean over the kinds."""
    lost = {(r["system"], r["kind"], r["rep"]): max(rtt_s, r["lost_s"]) for r in runs
            if r["kind"] != "clean"}
    out: dict[str, list[float]] = {}
    for kind in kinds:
        out[kind] = [min(lost[(s, kind, rep)] for s in systems if s != "mrc")
                     / lost[("mrc", kind, rep)] for rep in range(reps)]
    out["all"] = [_geomean([out[k][rep] for k in kinds]) for rep in range(reps)]
    return out


def result(spec: ClaimSpec, ctx: ClaimContext, p: Mapping[str, Any],
           m: Mapping[str, Any]) -> ClaimResult:
    """The figures, tables, plot and verdict from the measurements ``m``
    (failures_measure.measure's record)."""
    from commands.reproduce.failures_project import FullScale, project

    systems, kinds, reps = list(p["systems"]), list(p["kinds"]), m["reps"]
    rtt, fs = m["rtt_s"], FullScale(**m["full_scale"])
    runs = m["transfers"]
    figures: list[Figure] = []
    rows = []
    groups = []
    for kind in kinds:
        group = []
        for s in systems:
            lost = [r["lost_s"] for r in runs if r["system"] == s and r["kind"] == kind]
            em = spread(lost)
            f = Figure(f"time lost, {kind}", s, "s", "emulated", *em, len(lost))
            group.append(f)
            rt = spread([x / rtt for x in lost])
            full = spread([project(s, kind, x, rtt, fs) for x in lost])
            figures += [f, Figure(f"time lost, {kind}", s, "RTTs", "dimensionless", *rt,
                                  len(lost)),
                        Figure(f"time lost, {kind}", s, "s", "full-scale", *full, len(lost))]
            rows.append((kind, NAMES[s], _cell(em, 1000, "ms"), _cell(rt, 1, ""),
                         _cell(full, 1000, "ms")))
        groups.append((kind, group))
    fac = factors(runs, systems, kinds, reps, rtt)
    frows = []
    for kind in [*kinds, "all"]:
        med, lo, hi = spread(fac[kind])
        figures.append(Figure(f"best baseline / MRC time lost, {kind}", "mrc", "x",
                              "dimensionless", med, lo, hi, reps))
        frows.append((kind if kind != "all" else "all kinds (geometric mean)",
                      f"{med:.2f} [{lo:.2f}-{hi:.2f}]"))
    t_figs, t_table, t_note = training_figures(m.get("training"), systems)
    figures += t_figs
    verdict, sentence = judge(spread(fac["all"]), p.get("claimed_factor"),
                              what="The best baseline's time lost over MRC's (geometric "
                                   "mean over the failure kinds)")
    weak = [k for k in kinds if spread(fac[k])[1] <= 1]
    reason = sentence
    if weak:
        reason += (" Not beyond the spread for " + ", ".join(
            f"{k} (MRC {_cell(spread(_lost(runs, 'mrc', k)), 1000, 'ms')} vs best baseline "
            f"{_best(runs, systems, k)})" for k in weak) + ".")
    reason += t_note
    plot = bars(ctx.out_dir / "failures_time_lost.png",
                "Time lost per failure (transfer, emulated clock)", "time lost (s)", groups)
    tables: tuple[Table, ...] = (
        Table("Time lost per failure: transfers, median [min-max] over repetitions",
              ("failure", "system", "emulated", "RTTs", "full scale (Explorer)"),
              tuple(rows)),
        Table("Best baseline's time lost over MRC's, paired per repetition",
              ("failure", "factor"), tuple(frows)))
    if t_table is not None:
        tables += (t_table,)
    return ClaimResult(spec.id, verdict, reason, setting(p, m), tuple(figures), tables,
                       (plot,), raw=dict(m))


def _lost(runs: list[dict], system: str, kind: str) -> list[float]:
    return [r["lost_s"] for r in runs if r["system"] == system and r["kind"] == kind]


def _best(runs: list[dict], systems: list[str], kind: str) -> str:
    best = min((s for s in systems if s != "mrc"),
               key=lambda s: statistics.median(_lost(runs, s, kind)))
    return f"{best} {_cell(spread(_lost(runs, best, kind)), 1000, 'ms')}"


def _cell(fig: tuple[float, float, float], scale: float, unit: str) -> str:
    med, lo, hi = (x * scale for x in fig)
    digits = 0 if scale >= 1000 or med >= 100 else 1
    return f"{med:.{digits}f} [{lo:.{digits}f}-{hi:.{digits}f}]{(' ' + unit) if unit else ''}"


def setting(p: Mapping[str, Any], m: Mapping[str, Any]) -> str:
    """The claim's setting in words, from the parameters and the run's record."""
    ts = m["time_scale"]
    out = (f"{m['fabric']} under eBGP + BFD ({ts['describe']}); RTT of a full data packet "
           f"{m['rtt_s'] * 1000:.2f} ms emulated. Transfers: {p['transfer_mib']} MiB "
           f"{m['src']} -> {m['dst']} per system ({', '.join(p['systems'])}), "
           f"{m['reps']} repetitions interleaved (each system clean, then each failure x "
           f"each system); each failure aimed at the leaf-spine link that carried most of "
           f"the transfer into {m['dst']}'s rack (0.2 s sample), fired at "
           f"{p['fire_at']:.0%} of the same repetition's clean transfer, restored after "
           f"{p['outage_s']} s (gray: {p['gray_loss']:.0%} loss; flap: "
           f"{p['flap_period_s']} s period, {p['flap_duty']:.0%} down); time lost = "
           "completion minus the clean completion of the same repetition (clipped at 0). "
           "Full scale: the Explorer's per-failure stall model at its defaults "
           f"({m['full_scale_text']}).")
    tk = p["training_kinds"]
    if tk:
        out += (f" Training: digits CNN, 4 workers, {p['training_steps']} steps, "
                f"{', '.join(tk)} after step {p['fail_step']} restored after step "
                f"{p['restore_step']}, {p['training_reps']} repetition(s) per system "
                "interleaved, modelled compute calibrated on the fabric; step times on the "
                "modelled clock.")
        if p["training_reps"] < 3:
            out += (" (Quick form: one training per system, no spread; the verdict rests "
                    "on the transfers.)")
    return out
