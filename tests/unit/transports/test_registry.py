"""The transport registry (transports/registry.py): every declaration is consistent, and
the settings of each are checked from its dataclass (transports/core/knobs.py)."""

import dataclasses
import re

import pytest

from topologies import MultiPlaneClos
from topologies.validate import InvalidValue
from transports import registry
from transports.core.knobs import UnknownKey, describe
from transports.core.mrc import MrcConfig, MrcCore
from transports.core.rc import RcConfig
from transports.io.tick import TICK_S
from transports.plan import DEFAULT_CONFIG, conn_spec
from transports.registry import TransportSettings

CORE_METHODS = ("post_send", "post_recv", "on_packet", "on_timer", "next_deadline",
                "completions", "set_host_delay")


@pytest.mark.parametrize("t", registry.REGISTRY, ids=lambda t: t.name)
def test_every_declaration_is_consistent(t):
    assert type(t.defaults) is t.config and dataclasses.is_dataclass(t.config)
    assert (t.core is None) == t.caps.kernel
    assert t.config in TransportSettings.__args__  # the worker's record can carry it
    assert t.from_plan(t.plan_config()) == t.defaults  # plan data builds the same settings
    assert t.settings() == t.defaults and t.keys() == tuple(
        f.name for f in dataclasses.fields(t.config))
    assert all(rule for _, _, rule in describe(t.defaults))  # every knob says what it takes
    if t.core is not None:
        core = registry.make_core(t.name, 3, 2, t.defaults, 1, [0, 1])
        assert core.conn == 3 and all(callable(getattr(core, m)) for m in CORE_METHODS)


def test_names_and_capabilities_replace_the_name_tests():
    assert registry.names() == ("mrc", "rc", "dblp", "tcp", "gloo")
    assert registry.names(lambda t: t.caps.training) == ("mrc", "rc", "dblp", "gloo")
    assert registry.names(lambda t: t.caps.transfers) == ("mrc", "rc", "dblp", "tcp")
    assert registry.names(lambda t: t.caps.bounded) == ("dblp",)
    assert registry.names(lambda t: t.caps.needs_srv6) == ("mrc", "dblp")
    assert registry.names(lambda t: not t.caps.cross_dc) == ("rc",)
    assert registry.get("rc").caps.reliable and not registry.get("dblp").caps.reliable


def test_an_unknown_name_lists_the_valid_ones():
    with pytest.raises(registry.UnknownTransport, match=re.escape(
            "transport='nccl' is invalid: a transport is one of 'mrc', 'rc', 'dblp'")):
        registry.get("nccl")
    with pytest.raises(registry.UnknownTransport, match="a transport with a userspace core"):
        registry.make_core("tcp", 1, 1, {}, 0)


def test_run_defaults_are_plan_data_and_settings_alike():
    # the batching loop's ACK policy, and room in the first RTO for the ticks an ACK waits
    batched = {"ack_wakeup": True, "ack_every": 16, "rto_init": 12e-3}
    # NSCC's delay target at least a tick (transports/io/tick.py)
    assert registry.get("mrc").defaults.nscc.target_min == TICK_S
    assert DEFAULT_CONFIG["mrc"] == DEFAULT_CONFIG["dblp"] == {
        "rto_max": 2.0, "nscc": {"target_min": TICK_S}, **batched}
    assert DEFAULT_CONFIG["rc"] == {"aimd": True, "rto_max": 2.0, **batched}
    assert DEFAULT_CONFIG["tcp"] == DEFAULT_CONFIG["gloo"] == {}
    mrc = registry.get("mrc")
    s = mrc.settings({"selector": "reps", "nscc": {"eta": 0.3}})
    assert mrc.plan_config(s) == {"selector": "reps", "rto_max": 2.0,
                                  "nscc": {"eta": 0.3, "target_min": TICK_S}, **batched}
    core = registry.make_core("mrc", 1, 4, mrc.plan_config(s), 0)
    assert isinstance(core, MrcCore) and core.cfg == s


def test_settings_errors_name_the_key_the_value_and_what_is_valid():
    mrc = registry.get("mrc")
    with pytest.raises(UnknownKey, match="unknown key 'rto_maxx'; valid keys: mtu_payload"):
        mrc.settings({"rto_maxx": 1})
    with pytest.raises(UnknownKey, match="unknown key 'nscc.etta'"):
        mrc.settings({"nscc": {"etta": 1}})
    with pytest.raises(InvalidValue, match=re.escape("nscc.eta=-1 is invalid: must be a "
                                                     "finite number >= 0")):
        mrc.settings({"nscc": {"eta": -1}})
    with pytest.raises(InvalidValue, match="window_pkts=0.5 is invalid: must be an integer"):
        registry.get("rc").settings({"window_pkts": 0.5})
    with pytest.raises(UnknownKey, match="none"):
        registry.get("gloo").settings({"timeout": 1})


@pytest.mark.parametrize("cls, bad, needle", [
    (MrcConfig, {"mtu_payload": 0}, "mtu_payload=0 is invalid: must be an integer in [1, "),
    (MrcConfig, {"selector": "random"}, "selector='random' is invalid: must be one of "),
    (MrcConfig, {"pto": 1}, "pto=1 is invalid: must be true or false"),
    (MrcConfig, {"probe_min": 1.0, "probe_max": 0.5}, "need probe_min <= probe_max"),
    (RcConfig, {"ack_every": 0}, "ack_every=0 is invalid: must be an integer >= 1"),
])
def test_a_settings_dataclass_checks_each_field_by_its_rule(cls, bad, needle):
    with pytest.raises(ValueError, match=re.escape(needle)):
        cls(**bad)
    assert isinstance(MrcConfig(rto_max=1).rto_max, float)  # an int for a float: a float


def test_the_connection_plan_follows_the_capabilities():
    spec = MultiPlaneClos(planes=2, spines=2, leaves=2, hosts_per_leaf=1)
    mrc = conn_spec(spec, "mrc", "h0", "h1", 1)
    assert mrc.nics is not None
    assert len(mrc.paths) == len(mrc.nics) == mrc.evs == 4  # every (plane, spine) path
    rc = conn_spec(spec, "rc", "h0", "h1", 2, lane=1)
    assert rc.paths == () and rc.evs == 1 and rc.sport == 49154
    assert rc.src_addr is not None and rc.src_addr != rc.peer_addr
    tcp = conn_spec(spec, "tcp", "h0", "h1", 3)
    assert (tcp.paths, tcp.nics, tcp.src_addr, tcp.sport) == ((), None, None, 0)
