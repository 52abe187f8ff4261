"""Ring all-reduce against its bandwidth bound: MRC, RC over ECMP and gloo/TCP in one run.

    res = bench_allreduce(fab, ["h0", "h4", "h8", "h12"], sizes=(1 << 20, 8 << 20))

One process per rank (``python -m commands.bench.allreduce`` in the rank's
namespace, started by emu.launch) builds its communicator (a ``TransportComm`` over
MRC or RC, or a gloo process group over the fabric addresses), says ready, and from
the group's start instant runs ``1 + iters`` ring all-reduces of a float32 buffer of
``nbytes`` back to back, each timed on this host's monotonic clock (all processes
of the machine share it). An all-reduce takes, per iteration, the latest rank's
exit less the earliest rank's entry. The first is reported apart (``cold``: fresh
connections, initial windows), the others by their median (``warm``). The bound is
the ring's: 2 (n - 1) / n x S / B, ``B`` the payload rate of a rank's NICs (every
plane at line rate less header bytes); gloo's one TCP connection per pair crosses
one plane only, so it is measured against the same
bound (what the fabric offers), not its own.

Transports run interleaved (MRC, RC, gloo, MRC, ...) for ``reps`` repetitions;
figures are the median [min-max] over repetitions of each run's warm (median) and cold
(first) iteration.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

from commands.bench.cpu import summary
from emu import childproto
from emu.errors import EmuError
from emu.launch import ChildGroup
from transports import registry
from transports.planrecord import ConnPlan

# Every reliable transport a training job may use (transports/registry.py)
TRANSPORTS = registry.names(lambda t: t.caps.training and t.caps.reliable)
READY_TIMEOUT_S = 120.0  # every rank imports torch and builds its communicator
GLOO_PORT = 29533
RATE_MBIT = 100.0  # the demo's links: the four ranks' drivers fit on 2 cores
LINGER_S = 0.5  # answer the peers' retransmissions after the last all-reduce


def ring_bound_s(nbytes: int, ranks: int, rate_bytes_s: float) -> float:
    """The ring all-reduce's bandwidth bound: 2 (n - 1) / n x S / B."""
    if ranks < 2 or nbytes <= 0 or rate_bytes_s <= 0:
        raise ValueError(f"ranks={ranks!r} >= 2, nbytes={nbytes!r} > 0 and "
                         f"rate_bytes_s={rate_bytes_s!r} > 0 are required")
    return 2 * (ranks - 1) / ranks * nbytes / rate_bytes_s


def iteration_times(per_rank: Sequence[Sequence[tuple[float, float]]]) -> list[float]:
    """Per iteration: the latest exit less the earliest entry over the ranks."""
    counts = {len(x) for x in per_rank}
    if len(counts) != 1:
        raise ValueError(f"ranks report different iteration counts: {sorted(counts)}")
    return [max(r[i][1] for r in per_rank) - min(r[i][0] for r in per_rank)
            for i in range(counts.pop())]


# -- the rank's process ---------------------------------------------------------------------


def run_rank(cfg: dict) -> dict:
    """Time the all-reduces of one rank (inside its namespace)."""
    n = cfg["nbytes"] // 4
    buf = np.ones(n, dtype=np.float32)
    if registry.get(cfg["transport"]).core is None:  # the kernel's: torch's own all-reduce
        import torch

        torch.set_num_threads(1)
        from workloads.collectives.gloo import init_gloo

        dist = init_gloo(cfg["addr"], cfg["master"], GLOO_PORT, cfg["rank"], cfg["size"],
                         timeout_s=120.0)
        tensor = torch.from_numpy(buf)

        def once() -> None:
            dist.all_reduce(tensor)

        close = dist.destroy_process_group
    else:
        from workloads.collectives import ops as col
        from workloads.collectives.comm import drive
        from workloads.collectives.transportcomm import TransportComm

        conns = {int(p): [ConnPlan.from_dict(c) for c in cs] for p, cs in cfg["conns"].items()}
        comm = TransportComm(cfg["transport"], cfg["rank"], cfg["size"], conns,
                             registry.get(cfg["transport"]).defaults, cfg["seed"])

        def once() -> None:
            drive(col.ring_allreduce(comm, buf), comm)

        def close() -> None:
            comm.close(linger_s=LINGER_S)
    try:
        childproto.ready_then_start(rank=cfg["rank"])
        times = []
        for _ in range(1 + cfg["iters"]):
            buf.fill(1.0)
            t0 = time.monotonic()
            once()
            times.append((t0, time.monotonic()))
        exact = bool((buf == cfg["size"]).all())  # every element: the sum of the ranks' ones
    finally:
        close()
    return {"rank": cfg["rank"], "times": times, "exact": exact}


def main() -> int:
    childproto.die_with_parent()
    cfg = childproto.read_config()
    childproto.emit("result", **run_rank(cfg))
    return 0


# -- the parent -----------------------------------------------------------------------------


def _run(fab, transport: str, hosts: list[str], nbytes: int, iters: int,
         seed: int) -> list[float]:
    from workloads.collectives.transportcomm import plan_conns

    spec = fab.spec
    ours = registry.get(transport).core is not None
    conns = plan_conns(spec, transport, hosts) if ours else None
    with ChildGroup() as group:
        for r, h in enumerate(hosts):
            cfg = {"transport": transport, "rank": r, "size": len(hosts), "nbytes": nbytes,
                   "iters": iters, "seed": seed,
                   "addr": str(spec.address(h)), "master": str(spec.address(hosts[0])),
                   "conns": ({str(p): [c.to_dict() for c in cs] for p, cs in conns[r].items()}
                             if conns else {})}
            group.spawn(f"{transport} rank {r} on {h}",
                        fab.in_netns(h, sys.executable, "-m", "commands.bench.allreduce"),
                        config=cfg, env={"OMP_NUM_THREADS": "1"})
        group.wait_ready(READY_TIMEOUT_S)
        group.start()
        results = []
        for child in group:
            res = child.record("result", timeout=300.0)
            code = child.wait(60.0)
            if res is None or code != 0:
                raise EmuError(child.why("failed"))
            results.append(res)
    wrong = [r["rank"] for r in results if not r["exact"]]
    if wrong:
        raise EmuError(f"{transport}: the all-reduce of ranks {wrong} is not the exact sum")
    return iteration_times([r["times"] for r in results])


def bench_allreduce(fab, hosts: list[str], sizes: Sequence[int] = (1 << 20, 8 << 20),
                    reps: int = 3, transports: Sequence[str] = TRANSPORTS,
                    say: Callable[[str], None] = print) -> dict:
    """Ring all-reduce of each size over ``hosts`` (one rank each) for every transport,
    ``reps`` repetitions interleaved; times against the ring's bound."""
    from commands.bench.transport import payload_efficiency

    spec = fab.spec
    rate = spec.planes * spec.host_link.rate_mbit * 1e6 / 8 * payload_efficiency()
    out: dict = {"hosts": list(hosts), "ranks": len(hosts), "reps": reps,
                 "rank_rate_mbit": round(rate * 8 / 1e6, 2), "sizes": {}}
    for nbytes in sizes:
        bound = ring_bound_s(nbytes, len(hosts), rate)
        iters = max(3, min(20, int(2.0 / max(bound, 1e-3))))
        warm: dict[str, list[float]] = {t: [] for t in transports}
        cold: dict[str, list[float]] = {t: [] for t in transports}
        for rep in range(reps):
            for t in transports:
                times = _run(fab, t, list(hosts), nbytes, iters, seed=rep)
                warm[t].append(statistics.median(times[1:]))
                cold[t].append(times[0])
                say(f"  all-reduce {nbytes >> 10} KiB {t} rep {rep}: "
                    f"{warm[t][-1] * 1e3:.1f} ms = {warm[t][-1] / bound:.2f} x the bound "
                    f"({bound * 1e3:.1f} ms); the first {times[0] / bound:.2f} x")
        out["sizes"][str(nbytes)] = {
            "bound_s": round(bound, 6), "iters": iters,
            **{t: {"warm_x_bound": summary([x / bound for x in warm[t]]),
                   "cold_x_bound": summary([x / bound for x in cold[t]]),
                   "warm_s": [round(x, 6) for x in warm[t]],
                   "cold_s": [round(x, 6) for x in cold[t]]} for t in transports}}
    return out


def bench_allreduce_fabric(say: Callable[[str], None] = print, quick: bool = False,
                           rate_mbit: float = RATE_MBIT) -> dict:
    """``bench_allreduce`` on its own fabric (the transport bench's, at ``rate_mbit``):
    4 ranks, one per rack."""
    from commands.bench.transport import bench_spec
    from emu.fabric import Fabric

    spec = bench_spec(rate_mbit)
    hosts = [h.name for h in spec.hosts][::spec.hosts_per_leaf]  # the first of each rack
    with Fabric(spec, name="benchar", progress=lambda m: say(f"    fabric: {m}")) as fab:
        say(f"ring all-reduce, {len(hosts)} ranks one per rack ({rate_mbit:g} Mbit/s links)")
        return {"rate_mbit": rate_mbit, **bench_allreduce(
            fab, hosts, sizes=(1 << 20, 8 << 20), reps=2 if quick else 3, say=say)}


if __name__ == "__main__":
    sys.exit(main())
