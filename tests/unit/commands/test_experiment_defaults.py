"""Every default has one owner, and the fabric's bounds are the topology's own: the
experiment's [fabric] table, `emu fabric` and the Mininet export read them from the
topology dataclasses, and a topology error comes back naming the file's key."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from commands.cli import build_parser
from emu.errors import EmuError
from topologies import DciSpec, MultiPlaneClos
from topologies.scaleacross import DEFAULT_DCI_DELAY_MS
from workloads import experiment as ex
from workloads.collectives.phase import OptiReduceConfig
from workloads.experiment.config import field_default

WORKLOAD = {"model": "digits_cnn", "workers": 2, "steps": 5}


def test_the_dci_delay_is_decided_once_by_dcispec():
    # 5 ms: what experiments, `emu fabric` and the measured demos and benches use.
    assert DEFAULT_DCI_DELAY_MS == 5.0
    assert DciSpec().delay_ms == DEFAULT_DCI_DELAY_MS
    assert ex.FabricConfig().dci_delay_ms == DEFAULT_DCI_DELAY_MS
    args = build_parser().parse_args(["fabric"])
    assert args.dci_delay_ms == DEFAULT_DCI_DELAY_MS
    exp = ex.parse({"name": "x", "fabric": {"dcs": 2, "hosts_per_leaf": 1},
                    "workload": WORKLOAD})
    assert exp.fabric_spec().dci.delay_ms == DEFAULT_DCI_DELAY_MS  # type: ignore[union-attr]


def test_the_mininet_export_takes_the_dci_delay_from_dcispec():
    pytest.importorskip("mininet.topo")
    from emu import mininet_topo

    default = inspect.signature(mininet_topo._scaleacross).parameters["delay_ms"].default
    assert default == DciSpec().delay_ms


def test_fabric_defaults_are_the_topologys():
    f, clos, dci = ex.FabricConfig(), MultiPlaneClos(), DciSpec()
    assert (f.planes, f.spines, f.leaves, f.hosts_per_leaf) == (
        clos.planes, clos.spines, clos.leaves, clos.hosts_per_leaf)
    assert (f.rate_mbit, f.fabric_rate_mbit, f.queue_packets) == (
        clos.host_link.rate_mbit, clos.fabric_link.rate_mbit, clos.host_link.queue_packets)
    assert (f.dci_rate_mbit, f.dci_delay_ms, f.dci_loss) == (dci.rate_mbit, dci.delay_ms,
                                                             dci.loss)
    # and an experiment without [fabric] builds exactly the default topology
    assert ex.parse({"name": "x", "workload": WORKLOAD}).fabric_spec() == clos


def test_table_defaults_are_the_dataclasses():
    # the LM: its blocks are large enough for DBLP's default tolerance (the digits CNN's
    # are not: test_experiment_dblp_blocks.py)
    exp = ex.parse({"name": "x", "workload": {**WORKLOAD, "model": "tiny_lm"},
                    "transport": {"name": "dblp"}})
    w, d = exp.workload, ex.WorkloadConfig
    for name in ("kind", "batch_size", "lr", "lr_schedule", "eval_every", "compute",
                 "allow_overruns"):
        assert getattr(w, name) == field_default(d, name), name
    assert exp.transport.dblp is not None
    assert exp.transport.dblp.fill == field_default(ex.DblpConfig, "fill")
    assert (exp.seed, exp.repetitions, exp.clock, exp.description) == tuple(
        field_default(ex.Experiment, k) for k in ("seed", "repetitions", "clock", "description"))
    opti = ex.parse({"name": "x", "workload": WORKLOAD,
                     "transport": {"name": "dblp", "dblp": {"policy": "optireduce"}}})
    assert opti.transport.dblp is not None
    assert opti.transport.dblp.margin_ms == OptiReduceConfig().margin_s * 1000


@pytest.mark.parametrize("fabric, needles", [
    # bounds the old per-key rules did not state: the topology's, named by key now
    ({"rate_mbit": 50000}, ["fabric.rate_mbit = 50000 is invalid", "[0.01, 40000]"]),
    ({"fabric_rate_mbit": 50000.0}, ["fabric.fabric_rate_mbit = 50000.0", "[0.01, 40000]"]),
    ({"queue_packets": 2**31}, ["fabric.queue_packets = 2147483648", "[1, 2147483647]"]),
    ({"dci_rate_mbit": 0}, ["fabric.dci_rate_mbit = 0", "[0.01, 40000]"]),
    ({"dci_loss": 2}, ["fabric.dci_loss = 2", "[0, 1]"]),
    ({"spines": 65}, ["fabric.spines = 65", "an integer in [1, 64]"]),
    ({"dcs": 300}, ["fabric.dcs = 300", "an integer in [1, "]),
])
def test_fabric_bounds_are_the_topologys_named_by_key(fabric, needles):
    with pytest.raises(EmuError) as info:
        ex.parse({"name": "x", "fabric": fabric, "workload": WORKLOAD}, "exp.toml")
    msg = str(info.value)
    assert msg.startswith("exp.toml: "), msg
    for n in needles:
        assert n in msg, f"{n!r} not in {msg!r}"


def test_fabric_values_are_numbers_as_before():
    f = ex.parse({"name": "x", "fabric": {"rate_mbit": 40, "dci_delay_ms": 2},
                  "workload": WORKLOAD}).fabric
    assert isinstance(f.rate_mbit, float) and isinstance(f.fabric_rate_mbit, float)
    assert isinstance(f.dci_delay_ms, float)
    assert dataclasses.asdict(f)["fabric_rate_mbit"] == 40.0
