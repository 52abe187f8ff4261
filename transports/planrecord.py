"""A transfer driver's plan as typed records: one frozen dataclass per kind of entry.

The plan crosses from the harness (transports/testing/harness.py, soak.py) to the driver
processes (transports/io/driver.py) as JSON; a connection's entry (:class:`ConnPlan`, made
by transports/plan.py ``conn_spec``) also reaches a training worker's endpoint
(transports/io/endpoint.py, through workloads/records.py ``WorkerConfig.conns``).
Producers build these records; the wire is their ``to_dict()``; a consumer decodes once,
at its entry, with ``from_dict()`` (a driver's stdin: :func:`decode_plan`), which refuses
an unknown key, a missing required one or a value of the wrong type with a ValueError
naming it and what is valid. Past the entry only attributes are read: nothing on a
packet's path decodes anything.

:class:`HostPlan`
    one host's plan: its connections, messages (``sends``, ``recvs``) and streams.
:class:`EnginePlan`
    an engine process serving many hosts: their plans and namespace files.
:class:`ConnPlan`
    one host's end of a connection: the peer, and the paths (MRC, DBLP: SRv6 transit
    segments and the NIC of each) or the QP's addresses and source port (RC).
:class:`MessagePlan`
    one message to send or receive: its bytes come from ``seed`` on both ends.
:class:`StreamPlan`
    messages kept in flight on a connection (soak runs; transports/io/streams.py).

A DBLP message's loss bound is transports/core/bound.py's ``LossBound``; a host's
``config`` is its transport's settings (transports/registry.py), written on the wire as
the fields that differ from the settings class's defaults (``plan_config``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from emu.typedjson import build as _build
from emu.typedjson import fields as _fields
from emu.typedjson import obj as _obj
from transports import registry
from transports.core.bound import LossBound
from transports.core.knobs import settings_from
from transports.registry import TransportSettings

__all__ = ["TIMELINE_S", "ConnPlan", "EnginePlan", "HostPlan", "MessagePlan", "StreamPlan",
           "decode_plan"]

TIMELINE_S = 0.01  # a host's goodput timeline: its default sampling period
STREAM_KINDS = ("send", "recv")


@dataclass(frozen=True, kw_only=True)
class ConnPlan:
    """Host ``src_addr``'s end of connection ``conn`` to ``peer`` at ``peer_addr``.

    ``paths``: the transit segments of each SRv6 path (EV) to the peer, ``nics``: the NIC
    (plane) each leaves by (MRC, DBLP); empty: one path the fabric picks. ``src_addr``
    and ``sport``: the QP's source address and fixed source port (RC; None and 0: the
    host's address, any port).
    """

    conn: int
    peer: str
    peer_addr: str
    paths: tuple[tuple[str, ...], ...] = ()
    nics: tuple[int, ...] | None = None
    src_addr: str | None = None
    sport: int = 0

    def __post_init__(self) -> None:
        if self.nics is not None and len(self.nics) != len(self.paths):
            raise ValueError(f"ConnPlan {self.conn}: {len(self.nics)} nics for "
                             f"{len(self.paths)} paths (one NIC per path)")

    @property
    def evs(self) -> int:
        """Its paths (EVs): one when the fabric picks the path."""
        return max(1, len(self.paths))

    def to_dict(self) -> dict[str, Any]:
        return _fields(self)

    @classmethod
    def from_dict(cls, data: object, where: str = "ConnPlan") -> ConnPlan:
        return _build(cls, data, where)


@dataclass(frozen=True, kw_only=True)
class MessagePlan:
    """Message ``msg`` of ``size`` bytes on connection ``conn``, its bytes made from
    ``seed`` (transports/plan.py ``message_bytes``). ``after``: the messages whose
    completion it waits for before it is posted (none: at the start); ``bound``: a DBLP
    round's loss bound."""

    conn: int
    msg: int
    size: int
    seed: int
    after: tuple[int, ...] = ()
    bound: LossBound | None = None

    def __post_init__(self) -> None:
        if self.size < 0:
            raise ValueError(f"MessagePlan {self.msg}: size={self.size!r} must be >= 0")

    def to_dict(self) -> dict[str, Any]:
        return _fields(self)

    @classmethod
    def from_dict(cls, data: object, where: str = "MessagePlan") -> MessagePlan:
        return _build(cls, data, where)


@dataclass(frozen=True, kw_only=True)
class StreamPlan:
    """``window`` messages of ``size`` bytes kept in flight on ``conn``, ids ``msg0``,
    ``msg0 + 1``, ...; message k carries the bytes of ``seeds[k % len(seeds)]``. A
    ``send`` stream posts no message after ``until_s`` from the start (required); a
    ``recv`` stream keeps receives posted until the driver's stdin ends."""

    conn: int
    kind: str
    size: int
    msg0: int
    seeds: tuple[int, ...]
    window: int = 1
    bound: LossBound | None = None
    until_s: float | None = None

    def __post_init__(self) -> None:
        where = f"StreamPlan ({self.conn}, {self.kind!r})"
        if self.kind not in STREAM_KINDS:
            raise ValueError(f"{where}: kind={self.kind!r} must be one of {STREAM_KINDS}")
        if self.kind == "send" and self.until_s is None:
            raise ValueError(f"{where}: a send stream needs until_s (seconds from the start)")
        if not self.seeds or self.size <= 0 or self.window < 1:
            raise ValueError(f"{where}: seeds={list(self.seeds)}, size={self.size}, "
                             f"window={self.window}: at least one seed, size > 0 and "
                             "window >= 1 required")

    def to_dict(self) -> dict[str, Any]:
        return _fields(self)

    @classmethod
    def from_dict(cls, data: object, where: str = "StreamPlan") -> StreamPlan:
        return _build(cls, data, where)


@dataclass(frozen=True, kw_only=True)
class HostPlan:
    """One host's plan: what its driver (or its share of an engine) runs.

    ``addr``: the host's address; ``config``: its transport's settings (the class of
    ``registry.get(transport).config``); ``seed``: its cores' seeds (connection c's core
    gets ``seed * 1000 + c``); ``deadline_s``: how long it runs at most from the start;
    ``timeline_s``: the goodput timeline's sampling period; ``tick_s``: the engine's
    wake-up tick of a single-host driver (None: transports/io/tick.py's).
    """

    host: str
    addr: str
    transport: str
    config: TransportSettings
    seed: int = 0
    deadline_s: float = 60.0
    conns: tuple[ConnPlan, ...]
    sends: tuple[MessagePlan, ...] = ()
    recvs: tuple[MessagePlan, ...] = ()
    streams: tuple[StreamPlan, ...] = ()
    timeline_s: float = TIMELINE_S
    tick_s: float | None = None

    def __post_init__(self) -> None:
        want = registry.get(self.transport).config
        if type(self.config) is not want:
            raise ValueError(f"HostPlan {self.host}: config is a {type(self.config).__name__}: "
                             f"transport {self.transport!r} takes a {want.__name__}")

    def to_dict(self) -> dict[str, Any]:
        out = _fields(self)
        out["config"] = registry.get(self.transport).plan_config(self.config)
        return out

    @classmethod
    def from_dict(cls, data: object, where: str = "HostPlan") -> HostPlan:
        obj = _obj(data, where)
        transport = obj.get("transport")
        if not isinstance(transport, str):
            raise ValueError(f"{where}.transport = {transport!r}: must be one of "
                             f"{', '.join(registry.names())}")
        try:
            decl = registry.get(transport)
        except registry.UnknownTransport as e:
            raise ValueError(f"{where}: {e}") from None
        raw = obj.get("config", {})
        if not isinstance(raw, Mapping):
            raise ValueError(f"{where}.config = {raw!r}: must be an object of "
                             f"{decl.config.__name__} keys")
        try:
            config = settings_from(decl.config(), raw)
        except ValueError as e:  # UnknownKey, InvalidValue: name the key and what is valid
            raise ValueError(f"{where}.config: {e}") from None
        return _build(cls, {**obj, "config": config}, where, ready=("config",))


@dataclass(frozen=True, kw_only=True)
class EnginePlan:
    """Engine ``engine`` serving ``hosts``, each host's sockets made in the namespace
    file ``netns[host]`` (/run/netns/NAME; a host not named: the engine's own), waking at
    most every ``tick_s`` (None: transports/io/tick.py's)."""

    engine: int
    hosts: tuple[HostPlan, ...]
    netns: Mapping[str, str] = field(default_factory=dict)
    tick_s: float | None = None

    def __post_init__(self) -> None:
        if not self.hosts:
            raise ValueError(f"EnginePlan {self.engine}: an engine needs at least one host")
        names = [h.host for h in self.hosts]
        stray = sorted(set(self.netns) - set(names))
        if stray:
            raise ValueError(f"EnginePlan {self.engine}: netns names {stray}, not hosts of "
                             f"this engine ({names})")

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "hosts": [h.to_dict() for h in self.hosts],
                "netns": dict(self.netns), "tick_s": self.tick_s}

    @classmethod
    def from_dict(cls, data: object, where: str = "EnginePlan") -> EnginePlan:
        return _build(cls, data, where)


def decode_plan(data: object) -> HostPlan | EnginePlan:
    """A driver's plan as read from its stdin: an engine's (it has ``hosts``) or one
    host's; ValueError naming what is wrong."""
    if isinstance(data, Mapping) and "hosts" in data:
        return EnginePlan.from_dict(data)
    return HostPlan.from_dict(data)
