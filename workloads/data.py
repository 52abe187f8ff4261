"""The datasets the training workloads use, and how a global batch is split across ranks.

Everything here is local: no download, nothing written to disk.

* Digits: scikit-learn's bundled ``load_digits`` (1797 grey 8x8 images of the
  digits 0-9, pixel values 0..16, shipped inside scikit-learn as
  ``sklearn/datasets/data/digits.csv.gz``). Split 80/20, stratified by class,
  from ``split_seed``; pixels scaled to [0, 1] as float32 of shape (N, 1, 8, 8).
* Text for a character-level language model: the dataset description files
  scikit-learn ships, ``sklearn/datasets/descr/*.rst`` of the installed
  scikit-learn (about 43 kB of English prose and reStructuredText in 1.9), read
  as UTF-8 and concatenated in sorted file-name order. The text (hence the
  vocabulary) depends on the installed scikit-learn version; ``CharCorpus.sha256``
  identifies it so a run can record what it trained on. The first 90 % is the
  training split, the last 10 % the validation split.

The rank-slicing contract (``Shards``): for a given ``seed`` and global batch
size ``B``, step ``s`` has one global batch, a fixed list of ``B`` sample
indices taken from that epoch's permutation of the training set (the
permutation is drawn from ``(seed, epoch)``; the last incomplete batch of an
epoch is dropped). Rank ``r`` of ``world`` gets the contiguous slice
``[r*B//world, (r+1)*B//world)`` of it. Concatenating the ranks' slices in
rank order therefore gives exactly the batch a single process (world 1) uses at
that step, which is what lets data-parallel training over several workers be
compared with one process. When ``world`` does not divide ``B`` the slices
differ in size by one; ``Shards.fraction`` (local/global samples) is the weight
that turns each rank's mean loss into its share of the global mean, so that a
sum all-reduce of ``fraction * grad(mean local loss)`` is the gradient of the
global mean loss.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

Batch = tuple[torch.Tensor, torch.Tensor]

# ---------------------------------------------------------------------------
# Rank slicing
# ---------------------------------------------------------------------------


class Shards:
    """One rank's view of the global batches of a training set (see the module docstring).

    ``fetch(indices)`` turns an int64 array of sample indices into ``(input, target)``
    tensors; ``n_samples`` is the size of the training set the indices range over.
    Batches are random access (``batch(step)``), so a worker that restarts at a step
    gets the same data it would have had without the restart.
    """

    def __init__(
        self,
        fetch: Callable[[np.ndarray], Batch],
        n_samples: int,
        batch_size: int,
        seed: int,
        rank: int = 0,
        world: int = 1,
    ) -> None:
        if world < 1 or not 0 <= rank < world:
            raise ValueError(f"rank {rank} is not in a world of {world}")
        if batch_size < world:
            raise ValueError(f"global batch {batch_size} leaves a rank of {world} empty")
        if batch_size > n_samples:
            raise ValueError(f"global batch {batch_size} exceeds the {n_samples} samples")
        if seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        self.fetch = fetch
        self.n_samples = n_samples
        self.batch_size = batch_size
        self.seed = seed
        self.rank = rank
        self.world = world
        self.lo = rank * batch_size // world
        self.hi = (rank + 1) * batch_size // world
        # Drop the last incomplete batch so every step has the same global batch size.
        self.steps_per_epoch = n_samples // batch_size
        self._perm_epoch = -1
        self._perm = np.empty(0, dtype=np.int64)

    @property
    def local_batch_size(self) -> int:
        return self.hi - self.lo

    @property
    def fraction(self) -> float:
        """This rank's share of the global batch: the weight of its mean loss."""
        return self.local_batch_size / self.batch_size

    def epoch_of(self, step: int) -> int:
        return step // self.steps_per_epoch

    def permutation(self, epoch: int) -> np.ndarray:
        """The order of the training set in ``epoch``: a function of (seed, epoch) only."""
        if epoch != self._perm_epoch:
            rng = np.random.default_rng([self.seed, epoch])
            self._perm = rng.permutation(self.n_samples).astype(np.int64)
            self._perm_epoch = epoch
        return self._perm

    def global_indices(self, step: int) -> np.ndarray:
        """The sample indices of the whole global batch at ``step`` (every rank agrees)."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        start = (step % self.steps_per_epoch) * self.batch_size
        return self.permutation(self.epoch_of(step))[start : start + self.batch_size]

    def indices(self, step: int) -> np.ndarray:
        """This rank's slice of the global batch at ``step``."""
        return self.global_indices(step)[self.lo : self.hi]

    def batch(self, step: int) -> Batch:
        return self.fetch(self.indices(step))

    def iter(self, steps: int, start: int = 0) -> Iterator[Batch]:
        """This rank's batches for steps ``start .. start + steps - 1``."""
        for step in range(start, start + steps):
            yield self.batch(step)


# ---------------------------------------------------------------------------
# Digits
# ---------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)  # tensors have no boolean ==: compare by identity
class DigitsData:
    """The digits split: images float32 (N, 1, 8, 8) in [0, 1], labels int64 (N,)."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    split_seed: int

    def fetch(self, idx: np.ndarray) -> Batch:
        t = torch.from_numpy(idx)
        return self.train_x[t], self.train_y[t]

    def shards(self, seed: int, rank: int, world: int, batch_size: int) -> Shards:
        return Shards(self.fetch, len(self.train_y), batch_size, seed, rank, world)


@lru_cache(maxsize=4)
def load_digits_split(split_seed: int = 0, test_fraction: float = 0.2) -> DigitsData:
    """The digits, split train/test, stratified by class, deterministically from ``split_seed``.

    Cached: the tensors are shared between callers and must not be modified in place.
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images.astype(np.float32) / 16.0)[:, None, :, :]
    y = digits.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x, y, test_size=test_fraction, stratify=y, random_state=split_seed
    )
    return DigitsData(
        train_x=torch.from_numpy(np.ascontiguousarray(x_tr)),
        train_y=torch.from_numpy(y_tr),
        test_x=torch.from_numpy(np.ascontiguousarray(x_te)),
        test_y=torch.from_numpy(y_te),
        split_seed=split_seed,
    )


def digits_shards(
    seed: int, rank: int, world: int, batch_size_global: int, steps: int, start: int = 0
) -> Iterator[Batch]:
    """This rank's digits batches for ``steps`` steps (the train split of split seed 0)."""
    return load_digits_split().shards(seed, rank, world, batch_size_global).iter(steps, start)


# ---------------------------------------------------------------------------
# Text
# ---------------------------------------------------------------------------


def _default_text_dir() -> Path:
    import sklearn.datasets

    return Path(sklearn.datasets.__file__).resolve().parent / "descr"


# Where the corpus is read from; None means the installed scikit-learn's descr/ directory.
TEXT_SOURCE_DIR: Path | None = None


class TextSourceMissing(FileNotFoundError):
    """The text the language model trains on is not where it should be."""


def read_text_source(directory: Path | None = None) -> tuple[str, list[str]]:
    """The concatenated ``*.rst`` files of ``directory`` (sorted by name) and their names."""
    directory = directory or TEXT_SOURCE_DIR or _default_text_dir()
    files = sorted(directory.glob("*.rst")) if directory.is_dir() else []
    if not files:
        raise TextSourceMissing(
            f"no *.rst files in {directory}: the tiny language model trains on the dataset "
            "descriptions scikit-learn ships in sklearn/datasets/descr/; is scikit-learn "
            "installed in this interpreter's environment (it is in the project's .venv)?"
        )
    return "".join(f.read_text(encoding="utf-8") for f in files), [f.name for f in files]


@dataclass(frozen=True, eq=False)  # tensors have no boolean ==: compare by identity
class CharCorpus:
    """A character-level corpus: vocabulary, token splits and windows of ``context + 1``.

    A training sample is the window of ``context + 1`` tokens starting at a multiple of
    ``stride`` in the training split; its input is the first ``context`` tokens and its
    target the same window shifted by one.
    """

    text: str
    files: tuple[str, ...]
    vocab: tuple[str, ...]
    train_tokens: torch.Tensor
    val_tokens: torch.Tensor
    context: int
    stride: int
    sha256: str
    _stoi: dict[str, int] = field(repr=False, compare=False)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, s: str) -> torch.Tensor:
        return torch.tensor([self._stoi[c] for c in s], dtype=torch.long)

    def decode(self, tokens: torch.Tensor | list[int]) -> str:
        return "".join(self.vocab[int(t)] for t in tokens)

    @property
    def train_windows(self) -> torch.Tensor:
        """(n_samples, context + 1) view of the training tokens (no copy)."""
        return self.train_tokens.unfold(0, self.context + 1, self.stride)

    def val_windows(self) -> Batch:
        """Every non-overlapping validation window, as (inputs, targets)."""
        w = self.val_tokens.unfold(0, self.context + 1, self.context)
        return w[:, :-1], w[:, 1:]

    def fetch(self, idx: np.ndarray) -> Batch:
        w = self.train_windows[torch.from_numpy(idx)]
        return w[:, :-1].contiguous(), w[:, 1:].contiguous()

    def shards(self, seed: int, rank: int, world: int, batch_size: int) -> Shards:
        return Shards(self.fetch, self.train_windows.shape[0], batch_size, seed, rank, world)


def load_char_corpus(
    context: int = 64, stride: int = 1, val_fraction: float = 0.1, directory: Path | None = None
) -> CharCorpus:
    """The text corpus (see the module docstring), tokenised per character."""
    text, files = read_text_source(directory)
    return _corpus(text, tuple(files), context, stride, val_fraction)


@lru_cache(maxsize=4)
def _corpus(
    text: str, files: tuple[str, ...], context: int, stride: int, val_fraction: float
) -> CharCorpus:
    # The vocabulary covers the whole text so every validation character encodes.
    vocab = tuple(sorted(set(text)))
    stoi = {c: i for i, c in enumerate(vocab)}
    tokens = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    n_train = int(len(tokens) * (1.0 - val_fraction))
    train, val = tokens[:n_train], tokens[n_train:]
    if len(val) < context + 1 or len(train) < context + 1:
        raise ValueError(f"{len(text)} characters are too few for context {context}")
    return CharCorpus(
        text=text,
        files=files,
        vocab=vocab,
        train_tokens=train,
        val_tokens=val,
        context=context,
        stride=stride,
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        _stoi=stoi,
    )


def text_shards(
    seed: int, rank: int, world: int, batch_size_global: int, steps: int, start: int = 0
) -> Iterator[Batch]:
    """This rank's (input, target) token batches for ``steps`` steps (context 64)."""
    return load_char_corpus().shards(seed, rank, world, batch_size_global).iter(steps, start)
