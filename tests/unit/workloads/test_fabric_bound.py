"""The fabric's own limit through an experiment's failures (workloads/training/fabric_bound.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from workloads.experiment import load, with_overrides
from workloads.training.fabric_bound import comm_bounds

ROOT = Path(__file__).resolve().parents[3]


def test_the_cut_experiment_leaves_its_interleaved_ring_four_thirds() -> None:
    """lm_mrc_cut_held.toml: 4 workers placed rack by rack in turn, so every ring hop
    crosses racks; the cut takes one of plane 0's two uplinks of rack 0."""
    exp = load(ROOT / "experiments/training/lm_mrc_cut_held.toml")
    assert exp.hosts() == ("h0", "h2", "h1", "h3")
    assert comm_bounds(exp) == {"link_down": pytest.approx(4 / 3)}


def test_the_same_cut_costs_a_rack_contiguous_ring_nothing() -> None:
    exp = with_overrides(load(ROOT / "experiments/training/lm_mrc_cut_held.toml"),
                         {"workload.hosts": ["h0", "h1", "h2", "h3"]})
    assert comm_bounds(exp) == {"link_down": pytest.approx(1.0)}


def test_no_bound_where_it_does_not_describe_the_run() -> None:
    # a burst breaks no link; a hierarchical collective is not a ring
    bursts = load(ROOT / "experiments/training/digits_dblp_bursts.toml")
    assert comm_bounds(bursts) == {}
    hier = load(ROOT / "experiments/training/digits_hier_2dc.toml")
    assert comm_bounds(hier) == {}
