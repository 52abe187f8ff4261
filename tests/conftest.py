"""Shared pytest configuration.

The ``root`` marker is declared in pyproject.toml; here we only decide when tests
carrying it are skipped. They need root (network namespaces, veth, tc, FRR), so
they are skipped for an unprivileged user and run whenever we are root,
including CI, which runs as root with CI set.
"""

import os

import pytest

ROOT_SKIP_REASON = "needs root (run as root: sudo make test)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.geteuid() == 0:
        # Root, with or without CI set: root tests run, never skipped here.
        return
    skip_root = pytest.mark.skip(reason=ROOT_SKIP_REASON)
    for item in items:
        if item.get_closest_marker("root") is not None:
            item.add_marker(skip_root)
