"""Node roles of a multi-plane Clos fabric (and of the DCI routers joining several)."""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    """What a node is; the ``str`` values are what Mininet nodes carry as ``role``.

    A ``StrEnum`` (i.e. ``str`` + ``Enum``) so ``Role.LEAF == "leaf"`` and
    ``f"{Role.LEAF}"`` gives ``leaf`` rather than ``Role.LEAF``.
    """

    HOST = "host"
    LEAF = "leaf"
    SPINE = "spine"
    DCI = "dci"  # a ScaleAcross DCI router: one per (DC, plane), joins DCs
