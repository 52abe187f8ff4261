"""The models the training workloads train, and what a training loop needs to train them.

Two models, both plain ``nn.Module``, small enough that a worker (one CPU thread
per emulated host) does a step in milliseconds, so the network, not the compute,
dominates what the emulator measures:

* ``DigitsCNN``: two 3x3 convolutions and a linear classifier for 1x8x8 digit
  images, 10 classes (9,930 parameters).
* ``TinyLM``: a causal transformer over characters (2 pre-norm layers, d_model
  64, 4 heads, context 64; about 116k parameters with the 92-character
  vocabulary of scikit-learn 1.9's dataset descriptions).

Neither has dropout or batch normalisation, on purpose: both make a step depend
on more than the global batch (an RNG stream, or statistics of each rank's local
slice), and then data-parallel training over several workers would no longer
compute what one process computes on the same global batch. For the same reason
the LM's output layer is not tied to its embedding: a tied weight would belong to
the first and the last pipeline stage at once.

``build(name, seed)`` returns ``(model, task)``; the ``Task`` carries the data,
the loss, the optimizer, the evaluation and the target metric, so a training
loop (single process, data-parallel or pipelined) needs no model-specific code.
``split_stages`` cuts a model into pipeline stages made of the model's own
submodules: composing them is the model's forward, exactly, and their
parameters are the model's parameters (no copies).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

import torch
import torch.nn.functional as F
from torch import nn

from workloads.data import (
    CharCorpus,
    DigitsData,
    Shards,
    load_char_corpus,
    load_digits_split,
)

# ---------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------


class DigitsCNN(nn.Module):
    """(N, 1, 8, 8) images in [0, 1] -> (N, 10) class logits.

    Its forward is its three blocks in order (``blocks()``), which is what
    ``split_stages`` cuts along.
    """

    def __init__(self, width1: int = 16, width2: int = 32, n_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Sequential(nn.Conv2d(1, width1, 3, padding=1), nn.ReLU())
        self.conv2 = nn.Sequential(
            nn.Conv2d(width1, width2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(width2 * 4 * 4, n_classes))

    def blocks(self) -> list[nn.Module]:
        return [self.conv1, self.conv2, self.classifier]

    def stage_groups(self, n_stages: int) -> list[list[nn.Module]]:
        """Default cut: 2 stages = convolutions | classifier (the cut with the smallest
        activation, 512 floats a sample); 3 stages = one block each."""
        b = self.blocks()
        if n_stages == 2:
            return [b[:2], b[2:]]
        return _even_groups(b, n_stages)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks():
            x = block(x)
        return x


class TokenEmbedding(nn.Module):
    """(N, T) token ids -> (N, T, d_model): token plus learned position embeddings."""

    def __init__(self, vocab_size: int, context: int, d_model: int) -> None:
        super().__init__()
        self.context = context
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(context, d_model)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        if t > self.context:
            raise ValueError(f"sequence of {t} tokens exceeds the context of {self.context}")
        return self.tok(idx) + self.pos(torch.arange(t, device=idx.device))


class CausalBlock(nn.Module):
    """One pre-norm transformer layer that attends only to earlier positions.

    The causal mask is made here from the input's length, so a block is a
    self-contained pipeline stage element: (N, T, d) -> (N, T, d).
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(
            d_model,
            n_heads,
            dim_feedforward=d_ff,
            dropout=0.0,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        t = h.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=h.device, dtype=h.dtype)
        return self.layer(h, src_mask=mask, is_causal=True)


class LMHead(nn.Module):
    """(N, T, d_model) -> (N, T, vocab) next-token logits."""

    def __init__(self, d_model: int, vocab_size: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.out = nn.Linear(d_model, vocab_size)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(h))


class TinyLM(nn.Module):
    """(N, T) character ids, T <= context -> (N, T, vocab) logits for the next character."""

    def __init__(
        self,
        vocab_size: int,
        context: int = 64,
        d_model: int = 64,
        n_heads: int = 4,
        n_layers: int = 2,
        d_ff: int = 256,
    ) -> None:
        super().__init__()
        self.context = context
        self.embed = TokenEmbedding(vocab_size, context, d_model)
        self.layers = nn.ModuleList(CausalBlock(d_model, n_heads, d_ff) for _ in range(n_layers))
        self.head = LMHead(d_model, vocab_size)

    def blocks(self) -> list[nn.Module]:
        return [self.embed, *self.layers, self.head]

    def stage_groups(self, n_stages: int) -> list[list[nn.Module]]:
        """Default cut: the transformer layers shared evenly (earlier stages take the
        remainder), the embedding on the first stage and the head on the last, since
        neither costs much compute. With one stage more than layers, the head is a
        stage of its own (2 layers, 3 stages: embed+layer0 | layer1 | head)."""
        n_layers = len(self.layers)
        if n_stages == n_layers + 1:
            groups = _even_groups(list(self.layers), n_layers) + [[]]
        elif n_stages <= n_layers:
            groups = _even_groups(list(self.layers), n_stages)
        else:
            raise ValueError(
                f"TinyLM with {n_layers} layers splits into at most {n_layers + 1} stages, "
                f"not {n_stages}"
            )
        groups[0].insert(0, self.embed)
        groups[-1].append(self.head)
        return groups

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = idx
        for block in self.blocks():
            h = block(h)
        return h


MODELS: dict[str, type[nn.Module]] = {"digits_cnn": DigitsCNN, "tiny_lm": TinyLM}


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------------------
# Pipeline stages
# ---------------------------------------------------------------------------


def _even_groups(items: list[nn.Module], n: int) -> list[list[nn.Module]]:
    """``items`` in ``n`` contiguous non-empty groups whose sizes differ by at most one."""
    if not 1 <= n <= len(items):
        raise ValueError(f"cannot split {len(items)} blocks into {n} stages")
    q, r = divmod(len(items), n)
    out, i = [], 0
    for k in range(n):
        size = q + (1 if k < r else 0)
        out.append(items[i : i + size])
        i += size
    return out


def split_stages(
    model_name: str, model: nn.Module, n_stages: int, cuts: Sequence[int] | None = None
) -> list[nn.Module]:
    """Cut ``model`` into ``n_stages`` sequential stages (``nn.Sequential`` of its blocks).

    ``stages[-1](...stages[1](stages[0](x)))`` is ``model(x)`` bit for bit, and the
    stages hold the model's own parameter tensors (training a stage trains the model).
    ``cuts`` overrides the model's default cut: the indices in ``model.blocks()``
    where stages 1..n-1 begin (DigitsCNN: conv1, conv2, classifier; TinyLM:
    embed, layer 0..L-1, head).
    """
    cls = MODELS.get(model_name)
    if cls is None:
        raise KeyError(f"unknown model {model_name!r}; known: {sorted(MODELS)}")
    if not isinstance(model, cls):
        raise TypeError(f"{model_name!r} is a {cls.__name__}, got {type(model).__name__}")
    if n_stages < 1:
        raise ValueError(f"n_stages must be >= 1, got {n_stages}")
    blocks = model.blocks()  # type: ignore[operator]
    if n_stages == 1:
        groups = [blocks]
    elif cuts is not None:
        bounds = [0, *cuts, len(blocks)]
        if len(cuts) != n_stages - 1 or any(a >= b for a, b in pairwise(bounds)):
            raise ValueError(
                f"cuts {list(cuts)} do not split {len(blocks)} blocks into {n_stages} stages"
            )
        groups = [blocks[a:b] for a, b in pairwise(bounds)]
    else:
        groups = model.stage_groups(n_stages)  # type: ignore[operator]
    return [nn.Sequential(*g) for g in groups]


# ---------------------------------------------------------------------------
# Tasks
# ---------------------------------------------------------------------------


Evaluate = Callable[[nn.Module], dict[str, float]]


@dataclass
class Task:
    """What a training loop needs to train a model without knowing which one it is.

    ``loss_fn(output, target)`` is the mean loss over the batch (apply it to the last
    pipeline stage's output); ``evaluate(model)`` takes the full model or
    ``nn.Sequential(*stages)`` and returns the held-out metrics, ``metric`` among
    them, compared with ``target`` (reached when >= for "accuracy", <= for "loss").
    ``optimizer(params)`` is elementwise per parameter (no global norm), so one
    optimizer per pipeline stage does what one optimizer over the model does.
    """

    name: str
    seed: int
    data: DigitsData | CharCorpus
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    evaluate: Evaluate
    metric: str
    higher_is_better: bool
    target: float
    batch_size: int
    optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]

    def shards(self, rank: int = 0, world: int = 1, batch_size: int | None = None) -> Shards:
        """This rank's training batches; the global batch sequence is a function of ``seed``."""
        return self.data.shards(self.seed, rank, world, batch_size or self.batch_size)

    def reached(self, metrics: dict[str, float]) -> bool:
        value = metrics[self.metric]
        return value >= self.target if self.higher_is_better else value <= self.target


def _eval_mode(fn: Evaluate) -> Evaluate:
    """Run ``fn`` without gradients in eval mode, restoring the model's mode afterwards."""

    def wrapped(model: nn.Module) -> dict[str, float]:
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                return fn(model)
        finally:
            model.train(was_training)

    wrapped.__doc__ = fn.__doc__
    return wrapped


def lm_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over every position of the batch."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def _digits_task(seed: int, split_seed: int) -> tuple[nn.Module, Task]:
    data = load_digits_split(split_seed)
    model = DigitsCNN()

    @_eval_mode
    def evaluate(m: nn.Module) -> dict[str, float]:
        """Accuracy and mean cross-entropy on the whole test split (360 images)."""
        logits = m(data.test_x)
        acc = (logits.argmax(1) == data.test_y).float().mean().item()
        return {"accuracy": acc, "loss": F.cross_entropy(logits, data.test_y).item()}

    task = Task(
        name="digits_cnn",
        seed=seed,
        data=data,
        loss_fn=F.cross_entropy,
        evaluate=evaluate,
        metric="accuracy",
        higher_is_better=True,
        target=0.95,
        batch_size=64,
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
    )
    return model, task


def _lm_task(seed: int, split_seed: int) -> tuple[nn.Module, Task]:
    del split_seed  # the text split is positional (the last 10 % validates)
    corpus = load_char_corpus(context=64)
    model = TinyLM(corpus.vocab_size, context=corpus.context)
    val_x, val_y = corpus.val_windows()

    @_eval_mode
    def evaluate(m: nn.Module) -> dict[str, float]:
        """Mean next-character loss and perplexity over every non-overlapping
        validation window (67 x 64 characters with scikit-learn 1.9's text)."""
        loss = lm_loss(m(val_x), val_y).item()
        return {"loss": loss, "perplexity": math.exp(loss)}

    task = Task(
        name="tiny_lm",
        seed=seed,
        data=corpus,
        loss_fn=lm_loss,
        evaluate=evaluate,
        metric="loss",
        higher_is_better=False,
        # Validation loss bottoms out near 2.0 around step 900 (seeds 0-2, batch 16) and
        # then rises: 116k parameters overfit 39 kB of text. 2.1 is reached by ~step 750.
        target=2.1,
        batch_size=16,
        optimizer=lambda params: torch.optim.Adam(params, lr=3e-3),
    )
    return model, task


_TASKS: dict[str, Callable[[int, int], tuple[nn.Module, Task]]] = {
    "digits_cnn": _digits_task,
    "tiny_lm": _lm_task,
}


def build(
    name: str, seed: int, *, split_seed: int = 0, deterministic: bool = True
) -> tuple[nn.Module, Task]:
    """A freshly initialised model (a function of ``seed`` only) and its task.

    ``seed`` also orders the training batches (``task.shards``); ``split_seed`` picks
    the digits train/test split, kept fixed by default so that runs with different
    seeds are scored on the same test images. ``deterministic`` turns on
    ``torch.use_deterministic_algorithms`` for the process (free on CPU, where
    every op we use has a deterministic kernel; warn-only so that an op without
    one degrades to a warning instead of failing a worker).
    """
    if name not in _TASKS:
        raise KeyError(f"unknown model {name!r}; known: {sorted(MODELS)}")
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
    # Loading the data draws from no torch RNG, so the parameters depend on seed alone.
    torch.manual_seed(seed)
    return _TASKS[name](seed, split_seed)
