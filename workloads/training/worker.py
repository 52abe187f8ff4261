"""A training worker: one process per emulated host, inside its namespace, one CPU thread.

    python -m workloads.training.worker          (records on stdin and stdout, one JSON line each)

Protocol (the emulator's child protocol, emu.childproto, with the records of
workloads/records.py; started by emu.launch, dies with the runner): line 1 of stdin is the
worker's ``config`` (a WorkerConfig, written by workloads/training/rank_configs.py); the worker
sets up (model, data, process group, transport endpoint), prints ``ready`` and
reads ``start``, the CLOCK_MONOTONIC instant (shared by every process of the
machine) at which all workers start step 0. Records go to stdout as they happen:
``step`` (every rank), ``eval`` (rank 0, or the last pipeline stage), ``gate``,
``done``. On an exception the worker prints an ``error`` record with its
traceback and exits 1.

Gates: after the step named by ``first_gate`` (then by each release's
``next_gate``) and its evaluation, the worker prints ``gate`` and blocks until the
runner's ``release`` (the runner applies the failures due at that step boundary in
between), then sleeps until the release's common instant: every rank starts the
next step together, and the wait is in no step's time.

Data parallel: the model is wrapped in DDP with ``GradSync.hook`` as its
communication hook, so gradients travel through our collectives (or gloo for
the baseline). DDP itself needs a process group for its set-up broadcast: a
gloo group over the fabric's TCP, used for nothing else when our transports
carry the gradients.

Compute modes (timing honesty on a shared 2-core machine): ``measured`` takes
each step's compute time as it is; ``modelled`` pads each step's compute (the
forward and backward before the exchange) to ``compute_ms`` with a sleep, so
every step costs what the model says while gradients stay real; a step whose
real compute overran the model is flagged (``overrun``) and counted. In a
pipeline, ``compute_ms`` is one microbatch's forward + backward on one stage: the
forward is padded to a third of it, the backward to two thirds; a step overruns
when any of its pads did.

Pipeline parallel (``kind = "pipeline"``): rank k holds stage k of the model;
each step runs ``microbatches`` forwards through the stages (activations sent
to the next rank over the transport), then the backwards in reverse order
(activation gradients sent back), then every stage steps its optimizer (GPipe).
"""

from __future__ import annotations

import os
import sys
import time
import traceback

from emu import childproto
from transports import registry
from workloads.recordcodec import decode, encode
from workloads.records import (
    Done,
    EvalRecord,
    GateReached,
    Ready,
    Release,
    Start,
    StepRecord,
    WorkerConfig,
    WorkerError,
)


def emit(rec) -> None:
    sys.stdout.write(encode(rec))
    sys.stdout.flush()


def receive(kind: type):
    """The next record on stdin, which must be a ``kind``."""
    line = sys.stdin.readline()
    if not line:
        raise RuntimeError(f"stdin closed while waiting for a {kind.__name__} record")
    rec = decode(line)
    if not isinstance(rec, kind):
        raise RuntimeError(f"expected a {kind.__name__} record, got {type(rec).__name__}")
    return rec


def lr_at(cfg: WorkerConfig, step: int) -> float:
    """The learning rate of ``step`` under the configured schedule."""
    from workloads.training.schedule import lr_at_step

    return lr_at_step(cfg.lr, cfg.lr_schedule, cfg.steps, step)


def _gloo_group(cfg: WorkerConfig):
    """torch.distributed's default group: gloo on this host's fabric address."""
    from workloads.collectives.gloo import init_gloo

    dist = init_gloo(cfg.addr, cfg.master_addr, cfg.master_port, cfg.rank, cfg.size,
                     cfg.pg_timeout_s)
    return dist.group.WORLD


def _comm(cfg: WorkerConfig):
    from workloads.collectives.transportcomm import TransportComm

    return TransportComm(cfg.transport, cfg.rank, cfg.size, cfg.conns, cfg.transport_config,
                         cfg.seed)


def wait_start(rank: int) -> float:
    """Say ready, then sleep until the common start instant; returns it."""
    emit(Ready(rank, os.getpid()))
    t0 = receive(Start).t0
    time.sleep(max(0.0, t0 - time.monotonic()))
    return t0


class Gates:
    """The step boundaries at which this rank waits for the runner (module docstring)."""

    def __init__(self, rank: int, first: int | None) -> None:
        self.rank, self.next = rank, first

    def after(self, step: int) -> None:
        """Called once ``step`` (and its evaluation) is done: wait here if it is a gate."""
        if step != self.next:
            return
        emit(GateReached(self.rank, step))
        rel = receive(Release)
        if rel.step != step:
            raise RuntimeError(f"released from the gate after step {rel.step}, waiting at "
                               f"the gate after step {step}")
        self.next = rel.next_gate
        time.sleep(max(0.0, rel.t_resume - time.monotonic()))


class Pacer:
    """Compute-time accounting: measured, or padded to a modelled duration."""

    def __init__(self, cfg: WorkerConfig) -> None:
        self.modelled = cfg.modelled
        self.model_s = (cfg.compute_ms or 0.0) / 1000
        self.overruns = 0  # steps in which a pad found the real compute over the model
        self.overrun = False  # in the current step

    def begin_step(self) -> None:
        self.overrun = False

    def end_step(self) -> bool:
        """Whether the step that ends overran (counted)."""
        self.overruns += self.overrun
        return self.overrun

    def pad(self, started: float, share: float = 1.0) -> float:
        """Called when compute ends: sleeps to ``share`` of the modelled duration; returns
        the real compute time."""
        real = time.monotonic() - started
        if self.modelled:
            model = self.model_s * share
            if real > model:
                self.overrun = True
            else:
                time.sleep(model - real)
        return real


def run_data_parallel(cfg: WorkerConfig) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    from workloads.models import build
    from workloads.training.gradsync import GradSync

    rank, size = cfg.rank, cfg.size
    model, task = build(cfg.model, cfg.seed)
    shards = task.shards(rank, size, cfg.batch_size)
    pg = _gloo_group(cfg)
    # the kernel's transport (gloo) runs torch's own all-reduce: no Comm of ours
    comm = None if registry.get(cfg.transport).core is None else _comm(cfg)
    sync = GradSync("gloo" if comm is None else "transport", size, comm=comm, pg=pg,
                    collective=cfg.collective, groups=cfg.groups, dblp=cfg.dblp)
    pacer = Pacer(cfg)
    gates = Gates(rank, cfg.first_gate)
    ddp = DDP(model, process_group=pg, broadcast_buffers=False, bucket_cap_mb=256)
    state = {"compute_started": 0.0, "real": 0.0, "padded": False}

    def pad() -> None:
        if not state["padded"]:
            state["real"] = pacer.pad(state["compute_started"])
            state["padded"] = True

    def hook(st, bucket):
        pad()  # compute (forward, backward) ends where the step's first exchange starts
        return sync.hook(st, bucket)

    ddp.register_comm_hook(None, hook)
    opt = task.optimizer(ddp.parameters())
    warm_up(model, task.loss_fn, *shards.batch(0))
    t0 = wait_start(rank)
    done = 0
    try:
        for step in range(cfg.steps):
            lr = lr_at(cfg, step)
            for g in opt.param_groups:
                g["lr"] = lr
            sync.set_signals(step, shards.epoch_of(step), lr)
            if step == cfg.inject_error_at_step:  # fault injection (runner tests)
                raise RuntimeError(f"inject_error_at_step={step}: failing as configured")
            x, y = shards.batch(step)
            pacer.begin_step()
            start = time.monotonic()
            state["compute_started"] = start
            state["padded"] = False
            n_rounds = len(sync.rounds)
            loss = task.loss_fn(ddp(x), y)
            loss.backward()
            pad()  # no bucket exchanged (nothing to average): the step is still paced
            opt_start = time.monotonic()
            opt.step()
            opt.zero_grad(set_to_none=True)
            end = time.monotonic()
            rounds = sync.rounds[n_rounds:]
            comm_s = sum(r["t_exit"] - r["t_enter"] for r in rounds)
            emit(StepRecord(
                rank=rank, step=step, t_s=round(end - t0, 6), start=start, end=end,
                t_enter=rounds[0]["t_enter"] if rounds else opt_start,
                t_exit=rounds[-1]["t_exit"] if rounds else opt_start,
                compute_s=round((end - start) - comm_s, 6), comm_s=round(comm_s, 6),
                step_s=round(end - start, 6), loss=loss.item(), lr=lr,
                epoch=shards.epoch_of(step), bytes=sum(r["bytes"] for r in rounds),
                real_compute_s=round(state["real"], 6),
                model_compute_s=pacer.model_s if pacer.modelled else None,
                overrun=pacer.end_step(),
                tolerance=rounds[-1].get("tolerance") if rounds else None,
                why=rounds[-1].get("why") if rounds else None,
                delivered=min((r.get("delivered", 1.0) for r in rounds), default=1.0),
                lost_entries=sum(r.get("lost_entries", 0) for r in rounds),
                estimated_entries=sum(r.get("estimated_entries", 0) for r in rounds)))
            done = step + 1
            last = step == cfg.steps - 1
            if rank == 0 and (step % cfg.eval_every == cfg.eval_every - 1 or last):
                metrics = task.evaluate(model)
                emit(EvalRecord(rank=rank, step=step, t_s=round(end - t0, 6),
                                eval_s=round(time.monotonic() - end, 6), metrics=metrics))
            gates.after(step)
    finally:
        emit(Done(rank=rank, steps=done, overruns=pacer.overruns, comm=comm_stats(comm)))
        if comm is not None:
            comm.close(linger_s=0.5)  # answer late retransmissions of the last round


def warm_up(model, loss_fn, x, y, times: int = 3) -> None:
    """Forward and backward a few times outside DDP, gradients dropped: the first passes
    (kernel selection, allocations) would otherwise overrun any compute model."""
    for _ in range(times):
        loss_fn(model(x), y).backward()
        model.zero_grad(set_to_none=True)


def comm_stats(comm) -> dict:
    if comm is None:
        return {}
    totals: dict[str, float] = {}
    for st in comm.endpoint.stats().values():
        for k, v in st.items():
            if isinstance(v, int | float):
                totals[k] = totals.get(k, 0) + v
    ep = comm.endpoint
    hd = ep.socks.host_delay
    return {"bytes_sent": comm.bytes_sent, "bytes_received": comm.bytes_received,
            "unknown_conn": ep.unknown_conn, "cores": totals,
            "internal_errors": ep.socks.internal_errors,
            # the engine's scheduling: real-time or not (why not), and its measured delay
            "engine": {"realtime": ep.realtime, "realtime_error": ep.realtime_error,
                       "host_delay_peak_ms": round(hd.peak * 1e3, 3),
                       "host_delay_ms": round(hd.published * 1e3, 3),
                       "timer_wakes": hd.samples}}


def run_pipeline(cfg: WorkerConfig) -> None:
    from workloads.collectives.comm import drive
    from workloads.models import build, split_stages
    from workloads.training.pipeline import PipelineStage

    rank, size = cfg.rank, cfg.size
    model, task = build(cfg.model, cfg.seed)
    stages = split_stages(cfg.model, model, size)
    comm = _comm(cfg)
    stage = PipelineStage(stages, rank, comm, task.loss_fn)
    opt = task.optimizer(stages[rank].parameters())
    shards = task.shards(0, 1, cfg.batch_size)  # every stage sees the whole batch's indices
    pacer = Pacer(cfg)
    gates = Gates(rank, cfg.first_gate)
    t0 = wait_start(rank)
    done = 0
    try:
        for step in range(cfg.steps):
            lr = lr_at(cfg, step)
            for g in opt.param_groups:
                g["lr"] = lr
            if step == cfg.inject_error_at_step:  # fault injection (runner tests)
                raise RuntimeError(f"inject_error_at_step={step}: failing as configured")
            x, y = shards.batch(step)
            pacer.begin_step()
            start = time.monotonic()
            assert cfg.microbatches is not None  # a pipeline's config always sets it
            res = drive(stage.train_step(x, y, cfg.microbatches, pacer), comm)
            opt.step()
            opt.zero_grad(set_to_none=True)
            end = time.monotonic()
            # A stage computes whenever it is not waiting on a transfer.
            emit(StepRecord(
                rank=rank, step=step, t_s=round(end - t0, 6), start=start, end=end,
                t_enter=start, t_exit=end, pipeline=True,
                compute_s=round(end - start - res.comm_s, 6), comm_s=round(res.comm_s, 6),
                step_s=round(end - start, 6), loss=res.loss, lr=lr,
                epoch=shards.epoch_of(step), bytes=res.bytes, overrun=pacer.end_step()))
            done = step + 1
            last = step == cfg.steps - 1
            if step % cfg.eval_every == cfg.eval_every - 1 or last:
                metrics = drive(stage.evaluate(task.evaluate), comm)
                if metrics is not None:
                    emit(EvalRecord(rank=rank, step=step, t_s=round(end - t0, 6),
                                    eval_s=round(time.monotonic() - end, 6), metrics=metrics))
            gates.after(step)
    finally:
        emit(Done(rank=rank, steps=done, overruns=pacer.overruns, comm=comm_stats(comm)))
        comm.close(linger_s=0.5)


def main() -> int:
    childproto.die_with_parent()  # a worker must not outlive the run
    rank = -1
    try:
        first = receive(WorkerConfig)
        rank = first.rank
        import torch

        torch.set_num_threads(1)
        torch.set_num_interop_threads(1)
        if first.kind == "pipeline":
            run_pipeline(first)
        else:
            run_data_parallel(first)
    except BaseException as e:  # noqa: BLE001 - reported to the runner, then exit 1
        emit(WorkerError(rank=rank, error=repr(e), traceback=traceback.format_exc()))
        sys.stdout.flush()
        os._exit(1)
    sys.stdout.flush()
    # torch's gloo/TCPStore teardown at interpreter exit can abort; results are out already.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
