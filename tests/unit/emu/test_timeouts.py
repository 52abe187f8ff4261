"""The readiness-wait scale (emu.timeouts) and how `emu` and `emu doctor` take it."""

from __future__ import annotations

import pytest

from commands.cli import main
from emu import timeouts
from emu.doctor import _timeouts
from emu.errors import EmuError


def test_unset_means_a_normal_machine(monkeypatch):
    monkeypatch.delenv(timeouts.ENV, raising=False)
    assert timeouts.timeout_scale() == 1.0
    assert timeouts.scaled(60.0) == 60.0
    assert timeouts.describe(60.0) == "60 s"


def test_a_scale_multiplies_every_wait_and_says_so(monkeypatch):
    monkeypatch.setenv(timeouts.ENV, "12.5")
    assert timeouts.timeout_scale() == 12.5
    assert timeouts.scaled(60.0) == 750.0
    assert timeouts.describe(60.0) == "750 s (60 s x SAE_TIMEOUT_SCALE 12.5)"


@pytest.mark.parametrize("bad", ["0", "0.99", "abc", "nan", "inf", "-3", "1001"])
def test_bad_scales_are_refused_by_name(monkeypatch, bad):
    monkeypatch.setenv(timeouts.ENV, bad)
    with pytest.raises(EmuError, match=rf"SAE_TIMEOUT_SCALE='{bad}' is invalid: must be a "
                                       r"number from 1 to 1000"):
        timeouts.timeout_scale()


def test_the_cli_option_sets_the_environment_children_inherit(monkeypatch, capsys):
    monkeypatch.setenv(timeouts.ENV, "1")  # restored after the test: main() overwrites it
    monkeypatch.setattr("emu.doctor.check", lambda: [_timeouts()])
    assert main(["--timeout-scale", "20", "doctor"]) == 0
    out = capsys.readouterr().out
    assert "readiness waits 20x longer" in out and "SAE_TIMEOUT_SCALE=20" in out
    assert timeouts.timeout_scale() == 20.0


def test_the_cli_refuses_a_bad_option_and_a_bad_inherited_value(monkeypatch, capsys):
    monkeypatch.setenv(timeouts.ENV, "1")
    assert main(["--timeout-scale", "0.5", "doctor"]) == 2
    assert "--timeout-scale='0.5' is invalid" in capsys.readouterr().err
    monkeypatch.setenv(timeouts.ENV, "slow")
    assert main(["doctor"]) == 2
    assert "SAE_TIMEOUT_SCALE='slow' is invalid" in capsys.readouterr().err
