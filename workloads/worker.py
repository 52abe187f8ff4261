"""A training worker: one process per emulated host, inside its namespace, one CPU thread.

    python -m workloads.worker          (config line, then start-time line, on stdin)

Protocol (as the transport drivers'): line 1 of stdin is the worker's config
(JSON, written by workloads/runner.py); the worker sets up (model, data,
process group, transport endpoint), prints a ``{"type": "ready"}`` record and
reads line 2, the CLOCK_MONOTONIC instant (shared by every process of the
machine) at which all workers start step 0. Records go to stdout, one JSON
object per line, as they happen: ``step`` (every rank), ``eval`` (rank 0, or the
last pipeline stage), ``done``. On an exception the worker prints an ``error``
record with its traceback and exits 1.

Data parallel: the model is wrapped in DDP with ``GradSync.hook`` as its
communication hook, so gradients travel through our collectives (or gloo for
the baseline). DDP itself needs a process group for its set-up broadcast: a
gloo group over the fabric's TCP, used for nothing else when our transports
carry the gradients.

Compute modes (timing honesty on a shared 2-core machine): ``measured`` takes
each step's compute time as it is; ``modelled`` pads each step's compute (the
forward and backward before the exchange) to ``compute_ms`` with a sleep, so
every step costs what the model says while gradients stay real; a step whose
real compute overran the model is counted (``overruns``). In a pipeline,
``compute_ms`` is one microbatch's forward + backward on one stage: the forward
is padded to a third of it, the backward to two thirds.

Pipeline parallel (``kind = "pipeline"``): rank k holds stage k of the model;
each step runs ``microbatches`` forwards through the stages (activations sent
to the next rank over the transport), then the backwards in reverse order
(activation gradients sent back), then every stage steps its optimizer (GPipe).
"""

from __future__ import annotations

import ctypes
import datetime
import json
import os
import signal
import sys
import time
import traceback

PR_SET_PDEATHSIG = 1


def emit(rec: dict) -> None:
    sys.stdout.write(json.dumps(rec) + "\n")
    sys.stdout.flush()


def lr_at(cfg: dict, step: int) -> float:
    """The learning rate of ``step`` under the configured schedule."""
    from workloads.schedule import lr_at_step

    return lr_at_step(cfg["lr"], cfg.get("lr_schedule", "constant"), cfg["steps"], step)


def _die_with_parent() -> None:
    # A worker must not outlive the run (the fabric teardown kills it anyway).
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def _gloo_group(cfg: dict):
    """torch.distributed's default group: gloo on this host's fabric address."""
    import torch.distributed as dist

    addr = cfg["addr"]

    def make(store, rank, size, timeout):
        opts = dist.ProcessGroupGloo._Options()
        # Gloo's default device is the hostname's address, which the namespaces lack.
        opts._devices = [dist.ProcessGroupGloo.create_device(hostname=addr)]
        opts._timeout = timeout
        return dist.ProcessGroupGloo(store, rank, size, opts)

    dist.Backend.register_backend("fabricgloo", make, devices=["cpu"])
    dist.init_process_group("fabricgloo", init_method=f"tcp://[{cfg['master_addr']}]:"
                            f"{cfg['master_port']}", rank=cfg["rank"], world_size=cfg["size"],
                            timeout=datetime.timedelta(seconds=cfg.get("pg_timeout_s", 120)))
    return dist.group.WORLD


def _comm(cfg: dict):
    from workloads.transportcomm import TransportComm

    conns = {int(p): cs for p, cs in cfg["conns"].items()}
    return TransportComm(cfg["transport"], cfg["rank"], cfg["size"], conns,
                         cfg.get("transport_config"), cfg.get("seed", 0))


def wait_start() -> float:
    emit({"type": "ready", "rank": _RANK, "pid": os.getpid()})
    line = sys.stdin.readline()
    t0 = float(line) if line.strip() else time.monotonic()
    time.sleep(max(0.0, t0 - time.monotonic()))
    return t0


_RANK = -1


class Pacer:
    """Compute-time accounting: measured, or padded to a modelled duration."""

    def __init__(self, cfg: dict) -> None:
        self.modelled = cfg.get("compute", "measured") == "modelled"
        self.model_s = (cfg.get("compute_ms") or 0.0) / 1000
        self.overruns = 0

    def pad(self, started: float, share: float = 1.0) -> float:
        """Called when compute ends: sleeps to ``share`` of the modelled duration; returns
        the real compute time."""
        real = time.monotonic() - started
        if self.modelled:
            model = self.model_s * share
            if real > model:
                self.overruns += 1
            else:
                time.sleep(model - real)
        return real


def run_data_parallel(cfg: dict) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    from workloads.gradsync import DblpOptions, GradSync
    from workloads.models import build

    rank, size = cfg["rank"], cfg["size"]
    model, task = build(cfg["model"], cfg["seed"])
    shards = task.shards(rank, size, cfg["batch_size"])
    pg = _gloo_group(cfg)
    comm = None if cfg["transport"] == "gloo" else _comm(cfg)
    dblp = DblpOptions(**cfg["dblp"]) if cfg.get("dblp") else None
    sync = GradSync("gloo" if comm is None else "transport", size, comm=comm, pg=pg,
                    collective=cfg.get("collective", "ring"), groups=cfg.get("groups"),
                    dblp=dblp)
    pacer = Pacer(cfg)
    ddp = DDP(model, process_group=pg, broadcast_buffers=False, bucket_cap_mb=256)
    state = {"compute_started": 0.0, "real": 0.0, "padded": False}

    def hook(st, bucket):
        # Compute (forward, backward) ends where the step's first exchange starts.
        if not state["padded"]:
            state["real"] = pacer.pad(state["compute_started"])
            state["padded"] = True
        return sync.hook(st, bucket)

    ddp.register_comm_hook(None, hook)
    opt = task.optimizer(ddp.parameters())
    t0 = wait_start()
    try:
        for step in range(cfg["steps"]):
            lr = lr_at(cfg, step)
            for g in opt.param_groups:
                g["lr"] = lr
            sync.set_signals(step, shards.epoch_of(step), lr)
            if step == cfg.get("inject_error_at_step"):  # fault injection (runner tests)
                raise RuntimeError(f"inject_error_at_step={step}: failing as configured")
            x, y = shards.batch(step)
            start = time.monotonic()
            state["compute_started"] = start
            state["padded"] = False
            n_rounds = len(sync.rounds)
            loss = task.loss_fn(ddp(x), y)
            loss.backward()
            opt_start = time.monotonic()
            opt.step()
            opt.zero_grad(set_to_none=True)
            end = time.monotonic()
            rounds = sync.rounds[n_rounds:]
            comm_s = sum(r["t_exit"] - r["t_enter"] for r in rounds)
            compute_s = (end - start) - comm_s
            emit({"type": "step", "rank": rank, "step": step, "t_s": round(end - t0, 6),
                  "start": start, "end": end,
                  "t_enter": rounds[0]["t_enter"] if rounds else opt_start,
                  "t_exit": rounds[-1]["t_exit"] if rounds else opt_start,
                  "compute_s": round(compute_s, 6), "real_compute_s": round(state["real"], 6),
                  "model_compute_s": pacer.model_s if pacer.modelled else None,
                  "comm_s": round(comm_s, 6), "step_s": round(end - start, 6),
                  "loss": loss.item(), "lr": lr, "epoch": shards.epoch_of(step),
                  "bytes": sum(r["bytes"] for r in rounds),
                  "tolerance": rounds[-1].get("tolerance") if rounds else None,
                  "why": rounds[-1].get("why") if rounds else None,
                  "delivered": min((r.get("delivered", 1.0) for r in rounds), default=1.0),
                  "lost_entries": sum(r.get("lost_entries", 0) for r in rounds),
                  "estimated_entries": sum(r.get("estimated_entries", 0) for r in rounds)})
            last = step == cfg["steps"] - 1
            if rank == 0 and (step % cfg["eval_every"] == cfg["eval_every"] - 1 or last):
                metrics = task.evaluate(model)
                emit({"type": "eval", "rank": rank, "step": step, "t_s": round(end - t0, 6),
                      "eval_s": round(time.monotonic() - end, 6), **metrics})
    finally:
        emit({"type": "done", "rank": rank, "overruns": pacer.overruns,
              "comm": comm_stats(comm)})
        if comm is not None:
            comm.close(linger_s=0.5)  # answer late retransmissions of the last round


def comm_stats(comm) -> dict:
    if comm is None:
        return {}
    totals: dict[str, int] = {}
    for st in comm.endpoint.stats().values():
        for k, v in st.items():
            if isinstance(v, int | float):
                totals[k] = totals.get(k, 0) + v
    return {"bytes_sent": comm.bytes_sent, "bytes_received": comm.bytes_received,
            "unknown_conn": comm.endpoint.unknown_conn, "cores": totals}


def run_pipeline(cfg: dict) -> None:
    from workloads.comm import drive
    from workloads.models import build, split_stages
    from workloads.pipeline import PipelineStage

    rank, size = cfg["rank"], cfg["size"]
    model, task = build(cfg["model"], cfg["seed"])
    stages = split_stages(cfg["model"], model, size)
    comm = _comm(cfg)
    stage = PipelineStage(stages, rank, comm, task.loss_fn)
    opt = task.optimizer(stages[rank].parameters())
    shards = task.shards(0, 1, cfg["batch_size"])  # every stage sees the whole batch's indices
    pacer = Pacer(cfg)
    t0 = wait_start()
    try:
        for step in range(cfg["steps"]):
            lr = lr_at(cfg, step)
            for g in opt.param_groups:
                g["lr"] = lr
            x, y = shards.batch(step)
            start = time.monotonic()
            res = drive(stage.train_step(x, y, cfg["microbatches"], pacer), comm)
            opt.step()
            opt.zero_grad(set_to_none=True)
            end = time.monotonic()
            # A stage computes whenever it is not waiting on a transfer.
            emit({"type": "step", "rank": rank, "step": step, "t_s": round(end - t0, 6),
                  "start": start, "end": end, "t_enter": start, "t_exit": end,
                  "pipeline": True, "compute_s": round(end - start - res.comm_s, 6),
                  "comm_s": round(res.comm_s, 6),
                  "step_s": round(end - start, 6), "loss": res.loss, "lr": lr,
                  "epoch": shards.epoch_of(step), "bytes": res.bytes, "delivered": 1.0,
                  "lost_entries": 0, "tolerance": None, "why": None})
            last = step == cfg["steps"] - 1
            if step % cfg["eval_every"] == cfg["eval_every"] - 1 or last:
                metrics = drive(stage.evaluate(task.evaluate), comm)
                if metrics is not None:
                    emit({"type": "eval", "rank": rank, "step": step, "t_s": round(end - t0, 6),
                          "eval_s": round(time.monotonic() - end, 6), **metrics})
    finally:
        emit({"type": "done", "rank": rank, "overruns": pacer.overruns,
              "comm": comm_stats(comm)})
        comm.close(linger_s=0.5)


def measure_compute(cfg: dict, steps: int = 30) -> float:
    """Median seconds of one data-parallel rank's forward + backward, alone in this
    process on one thread (main() set it; the ``modelled`` mode's default duration)."""
    from workloads.models import build

    model, task = build(cfg["model"], cfg["seed"])
    shards = task.shards(0, cfg["size"], cfg["batch_size"])
    opt = task.optimizer(model.parameters())
    times = []
    for step in range(steps):
        x, y = shards.batch(step)
        start = time.monotonic()
        task.loss_fn(model(x), y).backward()  # what the pad covers: forward + backward
        times.append(time.monotonic() - start)
        opt.step()  # outside the pad (measured as it runs in the loop)
        opt.zero_grad(set_to_none=True)
    times.sort()
    return times[len(times) // 2]


def main() -> int:
    global _RANK
    _die_with_parent()
    cfg = json.loads(sys.stdin.readline())
    _RANK = cfg.get("rank", -1)
    import torch

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    try:
        if cfg.get("measure_compute"):
            emit({"type": "compute", "seconds": measure_compute(cfg)})
        elif cfg.get("kind", "data_parallel") == "pipeline":
            run_pipeline(cfg)
        else:
            run_data_parallel(cfg)
    except BaseException as e:  # noqa: BLE001 - reported to the runner, then exit 1
        emit({"type": "error", "rank": _RANK, "error": repr(e),
              "traceback": traceback.format_exc()})
        sys.stdout.flush()
        os._exit(1)
    sys.stdout.flush()
    # torch's gloo/TCPStore teardown at interpreter exit can abort; results are out already.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
