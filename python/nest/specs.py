"""Frozen, validated specifications: model, device, network tiers, cluster, job.

SI units everywhere (seconds, bytes, FLOP/s, bytes/s). File formats that use other
units carry them in the key name (``bandwidth_GBps``) and are converted on load
(:mod:`nest.inputs.loading`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from .errors import SpecError, reject_unknown_keys, require, short_repr
from .frozen_graph import read_only_graph
from .units import GiB

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}

MOMENT_BYTES = DTYPE_BYTES
"""Bytes of one Adam moment per parameter by dtype (Megatron-Core's precision-aware
optimizer: ``--exp-avg-dtype``, ``--exp-avg-sq-dtype``)."""


# Upper limits far above any real model or cluster, low enough that every cost table
# fits in int64 picoseconds and every enumeration stays small: hostile input gets a
# one-line error instead of an overflow, a memory error or a hang.
MAX_LAYERS = 10_000
MAX_LOAD_CV = 16.0  # a router sending every token to one of 256 experts has a CV of 16
MAX_WIDTH = 2**20  # hidden sizes, head dimensions, low-rank ranks
MAX_HEADS = 2**16  # attention heads, experts
MAX_VOCAB = 2**32
MAX_SEQ_LEN = 2**30
MAX_TOKENS = 2**40  # global batch x sequence length
MAX_DEVICES = 2**24


def _positive_int(name: str, value, most: int | None = None) -> None:
    require(isinstance(value, int) and not isinstance(value, bool) and value > 0,
            name, value, "must be a positive integer")
    if most is not None:
        require(value <= most, name, value, f"must be at most {most}")


def _positive_real(name: str, value) -> None:
    require(isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0, name, value, "must be a positive finite number")


def _non_negative_real(name: str, value) -> None:
    require(isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and value >= 0, name, value,
            "must be a finite number >= 0")


def _choice(name: str, value, choices) -> None:
    require(value in choices, name, value, f"must be one of {', '.join(map(str, choices))}")


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only (GPT, Llama) or encoder (BERT) dense transformer.

    ``num_kv_heads`` < ``num_heads`` gives grouped-query attention; ``mlp="swiglu"``
    uses three ``hidden x ffn_hidden`` matrices, ``"gelu"`` two.
    """

    name: str
    num_layers: int
    hidden: int
    num_heads: int
    ffn_hidden: int
    vocab_size: int
    seq_len: int
    num_kv_heads: int = 0  # 0: same as num_heads
    attention_head_dim: int = 0  # 0: hidden / num_heads (Qwen3 uses 128 regardless)
    qk_norm: bool = False  # RMSNorm of each query and key head before attention (Qwen3)
    mlp: str = "gelu"
    norm: str = "layernorm"
    bias: bool = True
    tied_embeddings: bool = True
    position_embedding: str = "learned"
    max_position: int = 0  # 0: seq_len
    type_vocab_size: int = 0
    encoder_head: bool = False  # BERT: pooler + masked-LM transform instead of a causal LM head
    dropout: bool = True
    causal: bool = True
    # Mixture of experts (num_experts = 0: dense). Blocks first_dense_layers.. are MoE
    # when (index - first_dense_layers) % moe_layer_interval == 0.
    num_experts: int = 0
    experts_per_token: int = 0  # top-k
    moe_ffn_hidden: int = 0  # per expert; 0: ffn_hidden
    num_shared_experts: int = 0  # always-active experts of size moe_ffn_hidden
    moe_layer_interval: int = 1
    first_dense_layers: int = 0
    # tokens an expert takes per micro-batch over the mean (drops beyond it, pads to it
    # under the alltoall dispatcher); 0: dropless, Megatron-Core's default
    # (moe_expert_capacity_factor None) and how Mixtral, Qwen3 and DeepSeek-V3 were trained
    capacity_factor: float = 0.0
    # Multi-head latent attention (DeepSeek-V2/V3); kv_lora_rank = 0: standard attention.
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    # Multi-token prediction (DeepSeek-V3: 1): modules after the last block, each an
    # embedding of the next tokens, two norms, a 2h -> h projection, a transformer layer
    # like the last block and one more output layer and loss, on the output layer's stage
    mtp_layers: int = 0
    published_parameters: int = 0  # 0: unknown
    published_active_parameters: int = 0  # MoE: parameters used per token (0: unknown)
    default_global_batch: int = 0  # published training batch in sequences (0: unknown)
    source: str = ""

    def __post_init__(self):
        require(isinstance(self.name, str) and self.name, "model.name", self.name, "must be a non-empty string")
        limits = {"num_layers": MAX_LAYERS, "hidden": MAX_WIDTH, "num_heads": MAX_HEADS,
                  "ffn_hidden": MAX_WIDTH, "vocab_size": MAX_VOCAB, "seq_len": MAX_SEQ_LEN}
        for name, most in limits.items():
            _positive_int(f"model.{name}", getattr(self, name), most)
        if self.num_kv_heads == 0:
            object.__setattr__(self, "num_kv_heads", self.num_heads)
        if self.max_position == 0:
            object.__setattr__(self, "max_position", self.seq_len)
        _positive_int("model.num_kv_heads", self.num_kv_heads, MAX_HEADS)
        _positive_int("model.max_position", self.max_position, MAX_SEQ_LEN)
        require(isinstance(self.attention_head_dim, int) and self.attention_head_dim >= 0,
                "model.attention_head_dim", self.attention_head_dim, "must be an integer >= 0")
        require(self.attention_head_dim or self.hidden % self.num_heads == 0, "model.hidden",
                self.hidden, f"must be divisible by num_heads ({self.num_heads})")
        require(self.num_heads % self.num_kv_heads == 0, "model.num_kv_heads", self.num_kv_heads,
                f"must divide num_heads ({self.num_heads})")
        for name in ("qk_norm", "bias", "tied_embeddings", "encoder_head", "dropout", "causal"):
            require(isinstance(getattr(self, name), bool), f"model.{name}", getattr(self, name),
                    "must be true or false")
        _choice("model.mlp", self.mlp, ("gelu", "swiglu"))
        _choice("model.norm", self.norm, ("layernorm", "rmsnorm"))
        _choice("model.position_embedding", self.position_embedding, ("learned", "rope"))
        require(isinstance(self.type_vocab_size, int) and 0 <= self.type_vocab_size <= MAX_VOCAB,
                "model.type_vocab_size", self.type_vocab_size, f"must be an integer between 0 and {MAX_VOCAB}")
        require(isinstance(self.attention_head_dim, int) and self.attention_head_dim <= MAX_WIDTH,
                "model.attention_head_dim", self.attention_head_dim, f"must be at most {MAX_WIDTH}")
        for name in ("num_experts", "experts_per_token", "moe_ffn_hidden", "num_shared_experts",
                     "first_dense_layers", "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim",
                     "qk_nope_head_dim", "v_head_dim", "published_active_parameters", "mtp_layers"):
            value = getattr(self, name)
            require(isinstance(value, int) and not isinstance(value, bool) and value >= 0,
                    f"model.{name}", value, "must be an integer >= 0")
            most = MAX_HEADS if name == "num_experts" else MAX_LAYERS if name == "mtp_layers" else MAX_WIDTH
            if name not in ("first_dense_layers", "published_active_parameters"):
                require(value <= most, f"model.{name}", value, f"must be at most {most}")
        _positive_int("model.moe_layer_interval", self.moe_layer_interval)
        _non_negative_real("model.capacity_factor", self.capacity_factor)
        if self.num_experts:
            require(1 <= self.experts_per_token <= self.num_experts, "model.experts_per_token",
                    self.experts_per_token, f"must be between 1 and num_experts ({self.num_experts})")
            if self.moe_ffn_hidden == 0:
                object.__setattr__(self, "moe_ffn_hidden", self.ffn_hidden)
        if self.kv_lora_rank:
            for name in ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
                _positive_int(f"model.{name}", getattr(self, name))
        require(isinstance(self.default_global_batch, int) and self.default_global_batch >= 0,
                "model.default_global_batch", self.default_global_batch, "must be an integer >= 0")
        require(isinstance(self.published_parameters, int) and self.published_parameters >= 0,
                "model.published_parameters", self.published_parameters, "must be an integer >= 0")

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def is_moe_block(self, index: int) -> bool:
        """Whether transformer block ``index`` (0-based) has routed experts."""
        return (self.is_moe and index >= self.first_dense_layers
                and (index - self.first_dense_layers) % self.moe_layer_interval == 0)

    @property
    def head_needs_embedding(self) -> bool:
        """Whether the output layer's pipeline stage needs the word embedding: it is the
        output layer (tied embeddings), or MTP modules embed the next tokens with it. A
        stage without the embedding node then keeps its own copy, as Megatron-LM does
        (``LanguageModule.setup_embeddings_and_output_layer``; ``GPTModel.__init__`` builds
        an embedding on the MTP stage: ``if self.pre_process or self.mtp_process``,
        core_v0.14.0 ``megatron/core/models/gpt/gpt_model.py``)."""
        return self.tied_embeddings or self.mtp_layers > 0

    @property
    def head_dim(self) -> int:
        return self.attention_head_dim or self.hidden // self.num_heads

    @property
    def kv_hidden(self) -> int:
        """Width of the K (and of the V) projection."""
        return self.num_kv_heads * self.head_dim


@dataclass(frozen=True)
class HostSpec:
    """The server memory and CPUs behind the accelerators, and the links to them.

    ``memory_bytes``, ``memory_bandwidth`` and ``cores`` are the whole server's; its
    ``devices`` accelerators share them (each one's process offloads, and runs its host
    optimizer step, at the same time: :meth:`share`). ``link_bandwidth`` is one host link,
    per direction (PCIe x16, NVLink-C2C), shared by ``link_shared_by`` devices.
    ``adam_rate_per_thread`` is the parameters per second one CPU thread steps with a
    fused fp32 AdamW (a measurement; see :mod:`nest.presets.hosts`). The efficiency
    fields are achieved fractions: of the link by pinned-memory copies, of DRAM bandwidth
    by streaming kernels. ``dispatch_slowdown`` is the host time eager PyTorch takes per
    dispatched call relative to the x86 servers :data:`nest.cost.host.HOST_OP_S` was
    measured on (1: those; Grace is slower, :mod:`nest.presets.hosts`). ``reserved_bytes``
    per device is host memory training cannot fill with offloaded state (the OS, data-loader
    workers, pinned staging buffers): a planning margin like :attr:`DeviceSpec.reserved_bytes`.
    """

    name: str
    memory_bytes: float
    memory_bandwidth: float  # bytes/s, the whole server
    link_bandwidth: float  # bytes/s, one direction of one link
    devices: int = 8
    cores: int = 64
    link_shared_by: int = 1
    adam_rate_per_thread: float = 0.66e9
    link_efficiency: float = 0.8
    memory_efficiency: float = 0.7
    reserved_bytes: float = 16 * GiB
    source: str = ""
    dispatch_slowdown: float = 1.0  # last: positional constructions keep their meaning

    def __post_init__(self):
        require(isinstance(self.name, str) and self.name, "host.name", self.name, "must be a non-empty string")
        for name in ("memory_bytes", "memory_bandwidth", "link_bandwidth", "adam_rate_per_thread",
                     "dispatch_slowdown"):
            _positive_real(f"host.{name}", getattr(self, name))
        _positive_int("host.devices", self.devices, 1024)
        _positive_int("host.cores", self.cores, 1 << 20)
        _positive_int("host.link_shared_by", self.link_shared_by, self.devices)
        _non_negative_real("host.reserved_bytes", self.reserved_bytes)
        for name in ("link_efficiency", "memory_efficiency"):
            value = getattr(self, name)
            _positive_real(f"host.{name}", value)
            require(value <= 1, f"host.{name}", value, "must be a fraction in (0, 1]")

    def share(self, active: int, threads: int = 1) -> "HostShare":
        """What one device gets when ``active`` devices of each server run and each one's
        host optimizer asks for ``threads`` threads (capped at its share of the cores; a
        cluster smaller than one server leaves the rest of it idle)."""
        active = max(1, min(int(active), self.devices))
        on_link = min(self.link_shared_by, active)
        threads = max(1, min(int(threads), self.cores // active))
        return HostShare(max(0.0, self.memory_bytes / active - self.reserved_bytes),
                         self.memory_bandwidth * self.memory_efficiency / active,
                         self.link_bandwidth * self.link_efficiency / on_link,
                         self.adam_rate_per_thread * threads, threads)


@dataclass(frozen=True)
class HostShare:
    """One device's share of its host (:meth:`HostSpec.share`): the bytes it can fill,
    the DRAM bytes/s its host kernels stream, the bytes/s it copies in each direction
    while every device copies, the parameters/s its host Adam steps, on how many threads."""

    usable_bytes: float
    stream_rate: float
    copy_rate: float
    adam_rate: float
    threads: int


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator. Peak FLOP/s are dense (no sparsity) tensor-core numbers.
    ``host``: the host memory behind it (None: unknown, nothing can be offloaded)."""

    name: str
    memory_bytes: float
    hbm_bandwidth: float  # bytes/s
    peak_flops_bf16: float
    peak_flops_fp16: float = 0.0  # 0: same as bf16
    peak_flops_fp8: float = 0.0  # 0: not supported
    peak_flops_fp32: float = 0.0  # 0: bf16 / 2 (TF32-class matmul)
    gemm_efficiency: float = 0.75  # fraction of peak a large GEMM reaches
    hbm_efficiency: float = 0.85  # fraction of HBM bandwidth streaming kernels reach
    attention_efficiency: float = 0.55  # fused attention kernels, fraction of peak
    kernel_overhead_s: float = 4e-6  # fixed cost per kernel launch
    # Memory training cannot use for its tensors: the CUDA context and library handles
    # (cuBLAS/cuDNN workspaces), NCCL communicator buffers and the caching allocator's
    # fragmentation. It is a planning margin, not a datasheet value: shown in every
    # memory breakdown and settable per device (and per job).
    reserved_bytes: float = 2 * GiB
    source: str = ""
    host: HostSpec | None = None

    def __post_init__(self):
        require(isinstance(self.name, str) and self.name, "device.name", self.name, "must be a non-empty string")
        require(self.host is None or isinstance(self.host, HostSpec), "device.host", self.host,
                "must be a HostSpec or None")
        for name in ("memory_bytes", "hbm_bandwidth"):
            _positive_real(f"device.{name}", getattr(self, name))
        for name in ("peak_flops_bf16", "peak_flops_fp16", "peak_flops_fp8", "peak_flops_fp32", "kernel_overhead_s",
                     "reserved_bytes"):
            _non_negative_real(f"device.{name}", getattr(self, name))
        for name in ("gemm_efficiency", "hbm_efficiency", "attention_efficiency"):
            value = getattr(self, name)
            _positive_real(f"device.{name}", value)
            require(value <= 1, f"device.{name}", value, "must be a fraction in (0, 1]")
        require(self.peak_flops_bf16 > 0 or self.peak_flops_fp16 > 0, "device.peak_flops_bf16",
                self.peak_flops_bf16, "must be positive (or give peak_flops_fp16 for a device without BF16)")

    def peak_flops(self, dtype: str) -> float:
        """Dense matmul peak for ``dtype``; SpecError if the device has none."""
        peak = {
            "bf16": self.peak_flops_bf16,
            "fp16": self.peak_flops_fp16 or self.peak_flops_bf16,
            "fp8": self.peak_flops_fp8,
            "fp32": self.peak_flops_fp32 or max(self.peak_flops_bf16, self.peak_flops_fp16) / 2,
        }[dtype]
        require(peak > 0, "job.dtype", dtype, f"is not supported by device {self.name}")
        return peak


@dataclass(frozen=True)
class Tier:
    """One level of a hierarchical network, innermost first.

    ``fanout`` groups of the level below form one group of this level (devices for the
    innermost tier). ``bandwidth`` is per device, one direction, in bytes/s, before
    dividing by ``oversubscription``.
    """

    name: str
    fanout: int
    bandwidth: float
    latency: float
    oversubscription: float = 1.0

    def __post_init__(self):
        _positive_int(f"tier {self.name}.fanout", self.fanout, MAX_DEVICES)
        _positive_real(f"tier {self.name}.bandwidth", self.bandwidth)
        _non_negative_real(f"tier {self.name}.latency", self.latency)
        _positive_real(f"tier {self.name}.oversubscription", self.oversubscription)
        require(self.oversubscription >= 1, f"tier {self.name}.oversubscription",
                self.oversubscription, "must be >= 1")

    @property
    def effective_bandwidth(self) -> float:
        return self.bandwidth / self.oversubscription


@dataclass(frozen=True)
class ClusterSpec:
    """Identical devices on a hierarchical network (tiers innermost first), or on an
    arbitrary network given as a graph.

    With ``graph`` (a networkx graph, see :mod:`nest.network.graph`; build it with
    :func:`nest.network.graph.graph_cluster`) every collective and transfer is priced on the
    graph and rank ``r`` runs on device ``device_order[r]`` (device node ids); the tiers
    then describe the levels of that order (they size the search space and the
    reports). The cluster holds a read-only copy of the graph it is given
    (:func:`read_only_graph`: ``cluster.graph.add_edge(...)`` raises networkx's
    frozen-graph error, setting a node's or link's attribute a TypeError), so the prices
    cached on it cannot go stale; the caller's graph is never modified or frozen, and a
    change to it shows in the clusters built from it afterwards. Graph and order are
    left out of equality, hashing and repr (graphs are large): clusters that differ only
    in them compare equal; compare clusters by name.
    """

    name: str
    device: DeviceSpec
    tiers: tuple[Tier, ...]
    source: str = ""
    graph: object = field(default=None, compare=False, hash=False, repr=False)
    device_order: tuple = field(default=(), compare=False, hash=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "tiers", tuple(self.tiers))
        object.__setattr__(self, "device_order", tuple(self.device_order))
        require(len(self.tiers) > 0, "cluster.tiers", [], "needs at least one tier")
        names = [t.name for t in self.tiers]
        require(len(set(names)) == len(names), "cluster.tiers", names, "tier names must be unique")
        require(self.num_devices <= MAX_DEVICES, "cluster.tiers", f"{self.num_devices} devices",
                f"the fanouts must multiply to at most {MAX_DEVICES} devices")
        if self.graph is not None:
            require(len(self.device_order) == self.num_devices, "cluster.device_order",
                    f"{len(self.device_order)} devices",
                    f"must list the {self.num_devices} devices the tiers multiply to")
            # a read-only graph (graph_cluster's, or this cluster's through
            # dataclasses.replace) is kept as it is, not copied
            object.__setattr__(self, "graph", read_only_graph(self.graph))
        else:
            require(not self.device_order, "cluster.device_order", f"{len(self.device_order)} devices",
                    "needs a graph")

    @property
    def is_graph(self) -> bool:
        """Whether the network is a graph (prices from :mod:`nest.network.graph`)."""
        return self.graph is not None

    @property
    def num_devices(self) -> int:
        return math.prod(t.fanout for t in self.tiers)

    def group_sizes(self) -> tuple[int, ...]:
        """Devices per group at each tier (cumulative products of the fanouts)."""
        sizes, size = [], 1
        for tier in self.tiers:
            size *= tier.fanout
            sizes.append(size)
        return tuple(sizes)


@dataclass(frozen=True)
class OptimizerSpec:
    """Mixed-precision optimizer state, in bytes per parameter.

    The default is Megatron-LM's bf16 Adam: bf16 weights (2), fp32 gradient
    accumulation and reduction (4), fp32 master weights (4) and two fp32 moments (8):
    18 bytes per parameter, 6 + 12/d with a distributed optimizer. :meth:`of` builds the
    other layouts Megatron-Core has from dtype names (bf16 gradients, 16- or 8-bit
    moments with its precision-aware optimizer).
    """

    name: str = "adam"
    grad_bytes: int = 4
    master_bytes: int = 4
    state_bytes: int = 8

    def __post_init__(self):
        _choice("job.optimizer", self.name, ("adam", "sgd"))
        for name in ("grad_bytes", "master_bytes", "state_bytes"):
            value = getattr(self, name)
            require(isinstance(value, int) and value >= 0, f"job.optimizer.{name}", value,
                    "must be an integer >= 0")

    @staticmethod
    def named(name: str) -> "OptimizerSpec":
        """The default mixed-precision state layout of a named optimizer."""
        return OptimizerSpec.of(name)

    @staticmethod
    def of(name: str = "adam", grad_dtype: str = "fp32", state_dtype: str = "fp32") -> "OptimizerSpec":
        """The state layout of Megatron-Core's options (megatron/core/optimizer/optimizer_config.py
        OptimizerConfig, core_v0.14.0):

        * ``grad_dtype``: the main gradients and their reduction, ``fp32`` (default) or
          ``bf16`` (``--grad-reduce-in-bf16``; param_and_grad_buffer.py keeps the
          gradient buffer in the parameter dtype);
        * ``state_dtype``: Adam's two moments, ``fp32`` (default), ``bf16``, ``fp16`` or
          ``fp8`` (``--use-precision-aware-optimizer --exp-avg-dtype --exp-avg-sq-dtype``).
          The precision-aware optimizer (Transformer Engine's FusedAdam) then keeps the
          fp32 master weight as the bf16 weight plus a 16-bit remainder
          (``store_param_remainders``, distrib_optimizer.py): 2 bytes instead of 4.
        """
        _choice("job.optimizer", name, ("adam", "sgd"))
        _choice("job.grad_dtype", grad_dtype, ("fp32", "bf16"))
        _choice("job.optimizer_state_dtype", state_dtype, tuple(MOMENT_BYTES))
        require(name == "adam" or state_dtype == "fp32", "job.optimizer_state_dtype", state_dtype,
                "applies to Adam's moments (sgd keeps one fp32 momentum)")
        precision_aware = state_dtype != "fp32"
        return OptimizerSpec(name=name, grad_bytes=4 if grad_dtype == "fp32" else 2,
                             master_bytes=2 if precision_aware else 4,
                             state_bytes=2 * MOMENT_BYTES[state_dtype] if name == "adam" else 4)

    @property
    def grad_dtype(self) -> str | None:
        """The gradient dtype of :meth:`of` this layout has (None: no such option)."""
        return {4: "fp32", 2: "bf16"}.get(self.grad_bytes)

    @property
    def state_dtype(self) -> str | None:
        """The moment dtype of :meth:`of` this layout has (None: a layout :meth:`of`
        does not make; 16-bit moments read as bf16)."""
        grad = self.grad_dtype
        return next((d for d in MOMENT_BYTES if grad and self == OptimizerSpec.of(self.name, grad, d)), None)

    @property
    def sharded_bytes(self) -> int:
        """Bytes per parameter that a distributed optimizer (ZeRO-1) shards over DP."""
        return self.master_bytes + self.state_bytes


@dataclass(frozen=True)
class JobSpec:
    """What to train: global batch in sequences, sequence length, dtype, optimizer."""

    global_batch: int
    seq_len: int
    dtype: str = "bf16"
    optimizer: OptimizerSpec = field(default_factory=OptimizerSpec)
    flash_attention: bool = True
    # Memory the job cannot use for tensors; None: the device's reserved_bytes.
    reserved_memory_bytes: float | None = None
    # FP8 weights (Megatron-LM --fp8-param-gather): parameters stored and all-gathered in
    # FP8, 1 byte each (MXFP8: stored row- and column-wise with their scales, all-gathered
    # in bf16: nest.cost.scenario.Scenario.weight_bytes); needs dtype fp8. Without it FP8
    # training keeps bf16 weights and Transformer Engine caches their FP8 copies.
    fp8_param_gather: bool = False
    # Let dp x micro_batch not divide the global batch: every replica then runs
    # ceil(global_batch / (dp x micro_batch)) micro-batches (the NEST artifact's baselines
    # use such degrees). Off: a batch that does not divide is a SpecError.
    uneven_batch: bool = False
    # Communication overlap, Megatron-LM's switches (off by default there and here; NeMo's
    # recipes turn all three on). overlap_grad_reduce: a node's data-parallel gradient
    # reduction (all-reduce, or reduce-scatter with a distributed optimizer) runs during
    # that node's backward of the last micro-batch. overlap_param_gather: the weight
    # all-gather after a sharded optimizer step (ZeRO-1/2) runs during the node's next
    # forward. tp_comm_overlap: tensor-parallel collectives are split into tp chunks
    # pipelined with the node's compute (Transformer Engine userbuffers); one chunk stays
    # exposed. Only communication beyond the compute it hides behind is exposed.
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    tp_comm_overlap: bool = False
    # overlap_moe_expert_parallel_comm (Megatron-Core's --overlap-moe-expert-parallel-comm):
    # the combined 1F1B schedule runs one micro-batch's forward of a MoE layer together
    # with another's backward, so each expert-parallel dispatch and combine hides behind
    # the other pass's attention or expert compute (nest.cost.pricing.ep_pair_exposed).
    # Applies where Megatron allows it (ep > 1, no full recomputation and no recomputed
    # moe module, virtual stages when pp > 1) and costs one more warm-up micro-batch.
    overlap_moe_expert_parallel_comm: bool = False
    # How tokens reach their experts: "alltoall" (Megatron's alltoall dispatcher: every
    # routed copy is sent) or "flex" (DeepEP / HybridEP: a token crosses the network once
    # per destination node and is forwarded inside it over NVLink; on graph clusters
    # priced as alltoall).
    moe_dispatcher: str = "alltoall"
    # Expert load imbalance of dropless routing: the coefficient of variation of one
    # micro-batch's tokens per expert (0: balanced, as --moe-router-force-load-balancing
    # enforces and published benchmarks run); the busiest expert-parallel rank sets the
    # pace and the memory (nest.cost.imbalance)
    moe_load_cv: float = 0.0
    # The framework the plan is for (nest.frameworks): the search keeps to what it can run
    # and the plan launches in it with the meaning nest priced; "any": nest's whole space.
    framework: str = "any"
    # CPU threads each rank's host optimizer step runs on (OMP_NUM_THREADS; torchrun sets
    # 1 when it starts several processes per node), capped at the rank's share of cores
    host_threads: int = 1
    # Megatron's --fp8-recipe (FP8_RECIPES): which GEMM inputs a linear layer keeps
    fp8_recipe: str = "delayed"
    # Transformer Engine's activation-offload implementation (OFFLOAD_HANDLERS)
    activation_offload_handler: str = "v1"

    def __post_init__(self):
        _positive_int("job.host_threads", self.host_threads, 4096)
        for name in ("flash_attention", "uneven_batch", "fp8_param_gather", *OVERLAP_SWITCHES):
            require(isinstance(getattr(self, name), bool), f"job.{name}", getattr(self, name),
                    "must be true or false")
        _positive_int("job.global_batch", self.global_batch, MAX_TOKENS)
        _positive_int("job.seq_len", self.seq_len, MAX_SEQ_LEN)
        require(self.global_batch * self.seq_len <= MAX_TOKENS, "job.global_batch",
                self.global_batch, f"times seq_len ({self.seq_len}) must be at most {MAX_TOKENS} tokens")
        _choice("job.dtype", self.dtype, tuple(DTYPE_BYTES))
        _choice("job.framework", self.framework, FRAMEWORKS)
        _choice("job.moe_dispatcher", self.moe_dispatcher, MOE_DISPATCHERS)
        _choice("job.fp8_recipe", self.fp8_recipe, FP8_RECIPES)
        _choice("job.activation_offload_handler", self.activation_offload_handler, OFFLOAD_HANDLERS)
        require(self.fp8_recipe == "delayed" or self.dtype == "fp8", "job.fp8_recipe", self.fp8_recipe,
                f"is an FP8 recipe; needs dtype fp8, not {self.dtype}")
        if self.reserved_memory_bytes is not None:
            _non_negative_real("job.reserved_memory_bytes", self.reserved_memory_bytes)
        _non_negative_real("job.moe_load_cv", self.moe_load_cv)
        require(self.moe_load_cv <= MAX_LOAD_CV, "job.moe_load_cv", self.moe_load_cv, f"must be at most {MAX_LOAD_CV}")
        require(not self.fp8_param_gather or self.dtype == "fp8", "job.fp8_param_gather", True,
                f"stores weights in FP8; needs dtype fp8, not {self.dtype}")

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def tokens(self) -> int:
        return self.global_batch * self.seq_len

    @property
    def overlaps_sync(self) -> bool:
        """Whether any end-of-step data-parallel collective overlaps compute."""
        return self.overlap_grad_reduce or self.overlap_param_gather

    def document(self) -> dict:
        """The ``job`` object of a plan's JSON document (overlap switches only when on)."""
        opt = self.optimizer
        state = {} if opt == OptimizerSpec.named(opt.name) else {
            "optimizer_bytes": {"grad": opt.grad_bytes, "master": opt.master_bytes, "state": opt.state_bytes}}
        return {"global_batch": self.global_batch, "seq_len": self.seq_len, "dtype": self.dtype,
                **{name: True for name in OVERLAP_SWITCHES if getattr(self, name)},
                "optimizer": opt.name, **state, "flash_attention": self.flash_attention,
                **({"fp8_param_gather": True} if self.fp8_param_gather else {}),
                **({} if self.moe_dispatcher == "alltoall" else {"moe_dispatcher": self.moe_dispatcher}),
                **({} if not self.moe_load_cv else {"moe_load_cv": self.moe_load_cv}),
                **({} if self.reserved_memory_bytes is None else {"reserved_memory_bytes": self.reserved_memory_bytes}),
                **({} if self.host_threads == 1 else {"host_threads": self.host_threads}),
                **({} if self.fp8_recipe == "delayed" else {"fp8_recipe": self.fp8_recipe}),
                **({} if self.activation_offload_handler == "v1" else
                   {"activation_offload_handler": self.activation_offload_handler}),
                "framework": self.framework}

    @staticmethod
    def of_document(data: dict) -> "JobSpec":
        """The job of a plan's JSON document (:meth:`document`; documents of earlier
        versions lack the later keys)."""
        data = dict(data)
        optimizer = OptimizerSpec.named(data.pop("optimizer", "adam"))
        state = data.pop("optimizer_bytes", None)
        if isinstance(state, dict):
            optimizer = from_mapping(OptimizerSpec, {"name": optimizer.name, **{
                f"{k}_bytes": v for k, v in state.items()}}, "plan.job.optimizer_bytes")
        return from_mapping(JobSpec, {**data, "optimizer": optimizer}, "plan.job")

    def micro_batches(self, dp, micro_batch):
        """Micro-batches per replica and step (ceil; exact when the batch divides)."""
        return -(-self.global_batch // (dp * micro_batch))


OVERLAP_SWITCHES = ("overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap",
                    "overlap_moe_expert_parallel_comm")
"""The :class:`JobSpec` switches of communication overlap (Megatron-LM's flag names)."""

FP8_RECIPES = ("delayed", "tensorwise", "blockwise", "mxfp8")
"""The FP8 recipes nest tells apart (Megatron's ``--fp8-recipe``): ``delayed`` (its default),
``tensorwise`` (current scaling), ``blockwise`` (1 x 128 activation and 128 x 128 weight
scales, DeepSeek-V3's; Hopper only) and ``mxfp8`` (1 x 32 blocks with power-of-two
scales, the OCP microscaling format; Blackwell only)."""

OFFLOAD_HANDLERS = ("v1", "v2")
"""Transformer Engine's activation-offload implementations (:mod:`nest.cost.activation_offload`):
``v1``, TE 2.7's ``AsyncDoubleBufferGroupOffloadHandler`` (TE >= 2.10 with
``NVTE_CPU_OFFLOAD_V1=1``, ``cpu_offload_v1.py``), and ``v2``, TE >= 2.10's default
``DefaultOffloadSynchronizer`` (``cpu_offload.py``)."""

MOE_DISPATCHERS = ("alltoall", "flex")
"""The token dispatchers a job can use (``job.moe_dispatcher``, Megatron-Core's
``--moe-token-dispatcher-type`` values nest prices)."""

FRAMEWORKS = ("any", "megatron", "deepspeed", "torchtitan")
"""The frameworks a job can target (``job.framework``; :mod:`nest.frameworks`)."""


def field_names(cls) -> set[str]:
    """The constructor keys a spec file may use for ``cls``."""
    return {f.name for f in fields(cls)}


def from_mapping(cls, data: dict, where: str):
    """Build ``cls`` from a dict, rejecting unknown keys with a SpecError naming them."""
    if not isinstance(data, dict):
        raise SpecError(f"{where} = {short_repr(data)}: must be a mapping")
    reject_unknown_keys(data, field_names(cls), where)
    try:
        return cls(**data)
    except TypeError as error:
        raise SpecError(f"{where}: {error}") from None
