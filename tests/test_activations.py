"""Saved activations per layer against hand counts of what Megatron-Core + Transformer
Engine keep (notes in nest.cost.activations): one layer, one micro-batch, each term
written out here from the kernels' saved tensors."""

from __future__ import annotations

import numpy as np
import pytest

from nest.cost.activations import SMALL_NUMEL, Activations
from nest.cost.compute import KernelModel
from nest.cost.nodes import NodeCostModel
from nest.parallel import ConfigArrays, LayerConfig
from nest.presets.devices import DEVICES
from nest.presets.models import MODELS
from nest.specs import JobSpec
from planning_checks import node_row

S = 4096  # tokens of the micro-batch (b = 1, cp = 1)


RecipeJob = JobSpec  # the job with its FP8 recipe and offload handler (JobSpec fields)


def saved(model, kind, tp=1, sp=False, dtype="bf16", recompute="none", seq=S, mbs=1, recipe="delayed"):
    job = RecipeJob(global_batch=8 * mbs, seq_len=seq, dtype=dtype, fp8_recipe=recipe)
    kernels = KernelModel(DEVICES["h100-sxm"], job.dtype_bytes, DEVICES["h100-sxm"].peak_flops(dtype))
    return node_row(NodeCostModel(model, job, kernels), kind, LayerConfig(tp, sp, mbs, recompute, False, 1, 1))


def test_llama_block_bf16_and_sp():
    """Llama 3 8B, bf16, per token: attention x 2h + rstd 4 + norm output 2h + q, k, v
    2(a + 2g) (the rotated q and k, and v made contiguous by TE's get_qkv_layout: nothing
    keeps the QKV GEMM's buffer) + attention output 2a + softmax statistics 4 heads; MLP
    x 2h + rstd 4 + norm output 2h + fc1 output 2 (2f) + activation 2f. That is
    8h + 4a + 4g + 6f + 4 heads + 8; with SP the h terms and the statistics divide by tp."""
    m = MODELS["llama3-8b"]
    h, a, g, f, heads = m.hidden, m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim, m.ffn_hidden, m.num_heads
    assert saved(m, "block").act_bytes == S * (8 * h + 4 * a + 4 * g + 6 * f + 4 * heads + 8)
    for t in (2, 4, 8):
        outside = (4 * h + 4) * 2  # two halves: x, norm output, rstd
        inside = 4 * a + 4 * g + 6 * f + 4 * heads
        assert saved(m, "block", tp=t, sp=True).act_bytes == S * outside // t + S * inside // t
        assert saved(m, "block", tp=t, sp=False).act_bytes == S * outside + S * inside // t


def test_rope_does_not_add_to_the_qkv_bytes():
    """With or without rotary embeddings the attention keeps 2(a + 2g) of q, k and v: the
    rotated q, k replace the views (learned positions: TE copies all three)."""
    m = MODELS["llama3-8b"]
    from dataclasses import replace
    learned = replace(m, position_embedding="learned")
    assert saved(learned, "block").act_bytes == saved(m, "block").act_bytes


def test_llama_block_fp8_keeps_fp8_copies():
    """Under FP8 with delayed scaling the norms write FP8 outputs (h each instead of 2h),
    fc2 keeps the FP8 activation (f instead of 2f) and the output projection its FP8 input
    copy (a): 6h + 5a + 4g + 5f + 4 heads + 8. Current scaling (tensorwise) keeps no
    projection copy (Megatron's save_original_input): 6h + 4a + 4g + 5f + 4 heads + 8."""
    m = MODELS["llama3-8b"]
    h, a, g, f, heads = m.hidden, m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim, m.ffn_hidden, m.num_heads
    assert saved(m, "block", dtype="fp8").act_bytes == S * (6 * h + 5 * a + 4 * g + 5 * f + 4 * heads + 8)
    assert saved(m, "block", dtype="fp8", recipe="tensorwise").act_bytes == \
        S * (6 * h + 4 * a + 4 * g + 5 * f + 4 * heads + 8)
    assert saved(m, "head", dtype="fp8", recipe="tensorwise").act_bytes == saved(m, "head", dtype="fp8").act_bytes


def test_llama3_70b_fp8cs_recipe_layer_by_hand():
    """Megatron-Bridge's llama3_70b_pretrain_64gpu_gb200_fp8cs_config: TP1, no SP, micro-batch
    2 x 8192 tokens, FP8 current scaling. One layer, tensor by tensor (bytes per token):

    attention: x 2h (the layer input, TE _LayerNormLinear's inputmat), rsigma 4, FP8 norm
    output h (columnwise only), rotated q 2a and k 2g (TE fused RoPE outputs), v 2g (TE
    get_qkv_layout's contiguous copy), attention output 2a (FusedAttnFunc's out and the
    projection's original input), softmax statistics 4 heads; MLP: x 2h, rsigma 4, FP8 norm
    output h, fc1 output 2 (2f) (BiasSwiGLUFunction's input), fc2's FP8 input f."""
    m = MODELS["llama3-70b"]
    h, a, g, f, heads = m.hidden, m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim, m.ffn_hidden, m.num_heads
    assert (h, a, g, f, heads) == (8192, 8192, 1024, 28672, 64)
    n = 2 * 8192
    attention = 2 * h + 4 + h + 2 * a + 2 * g + 2 * g + 2 * a + 4 * heads
    mlp = 2 * h + 4 + h + 2 * 2 * f + f
    assert attention + mlp == 229_640
    layer = saved(m, "block", dtype="fp8", seq=8192, mbs=2, recipe="tensorwise").act_bytes
    assert layer == n * (attention + mlp) == 3_762_421_760  # 3.504 GiB (nest had 4_198_563_840)
    delayed = saved(m, "block", dtype="fp8", seq=8192, mbs=2).act_bytes
    assert delayed - layer == n * a  # the projection's FP8 copy
    # the head: final norm x 2h, rsigma 4, output-layer input 2h; the fp32 cross-entropy
    # tensor 4V (TE 2.18's fused CE keeps its fp32 gradient); the 16-bit logits transient
    head = saved(m, "head", dtype="fp8", seq=8192, mbs=2, recipe="tensorwise")
    assert head.act_bytes == n * (4 * h + 4) + 4 * n * m.vocab_size
    assert head.transient_bytes == 2 * n * m.vocab_size

    # what the offload frees and copies of that layer, under each TE handler
    config = ConfigArrays.of([LayerConfig(1, False, 2, "none")])
    job = lambda handler: RecipeJob(global_batch=256, seq_len=8192, dtype="fp8", fp8_recipe="tensorwise",  # noqa: E731
                                    activation_offload_handler=handler)
    freed, copied = Activations(m, job("v1")).offloaded(config, moe=False)
    assert freed[0] == layer and copied[0] == layer + n * 2 * a  # v1 copies the attention output twice
    freed, copied = Activations(m, job("v2")).offloaded(config, moe=False)
    assert n < SMALL_NUMEL <= n * heads  # the two rsigma stay, the softmax statistics go
    assert freed[0] == copied[0] == layer - 2 * 4 * n


def test_v2_offload_keeps_only_small_tensors():
    """TE v2 offloads what v1 leaves (GPT's dropout masks and GELU input, Qwen3's q/k norms,
    the MoE layer's norm, router and experts) and keeps the tensors under 256Ki elements:
    at 16384 tokens each norm's statistics (16384 elements each: rsigma, and mu for GPT's
    LayerNorm), Qwen3's key-norm statistics (4 KV heads) and routing probabilities
    (8 per token); the softmax and query-norm statistics (24 or 32 heads) move."""
    tokens = 16384
    config = ConfigArrays.of([LayerConfig(1, False, 1, "none")])
    cases = (("llama3-8b", False, 2 * tokens * 4), ("gpt-1.7b", False, 2 * tokens * 8),
             ("qwen3-30b-a3b", True, 2 * tokens * 4 + tokens * 4 * 4 + tokens * 8 * 4))
    for name, moe, small in cases:
        model = MODELS[name]
        assert tokens * model.num_heads >= SMALL_NUMEL > tokens
        assert not moe or SMALL_NUMEL > tokens * max(model.num_kv_heads, model.experts_per_token)
        acts = Activations(model, RecipeJob(global_batch=8, seq_len=tokens, activation_offload_handler="v2"))
        kept, _ = acts.kept(config, moe)
        freed, copied = acts.offloaded(config, moe)
        assert kept[0] - freed[0] == small and np.array_equal(freed, copied)
        v1_freed, _ = Activations(model, JobSpec(global_batch=8, seq_len=tokens)).offloaded(config, moe)
        if name == "llama3-8b":  # v1 frees everything a llama block keeps
            assert v1_freed[0] - freed[0] == small
        else:
            assert freed[0] > v1_freed[0]


def test_recomputation():
    """Selective (core_attn) drops only the softmax statistics; full keeps the block input;
    what a recomputing block rematerialises while it runs backward is its transient."""
    m = MODELS["llama3-8b"]
    none, selective, full = (saved(m, "block", recompute=r) for r in ("none", "selective", "full"))
    assert none.act_bytes - selective.act_bytes == S * 4 * m.num_heads == selective.transient_bytes
    assert full.act_bytes == S * 2 * m.hidden
    assert none.transient_bytes == 0 and full.transient_bytes == none.act_bytes


def test_qwen3_moe_block():
    """Qwen3-30B-A3B, bf16: attention as Llama's plus the q/k norms (their contiguous
    inputs 2(a + g), fp32 statistics 4 (heads + kv_heads)); the MoE half keeps the pre-MLP norm's
    input, statistics and output (2h + 4 + 2h), the router's fp32 logits and scores
    (2 x 4E), and per routed token the grouped fc1 input 2h, its output 2 (2 f_e), the
    activation 2 f_e and the fp32 probability 4: k (2h + 6 f_e + 4) per token."""
    m = MODELS["qwen3-30b-a3b"]
    h, d = m.hidden, m.head_dim
    a, g, heads, kv = m.num_heads * d, m.num_kv_heads * d, m.num_heads, m.num_kv_heads
    attention = 4 * h + 4 + 4 * a + 4 * g + 4 * heads + 2 * (a + g) + 4 * (heads + kv)
    moe = 4 * h + 4 + 8 * m.num_experts
    routed = m.experts_per_token * (2 * h + 6 * m.moe_ffn_hidden + 4)
    assert saved(m, "moe").act_bytes == S * (attention + moe + routed)
    fp8_routed = m.experts_per_token * (h + 5 * m.moe_ffn_hidden + 4)
    fp8_attention = attention - h + a  # FP8 norm output, the projection's FP8 copy
    assert saved(m, "moe", dtype="fp8").act_bytes == S * (fp8_attention + moe + fp8_routed)
    assert saved(m, "moe", dtype="fp8", recipe="tensorwise").act_bytes == S * (fp8_attention - a + moe + fp8_routed)


def test_deepseek_latent_attention_and_shared_expert():
    """DeepSeek-V3 (MLA), bf16: the separate input norm (x 2h, rstd 4) and its output 2h
    (kept once for both down projections); the q latent's and kv latent's norm inputs and
    outputs (2 r + 2 r + 4 each) and the kv down projection's whole output 2 (r_kv + d_rope);
    the contiguous q and k (2 heads (d_nope + d_rope) each) and v (2 heads d_v); the output
    2 heads d_v and the statistics 4 heads. Its shared expert adds 2 (2 f_s) + 2 f_s."""
    m = MODELS["deepseek-v3"]
    h, heads = m.hidden, m.num_heads
    qk, dv = m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim
    attention = (4 * h + 4 + (4 * m.q_lora_rank + 4) + 2 * (m.kv_lora_rank + m.qk_rope_head_dim)
                 + 2 * m.kv_lora_rank + 4 + 2 * heads * (2 * qk + dv) + 2 * heads * dv + 4 * heads)
    shared = m.num_shared_experts * m.moe_ffn_hidden
    moe = 4 * h + 4 + 8 * m.num_experts + 6 * shared
    routed = m.experts_per_token * (2 * h + 6 * m.moe_ffn_hidden + 4)
    assert saved(m, "moe").act_bytes == S * (attention + moe + routed)
    dense = saved(m, "block").act_bytes
    assert dense == S * (attention + 4 * h + 4 + 6 * m.ffn_hidden)


def test_gpt_block_with_dropout_and_unfused_attention():
    """GPT (LayerNorm, GELU, dropout): per token each half keeps x 2h, mean and rstd 8,
    the norm output 2h and a dropout mask h; attention the QKV output 6h and its output
    2h; the MLP fc1's output 2f and the activation 2f; unfused attention its scores
    (softmax 2, dropout mask 1 and output 2 per score)."""
    m = MODELS["gpt-1.7b"]
    h, f, heads = m.hidden, m.ffn_hidden, m.num_heads
    per_token = 2 * (5 * h + 8) + 8 * h + 4 * f
    job = JobSpec(global_batch=8, seq_len=2048, flash_attention=False)
    kernels = KernelModel(DEVICES["a100-80gb"], 2, DEVICES["a100-80gb"].peak_flops_bf16)
    row = node_row(NodeCostModel(m, job, kernels), "block", LayerConfig(2, True, 1, "none", False, 1, 1))
    assert row.act_bytes == 2048 * per_token // 2 + 5 * heads * 2048 * 2048 // 2


def test_output_layer_and_embedding():
    """The head keeps the final norm's input and rstd and the output layer's input (4h + 4
    per token, outside) and the fp32 softmax 4 V / tp; its 16-bit logits 2 V / tp are
    transient. The embedding keeps the int64 token ids."""
    m = MODELS["llama3-8b"]
    for t, sp in ((1, False), (4, True), (4, False)):
        head = saved(m, "head", tp=t, sp=sp)
        rep = t if sp else 1
        assert head.act_bytes == S * (4 * m.hidden + 4) // rep + 4 * S * m.vocab_size // t
        assert head.transient_bytes == 2 * S * m.vocab_size // t
        assert saved(m, "embedding", tp=t, sp=sp).act_bytes == 8 * S


@pytest.mark.parametrize("model", ["llama3-70b", "qwen3-30b-a3b", "deepseek-v3", "gpt3-175b"])
def test_fp8_never_keeps_more_than_bf16(model):
    m = MODELS[model]
    for kind in ("block", "head") + (("moe",) if m.is_moe else ()):
        assert saved(m, kind, tp=4, sp=True, dtype="fp8").act_bytes <= saved(m, kind, tp=4, sp=True).act_bytes


# -- recomputation modules (Megatron-Core --recompute-modules) ----------------------------------

def test_mlp_module_keeps_only_the_mlp_input():
    """``mlp`` checkpoints the dense MLP (its fused norm included): of that half only the
    input x 2h and no statistics, norm output or intermediates stay (2h + 4 + 2h + 6f less)."""
    m = MODELS["llama3-8b"]
    none, mlp = saved(m, "block"), saved(m, "block", recompute="mlp")
    assert none.act_bytes - mlp.act_bytes == S * (4 + 2 * m.hidden + 6 * m.ffn_hidden) == mlp.transient_bytes
    assert mlp.recompute_s > 0 and mlp.recompute_s < saved(m, "block", recompute="full").recompute_s


def test_moe_modules():
    """``moe_act`` drops the experts' activation output (2 f_e per routed token),
    ``layernorm`` the pre-MLP norm's output (2h per token), ``moe`` keeps only the MoE
    layer's input (dropping the router's 8E, and per routed token 2h + 6 f_e + 4)."""
    m = MODELS["qwen3-30b-a3b"]
    k, h, f = m.experts_per_token, m.hidden, m.moe_ffn_hidden
    none = saved(m, "moe").act_bytes
    assert none - saved(m, "moe", recompute="moe_act").act_bytes == S * k * 2 * f
    assert none - saved(m, "moe", recompute="layernorm,moe_act").act_bytes == S * (k * 2 * f + 2 * h)
    assert none - saved(m, "moe", recompute="moe").act_bytes == S * (8 * m.num_experts + k * (2 * h + 6 * f + 4))


def test_mla_up_projection_module():
    """``mla_up_proj`` drops the contiguous q, k and v (2 heads (2 (d_nope + d_rope) + d_v))."""
    m = MODELS["deepseek-v3"]
    qk = m.qk_nope_head_dim + m.qk_rope_head_dim
    dropped = saved(m, "moe").act_bytes - saved(m, "moe", recompute="mla_up_proj").act_bytes
    assert dropped == S * 2 * m.num_heads * (2 * qk + m.v_head_dim)


def test_module_recomputation_repeats_its_collectives():
    """A recomputed dense MLP repeats its TP pair (1 of 5 of the block's), a recomputed MoE
    layer its dispatch and combine (2 of 6 all-to-alls); full recomputation a third of each."""
    job = JobSpec(global_batch=8, seq_len=S)
    kernels = KernelModel(DEVICES["h100-sxm"], 2, DEVICES["h100-sxm"].peak_flops_bf16)
    costs = lambda m: NodeCostModel(m, job, kernels)  # noqa: E731
    dense = node_row(costs(MODELS["llama3-8b"]), "block", LayerConfig(4, True, 1, "mlp", False, 1, 1))
    assert (dense.recompute_tp_share, dense.recompute_ep_share) == (1 / 5, 0)
    moe = node_row(costs(MODELS["qwen3-30b-a3b"]), "moe", LayerConfig(2, True, 1, "moe", False, 1, 8))
    assert moe.recompute_ep_share == 2 / 6 and moe.recompute_tp_share == 0  # no shared experts
    full = node_row(costs(MODELS["qwen3-30b-a3b"]), "moe", LayerConfig(2, True, 1, "full", False, 1, 8))
    assert full.recompute_ep_share == full.recompute_tp_share == pytest.approx(1 / 3)


def test_modes_a_model_does_not_have_are_refused():
    import nest

    with pytest.raises(nest.SpecError, match=r"^recompute = moe_act: recomputes a module llama3-8b does not have "
                                             r"\(its modes: none, selective, full, mlp\)"):
        nest.evaluate("llama3-8b", nest.load_cluster("dgx-h100", devices=8), tp=1, pp=1, dp=8, micro_batch=1,
                      recompute="moe_act")
