"""The one timeline parser: ids, argument checks from signatures, scripts read without
running them (no root)."""

from __future__ import annotations

import pytest

from emu.errors import EmuError
from emu.failures import LinkDown, Microbursts
from emu.timeline import NeedsRun, Restore, load, parse_events
from topologies import MultiPlaneClos
from workloads import experiment as ex

SPEC = MultiPlaneClos()
CUT = {"do": "fail_link", "link": "p0l0-p0s1"}


def test_a_restore_names_the_event_it_undoes():
    tl = parse_events([{"at": 1.0, **CUT, "id": "cut"}, {"at": 2.0, "do": "restore",
                                                         "id": "cut"}], "t.toml")
    by_value = parse_events([{"at": 1.0, **CUT},
                             {"at": 2.0, "do": "restore", "what": "fail_link",
                              "link": "p0l0-p0s1"}], "t.toml")
    assert tl == by_value and tl.events[1].action == Restore(LinkDown("p0l0-p0s1"))
    tl.validate(SPEC)


@pytest.mark.parametrize("events, match", [
    ([{"at": 1.0, **CUT}, {"at": 2.0, "do": "restore", "id": "cut"}],
     r"event\[1\]\.id = 'cut' is invalid: must be the id of an earlier event \(ids so far: "
     "none"),
    ([{"at": 2.0, "do": "restore", "id": "cut"}, {"at": 3.0, **CUT, "id": "cut"}],
     "ids so far: none"),
    ([{"at": 1.0, **CUT, "id": "cut"}, {"at": 1.0, "do": "fail_plane", "plane": 1, "id": "cut"}],
     r"event\[1\]\.id = 'cut' is invalid: event\[0\] has that id already"),
    ([{"at": 1.0, **CUT, "id": 3}], r"event\[0\]\.id = 3 is invalid: must be a non-empty"),
    ([{"at": 1.0, **CUT, "id": "cut"}, {"at": 2.0, "do": "restore", "id": "cut",
                                         "link": "p0l0-p0s1"}],
     r"unknown key 'event\[1\]\.link' for a restore by id; valid keys: at, do, id"),
    ([{"at": 1.0, **CUT}, {"at": 2.0, "do": "restore"}],
     r"event\[1\]\.what = None is invalid: .*or give id ="),
    ([{"at": 1.0, "do": ["fail_link"]}], r"event\[0\]\.do = \['fail_link'\] is invalid"),
])
def test_bad_ids(events, match):
    with pytest.raises(EmuError, match=match):
        parse_events(events, "t.toml")


def test_restoring_twice_by_id_is_caught_by_validation():
    tl = parse_events([{"at": 1.0, **CUT, "id": "c"}, {"at": 2.0, "do": "restore", "id": "c"},
                       {"at": 3.0, "do": "restore", "id": "c"}], "t.toml")
    with pytest.raises(EmuError, match=r"event 2 \(at 3\.0\): restore of .* not active"):
        tl.validate(SPEC)


@pytest.mark.parametrize("event, match", [
    # the types come from the kinds' signatures
    ({"do": "flap_link", "link": "p0l0-p0s1", "period_s": "1s"},
     r"event\[0\]\.period_s = '1s' is invalid: must be a number"),
    ({"do": "gray_link", "link": "p0l0-p0s1", "loss": True}, "loss = True is invalid"),
    ({"do": "gray_link", "link": "p0l0-p0s1", "loss": float("inf")}, "loss = inf is invalid"),
    ({"do": "microburst", "target": "p0l1:h4", "sources": "h5", "on_ms": 10, "every_ms": 100},
     r"sources = 'h5' is invalid: must be an array of host names"),
    ({"do": "microburst", "target": "p0l1:h4", "sources": ["h5", 6], "on_ms": 10,
      "every_ms": 100}, "must be an array of host names"),
    ({"do": "microburst", "target": "p0l1:h4", "sources": ["h5"], "on_ms": 10},
     r"event\[0\] \(microburst\): every_ms=None is invalid: a burst pattern needs a "
     r"period \(every_ms > on_ms\), or every_steps >= 1"),
    ({"do": "fail_busiest_uplink", "leaf": "p0l0", "sample_s": "fast"},
     "sample_s = 'fast' is invalid: must be a number"),
])
def test_arguments_are_checked_by_type(event, match):
    with pytest.raises(EmuError, match=match):
        parse_events([{"at": 1.0, **event}], "t.toml")


def test_sources_arrive_as_a_tuple_in_either_spelling(tmp_path):
    tl = parse_events([{"at": 1.0, "do": "microburst", "target": "p0l1:h4",
                        "sources": ["h5", "h6"], "on_ms": 10.0, "every_ms": 100.0}], "t")
    f = tl.events[0].action
    assert isinstance(f, Microbursts) and f.burst.sources == ("h5", "h6")
    py = tmp_path / "t.py"
    py.write_text('timeline = [at(1.0, microburst("p0l1:h4", ["h5", "h6"], 10.0, 100.0))]\n')
    assert load(py) == tl


def test_a_burst_event_takes_its_jitter():
    tl = parse_events([{"at_step": 3, "do": "microburst", "target": "p0l1:h4", "sources": ["h5"],
                        "on_ms": 50.0, "every_ms": 200.0, "jitter_ms": 80.0}], "t")
    f = tl.events[0].action
    assert isinstance(f, Microbursts) and f.burst.jitter_ms == 80.0
    assert f.describe()["jitter_ms"] == 80.0
    with pytest.raises(EmuError, match=r"jitter_ms=160.0 is invalid.*every_ms=200.0"):
        parse_events([{"at": 1.0, "do": "microburst", "target": "p0l1:h4", "sources": ["h5"],
                       "on_ms": 50.0, "every_ms": 200.0, "jitter_ms": 160.0}], "t")


def test_a_bad_toml_file_names_the_file_and_the_key(tmp_path):
    """`emu fabric --timeline FILE` loads with the same checks (no traceback)."""
    f = tmp_path / "t.toml"
    f.write_text('[[event]]\nat = 1.0\ndo = "fail_link"\n')
    with pytest.raises(EmuError, match=r"t\.toml: event\[0\]\.link is required for fail_link"):
        load(f)
    f.write_text('[[event]]\nat = 1.0\ndo = "fail_plane"\nplane = "0"\n')
    with pytest.raises(EmuError, match=r"event\[0\]\.plane = '0' is invalid: must be an integer"):
        load(f)
    f.write_text("[[event]\n")
    with pytest.raises(EmuError, match="not valid TOML"):
        load(f)
    f.write_text("event = 3\n")
    with pytest.raises(EmuError, match="event is invalid: must be an array of tables"):
        load(f)


# --- scripts: read without running them when they only declare ---------------------------


LOOP = """
import pathlib
pathlib.Path({mark!r}).write_text("ran")
cuts = [fail_link(f"p0l{{i}}-p0s1") for i in range(2)]
timeline = [at(1.0, cuts[0]), at(1.0, cuts[1])] + [at(2.0, restore(c)) for c in cuts]
"""


def test_a_declarative_script_is_read_without_running_it(tmp_path):
    py = tmp_path / "t.py"
    py.write_text('"""doc"""\nc = fail_link("p0l0-p0s1")\nt0 = 1.5 * 2\n'
                  'g = gray_link("p0l1-p0s1", loss=-(-0.25))\n'
                  'timeline = [at(t0, c), at(t0, g), at(t0 + 1, restore(c)), at(4, restore(g))]\n')
    tl = load(py, run_scripts=False)
    assert [ev.at for ev in tl.events] == [3.0, 3.0, 4.0, 4]
    tl.validate(SPEC)


def test_a_script_that_does_more_runs_only_when_asked(tmp_path):
    mark = tmp_path / "ran"
    py = tmp_path / "t.py"
    py.write_text(LOOP.format(mark=str(mark)))
    with pytest.raises(NeedsRun, match=r"t\.py, line 2: an import makes this script more"):
        load(py, run_scripts=False)
    assert not mark.exists()
    tl = load(py)  # a run: it runs
    assert mark.exists() and len(tl.events) == 4


def test_an_experiment_never_runs_its_script_to_validate(tmp_path):
    mark = tmp_path / "ran"
    py = tmp_path / "t.py"
    py.write_text(LOOP.format(mark=str(mark)))
    doc = {"name": "t", "timeline": str(py),
           "fabric": {"planes": 2, "spines": 2, "leaves": 2, "hosts_per_leaf": 2},
           "workload": {"model": "digits_cnn", "workers": 4, "steps": 10}}
    exp = ex.parse(doc, "exp.toml")
    again = ex.with_overrides(exp, {"seed": 3})
    assert not mark.exists() and exp.declared_events is None
    assert exp.timeline_file == str(py.resolve())
    assert len(exp.events) == 4 and mark.exists()  # a run asks for the events: it runs
    assert again.events == exp.events
    # what validation would have said, said when it runs
    py.write_text(LOOP.format(mark=str(mark)).replace("p0s1", "p0s9"))
    with pytest.raises(EmuError, match=r"exp\.toml: timeline = .*event\[0\] \(link_down\): "
                                       "unknown link 'p0l0-p0s9'"):
        _ = ex.parse(doc, "exp.toml").events
    py.write_text(LOOP.format(mark=str(mark)).replace("at(1.0", "at_step(1").replace(
        "at(2.0", "at_step(2"))
    with pytest.raises(EmuError, match=r"exp\.toml: clock = 'modelled' is invalid"):
        _ = ex.parse({**doc, "clock": "modelled"}, "exp.toml").events
    py.write_text("timeline = [at(1.0, fail_link(7))]\n")
    with pytest.raises(EmuError, match=r"timeline = .*line 1: fail_link: link = 7 is invalid"):
        ex.parse(doc, "exp.toml")
