"""The registry of claim kinds: a claim file's ``kind`` -> the module-level ``KIND`` of
its claim module. Each claim module keeps its heavy imports (fabric, transports,
explorer) inside ``run``, so listing and checking claims stays fast and needs no root."""

from __future__ import annotations

from collections.abc import Mapping

from commands.reproduce.claim import ClaimKind
from commands.reproduce.claim_dblp import KIND as DBLP
from commands.reproduce.claim_explorer import KIND as EXPLORER
from commands.reproduce.claim_failures import KIND as FAILURES
from commands.reproduce.claim_spraying import KIND as SPRAYING

KINDS: Mapping[str, ClaimKind] = {k.name: k for k in (FAILURES, SPRAYING, DBLP, EXPLORER)}
