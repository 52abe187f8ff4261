"""The cost model's constants (explorer/model.py's docstring says what each term means)."""

from __future__ import annotations

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
# and window halving), by transport code (spec.TRANSPORTS: mrc, rc, rc_lossy, tcp).
LOSS_RECOVERY_RTTS = (1.0, 2.0, 2.0, 2.0)
# A checkpoint holds bf16 weights and the fp32 master weights and Adam moments: 2 + 12
# bytes per parameter (Narayanan et al. 2021, §5.10: 13.8 TB for the 1T model).
CHECKPOINT_BYTES_PER_PARAM = 14.0
