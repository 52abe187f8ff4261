"""Run a training experiment on a fabric: one worker process per rank, results as they come.

    exp = experiment.load("experiments/training/digits_mrc_linkcut.toml")
    run_experiment(exp, Path("results/x"))

For each repetition the runner plans the ranks' connections (MRC/DBLP: every
SRv6 path of each pair; RC: one QP per plane; gloo: torch's TCP over the
fabric), starts ``workloads.worker`` in every rank's namespace (``nsenter``),
waits until all are set up, gives them one common start instant, and starts
the failure timeline on the same clock. Worker records stream into the
``ResultsWriter`` (JSON lines, flushed one by one) while a progress line shows
the step, loss and accuracy. A worker that fails ends the run: its traceback
is recorded, the other workers are killed, the timeline restores what it
broke. Ctrl-C does the same and keeps what was recorded; the fabric is torn
down by its context manager.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from emu.errors import EmuError, require_root
from emu.fabric import Fabric
from emu.timeline import TimelineRunner
from transports.harness import DEFAULT_CONFIG
from workloads.experiment import Experiment
from workloads.progress import Progress
from workloads.results import ResultsWriter
from workloads.transportcomm import plan_conns

MASTER_PORT = 29500
Say = Callable[[str], None]


@dataclass
class RunOutcome:
    """What one labelled run (one repetition) came to."""

    label: str
    rep: int
    ok: bool
    error: str | None = None
    summary: dict = field(default_factory=dict)


def worker_configs(exp: Experiment, seed: int, compute_ms: float | None) -> list[dict]:
    """Every rank's worker config (the JSON line workloads/worker.py reads)."""
    spec = exp.fabric_spec()
    hosts = list(exp.hosts())
    w, t = exp.workload, exp.transport
    name = t.name
    conns = plan_conns(spec, name, hosts) if name != "gloo" else [{} for _ in hosts]
    groups = None
    if t.collective == "hierarchical":
        by_dc: dict[int, list[int]] = {}
        for r, h in enumerate(hosts):
            by_dc.setdefault(spec.node(h).dc, []).append(r)
        groups = list(by_dc.values())
    dblp = None
    if t.dblp is not None:
        d = t.dblp
        dblp = {"policy": d.policy, "tolerance": d.tolerance, "fill": d.fill,
                "deadline_s": d.deadline_s, "margin_s": d.optireduce_config().margin_s,
                "bounded_gather": d.bounded_gather,
                "phase": None if d.phase is None else {
                    k: getattr(d.phase, k) for k in d.phase.__dataclass_fields__}}
    out = []
    for r, h in enumerate(hosts):
        out.append({
            "rank": r, "size": len(hosts), "host": h, "addr": str(spec.address(h)),
            "master_addr": str(spec.address(hosts[0])), "master_port": MASTER_PORT,
            "transport": name, "transport_config": DEFAULT_CONFIG.get(name, {}),
            "conns": {str(p): cs for p, cs in conns[r].items()},
            "collective": t.collective or "ring", "groups": groups, "dblp": dblp,
            "kind": w.kind, "model": w.model, "steps": w.steps, "batch_size": w.batch_size,
            "microbatches": w.microbatches, "lr": w.lr, "lr_schedule": w.lr_schedule,
            "eval_every": w.eval_every, "compute": w.compute, "compute_ms": compute_ms,
            "seed": seed})
    return out


def measure_compute_ms(exp: Experiment, seed: int) -> float:
    """A data-parallel rank's compute per step, measured alone on one thread (ms)."""
    w = exp.workload
    cfg = {"measure_compute": True, "model": w.model, "seed": seed, "size": w.workers,
           "batch_size": w.batch_size, "rank": 0}
    p = subprocess.run([sys.executable, "-m", "workloads.worker"], input=json.dumps(cfg) + "\n",
                       capture_output=True, text=True, timeout=300)
    for line in p.stdout.splitlines():
        rec = json.loads(line)
        if rec.get("type") == "compute":
            return round(rec["seconds"] * 1000, 3)
    raise EmuError(f"measuring the compute time failed: {p.stdout[-500:]}{p.stderr[-2000:]}")


class _Job:
    """The workers of one run and the threads reading their output."""

    def __init__(self, fab: Fabric, cfgs: list[dict], on_record: Callable[[dict], None]) -> None:
        self.procs: list[subprocess.Popen] = []
        self.stderr: list[list[str]] = [[] for _ in cfgs]
        self.failed: dict | None = None
        self.ready = [threading.Event() for _ in cfgs]
        self.on_record = on_record
        self.lock = threading.Lock()
        env = {**os.environ, "TORCH_CPP_LOG_LEVEL": "ERROR", "OMP_NUM_THREADS": "1",
               "PYTHONUNBUFFERED": "1"}
        for cfg in cfgs:
            p = subprocess.Popen(
                fab.in_netns(cfg["host"], sys.executable, "-m", "workloads.worker"),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True, env=env,
                # Out of the terminal's process group: Ctrl-C reaches the runner, which
                # ends the workers itself (they would otherwise each report an error).
                start_new_session=True)
            p.stdin.write(json.dumps(cfg) + "\n")
            p.stdin.flush()
            self.procs.append(p)
        self.threads = []
        self.readers = []
        for r, p in enumerate(self.procs):
            for target in (partial(self._read, r, p), partial(self._drain, r, p)):
                t = threading.Thread(target=target, daemon=True)
                t.start()
                self.threads.append(t)
            self.readers.append(self.threads[-2])

    def _read(self, rank: int, p: subprocess.Popen) -> None:
        for line in p.stdout:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("type") == "ready":
                self.ready[rank].set()
                continue
            if rec.get("type") == "error":
                with self.lock:
                    self.failed = self.failed or rec
                self.ready[rank].set()
            try:
                self.on_record(rec)
            except Exception as e:  # noqa: BLE001 - the run ends with it; keep draining
                why = f"recording a {rec.get('type')} record failed: {e!r}"
                with self.lock:
                    self.failed = self.failed or {"rank": rank, "error": why}
        self.ready[rank].set()  # the worker exited (a crash before ready shows in returncode)

    def _drain(self, rank: int, p: subprocess.Popen) -> None:
        for line in p.stderr:
            self.stderr[rank].append(line)
            del self.stderr[rank][:-200]

    def wait_ready(self, timeout: float) -> None:
        end = time.monotonic() + timeout
        for r, ev in enumerate(self.ready):
            if not ev.wait(max(0.0, end - time.monotonic())):
                raise EmuError(f"worker {r} did not get ready within {timeout} s")
            if self.failed or self.procs[r].poll() not in (None, 0):
                raise EmuError(self._why(r))

    def _why(self, rank: int) -> str:
        if self.failed:
            return f"worker {self.failed.get('rank')} failed: {self.failed.get('error')}"
        return (f"worker {rank} exited {self.procs[rank].returncode}: "
                f"{''.join(self.stderr[rank])[-2000:]}")

    def start(self, t0: float) -> None:
        for p in self.procs:
            p.stdin.write(f"{t0}\n")
            p.stdin.flush()
            p.stdin.close()

    def wait(self, timeout: float) -> None:
        """Until every worker exited; raises EmuError naming the first failure."""
        end = time.monotonic() + timeout
        while True:
            codes = [p.poll() for p in self.procs]
            bad = [r for r, c in enumerate(codes) if c not in (None, 0)]
            if self.failed or bad:
                for r in bad:  # its reader ends at EOF, after the error record
                    self.readers[r].join(5.0)
                raise EmuError(self._why(bad[0] if bad else 0))
            if all(c == 0 for c in codes):
                for t in self.threads:
                    t.join(5)
                return
            if time.monotonic() > end:
                raise EmuError(f"workers still running after {timeout:.0f} s")
            time.sleep(0.1)

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                pass


def run_on_fabric(fab: Fabric, exp: Experiment, rep: int, writer: ResultsWriter, label: str,
                  say: Say = print, compute_ms: float | None = None,
                  timeout_s: float = 1800) -> RunOutcome:
    """Train ``exp`` (repetition ``rep``) on a running fabric; records go to ``writer``."""
    seed = exp.seeds()[rep]
    cfgs = worker_configs(exp, seed, compute_ms)
    w = exp.workload
    prog = Progress(f"{label} rep {rep}", w.steps, say)
    agg = StepAggregator(len(cfgs))

    def on_record(rec: dict) -> None:
        kind = rec.pop("type")
        rec.setdefault("label", label)
        if kind == "step":
            job_step = agg.add(rec)
            rec["mode"] = rec.pop("why", None) or "reliable"
            writer.write("step", rep=rep, **rec)
            if job_step is not None:
                writer.write("job_step", rep=rep, label=label, **job_step)
                prog.update(job_step["step"] + 1, loss=job_step["loss"])
        elif kind == "eval":
            agg.evaluated(rec["step"], rec.get("eval_s", 0.0))
            writer.write("eval", rep=rep, **rec)
            prog.note(**{k: rec[k] for k in ("accuracy", "loss") if rec.get(k) is not None})
        elif kind == "error":
            writer.write("error", rep=rep, **rec)
        elif kind == "done":
            writer.write("worker_done", rep=rep, **rec)

    job = _Job(fab, cfgs, on_record)
    timeline = None
    try:
        job.wait_ready(300)
        t0 = time.monotonic() + 0.2
        job.start(t0)
        if exp.events:
            timeline = TimelineRunner(fab, exp.timeline(),
                                      partial(writer.event, rep=rep, label=label))
            timeline.start(t0)
        job.wait(timeout_s)
        prog.close()
        return RunOutcome(label, rep, True)
    except EmuError as e:
        prog.close()
        say(f"  {label}: {e}")
        return RunOutcome(label, rep, False, str(e))
    finally:
        job.kill()
        if timeline is not None:
            timeline.stop()


class StepAggregator:
    """Joins the ranks' records of a step into the job's step (the slowest rank's view).

    ``exposed_comm_s`` of a job step is measured from the moment the *last* rank
    entered the exchange to the moment the last one left it: time one rank spent
    waiting for a slower rank's compute is not charged to the network.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.pending: dict[int, list[dict]] = {}
        self.prev_end: float | None = None
        self.eval_s: dict[int, float] = {}  # evaluation time after a step (not training)
        self.clock = 0.0

    def evaluated(self, step: int, seconds: float) -> None:
        self.eval_s[step] = seconds

    def add(self, rec: dict) -> dict | None:
        recs = self.pending.setdefault(rec["step"], [])
        recs.append(rec)
        if len(recs) < self.size:
            return None
        del self.pending[rec["step"]]
        end = max(r["end"] for r in recs)
        start = max(r["start"] for r in recs)
        exposed = max(r["t_exit"] for r in recs) - max(r["t_enter"] for r in recs)
        compute = statistics.median(r["compute_s"] for r in recs)
        if recs[0].get("pipeline"):
            # Pipeline stages overlap: what the busiest stage did not spend computing is
            # communication and bubbles.
            compute = max(r["compute_s"] for r in recs)
            exposed = (end - start) - compute
        losses = [r["loss"] for r in recs if r.get("loss") is not None]
        # A step lasts from the previous step's end (its slowest rank) to this one's,
        # less the evaluation that ran in between.
        prev = self.prev_end if self.prev_end is not None else start
        step_s = max(0.0, end - prev - self.eval_s.pop(rec["step"] - 1, 0.0))
        self.clock += step_s
        out = {"step": rec["step"], "t_s": max(r["t_s"] for r in recs),
               "train_s": round(self.clock, 6), "step_s": round(step_s, 6),
               "compute_s": round(compute, 6), "exposed_comm_s": round(max(0.0, exposed), 6),
               "loss": statistics.fmean(losses) if losses else None,
               "delivered": min(r.get("delivered", 1.0) for r in recs),
               "lost_entries": sum(r.get("lost_entries", 0) for r in recs),
               "tolerance": recs[0].get("tolerance"), "why": recs[0].get("why"),
               "bytes": sum(r.get("bytes", 0) for r in recs),
               "rank_bytes": max(r.get("bytes", 0) for r in recs)}
        if all(r.get("model_compute_s") is not None for r in recs):
            # Modelled compute: the step as the model says it lasts (its compute) plus
            # the network's part as measured; what two shared cores add to the real
            # compute beyond the model (overruns) is left out.
            out["model_step_s"] = round(recs[0]["model_compute_s"] + out["exposed_comm_s"], 6)
        self.prev_end = end
        return out


def measure_rtt(fab: Fabric, a: str, b: str) -> float | None:
    """The healthy round-trip time between hosts ``a`` and ``b`` (median of 5 pings), s."""
    spec = fab.spec
    p = subprocess.run(fab.in_netns(a, "ping", "-6", "-n", "-c", "5", "-i", "0.05", "-q",
                                    str(spec.address(b))),
                       capture_output=True, text=True, timeout=30)
    # "rtt min/avg/max/mdev = 0.081/0.095/0.113/0.011 ms"
    for line in p.stdout.splitlines():
        if "min/avg/max" in line:
            return float(line.split("=")[1].split("/")[1]) / 1000
    return None


def compute_model_ms(exp: Experiment, say: Say = print) -> float | None:
    """The modelled compute per step: the experiment's ``compute_ms``, or measured alone
    when it gives none; None in measured mode."""
    w = exp.workload
    if w.compute != "modelled" or w.compute_ms is not None:
        return w.compute_ms
    ms = measure_compute_ms(exp, exp.seed)
    say(f"  compute model {w.model}: {ms} ms per step (measured alone on one thread)")
    return ms


def run_label(fab: Fabric, writer: ResultsWriter, label: str, exp: Experiment,
              compute_ms: float | None, rtt_s: float | None, say: Say = print) -> None:
    """Every repetition of ``exp`` on ``fab`` under ``label``, after its meta record;
    EmuError naming the label if one fails."""
    writer.meta(experiment=exp.as_record(), transport=exp.transport.name, label=label,
                compute={"mode": exp.workload.compute, "ms": compute_ms},
                bottleneck_mbit=exp.fabric.rate_mbit * exp.fabric.planes, rtt_s=rtt_s)
    for rep in range(exp.repetitions):
        out = run_on_fabric(fab, exp, rep, writer, label, say, compute_ms)
        if not out.ok:
            raise EmuError(f"{label} repetition {rep} failed: {out.error}")


def run_experiment(exp: Experiment, out_dir: Path, say: Say = print,
                   variants: list[tuple[str, dict]] | None = None) -> list[dict]:
    """Build the experiment's fabric once and run every variant (label, overrides of
    ``with_overrides``; default: the experiment as it is, labelled by its transport) and
    repetition on it, then report. Returns the summaries."""
    from workloads.experiment import with_overrides

    require_root("emu run")
    runs = [(label, with_overrides(exp, ov) if ov else exp)
            for label, ov in (variants or [(exp.transport.name, {})])]
    compute_ms = compute_model_ms(exp, say)
    hosts = exp.hosts()
    with ResultsWriter(out_dir, label=runs[0][0]) as writer:
        with Fabric(exp.fabric_spec(), name="run", progress=lambda m: say(f"  fabric: {m}"),
                    control_plane=exp.fabric.control_plane) as fab:
            rtt = measure_rtt(fab, hosts[0], hosts[-1]) if len(hosts) > 1 else None
            for label, e in runs:
                run_label(fab, writer, label, e, compute_ms, rtt, say)
    return report(out_dir, exp, [label for label, _ in runs], say)


def report(out_dir: Path, exp: Experiment, labels: list[str], say: Say = print) -> list[dict]:
    """Summaries per label and repetition (written as ``summary`` records), the terminal
    table and the plots (time_to_accuracy.png, step_timeline.png) of a finished run."""
    from workloads import plots
    from workloads.results import read_jsonl
    from workloads.summary import summarize_workload, target_of

    records = read_jsonl(out_dir / "results.jsonl")
    metric, target, _ = target_of(exp.workload)
    summaries = []
    for label in labels:
        for rep in range(exp.repetitions):
            s = summarize_workload(records, label, rep, exp.workload)
            if s["steps"]:
                summaries.append(s)
    with ResultsWriter(out_dir, label=labels[0]) as w:
        for s in summaries:
            w.summary(**s)
    evals = {lb: [r for r in records if r.get("type") == "eval" and r.get("label") == lb]
             for lb in labels}
    # the job's steps (slowest rank, exposed communication from the last rank's entry)
    steps = {lb: [{**r, "rank": 0} for r in records
                  if r.get("type") == "job_step" and r.get("label") == lb] for lb in labels}
    events = [r for r in records if r.get("type") == "event"]
    plots.plot_time_to_accuracy(evals, target, out_dir / "time_to_accuracy.png", key=metric)
    plots.plot_step_timeline(steps, events, out_dir / "step_timeline.png")
    kinds = [k[:-len("_worst_ms")] for s in summaries for k in s if k.endswith("_worst_ms")]
    cols = ["label", "rep", "steps", "train_s", "healthy_step_ms", "exposed_comm_ms_median"]
    for k in dict.fromkeys(kinds):
        cols += [f"{k}_worst_ms", f"{k}_lost_s"]
    cols += ["time_to_target_s", "final_" + metric]
    if any(s.get("compute_overruns") for s in summaries):
        cols.append("compute_overruns")
    if any(s.get("delivered_min", 1) < 1 for s in summaries):
        cols.append("delivered_min")
    say(plots.comparison_table([{c: s.get(c) for c in cols} for s in summaries]))
    return summaries
