"""Per-node costs of one micro-batch on one device, for an intra-layer configuration.

A :class:`KindCost` separates what a node computes (kernel times, fixed by the layer
configuration) from what it communicates (collective *volumes*). The network prices
the volumes later, per candidate, on the groups the rank order gives them.

FLOPs follow Narayanan et al. 2021 (a block's forward is ``2 * tokens * weights`` for
its GEMMs plus ``4 b s^2 h`` for attention scores and values; backward is twice the
forward). Activation memory follows Korthikanti et al. 2022, section 4, generalised to
grouped-query and latent attention, SwiGLU, dropout-free models, experts and context
parallelism:

* inside the tensor-parallel region (divided by ``tp``): Q, K, V, the projection input,
  the MLP intermediates and the attention core (``5 a s^2 b`` without fused attention;
  its log-sum-exp with it);
* outside it (divided by ``tp`` only with sequence parallelism): the two norm inputs,
  the QKV and fc1 inputs and the dropout masks (``10 s b h`` for GPT);
* everything is divided by the context-parallel degree (each rank keeps ``s / cp``).

With GPT's shapes this gives exactly ``s b h (34 + 5 a s / h)`` without parallelism,
``s b h (10 + 24/t + 5 a s / (h t))`` with tensor parallelism and ``s b h / t
(34 + 5 a s / h)`` with sequence parallelism. Selective recomputation drops the
attention core; full recomputation keeps only the block input.

Experts (expert TP = 1): with sequence parallelism each rank routes its own ``b s / (cp
tp)`` tokens to ``top-k`` experts; dispatch and combine are all-to-alls of ``tokens x k x
hidden`` over the expert-parallel group, forward and backward (and again in a full
recomputation). The capacity factor pads expert GEMMs to capacity (dropless: 1).

Context parallelism (ring attention): each rank passes its K/V chunk around the ring,
``cp - 1`` steps forward; backward passes K/V and their gradients. The transfers overlap
with the attention core; only the excess is exposed.
"""

from __future__ import annotations

from dataclasses import dataclass

from .compute import KernelModel
from .model import BLOCK, EMBEDDING, HEAD, MOE, AttentionShape, attention_shape, node_params
from .specs import JobSpec, ModelSpec

RECOMPUTE_MODES = ("none", "selective", "full")

FLASH_BACKWARD_FACTOR = 2.5
"""Fused attention backward recomputes the scores: 2.5x the forward FLOPs (FlashAttention-2)."""


@dataclass(frozen=True)
class LayerConfig:
    """Everything that shapes one node's per-micro-batch compute and memory on one device."""

    tp: int
    sp: bool
    micro_batch: int
    recompute: str
    tied_copy: bool = False  # the head stage keeps its own copy of tied embeddings
    cp: int = 1
    ep: int = 1


@dataclass(frozen=True)
class KindCost:
    """One node of a kind, one micro-batch, one device (seconds, bytes, counts).

    Communication is given as volumes: ``tp_ops`` are ``(count, bytes)`` all-reduce
    equivalents on the tensor-parallel group (all-gather + reduce-scatter pairs with
    sequence parallelism have the same cost); ``cp_steps``/``cp_step_bytes`` the ring
    transfers forward and backward; ``ep_ops`` all-to-alls with the bytes each rank sends.
    """

    fwd_s: float
    bwd_s: float
    recompute_s: float
    core_fwd_s: float  # attention core, the compute ring attention hides transfers behind
    core_bwd_s: float
    tp_ops: tuple[tuple[float, float], ...]
    cp_fwd_bytes: float  # per ring step (K and V chunk)
    cp_bwd_bytes: float  # per ring step (K, V and their gradients)
    cp_steps_fwd: int  # ring steps forward (including a full recomputation's)
    cp_steps_bwd: int
    ep_ops: tuple[tuple[float, float], ...]
    params_dense: int
    params_expert: int
    act_bytes: int
    out_bytes: int
    transient_bytes: int
    model_flops: float  # forward + backward FLOPs without recomputation (for MFU)

    @property
    def compute_s(self) -> float:
        return self.fwd_s + self.bwd_s + self.recompute_s


class NodeCostModel:
    """Builds :class:`KindCost` for the node kinds of a transformer."""

    def __init__(self, model: ModelSpec, job: JobSpec, kernels: KernelModel):
        self.model = model
        self.job = job
        self.k = kernels
        # Activations (and what is communicated) stay in 16 bits even when GEMMs run in fp8.
        self.e = 4 if job.dtype == "fp32" else 2
        self.attn: AttentionShape = attention_shape(model)

    def cost(self, kind: str, cfg: LayerConfig) -> KindCost:
        """Cost of a node of ``kind`` (embedding, block, moe, head) under ``cfg``."""
        if kind == EMBEDDING:
            return self._embedding(cfg)
        if kind in (BLOCK, MOE):
            return self._block(cfg, kind == MOE)
        return self._head(cfg)

    # -- helpers -----------------------------------------------------------------------

    def _tokens(self, cfg: LayerConfig) -> int:
        """Tokens of one micro-batch held by one context-parallel rank."""
        return cfg.micro_batch * self.job.seq_len // cfg.cp

    def _replicated(self, cfg: LayerConfig) -> int:
        """Divisor of tensors outside the tensor-parallel region."""
        return cfg.tp if cfg.sp else 1

    def _hidden_bytes(self, cfg: LayerConfig) -> float:
        return self._tokens(cfg) * self.model.hidden * self.e

    def _out_bytes(self, cfg: LayerConfig) -> int:
        return int(self._hidden_bytes(cfg)) // self._replicated(cfg)

    def _params(self, kind: str, cfg: LayerConfig) -> tuple[int, int]:
        return node_params(self.model, kind, cfg.tp, cfg.tied_copy, cfg.ep)

    # -- blocks ------------------------------------------------------------------------

    def _attention_forward(self, cfg: LayerConfig) -> tuple[float, float, float, float]:
        """(GEMM time, element-wise time, core time, forward model FLOPs) of attention."""
        m, k, e, t, a = self.model, self.k, self.e, cfg.tp, self.attn
        n, s, b, h = self._tokens(cfg), self.job.seq_len, cfg.micro_batch, m.hidden
        rep = self._replicated(cfg)
        if m.kv_lora_rank:  # latent attention: one GEMM with the same FLOPs
            gemm = k.gemm(n, a.projection_params / h / t, h)
        else:
            gemm = k.gemm(n, (a.q_width + a.k_width + a.v_width) / t, h) + k.gemm(n, h, a.q_width / t)
        flops = 2 * n * a.projection_params
        # scores (q x k) and values, each rank's s/cp queries against all s keys
        core_flops = 2 * b * (s // cfg.cp) * s * (a.q_width + a.v_width)
        norm_residual = (2 + 3) * n * h * e / rep  # norm (r+w), residual + dropout
        if self.job.flash_attention:
            causal = 0.5 if m.causal else 1.0
            core = k.attention(core_flops * causal / t)
            elementwise = k.stream(norm_residual, kernels=3)
        else:
            heads = m.num_heads // t
            s_q = s // cfg.cp
            core = b * heads * (k.gemm(s_q, s, a.score_dim) + k.gemm(s_q, a.v_width / m.num_heads, s))
            scores = b * heads * s_q * s * e
            elementwise = k.stream(norm_residual + 3 * 2 * scores, kernels=6)
        return gemm, elementwise, core, flops + core_flops

    def _mlp_forward(self, cfg: LayerConfig, ffn: float, tokens: float, split: int) -> tuple[float, float, float]:
        """(GEMM, element-wise, FLOPs) of an MLP of width ``ffn`` split ``split`` ways."""
        m, k, e = self.model, self.k, self.e
        up = 2 if m.mlp == "swiglu" else 1
        gemm = k.gemm(tokens, up * ffn / split, m.hidden) + k.gemm(tokens, m.hidden, ffn / split)
        act = (3 if m.mlp == "swiglu" else 2) * tokens * ffn * e / split
        return gemm, k.stream(act, kernels=1), 2 * tokens * (up + 1) * m.hidden * ffn

    def _moe_forward(self, cfg: LayerConfig) -> tuple[float, float, float, float]:
        """(GEMM, element-wise, FLOPs, tokens routed by this rank) of a MoE layer."""
        m, k, e, t = self.model, self.k, self.e, cfg.tp
        n = self._tokens(cfg)
        local = n / t if cfg.sp else n  # tokens this rank routes (sequence-parallel share)
        routed = local * m.experts_per_token
        padded = routed * max(1.0, m.capacity_factor)
        experts_here = m.num_experts / cfg.ep
        gemm, elementwise, _ = self._mlp_forward(cfg, m.moe_ffn_hidden, padded / experts_here, 1)
        gemm *= experts_here
        elementwise = k.stream(3 * padded * m.moe_ffn_hidden * e, kernels=int(experts_here))
        gemm += k.gemm(local, m.num_experts, m.hidden)  # router
        elementwise += k.stream(4 * routed * m.hidden * e, kernels=4)  # permute / unpermute
        up = 2 if m.mlp == "swiglu" else 1
        flops = 2 * n * m.experts_per_token * (up + 1) * m.hidden * m.moe_ffn_hidden
        flops += 2 * n * m.hidden * m.num_experts
        if m.num_shared_experts:
            g, el, f = self._mlp_forward(cfg, m.num_shared_experts * m.moe_ffn_hidden, n, t)
            gemm, elementwise, flops = gemm + g, elementwise + el, flops + f
        return gemm, elementwise, flops, routed

    def _block_activations(self, cfg: LayerConfig, moe: bool) -> tuple[int, int, int]:
        """(kept without recompute, attention core part, block input) in bytes."""
        m, e, t, a = self.model, self.e, cfg.tp, self.attn
        s, b, h = self.job.seq_len // cfg.cp, cfg.micro_batch, m.hidden
        sbh = s * b * h
        rep = self._replicated(cfg)
        dropout_masks = 2 * sbh if m.dropout else 0  # one byte per element, two masks
        outside = 4 * sbh * e + dropout_masks  # two norm inputs, the QKV and fc1 inputs
        inside = e * s * b * (a.q_width + a.k_width + a.v_width) + e * s * b * a.v_width
        scores = m.num_heads * s * self.job.seq_len * b
        if self.job.flash_attention:
            core = 4 * m.num_heads * s * b  # fp32 log-sum-exp; the output is the projection input
        elif m.dropout:
            core = (2 * e + 1) * scores  # softmax output, dropout mask, dropout output
        else:
            core = e * scores
        widths = 3 if m.mlp == "swiglu" else 2
        expert = 0
        if moe:
            tokens = s * b / (t if cfg.sp else 1) * m.experts_per_token * max(1.0, m.capacity_factor)
            expert = int(tokens * (2 * h + widths * m.moe_ffn_hidden) * e)  # in, intermediates, out
            inside += widths * s * b * m.num_shared_experts * m.moe_ffn_hidden * e
        else:
            inside += widths * s * b * m.ffn_hidden * e
        full = outside // rep + (inside + core) // t + expert
        return full, core // t, e * sbh // rep

    def _block(self, cfg: LayerConfig, moe: bool) -> KindCost:
        gemm, elementwise, core, flops = self._attention_forward(cfg)
        tp_fwd = 1  # after attention
        routed = 0.0
        if moe:
            g, el, f, routed = self._moe_forward(cfg)
            tp_fwd += 1 if self.model.num_shared_experts else 0
        else:
            g, el, f = self._mlp_forward(cfg, self.model.ffn_hidden, self._tokens(cfg), cfg.tp)
            tp_fwd += 1
        el += self.k.stream(5 * self._hidden_bytes(cfg) / self._replicated(cfg), kernels=3)  # norm, residual
        gemm, elementwise, flops = gemm + g, elementwise + el, flops + f
        fwd = gemm + elementwise + core
        core_bwd = core * (FLASH_BACKWARD_FACTOR if self.job.flash_attention else 2.0)
        bwd = 2 * gemm + 2 * elementwise + core_bwd
        full, core_bytes, block_input = self._block_activations(cfg, moe)
        passes = 3 if cfg.recompute == "full" else 2  # forward collectives repeated
        if cfg.recompute == "full":
            recompute, kept = fwd, block_input
        elif cfg.recompute == "selective":
            recompute, kept = core, full - core_bytes
        else:
            recompute, kept = 0.0, full
        tp_ops = ((tp_fwd * passes, self._hidden_bytes(cfg)),) if cfg.tp > 1 else ()
        ep_ops = ((2 * passes, routed * self.model.hidden * self.e),) if moe and cfg.ep > 1 else ()
        kv = self.job.seq_len // cfg.cp * cfg.micro_batch * (self.attn.k_width + self.attn.v_width)
        kv = kv * self.e / cfg.tp
        steps = cfg.cp - 1
        dense, expert = self._params(MOE if moe else BLOCK, cfg)
        return KindCost(
            fwd_s=fwd, bwd_s=bwd, recompute_s=recompute, core_fwd_s=core, core_bwd_s=core_bwd,
            tp_ops=tp_ops, cp_fwd_bytes=kv, cp_bwd_bytes=2 * kv,
            cp_steps_fwd=steps * (2 if cfg.recompute == "full" else 1), cp_steps_bwd=steps,
            ep_ops=ep_ops, params_dense=dense, params_expert=expert, act_bytes=kept,
            out_bytes=self._out_bytes(cfg), transient_bytes=full if cfg.recompute != "none" else 0,
            model_flops=3 * flops / cfg.tp)

    # -- embedding and head ------------------------------------------------------------

    def _no_comm(self, fwd, bwd, recompute, kind, cfg, act, out, transient, flops, tp_ops) -> KindCost:
        dense, expert = self._params(kind, cfg)
        return KindCost(
            fwd_s=fwd, bwd_s=bwd, recompute_s=recompute, core_fwd_s=0.0, core_bwd_s=0.0,
            tp_ops=tp_ops, cp_fwd_bytes=0.0, cp_bwd_bytes=0.0, cp_steps_fwd=0, cp_steps_bwd=0,
            ep_ops=(), params_dense=dense, params_expert=expert, act_bytes=act, out_bytes=out,
            transient_bytes=transient, model_flops=flops)

    def _embedding(self, cfg: LayerConfig) -> KindCost:
        m, n, e = self.model, self._tokens(cfg), self.e
        rep = self._replicated(cfg)
        lookups = 1 + (m.position_embedding == "learned") + (m.type_vocab_size > 0)
        fwd = self.k.stream((lookups + 1) * n * m.hidden * e / rep, kernels=lookups + 1)
        bwd = self.k.stream(2 * lookups * n * m.hidden * e / rep, kernels=lookups)
        # Vocabulary-parallel lookup ends in an all-reduce (a reduce-scatter with SP, whose
        # backward all-gather makes one all-reduce equivalent in total).
        tp_ops = ((1.0, self._hidden_bytes(cfg)),) if cfg.tp > 1 else ()
        return self._no_comm(fwd, bwd, fwd if cfg.recompute == "full" else 0.0, EMBEDDING, cfg,
                             (n * m.hidden if m.dropout else 0) // rep, self._out_bytes(cfg), 0, 0.0,
                             tp_ops)

    def _head(self, cfg: LayerConfig) -> KindCost:
        m, k, e, t = self.model, self.k, self.e, cfg.tp
        n, h, v = self._tokens(cfg), m.hidden, m.vocab_size
        rep = self._replicated(cfg)
        gemm = k.gemm(n, v / t, h)
        flops = 2 * n * h * v
        acts = 2 * n * h * e // rep  # final norm input, logits-GEMM input
        if m.encoder_head:
            gemm += k.gemm(n, h, h)
            flops += 2 * n * h * h
            acts += n * h * e  # masked-LM transform output
        logits = 4 * n * v // t  # fp32 logits kept for the cross-entropy backward
        fwd = gemm + k.stream(2 * 2 * n * h * e / rep + 3 * logits, kernels=4)
        bwd = 2 * gemm + k.stream(2 * 2 * n * h * e / rep + 2 * logits, kernels=3)
        # SP all-gathers the sequence before the logits GEMM (reduce-scatter back);
        # otherwise the column-parallel input gradient is all-reduced. Vocabulary-
        # parallel cross-entropy adds three small fp32 all-reduces of n values.
        tp_ops = ((1.0, self._hidden_bytes(cfg)), (3.0, 4.0 * n)) if t > 1 else ()
        return self._no_comm(fwd, bwd, fwd if cfg.recompute == "full" else 0.0, HEAD, cfg,
                             acts + logits, 0, logits, 3 * flops / t, tp_ops)
