"""Experiment files (no root): examples load, every kind of bad input fails before building."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from emu.errors import EmuError
from emu.timeline import Restore
from topologies import MultiPlaneClos, ScaleAcross
from workloads import experiment as ex
from workloads.collectives.phase import (
    FixedTolerance,
    OptiReduceDeadline,
    PhaseAware,
    PhaseAwareConfig,
)

from experiment_checks import fails

EXAMPLES = Path(__file__).resolve().parents[3] / "experiments" / "training"

BASE = {
    "name": "t",
    "fabric": {"planes": 2, "spines": 2, "leaves": 2, "hosts_per_leaf": 2},
    "workload": {"model": "digits_cnn", "workers": 4, "steps": 10},
}


def doc(**changes: object) -> dict:
    """BASE with dotted keys set (a value None removes the key)."""
    d = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        t = d
        for p in parents:
            t = t.setdefault(p, {})
        if value is None:
            t.pop(last, None)
        else:
            t[last] = value
    return d


# --- the examples ----------------------------------------------------------------------


def test_examples_load():
    files = sorted(EXAMPLES.glob("*.toml"))
    assert {f.name for f in files} >= {"digits_mrc_linkcut.toml", "digits_dblp_bursts.toml",
                                       "lm_pipeline_2dc.toml"}
    for f in files:
        exp = ex.load(f)
        assert exp.source == str(f)
        assert len(exp.hosts()) == exp.workload.workers
        json.dumps(exp.as_record())  # the meta record's experiment is plain data


def test_linkcut_example_uses_the_shared_timeline_file():
    exp = ex.load(EXAMPLES / "digits_mrc_linkcut.toml")
    assert exp.timeline_file is not None and exp.timeline_file.endswith("spine_link_cut.py")
    assert [ev.at for ev in exp.events] == [2.0, 4.0]
    assert isinstance(exp.events[1].action, Restore)
    assert exp.hosts() == ("h0", "h2", "h1", "h3")  # consecutive ranks on different racks
    assert isinstance(exp.fabric_spec(), MultiPlaneClos)


def test_dblp_example_builds_its_policy():
    exp = ex.load(EXAMPLES / "digits_dblp_bursts.toml")
    d = exp.transport.dblp
    assert exp.transport.collective == "transpose"
    assert d is not None and d.phase is not None and d.phase.critical_epochs == 1
    assert d.deadline_s == pytest.approx(0.2)
    assert isinstance(d.policy_object(), PhaseAware)
    assert exp.seeds() == (7, 8)
    assert exp.events[0].action.describe()["kind"] == "microburst"


def test_pipeline_example_spans_two_dcs():
    exp = ex.load(EXAMPLES / "lm_pipeline_2dc.toml")
    spec = exp.fabric_spec()
    assert isinstance(spec, ScaleAcross) and spec.dci.delay_ms == 5.0
    assert exp.transport.collective is None
    assert exp.workload.microbatches == 4 and exp.workload.target_loss == 2.6
    assert exp.hosts() == ("h0", "d1h0")  # one stage per DC: one DCI crossing


# --- defaults ----------------------------------------------------------------------------


def test_defaults_are_applied():
    exp = ex.parse({"name": "x", "workload": {"model": "digits_cnn", "workers": 2,
                                              "steps": 5}})
    assert (exp.seed, exp.repetitions) == (0, 1)
    f = exp.fabric
    assert (f.planes, f.spines, f.leaves, f.hosts_per_leaf) == (2, 4, 4, 4)
    assert f.fabric_rate_mbit == f.rate_mbit == 100.0 and f.control_plane == "static"
    assert exp.transport == ex.TransportConfig(name="mrc", collective="ring", dblp=None)
    w = exp.workload
    assert (w.kind, w.batch_size, w.lr, w.lr_schedule, w.eval_every, w.compute) == (
        "data_parallel", 64, 0.05, "cosine", 10, "measured")
    assert w.microbatches is None and w.target_accuracy is None and w.hosts is None
    assert exp.events == () and exp.timeline().events == ()
    assert exp.hosts() == ("h0", "h4")


def test_fabric_rate_defaults_to_rate():
    exp = ex.parse(doc(fabric__rate_mbit=40.0))
    assert exp.fabric.fabric_rate_mbit == 40.0
    assert exp.fabric_spec().fabric_link.rate_mbit == 40.0


def test_dblp_defaults_per_policy():
    # the LM on 2 workers: blocks of 30 chunks, which every default tolerance lets lose
    # one or more (the digits CNN's are refused: test_experiment_dblp_blocks.py)
    lm = {"workload__model": "tiny_lm", "workload__workers": 2}
    exp = ex.parse(doc(transport={"name": "dblp"}, **lm))
    assert exp.transport.collective == "transpose"
    assert exp.transport.dblp == ex.DblpConfig(phase=PhaseAwareConfig())
    fixed = ex.parse(doc(transport={"name": "dblp", "dblp": {"policy": "fixed"}}, **lm))
    assert fixed.transport.dblp.tolerance == 0.05
    assert isinstance(fixed.transport.dblp.policy_object(), FixedTolerance)
    opti = ex.parse(doc(transport={"name": "dblp", "dblp": {"policy": "optireduce",
                                                            "deadline_ms": 40}}))
    pol = opti.transport.dblp.policy_object()
    assert isinstance(pol, OptiReduceDeadline)
    assert pol.cfg.initial_s == pytest.approx(0.04) and pol.cfg.margin_s == pytest.approx(1e-3)


def test_pipeline_defaults_and_modelled_compute():
    exp = ex.parse(doc(workload__kind="pipeline", workload__model="tiny_lm",
                       workload__compute="modelled", workload__workers=2,
                       workload__compute_ms=12.0))
    assert exp.workload.microbatches == 4 and exp.workload.compute_ms == 12.0
    with pytest.raises(EmuError, match="compute_ms is invalid: missing: a modelled pipeline"):
        ex.parse(doc(workload__kind="pipeline", workload__model="tiny_lm",
                     workload__compute="modelled", workload__workers=2))


def test_placement_spreads_over_racks_then_dcs():
    spec = MultiPlaneClos(planes=1, spines=1, leaves=3, hosts_per_leaf=2)
    assert ex.default_placement(spec, 4) == ("h0", "h2", "h4", "h1")
    exp = ex.parse(doc(fabric__dcs=3, fabric__hosts_per_leaf=1, workload__workers=4))
    assert exp.hosts() == ("h0", "h1", "d1h0", "d2h0")
    assert ex.parse(doc(workload__hosts=["h3", "h0", "h1", "h2"])).hosts() == (
        "h3", "h0", "h1", "h2")


# --- bad input: every error names the key --------------------------------------------


@pytest.mark.parametrize("data, needles", [
    # unknown keys, at every level
    (doc(nmae="x"), ["unknown key 'nmae'", "the top level", "valid keys: name"]),
    (doc(fabric__spine=2), ["'fabric.spine'", "[fabric]", "spines"]),
    (doc(workload__batchsize=8), ["'workload.batchsize'", "batch_size"]),
    (doc(transport={"name": "dblp", "dblp": {"tolerence": 0.1}}),
     ["'transport.dblp.tolerence'", "tolerance"]),
    (doc(event=[{"at": 1.0, "do": "fail_link", "link": "p0l0-p0s1", "lnk": "x"}]),
     ["unknown key 'event[0].lnk'", "fail_link", "valid keys: at, do, link"]),
    # wrong types
    (doc(seed="1"), ["seed = '1'", "an integer"]),
    (doc(fabric__planes=2.0), ["fabric.planes = 2.0", "an integer in [1, 16]"]),
    (doc(fabric__rate_mbit="fast"), ["fabric.rate_mbit = 'fast'",
                                     "a finite number in [0.01, 40000]"]),
    (doc(workload__steps=True), ["workload.steps = True", "an integer in [1, 100000]"]),
    (doc(workload__hosts="h0"), ["workload.hosts = 'h0'", "array of strings"]),
    (doc(transport={"name": "dblp", "dblp": {"lr_scaling": 1}}),
     ["transport.dblp.lr_scaling = 1", "true or false"]),
    (doc(fabric=[1]), ["fabric", "must be a table"]),
    (doc(event=[{"at": "soon", "do": "fail_link", "link": "p0l0-p0s1"}]),
     ["event[0].at = 'soon'", "number >= 0"]),
    (doc(event=[{"at": 1, "do": "fail_plane", "plane": "0"}]),
     ["event[0].plane = '0'", "an integer"]),
    (doc(event={"at": 1}), ["event is invalid", "array of tables"]),
    # out of range
    (doc(name="a b"), ["name = 'a b'", "letters, digits"]),
    (doc(repetitions=0), ["repetitions = 0", ">= 1"]),
    (doc(fabric__planes=17), ["fabric.planes = 17", "[1, 16]"]),
    (doc(fabric__dci_delay_ms=2000.0, fabric__dcs=2), ["fabric.dci_delay_ms = 2000.0",
                                                       "[0, 1000]"]),
    (doc(fabric__control_plane="ospf"), ["fabric.control_plane = 'ospf'", "'static', 'bgp'"]),
    (doc(workload__workers=5), ["workload.workers = 5", "4 hosts"]),
    (doc(workload__lr=0), ["workload.lr = 0", "> 0"]),
    (doc(workload__target_accuracy=1.5), ["workload.target_accuracy = 1.5", "(0, 1]"]),
    (doc(workload__model="resnet"), ["workload.model = 'resnet'", "'digits_cnn', 'tiny_lm'"]),
    (doc(transport__name="nccl"), ["transport.name = 'nccl'", "'mrc', 'rc', 'dblp', 'gloo'"]),
    (doc(transport={"name": "dblp", "dblp": {"policy": "fixed", "tolerance": 1.0}}),
     ["transport.dblp.tolerance = 1.0", "[0, 1)"]),
    (doc(transport={"name": "dblp", "dblp": {"fill": "ones"}}),
     ["transport.dblp.fill = 'ones'", "'zeros', 'error_feedback'"]),
    (doc(transport={"name": "dblp", "dblp": {"base": 0.3}}),
     ["transport.dblp.base = 0.3", "<= transport.dblp.cap"]),
    (doc(transport={"name": "dblp", "dblp": {"deadline_ms": 0}}),
     ["transport.dblp.deadline_ms = 0", "> 0"]),
    (doc(event=[{"at": -1.0, "do": "fail_link", "link": "p0l0-p0s1"}]),
     ["event[0].at = -1.0"]),
    # missing required fields
    (doc(name=None), ["name is required"]),
    (doc(workload=None), ["[workload] is required"]),
    (doc(workload__model=None), ["workload.model is required", "'digits_cnn'"]),
    (doc(workload__workers=None), ["workload.workers is required"]),
    (doc(workload__steps=None), ["workload.steps is required"]),
    (doc(event=[{"at": 1.0, "do": "fail_link"}]), ["event[0].link is required"]),
    (doc(event=[{"do": "fail_link", "link": "p0l0-p0s1"}]), ["event[0].at is required"]),
    # cross-field combinations
    (doc(transport={"name": "mrc", "dblp": {}}),
     ["transport.dblp", "not allowed with transport.name = 'mrc'"]),
    (doc(transport={"name": "gloo", "dblp": {"tolerance": 0.1}}),
     ["transport.dblp", "gloo has no bounded loss"]),
    (doc(transport={"name": "dblp", "collective": "ring"}),
     ["transport.collective = 'ring'", "'transpose'"]),
    (doc(transport={"name": "gloo", "collective": "transpose"}),
     ["transport.collective = 'transpose'", "'ring'"]),
    (doc(transport={"collective": "hierarchical"}),
     ["transport.collective = 'hierarchical'", "fabric.dcs > 1"]),
    (doc(fabric__dcs=2, transport={"collective": "hierarchical"},
         workload__hosts=["h0", "h1", "h2", "h3"]),
     ["transport.collective = 'hierarchical'", "at least two DCs"]),
    (doc(transport={"name": "dblp", "dblp": {"policy": "fixed", "window": 5}}),
     ["transport.dblp.window = 5", "not allowed with policy = 'fixed'"]),
    (doc(transport={"name": "dblp", "dblp": {"tolerance": 0.1}}),
     ["transport.dblp.tolerance", "not allowed with policy = 'phase_aware'"]),
    (doc(transport={"name": "dblp", "dblp": {"margin_ms": 2}}),
     ["transport.dblp.margin_ms", "optireduce"]),
    (doc(workload__batch_size=30), ["workload.batch_size = 30", "divisible by workload.workers"]),
    (doc(workload__kind="pipeline", workload__workers=2, workload__batch_size=30),
     ["workload.batch_size = 30", "divisible by workload.microbatches (4)"]),
    (doc(workload__kind="pipeline", workload__workers=1),
     ["workload.workers = 1", "at least 2 for a pipeline"]),
    (doc(workload__kind="pipeline", workload__workers=2, transport__name="gloo"),
     ["transport.name = 'gloo'", "pipelines"]),
    (doc(workload__kind="pipeline", workload__workers=2, transport__collective="ring"),
     ["transport.collective", "pipeline"]),
    (doc(workload__microbatches=2), ["workload.microbatches", "pipelines only"]),
    (doc(transport={"name": "dblp", "dblp": {"accuracy_gain": 0.07}}),
     ["transport.dblp.accuracy_gain", "no accuracy signal"]),
    (doc(fabric={"dcs": 2, "planes": 2, "spines": 2, "leaves": 2, "hosts_per_leaf": 2},
         transport__collective="hierarchical", workload__workers=3, workload__batch_size=63),
     ["transport.collective = 'hierarchical'", "same number of workers in every DC"]),
    (doc(fabric={"dcs": 2, "planes": 2, "spines": 2, "leaves": 2, "hosts_per_leaf": 1},
         transport__name="rc"), ["transport.name = 'rc'", "single-DC"]),
    (doc(workload__kind="pipeline", workload__workers=4),
     ["workload.workers = 4", "at most 3 for a pipeline of digits_cnn"]),
    (doc(transport={"name": "dblp", "dblp": {"fill": "previous"}}),
     ["transport.dblp.fill = 'previous'", "'zeros', 'error_feedback'"]),
    (doc(workload__target_loss=2.0), ["workload.target_loss", "digits_cnn"]),
    (doc(workload__model="tiny_lm", workload__target_accuracy=0.9),
     ["workload.target_accuracy", "tiny_lm"]),
    (doc(workload__compute_ms=20.0), ["workload.compute_ms", "measured"]),
    (doc(workload__hosts=["h0", "h1"]), ["workload.hosts", "2 hosts for workload.workers = 4"]),
    (doc(workload__hosts=["h0", "h1", "h2", "h9"]), ["workload.hosts", "'h9' is not a host"]),
    (doc(workload__hosts=["h0", "h1", "h2", "p0l0"]), ["workload.hosts", "'p0l0'"]),
    (doc(workload__hosts=["h0", "h1", "h1", "h2"]), ["workload.hosts", "more than once"]),
    (doc(fabric__dcs=2, fabric__control_plane="bgp"), ["fabric.control_plane", "static"]),
    (doc(timeline="x.py", event=[{"at": 1.0, "do": "fail_plane", "plane": 0}]),
     ["timeline", "together with [[event]]"]),
    (doc(timeline="no/such/file.py"), ["timeline = 'no/such/file.py'", "no such file"]),
    (doc(fabric__spines=64, fabric__hosts_per_leaf=64, workload__workers=2),
     ["[fabric]", "leaf_ports"]),
])
def test_bad_input_names_the_key(data, needles):
    fails(data, *needles)


@pytest.mark.parametrize("events, needles", [
    ([{"at": 1.0, "do": "fail_link", "link": "p0l0-p0s7"}],
     ["[[event]]: event[0] (link_down)", "p0l0-p0s7", "valid names are"]),
    ([{"at": 1.0, "do": "fail_switch", "switch": "p0s9"}], ["event[0] (switch_down)", "p0s9"]),
    ([{"at": 1.0, "do": "fail_plane", "plane": 2}], ["plane=2"]),
    ([{"at": 1.0, "do": "explode"}], ["event[0].do = 'explode'", "fail_link"]),
    ([{"at": 1.0, "do": "restore", "what": "fail_link", "link": "p0l0-p0s1"}],
     ["not active"]),
    ([{"at": 2.0, "do": "fail_link", "link": "p0l0-p0s1"},
      {"at": 1.0, "do": "restore", "what": "fail_link", "link": "p0l0-p0s1"}],
     ["out of order"]),
    ([{"at": 1.0, "do": "gray_link", "link": "p0l0-p0s1", "loss": 1.5}], ["loss=1.5"]),
    ([{"at": 1.0, "do": "microburst", "target": "p0l1:h2", "sources": ["h9"], "on_ms": 10,
       "every_ms": 100}], ["h9"]),
    ([{"at": 1.0, "do": "microburst", "target": "p0l1:h2", "sources": ["h0"], "on_ms": 10,
       "every_ms": 5}], ["every_ms"]),
    ([{"at": 1.0, "do": "delay_link", "link": "p0l0-p0s1", "delay_ms": 5.0}],
     ["DCI links"]),
])
def test_bad_timeline_fails_at_load(events, needles):
    fails(doc(event=events), *needles)


def test_timeline_file_errors_name_the_file(tmp_path):
    t = tmp_path / "cut.toml"
    t.write_text('[[event]]\nat = 1.0\ndo = "fail_link"\nlink = "p9l0-p0s1"\n')
    e = tmp_path / "exp.toml"
    e.write_text('name = "x"\ntimeline = "cut.toml"\n[fabric]\nspines = 2\nleaves = 2\n'
                 'hosts_per_leaf = 2\n[workload]\nmodel = "digits_cnn"\nworkers = 2\n'
                 'steps = 1\n')
    with pytest.raises(EmuError, match=re.escape(f"{e}: timeline = 'cut.toml'") + ".*p9l0"):
        ex.load(e)
    t.write_text('[[event]]\nat = 1.0\ndo = "fail_link"\nlink = "p0l0-p0s1"\n')
    exp = ex.load(e)  # found next to the experiment file, not in the working directory
    assert exp.timeline_file == str(t) and len(exp.events) == 1


def test_load_rejects_bad_files(tmp_path):
    with pytest.raises(EmuError, match="does not exist"):
        ex.load(tmp_path / "none.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("name = \n")
    with pytest.raises(EmuError, match="bad.toml: not valid TOML"):
        ex.load(bad)


def test_inline_and_file_timelines_agree(tmp_path):
    events = [{"at": 1.0, "do": "fail_link", "link": "p0l0-p0s1"},
              {"at": 2.5, "do": "restore", "what": "fail_link", "link": "p0l0-p0s1"}]
    inline = ex.parse(doc(event=events))
    f = tmp_path / "t.py"
    f.write_text('c = fail_link("p0l0-p0s1")\ntimeline = [at(1.0, c), at(2.5, restore(c))]\n')
    from_file = ex.parse(doc(timeline=str(f)))
    assert inline.events == from_file.events


# --- overrides ---------------------------------------------------------------------------


def test_overrides_are_validated_like_files():
    exp = ex.load(EXAMPLES / "digits_dblp_bursts.toml")
    rc = ex.with_overrides(exp, {"transport.name": "rc", "transport.dblp": None,
                                 "transport.collective": None, "workload.steps": 20})
    assert rc.transport == ex.TransportConfig(name="rc", collective="ring")
    assert rc.workload.steps == 20 and rc.events == exp.events
    assert exp.transport.name == "dblp"  # the original is untouched
    assert rc.source == exp.source and rc.overrides["workload.steps"] == 20
    assert rc.as_record()["overrides"]["transport.dblp"] is None
    with pytest.raises(EmuError, match=r"with overrides transport\.name\): transport\.dblp"):
        ex.with_overrides(exp, {"transport.name": "rc"})
    with pytest.raises(EmuError, match=r"workload\.steps = 0"):
        ex.with_overrides(exp, {"workload.steps": 0})
    with pytest.raises(EmuError, match="unknown key 'workload.stepz'"):
        ex.with_overrides(exp, {"workload.stepz": 3})
    with pytest.raises(EmuError, match="name is a string, not a table"):
        ex.with_overrides(exp, {"name.x": 3})


def test_overrides_keep_relative_timeline_files():
    exp = ex.load(EXAMPLES / "digits_mrc_linkcut.toml")
    again = ex.with_overrides(exp, {"seed": 5})
    assert again.seed == 5 and again.events == exp.events


def test_parse_override():
    assert ex.parse_override("workload.steps=50") == ("workload.steps", 50)
    assert ex.parse_override("transport.name = rc") == ("transport.name", "rc")
    assert ex.parse_override('workload.hosts=["h0", "h3"]') == ("workload.hosts", ["h0", "h3"])
    assert ex.parse_override("transport.dblp.lr_scaling=false") == (
        "transport.dblp.lr_scaling", False)
    with pytest.raises(EmuError, match="KEY=VALUE"):
        ex.parse_override("workload.steps")


# --- scheduling by step, the clock, overruns ------------------------------------------------

CUT = {"do": "fail_link", "link": "p0l0-p0s1"}
UNCUT = {"do": "restore", "what": "fail_link", "link": "p0l0-p0s1"}


def test_events_by_step():
    exp = ex.parse(doc(event=[{"at_step": 3, **CUT}, {"at_step": 8, **UNCUT}]))
    assert [(ev.at, ev.step) for ev in exp.events] == [(None, 3), (None, 8)]
    assert exp.timeline().by_step and exp.clock == "wall"
    rec = exp.as_record()
    assert rec["events"][0]["at_step"] == 3 and "at" not in rec["events"][0]
    assert rec["clock"] == "wall"
    json.dumps(rec)


@pytest.mark.parametrize("events, needles", [
    ([{"at_step": -1, **CUT}], ["event[0].at_step = -1 is invalid", "integer >= 0"]),
    ([{"at_step": 2.0, **CUT}], ["event[0].at_step = 2.0 is invalid"]),
    ([{"at_step": True, **CUT}], ["event[0].at_step = True is invalid"]),
    # workload.steps = 10: boundaries after steps 0 .. 8
    ([{"at_step": 9, **CUT}], ["event[0].at_step = 9 is invalid", "[0, 8]",
                               "workload.steps = 10"]),
    ([{"at_step": 2, **CUT}, {"at_step": 12, **UNCUT}], ["event[1].at_step = 12 is invalid"]),
    ([{"at_step": 2, "at": 1.0, **CUT}],
     ["event[0].at_step is not allowed together with event[0].at"]),
    ([{"at_step": 2, **CUT}, {"at": 5.0, **UNCUT}], ["cannot be mixed"]),
    ([{"at_step": 5, **CUT}, {"at_step": 2, **UNCUT}], ["out of order", "by step"]),
    ([{"at_step": 2, **CUT}, {"at_step": 4, **CUT}], ["already active since step 2"]),
])
def test_bad_steps_name_the_key(events, needles):
    fails(doc(event=events), *needles)


def test_at_step_is_checked_again_when_steps_change():
    exp = ex.parse(doc(event=[{"at_step": 7, **CUT}]))
    with pytest.raises(EmuError, match=r"event\[0\]\.at_step = 7 is invalid.*\[0, 3\]"):
        ex.with_overrides(exp, {"workload.steps": 5})
    with pytest.raises(EmuError, match="a run of 1 step has no boundary"):
        ex.with_overrides(exp, {"workload.steps": 1})


def test_at_step_in_a_timeline_file_is_checked_against_the_steps(tmp_path):
    f = tmp_path / "t.py"
    f.write_text('c = fail_link("p0l0-p0s1")\ntimeline = [at_step(2, c), '
                 'at_step(20, restore(c))]\n')
    with pytest.raises(EmuError) as info:
        ex.parse(doc(timeline=str(f)), "exp.toml")
    msg = str(info.value)
    assert msg.startswith("exp.toml: timeline = ") and "at_step=20 is invalid" in msg
    assert "[0, 8]" in msg
    exp = ex.parse(doc(timeline=str(f), workload__steps=30))
    assert [ev.step for ev in exp.events] == [2, 20]


def test_clock_key():
    exp = ex.parse(doc(clock="modelled", event=[{"at": 0.5, **CUT}, {"at": 1.0, **UNCUT}]))
    assert exp.clock == "modelled" and exp.as_record()["clock"] == "modelled"
    fails(doc(clock="hours"), "clock = 'hours' is invalid", "'wall', 'modelled'")
    fails(doc(clock="modelled", event=[{"at_step": 1, **CUT}]),
          "clock = 'modelled' is invalid", "at_step")


def test_allow_overruns_key():
    exp = ex.parse(doc(workload__compute="modelled", workload__allow_overruns=True))
    assert exp.workload.allow_overruns is True
    assert ex.parse(doc(workload__compute="modelled")).workload.allow_overruns is False
    fails(doc(workload__allow_overruns=True), "workload.allow_overruns",
          "not allowed with compute = 'measured'")
    fails(doc(workload__compute="modelled", workload__allow_overruns=1),
          "workload.allow_overruns = 1", "true or false")
