"""A failure kind is one class: registered, it is a timeline verb everywhere (no root).

The toy kind below is all it takes: TOML timelines, experiment files and scripts know it,
its arguments are checked against its fields, restores name its event's id, and the
timeline runner fires it on a (fake) fabric.
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv6Network
from types import SimpleNamespace
from typing import Annotated, ClassVar

import pytest

from emu import convergence
from emu.errors import EmuError
from emu.failure_kinds.base import FailureKind, Withdrawal
from emu.failure_kinds.registry import VOCABULARY, register, unregister, verb
from emu.timeline import Restore, TimelineRunner, load
from topologies import DciSpec, MultiPlaneClos, Role, ScaleAcross, TopologyError

SPEC = MultiPlaneClos(planes=2, spines=2, leaves=2, hosts_per_leaf=2)


@dataclass(frozen=True)
class Unplug(FailureKind):
    """The toy: "unplugs" a switch's ``level`` (logged on the fake fabric)."""

    kind: ClassVar[str] = "unplug"
    switch: Annotated[str, "a switch name"]
    level: int = 1

    def supports(self, spec) -> str | None:
        return "toy fabrics only" if isinstance(spec, ScaleAcross) else None

    def validate(self, spec) -> None:
        if spec.node(self.switch).role is Role.HOST:
            raise EmuError(f"{self.switch!r} is a host")

    def apply(self, fab) -> str:
        fab.log.append(("unplug", self.switch, self.level))
        return f"handle-{self.switch}"

    def restore(self, fab, handle: object = None) -> dict:
        fab.log.append(("plug", self.switch, handle))
        return {"plugged": True}

    def expected_withdrawals(self, spec) -> tuple[Withdrawal, ...]:
        return (Withdrawal("p0l1", IPv6Network("fd00::/64"), "s0"),)


@pytest.fixture
def unplug():
    register("unplug_switch")(Unplug)
    yield Unplug
    unregister("unplug_switch")


TOML = """
[[event]]
at = 0.0
do = "unplug_switch"
switch = "p0s1"
level = 3
id = "u"

[[event]]
at = 0.05
do = "restore"
id = "u"
"""


def test_a_registered_kind_runs_from_a_toml_timeline(unplug, tmp_path):
    f = tmp_path / "t.toml"
    f.write_text(TOML)
    tl = load(f)
    assert tl.events[0].action == Unplug("p0s1", 3) and tl.events[0].id == "u"
    assert tl.events[1].action == Restore(Unplug("p0s1", 3))
    fab = SimpleNamespace(spec=SPEC, log=[], control_plane="bgp")
    recs: list[dict] = []
    measured: list = []

    def after(applied) -> dict:
        measured.append(convergence.expected_withdrawals(SPEC, applied))
        return {"expected": len(measured[-1])}

    run = TimelineRunner(fab, tl, recs.append, after_apply=after)
    run.start()
    run.join(5)
    run.stop()
    assert fab.log == [("unplug", "p0s1", 3), ("plug", "p0s1", "handle-p0s1")]
    by_action = {r["action"]: r for r in recs}
    assert by_action["apply"]["kind"] == "unplug" and by_action["apply"]["level"] == 3
    assert by_action["restore"]["plugged"] is True
    assert by_action["measured"]["expected"] == 1
    assert all("error" not in r for r in recs), recs


def test_its_arguments_are_checked_against_its_fields(unplug, tmp_path):
    assert [(p.name, p.what, p.required) for p in verb("unplug_switch").params] == [
        ("switch", "a switch name", True), ("level", "an integer", False)]
    f = tmp_path / "t.toml"
    for body, match in [
        ('switch = "p0s1"\nlevel = 1.5', r"event\[0\]\.level = 1\.5 is invalid: must be an "
                                         "integer"),
        ("level = 1", r"event\[0\]\.switch is required for unplug_switch"),
        ('switch = 7', "must be a switch name"),
        ('switch = "p0s1"\nvolts = 3', r"unknown key 'event\[0\]\.volts' for unplug_switch; "
                                       "valid keys: at, do, switch, level, id"),
    ]:
        f.write_text(f'[[event]]\nat = 1.0\ndo = "unplug_switch"\n{body}\n')
        with pytest.raises(EmuError, match=match):
            load(f)


def test_scripts_and_experiments_know_it_too(unplug, tmp_path):
    from emu.timeline import unplug_switch  # every registered verb is importable

    assert unplug_switch("p1s0") == Unplug("p1s0")
    py = tmp_path / "t.py"
    py.write_text('u = unplug_switch("p0s1", level=3)\ntimeline = [at(0.0, u), '
                  'at(0.05, restore(u))]\n')
    toml = tmp_path / "t.toml"
    toml.write_text(TOML)
    assert load(py) == load(toml)
    with pytest.raises(EmuError, match=r"line 1: unplug_switch: level = 'x' is invalid"):
        py.write_text('u = unplug_switch("p0s1", level="x")\ntimeline = [at(0.0, u)]\n')
        load(py)

    from workloads import experiment as ex

    doc = {"name": "t", "fabric": {"planes": 2, "spines": 2, "leaves": 2, "hosts_per_leaf": 2},
           "workload": {"model": "digits_cnn", "workers": 4, "steps": 10},
           "event": [{"at_step": 2, "do": "unplug_switch", "switch": "p0l1", "id": "u"},
                     {"at_step": 5, "do": "restore", "id": "u"}]}
    exp = ex.parse(doc, "exp.toml")
    assert [ev.action for ev in exp.events] == [Unplug("p0l1"), Restore(Unplug("p0l1"))]
    assert exp.as_record()["events"][0] == {"at_step": 2, "action": "apply", "kind": "unplug",
                                            "switch": "p0l1", "level": 1}
    doc["event"][0]["switch"] = "h0"
    with pytest.raises(EmuError, match=r"exp.toml: \[\[event\]\]: event\[0\] \(unplug\): "
                                       "'h0' is a host"):
        ex.parse(doc, "exp.toml")


def test_supports_refuses_a_fabric_before_validating(unplug, tmp_path):
    sa = ScaleAcross(dcs=tuple(MultiPlaneClos(planes=2, spines=2, leaves=2, hosts_per_leaf=1,
                                              dc=d) for d in range(2)),
                     dci=DciSpec(rate_mbit=100.0))
    f = tmp_path / "t.toml"
    f.write_text(TOML)
    with pytest.raises(EmuError, match=r"event 0 \(at 0\.0\): not supported on this fabric: "
                                       "toy fabrics only"):
        load(f).validate(sa)
    with pytest.raises(TopologyError):
        Unplug("nope").validate(SPEC)  # validate alone: no wrapping
    with pytest.raises(EmuError, match=r"event 0 \(at 0\.0\): unknown node 'nope'"):
        f.write_text(TOML.replace("p0s1", "nope"))
        load(f).validate(SPEC)


def test_registration_refuses_what_a_timeline_could_not_write(unplug):
    with pytest.raises(ValueError, match="already"):
        register("unplug_switch")(type("Other", (Unplug,), {}))
    with pytest.raises(ValueError, match="not one of"):
        register("restore")(Unplug)

    @dataclass(frozen=True)
    class Bad(FailureKind):
        kind: ClassVar[str] = "bad"
        where: dict

    with pytest.raises(ValueError, match="argument 'where'.*cannot be written"):
        register("bad_kind")(Bad)
    assert "bad_kind" not in VOCABULARY
    register("unplug_switch")(Unplug)  # the same class again: a re-import, fine


def test_the_toy_is_gone_after_unregistering(tmp_path):
    f = tmp_path / "t.toml"
    f.write_text(TOML)
    with pytest.raises(EmuError, match=r"event\[0\]\.do = 'unplug_switch' is invalid"):
        load(f)
    assert "unplug_switch" not in VOCABULARY
