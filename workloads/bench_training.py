"""`emu bench training`: what the transports do to data-parallel training, in one run.

On one fabric (the default 2-plane Clos: 2 planes x 4 spines x 4 racks x 4 hosts,
100 Mbit/s, eBGP + BFD for the ECMP baseline), 4 workers (one per rack):

1. The digits CNN over MRC, RC over ECMP and gloo/TCP, each healthy, through a cut
   of rack 0's leaf-spine link (either plane) busiest into the rack (sampled at
   0.4 s, cut until 1.4 s), and through microbursts onto worker 1's port on both
   planes (2 rack-mates at line rate, 20 ms every 100 ms, 0.4-1.4 s): per run the
   median step time, the step times inside the failure window, the time lost to it
   and the time to 98 % accuracy (reached near step 150, after the failure;
   training time: evaluation excluded).
2. The tiny transformer LM (its gradient is 116 k values, so a round has enough
   chunks for a loss tolerance to mean something) under microbursts for the whole
   run, over DBLP (phase-aware tolerance, error feedback) against reliable MRC with
   the same transpose all-reduce: time to the target validation loss and the
   final loss of each.

Compute is modelled (each step's compute padded to its time measured alone), so
step times reflect the network, not the two shared cores.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path

from emu.errors import require_root
from emu.fabric import Fabric
from workloads import experiment
from workloads.results import ResultsWriter, read_jsonl
from workloads.runner import compute_model_ms, measure_rtt, run_label
from workloads.summary import summarize_workload

FABRIC = {"planes": 2, "spines": 4, "leaves": 4, "hosts_per_leaf": 4, "rate_mbit": 100.0,
          "queue_packets": 100, "control_plane": "bgp"}
CUT_AT, CUT_FOR = 0.4, 1.0  # the cut takes effect after a 0.2 s sample: 0.6-1.4 s


def _burst_events(start: float, stop: float | None) -> list[dict]:
    out = []
    for p in (0, 1):
        burst = {"do": "microburst", "target": f"p{p}l1:h4", "sources": ["h5", "h6"],
                 "on_ms": 20.0, "every_ms": 100.0}
        out.append({"at": start, **burst})
        if stop is not None:
            out.append({"at": stop, "do": "restore", "what": "microburst",
                        **{k: v for k, v in burst.items() if k != "do"}})
    return sorted(out, key=lambda e: e["at"])


def _cut_events() -> list[dict]:
    return [{"at": CUT_AT, "do": "fail_busiest_uplink", "leaf": "p0l0,p1l0"},
            {"at": CUT_AT + CUT_FOR, "do": "restore", "what": "fail_busiest_uplink",
             "leaf": "p0l0,p1l0"}]


def _exp(name: str, transport: dict, workload: dict, events: list[dict]) -> experiment.Experiment:
    return experiment.parse({"name": name, "seed": 1, "fabric": FABRIC, "transport": transport,
                             "workload": workload, "event": events}, where=f"bench {name}")


def plan(quick: bool = False) -> list[tuple[str, experiment.Experiment]]:
    """The bench's runs: (label, experiment), all on one fabric."""
    steps = 200 if quick else 400
    digits = {"model": "digits_cnn", "workers": 4, "steps": steps, "batch_size": 64,
              "lr": 0.05, "lr_schedule": "cosine", "target_accuracy": 0.98, "eval_every": 10,
              "compute": "modelled"}
    runs = []
    for t in ("mrc", "rc", "gloo"):
        tr = {"name": t}
        runs.append((f"{t}/healthy", _exp(f"{t}-healthy", tr, digits, [])))
        runs.append((f"{t}/link_cut", _exp(f"{t}-cut", tr, digits, _cut_events())))
        runs.append((f"{t}/bursts", _exp(f"{t}-bursts", tr, digits,
                                         _burst_events(CUT_AT, CUT_AT + CUT_FOR))))
    lm_steps = 250 if quick else 500
    lm = {"model": "tiny_lm", "workers": 4, "steps": lm_steps, "batch_size": 16, "lr": 0.003,
          "lr_schedule": "cosine", "target_loss": 2.5, "eval_every": 25, "compute": "modelled"}
    bursts = _burst_events(0.5, None)
    dblp = {"name": "dblp", "collective": "transpose",
            "dblp": {"policy": "phase_aware", "fill": "error_feedback", "base": 0.1,
                     "cap": 0.3, "critical_epochs": 0, "window": 10, "eta": 0.5}}
    runs.append(("lm/mrc_bursts", _exp("lm-mrc", {"name": "mrc", "collective": "transpose"},
                                       lm, bursts)))
    runs.append(("lm/dblp_bursts", _exp("lm-dblp", dblp, lm, bursts)))
    gather = {**dblp, "dblp": {**dblp["dblp"], "bounded_gather": True}}
    runs.append(("lm/dblp_bounded_gather_bursts", _exp("lm-dblp-bg", gather, lm, bursts)))
    return runs


def bench_training(say: Callable[[str], None] = print, quick: bool = False,
                   out_dir: Path | None = None) -> dict:
    """Run every scenario; returns the summaries, the targets' figures and where results are."""
    require_root("emu bench training")
    runs = plan(quick)
    out_dir = out_dir or Path("results") / "bench-training"
    compute: dict[str, float | None] = {}
    for _, e in runs:  # one compute model per model, measured alone before the fabric
        if e.workload.model not in compute:
            compute[e.workload.model] = compute_model_ms(e, say)
    summaries: dict[str, dict] = {}
    with ResultsWriter(out_dir, label=runs[0][0]) as writer:
        with Fabric(runs[0][1].fabric_spec(), name="benchtr", control_plane="bgp",
                    progress=lambda m: say(f"  fabric: {m}")) as fab:
            hosts = runs[0][1].hosts()
            rtt = measure_rtt(fab, hosts[0], hosts[-1])
            for label, e in runs:
                run_label(fab, writer, label, e, compute[e.workload.model], rtt, say)
                s = summaries[label] = summarize_workload(read_jsonl(writer.path), label, 0,
                                                          e.workload)
                say(f"  {label}: step {s['step_ms_median']} ms (healthy {s['healthy_step_ms']}),"
                    f" in failure max {s['failure_step_ms_max']} ms, lost "
                    f"{s['failure_lost_s']} s, to target {s['time_to_target_s']} s")
    return {"out_dir": str(out_dir), "rtt_s": rtt, "compute_ms": compute,
            "runs": summaries, "targets": targets(summaries)}


def targets(s: dict[str, dict]) -> dict:
    """The issue's targets from the summaries."""
    out: dict = {}
    for t in ("mrc", "rc", "gloo"):
        healthy, cut = s.get(f"{t}/healthy"), s.get(f"{t}/link_cut")
        if healthy and cut and cut.get("failure_step_ms_median"):
            out[f"{t}_cut_step_vs_healthy"] = round(
                cut["failure_step_ms_median"] / healthy["step_ms_median"], 3)
            out[f"{t}_cut_worst_step_ms"] = cut["failure_step_ms_max"]
            out[f"{t}_cut_lost_s"] = cut["failure_lost_s"]
    m, d = s.get("lm/mrc_bursts"), s.get("lm/dblp_bursts")
    if m and d and m.get("time_to_target_s") and d.get("time_to_target_s"):
        out["dblp_time_to_target_vs_mrc"] = round(
            d["time_to_target_s"] / m["time_to_target_s"], 3)
        out["dblp_final_loss"] = d.get("final_loss")
        out["mrc_final_loss"] = m.get("final_loss")
    steps = [r.get("step_ms_median") for r in s.values() if r.get("step_ms_median")]
    out["median_step_ms_all_runs"] = statistics.median(steps) if steps else None
    return out
