"""One schema for experiment files: every key the reader takes is listed, with the default
the loader fills in and the rule its error states (workloads/experiment/schema.py)."""

from __future__ import annotations

import dataclasses

import pytest

from emu.errors import EmuError
from workloads import experiment as ex
from workloads.experiment import loading, reference, schema, tables
from workloads.experiment.config import WorkloadConfig

MINIMAL = {"name": "x", "workload": {"model": "digits_cnn", "workers": 2, "steps": 4}}
KEYS = {k.path: k for k in reference.keys()}


def test_every_key_the_reader_takes_is_in_the_schema():
    wanted = {k for k in loading.TOP if k not in ("fabric", "transport", "workload", "event")}
    wanted |= {f"fabric.{k}" for k in tables.FABRIC} | {f"workload.{k}" for k in tables.WORKLOAD}
    wanted |= {f"transport.dblp.{k}" for k in tables.DBLP}
    wanted |= {"transport.name", "transport.collective"}
    assert wanted <= set(KEYS), sorted(wanted - set(KEYS))


def test_the_listed_defaults_are_the_loaders():
    exp = ex.parse(MINIMAL, "x.toml")
    for name in tables.FABRIC:
        assert KEYS[f"fabric.{name}"].default == getattr(exp.fabric, name), name
    for f in dataclasses.fields(WorkloadConfig):
        listed = KEYS[f"workload.{f.name}"].default
        if listed != schema.REQUIRED and f.name != "hosts":
            assert listed == getattr(exp.workload, f.name), f.name
    for k in ("seed", "repetitions", "clock", "description"):
        assert KEYS[k].default == getattr(exp, k)
    assert KEYS["transport.name"].default == exp.transport.name


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(WorkloadConfig)
                                  if f.name not in ("hosts", "model", "kind", "workers",
                                                    "microbatches", "compute_ms",
                                                    "target_loss", "allow_overruns")])
def test_a_bad_value_is_refused_with_the_listed_rule(name):
    doc = {**MINIMAL, "workload": {**MINIMAL["workload"], name: "?"}}
    with pytest.raises(EmuError) as info:
        ex.parse(doc, "x.toml")
    rule = KEYS[f"workload.{name}"].rule.removesuffix(" (or unset)")
    assert f"workload.{name} = '?' is invalid: must be {rule}" in str(info.value)


def test_every_key_says_what_it_is_and_what_it_takes():
    for k in reference.keys():
        assert k.rule, k.path
        if not k.path.startswith("transport.") or k.path.count(".") == 1 or \
                k.path.startswith("transport.dblp."):
            assert k.doc, k.path


def test_emu_run_keys_prints_the_schema(capsys):
    from commands import cli

    assert cli.main(["run", "--keys"]) == 0
    out = capsys.readouterr().out
    assert "workload.lr_schedule = 'cosine'" in out and "fabric.queue_packets = 100" in out
