"""What a layer keeps from its forward to its backward: bytes per micro-batch on one rank,
as Megatron-Core (core_v0.14.0, the Transformer Engine layer specs of
``megatron/core/models/gpt/gpt_layer_specs.py``) with Transformer Engine (2.7) saves them;
checked against Megatron-LM main at ``2a75ac1`` (the Megatron-Bridge submodule) with
Transformer Engine 2.18 (``v2.18``, Bridge's ``uv.lock`` pin ``e7c550c``), which save the
same tensors except where noted.

Every term is per token; a rank holds ``b s / cp`` tokens of a micro-batch. Terms
*outside* the tensor-parallel region (norm inputs and outputs, residuals, dropout masks)
are divided by ``tp`` only with sequence parallelism; terms *inside* it (projections of
the heads, MLP intermediates) always are. ``h`` is the hidden size, ``a`` the query
width (heads x head dim), ``g`` the key/value width, ``f`` the MLP width, ``G`` 2 for a
gated MLP (SwiGLU) and 1 otherwise, ``e`` the bytes of an activation (2; 4 in fp32) and
``q`` the bytes of a GEMM input kept for the backward (``e``; 1 under FP8, whose linear
layers keep the FP8 copy of their input instead of the 16-bit one).

FP8 recipes (``fp8_recipe``): ``delayed`` (Megatron's default, what nest's Megatron launch
sets) and ``tensorwise`` (current scaling, Megatron-Bridge's FP8-CS recipes). They keep the
same bytes but for the linear layers Megatron sets ``save_original_input`` on for every
recipe but delayed (``megatron/core/transformer/attention.py`` ``Attention.__init__``,
``multi_latent_attention.py`` and ``moe/shared_experts.py``: ``fp8_recipe != 'delayed'``,
TE >= 2.6): the attention's output projection and the shared experts' fc1 then keep the
16-bit input another module already keeps, not an FP8 copy (TE ``module/linear.py``
``_linear_forward``: ``if save_original_input: inputmat = inp``). The job's recipe is
``JobSpec.fp8_recipe``, default ``delayed``; ``blockwise`` and ``mxfp8`` are non-delayed
recipes too. Not counted: the block scales of the FP8 inputs those two keep (an fp32 per
128 values, an 8-bit per 32: 1/32 byte per value, under 1% of a layer's bytes).

Attention (``TELayerNormColumnParallelLinear`` + ``TEDotProductAttention`` +
``TERowParallelLinear``):

* the norm input ``e h`` and its statistics (fp32 ``rsigma``, and ``mu`` for LayerNorm:
  4 or 8 bytes) and the norm output ``q h``
  (transformer_engine/pytorch/module/layernorm_linear.py ``_LayerNormLinear.forward``);
* q, k and v as the attention keeps them, ``e (a + 2 g)``, each a contiguous tensor of
  its own: the QKV GEMM output is split into strided views of one buffer
  (megatron/core/transformer/attention.py ``get_query_key_value_tensors``, ``torch.split``
  along the last dim of ``[s, b, groups, (heads/groups + 2) d]``); rotary embeddings
  replace q and k by new tensors (TE's fused RoPE keeps only ``freqs``; Megatron's
  unfused one only cos and sin), and TE's ``get_qkv_layout``
  (transformer_engine/pytorch/attention/dot_product_attention/utils.py, v2.7 and v2.18)
  copies whatever matches none of its layouts with ``.contiguous()``: with grouped or
  rotated heads that is v (its strides are not k's), without rotation q, k and v (MHA
  without rotation matches ``sbh3d`` and keeps the views: the same ``e (a + 2 g)``).
  Nothing keeps the GEMM's buffer, which the forward frees; the rotated q and k do not
  come on top of it;
* with Qwen3's q/k norms the norms' saved inputs, contiguous copies of the query and key
  views, ``e (a + g)``, and their fp32 statistics ``4 (heads + kv_heads)``
  (transformer_engine/pytorch/ops/basic/rmsnorm.py ``RMSNorm.op_forward``:
  ``input_.contiguous()``, ``save_for_backward(x, rstdevs)``);
* the attention output ``e a`` (kept by the fused attention and as the output
  projection's input; under FP8 with delayed scaling the projection also keeps its FP8
  copy ``a``, since Megatron sets ``save_original_input`` only for the other recipes);
* fused attention keeps the fp32 softmax statistics, ``4 heads`` (the attention core,
  which selective recomputation drops); unfused attention keeps the ``s``-long scores
  (and the dropout mask and output with attention dropout);
* a dropout mask of ``h`` bytes after the projection when the model has dropout.

Latent attention (DeepSeek's MLA, megatron/core/transformer/multi_latent_attention.py):
the norm input and statistics, its output kept by the two down projections (``e h``; two
FP8 copies ``2 h`` under FP8), the q and kv latents with their norms' inputs and outputs
(``e r + q r`` each, the kv latent's buffer ``e (r_kv + d_rope)``), the contiguous q, k
and v (``e heads (d_qk + d_rope)`` twice and ``e heads d_v``), the output and the
statistics.

Dense MLP (``TELayerNormColumnParallelLinear`` fc1, Megatron's fused bias-SwiGLU, TE fc2):
the norm input, statistics and output as above, the fc1 output ``e G f`` (kept by the
activation, megatron/core/fusions/fused_bias_swiglu.py ``BiasSwiGLUFunction``) and the
activation output ``q f`` (fc2's input), and a dropout mask.

Experts (megatron/core/transformer/moe/: ``TEGroupedMLP``): the separate pre-MLP norm's
input and statistics and its output ``e h`` (kept by the router's gate,
``RouterGatingLinearFunction``, and by the shared experts' fc1, which under FP8 with
delayed scaling adds its FP8 copy ``h``), the router's fp32 logits and scores ``2 x 4 E``;
per token routed to this rank (each of ``k`` copies, padded by the capacity factor): the
grouped fc1 input ``q h``, its output ``e G f_e``, the activation output ``q f_e`` and the
fp32 routing probability (4 bytes, applied inside the activation, so the expert output is
not kept); the busiest expert-parallel rank holds the load imbalance's share more
(:mod:`nest.cost.imbalance`). With expert tensor parallelism (``etp`` > 1) a rank's
grouped fc1 takes the tokens its expert-TP group gathered (core_v0.14.0
``token_dispatcher.py MoEAlltoAllTokenDispatcher.dispatch_postprocess``; the flex
dispatcher sends them all), ``etp`` times its own, and keeps that input and their
probabilities, while its fc1 output and activation are ``1/etp`` as wide
(``experts.py TEGroupedMLP``): per routed copy ``etp (q h + 4) + e G f_e + q f_e``. Dispatch and
combine keep only index maps. Shared experts add their MLP intermediates.

Output layer and loss: the final norm's input and statistics, the output layer's input
``e h`` (a 16-bit GEMM), and the fp32 softmax of the vocabulary-parallel cross-entropy,
``4 V / tp`` per token of the whole sequence
(megatron/core/tensor_parallel/cross_entropy.py ``_VocabParallelCrossEntropy``); the
16-bit logits, ``e V / tp``, exist only while the head runs (its *transient* buffer).
The fused cross-entropies keep the same: Megatron's ``native`` one its fp32 softmax, and
TE's (``cross_entropy_fusion_impl = 'te'``, the Bridge recipes) from TE 2.18 the fp32
gradient it computes in the forward (transformer_engine/pytorch/triton/cross_entropy.py
``cross_entropy_forward``: ``grad_input = torch.empty_like(_input, dtype=torch.float32)``;
TE 2.7 to 2.17 wrote it into the 16-bit logits in place and kept those, ``e V / tp``:
nest prices the 4 bytes).
The embedding keeps the token ids (8 bytes) and a dropout mask with dropout.

Full recomputation keeps a block's input, ``e h`` (outside); its working set while it
recomputes is the block's whole activation (the *transient* of a recomputing block).
"""

from __future__ import annotations

import numpy as np

from ..errors import SpecError
from ..parallel import RECOMPUTE_MODES, ConfigArrays, recompute_modules
from ..specs import JobSpec, ModelSpec
from .imbalance import rank_load_factor
from .model import attention_shape

SMALL_NUMEL = 256 * 1024
"""TE v2 offloads no tensor of fewer elements (``OffloadableLayerState._check_if_offload``,
v2.18: "Only offload tensors with at least 256k elements")."""


class Activations:
    """Saved bytes of the node kinds of one model and job, for many configurations at
    once (see the module docstring for every term); the job's ``fp8_recipe`` and
    ``activation_offload_handler`` say which FP8 copies and which offload it prices."""

    def __init__(self, model: ModelSpec, job: JobSpec):
        self.model, self.job = model, job
        self.e = 4 if job.dtype == "fp32" else 2
        self.q = 1 if job.dtype == "fp8" else self.e
        self.attn = attention_shape(model)
        self.stats = 4 if model.norm == "rmsnorm" else 8
        self.fp8_recipe, self.offload_handler = job.fp8_recipe, job.activation_offload_handler
        # an FP8 copy of the input where Megatron sets save_original_input for every recipe but delayed
        self.fp8_copy = job.dtype == "fp8" and self.fp8_recipe == "delayed"

    def tokens(self, c: ConfigArrays) -> np.ndarray:
        """Tokens of one micro-batch on one context-parallel rank."""
        return c.micro_batch * self.job.seq_len // c.cp

    @staticmethod
    def outside(c: ConfigArrays) -> np.ndarray:
        """The divisor of terms outside the tensor-parallel region."""
        return np.where(c.sp, c.tp, 1)

    def _norm(self, width_bytes: float) -> float:
        """A norm's input (kept for its backward), statistics and ``width_bytes`` more."""
        return self.e * self.model.hidden + self.stats + width_bytes

    # -- attention ----------------------------------------------------------------------

    def attention(self) -> dict[str, int]:
        """Per token, the attention half's bytes: ``outside`` and ``inside`` the TP region,
        the ``core`` (fused attention's statistics), and the parts module recomputation
        drops: MLA's input norm output (``norm_out``, outside; ``layernorm``) and its
        contiguous q, k, v (``up``, inside; ``mla_up_proj``)."""
        m, a, e, q, h = self.model, self.attn, self.e, self.q, self.model.hidden
        heads, kv_heads = m.num_heads, m.num_kv_heads
        dropout = h if m.dropout else 0
        fp8_proj = a.o_width if self.fp8_copy else 0  # the delayed recipe's FP8 copy
        norm_out = up = 0
        if m.kv_lora_rank:
            latent_q, latent_kv, rope = m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim
            norm_out = 2 * h if self.job.dtype == "fp8" else e * h  # the norm output, to both down projections
            outside = self._norm(norm_out) + dropout
            outside += (e * latent_q + q * latent_q + self.stats) if latent_q else 0
            outside += e * (latent_kv + rope) + q * latent_kv + self.stats
            up = e * heads * (2 * (m.qk_nope_head_dim + rope) + m.v_head_dim)
            inside = up + e * a.o_width + fp8_proj
        else:
            outside = self._norm(q * h) + dropout
            # q, k, v, each contiguous (rotated, or get_qkv_layout's copies); the output
            inside = e * (a.q_width + 2 * a.k_width) + e * a.o_width + fp8_proj
            if m.qk_norm:  # the norms' contiguous inputs and fp32 statistics
                inside += e * (a.q_width + a.k_width) + 4 * (heads + kv_heads)
        core = 4 * heads if self.job.flash_attention else 0
        return {"outside": outside, "inside": inside, "core": core, "norm_out": norm_out, "up": up}

    def unfused_scores(self, c: ConfigArrays) -> np.ndarray:
        """Bytes of unfused attention's scores on one rank (all heads, before ``tp``):
        the softmax output, and with dropout its mask and output."""
        m = self.model
        scores = m.num_heads * (self.job.seq_len // c.cp) * self.job.seq_len * c.micro_batch
        return ((2 * self.e + 1) if m.dropout else self.e) * scores

    # -- MLP and experts -----------------------------------------------------------------

    def gated(self) -> int:
        return 2 if self.model.mlp == "swiglu" else 1

    def expert_padding(self) -> float:
        """Expert inputs per routed copy: the capacity factor when the alltoall dispatcher
        pads them to capacity (Megatron's ``--moe-pad-expert-input-to-capacity``), 1 under
        the flex dispatcher, which does not pad (core_v0.14.0 transformer_config.py
        ``__post_init__``: "Flex token dispatcher does not support
        moe_pad_expert_input_to_capacity"; a capacity factor then only drops)."""
        if self.job.moe_dispatcher == "flex":
            return 1.0
        return max(1.0, self.model.capacity_factor)

    def expert_load(self, c: ConfigArrays) -> np.ndarray:
        """Per configuration, the busiest expert-parallel rank's routed tokens over the mean
        rank's under dropless routing (:func:`nest.cost.imbalance.rank_load_factor` of the
        job's ``moe_load_cv``; capped by the capacity factor under the flex dispatcher,
        which drops without padding); 1 when drop-and-pad computes the capacity whatever
        the routing."""
        m = self.model
        if self.expert_padding() > 1 or not m.is_moe:
            return np.ones(len(c))
        capacity = max(m.capacity_factor, 1.0) if m.capacity_factor else 0.0
        return rank_load_factor(self.job.moe_load_cv, m.num_experts, c.ep, capacity)

    def expert_tokens(self, c: ConfigArrays) -> np.ndarray:
        """Per configuration, the tokens the busiest expert-parallel rank computes per routed
        copy a rank sends: the capacity padding times the load imbalance."""
        return self.expert_padding() * self.expert_load(c)

    def mlp(self, width: int) -> int:
        """Per token, inside: an MLP's intermediates (fc1 output and activation output)."""
        return self.e * self.gated() * width + self.q * width

    def dense_mlp(self) -> dict[str, int]:
        """Per token, a dense MLP half: what ``mlp`` recomputation keeps (its input and the
        dropout mask after it, outside) and drops (the norm's statistics and output,
        outside; the intermediates, inside)."""
        h = self.model.hidden
        return {"keep_out": self.e * h + (h if self.model.dropout else 0), "drop_out": self.stats + self.q * h,
                "drop_in": self.mlp(self.model.ffn_hidden)}

    def moe(self) -> dict[str, int]:
        """Per token, a MoE half: the pre-MLP norm's input, statistics and the dropout mask
        (``keep``), its output (``norm_out``: the MoE input, dropped by ``layernorm``), the
        router's fp32 logits and scores (``router``), the shared experts' intermediates
        (``shared``, inside); per routed token on the expert rank the activation output
        (``act``, dropped by ``moe_act``) and the rest (fc1 input and output, probability),
        of which ``gathered`` (fc1 input and probability) is kept once per expert-TP rank
        whose tokens the expert sees."""
        m, e, h = self.model, self.e, self.model.hidden
        shared = m.num_shared_experts * m.moe_ffn_hidden
        fp8_shared = h if shared and self.fp8_copy else 0
        f, q = m.moe_ffn_hidden, self.q
        return {"keep": e * h + self.stats + (h if m.dropout else 0), "norm_out": e * h + fp8_shared,
                "router": 2 * 4 * m.num_experts, "shared": self.mlp(shared) if shared else 0,
                "act": q * f, "routed": q * h + e * self.gated() * f + 4, "gathered": q * h + 4}

    # -- activation offload ---------------------------------------------------------------

    def offloaded(self, c: ConfigArrays, moe: bool) -> tuple[np.ndarray, np.ndarray]:
        """(freed, copied): the bytes of one micro-batch a block without recomputation
        stops holding on the device when Transformer Engine offloads its activations, and
        the bytes its offload copies to the host (and back), under ``offload_handler``.

        ``v1`` (TE 2.7 ``transformer_engine/pytorch/cpu_offload.py``; TE 2.18
        ``cpu_offload_v1.py``) offloads only the tensors its modules mark
        (``mark_activation_offload``; the checker ``tensor_need_offloading_checker_activations``):

        * ``_LayerNormLinear``: the norm's input, statistics and output (attention, and the
          dense MLP whose norm is fused into fc1);
        * the fused attention's q, k, v, output and softmax statistics
          (``dot_product_attention/backends.py`` ``FusedAttnFunc``): the contiguous q, k
          and v it is given (:meth:`attention`);
        * ``_Linear``'s saved input: the attention output once more where the projection
          saves the original input (bf16, or an FP8 recipe but delayed: the same tensor,
          and each push is its own copy) or its FP8 copy (delayed), and fc2's input; the
          shared experts' fc1 input (the router's tensor, copied but still held; its FP8
          copy under delayed scaling, which only fc1 holds, is freed: TE clears quantized
          data after the copy, ``needs_force_clear``);
        * Megatron's fused SwiGLU input (``megatron/core/fusions/fused_bias_swiglu.py``,
          ``cpu_offload_input``), dense and shared experts.

        Not marked, so kept: dropout masks (Megatron's bias-dropout-add), Qwen3's q/k norms
        (``TENorm``), unfused attention's scores, a GELU's input, the MoE layer's separate
        pre-MLP norm with its output (the router keeps it; the shared experts' fc1 input
        is still copied) and the routed experts' tensors (``TEGroupedLinear`` and the
        weighted SwiGLU mark nothing).

        ``v2`` (TE 2.18 ``cpu_offload.py``: ``saved_tensors_hooks`` around each layer that
        Megatron wraps in the offload context, ``transformer_block.py``) offloads every
        tensor the layer saves for its backward (``OffloadableLayerState.push_tensor``,
        marked or not; FP8 tensors by their data tensors, ``prepare_for_saving``) but
        parameters, tensors marked ``mark_not_offload`` (weights and biases) and tensors
        of fewer than 256Ki elements (:data:`SMALL_NUMEL`): of what :meth:`block_parts`
        counts, the norms' statistics, the softmax and q/k-norm statistics and the MoE
        routing probabilities stay when that small. Views whose base has as many elements
        travel as the base, and a tensor saved twice is copied once
        (``TensorGroupProcessor``), so the copies carry what is freed. Every other kept
        tensor is taken to be contiguous and at least that large (TE skips
        non-contiguous ones with a warning).

        Latent attention is not modelled (SpecError)."""
        m, e, q, h, a = self.model, self.e, self.q, self.model.hidden, self.attn
        if m.kv_lora_rank:
            raise SpecError(f"model = {m.name}: activation offload of latent attention (MLA) is not modelled")
        if self.offload_handler == "v2":
            return self._offloaded_v2(c, moe)
        n, rep, t = self.tokens(c), self.outside(c), c.tp
        norm = self._norm(q * h)  # input, statistics and output of a fused norm
        qkv = e * (a.q_width + 2 * a.k_width)  # the contiguous q, k, v the attention marks
        proj = a.o_width if self.fp8_copy else 0  # the projection's FP8 copy (delayed)
        freed_in = qkv + e * a.o_width + proj
        # the projection pushes the attention output again, or its FP8 copy
        copied_in = qkv + e * a.o_width + (proj if self.fp8_copy else e * a.o_width)
        freed_out = copied_out = norm
        swiglu = self.gated() == 2
        if moe:
            shared = m.num_shared_experts * m.moe_ffn_hidden
            if shared:
                mlp = q * shared + (e * 2 * shared if swiglu else 0)
                freed_in, copied_in = freed_in + mlp, copied_in + mlp
                if self.fp8_copy:  # the shared fc1's own FP8 copy: copied and cleared
                    freed_out, copied_out = freed_out + h, copied_out + h
                else:  # the router's tensor: copied, still held
                    copied_out += e * h
        else:
            f = m.ffn_hidden
            mlp = q * f + (e * 2 * f if swiglu else 0)
            freed_in, copied_in = freed_in + mlp, copied_in + mlp
            freed_out, copied_out = freed_out + norm, copied_out + norm
        core = n * 4 * m.num_heads // t if self.job.flash_attention else 0
        freed = n * freed_out // rep + n * freed_in // t + core
        copied = n * copied_out // rep + n * copied_in // t + core
        shape = (len(c),)
        return (np.broadcast_to(np.asarray(freed, dtype=np.int64), shape),
                np.broadcast_to(np.asarray(copied, dtype=np.int64), shape))

    def small_saved(self, c: ConfigArrays, moe: bool) -> np.ndarray:
        """Bytes of a block's saved tensors under :data:`SMALL_NUMEL` elements, which TE v2
        does not offload: each norm's statistics (``rsigma``, and ``mu`` for LayerNorm; one
        element per token, outside: the attention's and the MLP's or MoE layer's norm), the
        fused attention's softmax statistics (``heads / tp`` per token), the q/k norms'
        statistics and the MoE routing probabilities (one per routed copy)."""
        m = self.model
        n, rep, t = self.tokens(c), self.outside(c), c.tp
        small = lambda numel, nbytes: np.where(numel < SMALL_NUMEL, numel * nbytes, 0)  # noqa: E731
        tokens = n // rep
        kept = 2 * small(tokens, self.stats)  # rsigma and mu are tensors of one element a token each
        if self.job.flash_attention:
            kept = kept + small(n * m.num_heads // t, 4)
        if m.qk_norm and not m.kv_lora_rank:
            kept = kept + small(n * m.num_heads // t, 4) + small(n * m.num_kv_heads // t, 4)
        if moe:  # one probability per routed copy its expert-TP group gathered
            routed = np.ceil(n / rep * m.experts_per_token * self.expert_tokens(c)).astype(np.int64)
            kept = kept + small(c.etp * routed, 4)
        return np.broadcast_to(np.asarray(kept, dtype=np.int64), (len(c),))

    def _offloaded_v2(self, c: ConfigArrays, moe: bool) -> tuple[np.ndarray, np.ndarray]:
        """TE v2's (freed, copied) (:meth:`offloaded`): all a block keeps without
        recomputation but its small tensors, each storage copied once."""
        parts = self.block_parts(c, moe)
        whole = sum(parts[k] for k in ("keep", *PARTS))
        freed = whole - self.small_saved(c, moe)
        return freed, freed.copy()

    # -- nodes --------------------------------------------------------------------------

    def block_parts(self, c: ConfigArrays, moe: bool) -> dict[str, np.ndarray]:
        """A block's bytes of one micro-batch, per configuration, in parts: ``keep``
        (what no selective module drops), ``core``, ``norm_out``, ``up``, ``mlp``, ``act``,
        ``moe`` (the MoE layer's but ``act``: what those recomputations drop, :data:`DROPS`),
        and ``input`` (what full recomputation keeps); the block keeps the sum of all but
        ``input`` without recomputation."""
        m = self.model
        n, rep, t = self.tokens(c), self.outside(c), c.tp
        attention = self.attention()
        core = n * attention["core"] // t if self.job.flash_attention else self.unfused_scores(c) // t
        keep_out = attention["outside"] - attention["norm_out"]
        keep_in = attention["inside"] - attention["up"]
        parts = {"core": core, "norm_out": n * attention["norm_out"] // rep, "up": n * attention["up"] // t}
        zero = np.zeros(len(c), dtype=np.int64)
        if moe:
            e = self.moe()
            padded = n / rep * m.experts_per_token * self.expert_tokens(c)
            keep_out += e["keep"]
            parts["norm_out"] = parts["norm_out"] + n * e["norm_out"] // rep
            parts["act"] = np.ceil(padded * e["act"]).astype(np.int64)
            # without ``act``; expert TP: the fc1 input and probabilities of etp ranks' tokens
            per_copy = e["routed"] + (c.etp - 1) * e["gathered"]
            parts["moe"] = (n * e["router"] // rep + n * e["shared"] // t
                            + np.ceil(padded * per_copy).astype(np.int64))
            parts["mlp"] = zero
        else:
            d = self.dense_mlp()
            keep_out += d["keep_out"]
            parts["mlp"] = n * d["drop_out"] // rep + n * d["drop_in"] // t
            parts["act"] = parts["moe"] = zero
        parts["keep"] = n * keep_out // rep + n * keep_in // t
        parts["input"] = self.e * n * m.hidden // rep
        return {k: np.broadcast_to(np.asarray(v, dtype=np.int64), (len(c),)) for k, v in parts.items()}

    def embedding(self, c: ConfigArrays) -> np.ndarray:
        """Bytes the embedding keeps: the token ids, and its dropout mask."""
        n = self.tokens(c)
        return 8 * n + (n * self.model.hidden if self.model.dropout else 0) // self.outside(c)

    def head(self, c: ConfigArrays) -> tuple[np.ndarray, np.ndarray]:
        """(kept, transient) bytes of the output layer and loss: the final norm, the
        output layer's input and the fp32 softmax; the 16-bit logits while it runs."""
        m, n, rep, e = self.model, self.tokens(c), self.outside(c), self.e
        outside = self._norm(e * m.hidden) + (e * m.hidden if m.encoder_head else 0)
        return n * outside // rep + 4 * n * m.vocab_size // c.tp, e * n * m.vocab_size // c.tp

    def kept(self, c: ConfigArrays, moe: bool) -> tuple[np.ndarray, np.ndarray]:
        """(kept until the backward, transient while recomputing) of a block under each
        configuration's recomputation: full keeps the input; a module set drops its
        modules' parts (:data:`DROPS`), which it rematerialises one block at a time."""
        parts = self.block_parts(c, moe)
        whole = sum(parts[k] for k in ("keep", *PARTS))
        kept, transient = whole.copy(), np.zeros(len(c), dtype=np.int64)
        for index, mode in enumerate(RECOMPUTE_MODES):
            rows = c.recompute == index
            if not rows.any() or mode == "none":
                continue
            if mode == "full":
                kept = np.where(rows, parts["input"], kept)
                transient = np.where(rows, whole, transient)
                continue
            dropped = sum(parts[part] for module in recompute_modules(mode) for part in DROPS[module])
            kept = np.where(rows, whole - dropped, kept)
            transient = np.where(rows, dropped, transient)
        return kept, transient


PARTS = ("core", "norm_out", "up", "mlp", "act", "moe")
"""The parts of a block's activations recomputation modules drop."""

DROPS = {"core_attn": ("core",), "layernorm": ("norm_out",), "mla_up_proj": ("up",), "mlp": ("mlp",),
         "moe_act": ("act",), "moe": ("moe", "act")}
"""The parts (:meth:`Activations.block_parts`) each Megatron recomputation module drops
(``moe`` keeps only the MoE layer's input: the norm output)."""
