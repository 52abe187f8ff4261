"""Run every collective once over a real fabric and check it against the reference.

    results = check_collectives(fab, "mrc", ["h0", "h3", "h5"])

One process per rank (``python -m workloads.collectives.check`` in the rank's
namespace, started by emu.launch, config on stdin) builds a ``TransportComm`` and
runs ring all-reduce, reduce-scatter, all-gather, all-to-all, transpose all-reduce
and (with groups) hierarchical all-reduce on inputs drawn from a seed; its
``result`` record holds each output's SHA-256 and what the collective reported
lost. The parent computes the reference outputs (numpy sums and concatenations of
the same inputs) and compares. Values are small integers in float32, so sums are exact in any order.
"""

from __future__ import annotations

import hashlib
import sys
import time
from typing import cast

import numpy as np

from emu import childproto
from emu.errors import EmuError
from emu.launch import ChildGroup
from transports import registry
from transports.planrecord import ConnPlan
from workloads.collectives import ops as col
from workloads.collectives.schedules import all_to_all_recv_len, block_bounds
from workloads.collectives.transpose import transpose_allreduce

READY_TIMEOUT_S = 120.0  # for every rank to import torch and bind its sockets
LINGER_S = 0.5  # answer the peers' retransmissions for this long after the last collective


def inputs(rank: int, n: int, seed: int) -> np.ndarray:
    """Rank ``rank``'s input vector (integers in [-8, 8] as float32)."""
    return np.random.default_rng([seed, rank]).integers(-8, 9, n).astype(np.float32)


def sha(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a, dtype=np.float32).tobytes()).hexdigest()


def reference(size: int, n: int, seed: int, groups: list[list[int]] | None) -> list[dict]:
    """The expected output hashes of every rank."""
    xs = [inputs(r, n, seed) for r in range(size)]
    # summed over axis 0 of the stacked 1-D inputs: an array, not a scalar
    total = cast(np.ndarray, np.sum(xs, axis=0, dtype=np.float32))
    blocks = block_bounds(n, size)
    out = []
    for r in range(size):
        lo, hi = blocks[r]
        a2a = np.concatenate([xs[j][slice(*block_bounds(n, size)[r])] for j in range(size)])
        want = {"allreduce": sha(total), "transpose": sha(total),
                "reduce_scatter": sha(total[lo:hi]), "all_gather": sha(_gathered(xs, blocks)),
                "all_to_all": sha(a2a)}
        if groups:
            want["hierarchical"] = sha(total)
        out.append(want)
    return out


def _gathered(xs: list[np.ndarray], blocks: list[tuple[int, int]]) -> np.ndarray:
    out = np.empty_like(xs[0])
    for r, (lo, hi) in enumerate(blocks):
        out[lo:hi] = xs[r][lo:hi]
    return out


def run_rank(cfg: dict) -> dict:
    """Every collective on this rank (inside its namespace); output hashes and losses."""
    from workloads.collectives.comm import drive
    from workloads.collectives.transportcomm import TransportComm

    r, size, n, seed = cfg["rank"], cfg["size"], cfg["n"], cfg["seed"]
    conns = {int(p): [ConnPlan.from_dict(c) for c in cs] for p, cs in cfg["conns"].items()}
    comm = TransportComm(cfg["transport"], r, size, conns, cfg.get("config"), seed)
    out: dict = {"rank": r}
    try:
        x = inputs(r, n, seed)
        buf = x.copy()
        drive(col.ring_allreduce(comm, buf), comm)
        out["allreduce"] = sha(buf)
        buf = x.copy()
        drive(transpose_allreduce(comm, buf), comm)
        out["transpose"] = sha(buf)
        buf = x.copy()
        drive(col.reduce_scatter(comm, buf), comm)
        lo, hi = block_bounds(n, size)[r]
        out["reduce_scatter"] = sha(buf[lo:hi])
        buf = x.copy()
        drive(col.all_gather(comm, buf), comm)
        out["all_gather"] = sha(buf)
        recv = np.zeros(all_to_all_recv_len(n, size, r), dtype=np.float32)
        drive(col.all_to_all(comm, x.copy(), recv), comm)
        out["all_to_all"] = sha(recv)
        if cfg.get("groups"):
            buf = x.copy()
            drive(col.hierarchical_allreduce(comm, buf, cfg["groups"]), comm)
            out["hierarchical"] = sha(buf)
        if cfg.get("bound"):
            from transports.core.bound import LossBound

            buf = x.copy()
            res = drive(transpose_allreduce(comm, buf, bound=LossBound(**cfg["bound"])),
                        comm)
            out["bounded"] = {"values": buf.tolist(), "lost": [list(p) for p in res.lost],
                              "lost_pairs": res.lost_pairs, "delivered": list(res.delivered)}
    finally:
        comm.close(linger_s=LINGER_S)
    return out


def check_collectives(fab, transport: str, hosts: list[str], n: int = 20011, seed: int = 5,
                      groups: list[list[int]] | None = None, bound: dict | None = None,
                      timeout_s: float = 120) -> tuple[list[dict], list[dict]]:
    """(what every rank reported, the reference) for ``hosts`` over ``transport``."""
    from workloads.collectives.transportcomm import plan_conns

    conns = plan_conns(fab.spec, transport, hosts)
    got = []
    with ChildGroup() as group:
        for r, h in enumerate(hosts):
            cfg = {"rank": r, "size": len(hosts), "n": n, "seed": seed, "transport": transport,
                   "conns": {str(p): [c.to_dict() for c in cs] for p, cs in conns[r].items()},
                   "groups": groups,
                   "config": registry.get(transport).plan_config(), "bound": bound}
            group.spawn(f"rank {r} on {h}",
                        fab.in_netns(h, sys.executable, "-m", "workloads.collectives.check"),
                        config=cfg)
        group.wait_ready(READY_TIMEOUT_S)
        group.start()
        end = time.monotonic() + timeout_s
        for child in group:
            out = child.record("result", timeout=max(0.0, end - time.monotonic()))
            code = child.wait(max(1.0, end - time.monotonic()))
            if out is None or code != 0:
                raise EmuError(child.why("failed"))
            out.pop("type")
            got.append(out)
    return got, reference(len(hosts), n, seed, groups)


def main() -> int:
    childproto.die_with_parent()
    cfg = childproto.read_config()
    childproto.ready_then_start()
    childproto.emit("result", **run_rank(cfg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
