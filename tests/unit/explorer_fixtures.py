"""Shared test inputs for the explorer: a synthetic calibration and random configurations."""

from __future__ import annotations

import random

from explorer.calibration import (
    Calibration,
    DblpCal,
    Interval,
    LoadPoint,
    MeasuredFabric,
    Range,
    TailPoint,
    TransportCal,
)
from explorer.spec import Config
from explorer.specfile import build_config

FABRIC = MeasuredFabric(planes=2, spines=4, leaves=2, hosts_per_leaf=4, queue_packets=16)


def iv(value: float, spread: float = 0.05) -> Interval:
    return Interval(value, value * (1 - spread), value * (1 + spread))


def calibration() -> Calibration:
    """Every transport with every calibrated quantity, plus DBLP: load balance measured at
    1 and 4 connections per uplink (RC also with 4 QPs), tails at two burst geometries."""
    def tc(name: str, eta: float, lb: tuple[float, float], tail: float, rtts: float,
           rtos: float | None) -> TransportCal:
        n = 8 if name == "tcp" else 4
        points = [LoadPoint(1.0, 1, iv(lb[0] * eta), 4 if name != "mrc" else None,
                            n if name != "mrc" else None),
                  LoadPoint(4.0, 1, iv(lb[1] * eta), 16 if name != "mrc" else None,
                            n if name != "mrc" else None)]
        if name.startswith("rc"):
            points.append(LoadPoint(1.0, 4, iv(lb[1] * eta), 16, 4))
        return TransportCal(
            transport=name, eta=iv(eta, 0.02), overhead_rtts=iv(0.5), eta_dci=iv(eta * 0.95),
            load_balance=tuple(points),
            tail=(TailPoint(2.0, 0.5, iv(tail), False, 10.0),
                  TailPoint(20.0, 4.0, iv(tail * 2), False, 10.0)),
            recovery_rtts=iv(rtts), recovery_rtos=iv(rtos) if rtos else None,
            message_bdp=Range(0.5, 64.0), flows_per_uplink=Range(1.0, 4.0),
            burst_rtts=Range(2.0, 20.0), burst_excess_buffers=Range(0.5, 4.0), buffer_bdp=1.0,
            fabric=FABRIC)
    return Calibration(
        {"mrc": tc("mrc", 0.95, (0.98, 0.99), 1.5, 4.0, None),
         "rc": tc("rc", 0.95, (1.0, 1.0), 1.3, 30.0, 1.5),
         "rc_lossy": tc("rc_lossy", 0.9, (0.63, 0.8), 3.0, 30.0, 1.5),
         "tcp": tc("tcp", 0.8, (0.6, 0.75), 6.0, 60.0, 2.0)},
        DblpCal(0.05, iv(0.97), (TailPoint(2.0, 0.5, iv(1.2), False, 10.0),), iv(1.05), None))


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
        "dci.pair_tbps": rng.choice([10.0, 100.0, 1000.0, None]),
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
        "schedule.optimizer": rng.choice(["replicated", "zero1", "zero2", "zero3"]),
        "schedule.overlap": rng.random() < 0.7,
        "schedule.allreduce": rng.choice(["ring", "hierarchical"]),
        "schedule.grad_bytes": rng.choice([2, 4]),
        "network.transport": rng.choice(["mrc", "rc", "rc_lossy", "tcp"]),
        "model.dropout": rng.random() < 0.3,
        "cluster.interrupt_per_gpu_hour": rng.choice([0.0, 1.81e-5, 1e-4]),
        "cluster.checkpoint_minutes": rng.choice([None, None, 30.0]),
        "network.qps_per_connection": rng.choice([1, 2, 8]),
    }
    if v["network.transport"] == "mrc":
        v["schedule.dblp_tolerance"] = rng.choice([0.0, 0.02, 0.1])
    return build_config(v)
