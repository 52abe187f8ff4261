"""What one full-scale training configuration is: frozen, validated sections.

A :class:`Config` is one point of the design space: the model, the GPU, the cluster,
the fabric, the DC interconnect, the parallelism placement, the schedule, the network
technology and the prices. Every field is declared once, here, with its default, its
valid range and a one-line description (``dataclasses.field(metadata=...)``); the
explore-file reader (explorer/specfile.py), the command-line ``--set`` and the
vectorised model's columns (explorer/columns.py) all take their vocabulary from these
declarations, so a key cannot exist in one place and not in another.

Units: times in the unit their name says (``_ms``, ``_us``, ``_s``, ``_hours``), rates in
Gbit/s (network) or GByte/s (NVLink, HBM in TByte/s), sizes in GiB (HBM) or KiB
(buffers), FLOP/s in TFLOP/s, money in the currency of ``[cost]``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

__all__ = [
    "CROSS", "MLPS", "OPTIMIZERS", "PIPELINES", "RECOMPUTES", "REDUCTIONS", "SECTIONS",
    "TRANSPORTS", "Check", "Cluster", "Config", "Cost", "Dci", "FabricSection", "Gpu", "Model",
    "Network", "Placement", "Schedule", "SpecError", "check_value", "field_check",
    "section_fields",
]

PIPELINES = ("gpipe", "1f1b", "interleaved")
RECOMPUTES = ("none", "selective", "full")
OPTIMIZERS = ("replicated", "zero1", "zero2", "zero3")
REDUCTIONS = ("ring", "hierarchical")
# rc: RoCE RC as production deploys it (lossless with PFC, several QPs per connection);
# rc_lossy: the go-back-N RC over lossy FIFOs that the emulator measures as it is.
TRANSPORTS = ("mrc", "rc", "rc_lossy", "tcp")
CROSS = ("dp", "pp", "pp_dp")
MLPS = ("gelu", "swiglu")


class SpecError(ValueError):
    """An explore input is invalid; the message names the key, the value and what is valid."""


@dataclass(frozen=True)
class Check:
    """How one field is validated: kind int | number | bool | choice | str | ints."""

    kind: str
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    choices: tuple[str, ...] = ()
    optional: bool = False  # None allowed (the default is derived elsewhere)

    def rule(self) -> str:
        """What is valid, in words (for error messages)."""
        if self.kind == "bool":
            return "true or false"
        if self.kind == "choice":
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.kind == "str":
            return "a string"
        what = {"int": "an integer", "number": "a number",
                "ints": "an array of integers"}[self.kind]
        if self.lo is not None and self.hi is not None:
            lo = "(" if self.lo_open else "["
            hi = ")" if self.hi_open else "]"
            return f"{what} in {lo}{self.lo:g}, {self.hi:g}{hi}"
        if self.lo is not None:
            return f"{what} {'>' if self.lo_open else '>='} {self.lo:g}"
        return what


def _f(default: Any, kind: str, doc: str, **kw: Any) -> Any:
    check = Check(kind, **kw)
    return field(default=default, metadata={"check": check, "doc": doc})


def field_check(f: dataclasses.Field) -> Check:
    """The :class:`Check` declared for a section field."""
    return f.metadata["check"]


def check_value(key: str, value: Any, check: Check) -> Any:
    """Return ``value`` normalised (ints as int, numbers as float, arrays as tuples), or raise
    :class:`SpecError` naming ``key``."""
    if value is None and check.optional:
        return None
    ok = True
    k = check.kind
    if k == "bool":
        ok = isinstance(value, bool)
    elif k == "choice":
        ok = isinstance(value, str) and value in check.choices
    elif k == "str":
        ok = isinstance(value, str)
    elif k == "ints":
        ok = isinstance(value, (list, tuple)) and len(value) > 0 and all(
            _in_range(v, check, True) for v in value)
        if ok:
            value = tuple(int(v) for v in value)
    elif k == "int":
        ok = _in_range(value, check, True)
        if ok:
            value = int(value)
    else:
        ok = _in_range(value, check, False)
        if ok:
            value = float(value)
    if not ok:
        raise SpecError(f"{key} = {value!r} is invalid: must be {check.rule()}")
    return value


def _in_range(v: Any, c: Check, integer: bool) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    if integer and (not isinstance(v, int) and not (isinstance(v, float) and v.is_integer())):
        return False
    if not math.isfinite(v):
        return False
    if c.lo is not None and (v <= c.lo if c.lo_open else v < c.lo):
        return False
    return not (c.hi is not None and (v >= c.hi if c.hi_open else v > c.hi))


class _Section:
    """Validates every declared field on construction (frozen dataclasses below)."""

    SECTION = ""
    if TYPE_CHECKING:  # every subclass is a dataclass: what dataclasses.fields() needs
        __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = check_value(f"{self.SECTION}.{f.name}", getattr(self, f.name), field_check(f))
            object.__setattr__(self, f.name, v)
        self._check()

    def _check(self) -> None:
        """Constraints between fields of the section (overridden where there are some)."""

    def fail(self, key: str, rule: str) -> None:
        raise SpecError(f"{self.SECTION}.{key} = {getattr(self, key)!r} is invalid: {rule}")


@dataclass(frozen=True)
class Model(_Section):
    """A dense decoder-only transformer and how many tokens it trains on."""

    SECTION = "model"
    preset: str | None = _f(None, "str", "a preset name (explorer/presets.py)", optional=True)
    layers: int = _f(32, "int", "transformer layers", lo=1)
    hidden: int = _f(4096, "int", "hidden size h", lo=1)
    heads: int = _f(32, "int", "attention heads a", lo=1)
    kv_heads: int | None = _f(None, "int", "key/value heads (GQA); default heads", lo=1,
                              optional=True)
    ffn: int | None = _f(None, "int", "MLP inner size; default 4h (gelu) or 8h/3 rounded up "
                         "to 256 (swiglu)", lo=1, optional=True)
    mlp: str = _f("gelu", "choice", "MLP kind", choices=MLPS)
    vocab: int = _f(51200, "int", "vocabulary size", lo=1)
    seq: int = _f(2048, "int", "sequence length s (tokens)", lo=1)
    tied_embeddings: bool = _f(False, "bool", "input and output embeddings shared")
    flash_attention: bool = _f(True, "bool", "attention scores never materialised in HBM")
    dropout: bool = _f(False, "bool", "dropout layers (their masks are kept for the "
                       "backward: GPT-3-era models have them, Llama-era ones do not)")
    global_batch_seqs: int | None = _f(None, "int", "global batch in sequences "
                                       "(or global_batch_tokens)", lo=1, optional=True)
    global_batch_tokens: int | None = _f(None, "int", "global batch in tokens (a multiple of "
                                         "seq)", lo=1, optional=True)
    train_tokens: float = _f(1e12, "number", "tokens to train on", lo=0, lo_open=True)

    def _check(self) -> None:
        if self.hidden % self.heads:
            self.fail("heads", f"must divide hidden = {self.hidden}")
        if self.kv_heads is not None and (self.kv_heads > self.heads
                                          or self.heads % self.kv_heads):
            self.fail("kv_heads", f"must divide heads = {self.heads}")
        if (self.global_batch_seqs is None) == (self.global_batch_tokens is None):
            raise SpecError("model: give exactly one of global_batch_seqs and "
                            "global_batch_tokens")
        if self.global_batch_tokens is not None and self.global_batch_tokens % self.seq:
            self.fail("global_batch_tokens", f"must be a multiple of seq = {self.seq}")

    # Derived values (None in a field means "derive it"; kept None so that replacing
    # hidden or heads re-derives them).
    @property
    def kv(self) -> int:
        """Key/value heads."""
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def ffn_dim(self) -> int:
        """MLP inner size."""
        if self.ffn is not None:
            return self.ffn
        if self.mlp == "gelu":
            return 4 * self.hidden
        return -(-8 * self.hidden // 768) * 256  # ceil(8h/3) to a multiple of 256

    @property
    def batch_seqs(self) -> int:
        """Sequences per global batch."""
        if self.global_batch_seqs is not None:
            return self.global_batch_seqs
        assert self.global_batch_tokens is not None
        return self.global_batch_tokens // self.seq

    @property
    def batch_tokens(self) -> int:
        """Tokens per global batch."""
        return self.batch_seqs * self.seq


@dataclass(frozen=True)
class Gpu(_Section):
    """One accelerator and its scale-up (NVLink) domain."""

    SECTION = "gpu"
    preset: str | None = _f(None, "str", "a preset name (explorer/presets.py)", optional=True)
    peak_tflops: float = _f(989.0, "number", "dense bf16 peak, TFLOP/s", lo=0, lo_open=True)
    hbm_gib: float = _f(80.0, "number", "HBM capacity, GiB", lo=0, lo_open=True)
    hbm_tbps: float = _f(3.35, "number", "HBM bandwidth, TByte/s", lo=0, lo_open=True)
    nvlink_domain: int = _f(8, "int", "GPUs in one NVLink domain", lo=1)
    nvlink_gbyte_s: float = _f(450.0, "number", "NVLink bandwidth per GPU and direction, "
                               "GByte/s", lo=0, lo_open=True)
    nvlink_efficiency: float = _f(0.8, "number", "achieved fraction of NVLink bandwidth in "
                                  "collectives (NCCL bus bandwidth / line rate)", lo=0, hi=1,
                                  lo_open=True)
    gemm_efficiency: float = _f(0.7, "number", "achieved fraction of peak in large GEMMs "
                                "(the one fitted parameter per GPU type)", lo=0, hi=1,
                                lo_open=True)
    memory_reserve_gib: float = _f(4.0, "number", "HBM not available to the model "
                                   "(runtime, NCCL buffers, fragmentation), GiB", lo=0)
    power_w: float = _f(700.0, "number", "board power at full load, W", lo=0, lo_open=True)
    idle_power_w: float = _f(100.0, "number", "board power while waiting, W", lo=0)


@dataclass(frozen=True)
class Cluster(_Section):
    """GPUs per data centre, how many DCs the job uses, and what a restart costs."""

    SECTION = "cluster"
    dcs: int = _f(1, "int", "DCs the job uses (the first `dcs` of dc_gpus)", lo=1, hi=64)
    gpus_per_dc: int = _f(1024, "int", "GPUs in every DC (unless dc_gpus)", lo=1)
    dc_gpus: tuple[int, ...] | None = _f(None, "ints", "GPUs of each DC when they differ",
                                         lo=1, optional=True)
    gpus_per_host: int = _f(8, "int", "GPUs per server", lo=1)
    # Llama 3 405B (Dubey et al. 2024, §3.3.4): 419 unexpected interruptions in 54 days on
    # 16,384 H100s, 35 of them network switches and cables (modelled apart, per link and
    # switch, in [fabric]): (419 - 35) / (16,384 x 1,296 h).
    interrupt_per_gpu_hour: float = _f(1.81e-5, "number", "job interruptions per GPU and "
                                       "hour (GPU, host, software: a restart whatever the "
                                       "network)", lo=0)
    # Upper bound: Llama 3's "more than 90 % effective training time" over 466 interruptions
    # in 54 days is at most 16.7 minutes per interruption, of which the Young/Daly terms at
    # its checkpoint size and bandwidth (below) take about 4: 12 minutes to restart.
    restart_minutes: float = _f(12.0, "number", "time to restart the job after an "
                                "interruption (reschedule, reload the checkpoint)", lo=0)
    # Llama 3's Tectonic store: 2 TB/s sustained, 7 TB/s peak (Dubey et al. 2024, §3.3.1).
    checkpoint_gbyte_s: float = _f(2000.0, "number", "checkpoint write bandwidth of the "
                                   "store, GByte/s (a checkpoint blocks training while written)",
                                   lo=0, lo_open=True)
    checkpoint_minutes: float | None = _f(None, "number", "checkpoint interval; default the "
                                          "Young/Daly optimum of each configuration", lo=0,
                                          lo_open=True, optional=True)

    def _check(self) -> None:
        if self.dc_gpus is not None and len(self.dc_gpus) < self.dcs:
            raise SpecError(f"cluster.dc_gpus has {len(self.dc_gpus)} DCs but cluster.dcs = "
                            f"{self.dcs}: give at least dcs entries")

    @property
    def gpus(self) -> tuple[int, ...]:
        """GPUs of every DC used."""
        if self.dc_gpus is not None:
            return self.dc_gpus[: self.dcs]
        return (self.gpus_per_dc,) * self.dcs


@dataclass(frozen=True)
class FabricSection(_Section):
    """The scale-out network inside each DC: a two-tier multi-plane Clos."""

    SECTION = "fabric"
    planes: int = _f(4, "int", "parallel planes (NIC ports per GPU, one per plane)", lo=1,
                     hi=64)
    nic_gbit: float = _f(400.0, "number", "scale-out NIC rate per GPU, all planes, Gbit/s",
                         lo=0, lo_open=True)
    switch_radix: int = _f(256, "int", "switch ports at the plane rate", lo=2)
    rtt_us: float = _f(8.0, "number", "base round-trip time between two GPUs of a DC, us",
                       lo=0, lo_open=True)
    buffer_kib: float = _f(256.0, "number", "switch buffer per egress port, KiB", lo=0,
                           lo_open=True)
    # Network failures from Llama 3 405B's training (Dubey et al. 2024: 35 of 419
    # unexpected interruptions in 54 days on 16,384 H100s in 2,048 servers were network
    # switches and cables), counted here half links (~32K), half switches (~1K).
    link_fail_per_hour: float = _f(4e-7, "number", "failures per link and hour", lo=0)
    switch_fail_per_hour: float = _f(1.4e-5, "number", "failures per switch and hour",
                                     lo=0)
    repair_hours: float = _f(4.0, "number", "time until a failed link or switch is back",
                             lo=0, lo_open=True)
    failure_scale: float = _f(1.0, "number", "multiplies the link, switch and GPU failure "
                              "rates (one axis for low vs high failure regimes)", lo=0)
    # No published rate of microbursts per port of an AI training fabric was found; 0
    # leaves the tail term out unless a scenario sets one.
    burst_hz: float = _f(0.0, "number", "microbursts per second at one host port", lo=0)
    # Zhang et al., High-Resolution Measurement of Data Center Microbursts (IMC 2017): more
    # than 70 % of bursts last at most tens of microseconds.
    burst_us: float = _f(50.0, "number", "microburst duration, us", lo=0)
    burst_excess_kib: float = _f(512.0, "number", "bytes a burst offers beyond the port's "
                                 "drain, KiB", lo=0)


@dataclass(frozen=True)
class Dci(_Section):
    """The interconnect between DCs (used when cluster.dcs > 1)."""

    SECTION = "dci"
    delay_ms: float = _f(1.0, "number", "one-way delay between two DCs, ms", lo=0, hi=1000)
    loss: float = _f(0.0, "number", "packet loss probability on the long haul", lo=0, hi=0.5)
    pair_tbps: float | None = _f(None, "number", "DCI capacity between two DCs, Tbit/s; "
                                 "default a DC's scale-out capacity / bag_oversubscription, "
                                 "shared by its dcs - 1 peers", lo=0, lo_open=True,
                                 optional=True)
    # Meta, "Building Prometheus: how backend aggregation enables gigawatt-scale AI
    # clusters" (engineering.fb.com, 2026): the super-spine layer joining the buildings of
    # a multi-building cluster is "typically 4.5:1" oversubscribed from the buildings'
    # fabrics (and 16-48 Pbit/s join two regions).
    bag_oversubscription: float = _f(4.5, "number", "a DC's scale-out capacity over its "
                                     "capacity to the other DCs (when pair_tbps is not given)",
                                     lo=1)


@dataclass(frozen=True)
class Placement(_Section):
    """Parallelism degrees and which dimension crosses DCs (data parallelism is derived)."""

    SECTION = "placement"
    tp: int = _f(8, "int", "tensor parallelism", lo=1)
    cp: int = _f(1, "int", "context parallelism", lo=1)
    pp: int = _f(1, "int", "pipeline stages", lo=1)
    microbatch: int = _f(1, "int", "sequences per microbatch", lo=1)
    cross: str = _f("dp", "choice", "what crosses DCs: dp (each replica inside a DC), pp "
                    "(every replica spans all DCs), pp_dp (replicas span dc_group DCs, data "
                    "parallelism across groups)", choices=CROSS)
    dc_group: int = _f(2, "int", "DCs one pipeline spans (pp_dp only)", lo=2)


@dataclass(frozen=True)
class Schedule(_Section):
    """How a step is scheduled: pipeline, recomputation, optimizer sharding, overlap."""

    SECTION = "schedule"
    pipeline: str = _f("1f1b", "choice", "pipeline schedule", choices=PIPELINES)
    virtual_stages: int = _f(2, "int", "model chunks per stage (interleaved only)", lo=1)
    warmup_extra: int = _f(0, "int", "extra warm-up forwards to hide DCI latency at a "
                           "memory cost: 1f1b, per DCI boundary downstream of a stage; "
                           "interleaved, on every stage", lo=0)
    recompute: str = _f("selective", "choice", "activation recomputation", choices=RECOMPUTES)
    sequence_parallel: bool = _f(True, "bool", "activations sharded over TP outside "
                                 "attention and MLP (Korthikanti et al. 2022)")
    optimizer: str = _f("zero1", "choice", "ZeRO stage over the data-parallel ranks: "
                        "replicated (DDP), zero1 (optimizer state sharded: Megatron's "
                        "distributed optimizer), zero2 (+ gradients, reduce-scattered per "
                        "microbatch), zero3 (+ parameters: FSDP)", choices=OPTIMIZERS)
    overlap: bool = _f(True, "bool", "gradient sync overlapped with the backward")
    allreduce: str = _f("hierarchical", "choice", "data-parallel reduction across DCs: "
                        "one flat ring, or intra-DC reduce-scatter + inter-DC all-reduce + "
                        "intra-DC all-gather", choices=REDUCTIONS)
    dblp_tolerance: float = _f(0.0, "number", "DBLP: fraction of gradient chunks a round may "
                               "lose (0: reliable; needs transport mrc)", lo=0, hi=0.5)
    grad_bytes: int = _f(2, "int", "bytes per gradient element on the wire (2 bf16, 4 fp32)",
                         lo=2, hi=4)


@dataclass(frozen=True)
class Network(_Section):
    """The transport and the control plane of the ECMP baselines."""

    SECTION = "network"
    transport: str = _f("rc", "choice", "mrc (sprayed, SRv6, no reconvergence), rc (RoCE RC "
                        "as deployed: lossless with PFC, one path per QP, ECMP under "
                        "BGP/BFD), rc_lossy (the go-back-N RC over lossy FIFOs the emulator "
                        "measures), tcp", choices=TRANSPORTS)
    # Llama 3 (Dubey et al. 2024, §3.3.1): "our collective library creates 16 network flows
    # between two GPUs" and enhanced ECMP hashes them apart.
    qps_per_connection: int = _f(16, "int", "flows per connection and plane (RC's queue "
                                 "pairs, TCP's connections: ECMP entropy)", lo=1)
    bfd_interval_ms: float = _f(100.0, "number", "BFD transmit interval, ms", lo=0,
                                lo_open=True)
    bfd_multiplier: int = _f(3, "int", "BFD detection multiplier", lo=1)
    bgp_update_ms: float = _f(50.0, "number", "BGP withdrawal propagation to every remote "
                              "leaf, ms", lo=0)
    fib_update_ms: float = _f(50.0, "number", "FIB reprogramming after a withdrawal, ms",
                              lo=0)
    rc_rto_ms: float = _f(1074.0, "number", "RoCE RC retransmission timeout (NCCL_IB_TIMEOUT "
                          "18: 4.096 us x 2^18)", lo=0, lo_open=True)
    tcp_rto_ms: float = _f(200.0, "number", "TCP minimum RTO (Linux default)", lo=0,
                           lo_open=True)


@dataclass(frozen=True)
class Cost(_Section):
    """Prices."""

    SECTION = "cost"
    gpu_hour: float = _f(2.0, "number", "price of one GPU-hour", lo=0)
    dci_gbit_month: float = _f(5.0, "number", "price of 1 Gbit/s of DCI capacity for a "
                               "month (30 days)", lo=0)
    energy_kwh: float = _f(0.08, "number", "price of one kWh", lo=0)
    pue: float = _f(1.2, "number", "power usage effectiveness", lo=1)


SECTIONS: dict[str, type[_Section]] = {
    "model": Model, "gpu": Gpu, "cluster": Cluster, "fabric": FabricSection, "dci": Dci,
    "placement": Placement, "schedule": Schedule, "network": Network, "cost": Cost,
}


def section_fields(section: str) -> dict[str, dataclasses.Field]:
    """Declared fields of a section, by name."""
    return {f.name: f for f in dataclasses.fields(SECTIONS[section])}


@dataclass(frozen=True)
class Config:
    """One point of the design space (every section resolved)."""

    model: Model
    gpu: Gpu
    cluster: Cluster
    fabric: FabricSection
    dci: Dci
    placement: Placement
    schedule: Schedule
    network: Network
    cost: Cost

    def replace(self, changes: dict[str, Any]) -> Config:
        """A copy with dotted keys (``"placement.tp"``) replaced, re-validated."""
        by_section: dict[str, dict[str, Any]] = {}
        for key, value in changes.items():
            section, _, name = key.partition(".")
            if section not in SECTIONS or name not in section_fields(section):
                raise SpecError(f"unknown key {key!r}")
            by_section.setdefault(section, {})[name] = value
        out = {}
        for section in SECTIONS:
            cur = getattr(self, section)
            if section in by_section:
                values = dataclasses.asdict(cur) | by_section[section]
                if section == "model" and "global_batch_tokens" in by_section[section]:
                    values["global_batch_seqs"] = None
                if section == "model" and "global_batch_seqs" in by_section[section]:
                    values["global_batch_tokens"] = None
                cur = SECTIONS[section](**values)
            out[section] = cur
        return Config(**out)

    def flat(self) -> dict[str, Any]:
        """Every field as ``{"section.name": value}``."""
        return {f"{s}.{k}": v for s in SECTIONS
                for k, v in dataclasses.asdict(getattr(self, s)).items()}
