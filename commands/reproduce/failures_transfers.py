"""Claim 1's transfers: one long transfer per system through each kind of failure.

On one fabric under BFD + BGP (the ECMP baseline's control plane), a transfer from the
first host to the last (rack 0 to the last rack) runs clean, then through each failure
kind, for every system, repetitions interleaved (rep 0: every system clean, then every
kind x every system; rep 1: ...). Every failure hits the link (or its spine, or its
plane) that carried the most of *this* transfer into the destination's rack over a 0.2 s
sample, and fires at the same point of the workload for every system: ``fire_at`` of the
same repetition's clean completion time; it lasts ``outage_s`` and is then restored.
The time lost is the completion time through the failure minus the clean one of the same
repetition (clipped at 0 and flagged: a negative difference is the clean runs' noise).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from commands.bench.transport import longest_stall
from emu.errors import EmuError
from emu.fabric import Fabric
from emu.failures import (
    BusiestUplinkDown,
    Failure,
    GrayLink,
    LinkDown,
    LinkFlap,
    PlaneDown,
    SwitchDown,
)
from topologies import MultiPlaneClos, Role
from transports.testing.harness import Transfer, TransferResult, run_transfers
from workloads.calibration.regime import rtt_probe

KINDS = ("link_cut", "spine_down", "plane_down", "flap", "gray")
SYSTEMS = ("mrc", "rc", "tcp")
SAMPLE_S = 0.2  # the traffic sample that finds the busiest link into the rack
LATE_TRIES = 3  # transfers a failure may miss, held back by the host, before giving up


class FailureLate(EmuError):
    """The failure was due before the transfer ended but took effect after it: the host
    held its thread back (sampling, netlink), so that transfer measured nothing.
    ``completion_s``: when that transfer ended (the next try fires earlier than it)."""

    def __init__(self, message: str, completion_s: float) -> None:
        super().__init__(message)
        self.completion_s = completion_s


@dataclass(frozen=True)
class TransferPlan:
    """What the transfers measure: the kinds, the systems, the size and the failure's
    timing and shape."""

    kinds: tuple[str, ...]
    systems: tuple[str, ...]
    size: int
    outage_s: float
    fire_at: float
    gray_loss: float
    flap_period_s: float
    flap_duty: float


@dataclass(frozen=True)
class TransferRun:
    """One transfer through one failure (``kind`` "clean": none)."""

    system: str
    kind: str
    rep: int
    completion_s: float
    clean_s: float
    fired_at_s: float | None
    target: str
    longest_stall_s: float
    converge_s: float = 0.0  # waited after the restore for BGP/BFD to be whole again

    @property
    def lost_s(self) -> float:
        """Completion through the failure over the clean one of the same repetition."""
        return max(0.0, self.completion_s - self.clean_s)

    def record(self) -> dict:
        """JSON-able form (raw results)."""
        return {"system": self.system, "kind": self.kind, "rep": self.rep,
                "completion_s": round(self.completion_s, 4), "clean_s": round(self.clean_s, 4),
                "lost_s": round(self.lost_s, 4),
                "raw_difference_s": round(self.completion_s - self.clean_s, 4),
                "fired_at_s": self.fired_at_s, "target": self.target,
                "longest_stall_s": self.longest_stall_s,
                "converge_s": round(self.converge_s, 3)}


def endpoints(spec: MultiPlaneClos) -> tuple[str, str, str]:
    """(source, destination, the destination rack's leaves on every plane)."""
    src, dst = spec.hosts[0].name, spec.hosts[-1].name
    leaves = ",".join(spec.leaf_of(dst, p).name for p in range(spec.planes))
    return src, dst, leaves


def failure_on(kind: str, link: str, spec: MultiPlaneClos,
               plan: TransferPlan) -> tuple[Failure, str]:
    """The failure of ``kind`` aimed at ``link`` (a leaf-spine link), and what it hits."""
    lk = spec.link(link)
    spine = lk.a.node if spec.node(lk.a.node).role is Role.SPINE else lk.b.node
    plane = spec.node(spine).plane or 0  # a spine always has its plane
    if kind == "link_cut":
        return LinkDown(link), link
    if kind == "spine_down":
        return SwitchDown(spine), spine
    if kind == "plane_down":
        return PlaneDown(plane), f"plane {plane}"
    if kind == "flap":
        return LinkFlap(link, plan.flap_period_s, plan.flap_duty), link
    if kind == "gray":
        return GrayLink(link, plan.gray_loss), link
    raise EmuError(f"failure kind {kind!r} is invalid: must be one of {', '.join(KINDS)}")


def _checked(res: TransferResult, what: str) -> TransferResult:
    if not res.ok:
        errs = [e for m in res.messages for e in m.get("errors", [])] + res.internal_errors
        raise EmuError(f"{what}: the transfer did not complete intact ({errs[:2]})")
    return res


def through(fab: Fabric, system: str, kind: str, rep: int, clean_s: float,
            plan: TransferPlan, timing_s: float) -> TransferRun:
    """One transfer of ``system`` through a failure of ``kind`` fired at ``fire_at`` of
    ``timing_s`` and restored ``outage_s`` later; its time lost counts against
    ``clean_s``."""
    spec = fab.spec
    assert isinstance(spec, MultiPlaneClos)  # claim 1 runs on one DC
    src, dst, leaves = endpoints(spec)
    fire_s = max(SAMPLE_S, plan.fire_at * timing_s)
    state: dict = {}

    def fire(t0: float) -> None:
        def run() -> None:
            try:
                time.sleep(max(0.0, t0 + fire_s - SAMPLE_S - time.monotonic()))
                before = BusiestUplinkDown(leaves).start_sample(fab)
                time.sleep(SAMPLE_S)
                link = BusiestUplinkDown(leaves).busiest_since(fab, before).link
                failure, state["target"] = failure_on(kind, link, spec, plan)
                state["at"] = round(time.monotonic() - t0, 4)
                state["handle"] = failure.apply(fab)
                state["failure"] = failure
                time.sleep(plan.outage_s)
                failure.restore(fab, state["handle"])
                state["restored"] = True
            except Exception as e:  # reported by the caller, which owns the run
                state["error"] = e
        state["thread"] = th = threading.Thread(target=run, daemon=True)
        th.start()

    try:
        res = run_transfers(fab, system, [Transfer(src, dst, plan.size)], deadline_s=120,
                            on_start=fire)
    finally:
        th = state.get("thread")
        if th is not None:
            th.join(plan.outage_s + 30)
        if "failure" in state and not state.get("restored"):
            state["failure"].restore(fab, state["handle"])
    if "error" in state:
        raise EmuError(f"{system} through {kind}: the failure could not be fired or "
                       f"restored: {state['error']}")
    _checked(res, f"{system} through {kind}")
    if state.get("at") is None or state["at"] >= res.completion_s:
        why = (f"{system} through {kind}: the failure (due at {fire_s:.3f} s, at "
               f"{state.get('at')} s) came after the transfer ended ({res.completion_s:.2f} s)")
        if fire_s < res.completion_s:
            raise FailureLate(why, res.completion_s)
        raise EmuError(f"{why}: raise transfer_mib")
    waited = fab.wait_converged(30)
    return TransferRun(system, kind, rep, res.completion_s, clean_s, state["at"],
                       state["target"], longest_stall(res.drivers[dst]["timeline"]), waited)


def clean(fab: Fabric, system: str, rep: int, plan: TransferPlan) -> TransferRun:
    """The transfer of ``system`` without a failure (the reference of its repetition)."""
    spec = fab.spec
    assert isinstance(spec, MultiPlaneClos)
    src, dst, _ = endpoints(spec)
    res = _checked(run_transfers(fab, system, [Transfer(src, dst, plan.size)],
                                 deadline_s=120), f"{system} clean")
    return TransferRun(system, "clean", rep, res.completion_s, res.completion_s, None, "",
                       longest_stall(res.drivers[dst]["timeline"]))


def probe_rtt(fab: Fabric, reps: int = 9) -> float:
    """The fabric's RTT for a full data packet (one MRC datagram per plane out, its ACKs
    back) from the first host to the last: the emulated time that stands for the
    full-scale RTT. The median of ``reps`` of the calibration's probes
    (workloads/calibration/regime.py ``rtt_probe``)."""
    spec = fab.spec
    assert isinstance(spec, MultiPlaneClos)
    src, dst, _ = endpoints(spec)
    return statistics.median(rtt_probe(fab, spec, "mrc", src, dst) for _ in range(reps))


def run_transfers_plan(fab: Fabric, plan: TransferPlan, reps: int,
                       say: Callable[[str], None]) -> list[TransferRun]:
    """Every repetition: each system clean, then each kind x each system (interleaved)."""
    out: list[TransferRun] = []
    for rep in range(reps):
        ref: dict[str, float] = {}
        for system in plan.systems:
            run = clean(fab, system, rep, plan)
            ref[system] = run.completion_s
            out.append(run)
            say(f"    rep {rep} {system} clean: {run.completion_s:.3f} s")
        for kind in plan.kinds:
            for system in plan.systems:
                # The fire instant is a fraction of the clean transfer's time; a clean
                # run the host slowed puts it late, so a late try sets it from the
                # shorter transfer it just saw (the time lost still counts against
                # the clean run).
                timing_s = ref[system]
                for tries in range(1, LATE_TRIES + 1):
                    try:
                        run = through(fab, system, kind, rep, ref[system], plan, timing_s)
                        break
                    except FailureLate as e:
                        if tries == LATE_TRIES:
                            raise EmuError(f"{e}, in each of {LATE_TRIES} tries: the host "
                                           "holds the failure back; raise transfer_mib "
                                           "or run on a quieter machine") from e
                        timing_s = min(timing_s, e.completion_s)
                        say(f"    rep {rep} {system} through {kind}: {e}; measured again, "
                            f"the failure due at {plan.fire_at:g} of {timing_s:.3f} s")
                out.append(run)
                say(f"    rep {rep} {system} through {kind} ({run.target} at "
                    f"{run.fired_at_s} s): {run.completion_s:.3f} s, lost "
                    f"{run.lost_s * 1000:.0f} ms, longest stall "
                    f"{run.longest_stall_s * 1000:.0f} ms")
    return out
