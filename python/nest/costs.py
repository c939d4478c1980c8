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

Kernel times come from :class:`nest.compute.KernelModel` (the efficiency curves of
:mod:`nest.efficiency`): with FP8 the linear layers' GEMMs run in FP8 and quantize their
inputs, while attention, the output layer and MoE routers stay in 16 bits (``bmm``).

Context parallelism (ring attention): each rank passes its K/V chunk around the ring,
``cp - 1`` steps forward; backward passes K/V and their gradients. The transfers overlap
with the attention core; only the excess is exposed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .compute import FLASH_BACKWARD_FACTOR, KernelModel  # noqa: F401  (FLASH_BACKWARD_FACTOR re-exported)
from .model import BLOCK, EMBEDDING, HEAD, MOE, AttentionShape, attention_shape, node_params
from .specs import JobSpec, ModelSpec

RECOMPUTE_MODES = ("none", "selective", "full")


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
class ConfigArrays:
    """Many layer configurations as columns (``recompute`` holds indices into
    ``RECOMPUTE_MODES``), for pricing them all with numpy at once."""

    tp: np.ndarray
    sp: np.ndarray
    micro_batch: np.ndarray
    recompute: np.ndarray
    tied_copy: np.ndarray
    cp: np.ndarray
    ep: np.ndarray

    def __len__(self) -> int:
        return len(self.tp)

    @staticmethod
    def of(configs: list[LayerConfig]) -> "ConfigArrays":
        mode = {name: i for i, name in enumerate(RECOMPUTE_MODES)}
        col = lambda get, dtype=np.int64: np.array([get(c) for c in configs], dtype=dtype)  # noqa: E731
        return ConfigArrays(col(lambda c: c.tp), col(lambda c: c.sp, bool), col(lambda c: c.micro_batch),
                            col(lambda c: mode[c.recompute]), col(lambda c: c.tied_copy, bool),
                            col(lambda c: c.cp), col(lambda c: c.ep))

    def take(self, index: np.ndarray) -> "ConfigArrays":
        return ConfigArrays(*(getattr(self, f)[index] for f in
                              ("tp", "sp", "micro_batch", "recompute", "tied_copy", "cp", "ep")))

    def config(self, i: int) -> LayerConfig:
        return LayerConfig(int(self.tp[i]), bool(self.sp[i]), int(self.micro_batch[i]),
                           RECOMPUTE_MODES[int(self.recompute[i])], bool(self.tied_copy[i]),
                           int(self.cp[i]), int(self.ep[i]))


class ConfigList(Sequence):
    """The :class:`LayerConfig` of every row of a :class:`ConfigArrays`, built when read."""

    def __init__(self, arrays: ConfigArrays):
        self.arrays = arrays
        self._built: dict[int, LayerConfig] = {}

    def __len__(self) -> int:
        return len(self.arrays)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = int(i)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        if i not in self._built:
            self._built[i] = self.arrays.config(i)
        return self._built[i]

    def __eq__(self, other) -> bool:
        return list(self) == list(other)


COST_FIELDS = ("fwd_s", "bwd_s", "recompute_s", "compute_s", "core_fwd_s", "core_bwd_s",
               "cp_fwd_bytes", "cp_bwd_bytes", "cp_steps_fwd", "cp_steps_bwd", "params_dense",
               "params_expert", "act_bytes", "out_bytes", "transient_bytes")
"""One column per configuration (of :meth:`NodeCostModel.table` and
:func:`kind_cost_columns`): the :class:`KindCost` fields the planner uses."""

OP_FIELDS = ("tp_count", "tp_bytes", "ep_count", "ep_bytes")
"""``[configuration, slot]`` columns: the ``(count, bytes)`` of ``tp_ops`` and ``ep_ops``,
in order, padded with count 0 and bytes 0 (no operation)."""

_INT_FIELDS = ("cp_steps_fwd", "cp_steps_bwd", "params_dense", "params_expert", "act_bytes", "out_bytes",
               "transient_bytes")


def kind_cost_columns(costs: list["KindCost"]) -> dict[str, np.ndarray]:
    """:data:`COST_FIELDS` and :data:`OP_FIELDS` columns of :class:`KindCost` objects (any
    cost source)."""
    out = {name: np.array([getattr(c, name) for c in costs],
                          dtype=np.int64 if name in _INT_FIELDS else np.float64) for name in COST_FIELDS}
    for prefix, get in (("tp", lambda c: c.tp_ops), ("ep", lambda c: c.ep_ops)):
        slots = max([len(get(c)) for c in costs], default=0) or 1
        rows = [list(get(c)) + [(0.0, 0.0)] * (slots - len(get(c))) for c in costs]
        table = np.array(rows, dtype=np.float64).reshape(len(costs), slots, 2)
        out[prefix + "_count"], out[prefix + "_bytes"] = table[:, :, 0], table[:, :, 1]
    return out


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

    def _attention_forward(self, cfg: LayerConfig) -> tuple[float, float, float, float, float]:
        """(GEMM time, element-wise time, core forward time, core backward time, forward
        model FLOPs) of attention."""
        a, n, s, b = self.attn, self._tokens(cfg), self.job.seq_len, cfg.micro_batch
        flops = 2 * n * a.projection_params
        core_flops = 2 * b * (s // cfg.cp) * s * (a.q_width + a.o_width)
        return (*self._attention_kernels(n, s, b, cfg.tp, cfg.cp, self._replicated(cfg), self.k.gemm, self.k.bmm),
                flops + core_flops)

    def _attention_kernels(self, n, s, b, t, cp, rep, gemm_of, bmm_of):
        """(GEMM, element-wise, core forward, core backward) times of attention for
        scalars or numpy columns alike: ``gemm_of``/``bmm_of`` are the kernel model's
        scalar or columnar matmuls, every other operation works on both in the same
        order, so the two paths agree bit for bit."""
        m, k, e, a, h = self.model, self.k, self.e, self.attn, self.model.hidden
        if m.kv_lora_rank:  # latent attention: one GEMM with the same FLOPs
            gemm = gemm_of(n, a.projection_params / h / t, h)
        else:
            gemm = gemm_of(n, (a.q_width + a.k_width + a.v_width) / t, h) + gemm_of(n, h, a.q_width / t)
        # scores (q x k) and values, each rank's s/cp queries against all s keys; with
        # grouped keys and values every query head still computes its own products
        core_flops = 2 * b * (s // cp) * s * (a.q_width + a.o_width)
        norm_residual = (2 + 3) * n * h * e / rep  # norm (r+w), residual + dropout
        if self.job.flash_attention:
            causal = 0.5 if m.causal else 1.0
            core = k.attention(core_flops * causal / t)
            core_bwd = k.attention_backward(core_flops * causal / t)
            elementwise = k.stream(norm_residual, kernels=3)
        else:
            heads = m.num_heads // t
            s_q = s // cp
            # one strided-batched launch per matmul over micro-batch x heads
            core = bmm_of(s_q, s, a.score_dim, b * heads) + bmm_of(s_q, a.o_width / m.num_heads, s, b * heads)
            core_bwd = 2.0 * core
            scores = b * heads * s_q * s * e
            elementwise = k.stream(norm_residual + 3 * 2 * scores, kernels=6)
        return gemm, elementwise, core, core_bwd

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
        gemm += k.bmm(local, m.num_experts, m.hidden, 1)  # router (16-bit, never FP8)
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
        inside = e * s * b * (a.q_width + a.k_width + a.v_width) + e * s * b * a.o_width
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
        gemm, elementwise, core, core_bwd, flops = self._attention_forward(cfg)
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
        # the output layer is a plain 16-bit GEMM (Megatron keeps it out of FP8)
        gemm = k.bmm(n, v / t, h, 1)
        flops = 2 * n * h * v
        acts = 2 * n * h * e // rep  # final norm input, logits-GEMM input
        if m.encoder_head:
            gemm += k.bmm(n, h, h, 1)
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

    # -- many configurations at once (see the note above table_is_exact) ------------

    def table(self, kind: str, c: ConfigArrays) -> dict[str, np.ndarray]:
        """Columns :data:`COST_FIELDS` of ``kind`` for every configuration in ``c``."""
        if kind == EMBEDDING:
            out = self._embedding_table(c)
        elif kind in (BLOCK, MOE):
            out = self._block_table(c, kind == MOE)
        else:
            out = self._head_table(c)
        params = {}
        keys = np.stack([c.tp, c.tied_copy.astype(np.int64), c.ep], axis=1)
        unique, inverse = np.unique(keys, axis=0, return_inverse=True)
        for i, (tp, tied, ep) in enumerate(unique):
            params[i] = node_params(self.model, kind, int(tp), bool(tied), int(ep))
        dense = np.array([params[i][0] for i in range(len(unique))], dtype=np.int64)
        expert = np.array([params[i][1] for i in range(len(unique))], dtype=np.int64)
        out["params_dense"] = dense[inverse.ravel()]
        out["params_expert"] = expert[inverse.ravel()]
        out["compute_s"] = out["fwd_s"] + out["bwd_s"] + out["recompute_s"]
        size = len(c)
        column = lambda value, dtype=np.float64: np.ascontiguousarray(  # noqa: E731
            np.broadcast_to(np.asarray(value), (size,)), dtype=dtype)
        for name in COST_FIELDS:
            out[name] = column(out[name], np.int64 if name in _INT_FIELDS else np.float64)
        for name, slots in (("tp_count", 2), ("tp_bytes", 2), ("ep_count", 1), ("ep_bytes", 1)):
            names = [f"{name}{i}" for i in range(slots)] if slots > 1 else [name]
            out[name] = np.stack([column(out.pop(n)) for n in names], axis=1)
        return out

    def _tokens_v(self, c):
        return c.micro_batch * self.job.seq_len // c.cp

    def _replicated_v(self, c):
        return _where(c.sp, c.tp, 1)

    def _hidden_bytes_v(self, c):
        return self._tokens_v(c) * self.model.hidden * self.e

    def _attention_table(self, c):
        return self._attention_kernels(self._tokens_v(c), self.job.seq_len, c.micro_batch, c.tp, c.cp,
                                       self._replicated_v(c), self.k.gemms, self.k.bmms)

    def _mlp_table(self, c, ffn, tokens, split):
        m, k, e = self.model, self.k, self.e
        up = 2 if m.mlp == "swiglu" else 1
        gemm = k.gemms(tokens, up * ffn / split, m.hidden) + k.gemms(tokens, m.hidden, ffn / split)
        act = (3 if m.mlp == "swiglu" else 2) * tokens * ffn * e / split
        return gemm, k.stream(act, kernels=1)

    def _moe_table(self, c):
        m, k, e, t = self.model, self.k, self.e, c.tp
        n = self._tokens_v(c)
        local = _where(c.sp, n / t, n)  # exact: token counts are far below 2^53
        routed = local * m.experts_per_token
        padded = routed * max(1.0, m.capacity_factor)
        experts_here = m.num_experts / c.ep
        gemm, _ = self._mlp_table(c, m.moe_ffn_hidden, padded / experts_here, 1)
        gemm = gemm * experts_here
        elementwise = k.stream(3 * padded * m.moe_ffn_hidden * e, kernels=experts_here.astype(np.int64))
        gemm = gemm + k.bmms(local, m.num_experts, m.hidden, 1)
        elementwise = elementwise + k.stream(4 * routed * m.hidden * e, kernels=4)
        if m.num_shared_experts:
            g, el = self._mlp_table(c, m.num_shared_experts * m.moe_ffn_hidden, n, t)
            gemm, elementwise = gemm + g, elementwise + el
        return gemm, elementwise, routed

    def _block_activations_table(self, c, moe):
        m, e, t, a = self.model, self.e, c.tp, self.attn
        s, b, h = self.job.seq_len // c.cp, c.micro_batch, m.hidden
        sbh = s * b * h
        rep = self._replicated_v(c)
        dropout_masks = 2 * sbh if m.dropout else 0
        outside = 4 * sbh * e + dropout_masks
        inside = e * s * b * (a.q_width + a.k_width + a.v_width) + e * s * b * a.o_width
        scores = m.num_heads * s * self.job.seq_len * b
        if self.job.flash_attention:
            core = 4 * m.num_heads * s * b
        elif m.dropout:
            core = (2 * e + 1) * scores
        else:
            core = e * scores
        widths = 3 if m.mlp == "swiglu" else 2
        expert = 0
        if moe:
            tokens = s * b / _where(c.sp, t, 1) * m.experts_per_token * max(1.0, m.capacity_factor)
            expert = (tokens * (2 * h + widths * m.moe_ffn_hidden) * e).astype(np.int64)
            inside = inside + widths * s * b * m.num_shared_experts * m.moe_ffn_hidden * e
        else:
            inside = inside + widths * s * b * m.ffn_hidden * e
        full = outside // rep + (inside + core) // t + expert
        return full, core // t, e * sbh // rep

    def _block_table(self, c, moe):
        gemm, elementwise, core, core_bwd = self._attention_table(c)
        tp_fwd = 1
        routed = 0.0
        if moe:
            g, el, routed = self._moe_table(c)
            tp_fwd += 1 if self.model.num_shared_experts else 0
        else:
            g, el = self._mlp_table(c, self.model.ffn_hidden, self._tokens_v(c), c.tp)
            tp_fwd += 1
        hidden_bytes = self._hidden_bytes_v(c)
        el = el + self.k.stream(5 * hidden_bytes / self._replicated_v(c), kernels=3)
        gemm, elementwise = gemm + g, elementwise + el
        fwd = gemm + elementwise + core
        bwd = 2 * gemm + 2 * elementwise + core_bwd
        full_bytes, core_bytes, block_input = self._block_activations_table(c, moe)
        full, selective = c.recompute == RECOMPUTE_MODES.index("full"), c.recompute == RECOMPUTE_MODES.index("selective")
        passes = _where(full, 3, 2)
        recompute = _where(full, fwd, _where(selective, core, 0.0))
        kept = _where(full, block_input, _where(selective, full_bytes - core_bytes, full_bytes))
        has_tp = c.tp > 1
        has_ep = (c.ep > 1) & moe
        kv = self.job.seq_len // c.cp * c.micro_batch * (self.attn.k_width + self.attn.v_width)
        kv = kv * self.e / c.tp
        steps = c.cp - 1
        return {
            "fwd_s": fwd, "bwd_s": bwd, "recompute_s": recompute, "core_fwd_s": core, "core_bwd_s": core_bwd,
            "tp_count0": _where(has_tp, tp_fwd * passes, 0), "tp_bytes0": _where(has_tp, hidden_bytes, 0),
            "tp_count1": 0.0, "tp_bytes1": 0.0,
            "cp_fwd_bytes": kv, "cp_bwd_bytes": 2 * kv, "cp_steps_fwd": steps * _where(full, 2, 1),
            "cp_steps_bwd": steps,
            "ep_count": _where(has_ep, 2 * passes, 0), "ep_bytes": _where(has_ep, routed * self.model.hidden * self.e, 0.0),
            "act_bytes": kept, "out_bytes": hidden_bytes // self._replicated_v(c),
            "transient_bytes": _where(c.recompute != RECOMPUTE_MODES.index("none"), full_bytes, 0),
        }

    def _embedding_table(self, c):
        m, n, e = self.model, self._tokens_v(c), self.e
        rep = self._replicated_v(c)
        lookups = 1 + (m.position_embedding == "learned") + (m.type_vocab_size > 0)
        fwd = self.k.stream((lookups + 1) * n * m.hidden * e / rep, kernels=lookups + 1)
        bwd = self.k.stream(2 * lookups * n * m.hidden * e / rep, kernels=lookups)
        has_tp = c.tp > 1
        full = c.recompute == RECOMPUTE_MODES.index("full")
        tp_ops = {"tp_count0": _where(has_tp, 1.0, 0.0), "tp_bytes0": _where(has_tp, self._hidden_bytes_v(c), 0),
                  "tp_count1": 0.0, "tp_bytes1": 0.0}
        return _no_comm_table(fwd, bwd, _where(full, fwd, 0.0), (n * m.hidden if m.dropout else 0) // rep,
                              self._hidden_bytes_v(c) // rep, 0, tp_ops)

    def _head_table(self, c):
        m, k, e, t = self.model, self.k, self.e, c.tp
        n, h, v = self._tokens_v(c), m.hidden, m.vocab_size
        rep = self._replicated_v(c)
        gemm = k.bmms(n, v / t, h, 1)
        acts = 2 * n * h * e // rep
        if m.encoder_head:
            gemm = gemm + k.bmms(n, h, h, 1)
            acts = acts + n * h * e
        logits = 4 * n * v // t
        fwd = gemm + k.stream(2 * 2 * n * h * e / rep + 3 * logits, kernels=4)
        bwd = 2 * gemm + k.stream(2 * 2 * n * h * e / rep + 2 * logits, kernels=3)
        has_tp = t > 1
        full = c.recompute == RECOMPUTE_MODES.index("full")
        tp_ops = {"tp_count0": _where(has_tp, 1.0, 0.0), "tp_bytes0": _where(has_tp, self._hidden_bytes_v(c), 0),
                  "tp_count1": _where(has_tp, 3.0, 0.0), "tp_bytes1": _where(has_tp, 4.0 * n, 0.0)}
        return _no_comm_table(fwd, bwd, _where(full, fwd, 0.0), acts + logits, 0, logits, tp_ops)



# -- many configurations at once ---------------------------------------------------------
#
# NodeCostModel.table prices one node kind under many layer configurations with numpy.
# Every expression mirrors the scalar method of the same name above, operation for
# operation and in the same order; integer quantities stay int64 where the scalar code
# has Python ints, floats stay float64. IEEE arithmetic and int -> float conversions are
# then identical, so each element equals the scalar result bit for bit, provided no int64
# overflows and every int / int true division has operands below 2^53 (where Python's
# correctly rounded division and numpy's convert-then-divide agree). ``table_is_exact``
# checks both bounds for the largest configuration; the caller falls back to the scalar
# model otherwise.

_EXACT = 2**53
_INT64_SAFE = 2**62


def _where(cond, a, b):
    return np.where(cond, a, b)


def table_is_exact(model: ModelSpec, job: JobSpec, e: int, max_micro_batch: int) -> bool:
    """Whether :meth:`NodeCostModel.table` is bit-exact for micro-batches up to the given
    one: every int / int true division (and every integer the scalar code keeps exact
    while the table rounds it, the routed-token counts of experts) below 2^53, every
    int64 product below 2^62. All are largest at cp = tp = 1."""
    m, s, b = model, job.seq_len, max_micro_batch
    a = attention_shape(model)
    n = b * s  # tokens of one micro-batch
    ffn = max(m.ffn_hidden, m.moe_ffn_hidden * m.num_shared_experts)
    divided = [6 * n * m.hidden * e, 3 * n * ffn * e, s * b * (a.k_width + a.v_width) * e,
               3 * n * m.moe_ffn_hidden * e]
    if m.is_moe:
        divided += [4 * n * m.experts_per_token * m.hidden * e, n * (m.hidden + m.num_experts) * 4]
    products = [m.num_heads * s * s * b * (2 * e + 1), 2 * b * s * s * (a.q_width + a.o_width),
                e * s * b * (a.q_width + a.k_width + a.v_width + a.o_width + 3 * ffn + 3 * m.ffn_hidden),
                4 * n * m.vocab_size, 8 * n * m.hidden * e]
    return max(divided) < _EXACT and max(products) < _INT64_SAFE


def _no_comm_table(fwd, bwd, recompute, act, out, transient, tp_ops):
    columns = {"fwd_s": fwd, "bwd_s": bwd, "recompute_s": recompute, "core_fwd_s": 0.0,
               "core_bwd_s": 0.0, "cp_fwd_bytes": 0.0, "cp_bwd_bytes": 0.0, "cp_steps_fwd": 0,
               "cp_steps_bwd": 0, "ep_count": 0.0, "ep_bytes": 0.0, "act_bytes": act,
               "out_bytes": out, "transient_bytes": transient}
    columns.update(tp_ops)
    return columns
