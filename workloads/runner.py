"""Run a training experiment on a fabric: one worker process per rank, results as they come.

    exp = experiment.load("experiments/training/digits_mrc_linkcut.toml")
    run_experiment(exp, Path("results/x"))

For each run (a variant's repetition) the runner plans the ranks' connections
(MRC/DBLP: every SRv6 path of each pair; RC: one QP per plane; gloo: torch's TCP
over the fabric), starts ``workloads.worker`` in every rank's namespace
(``nsenter``) with its :class:`~workloads.records.WorkerConfig`, waits until all
are set up, gives them one common start instant, and fires the failure timeline:
events by time on the wall clock in the timeline's thread from the same instant;
events by step (``at_step``) or in modelled training time (``clock = "modelled"``)
at step boundaries, where every rank waits (a gate) until the runner has applied
what is due there, so each transport meets the failure at the same point of
training. Gate time is in no step's time. Worker records stream into the
``ResultsWriter`` (JSON lines, flushed one by one) while a progress line shows the
step, loss and accuracy. A worker that fails ends the run: its traceback is
recorded, the other workers are killed, the timeline restores what it broke.
Ctrl-C does the same and keeps what was recorded; the fabric is torn down by its
context manager.

Modelled compute (``compute = "modelled"``) must dominate the real compute, or step
times hide what the shared cores add. Without ``compute_ms`` the model is calibrated
on the fabric, as in the run (every rank computing at once, its transport engine
and the exchanges sharing the cores): a short run of each variant's transport with
measured compute, the 99th percentile of the ranks' forward + backward times x 2
(:func:`calibrate_compute`; a separate process measuring alone, or several at once,
misses the engines and came out far below the run's tail). Each run reports its
overrun fraction (job steps in which some rank's real compute overran the model,
and per rank); a run above 5 % is refused at the end (after its results and
summaries are written: EmuError) unless ``workload.allow_overruns`` is true. The
check runs at the end because only the run itself knows how its compute fared.

Several variants with repetitions run interleaved by default (rep 0 of A, B, C,
then rep 1 of A, B, C, ...), so slow drifts of the machine spread over all variants.
"""

from __future__ import annotations

import dataclasses
import queue
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from emu.errors import EmuError, require_root
from emu.fabric import Fabric
from emu.launch import Child, ChildGroup
from emu.timeline import TimelineRunner
from topologies.timescale import TimeScale, time_scale
from transports.plan import DEFAULT_CONFIG
from workloads.experiment import Experiment
from workloads.jobstep import OverrunStats, StepAggregator
from workloads.progress import Progress
from workloads.recordcodec import decode_obj, encode
from workloads.records import (
    Done,
    EvalRecord,
    GateReached,
    Release,
    StepRecord,
    WorkerConfig,
    WorkerError,
)
from workloads.results import ResultsWriter
from workloads.transportcomm import plan_conns

MASTER_PORT = 29500
OVERRUN_LIMIT = 0.05  # the largest fraction of overrun steps a run may have by default
# The model pads to this percentile of the compute times measured in a calibration run,
# times a margin: a job step overruns when any of its ranks does, so each rank's tail counts.
COMPUTE_QUANTILE = 99
COMPUTE_MARGIN = 2.0  # x 1.25 let 6-12 % of job steps overrun on a noisy 2-core machine
CALIBRATION_STEPS = 60
WARMUP_STEPS = 2  # first iterations (allocations, DDP's bucket rebuild) left out
RESUME_S = 0.005  # from a gate's release to the common instant the ranks resume at
Say = Callable[[str], None]
_WORKER_ENV = {"TORCH_CPP_LOG_LEVEL": "ERROR", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


@dataclass
class RunOutcome:
    """What one labelled run (one repetition) came to. ``overruns``: the run's overrun
    counts (modelled compute; None in measured mode or when the run failed)."""

    label: str
    rep: int
    ok: bool
    error: str | None = None
    summary: dict = field(default_factory=dict)
    overruns: OverrunStats | None = None
    allow_overruns: bool = False


@dataclass(frozen=True)
class ComputeModel:
    """The modelled compute per step (ms) and where it came from: the experiment's
    ``compute_ms`` (``source = "experiment"``), or calibrated on the fabric
    (``calibrate_compute``: ``samples`` rank-steps of ``ranks`` ranks over
    ``transports``; the ``quantile``-th percentile ``quantile_ms`` x ``margin``;
    ``median_ms`` for reference)."""

    ms: float
    source: str = "experiment"
    ranks: int | None = None
    samples: int | None = None
    median_ms: float | None = None
    quantile: int | None = None
    quantile_ms: float | None = None
    margin: float | None = None
    transports: tuple[str, ...] | None = None

    def as_record(self) -> dict[str, Any]:
        """Its fields, those that are set (for the meta record)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclass(frozen=True)
class Variant:
    """One labelled variant of a run: ``exp`` with its compute model (None: the
    experiment's ``compute_ms``, or one ``run_variants`` calibrates; unused in measured
    mode)."""

    label: str
    exp: Experiment
    compute: ComputeModel | None = None


# --------------------------------------------------------------------------------------
# Worker configurations and the compute model
# --------------------------------------------------------------------------------------


def worker_configs(exp: Experiment, seed: int, compute_ms: float | None,
                   first_gate: int | None = None) -> list[WorkerConfig]:
    """Every rank's worker configuration (what workloads/worker.py reads first)."""
    spec = exp.fabric_spec()
    hosts = list(exp.hosts())
    w, t = exp.workload, exp.transport
    conns = plan_conns(spec, t.name, hosts) if t.name != "gloo" else [{} for _ in hosts]
    groups = None
    if t.collective == "hierarchical":
        by_dc: dict[int, list[int]] = {}
        for r, h in enumerate(hosts):
            by_dc.setdefault(spec.node(h).dc, []).append(r)
        groups = tuple(tuple(g) for g in by_dc.values())
    return [WorkerConfig(
        rank=r, size=len(hosts), host=h, addr=str(spec.address(h)),
        master_addr=str(spec.address(hosts[0])), master_port=MASTER_PORT,
        transport=t.name, transport_config=DEFAULT_CONFIG.get(t.name, {}),
        conns={p: tuple(cs) for p, cs in conns[r].items()},
        collective=t.collective or "ring", groups=groups, dblp=t.dblp, kind=w.kind,
        model=w.model, steps=w.steps, batch_size=w.batch_size, microbatches=w.microbatches,
        lr=w.lr, lr_schedule=w.lr_schedule, eval_every=w.eval_every, compute=w.compute,
        compute_ms=compute_ms if w.compute == "modelled" else None, seed=seed,
        first_gate=first_gate) for r, h in enumerate(hosts)]


def calibrate_compute(fab: Fabric, exps: Sequence[Experiment], say: Say = print,
                      steps: int = CALIBRATION_STEPS) -> ComputeModel:
    """The modelled compute of ``exps`` (data parallel, one model, workers and batch),
    measured as in the run: a short run of each one's transport on ``fab`` with measured
    compute (same workers, hosts and batch; no events), each rank's real forward +
    backward of every step after WARMUP_STEPS; the model pads to their 99th percentile
    x 2. Nothing of these runs goes into the results."""
    from workloads.experiment import with_overrides

    samples: list[float] = []
    transports: list[str] = []
    for e in exps:
        if e.transport.name in transports:
            continue
        transports.append(e.transport.name)
        probe = with_overrides(e, {
            "workload.compute": "measured", "workload.compute_ms": None,
            "workload.allow_overruns": None, "workload.steps": steps,
            "workload.eval_every": steps, "event": None, "timeline": None, "clock": None,
            "repetitions": None})
        sink = _Records()
        out = run_on_fabric(fab, probe, 0, sink, f"calibrate-{e.transport.name}",
                            say=lambda m: None, timeout_s=600)
        if not out.ok:
            raise EmuError(f"calibrating the compute model over {e.transport.name} failed: "
                           f"{out.error}")
        samples += [r["real_compute_s"] for r in sink.records
                    if r["type"] == "step" and r["step"] >= WARMUP_STEPS]
    if not samples:
        raise EmuError(f"calibrating the compute model: no step after the first "
                       f"{WARMUP_STEPS} (the calibration runs {steps} steps)")
    q = float(np.percentile(samples, COMPUTE_QUANTILE))
    w = exps[0].workload
    m = ComputeModel(
        ms=round(q * COMPUTE_MARGIN * 1000, 3), source="calibrated on the fabric",
        ranks=w.workers, samples=len(samples),
        median_ms=round(statistics.median(samples) * 1000, 3), quantile=COMPUTE_QUANTILE,
        quantile_ms=round(q * 1000, 3), margin=COMPUTE_MARGIN, transports=tuple(transports))
    say(f"  compute model {w.model}: {m.ms} ms per step (calibrated over "
        f"{', '.join(transports)} with {w.workers} ranks: median {m.median_ms} ms, "
        f"p{m.quantile} {m.quantile_ms} ms, x {m.margin})")
    return m


class RecordSink(Protocol):
    """Where ``run_on_fabric`` writes its records: a ``ResultsWriter``, or ``_Records``."""

    def write(self, record_type: str, **fields: Any) -> dict: ...

    def event(self, record: Mapping[str, Any], *, rep: int = 0,
              label: str | None = None) -> dict: ...


class _Records:
    """A results sink that keeps records in memory (calibration runs)."""

    def __init__(self) -> None:
        self.records: list[dict] = []

    def write(self, record_type: str, **fields: Any) -> dict:
        rec = {"type": record_type, **fields}
        self.records.append(rec)
        return rec

    def event(self, record: Mapping[str, Any], *, rep: int = 0,
              label: str | None = None) -> dict:
        return self.write("event", rep=rep, label=label, **record)


def compute_model_ms(exp: Experiment, say: Say = print) -> float | None:
    """The experiment's own ``compute_ms`` (None: measured mode, or a model that
    ``run_variants`` / ``run_label`` calibrate on the fabric)."""
    del say  # nothing is measured before the fabric exists
    return exp.workload.compute_ms if exp.workload.compute == "modelled" else None


def _needs_calibration(e: Experiment) -> bool:
    w = e.workload
    return w.compute == "modelled" and w.compute_ms is None and w.kind == "data_parallel"


def _with_compute(fab: Fabric, variants: Sequence[Variant], say: Say) -> list[Variant]:
    """``variants`` with a compute model each: the experiment's ``compute_ms``, else one
    calibrated model per distinct workload (shared by the variants that differ in
    transport only, so their step times compare)."""
    groups: dict[tuple, list[Experiment]] = {}
    for v in variants:
        if v.compute is None and _needs_calibration(v.exp):
            groups.setdefault(_compute_key(v.exp), []).append(v.exp)
    models = {k: calibrate_compute(fab, exps, say) for k, exps in groups.items()}
    out = []
    for v in variants:
        compute = v.compute
        if compute is None and v.exp.workload.compute == "modelled":
            if _needs_calibration(v.exp):
                compute = models[_compute_key(v.exp)]
            else:
                ms = v.exp.workload.compute_ms
                # modelled and not calibrated: the experiment gives it (a pipeline must)
                assert ms is not None
                compute = ComputeModel(ms=ms)
        out.append(dataclasses.replace(v, compute=compute))
    return out


def _compute_key(e: Experiment) -> tuple:
    """What a compute model depends on: variants that agree on it share one."""
    w = e.workload
    return (w.model, w.workers, w.batch_size, e.hosts())


# --------------------------------------------------------------------------------------
# The worker processes of one run
# --------------------------------------------------------------------------------------


class _Job:
    """The workers of one run (children of ``emu.launch``) and their gates."""

    def __init__(self, fab: Fabric, cfgs: list[WorkerConfig],
                 on_record: Callable[[Any], None]) -> None:
        self.failed: WorkerError | None = None
        self.on_record = on_record
        self.lock = threading.Lock()
        self.at_gate: dict[int, set[int]] = {}  # step -> ranks waiting after it
        self.gates: queue.Queue[int] = queue.Queue()  # steps every rank waits after
        self.group = ChildGroup()
        try:
            for cfg in cfgs:
                self.group.spawn(
                    f"worker {cfg.rank}",
                    fab.in_netns(cfg.host, sys.executable, "-m", "workloads.worker"),
                    config=encode(cfg), env=_WORKER_ENV,
                    on_record=partial(self._record, cfg.rank))
        except BaseException:
            self.group.kill()
            raise
        self.children = list(self.group)

    def _fail(self, rec: WorkerError) -> None:
        with self.lock:
            self.failed = self.failed or rec

    def _record(self, rank: int, child: Child, data: dict[str, Any]) -> None:
        """One record of ``rank`` (on its reader thread)."""
        try:
            rec = decode_obj(data)
        except ValueError as e:
            self._fail(WorkerError(rank=rank, error=f"a malformed record: {e}"))
            return
        if isinstance(rec, GateReached):
            with self.lock:
                waiting = self.at_gate.setdefault(rec.step, set())
                waiting.add(rank)
                if len(waiting) == len(self.children):
                    del self.at_gate[rec.step]
                    self.gates.put(rec.step)
            return
        if isinstance(rec, WorkerError):
            self._fail(rec)
        try:
            self.on_record(rec)
        except Exception as e:  # noqa: BLE001 - the run ends with it; keep draining
            self._fail(WorkerError(rank=rank, error=f"recording a {type(rec).__name__} "
                                                    f"failed: {e!r}"))

    def wait_ready(self, timeout: float) -> None:
        try:
            self.group.wait_ready(timeout)
        except EmuError as e:
            raise EmuError(self._why(None) if self.failed else str(e)) from None

    def _why(self, rank: int | None) -> str:
        if self.failed:
            return f"worker {self.failed.rank} failed: {self.failed.error}"
        assert rank is not None
        return self.children[rank].why(f"exited {self.children[rank].poll()}")

    def start(self, t0: float) -> None:
        self.group.start_at(t0)

    def wait(self, timeout: float, on_gate: Callable[[int], int | None] | None = None) -> None:
        """Until every worker exited; raises EmuError naming the first failure. When every
        rank waits at the gate after a step, ``on_gate(step)`` runs (it applies what is
        due there) and returns the next gate; then the ranks are released together."""
        end = time.monotonic() + timeout
        while True:
            codes = [c.poll() for c in self.children]
            bad = [r for r, c in enumerate(codes) if c not in (None, 0)]
            if self.failed or bad:
                for r in bad:  # its records end at EOF, after the error record
                    self.children[r].wait(5.0)
                raise EmuError(self._why(bad[0] if bad else None))
            if all(c == 0 for c in codes):
                for c in self.children:
                    c.wait(5.0)
                broken = [c for c in self.children if c.malformed]
                if broken:
                    raise EmuError(f"{broken[0].name} wrote {broken[0].malformed} malformed "
                                   "records")
                return
            if time.monotonic() > end:
                raise EmuError(f"workers still running after {timeout:.0f} s")
            try:
                step = self.gates.get(timeout=0.05)
            except queue.Empty:
                continue
            if on_gate is None:
                raise EmuError(f"the workers wait at a gate after step {step} that nothing "
                               "fires at")
            nxt = on_gate(step)
            line = encode(Release(step, time.monotonic() + RESUME_S, nxt))
            for c in self.children:
                c.send_line(line)

    def kill(self) -> None:
        self.group.kill()


# --------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------


def run_on_fabric(fab: Fabric, exp: Experiment, rep: int, writer: RecordSink, label: str,
                  say: Say = print, compute_ms: float | None = None,
                  timeout_s: float = 1800) -> RunOutcome:
    """Train ``exp`` (repetition ``rep``) on a running fabric; records go to ``writer``.
    ``compute_ms``: the modelled compute (default: the experiment's ``compute_ms``)."""
    seed = exp.seeds()[rep]
    w = exp.workload
    compute_ms = w.compute_ms if compute_ms is None else compute_ms
    timeline = None
    if exp.events:
        def record(event: dict) -> None:
            writer.event(event, rep=rep, label=label)

        timeline = TimelineRunner(fab, exp.timeline(), record, clock=exp.clock,
                                  training=True)

    def next_gate(after: int) -> int | None:
        g = timeline.next_gate(after) if timeline is not None else None
        return g if g is not None and g <= w.steps - 2 else None  # no boundary after the end

    cfgs = worker_configs(exp, seed, compute_ms, next_gate(0))
    prog = Progress(f"{label} rep {rep}", w.steps, say)
    agg = StepAggregator(len(cfgs))
    internal: list[tuple[int, str]] = []  # (rank, traceback): a core raised on a datagram

    def on_record(rec: Any) -> None:
        if isinstance(rec, StepRecord):
            job_step = agg.add(rec)
            writer.write("step", rep=rep, label=label, **rec.result_fields())
            if job_step is not None:
                writer.write("job_step", rep=rep, label=label, **job_step.result_fields())
                prog.update(job_step.step + 1, loss=job_step.loss)
        elif isinstance(rec, EvalRecord):
            agg.evaluated(rec.step, rec.eval_s)
            writer.write("eval", rep=rep, label=label, **rec.result_fields())
            prog.note(**{k: v for k, v in rec.metrics.items()
                         if k in ("accuracy", "loss") and v is not None})
        elif isinstance(rec, WorkerError):
            writer.write("error", rep=rep, label=label, rank=rec.rank, error=rec.error,
                         traceback=rec.traceback)
        elif isinstance(rec, Done):
            writer.write("worker_done", rep=rep, label=label, rank=rec.rank, steps=rec.steps,
                         overruns=rec.overruns, comm=dict(rec.comm))
            for tb in rec.comm.get("internal_errors", ()):
                internal.append((rec.rank, tb))

    def on_gate(step: int) -> int | None:
        # Every rank's record of ``step`` is in (each rank reports its step before
        # reaching the gate), so the training time is the job's up to this boundary.
        assert timeline is not None  # gates are waited on only with a gated timeline
        timeline.fire_due(step, agg.training_s)
        agg.resumed(step)
        return next_gate(step + 1)

    job = _Job(fab, cfgs, on_record)
    gated = timeline is not None and timeline.gated
    try:
        if timeline is not None:
            timeline.prepare()  # e.g. burst senders started and armed, while workers set up
        job.wait_ready(300)
        t0 = time.monotonic() + 0.2
        if timeline is not None:
            timeline.start(t0)
            if gated:  # modelled-time events at 0 fire before step 0
                timeline.fire_due(-1, 0.0)
        job.start(t0)
        job.wait(timeout_s, on_gate if gated else None)
        prog.close()
        if internal:  # the engines dropped those datagrams and went on: the run is suspect
            rank, tb = internal[0]
            raise EmuError(f"the transport of rank {rank} raised on a received datagram "
                           f"({len(internal)} tracebacks in the results); the last line: "
                           f"{tb.strip().splitlines()[-1]}")
        stats = agg.overruns() if w.compute == "modelled" else None
        return RunOutcome(label, rep, True, overruns=stats, allow_overruns=w.allow_overruns)
    except EmuError as e:
        prog.close()
        say(f"  {label}: {e}")
        return RunOutcome(label, rep, False, str(e))
    finally:
        job.kill()
        if timeline is not None:
            timeline.stop()


def schedule(variants: Sequence[Variant], interleave: bool) -> list[tuple[Variant, int]]:
    """The order of the runs: (variant, repetition). Interleaved: rep 0 of every variant,
    then rep 1 of every variant, ...; else every repetition of a variant in a row."""
    if not interleave:
        return [(v, rep) for v in variants for rep in range(v.exp.repetitions)]
    most = max((v.exp.repetitions for v in variants), default=0)
    return [(v, rep) for rep in range(most) for v in variants if rep < v.exp.repetitions]


def run_variants(fab: Fabric, writer: ResultsWriter, variants: Sequence[Variant],
                 rtt_s: float | None = None, say: Say = print,
                 interleave: bool = True) -> list[RunOutcome]:
    """Every repetition of every variant on ``fab`` (order: ``schedule``), after one meta
    record per label; EmuError naming the run if one fails. A modelled variant without a
    compute model (``Variant.compute`` None, no ``compute_ms``) gets one calibrated on
    ``fab`` first (``calibrate_compute``; one per workload, shared by its variants).
    Overruns are not checked here: pass the outcomes to ``refuse_overruns`` once the
    results are reported."""
    labels = [v.label for v in variants]
    dup = sorted({lb for lb in labels if labels.count(lb) > 1})
    if dup:
        raise EmuError(f"variant labels must be distinct: {dup} given more than once")
    variants = _with_compute(fab, variants, say)
    for v in variants:
        e = v.exp
        writer.meta(experiment=e.as_record(), transport=e.transport.name, label=v.label,
                    compute={"mode": e.workload.compute,
                             "ms": None if v.compute is None else v.compute.ms,
                             **({} if v.compute is None else v.compute.as_record())},
                    bottleneck_mbit=e.fabric.rate_mbit * e.fabric.planes, rtt_s=rtt_s,
                    order="interleaved" if interleave else "sequential",
                    time_scale=time_scale(e.fabric_spec()).as_record())
    outcomes = []
    for v, rep in schedule(variants, interleave):
        ms = None if v.compute is None else v.compute.ms
        out = run_on_fabric(fab, v.exp, rep, writer, v.label, say, ms)
        if not out.ok:
            raise EmuError(f"{v.label} repetition {rep} failed: {out.error}")
        outcomes.append(out)
    return outcomes


def refuse_overruns(outcomes: Iterable[RunOutcome], limit: float = OVERRUN_LIMIT) -> None:
    """EmuError naming every run whose real compute overran its model in more than
    ``limit`` of its steps, unless its experiment allows overruns."""
    bad = [(o, o.overruns) for o in outcomes if o.overruns is not None
           and not o.allow_overruns and o.overruns.job_fraction > limit]
    if not bad:
        return
    lines = [f"{o.label} rep {o.rep}: {ov.job_overruns} of {ov.steps} steps "
             f"({ov.job_fraction:.0%}; per rank "
             f"{', '.join(f'{f:.0%}' for f in ov.rank_fractions)})" for o, ov in bad]
    raise EmuError(
        f"the modelled compute did not hold: the real compute overran it in more than "
        f"{limit:.0%} of the steps of {'; '.join(lines)}. Its step times would hide what "
        "the shared cores add. Set a larger workload.compute_ms, run fewer workers, or "
        "accept it with workload.allow_overruns = true (the results are written)")


def run_label(fab: Fabric, writer: ResultsWriter, label: str, exp: Experiment,
              compute_ms: float | None, rtt_s: float | None,
              say: Say = print) -> list[RunOutcome]:
    """Every repetition of ``exp`` on ``fab`` under ``label``, after its meta record;
    EmuError naming the label if one fails or overran its modelled compute (see
    ``refuse_overruns``)."""
    compute = ComputeModel(ms=compute_ms, source="given") if compute_ms is not None else None
    outcomes = run_variants(fab, writer, [Variant(label, exp, compute)], rtt_s, say,
                            interleave=False)
    refuse_overruns(outcomes)
    return outcomes


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


def run_experiment(exp: Experiment, out_dir: Path, say: Say = print,
                   variants: list[tuple[str, dict]] | None = None,
                   interleave: bool | None = None) -> list[dict]:
    """Build the experiment's fabric once and run every variant (label, overrides of
    ``with_overrides``; default: the experiment as it is, labelled by its transport) and
    repetition on it, then report. Returns the summaries.

    ``interleave`` (default: when there are several variants and repetitions): rep 0
    of every variant, then rep 1, ... (else each variant's repetitions in a row). After
    the report, EmuError if a run overran its modelled compute (``refuse_overruns``).
    """
    from workloads.experiment import with_overrides

    require_root("emu run")
    runs = [(label, with_overrides(exp, ov) if ov else exp)
            for label, ov in (variants or [(exp.transport.name, {})])]
    if interleave is None:
        interleave = len(runs) > 1 and any(e.repetitions > 1 for _, e in runs)
    hosts = exp.hosts()
    with ResultsWriter(out_dir, label=runs[0][0]) as writer:
        with Fabric(exp.fabric_spec(), name="run", progress=lambda m: say(f"  fabric: {m}"),
                    control_plane=exp.fabric.control_plane) as fab:
            rtt = measure_rtt(fab, hosts[0], hosts[-1]) if len(hosts) > 1 else None
            outcomes = run_variants(fab, writer, [Variant(label, e) for label, e in runs],
                                    rtt, say, interleave)
    summaries = report(out_dir, exp, [label for label, _ in runs], say)
    refuse_overruns(outcomes)
    return summaries


# --------------------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------------------


def overrun_stats(records: Iterable[Mapping[str, Any]], label: str,
                  rep: int) -> OverrunStats | None:
    """A run's overruns from its results records (None unless its compute was modelled)."""
    records = list(records)
    meta = next((r for r in records if r.get("type") == "meta" and r.get("label") == label),
                None)
    if meta is None or (meta.get("compute") or {}).get("mode") != "modelled":
        return None
    mine = [r for r in records if r.get("label") == label and r.get("rep", 0) == rep]
    jobs = [r for r in mine if r.get("type") == "job_step"]
    steps = [r for r in mine if r.get("type") == "step"]
    ranks = 1 + max((r["rank"] for r in steps), default=-1)
    rank_steps, rank_overruns = [0] * ranks, [0] * ranks
    for r in steps:
        rank_steps[r["rank"]] += 1
        rank_overruns[r["rank"]] += bool(r.get("overrun"))
    return OverrunStats(len(jobs), sum(1 for j in jobs if j.get("overrun_ranks")),
                        tuple(rank_steps), tuple(rank_overruns))


def report(out_dir: Path, exp: Experiment, labels: list[str], say: Say = print) -> list[dict]:
    """Summaries per label and repetition (written as ``summary`` records, with the overrun
    fractions of modelled compute), the terminal table and the plots
    (time_to_accuracy.png, step_timeline.png) of a finished run."""
    from workloads import plots
    from workloads.results import read_jsonl
    from workloads.summary import summarize_workload, target_of

    records = read_jsonl(out_dir / "results.jsonl")
    metric, target, _ = target_of(exp.workload)
    reps = max((r.get("rep", 0) for r in records if r.get("type") == "job_step"),
               default=-1) + 1
    summaries = []
    for label in labels:
        for rep in range(reps):
            s = summarize_workload(records, label, rep, exp.workload)
            if s["steps"]:
                stats = overrun_stats(records, label, rep)
                if stats is not None:
                    s.update(stats.as_record())
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
    if any("overrun_fraction" in s for s in summaries):
        cols.append("overrun_fraction")
    if any(s.get("delivered_min", 1) < 1 for s in summaries):
        cols.append("delivered_min")
    if any("burst_drops" in s for s in summaries):
        cols += ["burst_drops", "burst_delay_only"]
    say(plots.comparison_table([{c: s.get(c) for c in cols} for s in summaries]))
    if reps > 1:
        say(repetitions_table(summaries, cols, "time_to_target_s"))
    meta = next((r for r in records if r.get("type") == "meta" and r.get("time_scale")), None)
    if meta is not None:
        ts = meta["time_scale"]
        say(TimeScale(ts["emulated_mbit"], ts["nominal_gbit"]).describe())
    return summaries


def repetitions_table(summaries: list[dict], cols: list[str], compare: str) -> str:
    """Median [spread] of each column over repetitions, per label, and which labels'
    ``compare`` figures differ by more than their spread (the only differences called
    differences)."""
    from workloads import plots
    from workloads.summary import aggregate, beyond_spread, spread_cell

    agg = aggregate(summaries)
    rows = []
    for label, figs in agg.items():
        row: dict[str, Any] = {"label": label, "reps": figs["reps"]}
        for c in cols:
            if c not in ("label", "rep"):
                row[c] = spread_cell(figs.get(c), 3 if c.endswith("_s") else 2)
        rows.append(row)
    lines = [plots.comparison_table(rows)]
    labels = list(agg)
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            fa, fb = agg[a].get(compare), agg[b].get(compare)
            if fa and fb:
                verdict = "differ beyond the spread" if beyond_spread(fa, fb) else \
                    "within the spread: not a difference"
                lines.append(f"{compare}: {a} {fa['median']:.3f} vs {b} {fb['median']:.3f}: "
                             f"{verdict}")
    return "\n".join(lines)
