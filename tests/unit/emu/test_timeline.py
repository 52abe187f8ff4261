"""Timeline validation and loading (no root): errors before anything runs."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from emu.errors import EmuError
from emu.timeline import (
    Timeline,
    TimelineRunner,
    at,
    at_step,
    degrade_link,
    delay_link,
    fail_link,
    fail_plane,
    fail_switch,
    flap_link,
    gray_link,
    load,
    restore,
)
from topologies import MultiPlaneClos

SPEC = MultiPlaneClos()
EXAMPLES = Path(__file__).resolve().parents[3] / "experiments" / "failures"


def test_examples_load_and_validate():
    files = sorted(EXAMPLES.glob("*.py")) + sorted(EXAMPLES.glob("*.toml"))
    assert len(files) >= 4
    for f in files:
        tl = load(f)
        tl.validate(SPEC)
        assert tl.events


def test_toml_and_python_give_the_same_timeline(tmp_path):
    py = tmp_path / "t.py"
    py.write_text('c = fail_link("p0l0-p0s1")\ntimeline = [at(1.0, c), at(2.5, restore(c))]\n')
    toml = tmp_path / "t.toml"
    toml.write_text('[[event]]\nat = 1.0\ndo = "fail_link"\nlink = "p0l0-p0s1"\n'
                    '[[event]]\nat = 2.5\ndo = "restore"\nwhat = "fail_link"\n'
                    'link = "p0l0-p0s1"\n')
    assert load(py) == load(toml)


@pytest.mark.parametrize("events, match", [
    ([at(-1.0, fail_link("p0l0-p0s1"))], "time must be"),
    ([at(float("nan"), fail_link("p0l0-p0s1"))], "time must be"),
    ([at(2.0, fail_link("p0l0-p0s1")), at(1.0, restore(fail_link("p0l0-p0s1")))],
     "out of order"),
    ([at(1.0, restore(fail_link("p0l0-p0s1")))], "not active"),
    ([at(1.0, fail_link("p0l0-p0s1")), at(2.0, fail_link("p0l0-p0s1"))], "already active"),
    ([at(1.0, fail_link("p0l0-p0s1")), at(2.0, gray_link("p0l0-p0s1", 0.1))], "overlaps"),
    ([at(1.0, fail_switch("p0s1")), at(2.0, fail_link("p0l3-p0s1"))], "overlaps"),
    ([at(1.0, fail_plane(0)), at(2.0, fail_link("h0-p0l0"))], "overlaps"),
    ([at(1.0, fail_link("p0l9-p0s1"))], "p0l9-p0s1"),
    ([at(1.0, fail_switch("nope"))], "nope"),
    ([at(1.0, fail_switch("h0"))], "is a host"),
    ([at(1.0, fail_plane(2))], "plane=2"),
    ([at(1.0, gray_link("p0l0-p0s1", 1.5))], r"loss=1\.5"),
    ([at(1.0, gray_link("p0l0-p0s1", -0.1))], r"loss=-0\.1"),
    ([at(1.0, flap_link("p0l0-p0s1", 0.001))], "period_s"),
    ([at(1.0, flap_link("p0l0-p0s1", 1.0, duty=1.0))], "duty"),
    ([at(1.0, degrade_link("p0l0-p0s1", 0))], "rate_mbit"),
    ([at(1.0, delay_link("p0l0-p0s1", 5.0))], "delay lines exist only on DCI links"),
])
def test_bad_timelines_fail_before_running(events, match):
    with pytest.raises(EmuError, match=match):
        Timeline(tuple(events)).validate(SPEC)


def test_unknown_link_lists_valid_names():
    with pytest.raises(EmuError, match=r"valid names are h0-p0l0, .* \(64 in total\)"):
        Timeline((at(0.0, fail_link("bogus")),)).validate(SPEC)


def test_restore_then_fail_again_is_fine():
    c = fail_link("p0l0-p0s1")
    Timeline((at(1, c), at(2, restore(c)), at(3, c), at(4, restore(c)))).validate(SPEC)


@pytest.mark.parametrize("text, match", [
    ('[[event]]\nat = 1.0\ndo = "explode"\n', "explode"),
    ('[[event]]\nat = 1.0\ndo = "fail_link"\nlink = "p0l0-p0s1"\nspeed = 3\n', "speed"),
    ('[[event]]\ndo = "fail_link"\nlink = "p0l0-p0s1"\n', "needs `at`"),
    ('[other]\nx = 1\n', "unknown top-level"),
])
def test_bad_toml(tmp_path, text, match):
    f = tmp_path / "t.toml"
    f.write_text(text)
    with pytest.raises(EmuError, match=match):
        load(f)


def test_bad_files(tmp_path):
    with pytest.raises(EmuError, match="does not exist"):
        load(tmp_path / "missing.py")
    (tmp_path / "x.yaml").write_text("")
    with pytest.raises(EmuError, match=".py script or a .toml"):
        load(tmp_path / "x.yaml")
    (tmp_path / "n.py").write_text("events = []\n")
    with pytest.raises(EmuError, match="must define"):
        load(tmp_path / "n.py")


def test_delay_link_on_a_scaleacross():
    from topologies import DciSpec, ScaleAcross

    sa = ScaleAcross(dcs=tuple(MultiPlaneClos(planes=2, spines=2, leaves=2, hosts_per_leaf=1,
                                              dc=d) for d in range(2)),
                     dci=DciSpec(rate_mbit=100.0, delay_ms=5.0))
    d = delay_link("p0x-d1p0x", 12.0)
    Timeline((at(1.0, d), at(2.0, restore(d)))).validate(sa)
    with pytest.raises(EmuError, match="delay lines exist only on DCI links .*p0x-d1p0x"):
        Timeline((at(1.0, delay_link("p0l0-p0s0", 1.0)),)).validate(sa)
    with pytest.raises(EmuError, match="delay_ms=2000"):
        Timeline((at(1.0, delay_link("p0x-d1p0x", 2000)),)).validate(sa)


def test_steps_in_python_and_toml(tmp_path):
    py = tmp_path / "t.py"
    py.write_text('c = fail_link("p0l0-p0s1")\ntimeline = [at_step(3, c), '
                  'at_step(7, restore(c))]\n')
    toml = tmp_path / "t.toml"
    toml.write_text('[[event]]\nat_step = 3\ndo = "fail_link"\nlink = "p0l0-p0s1"\n'
                    '[[event]]\nat_step = 7\ndo = "restore"\nwhat = "fail_link"\n'
                    'link = "p0l0-p0s1"\n')
    tl = load(py)
    assert tl == load(toml) and tl.by_step and tl.duration == 0.0
    assert [(e.at, e.step) for e in tl.events] == [(None, 3), (None, 7)]
    tl.validate(SPEC, steps=9)
    with pytest.raises(EmuError, match=r"event 1 \(at_step 7\): at_step=7 is invalid: must be "
                                       r"an integer in \[0, 6\]"):
        tl.validate(SPEC, steps=8)
    toml.write_text('[[event]]\nat_step = 3\nat = 1.0\ndo = "fail_link"\nlink = "p0l0-p0s1"\n')
    with pytest.raises(EmuError, match="both `at` and `at_step`"):
        load(toml)


@pytest.mark.parametrize("events, match", [
    ([at_step(-1, fail_link("p0l0-p0s1"))], "at_step=-1 is invalid"),
    ([at_step(1.5, fail_link("p0l0-p0s1"))], "at_step=1.5 is invalid"),
    ([at_step(2, fail_link("p0l0-p0s1")), at(3.0, restore(fail_link("p0l0-p0s1")))],
     "cannot be mixed"),
    ([at(1.0, fail_link("p0l0-p0s1")), at_step(3, restore(fail_link("p0l0-p0s1")))],
     "cannot be mixed"),
    ([at_step(4, fail_link("p0l0-p0s1")), at_step(2, restore(fail_link("p0l0-p0s1")))],
     "out of order, events must be listed by step"),
])
def test_bad_step_timelines(events, match):
    with pytest.raises(EmuError, match=match):
        Timeline(tuple(events)).validate(SPEC)


# --- firing at step boundaries (a fake fabric and fake failures: no root) ----------------


@dataclass(frozen=True)
class Fake:
    """A failure that only logs what is done to it."""

    name: str
    log: list = field(default_factory=list, compare=False, hash=False)

    def validate(self, spec) -> None:
        pass

    def links(self, spec) -> tuple:
        return ()

    def apply(self, fab) -> None:
        self.log.append(("apply", self.name))

    def restore(self, fab, handle=None) -> None:
        self.log.append(("restore", self.name))

    def describe(self) -> dict:
        return {"kind": "fake", "name": self.name}


def test_events_by_step_fire_at_their_boundary():
    log: list = []
    a, b = Fake("a", log), Fake("b", log)
    tl = Timeline((at_step(2, a), at_step(2, b), at_step(5, restore(a))))
    recs: list = []
    fab = SimpleNamespace(spec=SPEC)
    with pytest.raises(EmuError, match="only a training run"):
        TimelineRunner(fab, tl, recs.append)
    run = TimelineRunner(fab, tl, recs.append, training=True)
    assert run.gated and run.clock == "step"
    run.start()
    assert run.next_gate(0) == 2
    assert run.fire_due(1, 0.3) == [] and log == []
    fired = run.fire_due(2, 0.4)
    assert log == [("apply", "a"), ("apply", "b")]
    assert [(r["action"], r["name"], r["step"], r["at_step"], r["train_s"], r["clock"])
            for r in fired] == [("apply", "a", 2, 2, 0.4, "step"), ("apply", "b", 2, 2, 0.4,
                                                                      "step")]
    assert "at" not in fired[0] and fired[0]["applied"] >= fired[0]["fired"]
    assert run.next_gate(3) == 5
    run.fire_due(5, 1.0)
    assert log[-1] == ("restore", "a") and run.next_gate(6) is None
    run.stop()  # b is still active: restored at stop, and that is recorded too
    assert log[-1] == ("restore", "b") and recs[:2] == fired and len(recs) == 4
    assert recs[2]["action"] == "restore" and recs[2]["name"] == "a"
    at_stop = recs[3]
    assert at_stop["action"] == "restore_at_stop" and at_stop["name"] == "b"
    assert "error" not in at_stop and at_stop["fired"] >= recs[2]["fired"]


def test_events_in_modelled_time_fire_at_the_first_boundary_past_them():
    log: list = []
    a = Fake("a", log)
    tl = Timeline((at(0.0, a), at(1.0, restore(a))))
    run = TimelineRunner(SimpleNamespace(spec=SPEC), tl, lambda r: None, clock="modelled",
                         training=True)
    run.start()
    assert run.next_gate(0) == 0  # not known in advance: every step until fired
    [first] = run.fire_due(-1, 0.0)  # before step 0
    assert first["step"] == -1 and first["late_ms"] == 0.0 and first["clock"] == "modelled"
    assert run.fire_due(3, 0.98) == [] and run.next_gate(4) == 4
    [second] = run.fire_due(4, 1.02)
    assert second["action"] == "restore" and second["late_ms"] == pytest.approx(20.0)
    assert run.next_gate(5) is None and log == [("apply", "a"), ("restore", "a")]
    with pytest.raises(EmuError, match="clock='steps' is invalid"):
        TimelineRunner(SimpleNamespace(spec=SPEC), tl, lambda r: None, clock="steps")


class Armed:
    """What a fake armable failure's arm() returns: it records the instant it is given."""

    def __init__(self, log: list, name: str) -> None:
        self.log, self.name, self.t0 = log, name, None

    def fire(self, t0: float) -> None:
        self.t0 = t0
        self.log.append(("fire", self.name, t0))


@dataclass(frozen=True)
class Armable(Fake):
    """A fake failure that can be armed before the run (as burst senders are)."""

    def arm(self, fab) -> Armed:
        self.log.append(("arm", self.name))
        return Armed(self.log, self.name)

    def disarm(self, fab, armed) -> None:
        self.log.append(("disarm", self.name))

    def apply(self, fab, armed=None) -> None:
        self.log.append(("apply", self.name, armed.t0 if armed is not None else None))


def test_armed_failures_due_together_get_one_instant_before_any_applies():
    log: list = []
    a, b, c = Armable("a", log), Armable("b", log), Armable("c", log)
    tl = Timeline((at_step(1, a), at_step(1, b), at_step(1, Fake("x", log)),
                   at_step(4, restore(a)), at_step(6, c)))
    run = TimelineRunner(SimpleNamespace(spec=SPEC), tl, lambda r: None, training=True)
    run.prepare()
    assert log == [("arm", "a"), ("arm", "b"), ("arm", "c")]
    run.start()
    run.fire_due(1, 0.1)
    fired = log[3:]
    assert [e[:2] for e in fired] == [("fire", "a"), ("fire", "b"), ("apply", "a"),
                                      ("apply", "b"), ("apply", "x")]
    t = fired[0][2]
    assert fired[1][2] == t and fired[2][2] == t and fired[3][2] == t
    run.fire_due(4, 0.4)
    run.stop()  # c never fired: disarmed; x and b still active: restored, last first
    assert log[-4:] == [("restore", "a"), ("disarm", "c"), ("restore", "x"),
                        ("restore", "b")]


def test_armed_failures_on_the_wall_clock_start_on_their_scheduled_instant():
    log: list = []
    a, b = Armable("a", log), Armable("b", log)
    tl = Timeline((at(0.08, a), at(0.08, b)))
    run = TimelineRunner(SimpleNamespace(spec=SPEC), tl, lambda r: None)
    run.prepare()
    t0 = time.monotonic()
    run.start(t0)
    run.join(5)
    run.stop()
    fires = [e for e in log if e[0] == "fire"]
    assert [e[2] for e in fires] == [pytest.approx(t0 + 0.08, abs=1e-9)] * 2
    assert [e[0] for e in log] == ["arm", "arm", "fire", "fire", "apply", "apply", "restore",
                                   "restore"]


@dataclass(frozen=True)
class Measuring(Fake):
    """A fake failure whose restore reports what it measured (as a microburst's drops)."""

    def restore(self, fab, handle=None) -> dict:
        self.log.append(("restore", self.name))
        return {"target_drops": 7, "delay_only": False}


def test_a_failure_active_at_the_end_reports_its_measurement_when_restored_at_stop():
    log: list = []
    recs: list = []
    tl = Timeline((at_step(0, Measuring("burst", log)),))
    run = TimelineRunner(SimpleNamespace(spec=SPEC), tl, recs.append, training=True)
    run.start()
    run.fire_due(0, 0.0)
    run.stop()  # never restored by the timeline: the run's end restores it
    assert [r["action"] for r in recs] == ["apply", "restore_at_stop"]
    assert recs[1]["target_drops"] == 7 and recs[1]["delay_only"] is False


@dataclass(frozen=True)
class Stepped(Fake):
    """A fake step-locked failure (as bursts with every_steps): it logs each piece."""

    every_steps: int = 3

    def apply(self, fab) -> str:
        self.log.append(("apply", self.name))
        return "handle"

    def open_window(self, fab, handle, t_resume: float) -> dict:
        k = sum(1 for e in self.log if e[0] == "window")
        self.log.append(("window", self.name, handle, t_resume))
        return {"burst": k, "opens": t_resume + 0.01 * k}


def test_step_locked_pieces_open_at_every_nth_boundary_relative_to_the_resume():
    log: list = []
    s = Stepped("s", log)
    tl = Timeline((at_step(2, s), at_step(9, restore(s))))
    recs: list = []
    run = TimelineRunner(SimpleNamespace(spec=SPEC), tl, recs.append, training=True)
    run.start(t0=100.0)
    assert run.next_gate(0) == 2
    run.fire_due(2, 0.2)
    assert log == [("apply", "s")]  # the piece waits for the resume instant
    assert run.next_gate(3) == 5  # the next piece's boundary is a gate too
    run.resumed(2, 100.5)
    assert log[-1] == ("window", "s", "handle", 100.5)
    run.fire_due(5, 0.5)
    assert run.next_gate(6) == 8
    run.resumed(5, 101.0)
    run.fire_due(8, 0.8)
    assert run.next_gate(9) == 9  # the restore
    run.resumed(8, 101.5)
    run.fire_due(9, 0.9)
    run.resumed(9, 102.0)  # restored: no piece any more
    assert run.next_gate(10) is None
    assert [e[3] for e in log if e[0] == "window"] == [100.5, 101.0, 101.5]
    assert log[-1] == ("restore", "s")
    windows = [r for r in recs if r["action"] == "window"]
    assert [(r["step"], r["burst"], r["resumed"], r["opens"]) for r in windows] == [
        (2, 0, 0.5, 0.5), (5, 1, 1.0, 1.01), (8, 2, 1.5, 1.52)]
    run.stop()


def test_a_step_locked_failure_scheduled_by_time_is_refused():
    tl = Timeline((at(1.0, Stepped("s", [])),))
    with pytest.raises(EmuError, match=r"locked to training steps.*schedule it by step"):
        TimelineRunner(SimpleNamespace(spec=SPEC), tl, lambda r: None, clock="modelled",
                       training=True)


@dataclass(frozen=True)
class ArmedStepped(Armable):
    """A fake step-locked failure armed before the run (as step-locked bursts are)."""

    every_steps: int = 2

    def open_window(self, fab, handle, t_resume: float) -> dict:
        self.log.append(("window", self.name, t_resume))
        return {"burst": 0, "opens": t_resume}


def test_an_armed_step_locked_failure_is_not_fired_on_the_gates_instant():
    log: list = []
    s, a = ArmedStepped("s", log), Armable("a", log)
    tl = Timeline((at_step(1, s), at_step(1, a)))
    run = TimelineRunner(SimpleNamespace(spec=SPEC), tl, lambda r: None, training=True)
    run.prepare()
    run.start(t0=10.0)
    run.fire_due(1, 0.1)
    # only the timed one gets the gate's instant; the step-locked one waits for the resume
    assert [e[:2] for e in log if e[0] == "fire"] == [("fire", "a")]
    run.resumed(1, 11.0)
    assert log[-1] == ("window", "s", 11.0)
    run.stop()
