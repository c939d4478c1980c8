"""Per-node costs of one micro-batch on one device, for many layer configurations at once.

The node cost model is columnar: :meth:`NodeCostModel.table` prices one node kind under
every configuration of a :class:`~nest.parallel.ConfigArrays` with numpy, one column per
:data:`COST_FIELDS` entry; one configuration is a one-row table. It separates what a node
computes (kernel times, fixed by the layer configuration) from what it communicates
(collective *volumes*): the network prices the volumes later, per candidate, on the groups
the rank order gives them (:mod:`nest.cost.pricing`).

FLOPs follow Narayanan et al. 2021 (a block's forward is ``2 * tokens * weights`` for
its GEMMs plus ``4 b s^2 h`` for attention scores and values; backward is twice the
forward). Activation memory is what Megatron-Core with Transformer Engine keeps
(:mod:`nest.cost.activations`); selective recomputation drops the attention core, full
recomputation keeps only the block input.

Experts: with sequence parallelism each rank routes its own ``b s / (cp tp)`` tokens to
``top-k`` experts; dispatch and combine are all-to-alls of ``tokens x k x hidden`` over the
expert-parallel group, forward and backward (and again in a recomputation that repeats
the MoE layer). The capacity factor pads expert GEMMs to capacity (dropless: 1; the flex
dispatcher does not pad). With expert tensor parallelism (``etp`` > 1; Megatron-Core
core_v0.14.0 ``token_dispatcher.py MoEAlltoAllTokenDispatcher``) the alltoall
dispatcher all-gathers the received tokens over the expert-TP group after the dispatch
(``dispatch_postprocess``: ``gather_from_sequence_parallel_region``) and reduce-scatters
the experts' partial outputs before the combine (``combine_preprocess``:
``reduce_scatter_to_sequence_parallel_region``): each is ``etp x received x hidden``
bytes, priced on the expert-TP group (``etp_*`` columns), and each expert's fc1 and fc2
(column- and row-parallel, ``experts.py TEGroupedMLP``) run on ``etp`` times the tokens
at ``1/etp`` of the width. The flex dispatcher has no such collectives: it sends every
token to each expert-TP rank of its experts over the expert-TP x EP group
(``MoEFlexTokenDispatcher``), ``etp`` times the all-to-all bytes.

Kernel times come from :class:`nest.cost.compute.KernelModel` (the efficiency curves of
:mod:`nest.cost.efficiency`): with FP8 the linear layers' GEMMs run in FP8 and quantize
their inputs, while attention, the output layer and MoE routers stay in 16 bits (``bmm``).

Context parallelism (ring attention): each rank passes its K/V chunk around the ring,
``cp - 1`` steps forward; backward passes K/V and their gradients. The transfers overlap
with the attention core; only the excess is exposed.

Integer quantities (bytes, token counts, ring steps) are int64 columns and are priced
exactly while every product stays below 2^62; :func:`check_priceable` rejects jobs whose
largest configuration would not (a SpecError naming the job, instead of wrapped integers).
"""

from __future__ import annotations

import numpy as np

from ..errors import SpecError
from ..parallel import RECOMPUTE_MODES, ConfigArrays, recompute_modules
from ..specs import JobSpec, ModelSpec
from .activations import Activations
from .compute import KernelModel
from .host import LaunchCounter, block_host_ops, dispatch_s, host_bound
from .model import BLOCK, EMBEDDING, HEAD, MOE, attention_shape, mtp_layer_is_moe, node_params

COST_FIELDS = ("fwd_s", "bwd_s", "recompute_s", "compute_s", "core_fwd_s", "core_bwd_s",
               "cp_fwd_bytes", "cp_bwd_bytes", "cp_steps_fwd", "cp_steps_bwd", "params_dense",
               "params_expert", "act_bytes", "out_bytes", "transient_bytes", "recompute_tp_share",
               "recompute_ep_share", "mlp_fwd_s", "mlp_bwd_s", "offload_freed_bytes", "offload_copied_bytes",
               "offload_fwd_s", "offload_bwd_s", "host_s")
"""One column per configuration: what the planner reads of a node.

``fwd_s``, ``bwd_s``, ``recompute_s`` (``compute_s`` their sum): kernel seconds of one
micro-batch; ``core_*_s``: the attention core, which ring-attention transfers hide
behind; ``cp_*_bytes``: bytes per ring step (K and V forward; K, V and their gradients
backward) and ``cp_steps_*`` the ring steps (a full recomputation repeats the forward's);
``params_*``: parameters held per device (dense and routed-expert); ``act_bytes``: bytes
kept per micro-batch from forward to backward; ``out_bytes``: the node's output (what a
pipeline boundary sends); ``transient_bytes``: the largest buffer a recomputing node
needs while it runs; ``recompute_*_share``: the share of the node's tensor- and
expert-parallel collectives its recomputation issues (the rest split evenly between its
forward and backward); ``mlp_*_s``: the part of ``fwd_s`` and ``bwd_s`` a MoE layer spends
in its experts (routed and shared: what Megatron's combined 1F1B runs between dispatch and
combine; the rest is attention, router and permutation); ``offload_*_bytes``: what a
layer's activation offload frees on the device and copies to the host
(:meth:`~nest.cost.activations.Activations.offloaded`), ``offload_*_s`` the stalls of
the configuration's offload, its layers' share (:mod:`nest.cost.activation_offload`);
``host_s``: the part of ``compute_s`` the GPU waits for the host to dispatch kernels
(:mod:`nest.cost.host`)."""

SHARE_FIELDS = ("recompute_tp_share", "recompute_ep_share", "mlp_fwd_s", "mlp_bwd_s", "offload_freed_bytes",
                "offload_copied_bytes", "offload_fwd_s", "offload_bwd_s", "host_s")
"""Cost fields a source may leave out (0: its recomputation issues no collectives, no
expert compute apart from the rest, nothing offloads, no host wait: a measured profile's
times already hold it)."""

OP_FIELDS = ("tp_count", "tp_bytes", "ep_count", "ep_bytes", "etp_count", "etp_bytes")
"""``[configuration, slot]`` columns: the ``(count, bytes)`` of the node's tensor-parallel
all-reduce equivalents (all-gather + reduce-scatter pairs with sequence parallelism cost
the same), of its expert-parallel all-to-alls (bytes each rank sends) and of its
expert-tensor-parallel all-gathers and reduce-scatters (the gathered buffer's bytes), in
order, padded with count 0 and bytes 0 (no operation)."""

OPTIONAL_OP_FIELDS = ("etp_count", "etp_bytes")
"""The :data:`OP_FIELDS` a source may leave out (no expert tensor parallelism)."""

INT_FIELDS = ("cp_steps_fwd", "cp_steps_bwd", "params_dense", "params_expert", "act_bytes", "out_bytes",
              "transient_bytes", "offload_freed_bytes", "offload_copied_bytes")
"""The :data:`COST_FIELDS` that are int64 columns (the others are float64)."""

_INT64_SAFE = 2**62


def field_dtype(name: str) -> type:
    """The dtype of cost column ``name``: int64 for :data:`INT_FIELDS`, else float64."""
    return np.int64 if name in INT_FIELDS else np.float64


def _column(value, size: int, dtype) -> np.ndarray:
    """``value`` (a scalar or a column) as a contiguous column of ``size`` rows of ``dtype``:
    a scalar is filled (``np.full``: much cheaper than broadcasting it, and this runs for
    every node kind of every table), a column is converted."""
    if np.ndim(value) == 0:
        return np.full(size, value, dtype=dtype)
    return np.ascontiguousarray(np.broadcast_to(np.asarray(value), (size,)), dtype=dtype)


def cost_columns(size: int, values: dict) -> dict[str, np.ndarray]:
    """``values`` (scalars or columns, every :data:`COST_FIELDS` and :data:`OP_FIELDS`
    entry, the latter ``[configuration, slot]``) as contiguous columns of ``size`` rows
    with the dtypes the planner expects."""
    values = {**dict.fromkeys(SHARE_FIELDS, 0.0), **{name: np.zeros(1) for name in OPTIONAL_OP_FIELDS}, **values}
    out = {name: _column(values[name], size, field_dtype(name)) for name in COST_FIELDS}
    for name in OP_FIELDS:
        slots = np.asarray(values[name], dtype=np.float64)
        out[name] = np.ascontiguousarray(np.broadcast_to(slots.reshape(-1, slots.shape[-1]) if slots.ndim > 1
                                                         else slots[None, :], (size, slots.shape[-1])))
    return out


def check_priceable(model: ModelSpec, job: JobSpec, e: int, max_micro_batch: int, max_etp: int = 1) -> None:
    """SpecError unless every integer column of the cost model stays exact in int64 for
    micro-batches up to ``max_micro_batch`` (and expert TP up to ``max_etp``, whose ranks
    keep their group's gathered tokens): every product below 2^62. All are largest at
    ``cp = tp = 1``; beyond them (sequences of tens of millions of tokens, or unfused
    attention over millions) the job is too large to price in integer bytes."""
    m, s, b = model, job.seq_len, max_micro_batch
    a = attention_shape(model)
    n = b * s
    ffn = max(m.ffn_hidden, m.moe_ffn_hidden * m.num_shared_experts)
    products = [m.num_heads * s * s * b * (2 * e + 1), 2 * b * s * s * (a.q_width + a.o_width),
                e * s * b * (a.q_width + a.k_width + a.v_width + a.o_width + 3 * ffn + 3 * m.ffn_hidden),
                4 * n * m.vocab_size, 8 * n * m.hidden * e]
    if max_etp > 1:  # the gathered fc1 inputs and probabilities of an expert-TP group
        products.append(n * m.experts_per_token * max_etp * (e * m.hidden + 4))
    if max(products) >= _INT64_SAFE:
        raise SpecError(f"job = {job.global_batch} x {job.seq_len} tokens of {model.name}: too large to price "
                        f"in int64 bytes (micro-batch {b}: a node holds about {max(products):.3g} bytes)")


def _where(cond, a, b):
    return np.where(cond, a, b)


class NodeCostModel:
    """Prices the node kinds of a transformer (embedding, block, moe, head)."""

    def __init__(self, model: ModelSpec, job: JobSpec, kernels: KernelModel | LaunchCounter):
        self.model = model
        self.job = job
        self.k = kernels
        self.acts = Activations(model, job)
        # activations (and what is communicated) stay in 16 bits even when GEMMs run in fp8
        self.e, self.attn = self.acts.e, self.acts.attn
        # the same nodes with every kernel worth one launch: what the host dispatches
        self._launches = (NodeCostModel(model, job, LaunchCounter(kernels))
                          if isinstance(kernels, KernelModel) else None)

    def table(self, kind: str, c: ConfigArrays) -> dict[str, np.ndarray]:
        """Columns :data:`COST_FIELDS` and :data:`OP_FIELDS` of ``kind`` for every
        configuration in ``c``."""
        if len(c):
            check_priceable(self.model, self.job, self.e, int(c.micro_batch.max()), int(c.etp.max()))
        out = self._columns(kind, c)
        self._wait_for_host(kind, c, out)
        if kind == HEAD and self.model.mtp_layers:
            out = self._with_mtp(c, out)
        # parameters depend on (tp, tied copy, ep, etp) only: one mixed-radix key per row
        # (a 1-D unique is far faster than np.unique(axis=0) over hundreds of thousands)
        key = np.zeros(len(c), dtype=np.int64)
        for column in (c.tp, c.tied_copy.astype(np.int64), c.ep, c.etp):
            key = key * (int(column.max(initial=0)) + 1) + column
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        params = [node_params(self.model, kind, int(c.tp[i]), bool(c.tied_copy[i]), int(c.ep[i]), int(c.etp[i]))
                  for i in first.tolist()]
        out["params_dense"] = np.array([p[0] for p in params], dtype=np.int64)[inverse.ravel()]
        out["params_expert"] = np.array([p[1] for p in params], dtype=np.int64)[inverse.ravel()]
        out["compute_s"] = out["fwd_s"] + out["bwd_s"] + out["recompute_s"]
        return cost_columns(len(c), out)

    def _columns(self, kind, c):
        if kind == EMBEDDING:
            return self._embedding(c)
        if kind in (BLOCK, MOE):
            return self._block(c, kind == MOE)
        return self._head(c)

    def _wait_for_host(self, kind, c, out):
        """Lengthens ``out``'s passes to the host's calls (:func:`nest.cost.host.host_bound`)
        and sets ``host_s`` to what that adds. A layer's calls are
        :func:`~nest.cost.host.block_host_ops`, its recomputation the forward's share of
        its kernels; other nodes make one call per kernel, each at the device's host's
        :func:`~nest.cost.host.dispatch_s`. A dropless MoE forward (and its recomputation)
        waits on the GPU once for its token counts."""
        launches = self._launches._columns(kind, c)
        if kind in (BLOCK, MOE):
            m = self.model
            ops = block_host_ops(kind == MOE, self.job.dtype_bytes == 1, m.num_experts / c.ep, m.num_shared_experts)
            share = launches["recompute_s"] / np.maximum(launches["fwd_s"], 1)
            ops["recompute_s"] = ops["fwd"] * share
            ops["fwd_s"], ops["bwd_s"] = ops["fwd"], ops["bwd"]
        else:
            ops = launches
        drop_and_pad = bool(self.model.capacity_factor) and self.job.moe_dispatcher == "alltoall"
        syncs = 1 if kind == MOE and not drop_and_pad else 0
        recomputed = c.recompute == RECOMPUTE_MODES.index("full")
        for index, mode in enumerate(RECOMPUTE_MODES):
            if mode not in ("none", "full") and "moe" in recompute_modules(mode):
                recomputed = recomputed | (c.recompute == index)
        host, op_s = 0.0, dispatch_s(self.k.device)
        for name, waits in (("fwd_s", syncs), ("bwd_s", 0), ("recompute_s", np.where(recomputed, syncs, 0))):
            out[name], added = host_bound(out[name], ops[name], waits, op_s)
            host = host + added
        out["host_s"] = host

    def model_flops(self, kind: str, c: ConfigArrays, mtp: bool = True) -> np.ndarray:
        """Forward + backward model FLOPs of one micro-batch of ``kind`` on one device
        (recomputation not counted; for MFU), the head's with its multi-token prediction
        modules unless ``mtp`` is false. Counted in exact integers (object columns): the
        products exceed 2^53."""
        m, t = self.model, c.tp.astype(object)
        n = (c.micro_batch.astype(object) * self.job.seq_len) // c.cp.astype(object)
        h, up = m.hidden, self.acts.gated()
        if kind == EMBEDDING:
            return np.zeros(len(c))
        if kind == HEAD and m.mtp_layers and mtp:
            # each multi-token prediction module: its layer, eh_proj and one more loss
            # (Megatron-LM's count, core_v0.14.0 training.py num_floating_point_operations)
            layer = self.model_flops(MOE if mtp_layer_is_moe(m) else BLOCK, c)
            proj = np.array([3 * 2 * x * 2 * h * h / tp for x, tp in zip(n.tolist(), t.tolist())], dtype=np.float64)
            head = self.model_flops(HEAD, c, mtp=False)
            return (1 + m.mtp_layers) * head + m.mtp_layers * (layer + proj)
        if kind in (BLOCK, MOE):
            a, s, b = self.attn, self.job.seq_len, c.micro_batch.astype(object)
            flops = 2 * n * a.projection_params + 2 * b * (s // c.cp.astype(object)) * s * (a.q_width + a.o_width)
            if kind == MOE:
                flops = flops + (2 * n * m.experts_per_token * (up + 1) * h * m.moe_ffn_hidden
                                 + 2 * n * h * m.num_experts)
                if m.num_shared_experts:
                    flops = flops + 2 * n * (up + 1) * h * (m.num_shared_experts * m.moe_ffn_hidden)
            else:
                flops = flops + 2 * n * (up + 1) * h * m.ffn_hidden
        else:
            flops = 2 * n * h * m.vocab_size
            if m.encoder_head:
                flops = flops + 2 * n * h * h
        return np.array([3 * f / tp for f, tp in zip(flops.tolist(), t.tolist())], dtype=np.float64)

    # -- helpers -----------------------------------------------------------------------

    def _tokens(self, c):
        """Tokens of one micro-batch held by one context-parallel rank."""
        return self.acts.tokens(c)

    def _replicated(self, c):
        """Divisor of tensors outside the tensor-parallel region."""
        return self.acts.outside(c)

    def _hidden_bytes(self, c):
        return self._tokens(c) * self.model.hidden * self.e

    # -- blocks ------------------------------------------------------------------------

    def _attention(self, c):
        """(GEMM, element-wise, core forward, core backward) times of attention."""
        m, k, e, a, h = self.model, self.k, self.e, self.attn, self.model.hidden
        n, s, b, t, cp = self._tokens(c), self.job.seq_len, c.micro_batch, c.tp, c.cp
        if m.kv_lora_rank:  # latent attention: one GEMM with the same FLOPs
            gemm = k.gemm(n, a.projection_params / h / t, h)
        else:
            gemm = k.gemm(n, (a.q_width + a.k_width + a.v_width) / t, h) + k.gemm(n, h, a.q_width / t)
        # scores (q x k) and values, each rank's s/cp queries against all s keys; with
        # grouped keys and values every query head still computes its own products
        core_flops = 2 * b * (s // cp) * s * (a.q_width + a.o_width)
        norm_residual = (2 + 3) * n * h * e / self._replicated(c)  # norm (r+w), residual + dropout
        if self.job.flash_attention:
            causal = 0.5 if m.causal else 1.0
            core = k.attention(core_flops * causal / t)
            core_bwd = k.attention_backward(core_flops * causal / t)
            elementwise = k.stream(norm_residual, kernels=3)
        else:
            heads = m.num_heads // t
            s_q = s // cp
            # one strided-batched launch per matmul over micro-batch x heads
            core = k.bmm(s_q, s, a.score_dim, b * heads) + k.bmm(s_q, a.o_width / m.num_heads, s, b * heads)
            core_bwd = 2.0 * core
            scores = b * heads * s_q * s * e
            elementwise = k.stream(norm_residual + 3 * 2 * scores, kernels=6)
        return gemm, elementwise, core, core_bwd

    def _mlp(self, ffn, tokens, split):
        """(GEMM, element-wise) times of an MLP of width ``ffn`` split ``split`` ways."""
        m, k, e = self.model, self.k, self.e
        up = self.acts.gated()
        gemm = k.gemm(tokens, up * ffn / split, m.hidden) + k.gemm(tokens, m.hidden, ffn / split)
        act = (3 if m.mlp == "swiglu" else 2) * tokens * ffn * e / split
        return gemm, k.stream(act, kernels=1)

    def _moe(self, c):
        """(GEMM, element-wise, tokens routed by this rank, the experts' activation, the
        experts' part of the GEMM and element-wise time) of a MoE layer."""
        m, k, e, t = self.model, self.k, self.e, c.tp
        n = self._tokens(c)
        local = _where(c.sp, n / t, n)  # tokens this rank routes (sequence-parallel share)
        routed = local * m.experts_per_token
        padded = routed * self.acts.expert_tokens(c)  # what the busiest expert rank computes
        experts_here = m.num_experts / c.ep
        # expert TP: each expert's fc1 and fc2 see the tokens of the whole expert-TP group
        # at 1/etp of the width (the element-wise work stays the same)
        gemm, _ = self._mlp(m.moe_ffn_hidden, c.etp * padded / experts_here, c.etp)
        gemm = gemm * experts_here
        activation = k.stream(3 * padded * m.moe_ffn_hidden * e, kernels=experts_here.astype(np.int64))
        experts = gemm + activation
        if m.num_shared_experts:
            g, el = self._mlp(m.num_shared_experts * m.moe_ffn_hidden, n, t)
            experts = experts + g + el
        router = k.bmm(local, m.num_experts, m.hidden, 1)  # 16-bit, never FP8
        # permute and unpermute (read and write each routed copy); the alltoall dispatcher
        # also sorts the received tokens by local expert and back when a rank holds
        # several (core_v0.14.0 token_dispatcher.py MoEAlltoAllTokenDispatcher
        # dispatch_postprocess / combine_preprocess, "Permutation 2")
        # "Permutation 2" sorts what the expert-TP all-gather returns; the flex dispatcher
        # permutes the tokens it receives, each routed copy once per expert-TP rank
        flex = self.job.moe_dispatcher == "flex"
        sorts = np.where((experts_here > 1) & (not flex), 2, 0)
        received = routed * self.acts.expert_load(c)  # the busiest rank's
        permuted = routed * (c.etp if flex else 1)
        permute = k.stream((4 * permuted + 2 * sorts * (c.etp * received)) * m.hidden * e, kernels=4 + sorts)
        return experts + router, permute, routed, activation, experts

    def _up_projections(self, c):
        """Latent attention's up projections (q and kv latents to the heads)."""
        m, n, t = self.model, self._tokens(c), c.tp
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        up = self.k.gemm(n, m.num_heads * (m.qk_nope_head_dim + m.v_head_dim) / t, m.kv_lora_rank)
        return up + self.k.gemm(n, m.num_heads * qk / t, m.q_lora_rank or m.hidden)

    def _block(self, c, moe):
        gemm, elementwise, core, core_bwd = self._attention(c)
        m = self.model
        tp_fwd = 1  # after attention
        routed = activation = experts = 0.0
        if moe:
            g, el, routed, activation, experts = self._moe(c)
            tp_fwd += 1 if m.num_shared_experts else 0
        else:
            g, el = self._mlp(m.ffn_hidden, self._tokens(c), c.tp)
            tp_fwd += 1
        hidden_bytes = self._hidden_bytes(c)
        el = el + self.k.stream(5 * hidden_bytes / self._replicated(c), kernels=3)  # norm, residual
        gemm, elementwise = gemm + g, elementwise + el
        fwd = gemm + elementwise + core
        bwd = 2 * gemm + 2 * elementwise + core_bwd
        kept, transient = self.acts.kept(c, moe)
        offloading = c.act_offload > 0
        freed, copied = self.acts.offloaded(c, moe) if offloading.any() else (0, 0)
        full = c.recompute == RECOMPUTE_MODES.index("full")
        # each recomputed module's forward: its kernel time and the collectives it repeats
        # (a dense MLP its TP pair; a MoE layer its shared experts' and the dispatch and
        # combine all-to-alls)
        norm = self.k.stream(2 * hidden_bytes / self._replicated(c), kernels=1)
        module_s = {"core_attn": core, "mlp": 0.0 if moe else g + el, "moe_act": activation,
                    "layernorm": norm if (moe or m.kv_lora_rank) else 0.0, "moe": g + el if moe else 0.0,
                    "mla_up_proj": self._up_projections(c) if m.kv_lora_rank else 0.0}
        module_tp = {"mlp": 0 if moe else 1, "moe": 1 if moe and m.num_shared_experts else 0}
        module_ep = {"moe": 2 if moe else 0}
        recompute_s, extra_tp, extra_ep = (np.zeros(len(c)) for _ in range(3))
        for index, mode in enumerate(RECOMPUTE_MODES):
            rows = c.recompute == index
            if mode in ("none", "full") or not rows.any():
                continue
            modules = recompute_modules(mode)
            recompute_s = np.where(rows, sum(module_s[x] for x in modules), recompute_s)
            extra_tp = np.where(rows, sum(module_tp.get(x, 0) for x in modules), extra_tp)
            extra_ep = np.where(rows, sum(module_ep.get(x, 0) for x in modules), extra_ep)
        extra_tp, extra_ep = np.where(full, tp_fwd, extra_tp), np.where(full, 2, extra_ep)
        # the flex dispatcher all-to-alls over the expert-TP x EP group, etp copies of each
        # routed token; the alltoall one over the EP group, then gathers over expert TP
        flex = self.job.moe_dispatcher == "flex"
        has_tp, has_ep = c.tp > 1, (c.ep * (c.etp if flex else 1) > 1) & moe
        has_etp = (c.etp > 1) & moe & (not flex)
        received = routed * self.acts.expert_load(c) * self.model.hidden * self.e
        gathered = c.etp * received
        kv = self.job.seq_len // c.cp * c.micro_batch * (self.attn.k_width + self.attn.v_width)
        kv = kv * self.e / c.tp
        steps = c.cp - 1
        return {
            "fwd_s": fwd, "bwd_s": bwd, "recompute_s": _where(full, fwd, recompute_s),
            "core_fwd_s": core, "core_bwd_s": core_bwd,
            "tp_count": np.stack(np.broadcast_arrays(_where(has_tp, 2 * tp_fwd + extra_tp, 0), 0.0), axis=-1),
            "tp_bytes": np.stack(np.broadcast_arrays(_where(has_tp, hidden_bytes, 0), 0.0), axis=-1),
            "cp_fwd_bytes": kv, "cp_bwd_bytes": 2 * kv, "cp_steps_fwd": steps * _where(full, 2, 1),
            "cp_steps_bwd": steps,
            "ep_count": _where(has_ep, 4 + extra_ep, 0)[..., None],
            # the busiest rank receives (dispatch) and sends back (combine) its load's share
            "ep_bytes": np.asarray(_where(has_ep, gathered if flex else received, 0.0))[..., None],
            # the expert-TP all-gather after the dispatch and reduce-scatter before the
            # combine, forward and backward, repeated with the dispatch by a recomputation
            "etp_count": _where(has_etp, 4 + extra_ep, 0)[..., None],
            "etp_bytes": np.asarray(_where(has_etp, gathered, 0.0))[..., None],
            "act_bytes": kept,
            "out_bytes": hidden_bytes // self._replicated(c),
            "transient_bytes": transient,
            "recompute_tp_share": extra_tp / (2 * tp_fwd + extra_tp), "recompute_ep_share": extra_ep / (4 + extra_ep),
            "mlp_fwd_s": experts, "mlp_bwd_s": 2 * experts,
            "offload_freed_bytes": _where(offloading, freed, 0), "offload_copied_bytes": _where(offloading, copied, 0),
        }

    # -- multi-token prediction ---------------------------------------------------------

    def _mtp_extras(self, c):
        """(forward, backward) kernels of one multi-token prediction module besides its
        transformer layer: the embedding lookup of the next tokens, ``enorm`` and
        ``hnorm``, their concatenation and ``eh_proj`` (``[n, 2h] x [2h, h/tp]``, FP8
        under FP8), its output gathered over TP and split back to the sequence-parallel
        region (core_v0.14.0 ``multi_token_prediction.py``
        ``MultiTokenPredictionLayer._concat_embeddings``), and the final norm."""
        m, k, rep = self.model, self.k, self._replicated(c)
        n, hidden = self._tokens(c), self._hidden_bytes(c)
        proj = k.gemm(n, m.hidden / c.tp, 2 * m.hidden)
        # lookup (write), two norms (read + write), concatenation (write 2h), the gathered
        # output's copy, the final norm (read + write)
        fwd = proj + k.stream((1 + 4 + 2 + 1 + 2) * hidden / rep, kernels=6)
        bwd = 2 * proj + k.stream((1 + 4 + 2 + 1 + 2) * hidden / rep, kernels=5)
        return fwd, bwd

    def _mtp(self, c):
        """Columns of one multi-token prediction module without its loss: the transformer
        layer (the last block's kind, with its host floor) and :meth:`_mtp_extras`, whose
        passes wait for the host like other nodes (one call per kernel). Its TP
        collectives besides the layer's: the vocabulary-parallel lookup (one all-reduce
        equivalent) and ``eh_proj``'s (the ``2h`` input gathered and its gradient
        reduced, the output gathered: 2.5). A full recomputation repeats the module's
        forward and keeps its two inputs (``MultiTokenPredictionLayer._checkpointed_forward``);
        activation offload never covers it (its ``offload_context`` is a null context)."""
        kind = MOE if mtp_layer_is_moe(self.model) else BLOCK
        out = self._columns(kind, c)
        self._wait_for_host(kind, c, out)
        fwd, bwd = self._mtp_extras(c)
        launch_fwd, launch_bwd = self._launches._mtp_extras(c)
        fwd, host_fwd = host_bound(fwd, launch_fwd)
        bwd, host_bwd = host_bound(bwd, launch_bwd)
        full = c.recompute == RECOMPUTE_MODES.index("full")
        hidden, rep = self._hidden_bytes(c), self._replicated(c)
        out["fwd_s"], out["bwd_s"] = out["fwd_s"] + fwd, out["bwd_s"] + bwd
        out["recompute_s"] = out["recompute_s"] + _where(full, fwd, 0.0)
        out["host_s"] = out["host_s"] + host_fwd + host_bwd + _where(full, host_fwd, 0.0)
        n = self._tokens(c)
        q = self.acts.q
        # enorm's input and statistics, hnorm's (depth 1's is the decoder's last output,
        # which the main head's norm keeps already: counted there), eh_proj's 2h input
        extras = n * (self.e * self.model.hidden + self.acts.stats + 2 * q * self.model.hidden) // rep
        out["act_bytes"] = _where(full, 2 * hidden // rep, out["act_bytes"] + extras)
        # TP bytes x count the recomputation repeats: the layer's share, eh_proj's forward (1.5)
        has_tp = c.tp > 1
        layer_tp = (out["tp_count"] * out["tp_bytes"]).sum(axis=-1)
        recomputed = out["recompute_tp_share"] * layer_tp + _where(full, 1.5 * hidden, 0.0)
        out["recomputed_tp"] = _where(has_tp, recomputed, 0.0)
        count = _where(has_tp, 3.5 + _where(full, 1.5, 0.0), 0.0)
        out["tp_count"] = np.concatenate([out["tp_count"], np.asarray(count)[..., None]], axis=-1)
        out["tp_bytes"] = np.concatenate([out["tp_bytes"], np.asarray(_where(has_tp, hidden, 0))[..., None]],
                                         axis=-1)
        for name in ("offload_freed_bytes", "offload_copied_bytes"):
            out[name] = 0
        return out

    def _with_mtp(self, c, head):
        """The head node with its multi-token prediction modules (``model.mtp_layers``):
        each module's columns (:meth:`_mtp`) and its loss, another pass of the output
        layer and cross-entropy like the head's own (the ``mtp_layers + 1`` losses run one
        after another: the logits of one live at a time). Ring-attention steps and
        expert all-to-alls are the modules' (the head has none); ``core_*_s`` stay one
        module's, which each of its ring passes hides behind."""
        d = self.model.mtp_layers
        mtp = {name: np.asarray(v) for name, v in self._mtp(c).items()}
        out = {name: np.asarray(v) for name, v in head.items()}
        for name in ("fwd_s", "bwd_s", "recompute_s", "host_s", "mlp_fwd_s", "mlp_bwd_s", "act_bytes"):
            out[name] = (1 + d) * out.get(name, 0.0) + d * mtp[name]
        for name in ("core_fwd_s", "core_bwd_s", "cp_fwd_bytes", "cp_bwd_bytes", "ep_bytes", "etp_bytes",
                     "offload_freed_bytes", "offload_copied_bytes"):
            out[name] = mtp[name]
        for name in ("cp_steps_fwd", "cp_steps_bwd", "ep_count", "etp_count"):
            out[name] = d * mtp[name]
        out["transient_bytes"] = np.maximum(out["transient_bytes"], mtp["transient_bytes"])
        size = len(c)
        slots = lambda x: np.broadcast_to(x, (size, x.shape[-1])) if x.ndim else np.broadcast_to(x, (size, 1))  # noqa: E731
        head_tp, mtp_tp = slots(out["tp_count"]), slots(mtp["tp_count"])
        out["tp_count"] = np.concatenate([(1 + d) * head_tp, d * mtp_tp], axis=-1)
        out["tp_bytes"] = np.concatenate([slots(out["tp_bytes"]), slots(mtp["tp_bytes"])], axis=-1)
        # the recomputation's share of the node's TP traffic, by bytes: the modules'
        recomputed = d * mtp["recomputed_tp"]
        total = (out["tp_count"] * out["tp_bytes"]).sum(axis=-1)
        out["recompute_tp_share"] = np.where(total > 0, recomputed / np.where(total > 0, total, 1), 0.0)
        out["recompute_ep_share"] = mtp["recompute_ep_share"]
        return out

    # -- embedding and head ------------------------------------------------------------

    def _embedding(self, c):
        m, n, e = self.model, self._tokens(c), self.e
        rep = self._replicated(c)
        lookups = 1 + (m.position_embedding == "learned") + (m.type_vocab_size > 0)
        fwd = self.k.stream((lookups + 1) * n * m.hidden * e / rep, kernels=lookups + 1)
        bwd = self.k.stream(2 * lookups * n * m.hidden * e / rep, kernels=lookups)
        # Vocabulary-parallel lookup ends in an all-reduce (a reduce-scatter with SP, whose
        # backward all-gather makes one all-reduce equivalent in total).
        has_tp = c.tp > 1
        tp_ops = {"tp_count": _where(has_tp, 1.0, 0.0)[..., None],
                  "tp_bytes": np.asarray(_where(has_tp, self._hidden_bytes(c), 0))[..., None]}
        return _no_comm(fwd, bwd, _where(c.recompute == RECOMPUTE_MODES.index("full"), fwd, 0.0),
                        self.acts.embedding(c), self._hidden_bytes(c) // rep, 0, tp_ops)

    def _head(self, c):
        m, k, e, t = self.model, self.k, self.e, c.tp
        n, h, v = self._tokens(c), m.hidden, m.vocab_size
        rep = self._replicated(c)
        # the output layer is a plain 16-bit GEMM (Megatron keeps it out of FP8)
        gemm = k.bmm(n, v / t, h, 1)
        if m.encoder_head:
            gemm = gemm + k.bmm(n, h, h, 1)
        logits = 4 * n * v // t  # fp32 softmax of the cross-entropy
        fwd = gemm + k.stream(2 * 2 * n * h * e / rep + 3 * logits, kernels=4)
        bwd = 2 * gemm + k.stream(2 * 2 * n * h * e / rep + 2 * logits, kernels=3)
        # SP all-gathers the sequence before the logits GEMM (reduce-scatter back);
        # otherwise the column-parallel input gradient is all-reduced. Vocabulary-
        # parallel cross-entropy adds three small fp32 all-reduces of n values.
        has_tp = t > 1
        tp_ops = {"tp_count": np.stack(np.broadcast_arrays(_where(has_tp, 1.0, 0.0), _where(has_tp, 3.0, 0.0)), -1),
                  "tp_bytes": np.stack(np.broadcast_arrays(_where(has_tp, self._hidden_bytes(c), 0),
                                                           _where(has_tp, 4.0 * n, 0.0)), -1)}
        kept, transient = self.acts.head(c)
        return _no_comm(fwd, bwd, _where(c.recompute == RECOMPUTE_MODES.index("full"), fwd, 0.0), kept,
                        0, transient, tp_ops)


def _no_comm(fwd, bwd, recompute, act, out, transient, tp_ops):
    """The columns of a node without ring-attention or expert traffic."""
    columns = {"fwd_s": fwd, "bwd_s": bwd, "recompute_s": recompute, "core_fwd_s": 0.0,
               "core_bwd_s": 0.0, "cp_fwd_bytes": 0.0, "cp_bwd_bytes": 0.0, "cp_steps_fwd": 0,
               "cp_steps_bwd": 0, "ep_count": np.zeros(1), "ep_bytes": np.zeros(1), "etp_count": np.zeros(1),
               "etp_bytes": np.zeros(1), "act_bytes": act,
               "out_bytes": out, "transient_bytes": transient}
    columns.update(tp_ops)
    return columns
