"""A driver's plan as typed records (transports/planrecord.py): JSON round trips, and
decoding that refuses unknown keys, missing ones and wrong types, naming them."""

import json
from dataclasses import replace

import pytest

from topologies import MultiPlaneClos
from transports import registry
from transports.core.bound import LossBound
from transports.core.dblp.config import DblpCoreConfig
from transports.kernel import TcpConfig
from transports.planrecord import (
    ConnPlan,
    EnginePlan,
    HostPlan,
    MessagePlan,
    StreamPlan,
    decode_plan,
)
from transports.testing.harness import Transfer, engine_plans, plan_transfers
from transports.testing.soak import DEFAULT_STREAMS, stream_plans

SPEC = MultiPlaneClos(planes=2, spines=2, leaves=2, hosts_per_leaf=2)

CONN = ConnPlan(conn=3, peer="h2", peer_addr="fd00::2", paths=(("fd01::1",), ("fd02::1",)),
                nics=(0, 1))
QP = ConnPlan(conn=4, peer="h2", peer_addr="fd00:1::2", src_addr="fd00:1::1", sport=49156)
SEND = MessagePlan(conn=3, msg=7, size=1000, seed=11, after=(5, 6),
                   bound=LossBound(tolerance=0.1, deadline_s=0.5))
STREAM = StreamPlan(conn=3, kind="send", size=4096, msg0=1, seeds=(1, 2, 3), window=2,
                    bound=LossBound(tolerance=0.05), until_s=30.0)
HOST = HostPlan(host="h0", addr="fd00::1", transport="dblp",
                config=DblpCoreConfig(rto_max=2.0, ack_every=16), seed=3, deadline_s=20.0,
                conns=(CONN,), sends=(SEND,), recvs=(replace(SEND, msg=8, after=()),),
                streams=(STREAM, replace(STREAM, kind="recv", until_s=None)),
                timeline_s=1.0, tick_s=0.002)
ENGINE = EnginePlan(engine=1, hosts=(HOST, replace(HOST, host="h1", addr="fd00::3")),
                    netns={"h0": "/run/netns/a", "h1": "/run/netns/b"}, tick_s=0.001)


def wire(rec):
    """``rec`` as a driver reads it: its dict through JSON text."""
    return json.loads(json.dumps(rec.to_dict()))


@pytest.mark.parametrize("rec", [CONN, QP, ConnPlan(conn=1, peer="h1", peer_addr="::1"),
                                 SEND, MessagePlan(conn=1, msg=1, size=0, seed=0),
                                 STREAM, replace(STREAM, kind="recv", until_s=None),
                                 HOST, ENGINE])
def test_every_record_round_trips_through_json(rec):
    back = type(rec).from_dict(wire(rec))
    assert back == rec and type(back) is type(rec)


def test_decode_plan_tells_an_engine_from_a_host():
    assert decode_plan(wire(ENGINE)) == ENGINE
    host = decode_plan(wire(HOST))
    assert host == HOST and isinstance(host, HostPlan)
    assert type(host.config) is DblpCoreConfig and host.config.ack_every == 16
    assert host.sends[0].bound == LossBound(tolerance=0.1, deadline_s=0.5)


def test_config_travels_as_the_fields_that_differ_from_the_class_defaults():
    d = HOST.to_dict()
    assert d["config"] == registry.get("dblp").plan_config(HOST.config)
    assert d["config"] == {"rto_max": 2.0, "ack_every": 16}
    no_config = {k: v for k, v in d.items() if k != "config"}
    assert HostPlan.from_dict(no_config).config == DblpCoreConfig()


@pytest.mark.parametrize("cls, data, needle", [
    (ConnPlan, {**CONN.to_dict(), "peers": "h3"}, r"ConnPlan: unknown keys \['peers'\]"),
    (ConnPlan, {"conn": 1, "peer": "h1"}, r"required keys \['peer_addr'\] missing"),
    (ConnPlan, {**CONN.to_dict(), "conn": "3"}, r"ConnPlan.conn = '3': must be int"),
    (ConnPlan, {**CONN.to_dict(), "paths": [["fd01::1"], [7]]},
     r"ConnPlan.paths\[1\]\[0\] = 7: must be str"),
    (ConnPlan, {**CONN.to_dict(), "nics": [0]}, "1 nics for 2 paths"),
    (MessagePlan, {**SEND.to_dict(), "after": 5}, r"MessagePlan.after = 5: must be an array"),
    (MessagePlan, {**SEND.to_dict(), "size": True}, r"MessagePlan.size = True: must be int"),
    (MessagePlan, {**SEND.to_dict(), "bound": {"tolerance": 2.0, "deadline_s": None}},
     r"tolerance=2.0 must be a number in \[0, 1\)"),
    (MessagePlan, {**SEND.to_dict(), "bound": {"tol": 0.1}},
     r"MessagePlan.bound: unknown keys \['tol'\]"),
    (StreamPlan, {**STREAM.to_dict(), "kind": "both"}, r"kind='both' must be one of"),
    (StreamPlan, {**STREAM.to_dict(), "until_s": None}, "a send stream needs until_s"),
    (StreamPlan, {**STREAM.to_dict(), "seeds": []}, "at least one seed"),
    (HostPlan, {**HOST.to_dict(), "transport": "udp"},
     r"transport='udp' is invalid: a transport is one of 'mrc', 'rc', 'dblp'"),
    (HostPlan, {**HOST.to_dict(), "config": {"rto_maxx": 1}},
     r"HostPlan.config: .*rto_maxx.*"),
    (HostPlan, {**HOST.to_dict(), "config": {"rto_max": "fast"}}, r"HostPlan.config: .*rto_max"),
    (HostPlan, {**HOST.to_dict(), "deadline_s": "60"},
     r"HostPlan.deadline_s = '60': must be float"),
    (HostPlan, {k: v for k, v in HOST.to_dict().items() if k != "conns"},
     r"required keys \['conns'\] missing"),
    (HostPlan, {**HOST.to_dict(), "conns": [{"conn": 1}]},
     r"HostPlan.conns\[0\]: required keys \['peer', 'peer_addr'\] missing"),
    (HostPlan, {**HOST.to_dict(), "sends": [{**SEND.to_dict(), "msg": 1.5}]},
     r"HostPlan.sends\[0\].msg = 1.5: must be int"),
    (HostPlan, [HOST.to_dict()], "HostPlan: must be an object, not list"),
    (EnginePlan, {**ENGINE.to_dict(), "hosts": []}, "at least one host"),
    (EnginePlan, {**ENGINE.to_dict(), "netns": {"h9": "/run/netns/x"}},
     r"netns names \['h9'\], not hosts"),
    (EnginePlan, {**ENGINE.to_dict(), "hosts": [{**HOST.to_dict(), "addr": None}]},
     r"EnginePlan.hosts\[0\].addr = None: must be str"),
])
def test_from_dict_names_the_bad_key_or_value(cls, data, needle):
    with pytest.raises(ValueError, match=needle):
        cls.from_dict(json.loads(json.dumps(data)))


def test_config_must_be_its_transports_settings():
    with pytest.raises(ValueError, match="transport 'dblp' takes a DblpCoreConfig"):
        replace(HOST, config=TcpConfig())


class FakeFabric:
    def netns(self, host: str) -> str:
        return f"sae-{host}"


@pytest.mark.parametrize("transport", ["mrc", "rc", "dblp"])
def test_engine_plans_of_planned_transfers_decode_as_built(transport):
    transfers = [Transfer("h0", "h2", 100_001), Transfer("h3", "h1", 5000, after=0),
                 Transfer("h1", "h0", 7, bound={"tolerance": 0.2} if transport == "dblp"
                          else None)]
    plans, parts = plan_transfers(SPEC, transport, transfers, deadline_s=9.0, seed=2)
    eplans = engine_plans(FakeFabric(), plans, 2, tick_s=0.004)  # type: ignore[arg-type]
    assert [len(e.hosts) for e in eplans] == [2, 2]
    for ep in eplans:
        back = decode_plan(wire(ep))
        assert back == ep and isinstance(back, EnginePlan)
        assert set(back.netns) == {h.host for h in back.hosts}
        assert all(h.config == registry.get(transport).defaults for h in back.hosts)
    h1 = plans["h1"]
    assert h1.recvs[0].after == tuple(parts[0])  # every lane of transfer 0
    if transport == "dblp":
        assert h1.sends[0].bound == LossBound(tolerance=0.2)


def test_soak_and_tcp_plans_decode_as_built():
    for plan in stream_plans(SPEC, DEFAULT_STREAMS, 10.0).values():
        assert decode_plan(wire(plan)) == plan
    plans, _ = plan_transfers(SPEC, "tcp", [Transfer("h0", "h2", 10)],
                              config={"cc": "reno", "port": 5000})
    back = decode_plan(wire(plans["h0"]))
    assert back == plans["h0"] and back.config == TcpConfig(cc="reno", port=5000)
