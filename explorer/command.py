"""``emu explore``: the explorer's command line (no root, no torch, no Mininet).

    emu explore FILE.toml [--out DIR] [--set K=V ...] [--calibration PATH ...] [--top K]
                          [--json] [--quick] [--no-points]
    emu explore FILE.toml --explain [--set K=V ...]   # one point's calibrated inputs
    emu explore --predict EXPERIMENT.toml [--calibration PATH ...] [--json]
    emu explore --validate TABLE.toml [TABLE.toml ...] [--fit LABEL] [--json]
    emu explore --keys

This module only defines arguments at import time; the work is imported when it runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from emu import safefs

__all__ = ["configure_parser", "run"]


def configure_parser(p: argparse.ArgumentParser) -> None:
    """Add ``emu explore``'s arguments to ``p``."""
    p.add_argument("file", nargs="?", help="explore file (experiments/explore/*.toml)")
    p.add_argument("--out", help="output directory (default results/explore-NAME-TIME)")
    p.add_argument("--force", action="store_true",
                   help="write into an --out directory that already holds files")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a key, e.g. --set placement.tp=[4,8] (repeatable)")
    p.add_argument("--calibration", action="append", default=[], metavar="PATH",
                   help="a calibration record (repeatable; later ones override earlier "
                   "ones per transport; default: the file's, else the shipped one)")
    p.add_argument("--top", type=int, default=10, help="configurations in the top-k table")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--quick", action="store_true",
                   help="at most 3 values per decision axis, no points file")
    p.add_argument("--no-points", action="store_true", help="do not write points.csv.gz")
    p.add_argument("--no-baselines", action="store_true",
                   help="skip the baselines and ablations (search only)")
    p.add_argument("--predict", metavar="EXPERIMENT",
                   help="predict an emulator experiment at the emulator's own scale")
    p.add_argument("--validate", nargs="+", metavar="TABLE",
                   help="score the model against tables of published measurements")
    p.add_argument("--fit", metavar="LABEL", help="--validate: the row to fit the "
                   "efficiency on (default: the row marked fit = true)")
    p.add_argument("--keys", action="store_true", help="print every explore-file key")
    p.add_argument("--explain", action="store_true",
                   help="for one point of FILE (every axis at its first value; --set picks "
                   "another), print each calibrated input: what was measured and in which "
                   "regime, the transfer law, the full-scale value, and whether it "
                   "extrapolates; searches nothing")


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    """Run ``emu explore`` as the arguments say."""
    if args.keys:
        from explorer.specfile import describe_keys

        print(describe_keys())
        return 0
    if args.validate:
        return _validate(args)
    if args.predict:
        return _predict(args)
    if not args.file:
        from explorer.spec import SpecError

        raise SpecError("emu explore: give an explore FILE, or --predict, --validate, --keys")
    if args.explain:
        return _explain(args)
    return _explore(args)


def _explain(args: argparse.Namespace) -> int:
    from explorer.calibration import load_calibration
    from explorer.explain import explain, render
    from explorer.model import evaluate
    from explorer.specfile import load

    space = load(args.file, args.set)
    cfg = space.config()
    cal = load_calibration(args.calibration or list(space.calibration))
    b = evaluate(cfg, cal)
    rows = explain(cfg, cal)
    shown = {k: v for k, v in cfg.flat().items()
             if k.startswith(("placement.", "schedule.", "network.t", "network.q"))}
    print(f"point: {shown}")
    print(f"step {b.step_s:.3f} s, time to train {b.time_to_train_s / 86400:.1f} days"
          if b.feasible else f"infeasible: {b.reason}")
    print(render(rows))
    if args.json:
        print(json.dumps([r.as_dict() for r in rows], indent=1))
    return 0


def _quick(space: Any) -> Any:
    from explorer.search import is_decision, with_axes

    axes = {}
    for a in space.axes:
        if is_decision(a.key) and len(a.values) > 3:
            v = a.values
            axes[a.key] = (v[0], v[len(v) // 2], v[-1])
    return with_axes(space, axes=axes) if axes else space


def _explore(args: argparse.Namespace) -> int:
    from explorer.exploration import explore
    from explorer.report import write_report
    from explorer.search import scenarios
    from explorer.specfile import load
    from workloads.progress import Progress

    space = load(args.file, args.set)
    if args.quick:
        space = _quick(space)
    out = safefs.results_dir(args.out, f"explore-{space.name}", force=args.force)
    _say(f"emu explore {args.file}: {space.size:,} points in the raw space, "
         f"{len(space.axes)} axes; results in {out}/")
    bars: dict[str, Any] = {}
    t0 = time.perf_counter()
    many = len(scenarios(space)) > 1

    def progress(what: str, done: int, total: int, best: float) -> None:
        if many and what == "points":
            return  # one bar over the scenarios, not one per scenario
        bar = bars.get(what)
        if bar is None or bar.total != max(1, total):
            if bar is not None:
                bar.close()
            bar = bars[what] = Progress("search" if what == "points" else "scenarios",
                                        total, _say)
        rate = done / max(time.perf_counter() - t0, 1e-9)
        days = best / 86400 if best < float("inf") else float("nan")
        bar.update(min(done, total), points_per_s=rate, best_days=days)

    ex = explore(space, args.calibration or None, top_k=args.top,
                 baselines=not args.no_baselines, progress=progress)
    for bar in bars.values():
        bar.close()
    points = not (args.no_points or args.quick)
    wbar: list[Any] = []

    def wprog(rows: int) -> None:
        if not wbar:
            total = sum(o.search.feasible for o in ex.scenarios)
            wbar.append(Progress("writing points", total, _say))
        wbar[0].update(rows)

    summary = write_report(ex, out, points=points, progress=wprog)
    if wbar:
        wbar[0].close()
    _report(ex, summary, args.top)
    if args.json:
        print(json.dumps(summary, indent=1))
    return 0 if summary["counts"]["feasible"] else 1


def _fmt(x: float | None, unit: str = "", scale: float = 1.0, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x / scale:.{digits}f}{unit}"


def _report(ex: Any, summary: dict, top: int) -> None:
    from explorer.baselines import SOTA_NAME
    from explorer.report import top_table

    c, t = summary["counts"], summary["timings"]
    _say(f"points: raw {c['raw']:,}, structural {c['structural']:,}, evaluated "
         f"{c['evaluated']:,}, feasible {c['feasible']:,}; pruned: "
         + ", ".join(f"{k} {v:,}" for k, v in summary["pruned"].items() if v))
    _say(f"search {t['search_s']:.2f} s ({_fmt(t.get('points_per_s'), '', 1e6)} M points/s), "
         f"re-score {t['rescore_s']:.2f} s, baselines {t['baselines_s']:.2f} s"
         + (f", points file {t['write_points_s']:.1f} s" if "write_points_s" in t else ""))
    print(top_table(ex, top))
    sp = summary["speedups"]
    print(f"speed-up of the best configuration over production (Llama 3's recipe): max "
          f"{_fmt(sp['production']['max'], 'x')}, median {_fmt(sp['production']['median'], 'x')}"
          f"; over the state of the art ({SOTA_NAME}): max {_fmt(sp['sota']['max'], 'x')}, "
          f"median "
          f"{_fmt(sp['sota']['median'], 'x')} ({sp['production']['scenarios']} scenarios)")
    abl = ", ".join(f"{k.split('_', 1)[1]} {_fmt(v['median'], 'x')}"
                    for k, v in sp.items() if k.startswith("ablation_"))
    print(f"ablation (median speed-up over production): {abl}")
    if summary.get("rescore_error_max") is not None:
        print(f"closed forms vs pipeline simulator on the reported points: max step error "
              f"{summary['rescore_error_max'] * 100:.2f} %")
    for i, s in enumerate(summary["scenarios"]):
        if "nothing_feasible" in s:
            nf = s["nothing_feasible"]
            print(f"scenario {i} {s['scenario']}: nothing feasible; binding constraint: "
                  f"{nf['binding']}; nearest: {nf.get('nearest')}")


def _validate(args: argparse.Namespace) -> int:
    from explorer.calibration import load_calibration
    from explorer.validate import scores

    cal = load_calibration(args.calibration)
    fit = None
    if args.fit:
        from explorer.validate import load_table

        fit = {load_table(args.validate[0]).name: args.fit}
    result = scores(args.validate, cal, fit)
    for s in result:
        print(f"{s.table.name} ({s.table.metric}; gemm_efficiency "
              f"{_fmt(s.efficiency, '', 1, 3)}, fitted on {s.fit_row or 'no row'})")
        for r in s.rows:
            print(f"  {r.label:<44} measured {r.measured:9.3f}  predicted {r.predicted:9.3f}"
                  f"  error {r.error * 100:+6.1f} %  network {r.network_share * 100:4.0f} %"
                  f"{'' if r.scored else '  (fit row)'}"
                  f"{'  (memory refused: time with HBM lifted)' if r.memory_refused else ''}")
        print(f"  mean |error| {s.mean_abs_error * 100:.1f} %, max {s.max_abs_error * 100:.1f} %,"
              f" Spearman rank correlation of per-GPU throughput {s.spearman:.3f}")
    from explorer.validate_groups import group_scores

    groups = group_scores(result)
    for g in groups.values():
        print(f"{g.name} rows ({len(g.rows)}): mean |error| {g.mean_abs_error * 100:.1f} %, "
              f"max {g.max_abs_error * 100:.1f} %, Spearman {g.spearman:.3f}; targets met: "
              + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in g.met.items()))
    if args.json:
        from explorer.report import finite

        print(json.dumps(finite({"tables": [s.as_dict() for s in result],
                                 "groups": [g.as_dict() for g in groups.values()]}),
                         indent=1, allow_nan=False))
    return 0


def _predict(args: argparse.Namespace) -> int:
    from explorer.calibration import load_calibration
    from explorer.predict import predict_experiment

    cal = load_calibration(args.calibration)
    pred = predict_experiment(args.predict, cal, args.set)
    for k, v in pred.items():
        print(f"{k}: {v}")
    if args.json:
        from explorer.report import finite

        print(json.dumps(finite(pred), indent=1, allow_nan=False))
    return 0


