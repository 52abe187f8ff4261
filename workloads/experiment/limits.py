"""What this machine can hold: the bounds an experiment is held to beyond its types.

A value validation passes must not fail later, inside a worker after the fabric is
built or in an OS call:

* the global batch is drawn from the model's training set, so it can be at most its
  number of samples (:func:`train_samples`; workloads.data.Shards refuses a larger one,
  in the worker);
* modelled compute is a ``time.sleep`` per step, which overflows long before a float
  does: at most :data:`MAX_STEP_COMPUTE_MS` (one hour) of modelled compute per step;
* the name becomes the results directory ``results/NAME-YYYYmmdd-HHMMSS`` (commands/cli.py),
  one path component: at most :data:`MAX_NAME_BYTES` bytes of letters, digits, ``_``,
  ``.`` and ``-``, starting with a letter or digit (:data:`NAME`).

The training sets' sizes are worked out here without torch (experiment files are also
read by the explorer, which loads no torch), from the same sources and splits as
workloads/data.py; tests/unit/workloads/test_experiment_limits.py holds the two to the
same numbers.
"""

from __future__ import annotations

import importlib.util
import math
import re
import time
from functools import lru_cache
from pathlib import Path

__all__ = ["MAX_NAME_BYTES", "MAX_REPETITIONS", "MAX_SEED", "MAX_STEPS", "MAX_STEP_COMPUTE_MS",
           "MIN_STEP_S", "NAME", "NAME_RULE", "RESULTS_STAMP", "TextMissing",
           "duration_text", "too_long", "train_samples"]

# One path component on Linux (NAME_MAX, the same on ext4, xfs, btrfs and tmpfs).
NAME_MAX_BYTES = 255
# What `emu run` appends to the name for its results directory (commands/cli.py _out_dir).
RESULTS_STAMP = "-%Y%m%d-%H%M%S"
MAX_NAME_BYTES = NAME_MAX_BYTES - len(time.strftime(RESULTS_STAMP, time.gmtime(0)))
# ASCII only (one byte a character), no separator, not hidden, not an option.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
NAME_RULE = (f"a name of at most {MAX_NAME_BYTES} letters, digits, '_', '.' or '-', "
             "starting with a letter or digit (it names the results directory)")

MAX_STEP_COMPUTE_MS = 3_600_000.0  # one hour of modelled compute per training step

# How long a run may be asked to be, checked before anything is built. A training step on
# the emulated fabric takes at least MIN_STEP_S (the digits CNN's healthy step is ~18 ms
# on 2 cores): 100,000 steps is half an hour or more per run, 100 repetitions of it days.
MAX_STEPS = 100_000
# Seeds feed numpy (< 2**32) as seed + repetition.
MAX_SEED = 2**32 - 1
MAX_REPETITIONS = 100
MIN_STEP_S = 0.01


def duration_text(seconds: float) -> str:
    """``seconds`` in the largest unit that reads well ("3.2 days", "41 years")."""
    for unit, s in (("years", 365.25 * 86400), ("days", 86400), ("hours", 3600),
                    ("minutes", 60)):
        if seconds >= s:
            return f"{seconds / s:.3g} {unit}"
    return f"{seconds:.3g} s"


def too_long(count: int, what: str, per_item_s: float) -> str:
    """The reason a ``count`` of ``what`` is refused: the least time it would take."""
    return (f"{count:,} {what} would take at least {duration_text(count * per_item_s)} "
            "on this machine")

# workloads.data.load_digits_split: scikit-learn's bundled 1797 digits, 20 % held out
# for testing (train_test_split rounds the test part up).
_DIGITS_IMAGES = 1797
_DIGITS_TEST_FRACTION = 0.2
# workloads.models' tiny_lm: windows of 64 + 1 characters at stride 1 over the first 90 %
# of scikit-learn's dataset descriptions (workloads.data.load_char_corpus).
_TEXT_CONTEXT = 64
_TEXT_VAL_FRACTION = 0.1


class TextMissing(LookupError):
    """The text tiny_lm trains on is not installed (no scikit-learn descriptions)."""


def train_samples(model: str) -> int:
    """How many samples the training set of ``model`` has: the largest global batch.

    TextMissing for tiny_lm when its text is not where the worker will look for it."""
    if model == "digits_cnn":
        return _DIGITS_IMAGES - math.ceil(_DIGITS_IMAGES * _DIGITS_TEST_FRACTION)
    if model == "tiny_lm":
        return _text_windows()
    raise KeyError(model)


@lru_cache(maxsize=1)
def _text_windows() -> int:
    # The worker reads sklearn/datasets/descr/*.rst of this interpreter's scikit-learn;
    # find it without importing scikit-learn (seconds of scipy for one directory name).
    found = importlib.util.find_spec("sklearn")
    where = list(found.submodule_search_locations or ()) if found is not None else []
    files = sorted(Path(where[0], "datasets", "descr").glob("*.rst")) if where else []
    if not files:
        raise TextMissing("its text, scikit-learn's dataset descriptions "
                          "(sklearn/datasets/descr/*.rst), is not installed in this "
                          "interpreter's environment (it is in the project's .venv)")
    chars = sum(len(f.read_text(encoding="utf-8")) for f in files)
    return int(chars * (1.0 - _TEXT_VAL_FRACTION)) - _TEXT_CONTEXT
