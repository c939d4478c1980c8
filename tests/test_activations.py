"""Saved activations per layer against hand counts of what Megatron-Core + Transformer
Engine keep (notes in nest.cost.activations): one layer, one micro-batch, each term
written out here from the kernels' saved tensors."""

from __future__ import annotations

import pytest

from nest.cost.compute import KernelModel
from nest.cost.nodes import NodeCostModel
from nest.parallel import LayerConfig
from nest.presets.devices import DEVICES
from nest.presets.models import MODELS
from nest.specs import JobSpec
from planning_checks import node_row

S = 4096  # tokens of the micro-batch (b = 1, cp = 1)


def saved(model, kind, tp=1, sp=False, dtype="bf16", recompute="none", seq=S):
    job = JobSpec(global_batch=8, seq_len=seq, dtype=dtype)
    kernels = KernelModel(DEVICES["h100-sxm"], job.dtype_bytes, DEVICES["h100-sxm"].peak_flops(dtype))
    return node_row(NodeCostModel(model, job, kernels), kind, LayerConfig(tp, sp, 1, recompute, False, 1, 1))


def test_llama_block_bf16_and_sp():
    """Llama 3 8B, bf16, per token: attention x 2h + rstd 4 + norm output 2h + QKV output
    2(a + 2g) + rotated q, k 2(a + g) + attention output 2a + softmax statistics 4 heads;
    MLP x 2h + rstd 4 + norm output 2h + fc1 output 2 (2f) + activation 2f. That is
    8h + 6a + 6g + 6f + 4 heads + 8; with SP the h terms and the statistics divide by tp."""
    m = MODELS["llama3-8b"]
    h, a, g, f, heads = m.hidden, m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim, m.ffn_hidden, m.num_heads
    assert saved(m, "block").act_bytes == S * (8 * h + 6 * a + 6 * g + 6 * f + 4 * heads + 8)
    for t in (2, 4, 8):
        outside = (4 * h + 4) * 2  # two halves: x, norm output, rstd
        inside = 6 * a + 6 * g + 6 * f + 4 * heads
        assert saved(m, "block", tp=t, sp=True).act_bytes == S * outside // t + S * inside // t
        assert saved(m, "block", tp=t, sp=False).act_bytes == S * outside + S * inside // t


def test_llama_block_fp8_keeps_fp8_copies():
    """Under FP8 (delayed scaling) the norms write FP8 outputs (h each instead of 2h), fc2
    keeps the FP8 activation (f instead of 2f) and the output projection its FP8 input
    copy (a): 6h + 7a + 6g + 5f + 4 heads + 8."""
    m = MODELS["llama3-8b"]
    h, a, g, f, heads = m.hidden, m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim, m.ffn_hidden, m.num_heads
    assert saved(m, "block", dtype="fp8").act_bytes == S * (6 * h + 7 * a + 6 * g + 5 * f + 4 * heads + 8)


def test_recomputation():
    """Selective (core_attn) drops only the softmax statistics; full keeps the block input;
    what a recomputing block rematerialises while it runs backward is its transient."""
    m = MODELS["llama3-8b"]
    none, selective, full = (saved(m, "block", recompute=r) for r in ("none", "selective", "full"))
    assert none.act_bytes - selective.act_bytes == S * 4 * m.num_heads == selective.transient_bytes
    assert full.act_bytes == S * 2 * m.hidden
    assert none.transient_bytes == 0 and full.transient_bytes == none.act_bytes


def test_qwen3_moe_block():
    """Qwen3-30B-A3B, bf16: attention as Llama's plus the q/k norms (the query's pre-norm
    copy 2a, fp32 statistics 4 (heads + kv_heads)); the MoE half keeps the pre-MLP norm's
    input, statistics and output (2h + 4 + 2h), the router's fp32 logits and scores
    (2 x 4E), and per routed token the grouped fc1 input 2h, its output 2 (2 f_e), the
    activation 2 f_e and the fp32 probability 4: k (2h + 6 f_e + 4) per token."""
    m = MODELS["qwen3-30b-a3b"]
    h, d = m.hidden, m.head_dim
    a, g, heads, kv = m.num_heads * d, m.num_kv_heads * d, m.num_heads, m.num_kv_heads
    attention = 4 * h + 4 + 6 * a + 6 * g + 4 * heads + 2 * a + 4 * (heads + kv)
    moe = 4 * h + 4 + 8 * m.num_experts
    routed = m.experts_per_token * (2 * h + 6 * m.moe_ffn_hidden + 4)
    assert saved(m, "moe").act_bytes == S * (attention + moe + routed)
    fp8_routed = m.experts_per_token * (h + 5 * m.moe_ffn_hidden + 4)
    fp8_attention = attention - h + a  # FP8 norm output, the projection's FP8 copy
    assert saved(m, "moe", dtype="fp8").act_bytes == S * (fp8_attention + moe + fp8_routed)


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
