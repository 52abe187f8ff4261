"""Timeline validation and loading (no root): errors before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from emu.errors import EmuError
from emu.timeline import (
    Timeline,
    at,
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
EXAMPLES = Path(__file__).resolve().parents[2] / "experiments" / "failures"


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
