"""Run message transfers over a fabric: engine processes serving the hosts (one per core).

    res = run_transfers(fab, "mrc", [Transfer("h0", "h15", 4 << 20)])

The hosts of a userspace transport are served by one ``transports.io.driver`` engine
process per core of the machine (``engines``), each making its hosts' sockets inside their
namespaces and serving them all from one event loop (transports/io/loop.py), so the
Python work spreads over the cores and a wake-up carries many hosts' packets. The
kernel's TCP gets one driver process per host inside its namespace. MRC: one connection
per host pair (both directions share it) with every SRv6 path of the pair as
its EVs. RC: as RoCE on a multi-plane NIC, one connection (QP) per plane,
between the two hosts' plane-p addresses, each with one fixed 5-tuple (ECMP
picks its spine), and each message striped evenly over the planes; with ``qps``
> 1, ``qps`` QPs per plane, each its own 5-tuple, the message striped over all of
them (NCCL_IB_QPS_PER_CONNECTION, the "enhanced ECMP" of production RoCE). TCP: one
kernel connection per pair from the loopbacks (ECMP picks plane and spine).
All drivers start sending at one common CLOCK_MONOTONIC instant.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from emu.errors import EmuError
from emu.fabric import Fabric
from emu.launch import Child, ChildGroup
from emu.netns import NETNS_RUN_DIR
from transports import registry
from transports.plan import RC_SPORT_BASE, conn_spec

READY_TIMEOUT_S = 60.0  # for every driver to bind its sockets on a busy machine

@dataclass(frozen=True)
class Transfer:
    """``size`` bytes from ``src`` to ``dst`` as one message.

    ``after``: the index of an earlier transfer whose send (every part of it: all
    lanes) must complete before this one is posted (synchronous rounds). ``bound``:
    for DBLP, the round's LossBound as a dict (tolerance, deadline_s).
    """

    src: str
    dst: str
    size: int
    after: int | None = None
    bound: dict | None = None


@dataclass
class TransferResult:
    """What every driver reported, plus the figures most users want."""

    transport: str
    drivers: dict[str, dict]
    transfers: list[Transfer]
    messages: list[dict] = field(default_factory=list)  # receiver side, one per transfer
    engines: dict[int, dict] = field(default_factory=dict)  # engine id -> its CPU, wake-ups

    @property
    def ok(self) -> bool:
        """Every message delivered intact, and no core raised on a datagram."""
        return (all(m["ok"] and m.get("exact", True) for m in self.messages)
                and not self.internal_errors)

    @property
    def internal_errors(self) -> list[str]:
        """Tracebacks of cores that raised on a datagram (dropped, the driver went on)."""
        return [e for d in self.drivers.values() for e in d.get("internal_errors", ())]

    @property
    def completion_s(self) -> float:
        """When the last message was fully placed (from the common start)."""
        return max(m.get("t", float("inf")) for m in self.messages)

    @property
    def goodput_mbit(self) -> float:
        """All bytes over the time the last one took."""
        return sum(t.size for t in self.transfers) * 8 / self.completion_s / 1e6

    def cpu_s(self) -> float:
        return sum(d["cpu_s"] for d in self.drivers.values())


def plan_transfers(spec, transport: str, transfers: list[Transfer], config: dict | None = None,
                   deadline_s: float = 60.0, seed: int = 0, qps: int = 1,
                   sport_base: int = RC_SPORT_BASE
                   ) -> tuple[dict[str, dict], dict[int, list[int]]]:
    """Every host's driver plan for ``transfers``, and each transfer's message ids (one
    per lane: RC stripes a message over ``qps`` QPs per plane). A transfer with ``after``
    waits for *every* lane's part of the earlier one (``after`` is then a list of ids)."""
    try:
        t_decl = registry.get(transport, lambda t: t.caps.transfers, "a transfer driver's")
    except registry.UnknownTransport as e:
        raise EmuError(str(e)) from None
    if type(qps) is not int or qps < 1 or (qps > 1 and not t_decl.caps.per_plane):
        raise EmuError(f"qps={qps!r} is invalid: an integer >= 1, above 1 only for a "
                       "transport of queue pairs per plane (rc; the others have no QPs to "
                       "split)")
    for t in transfers:
        spec.node(t.src), spec.node(t.dst)
        if t.src == t.dst or t.size < 0:
            raise EmuError(f"invalid transfer {t}: src != dst and size >= 0 required")
    pairs: dict[tuple[frozenset, int], int] = {}
    plans: dict[str, dict] = {}
    lanes = spec.planes * qps if t_decl.caps.per_plane else 1  # connections per host pair

    def plan_of(host: str) -> dict:
        return plans.setdefault(host, {
            "host": host, "addr": str(spec.address(host)), "transport": transport,
            "config": t_decl.plan_config() if config is None else config,
            "seed": seed, "deadline_s": deadline_s,
            "conns": [], "sends": [], "recvs": []})

    parts: dict[int, list[int]] = {}  # transfer index -> its message ids
    for i, t in enumerate(transfers):
        for lane in range(lanes):
            key = (frozenset((t.src, t.dst)), lane)
            if key not in pairs:
                conn = pairs[key] = len(pairs) + 1
                for a, b in ((t.src, t.dst), (t.dst, t.src)):
                    plan_of(a)["conns"].append(conn_spec(spec, transport, a, b, conn, lane,
                                                         sport_base))
            size = t.size // lanes + (1 if lane < t.size % lanes else 0)
            mid = len(parts) * lanes + lane + 1
            msg: dict[str, Any] = {"conn": pairs[key], "msg": mid, "size": size,
                                   "seed": seed * 100003 + mid}
            if t.after is not None:
                if not 0 <= t.after < i:
                    raise EmuError(f"transfer {i}: after={t.after} must name an earlier one")
                # every lane's part of the earlier transfer (RC stripes a message over its
                # QPs): a round starts only when the whole previous round is done
                msg["after"] = list(parts[t.after])
            if t.bound is not None:
                msg["bound"] = t.bound
            parts.setdefault(i, []).append(mid)
            plan_of(t.src)["sends"].append(msg)
            plan_of(t.dst)["recvs"].append(msg)
    return plans, parts


def driver_results(children: Iterable[tuple[str, Child]], timeout: float) -> dict[str, dict]:
    """Each driver's ``result`` record by host, once its stdin is closed; EmuError naming
    the driver if one ends without a result or with a non-zero status."""
    outs = {}
    for host, child in children:
        out = child.record("result", timeout=timeout)
        code = child.wait(30)
        if out is None or code != 0:
            raise EmuError(child.why("ended without a result" if out is None
                                     else f"exited {code}"))
        out.pop("type")
        outs[host] = out
    return outs


def engine_plans(fab: Fabric, plans: dict[str, dict], engines: int,
                 tick_s: float | None = None) -> list[dict]:
    """The hosts' plans dealt over ``engines`` engine processes (round robin: hosts of
    equal load, equal shares), each with the namespace file of each of its hosts."""
    if engines < 1:
        raise EmuError(f"engines={engines!r}: at least one engine process is needed")
    hosts = list(plans)
    out = []
    for i in range(min(engines, len(hosts))):
        mine = hosts[i::engines]
        plan: dict[str, Any] = {"engine": i, "hosts": [plans[h] for h in mine],
                                "netns": {h: str(NETNS_RUN_DIR / fab.netns(h)) for h in mine}}
        if tick_s is not None:
            plan["tick_s"] = tick_s
        out.append(plan)
    return out


def engine_results(children: Iterable[tuple[str, Child]], timeout: float
                   ) -> tuple[dict[str, dict], dict[int, dict]]:
    """Each host's result (with its engine's id under ``engine``) and each engine's own
    record (CPU, wake-ups, hosts), once their stdin is closed."""
    outs: dict[str, dict] = {}
    engines: dict[int, dict] = {}
    for name, rec in driver_results(children, timeout).items():
        eng = rec.get("engine")
        if not isinstance(eng, dict) or "hosts" not in rec:
            raise EmuError(f"{name}: its result is not an engine's ({sorted(rec)})")
        engines[eng["id"]] = eng
        for host, r in rec["hosts"].items():
            outs[host] = {**r, "engine": eng["id"]}
    return outs, engines


def run_transfers(fab: Fabric, transport: str, transfers: list[Transfer],
                  config: dict | None = None, deadline_s: float = 60.0, seed: int = 0,
                  on_start=None, qps: int = 1, sport_base: int = RC_SPORT_BASE,
                  engines: int | None = None, tick_s: float | None = None
                  ) -> TransferResult:
    """Run ``transfers`` with ``transport``; ``on_start(t0)`` is called at the common start;
    ``qps``: RC's queue pairs per plane and connection (module docstring); ``sport_base``:
    RC's first source port (transports/plan.py's ``conn_spec``). A userspace transport's
    hosts are served by ``engines`` processes (default: one per core of the machine),
    waking at most every ``tick_s`` (default: the driver's, transports/io/tick.py)."""
    plans, parts = plan_transfers(fab.spec, transport, transfers, config, deadline_s, seed,
                                  qps, sport_base)
    kernel = registry.get(transport).core is None
    with ChildGroup() as group:
        if kernel:  # the kernel's TCP: a process in each host's namespace
            for host, plan in plans.items():
                group.spawn(f"driver on {host}",
                            fab.in_netns(host, sys.executable, "-m", "transports.io.driver"),
                            config=plan)
        else:
            eplans = engine_plans(fab, plans, engines or os.cpu_count() or 1, tick_s)
            for ep in eplans:
                group.spawn(f"engine {ep['engine']} ({', '.join(ep['netns'])})",
                            [sys.executable, "-m", "transports.io.driver"], config=ep)
        group.wait_ready(READY_TIMEOUT_S)  # every driver's sockets are bound
        t0 = group.start()
        if on_start is not None:
            on_start(t0)
        for child in group:
            child.close_stdin()
        if kernel:
            outs = driver_results(zip(plans, group, strict=True), deadline_s + 30)
            engine_recs: dict[int, dict] = {}
        else:
            outs, engine_recs = engine_results(
                zip([f"engine {ep['engine']}" for ep in eplans], group, strict=True),
                deadline_s + 30)
    res = TransferResult(transport, outs, list(transfers), engines=engine_recs)
    for i, t in enumerate(transfers):
        got: list[dict[str, Any]] = [
            next((m for m in outs[t.dst]["messages"] if m["kind"] == "recv" and m["msg"] == mid),
                 {"msg": mid, "ok": False, "error": "no report"}) for mid in parts[i]]
        posted = min(outs[t.src].get("posted", {}).get(str(mid), 0.0) for mid in parts[i])
        done = max(m.get("t", float("inf")) for m in got)
        res.messages.append({
            "transfer": i, "src": t.src, "dst": t.dst, "bytes": t.size,
            "ok": all(m["ok"] and m.get("exact", True) for m in got),
            "t": done, "posted": posted, "latency": done - posted,
            "delivered": min(m.get("delivered", 1.0) for m in got),
            "missing": sum(m.get("missing", 0) for m in got),
            "deadline": any(m.get("deadline", False) for m in got),
            "errors": [m["error"] for m in got if m.get("error")]})
    return res
