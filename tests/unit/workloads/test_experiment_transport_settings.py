"""An experiment file sets any parameter of its transport in ``[transport.<name>]``,
validated by the transport's settings dataclass (transports/registry.py), and the settings
reach every worker's typed record (no root)."""

from __future__ import annotations

import copy
import dataclasses
import re

import pytest

from emu.errors import EmuError
from transports import registry
from transports.core.dblp.config import DblpCoreConfig
from transports.core.mrc import MrcConfig
from transports.core.rc import RcConfig
from transports.kernel import GlooConfig
from workloads import experiment as ex
from workloads.recordcodec import decode, encode
from workloads.training.rank_configs import worker_configs

BASE = {
    "name": "t",
    "fabric": {"planes": 2, "spines": 2, "leaves": 2, "hosts_per_leaf": 2},
    "workload": {"model": "digits_cnn", "workers": 4, "steps": 10},
}


def doc(transport: dict) -> dict:
    d = copy.deepcopy(BASE)
    d["transport"] = transport
    return d


def test_without_a_table_a_transport_runs_with_its_run_defaults():
    for name, cls in (("mrc", MrcConfig), ("rc", RcConfig), ("dblp", DblpCoreConfig),
                      ("gloo", GlooConfig)):
        policy = {"dblp": {"policy": "fixed", "tolerance": 0.5}} if name == "dblp" else {}
        exp = ex.parse(doc({"name": name, **policy}))
        assert type(exp.transport.settings) is cls
        assert exp.transport.settings == registry.get(name).defaults
    assert ex.parse(doc({"name": "mrc"})).transport.settings.rto_max == 2.0  # not the core's


def test_the_transports_table_sets_any_of_its_parameters_nested_ones_too():
    exp = ex.parse(doc({"name": "mrc", "mrc": {"rto_max": 1, "selector": "bitmap",
                                               "nscc": {"eta": 0.2}}}))
    s = exp.transport.settings
    runs = registry.get("mrc").defaults
    # a nested key is set over the run defaults' nested settings (NSCC's tick floor kept)
    assert s == dataclasses.replace(runs, rto_max=1.0, selector="bitmap",
                                    nscc=dataclasses.replace(runs.nscc, eta=0.2))
    assert s.nscc.target_min == 1e-3
    assert isinstance(s.rto_max, float)  # a TOML integer is a number here
    cfgs = worker_configs(exp, seed=1, compute_ms=None)
    assert all(c.transport_config == s for c in cfgs)
    back = decode(encode(cfgs[0]))
    assert back.transport_config == s and type(back.transport_config) is MrcConfig
    assert exp.as_record()["transport"]["settings"]["nscc"]["eta"] == 0.2


def test_dblps_table_holds_its_tolerance_policy_and_its_settings():
    exp = ex.parse(doc({"name": "dblp", "dblp": {"policy": "fixed", "tolerance": 0.5,
                                                 "rto_max": 0.5, "linger_s": 0.001}}))
    t = exp.transport
    assert t.dblp is not None and t.dblp.tolerance == 0.5
    assert t.settings == dataclasses.replace(registry.get("dblp").defaults, rto_max=0.5,
                                             linger_s=0.001)
    # the blocks' chunks are its packets: smaller ones let a smaller tolerance drop one
    small = {"name": "dblp", "dblp": {"policy": "fixed", "tolerance": 0.2}}
    with pytest.raises(EmuError, match="chunks of at most 1985 B"):
        ex.parse(doc(small))
    small["dblp"]["mtu_payload"] = 1985
    assert ex.parse(doc(small)).transport.settings.mtu_payload == 1985


def test_an_override_sets_a_transport_parameter():
    exp = ex.parse(doc({"name": "rc"}))
    rc = ex.with_overrides(exp, {"transport.rc.window_pkts": 16, "transport.rc.aimd": False})
    assert rc.transport.settings == dataclasses.replace(registry.get("rc").defaults,
                                                        window_pkts=16, aimd=False)


@pytest.mark.parametrize("transport, needles", [
    ({"name": "mrc", "mrc": {"rto_maxx": 1.0}},
     ["unknown key 'transport.mrc.rto_maxx' in [transport.mrc]", "valid keys: mtu_payload",
      "rto_max", "nscc"]),
    ({"name": "mrc", "mrc": {"nscc": {"etta": 0.1}}},
     ["unknown key 'transport.mrc.nscc.etta' in [transport.mrc.nscc]", "valid keys: base_rtt",
      "eta"]),
    ({"name": "mrc", "mrc": {"rto_max": -1}},
     ["transport.mrc.rto_max = -1 is invalid", "a finite number > 0"]),
    ({"name": "mrc", "mrc": {"selector": "random"}},
     ["transport.mrc.selector = 'random' is invalid", "'oblivious', 'bitmap', 'reps'"]),
    ({"name": "mrc", "mrc": {"nscc": {"max_md_jump": 1.0}}},
     ["transport.mrc.nscc.max_md_jump = 1.0 is invalid", "(0, 1)"]),
    ({"name": "mrc", "mrc": {"nscc": 3}}, ["transport.mrc.nscc = 3", "a table"]),
    ({"name": "mrc", "mrc": {"mtu_payload": 9000}},
     ["transport.mrc.mtu_payload = 9000 is invalid", "an integer in [1, 8840]"]),
    ({"name": "rc", "rc": {"rto_min": 2.0, "rto_max": 1.0}},
     ["[transport.rc]", "rto_min <= rto_max", "rto_min=2.0"]),
    ({"name": "rc", "rc": {"aimd": "yes"}}, ["transport.rc.aimd = 'yes'", "true or false"]),
    ({"name": "dblp", "dblp": {"policy": "fixed", "tolerance": 0.5, "use_crc": False}},
     ["[transport.dblp]", "use_crc"]),
    ({"name": "dblp", "dblp": {"lingers": 1}},
     ["'transport.dblp.lingers'", "policy", "linger_s"]),
    ({"name": "gloo", "gloo": {"timeout": 1}}, ["'transport.gloo.timeout'", "valid keys"]),
    ({"name": "mrc", "rc": {"aimd": True}},
     ["transport.rc", "not allowed with transport.name = 'mrc'", "for rc only"]),
])
def test_a_bad_parameter_is_named_with_what_is_valid(transport, needles):
    with pytest.raises(EmuError) as info:
        ex.parse(doc(transport), "exp.toml")
    msg = str(info.value)
    assert msg.startswith("exp.toml: ")
    for needle in needles:
        assert needle in msg, (needle, msg)


def test_every_capability_rule_reads_the_registry():
    # RC is the one transport that cannot cross DCs; the error lists those that can
    two_dc = copy.deepcopy(BASE)
    two_dc["fabric"]["dcs"] = 2
    two_dc["transport"] = {"name": "rc"}
    with pytest.raises(EmuError, match=re.escape("use mrc, dblp or gloo across DCs")):
        ex.parse(two_dc)
    names = registry.names(lambda t: t.caps.training)
    assert ex.TRANSPORTS == names == ("mrc", "rc", "dblp", "gloo")
