"""The training workloads' models and data (no root, CPU, one thread)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch

from workloads import data
from workloads.models import (
    MODELS,
    DigitsCNN,
    TinyLM,
    build,
    count_parameters,
    split_stages,
)


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Workers run one thread each; so do these tests (and timings mean the same)."""
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)


def _train(model: torch.nn.Module, task, steps: int) -> list[float]:
    opt = task.optimizer(model.parameters())
    losses = []
    for x, y in task.shards().iter(steps):
        opt.zero_grad(set_to_none=True)
        loss = task.loss_fn(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


# --- data ------------------------------------------------------------------


def test_digits_split_shapes_range_and_stratification():
    d = data.load_digits_split()
    assert d.train_x.shape == (1437, 1, 8, 8) and d.test_x.shape == (360, 1, 8, 8)
    assert d.train_x.dtype == torch.float32 and d.train_y.dtype == torch.int64
    assert d.train_x.min() >= 0.0 and d.train_x.max() == 1.0
    # Stratified: every class holds 20 % of its samples out, give or take one.
    train_counts = torch.bincount(d.train_y, minlength=10)
    test_counts = torch.bincount(d.test_y, minlength=10)
    assert torch.all((test_counts - 0.2 * (train_counts + test_counts)).abs() <= 1)
    # Deterministic from the split seed (the cache is bypassed to prove it).
    again = data.load_digits_split.__wrapped__(0)
    assert torch.equal(again.test_x, d.test_x) and torch.equal(again.train_y, d.train_y)
    other = data.load_digits_split.__wrapped__(1)
    assert not torch.equal(other.test_y, d.test_y)


def test_char_corpus_comes_from_sklearn_descr_and_round_trips():
    c = data.load_char_corpus()
    assert "digits.rst" in c.files and list(c.files) == sorted(c.files)
    assert len(c.text) == len(c.train_tokens) + len(c.val_tokens)
    assert c.decode(c.train_tokens[:200]) == c.text[:200]
    assert torch.equal(c.encode(c.text[-50:]), c.val_tokens[-50:])
    x, y = c.fetch(np.array([0, 5]))
    assert x.shape == y.shape == (2, 64)
    assert torch.equal(x[1, 1:], y[1, :-1])  # the target is the input shifted by one
    vx, vy = c.val_windows()
    assert vx.shape[1] == 64 and torch.equal(vx[:, 1:], vy[:, :-1])


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("dataset", ["digits", "text"])
def test_rank_slices_concatenate_to_the_single_process_batch(dataset: str, world: int):
    source = data.load_digits_split() if dataset == "digits" else data.load_char_corpus()
    batch, seed = 12, 7
    single = source.shards(seed, 0, 1, batch)
    ranks = [source.shards(seed, r, world, batch) for r in range(world)]
    spe = single.steps_per_epoch
    steps = range(spe - 2, spe + 2)  # across the first epoch boundary
    assert [single.epoch_of(s) for s in steps] == [0, 0, 1, 1]
    for step in steps:
        gx, gy = single.batch(step)
        parts = [shard.batch(step) for shard in ranks]
        assert all(len(p[0]) == batch // world for p in parts)
        assert torch.equal(torch.cat([p[0] for p in parts]), gx)
        assert torch.equal(torch.cat([p[1] for p in parts]), gy)
    # Through the iterator too, as a worker would consume it.
    for step, parts in enumerate(zip(*(s.iter(3, start=spe - 1) for s in ranks), strict=True)):
        assert torch.equal(torch.cat([p[0] for p in parts]), single.batch(spe - 1 + step)[0])


def test_epochs_cover_each_sample_once_and_reshuffle():
    shards = data.load_digits_split().shards(3, 0, 1, 64)
    spe = shards.steps_per_epoch
    assert spe == 1437 // 64
    epoch0 = np.concatenate([shards.global_indices(s) for s in range(spe)])
    epoch1 = np.concatenate([shards.global_indices(s) for s in range(spe, 2 * spe)])
    assert len(set(epoch0.tolist())) == len(epoch0) == spe * 64
    assert not np.array_equal(epoch0, epoch1)
    # A function of (seed, step) only: a fresh sampler, jumping straight to epoch 1, agrees.
    fresh = data.load_digits_split().shards(3, 0, 1, 64)
    assert np.array_equal(fresh.global_indices(spe + 4), shards.global_indices(spe + 4))
    assert not np.array_equal(
        data.load_digits_split().shards(4, 0, 1, 64).global_indices(0), shards.global_indices(0)
    )


def test_uneven_world_slices_still_concatenate_and_fractions_sum_to_one():
    source = data.load_digits_split()
    ranks = [source.shards(0, r, 3, 64) for r in range(3)]
    assert [s.local_batch_size for s in ranks] == [21, 21, 22]
    assert sum(s.fraction for s in ranks) == pytest.approx(1.0)
    whole = source.shards(0, 0, 1, 64).global_indices(30)
    assert np.array_equal(np.concatenate([s.indices(30) for s in ranks]), whole)
    with pytest.raises(ValueError, match="rank 3"):
        source.shards(0, 3, 3, 64)


def test_fraction_weighted_rank_gradients_sum_to_the_global_gradient():
    # What a sum all-reduce of the ranks' gradients computes, for an uneven world of 3.
    model, task = build("digits_cnn", 0)
    x, y = task.shards(0, 1, 64).batch(5)
    model.zero_grad()
    task.loss_fn(model(x), y).backward()
    whole = [p.grad.clone() for p in model.parameters()]
    total = [torch.zeros_like(p) for p in model.parameters()]
    for r in range(3):
        shard = task.shards(r, 3, 64)
        model.zero_grad()
        (shard.fraction * task.loss_fn(model(shard.batch(5)[0]), shard.batch(5)[1])).backward()
        total = [t + p.grad for t, p in zip(total, model.parameters(), strict=True)]
    assert all(torch.allclose(t, w, atol=1e-6) for t, w in zip(total, whole, strict=True))


def test_missing_text_source_fails_clearly(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "TEXT_SOURCE_DIR", tmp_path / "nowhere")
    with pytest.raises(data.TextSourceMissing, match=r"sklearn/datasets/descr"):
        data.load_char_corpus()
    monkeypatch.setattr(data, "TEXT_SOURCE_DIR", tmp_path)  # exists, but holds no .rst
    with pytest.raises(FileNotFoundError, match="no \\*.rst files"):
        build("tiny_lm", 0)


# --- models ----------------------------------------------------------------


def test_shapes_and_sizes():
    cnn, _ = build("digits_cnn", 0)
    assert cnn(torch.zeros(5, 1, 8, 8)).shape == (5, 10)
    assert 3_000 <= count_parameters(cnn) <= 20_000
    lm, task = build("tiny_lm", 0)
    v = task.data.vocab_size
    assert lm(torch.zeros(3, 64, dtype=torch.long)).shape == (3, 64, v)
    assert lm(torch.zeros(2, 10, dtype=torch.long)).shape == (2, 10, v)
    with pytest.raises(ValueError, match="context"):
        lm(torch.zeros(1, 65, dtype=torch.long))
    assert set(MODELS) == {"digits_cnn", "tiny_lm"}
    assert isinstance(cnn, DigitsCNN) and isinstance(lm, TinyLM)


def test_lm_is_causal():
    lm, _ = build("tiny_lm", 0)
    x = torch.randint(0, 10, (1, 32))
    y = x.clone()
    y[0, 20:] = (y[0, 20:] + 1) % 10
    assert torch.allclose(lm(x)[0, :20], lm(y)[0, :20], atol=1e-6)
    assert not torch.allclose(lm(x)[0, 20:], lm(y)[0, 20:])


@pytest.mark.parametrize("name", ["digits_cnn", "tiny_lm"])
def test_build_is_deterministic(name: str):
    a, task = build(name, 11)
    torch.rand(100)  # RNG draws between builds must not matter
    b, _ = build(name, 11)
    c, _ = build(name, 12)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)
    assert task.seed == 11


@pytest.mark.parametrize(
    "name,n_stages", [("digits_cnn", 2), ("digits_cnn", 3), ("tiny_lm", 2), ("tiny_lm", 3)]
)
def test_stages_compose_to_the_full_model_exactly(name: str, n_stages: int):
    model, task = build(name, 0)
    stages = split_stages(name, model, n_stages)
    assert len(stages) == n_stages
    x, _ = task.shards().batch(0)
    for train in (True, False):
        model.train(train)
        with torch.no_grad():
            h = x
            for stage in stages:
                h = stage(h)
            assert torch.equal(h, model(x))
    # The stages' parameters are the model's own tensors, each in exactly one stage.
    stage_params = [p for s in stages for p in s.parameters()]
    assert [id(p) for p in stage_params] == [id(p) for p in model.parameters()]
    with torch.no_grad():
        next(stages[-1].parameters()).add_(1.0)
    assert not torch.equal(h, model(x))  # a change through a stage is a change of the model


def test_default_cuts_and_explicit_cuts():
    cnn, _ = build("digits_cnn", 0)
    conv, head = split_stages("digits_cnn", cnn, 2)
    assert conv(torch.zeros(1, 1, 8, 8)).shape == (1, 32, 4, 4)  # convolutions | classifier
    lm, _ = build("tiny_lm", 0)
    first, mid, last = split_stages("tiny_lm", lm, 3)
    assert list(first) == [lm.embed, lm.layers[0]]
    assert list(mid) == [lm.layers[1]] and list(last) == [lm.head]
    a, b = split_stages("tiny_lm", lm, 2, cuts=[1])
    assert list(a) == [lm.embed] and list(b) == [*lm.layers, lm.head]
    with pytest.raises(ValueError, match="at most 3 stages"):
        split_stages("tiny_lm", lm, 4)
    with pytest.raises(ValueError, match="cuts"):
        split_stages("tiny_lm", lm, 2, cuts=[0])
    with pytest.raises(TypeError):
        split_stages("tiny_lm", cnn, 2)


# --- training --------------------------------------------------------------


def test_cnn_reaches_90_percent_test_accuracy_quickly():
    model, task = build("digits_cnn", 0)
    assert task.metric == "accuracy" and task.higher_is_better
    _train(model, task, steps=150)
    metrics = task.evaluate(model)
    assert metrics["accuracy"] >= 0.9, metrics
    assert set(metrics) == {"accuracy", "loss"}
    assert task.reached({"accuracy": 0.96}) and not task.reached({"accuracy": 0.5})
    assert model.training  # evaluate restores the mode it found


def test_lm_loss_decreases_over_50_steps():
    model, task = build("tiny_lm", 0)
    assert task.metric == "loss" and not task.higher_is_better
    before = task.evaluate(model)
    losses = _train(model, task, steps=50)
    after = task.evaluate(model)
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 1.0
    assert after["loss"] < before["loss"] - 1.0
    assert after["perplexity"] == pytest.approx(np.exp(after["loss"]))
