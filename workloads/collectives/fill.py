"""What a bounded-loss round does with the chunks that did not arrive (fill policies).

A DBLP round completes with ``Completion.missing``: the indices of the chunks
(``offset // mtu_payload``, one packet's payload each) that were never placed.
The receiver's buffer keeps, for those chunks, whatever it held before the
round; a fill policy decides what the training step sees there:

``zeros``
    write zeros into the missing chunks (the DBLP prototype and MLT). Cheap and
    stateless, but biased: every round the aggregate loses the mass of the
    dropped chunks, so the update shrinks by about the loss fraction.
``previous``
    keep the previous round's values (LTP's "bubble filling"): the caller passes
    the previous round's buffer, or reuses the same buffer, whose stale bytes
    then simply stay. No mass is lost, but the value is one round stale and it is
    applied a second time (double counted) when gradients are summed over rounds.
``error_feedback`` (the default)
    the receiver writes zeros this round and the *sender* keeps the values it
    could not deliver (``ErrorFeedback``: a per-chunk residual) and adds them to
    its next round's gradient. Nothing is lost and nothing is counted twice:
    over rounds the sum of the applied updates equals the sum of the gradients,
    each dropped value arriving one round late (the compressed-SGD error-feedback
    argument). This keeps the aggregation unbiased over time, which Weintraub et
    al. found is what makes 10 % packet loss nearly free, while ``previous``
    trades bias for staleness and ``zeros`` for a systematic shrink. It needs
    the sender to know exactly what was missing: DBLP's STOP carries the
    receiver's chunk bitmap, so the send completion's ``missing`` is exact.

Buffers are bytes-like (bytearray, memoryview, numpy arrays); values are
float32 for error feedback, so ``mtu_payload`` must be a multiple of 4 there.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

FILLS = ("zeros", "previous", "error_feedback")
DEFAULT_FILL = "error_feedback"


def check_fill(name: str) -> str:
    """``name`` if it is a fill policy; ValueError naming the valid ones otherwise."""
    if name not in FILLS:
        raise ValueError(f"unknown fill policy {name!r}: valid are {', '.join(FILLS)}")
    return name


def chunk_ranges(missing: Iterable[int], nbytes: int, mtu: int) -> list[tuple[int, int]]:
    """Byte ranges [start, end) of the chunks ``missing`` in a message of ``nbytes``."""
    if mtu < 1:
        raise ValueError(f"mtu_payload={mtu} must be >= 1")
    nchunks = max(1, -(-nbytes // mtu))
    out = []
    for i in missing:
        if not 0 <= i < nchunks:
            raise ValueError(f"chunk index {i} outside 0..{nchunks - 1} "
                             f"(message of {nbytes} bytes, {mtu} per chunk)")
        out.append((i * mtu, min((i + 1) * mtu, nbytes)))
    return out


def _bytes_view(buf: object) -> memoryview:
    view = memoryview(buf)  # type: ignore[arg-type]
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    return view


def fill_missing(buf: object, missing: Sequence[int], mtu: int, policy: str = DEFAULT_FILL,
                 previous: object | None = None) -> int:
    """Apply a receiver-side fill policy to the ``missing`` chunks of ``buf``; bytes written.

    ``zeros`` and ``error_feedback`` write zeros (with error feedback the sender
    re-sends the values next round). ``previous`` copies those chunks from
    ``previous`` (the previous round's buffer, same length) or, with
    ``previous=None``, leaves the reused buffer's old bytes in place.
    """
    check_fill(policy)
    view = _bytes_view(buf)
    ranges = chunk_ranges(missing, len(view), mtu)
    if policy == "previous":
        if previous is None:
            return 0
        prev = _bytes_view(previous)
        if len(prev) != len(view):
            raise ValueError(f"previous buffer of {len(prev)} bytes for {len(view)}")
        for s, e in ranges:
            view[s:e] = prev[s:e]
    else:
        for s, e in ranges:
            view[s:e] = bytes(e - s)
    return sum(e - s for s, e in ranges)


class ErrorFeedback:
    """Sender side of ``error_feedback``: the values a round did not deliver, per chunk.

        ef = ErrorFeedback(grad.size, mtu_payload)
        send = ef.next(grad)             # this round's gradient plus last round's residual
        ... post_send(send.tobytes()) ... completion c
        ef.apply(send, c.missing)        # keep what did not arrive, for the next round

    ``residual`` is one float32 array; ``chunk(i)`` is a view of chunk i's part.
    """

    def __init__(self, n_values: int, mtu: int) -> None:
        if mtu < 4 or mtu % 4:
            raise ValueError(f"mtu_payload={mtu} must be a positive multiple of 4 (float32)")
        if n_values < 0:
            raise ValueError(f"n_values={n_values} must be >= 0")
        self.mtu = mtu
        self.per_chunk = mtu // 4
        self.residual = np.zeros(n_values, dtype=np.float32)
        self.nchunks = max(1, -(-n_values // self.per_chunk))

    def chunk(self, i: int) -> np.ndarray:
        """Chunk ``i``'s slice of the residual (a view)."""
        k = self.per_chunk
        return self.residual[i * k:(i + 1) * k]

    def _values(self, grad: object) -> np.ndarray:
        if isinstance(grad, np.ndarray):
            arr = grad.reshape(-1)
            if arr.dtype != np.float32:
                raise ValueError(f"gradient dtype {arr.dtype}: float32 expected")
        else:
            arr = np.frombuffer(_bytes_view(grad), dtype=np.float32)
        if arr.size != self.residual.size:
            raise ValueError(f"gradient of {arr.size} values for a residual of "
                             f"{self.residual.size}")
        return arr

    def apply(self, grad_bytes: object, missing: Sequence[int]) -> None:
        """The round that sent ``grad_bytes`` (what ``next`` returned) lost ``missing``:
        the residual becomes exactly those values (zero elsewhere)."""
        sent = self._values(grad_bytes)
        self.residual[:] = 0.0
        for i in missing:
            if not 0 <= i < self.nchunks:
                raise ValueError(f"chunk index {i} outside 0..{self.nchunks - 1}")
            k = self.per_chunk
            self.residual[i * k:(i + 1) * k] = sent[i * k:(i + 1) * k]

    def next(self, grad: object) -> np.ndarray:
        """This round's values to send: ``grad`` plus the residual (a new float32 array);
        the residual is then cleared (it travels in the returned array)."""
        out = self._values(grad).astype(np.float32, copy=True)
        out += self.residual
        self.residual[:] = 0.0
        return out
