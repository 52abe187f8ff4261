"""DBLP: a bounded-loss mode of the MRC connection (transports/core/dblp/connection.py)."""

from transports.core.dblp.connection import CLOSES, MAX_CHUNKS, DblpCore, LossBound

__all__ = ["CLOSES", "MAX_CHUNKS", "DblpCore", "LossBound"]
