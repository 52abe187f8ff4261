"""Every transport of the project, declared once: what every layer reads instead of its name.

    t = registry.get("mrc")                      # its declaration (an error lists the names)
    t.caps.multipath, t.caps.bounded             # what it can do: decide by that, not by name
    t.settings({"rto_max": 1.0})                 # its settings, checked (core/knobs.py)
    registry.names(lambda t: t.caps.training)    # the transports a training job may use
    registry.make_core("rc", conn, evs, settings, seed, nics)   # a connection's core

A declaration (``Transport``) holds the name, a one-line summary, the frozen dataclass of
its settings (each field a ``knob`` with its default and rule), the settings emulated runs
start from (``defaults``: the emulated links are ~1000x slower than real ones, so RTO caps
are raised to match), the factory of its sans-I/O core (None for the kernel's transports)
and its capabilities. Experiment files set any field of the settings in the transport's
own table (``[transport.<name>]``, workloads/experiment/tables.py); the settings reach the
drivers as plan data (``plan_config``) and the training workers in their typed record
(workloads/records.py ``WorkerConfig.transport_config``).

Adding a transport: one module (its core and settings), one ``Transport`` in
``REGISTRY`` below (and its settings class in ``TransportSettings``), and its tests: see
docs/howto/add-a-transport.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from transports.core.api import Core
from transports.core.cc import NsccConfig
from transports.core.dblp import DblpCore
from transports.core.dblp.config import DblpCoreConfig
from transports.core.knobs import settings_from
from transports.core.mrc import MrcConfig, MrcCore
from transports.core.rc import RcConfig, RcCore
from transports.kernel import GlooConfig, TcpConfig

__all__ = ["REGISTRY", "Capabilities", "Transport", "TransportSettings", "UnknownTransport",
           "get", "make_core", "names"]


@dataclass(frozen=True)
class Capabilities:
    """What a transport can do; layers above decide by these, never by a name."""

    bounded: bool = False  # per-message loss bounds: a message may complete with chunks missing
    multipath: bool = False  # sprays every message over all paths (EVs) of a host pair
    needs_srv6: bool = False  # its paths are SRv6 segment lists (one EV each)
    per_plane: bool = False  # one connection per plane, between per-plane addresses ...
    cross_dc: bool = True  # ... which only single-DC fabrics route (False: one DC only)
    kernel: bool = False  # the kernel's sockets carry it: no userspace core
    transfers: bool = True  # runs in the transfer driver (emu bench, reproduce, calibrate)
    training: bool = True  # carries a training job's traffic
    own_collective: bool = False  # brings its own all-reduce (the job's collective is not ours)

    @property
    def reliable(self) -> bool:
        """Every message arrives whole or fails."""
        return not self.bounded


# (conn, evs, settings, seed, nics) -> the core of one end of one connection
CoreFactory = Callable[[int, int, Any, int, Sequence[int] | None], Core]


@dataclass(frozen=True)
class Transport:
    """One transport's declaration (see the module docstring)."""

    name: str
    summary: str
    config: type  # the frozen dataclass of its settings
    defaults: Any  # the settings emulated runs start from (an instance of ``config``)
    core: CoreFactory | None  # None: the kernel's
    caps: Capabilities

    def __post_init__(self) -> None:
        if not isinstance(self.defaults, self.config):
            raise TypeError(f"transport {self.name!r}: defaults must be a "
                            f"{self.config.__name__}, not {type(self.defaults).__name__}")
        if (self.core is None) != self.caps.kernel:
            raise TypeError(f"transport {self.name!r}: a core factory if and only if it is "
                            "not the kernel's (caps.kernel)")

    def keys(self) -> tuple[str, ...]:
        """The names of its settings (an experiment table's keys)."""
        return tuple(f.name for f in dataclasses.fields(self.config))

    def settings(self, overrides: Mapping[str, Any] | None = None) -> Any:
        """Its run defaults with ``overrides`` applied, checked: UnknownKey (names the key
        and lists the valid ones) or InvalidValue (names the value and its rule)."""
        return settings_from(self.defaults, overrides or {})

    def plan_config(self, settings: Any = None) -> dict[str, Any]:
        """``settings`` (its run defaults if None) as a driver plan's ``config``: the fields
        that differ from the class defaults, nested settings as nested dicts."""
        return _changed(self.defaults if settings is None else settings, self.config())

    def from_plan(self, config: Mapping[str, Any] | Any) -> Any:
        """Its settings from a plan's ``config`` (keyword arguments over the class
        defaults), or ``config`` itself if it is settings already."""
        if isinstance(config, self.config):
            return config
        return self.config(**config)


def _changed(obj: Any, base: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value, default = getattr(obj, f.name), getattr(base, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            nested = _changed(value, default)
            if nested:
                out[f.name] = nested
        elif value != default:
            out[f.name] = value
    return out


def _mrc(conn: int, evs: int, cfg: Any, seed: int, nics: Sequence[int] | None) -> Core:
    return MrcCore(conn, evs, cfg, seed, nics=nics)


def _rc(conn: int, evs: int, cfg: Any, seed: int, nics: Sequence[int] | None) -> Core:
    return RcCore(conn, cfg, seed)  # one path: ECMP picks it (EVs and NICs unused)


def _dblp(conn: int, evs: int, cfg: Any, seed: int, nics: Sequence[int] | None) -> Core:
    return DblpCore(conn, evs, cfg, seed, linger_s=cfg.linger_s, close=cfg.close, nics=nics)


# The settings of every transport, as the worker's record types them (a union the record
# codec resolves by its fields: workloads/recordcodec.py).
TransportSettings = MrcConfig | RcConfig | DblpCoreConfig | TcpConfig | GlooConfig

# The I/O loop wakes in batches (transports/io/loop.py, tick.py): the receivers acknowledge
# as RoCE and UET NICs do, once per wake-up or per 16 packets, the SACK carrying the rest
# (transports/core/receiver.py ``ack_wakeup``). The RTO before any RTT sample allows what
# that adds to the first round trip: the peer's ACK held until its wake-up ends and the
# sender's own wake-up, a tick each (transports/io/tick.py TICK_S, 1 ms), as QUIC's PTO adds
# max_ack_delay (measured on the fake network: `emu bench acks`, tests/unit/bench).
_BATCHED_ACKS: dict[str, Any] = {"ack_wakeup": True, "ack_every": 16, "rto_init": 12e-3}

# NSCC's delay target never below a tick: a wake-up hands its packets to the NIC at once and
# the ACK of a wake-up's packets waits for the peer's next one, so an RTT on an idle path
# varies by up to a tick at each end (1 ms emulated, 1 us at full scale) where a NIC paces
# and stamps on the wire. Below that, every RTT reads as queueing and the window halves on
# an empty fabric (docs/concepts/transports.md, MRC's single connection).
_TICK_TARGET = NsccConfig(target_min=1e-3)  # transports/io/tick.py TICK_S (a test checks)

# Registration order is the order names are listed in (help texts, errors).
REGISTRY: tuple[Transport, ...] = (
    Transport(
        "mrc", "multipath reliable connection: every message sprayed over all SRv6 paths of "
        "a host pair, per-path loss detection and liveness, one delay-based window",
        MrcConfig, MrcConfig(rto_max=2.0, nscc=_TICK_TARGET, **_BATCHED_ACKS), _mrc,
        Capabilities(multipath=True, needs_srv6=True)),
    # RC runs with AIMD on its window, standing in for RoCE's rate control (DCQCN): a fixed
    # window overflowing shallow switch buffers would only measure go-back-N storms.
    Transport(
        "rc", "RoCEv2 reliable connection: one QP per plane, one 5-tuple each (ECMP picks "
        "its path), go-back-N", RcConfig,
        RcConfig(aimd=True, rto_max=2.0, **_BATCHED_ACKS), _rc,
        Capabilities(per_plane=True, cross_dc=False)),
    Transport(
        "dblp", "MRC with per-message loss bounds: a round completes at (1 - tolerance) of "
        "its chunks or at its deadline", DblpCoreConfig,
        DblpCoreConfig(rto_max=2.0, nscc=_TICK_TARGET, **_BATCHED_ACKS), _dblp,
        Capabilities(bounded=True, multipath=True, needs_srv6=True)),
    Transport(
        "tcp", "the kernel's TCP, one connection per host pair (ECMP hashes it once)",
        TcpConfig, TcpConfig(), None, Capabilities(kernel=True, training=False)),
    Transport(
        "gloo", "torch.distributed's gloo collectives on the kernel's TCP",
        GlooConfig, GlooConfig(), None,
        Capabilities(kernel=True, transfers=False, own_collective=True)),
)

_BY_NAME = {t.name: t for t in REGISTRY}
assert len(_BY_NAME) == len(REGISTRY), "two transports share a name"


class UnknownTransport(ValueError):
    """A name that no transport has (the message lists the valid ones)."""


def names(where: Callable[[Transport], bool] | None = None) -> tuple[str, ...]:
    """The names of the transports ``where`` accepts (all of them by default)."""
    return tuple(t.name for t in REGISTRY if where is None or where(t))


def get(name: str, where: Callable[[Transport], bool] | None = None,
        what: str = "a transport") -> Transport:
    """The declaration of ``name``; UnknownTransport naming it and the valid names (those
    ``where`` accepts, described by ``what``) otherwise."""
    t = _BY_NAME.get(name)
    if t is None or (where is not None and not where(t)):
        valid = ", ".join(repr(n) for n in names(where))
        raise UnknownTransport(f"transport={name!r} is invalid: {what} is one of {valid}")
    return t


def make_core(transport: str, conn: int, evs: int, config: Mapping[str, Any] | Any,
              seed: int, nics: Sequence[int] | None = None) -> Core:
    """The core of one end of connection ``conn`` of ``transport`` over ``evs`` paths
    (``nics``: the NIC of each); ``config`` is its settings, or a plan's config dict."""
    t = get(transport, lambda t: t.core is not None, "a transport with a userspace core")
    assert t.core is not None
    return t.core(conn, evs, t.from_plan(config), seed, nics)
