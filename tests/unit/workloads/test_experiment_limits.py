"""What this machine can hold (workloads/experiment/limits.py): an experiment that would
fail inside a worker after the fabric is built, or in an OS call, fails validation
instead, naming the key, the value and what is valid."""

from __future__ import annotations

import copy
import time

import pytest

from workloads import experiment as ex
from workloads.experiment import limits

from experiment_checks import fails

BASE = {
    "name": "t",
    "fabric": {"planes": 2, "spines": 2, "leaves": 2, "hosts_per_leaf": 2},
    "workload": {"model": "digits_cnn", "workers": 4, "steps": 10},
}


def doc(top: dict | None = None, **workload: object) -> dict:
    d = copy.deepcopy(BASE)
    d.update(top or {})
    d["workload"].update(workload)
    return d


# --- the training sets: a global batch is at most all of it ---------------------------


def test_train_samples_are_the_workers_datasets():
    # Worked out without torch; the worker's own data (workloads/data.py) must agree.
    from workloads.data import load_char_corpus, load_digits_split

    assert limits.train_samples("digits_cnn") == len(load_digits_split().train_y) == 1437
    assert limits.train_samples("tiny_lm") == load_char_corpus().train_windows.shape[0]


def test_batch_larger_than_the_digits_training_set_fails_at_load():
    fails(doc(batch_size=2000), "workload.batch_size = 2000 is invalid",
          "at most 1437", "digits_cnn training set")
    exp = ex.parse(doc(workers=1, batch_size=1437))  # all of it is a batch
    assert exp.workload.batch_size == 1437


def test_batch_larger_than_the_text_fails_at_load():
    most = limits.train_samples("tiny_lm")
    big = (most // 4 + 1) * 4  # divisible by the 4 workers, one batch beyond the set
    fails(doc(model="tiny_lm", batch_size=big), f"workload.batch_size = {big} is invalid",
          f"at most {most}", "tiny_lm training set")


def test_missing_text_fails_at_load(monkeypatch):
    def missing() -> int:
        raise limits.TextMissing("its text ... is not installed")

    monkeypatch.setattr(limits, "_text_windows", missing)
    fails(doc(model="tiny_lm", batch_size=16), "workload.model = 'tiny_lm' is invalid",
          "cannot train here", "not installed")


# --- modelled compute: a sleep per step, at most an hour --------------------------------


def test_compute_ms_a_sleep_cannot_take_fails_at_load():
    fails(doc(compute="modelled", compute_ms=1e300), "workload.compute_ms = 1e+300 is invalid",
          "(0, 3.6e+06]", "one hour")
    assert ex.parse(doc(compute="modelled", compute_ms=3_600_000)).workload.compute_ms == 3.6e6


def test_a_pipelines_compute_is_bounded_per_step():
    pipe = {"kind": "pipeline", "workers": 2, "compute": "modelled"}
    # 4 microbatches on 2 stages: a step computes 4 + 2 - 1 = 5 microbatch times
    assert ex.parse(doc(**pipe, compute_ms=720_000)).workload.compute_ms == 720_000
    fails(doc(**pipe, compute_ms=720_001), "workload.compute_ms = 720001", "(0, 720000]",
          "5 microbatch times")


# --- the name: one directory name, results/NAME-YYYYmmdd-HHMMSS -------------------------


def test_a_name_too_long_for_a_directory_fails_at_load():
    fails(doc({"name": "a" * 300}), "name = 'aaaa", "at most 239", "it has 300")
    fails(doc({"name": "a" * 240}), "at most 239")


def test_the_longest_name_makes_a_directory(tmp_path):
    name = "n" * limits.MAX_NAME_BYTES
    exp = ex.parse(doc({"name": name}))
    # what `emu run` makes of it (commands/cli.py _out_dir)
    (tmp_path / time.strftime(f"{exp.name}{limits.RESULTS_STAMP}")).mkdir()


@pytest.mark.parametrize("name", [".hidden", "..", "-rf", "a/b", "é", ""])
def test_a_name_that_is_no_safe_directory_fails_at_load(name):
    fails(doc({"name": name}), f"name = {name!r} is invalid", "starting with a letter or digit")
