"""The cost model's constants and small per-term formulas (explorer/model.py's docstring
says what each term means).

Shared by the readable model (explorer/model.py) and its vectorised twin
(explorer/vecmodel.py), which must agree to 1e-9: a constant changed here changes both.
"""

from __future__ import annotations

import math

from explorer.calibration import TailPoint, TransportCal, tail_at
from explorer.spec import Config

# Element-wise traffic per layer and forward pass, bf16: two layer norms (read + write
# s b h each), two dropouts (read, write, 1-byte mask), two residual adds, the MLP's
# activation function over 4h: 46 bytes per token and hidden unit, of which the
# activation function's 16 run inside the TP-sharded MLP.
EW_TOKEN_BYTES = 46.0
EW_TOKEN_BYTES_MLP = 16.0
# Materialised attention scores (no FlashAttention): softmax and dropout read and write
# the a s^2 b matrix, plus the dropout mask.
EW_SCORE_BYTES = 13.0
# Output layer: logits written, read by the softmax, fp32 softmax written (per token x V).
EW_LOGIT_BYTES = 10.0
NVLINK_LATENCY_S = 3e-6  # one NVLink hop, one collective step
ONE_WAY_RTTS = 0.5  # the least a message can take beyond serialisation, in RTTs
FRAME_BYTES = 4096 + 82  # a RoCE v2 frame at full scale: 4 KiB MTU and its headers
OPT_BYTES_PER_PARAM = 32.0  # optimizer step traffic per parameter of the shard (fp32 Adam)
PACKET_BYTES = 4096  # RoCE MTU: a message of S bytes is S / 4096 packets on a lossy DCI
# Random loss on the DCI: round trips a reliable transport spends per lost packet
# (MRC: selective retransmission on another path; RC: go-back-N; TCP: fast retransmit
# and window halving).
LOSS_RECOVERY_RTTS = {"mrc": 1.0, "rc": 2.0, "tcp": 2.0}


def flows_per_uplink(transport: str, qps: float, planes: float) -> float:
    """Where a transport's load balance is read on its calibrated curve: flows x lanes per
    leaf uplink over all planes (workloads/calibration/record.py). A GPU's connection has ``qps``
    flows per plane (MRC, RC) and a non-blocking leaf one uplink per host port, so that is
    ``qps``; a TCP connection is one flow on one plane: qps / planes."""
    return qps / planes if transport == "tcp" else qps


def message_overhead(tc: TransportCal, band: str, rtt: float, plane_gbit: float) -> float:
    """A message's time beyond its serialisation, at full scale: half an RTT plus the
    calibrated excess in frame times (store-and-forward fill, window ramp), when the
    calibration says its frame time; else its intercept in RTTs (at least half an RTT)."""
    if tc.overhead_frames is not None:
        frame = FRAME_BYTES * 8 / (plane_gbit * 1e9)
        return ONE_WAY_RTTS * rtt + tc.overhead_frames.pick(band, worse_is_high=True) * frame
    return max(tc.overhead_rtts.pick(band, worse_is_high=True), ONE_WAY_RTTS) * rtt


def burst_hit(rate_hz: float, ports: float, seconds: float) -> float:
    """Probability that a round of ``seconds`` over ``ports`` meets a microburst."""
    return 1.0 - math.exp(-rate_hz * ports * seconds)


def activation_bytes(cfg: Config) -> float:
    """Activation bytes one layer keeps per microbatch on one GPU (Korthikanti et al.)."""
    m, pl, sch = cfg.model, cfg.placement, cfg.schedule
    t, c = pl.tp, pl.cp
    sbh = m.seq * pl.microbatch * m.hidden / c
    scores = 0.0 if (m.flash_attention or sch.recompute != "none") else \
        5.0 * m.heads * m.seq / m.hidden / t
    if sch.recompute == "full":
        return 2.0 * sbh / (t if sch.sequence_parallel else 1)
    if sch.sequence_parallel:
        return sbh * (34.0 / t + scores)
    return sbh * (10.0 + 24.0 / t + scores)




def tail_factor(tails: tuple[TailPoint, ...], cfg: Config, band: str) -> float:
    """Tail inflation at the fabric's burst geometry (length in RTTs, excess / buffer)."""
    f = cfg.fabric
    return tail_at(tails, f.burst_us / f.rtt_us, f.burst_excess_kib / f.buffer_kib, band)
