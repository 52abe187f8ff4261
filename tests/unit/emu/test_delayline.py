"""DelayLine argument validation and the relay's stats layout (no root, nothing started)."""

from __future__ import annotations

import math

import pytest

from emu import delayline_relay as relay
from emu.delayline import DelayLine


def make(**kw: object) -> DelayLine:
    args: dict[str, object] = dict(ns_a_fd=3, ifname_a="dci-a", ns_b_fd=4, ifname_b="dci-b",
                                   delay_ms=5.0)
    args.update(kw)
    return DelayLine(**args)  # type: ignore[arg-type]


def test_valid_arguments_are_kept() -> None:
    line = make(delay_ms=0, loss=1, seed=9, mtu=1500)
    assert (line.delay_ms, line.loss, line.seed, line.mtu) == (0.0, 1.0, 9, 1500)
    assert line.pid is None and not line.running
    make(delay_ms=1000.0, loss=0.0)
    line.stop()  # never started: nothing to do


@pytest.mark.parametrize(("kw", "needle"), [
    ({"delay_ms": -0.1}, "delay_ms=-0.1"),
    ({"delay_ms": 1000.5}, "delay_ms=1000.5"),
    ({"delay_ms": math.nan}, "delay_ms=nan"),
    ({"delay_ms": "5"}, "delay_ms='5'"),
    ({"delay_ms": True}, "delay_ms=True"),
    ({"loss": -0.01}, "loss=-0.01"),
    ({"loss": 1.5}, "loss=1.5"),
    ({"loss": math.inf}, "loss=inf"),
    ({"seed": -1}, "seed=-1"),
    ({"seed": 1.0}, "seed=1.0"),
    ({"mtu": 10}, "mtu=10"),
    ({"mtu": 9000.0}, "mtu=9000.0"),
    ({"ns_a_fd": -1}, "ns_a_fd=-1"),
    ({"ns_b_fd": None}, "ns_b_fd=None"),
    ({"ifname_a": ""}, "ifname_a=''"),
    ({"ifname_b": "x" * 16}, "ifname_b='xxxxxxxxxxxxxxxx'"),
    ({"ifname_a": "a/b"}, "ifname_a='a/b'"),
    ({"queue_frames": 0}, "queue_frames=0"),
    ({"spin_s": 0.5}, "spin_s=0.5"),
    ({"rt_priority": 100}, "rt_priority=100"),
])
def test_invalid_arguments_name_the_value(kw: dict[str, object], needle: str) -> None:
    with pytest.raises(ValueError) as exc:
        make(**kw)
    assert needle in str(exc.value)


def test_stats_layout_fits() -> None:
    last = relay.dir_base(1) + relay.DIR_WORDS - 1
    assert relay.dir_base(0) > relay.W_STATE
    assert last < relay.W_SCHED < relay.STATS_WORDS
    assert relay.STATS_BYTES == 8 * relay.STATS_WORDS


def test_stats_before_start_are_zero() -> None:
    st = make().stats()
    assert st.a_to_b.relayed == st.b_to_a.lost == 0 and not st.running
