"""The switch ports' signals as data (topologies/signals.py), the systems compared with
them (workloads/systems.py), how experiments set them and how runs and calibration
records carry what the ports did."""

from __future__ import annotations

from pathlib import Path

import pytest

from emu.signals import PORT, SignalStats, signal_record
from topologies import LinkSpec
from topologies.signals import (
    MRC_SWITCHES,
    PLAIN,
    ROCE_SWITCHES,
    TRIM_FIFO_SLACK,
    SwitchSignals,
)
from topologies.validate import InvalidValue
from workloads import experiment
from workloads.calibration.record import switches_record
from workloads.calibration.schema import CalibrationError, _check
from workloads.systems import SYSTEMS, calibrated, production, system

ROOT = Path(__file__).resolve().parents[3]


def test_port_numbers() -> None:
    spec = LinkSpec(rate_mbit=100.0, queue_packets=64)
    p = MRC_SWITCHES.port(spec, 9000)
    assert p.mark and p.trim and p.rate_bytes_s == 12_500_000
    # with trimming the FIFO behind the program counts bytes, as the program's buffer does
    assert p.cap_bytes == 64 * 9014 and p.fifo_bytes == p.cap_bytes * TRIM_FIFO_SLACK
    assert p.fifo_packets == 0
    assert p.kmin_bytes == 2 * 9014 and p.kmax_bytes == 10 * 9014
    lossless = ROCE_SWITCHES.port(spec, 9000)
    assert lossless.fifo_packets == 100_000 and not lossless.trim and lossless.mark
    assert lossless.fifo_bytes == 0
    plain = PLAIN.port(spec, 9000)
    assert not plain.mark and not plain.trim and plain.fifo_packets == 64
    assert plain.fifo_bytes == 0 and MRC_SWITCHES.port(spec, 9000).fifo_packets == 0
    assert [s.label for s in (PLAIN, MRC_SWITCHES, ROCE_SWITCHES)] == \
        ["plain", "ecn+trim", "lossless+ecn"]
    assert PORT.size == 112  # struct port of emu/bpf/port.c


@pytest.mark.parametrize(("kw", "key"), [
    ({"ecn_kmin": 10.0, "ecn_kmax": 5.0}, "ecn_kmax"),
    ({"ecn_pmax": 0.0}, "ecn_pmax"),
    ({"lossless": True, "trim": True, "ecn": True}, "trim"),
    ({"lossless": True}, "ecn"),
    ({"trim": 1}, "trim"),
])
def test_invalid_signals_name_the_key(kw: dict, key: str) -> None:
    with pytest.raises(InvalidValue) as e:
        SwitchSignals(**kw)
    assert e.value.name == key


def test_systems_and_their_overrides_load_as_experiments() -> None:
    exp = experiment.load(ROOT / "experiments/training/demo_digits.toml")
    for label in ("mrc", "mrc-no-ecn", "rc", "rc-lossy", "mrc-equal-nics"):
        s = system(label)
        e = experiment.with_overrides(exp, s.overrides())
        assert e.fabric.signals() == s.signals
        assert e.transport.name == s.transport
        assert e.transport.settings == s.settings()
    assert system("rc").settings().dcqcn and not system("rc").settings().aimd
    assert not system("mrc-no-ecn").settings().nscc.ecn
    assert production("dblp").signals == MRC_SWITCHES
    # the calibration measures RC as the explorer files it (rc_lossy), MRC as deployed
    assert calibrated("rc").label == "rc-lossy" and calibrated("mrc").signals == MRC_SWITCHES
    with pytest.raises(ValueError, match="system 'x' is invalid"):
        system("x")
    assert {s.transport for s in SYSTEMS.values()} == {"mrc", "rc", "tcp", "dblp"}


def test_a_runs_record_counts_only_its_own_packets() -> None:
    port = ("p0l0", "p0l0-eth1")
    host = ("h1", "h1-eth0")
    before = {port: SignalStats(10, 2, 1, 0, 0, 9000), host: SignalStats(0, 0, 0, 0, 2, 0)}
    after = {port: SignalStats(30, 7, 4, 1, 0, 18000), host: SignalStats(0, 0, 0, 0, 7, 0)}
    rec = signal_record(MRC_SWITCHES, before, after)
    assert rec["signals"] == "ecn+trim" and rec["mechanism"] == "tc-bpf"
    assert (rec["packets"], rec["marked"], rec["trimmed"], rec["dropped"], rec["ce_seen"]) \
        == (20, 5, 3, 1, 5)
    assert rec["ports"] == {"p0l0:p0l0-eth1": {"marked": 5, "trimmed": 3, "dropped": 1},
                            "h1:h1-eth0": {"ce_seen": 5}}
    assert signal_record(PLAIN, {}, {})["mechanism"] == "none"


def test_calibration_switches_section_is_optional_and_checked() -> None:
    from workloads.calibration.schema import _TRANSPORT

    sw = switches_record({"signals": "ecn+trim", "mechanism": "tc-bpf", "packets": 200,
                          "marked": 20, "trimmed": 4, "dropped": 0, "ce_seen": 20})
    assert sw["marked_fraction"] == 0.1 and sw["trimmed_fraction"] == 0.02
    _check(sw, _TRANSPORT["switches?"], "switches")
    with pytest.raises(CalibrationError, match="missing keys"):
        _check({k: v for k, v in sw.items() if k != "trimmed"}, _TRANSPORT["switches?"], "s")
    schema = {"a": "int", "b?": "int"}
    _check({"a": 1}, schema, "x")
    _check({"a": 1, "b": 2}, schema, "x")
    with pytest.raises(CalibrationError, match="unknown keys"):
        _check({"a": 1, "c": 2}, schema, "x")
