"""The topology modules' name for :mod:`topologies.validate` (the one numeric validator).

Kept so their imports stay as they are; code outside the topology modules imports
``topologies.validate``.
"""

from __future__ import annotations

from topologies.validate import MAX_QUEUE_PACKETS, MAX_RATE_MBIT, check_int, check_number

__all__ = ["MAX_QUEUE_PACKETS", "MAX_RATE_MBIT", "check_int", "check_number"]
