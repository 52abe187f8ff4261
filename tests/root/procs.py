"""What the root tests share about processes and the smallest experiment they run."""

from __future__ import annotations

import os
from pathlib import Path


def process_tree(pid: int) -> set[int]:
    """``pid`` and every process descended from it."""
    parent: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            parent[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    tree, grew = {pid}, True
    while grew:
        more = {c for c, p in parent.items() if p in tree} - tree
        tree |= more
        grew = bool(more)
    return tree


def small_run(name: str, steps: int = 8, extra: str = "") -> str:
    """The smallest training experiment: 2 workers on a 2 x 2 x 2 x 1 fabric (a few
    seconds a run); ``extra`` is appended to its [workload] table."""
    return (f'name = "{name}"\nseed = 1\n[fabric]\nplanes = 2\nspines = 2\nleaves = 2\n'
            f'hosts_per_leaf = 1\n[workload]\nmodel = "digits_cnn"\nworkers = 2\n'
            f'steps = {steps}\nbatch_size = 32\n{extra}')
