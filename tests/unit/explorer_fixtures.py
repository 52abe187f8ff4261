"""Shared test inputs for the explorer: a synthetic calibration and random configurations."""

from __future__ import annotations

import random

from explorer.calibration import Calibration, DblpCal, Interval, Range, TailPoint, TransportCal
from explorer.spec import Config
from explorer.specfile import build_config


def iv(value: float, spread: float = 0.05) -> Interval:
    return Interval(value, value * (1 - spread), value * (1 + spread))


def calibration() -> Calibration:
    """Three transports with every calibrated quantity, plus DBLP."""
    def tc(name: str, eta: float, lb: tuple[float, float], tail: float, rtts: float,
           rtos: float | None) -> TransportCal:
        return TransportCal(
            transport=name, eta=iv(eta, 0.02), overhead_rtts=iv(0.5), eta_dci=iv(eta * 0.95),
            load_balance=((1.0, iv(lb[0])), (4.0, iv(lb[1]))),
            tail=(TailPoint(2.0, 0.5, iv(tail)), TailPoint(20.0, 4.0, iv(tail * 2))),
            recovery_rtts=iv(rtts), recovery_rtos=iv(rtos) if rtos else None,
            message_bdp=Range(0.5, 64.0), flows_per_uplink=Range(1.0, 4.0),
            burst_rtts=Range(2.0, 20.0), burst_excess_buffers=Range(0.5, 4.0), buffer_bdp=1.0)
    return Calibration(
        {"mrc": tc("mrc", 0.95, (0.98, 0.99), 1.5, 4.0, None),
         "rc": tc("rc", 0.9, (0.63, 0.8), 3.0, 30.0, 1.5),
         "tcp": tc("tcp", 0.8, (0.6, 0.75), 6.0, 60.0, 2.0)},
        DblpCal(0.05, iv(0.97), (TailPoint(2.0, 0.5, iv(1.2)),), iv(1.05), None))


MODELS = ["gpt3-175b", "llama3-8b", "llama3-70b", "llama3-405b"]


def random_config(rng: random.Random) -> Config:
    """A random configuration, often but not always feasible."""
    dcs = rng.choice([1, 2, 4])
    v: dict = {
        "model.preset": rng.choice(MODELS),
        "model.flash_attention": rng.random() < 0.7,
        "model.train_tokens": 1e12,
        "gpu.preset": rng.choice(["a100-80gb", "h100-sxm", "b200"]),
        "cluster.dcs": dcs,
        "cluster.gpus_per_dc": rng.choice([1024, 4096, 8192, 24576]),
        "fabric.planes": rng.choice([1, 2, 4, 8]),
        "fabric.burst_hz": rng.choice([0.0, 0.1, 10.0]),
        "fabric.burst_us": rng.choice([10.0, 50.0, 500.0]),
        "fabric.link_fail_per_hour": rng.choice([0.0, 1e-6, 1e-4]),
        "fabric.failure_scale": rng.choice([1.0, 10.0]),
        "dci.delay_ms": rng.choice([0.1, 1.0, 5.0, 20.0]),
        "dci.loss": rng.choice([0.0, 0.0, 1e-4]),
        "dci.oversubscription": rng.choice([1.0, 4.0, 16.0]),
        "placement.tp": rng.choice([1, 2, 4, 8]),
        "placement.cp": rng.choice([1, 1, 2, 4]),
        "placement.pp": rng.choice([1, 2, 4, 8, 16]),
        "placement.microbatch": rng.choice([1, 2, 4]),
        "placement.cross": rng.choice(["dp", "pp", "pp_dp"]),
        "placement.dc_group": 2,
        "schedule.pipeline": rng.choice(["gpipe", "1f1b", "interleaved"]),
        "schedule.virtual_stages": rng.choice([1, 2, 3]),
        "schedule.warmup_extra": rng.choice([0, 1, 4]),
        "schedule.recompute": rng.choice(["none", "selective", "full"]),
        "schedule.sequence_parallel": rng.random() < 0.8,
        "schedule.optimizer": rng.choice(["replicated", "distributed", "fsdp"]),
        "schedule.overlap": rng.random() < 0.7,
        "schedule.allreduce": rng.choice(["ring", "hierarchical"]),
        "schedule.grad_bytes": rng.choice([2, 4]),
        "network.transport": rng.choice(["mrc", "rc", "tcp"]),
        "network.qps_per_connection": rng.choice([1, 2, 8]),
    }
    if v["network.transport"] == "mrc":
        v["schedule.dblp_tolerance"] = rng.choice([0.0, 0.02, 0.1])
    return build_config(v)
