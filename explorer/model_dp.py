"""Data parallelism of one step, on columns: the gradient reduction and parameter
gathers each ZeRO stage needs, flat or hierarchical across DCs, and what is left exposed.

Over the n = DP x CP ranks holding the same parameters: replicated, all-reduce of the
gradients once per step; zero1, reduce-scatter of the gradients and all-gather of bf16
parameters once per step; zero2, reduce-scatter every microbatch (the gradients are
kept sharded), one all-gather per step; zero3, every microbatch an all-gather of the
parameters for the forward and the backward (and the recomputed forward) and a
reduce-scatter. Sharded over the DP group, or inside each DC when the reduction is
hierarchical (HSDP: sharded inside, replicated across). A flat ring across DCs pays
every DCI hop's latency and the DCI share of one ring; hierarchical = intra-DC
reduce-scatter, inter-DC all-reduce of each rank's share, intra-DC all-gather. With
``overlap`` a once-per-step reduction hides behind the last microbatch's backward and
the gather behind the next step's first forward, per-microbatch ones behind the step's
computation after them, forward and backward (their computation only: communication that
also waits on the network hides nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from explorer.model_terms import PACKET_BYTES
from explorer.netcost import allreduce, ring_pass

__all__ = ["data_parallel", "dci_loss_delay"]


def dci_loss_delay(loss: Any, size: Any, k_rtts: Any, rtt_x: Any, tolerant: Any) -> Any:
    """Expected recovery a message of ``size`` bytes pays on a DCI losing ``loss`` of its
    packets (DBLP's bounded rounds do not recover)."""
    if np.ndim(loss) == 0 and loss <= 0:
        return 0.0  # a lossless DCI everywhere: nothing to compute
    packets = np.maximum(1.0, size / PACKET_BYTES)
    val = (1.0 - (1.0 - loss) ** packets) * k_rtts * rtt_x
    return np.where((loss <= 0) | tolerant, 0.0, val)


def data_parallel(c: dict[str, Any], d: dict[str, Any], net: dict[str, Any], p_gpu: Any,
                  n: Any, n_in: Any, hier: Any, opt: Any, dblp: Any, loss_k: Any,
                  fwd: Any, bwd: Any) -> tuple[Any, Any, Callable[[Any], Any]]:
    """Seconds of the step's gradient reductions (``red``) and parameter gathers
    (``ag``), and ``exposed(scale)``: what is left exposed when they take ``scale`` x as
    long (module docstring)."""
    k, mb = d["k"], d["mb"]
    bw_nic, dci_gpu, overhead = net["bw_nic"], net["dci_gpu"], net["overhead"]
    lat_x = c["dci.delay_ms"] * 1e-3
    rtt_x = 2 * lat_x + net["rtt"]
    loss = c["dci.loss"]
    bw_flat = np.where(k > 1, np.minimum(bw_nic, n_in * dci_gpu), bw_nic)
    bw_hier = np.minimum(bw_nic, dci_gpu)
    ring_lat = np.where(k > 1, k * lat_x, 0.0)
    full = opt == 0

    def lossy(size: Any, tolerant: Any) -> Any:
        return dci_loss_delay(loss, size, loss_k, rtt_x, tolerant)

    def reduce(size: Any, tolerant: Any) -> Any:
        """All-reduce (replicated) or its reduce-scatter half."""
        rs_in = ring_pass(size, n_in, bw_nic, 0.0, overhead)
        x = allreduce(size / n_in, k, bw_hier, k * lat_x, overhead) \
            + 2 * (k - 1) * lossy(size / n_in / k, tolerant)
        h_val = rs_in + x + np.where(full, rs_in, 0.0)
        once = ring_pass(size, n, bw_flat, ring_lat, overhead)
        f_val = once * np.where(full, 2.0, 1.0) + np.where(
            k > 1, 2 * (k - 1) * lossy(size / n, tolerant), 0.0)
        return np.where(hier, h_val, f_val)

    def gather(size: Any) -> Any:
        """Parameter all-gather; hierarchical: sharded inside a DC, so it stays inside."""
        h_val = ring_pass(size, n_in, bw_nic, 0.0, overhead)
        f_val = ring_pass(size, n, bw_flat, ring_lat, overhead) + np.where(
            k > 1, (k - 1) * lossy(size / n, False), 0.0)
        return np.where(hier, h_val, f_val)

    one_red = reduce(p_gpu * c["schedule.grad_bytes"], dblp)
    one_ag = gather(p_gpu * 2.0)
    per_mb = opt >= 2
    passes = np.where(c["schedule.recompute"] == 2, 3.0, 2.0)
    single = n == 1
    red = np.where(single, 0.0, np.where(per_mb, mb * one_red, one_red))
    ag = np.where(single | full, 0.0, np.where(opt == 3, mb * one_ag * passes, one_ag))
    overlap = c["schedule.overlap"] == 1

    def exposed(scale: Any) -> Any:
        # A collective issued every microbatch overlaps every later microbatch's
        # computation, forward or backward; one issued once per step only the last
        # backward (the reduction) or the first forward (the gather).
        hid = np.where(
            opt == 3, np.maximum(0.0, scale * (red + ag) - mb * (fwd + bwd)),
            np.maximum(0.0, scale * red - np.where(per_mb, mb * (fwd + bwd), bwd))
            + np.maximum(0.0, scale * ag - fwd))
        return np.where(overlap, hid, scale * (red + ag))

    return red, ag, exposed
