"""Per-node costs of one micro-batch on one device, for an intra-layer configuration.

FLOPs follow Narayanan et al. 2021 (a block's forward is ``2 * tokens * weights`` for
its GEMMs plus ``4 b s^2 h`` for attention scores and values; backward is twice the
forward). Activation memory follows Korthikanti et al. 2022, section 4, generalised to
grouped-query attention, SwiGLU and dropout-free models:

* inside the tensor-parallel region (divided by ``tp``): Q, K, V, the projection input,
  the MLP intermediates and the attention core (``5 a s^2 b`` without fused attention;
  its output and log-sum-exp with it);
* outside it (divided by ``tp`` only with sequence parallelism): the two norm inputs,
  the QKV and fc1 inputs and the dropout masks (``10 s b h`` for GPT).

With GPT's shapes this gives exactly ``s b h (34 + 5 a s / h)`` without parallelism,
``s b h (10 + 24/t + 5 a s / (h t))`` with tensor parallelism and ``s b h / t
(34 + 5 a s / h)`` with sequence parallelism. Selective recomputation drops the
attention core; full recomputation keeps only the block input (``2 s b h``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .compute import KernelModel
from .model import BLOCK, EMBEDDING, node_params
from .network import GroupShape
from .specs import JobSpec, ModelSpec

RECOMPUTE_MODES = ("none", "selective", "full")

FLASH_BACKWARD_FACTOR = 2.5
"""Fused attention backward recomputes the scores: 2.5x the forward FLOPs (FlashAttention-2)."""


@dataclass(frozen=True)
class LayerConfig:
    """Everything that shapes one node's per-micro-batch cost on one device."""

    tp: int
    sp: bool
    micro_batch: int
    recompute: str
    tied_copy: bool = False  # the head stage keeps its own copy of tied embeddings


@dataclass(frozen=True)
class NodeCost:
    """One node, one micro-batch, one device (seconds and bytes)."""

    compute_s: float  # forward + backward + recomputation kernels
    tp_comm_s: float  # tensor-parallel collectives on the critical path
    params: int  # parameters held
    act_bytes: int  # activations kept until the backward pass
    out_bytes: int  # activation sent to the next stage (and gradient received back)
    transient_bytes: int  # working memory while the node runs its backward
    model_flops: float  # forward + backward FLOPs without recomputation (for MFU)

    @property
    def time_s(self) -> float:
        return self.compute_s + self.tp_comm_s


class NodeCostModel:
    """Builds :class:`NodeCost` for the three node kinds of a dense transformer."""

    def __init__(self, model: ModelSpec, job: JobSpec, kernels: KernelModel, tp_group: GroupShape):
        self.model = model
        self.job = job
        self.k = kernels
        self.tp_group = tp_group
        # Activations (and what is communicated) stay in 16 bits even when GEMMs run in fp8.
        self.e = 4 if job.dtype == "fp32" else 2

    def cost(self, kind: str, cfg: LayerConfig) -> NodeCost:
        """Cost of a node of ``kind`` (embedding, block, head) under ``cfg``."""
        if kind == EMBEDDING:
            return self._embedding(cfg)
        if kind == BLOCK:
            return self._block(cfg)
        return self._head(cfg)

    # -- helpers -----------------------------------------------------------------------

    def _tokens(self, cfg: LayerConfig) -> int:
        return cfg.micro_batch * self.job.seq_len

    def _replicated(self, cfg: LayerConfig) -> int:
        """Divisor of tensors outside the tensor-parallel region."""
        return cfg.tp if cfg.sp else 1

    def _hidden_collective(self, cfg: LayerConfig, count: int) -> float:
        """``count`` all-reduces (or all-gather + reduce-scatter pairs) of ``tokens x h``."""
        if cfg.tp == 1:
            return 0.0
        return count * self.tp_group.all_reduce(self._tokens(cfg) * self.model.hidden * self.e)

    def _out_bytes(self, cfg: LayerConfig) -> int:
        return self._tokens(cfg) * self.model.hidden * self.e // self._replicated(cfg)

    # -- nodes -------------------------------------------------------------------------

    def _block_forward(self, cfg: LayerConfig) -> tuple[float, float, float, float]:
        """(GEMM time, element-wise time, attention-core time, forward model FLOPs)."""
        m, k, e, t = self.model, self.k, self.e, cfg.tp
        n, s, b, h, f = self._tokens(cfg), self.job.seq_len, cfg.micro_batch, m.hidden, m.ffn_hidden
        rep = self._replicated(cfg)
        up = 2 if m.mlp == "swiglu" else 1
        gemm = (k.gemm(n, (h + 2 * m.kv_hidden) / t, h) + k.gemm(n, h, h / t)
                + k.gemm(n, up * f / t, h) + k.gemm(n, h, f / t))
        gemm_flops = 2 * n * (h * (h + 2 * m.kv_hidden) + h * h + (up + 1) * h * f)
        core_flops = 4 * b * s * s * h  # scores and values, counted in full as in Megatron
        mlp_act = (3 if m.mlp == "swiglu" else 2) * n * f * e / t
        norms_residuals = (2 * 2 + 2 * 3) * n * h * e / rep  # 2 norms (r+w), 2 residual+dropout
        if self.job.flash_attention:
            causal = 0.5 if m.causal else 1.0
            core = k.attention(core_flops * causal / t)
            elementwise = k.stream(norms_residuals + mlp_act, kernels=6)
        else:
            heads = m.num_heads // t
            core = b * heads * (k.gemm(s, s, m.head_dim) + k.gemm(s, m.head_dim, s))
            scores = b * heads * s * s * e
            elementwise = k.stream(norms_residuals + mlp_act + 3 * 2 * scores, kernels=9)
        return gemm, elementwise, core, gemm_flops + core_flops

    def _block_activations(self, cfg: LayerConfig) -> tuple[int, int, int]:
        """(kept without recompute, attention core part, block input) in bytes."""
        m, e, t = self.model, self.e, cfg.tp
        s, b, h, f = self.job.seq_len, cfg.micro_batch, m.hidden, m.ffn_hidden
        sbh = s * b * h
        rep = self._replicated(cfg)
        dropout_masks = 2 * sbh if m.dropout else 0  # one byte per element, two masks
        outside = 4 * sbh * e + dropout_masks  # two norm inputs, the QKV and fc1 inputs
        inside = e * s * b * (h + 2 * m.kv_hidden) + e * sbh  # Q, K, V, projection input
        inside += (3 if m.mlp == "swiglu" else 2) * s * b * f * e  # MLP intermediates
        scores = m.num_heads * s * s * b
        if self.job.flash_attention:
            core = 4 * m.num_heads * s * b  # fp32 log-sum-exp; the output is the projection input
        elif m.dropout:
            core = (2 * e + 1) * scores  # softmax output, dropout mask, dropout output
        else:
            core = e * scores
        full = outside // rep + (inside + core) // t
        return full, core // t, e * sbh // rep

    def _block(self, cfg: LayerConfig) -> NodeCost:
        gemm, elementwise, core, flops = self._block_forward(cfg)
        fwd = gemm + elementwise + core
        core_bwd = core * (FLASH_BACKWARD_FACTOR if self.job.flash_attention else 2.0)
        bwd = 2 * gemm + 2 * elementwise + core_bwd
        comm = self._hidden_collective(cfg, 4)
        full, core_bytes, block_input = self._block_activations(cfg)
        if cfg.recompute == "full":
            extra, comm, kept = fwd, comm + self._hidden_collective(cfg, 2), block_input
        elif cfg.recompute == "selective":
            extra, kept = core, full - core_bytes
        else:
            extra, kept = 0.0, full
        return NodeCost(
            compute_s=fwd + bwd + extra, tp_comm_s=comm,
            params=node_params(self.model, BLOCK, cfg.tp, False),
            act_bytes=kept, out_bytes=self._out_bytes(cfg),
            transient_bytes=full if cfg.recompute != "none" else 0,
            model_flops=3 * flops / cfg.tp)

    def _embedding(self, cfg: LayerConfig) -> NodeCost:
        m, n, e = self.model, self._tokens(cfg), self.e
        rep = self._replicated(cfg)
        lookups = 1 + (m.position_embedding == "learned") + (m.type_vocab_size > 0)
        fwd = self.k.stream((lookups + 1) * n * m.hidden * e / rep, kernels=lookups + 1)
        bwd = self.k.stream(2 * lookups * n * m.hidden * e / rep, kernels=lookups)
        # Vocabulary-parallel lookup ends in an all-reduce (reduce-scatter with SP);
        # its backward needs an all-gather only with SP.
        comm = self._hidden_collective(cfg, 2 if cfg.sp else 1) / (2 if cfg.sp else 1)
        return NodeCost(
            compute_s=fwd + bwd + (fwd if cfg.recompute == "full" else 0.0), tp_comm_s=comm,
            params=node_params(m, EMBEDDING, cfg.tp, False),
            act_bytes=(n * m.hidden if m.dropout else 0) // rep, out_bytes=self._out_bytes(cfg),
            transient_bytes=0, model_flops=0.0)

    def _head(self, cfg: LayerConfig) -> NodeCost:
        m, k, e, t = self.model, self.k, self.e, cfg.tp
        n, h, v = self._tokens(cfg), m.hidden, m.vocab_size
        rep = self._replicated(cfg)
        gemm = k.gemm(n, v / t, h)
        flops = 2 * n * h * v
        acts = 2 * n * h * self.e // rep  # final norm input, logits-GEMM input
        if m.encoder_head:
            gemm += k.gemm(n, h, h)
            flops += 2 * n * h * h
            acts += n * h * self.e  # masked-LM transform output
        logits = 4 * n * v // t  # fp32 logits kept for the cross-entropy backward
        fwd = gemm + k.stream(2 * 2 * n * h * e / rep + 3 * logits, kernels=4)
        bwd = 2 * gemm + k.stream(2 * 2 * n * h * e / rep + 2 * logits, kernels=3)
        comm = 0.0
        if t > 1:
            # SP all-gathers the sequence before the logits GEMM (reduce-scatter back);
            # otherwise the column-parallel input gradient is all-reduced. Vocabulary-
            # parallel cross-entropy adds three small fp32 all-reduces of n values.
            comm = self._hidden_collective(cfg, 1) + 3 * self.tp_group.all_reduce(4 * n)
        return NodeCost(
            compute_s=fwd + bwd + (fwd if cfg.recompute == "full" else 0.0), tp_comm_s=comm,
            params=node_params(m, "head", t, cfg.tied_copy),
            act_bytes=acts + logits, out_bytes=0, transient_bytes=logits,
            model_flops=3 * flops / t)
