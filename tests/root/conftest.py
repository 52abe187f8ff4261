"""Fixtures of the root-only fabric tests: one small two-plane fabric per module.

Run these tests inside a throwaway network namespace, e.g.
``sudo unshare --net .venv/bin/python -m pytest tests/root``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from emu.fabric import Fabric
from topologies import MultiPlaneClos

# 2 planes x 2 spines x 4 leaves x 2 hosts: 8 hosts in 4 racks, 16 switches.
SHARED_SPEC = MultiPlaneClos(planes=2, spines=2, leaves=4, hosts_per_leaf=2)
SHARED_NAME = "roottest"


@pytest.fixture(scope="module")
def fabric() -> Iterator[Fabric]:
    """One running fabric shared by the traffic tests of a module."""
    with Fabric(SHARED_SPEC, name=SHARED_NAME) as fab:
        yield fab
