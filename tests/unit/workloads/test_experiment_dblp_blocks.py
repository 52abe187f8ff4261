"""DBLP's gradient blocks against its tolerance (no root): an experiment whose model's
blocks are too few chunks for the largest tolerance its policy can give is refused by
the validation (`emu run`, `emu bench training`, the reproduce claims), before anything
is built, with workloads/experiment/dblp.py ``check_block``'s reason and the key; one with
blocks large enough, or with a deadline, is accepted."""

from __future__ import annotations

from pathlib import Path

import pytest

from emu.errors import EmuError
from workloads import experiment as ex
from workloads.collectives.phase import PhaseAwareConfig
from workloads.experiment.blocks import model_values
from workloads.experiment.dblp import BlockTooSmall, DblpConfig, check_block

EXAMPLES = Path(__file__).resolve().parents[3] / "experiments" / "training"

DIGITS_DBLP = """
name = "digits-dblp-small-blocks"
[fabric]
planes = 2
spines = 2
leaves = 2
hosts_per_leaf = 2
[transport]
name = "dblp"
[transport.dblp]
policy = "fixed"
tolerance = {tolerance}
[workload]
model = "digits_cnn"
workers = 4
steps = 10
"""


def _file(tmp_path: Path, tolerance: float) -> Path:
    p = tmp_path / "digits_dblp.toml"
    p.write_text(DIGITS_DBLP.format(tolerance=tolerance))
    return p


def test_the_digits_cnn_has_9930_values_in_blocks_of_2_chunks() -> None:
    assert model_values("digits_cnn") == 9930
    assert check_block(0.5, 9930, 4) == 2  # floor(0.5 x 2) = 1 chunk may go


def test_a_tolerance_that_rounds_up_to_all_chunks_is_refused_naming_the_key(
        tmp_path: Path) -> None:
    # 4 workers: blocks of 2482 values = 9928 B = 2 chunks; floor(0.3 x 2) = 0
    path = _file(tmp_path, 0.3)
    with pytest.raises(BlockTooSmall) as reason:
        check_block(0.3, 9930, 4, what="the digits_cnn model")
    with pytest.raises(EmuError) as refused:
        ex.load(path)
    msg = str(refused.value)
    assert msg == f"{path}: transport.dblp.tolerance = 0.3 is invalid: {reason.value}"
    assert "floor(0.3 x 2) = 0" in msg and "reliable MRC" in msg


def test_a_tolerance_that_lets_a_chunk_go_is_accepted(tmp_path: Path) -> None:
    exp = ex.load(_file(tmp_path, 0.5))
    assert exp.transport.dblp == DblpConfig(policy="fixed", tolerance=0.5)


@pytest.mark.parametrize("dblp, workload, key, value", [
    # phase_aware: the LR decays (cosine), so its largest tolerance is cap
    ({}, {}, "cap", 0.2),
    ({"cap": 0.4}, {}, "cap", 0.4),
    # no LR decay, or no LR scaling: it never leaves base
    ({"base": 0.1, "cap": 0.6}, {"lr_schedule": "constant"}, "base", 0.1),
    ({"base": 0.1, "cap": 0.6, "lr_scaling": False}, {}, "base", 0.1),
    ({"policy": "fixed"}, {}, "tolerance", 0.05),  # the default fixed tolerance
])
def test_the_largest_tolerance_of_the_policy_is_the_one_checked(
        dblp: dict, workload: dict, key: str, value: float) -> None:
    doc = {"name": "t", "fabric": {"planes": 2, "spines": 2, "leaves": 2, "hosts_per_leaf": 2},
           "transport": {"name": "dblp", "dblp": dblp},
           "workload": {"model": "digits_cnn", "workers": 4, "steps": 10, **workload}}
    with pytest.raises(EmuError, match=rf"^<x>: transport\.dblp\.{key} = {value} is invalid: "
                                       r"the digits_cnn model's gradient blocks"):
        ex.parse(doc, where="<x>")


@pytest.mark.parametrize("dblp, workload", [
    ({"cap": 0.5}, {}),  # floor(0.5 x 2) = 1
    ({"deadline_ms": 50.0}, {}),  # a round ends at its deadline: bounded all the same
    ({"policy": "optireduce"}, {}),
    ({"policy": "fixed", "tolerance": 0.0}, {}),  # reliable on purpose
    ({"policy": "fixed", "tolerance": 0.3}, {"workers": 1}),  # 1 block of 5 chunks
])
def test_accepted_when_a_chunk_can_go_or_rounds_are_otherwise_bounded(
        dblp: dict, workload: dict) -> None:
    doc = {"name": "t", "fabric": {"planes": 2, "spines": 2, "leaves": 2, "hosts_per_leaf": 2},
           "transport": {"name": "dblp", "dblp": dblp},
           "workload": {"model": "digits_cnn", "workers": 4, "steps": 10, **workload}}
    assert ex.parse(doc).transport.name == "dblp"


def test_an_override_to_dblp_is_checked_too() -> None:
    exp = ex.load(EXAMPLES / "digits_mrc_linkcut.toml")
    with pytest.raises(EmuError, match=r"transport\.dblp\.cap = 0\.2 is invalid"):
        ex.with_overrides(exp, {"transport.name": "dblp", "transport.collective": "transpose"})


def test_the_shipped_dblp_example_is_accepted() -> None:
    # the digits CNN's blocks are 2 chunks, but its rounds have a 200 ms deadline
    exp = ex.load(EXAMPLES / "digits_dblp_bursts.toml")
    assert exp.transport.dblp is not None and exp.transport.dblp.deadline_ms == 200.0


def test_largest_tolerance_per_policy() -> None:
    assert DblpConfig(policy="fixed", tolerance=0.3).largest_tolerance() == ("tolerance", 0.3)
    assert DblpConfig().largest_tolerance() == ("cap", PhaseAwareConfig().cap)
    assert DblpConfig().largest_tolerance(lr_decays=False) == ("base", PhaseAwareConfig().base)
    assert DblpConfig(deadline_ms=5.0).largest_tolerance() is None
    assert DblpConfig(policy="optireduce").largest_tolerance() is None
