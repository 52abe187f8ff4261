"""DBLP: a bounded-loss mode of the MRC connection (transports/core/dblp/connection.py)."""

from transports.core.dblp.connection import MAX_CHUNKS, DblpCore, LossBound

__all__ = ["MAX_CHUNKS", "DblpCore", "LossBound"]
