"""A progress bar for long runs: one redrawn line on a terminal, a line per 10 % otherwise."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable


class Progress:
    """``update(done)`` as steps finish; ``note(key=value)`` adds figures to the line."""

    def __init__(self, title: str, total: int, say: Callable[[str], None] = print,
                 width: int = 24) -> None:
        self.title, self.total, self.say, self.width = title, max(1, total), say, width
        self.tty = sys.stderr.isatty()
        self.done = 0
        self.figures: dict[str, float | None] = {}
        self.t0 = time.monotonic()
        self._last_decile = -1
        self._lock = threading.Lock()

    def note(self, **figures: float | None) -> None:
        with self._lock:
            self.figures.update(figures)

    def update(self, done: int, **figures: float | None) -> None:
        with self._lock:
            self.done = done
            self.figures.update(figures)
            line = self._line()
            if self.tty:
                sys.stderr.write("\r" + line)
                sys.stderr.flush()
            else:
                decile = 10 * done // self.total
                if decile != self._last_decile:
                    self._last_decile = decile
                    self.say(line)

    def _line(self) -> str:
        frac = self.done / self.total
        bar = "#" * int(frac * self.width)
        figs = " ".join(f"{k} {v:.3g}" for k, v in self.figures.items()
                        if isinstance(v, int | float))
        return (f"  {self.title} [{bar:<{self.width}}] {self.done}/{self.total} "
                f"{time.monotonic() - self.t0:5.1f} s {figs}")

    def close(self) -> None:
        if self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()
