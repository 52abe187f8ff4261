"""Time of the collectives the model uses, as pure formulas (scalars or numpy arrays).

A ring pass (reduce-scatter or all-gather) over ``n`` ranks moves (n-1)/n of the message
through every rank's link and makes n-1 dependent steps; a step's chunk travels one hop,
so the chain of steps pays a message's time per step (``overhead_s``: the calibrated
post-to-placed intercept, which includes an intra-DC hop's latency) and, on average,
(n-1)/n of what the ring's slower hops add on top (``ring_latency_s``: the DCI delays
of the hops that cross DCs)::

    pass(S, n) = (n-1)/n * (S / bw + ring_latency_s) + (n-1) * overhead_s
    all-reduce = 2 passes (nccl-tests' 2(n-1)/n bus-bandwidth factor)

The hierarchical all-reduce across ``k`` DCs with ``n_in`` ranks of a group in each DC is
an intra-DC reduce-scatter, an all-reduce of each rank's 1/n_in share across the DCs
(n_in rings in parallel, one hop across the DCI each), and an intra-DC all-gather.

These work elementwise on numpy arrays as well as on floats (no branches), so the
scalar reference model and the vectorised one share the arithmetic and differ only in
how they choose between cases.
"""

from __future__ import annotations

from typing import Any

__all__ = ["allreduce", "hierarchical_allreduce", "ring_pass"]

Num = Any  # float or numpy array


def ring_pass(size: Num, n: Num, bw: Num, ring_latency_s: Num, overhead_s: Num) -> Num:
    """One reduce-scatter or all-gather of ``size`` bytes over ``n`` ranks (0 when n == 1)."""
    return (n - 1) / n * (size / bw + ring_latency_s) + (n - 1) * overhead_s


def allreduce(size: Num, n: Num, bw: Num, ring_latency_s: Num, overhead_s: Num) -> Num:
    """Ring all-reduce: reduce-scatter then all-gather."""
    return 2.0 * ring_pass(size, n, bw, ring_latency_s, overhead_s)


def hierarchical_allreduce(size: Num, n_in: Num, k: Num, bw_in: Num, bw_x: Num,
                           lat_in: Num, lat_x: Num, overhead_s: Num) -> Num:
    """Intra-DC reduce-scatter + inter-DC all-reduce of 1/n_in + intra-DC all-gather.

    ``lat_in`` / ``lat_x``: what an intra-DC hop / a DCI hop adds to ``overhead_s``.
    """
    intra = ring_pass(size, n_in, bw_in, n_in * lat_in, overhead_s)
    inter = allreduce(size / n_in, k, bw_x, k * lat_x, overhead_s)
    return 2.0 * intra + inter
