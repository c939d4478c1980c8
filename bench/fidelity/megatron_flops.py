"""Megatron-LM's model FLOPs, which its logs and the runs that publish "TFLOP/s per GPU"
report: ``num_floating_point_operations`` of ``megatron/training/training.py`` at
``core_v0.14.0`` for transformer models (MHA/GQA or MLA attention with causal halving,
dense or MoE MLPs, shared experts, multi-token prediction, the logits). A published
TFLOP/s figure is turned back into the step time it was computed from with it."""

from __future__ import annotations

from nest.specs import ModelSpec


def megatron_flops(m: ModelSpec, seq_len: int, batch: int) -> float:
    """Model FLOPs of one step of ``batch`` sequences of ``seq_len`` tokens, as Megatron-LM
    counts them (router, norms and embedding not counted)."""
    h, layers, mtp = m.hidden, m.num_layers, m.mtp_layers
    moe = sum(m.is_moe_block(i) for i in range(layers)) if m.is_moe else 0
    dense = layers - moe
    last_moe = int(m.is_moe and m.is_moe_block(layers - 1))
    moe, dense, n = moe + last_moe * mtp, dense + (1 - last_moe) * mtp, layers + mtp
    gated = 1.5 if m.mlp == "swiglu" else 1.0
    expansion = 3 * 2 * 2
    if m.kv_lora_rank:
        qk, rope, v = m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim
        q_term = (m.q_lora_rank * (h + m.num_heads * (qk + rope) + 1) if m.q_lora_rank
                  else h * m.num_heads * (qk + rope))
        attention = 3 * 2 * n * (q_term + m.kv_lora_rank * (h + m.num_heads * (qk + v) + 1) + h * rope
                                 + m.num_heads * v * h + seq_len * m.num_heads * (qk + rope) / 2
                                 + seq_len * m.num_heads * v / 2)
    else:
        ratio = m.head_dim * m.num_heads / h
        attention = expansion * n * h * h * (1 + m.num_kv_heads / m.num_heads + seq_len / h / 2) * ratio
    if m.is_moe:
        mlp = expansion * n * h * (m.ffn_hidden * gated * dense / n
                                   + m.moe_ffn_hidden * m.experts_per_token * gated * moe / n
                                   + m.num_shared_experts * m.moe_ffn_hidden * gated * moe / n)
    else:
        mlp = expansion * n * h * m.ffn_hidden * gated
    mtp_terms = 3 * 2 * mtp * (3 * h + 2 * h * h)
    logits = 3 * 2 * h * m.vocab_size * (mtp + 1)
    return batch * seq_len * (mlp + attention + mtp_terms + logits)
