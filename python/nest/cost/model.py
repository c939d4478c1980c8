"""The layer graph of a model and the parameters each node holds per device.

The graph is a chain ``embedding -> block.0 -> ... -> head`` (:func:`layer_graph` gives
it as a networkx ``DiGraph``; the planner works on its node order).
Blocks with routed experts have kind ``moe``, the others ``block``.

Parameters follow Megatron-LM's layouts: QKV and fc1 are column-parallel, the
attention projection and fc2 row-parallel, embeddings and the LM head
vocabulary-parallel; norms and row-parallel biases are replicated. Routed experts are
split over expert-parallel ranks and each expert over ``etp`` expert-tensor-parallel ranks
(fc1 column-parallel, fc2 row-parallel: Megatron-Core core_v0.14.0
``transformer/moe/experts.py TEGroupedMLP``, whose grouped linears divide the width by
the expert-TP size, ``extensions/transformer_engine.py TEGroupedLinear``); shared experts
are tensor-parallel like a dense MLP; the router is replicated.

Multi-token prediction modules (DeepSeek-V3) belong to the head node: Megatron-Core runs
them on the output layer's pipeline stage, after the last block and with the loss
(core_v0.14.0 ``gpt_model.py`` ``GPTModel._postprocess``). Each holds two norms, the
``2h -> h`` projection ``eh_proj`` (column-parallel), a transformer layer built from the
last block's spec (``pretrain_gpt.py``: ``transformer_layer_spec.layer_specs[-1]``) and a
final norm; the embedding and output layer are shared.

Multi-head latent attention (DeepSeek-V3) is counted exactly (low-rank Q and KV
projections with their norms, decoupled RoPE keys); for time and memory it is priced as
an attention block with the same projection FLOPs and ``qk_nope + qk_rope`` query/key
and ``v_head_dim`` value widths.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..specs import ModelSpec

EMBEDDING, BLOCK, MOE, HEAD = "embedding", "block", "moe", "head"


def chain_names(model: ModelSpec) -> list[str]:
    """Node names in execution order (the DP's node indices)."""
    return ["embedding"] + [f"block.{i}" for i in range(model.num_layers)] + ["head"]


def chain_kinds(model: ModelSpec) -> list[str]:
    """Node kinds in execution order: embedding, block or moe per block, head."""
    return [EMBEDDING] + [MOE if model.is_moe_block(i) else BLOCK for i in range(model.num_layers)] + [HEAD]


def layer_graph(model: ModelSpec):
    """The model's layer graph (a networkx ``DiGraph`` chain in execution order); node
    attribute ``kind`` is embedding, block, moe or head."""
    import networkx as nx  # the planner itself only needs the chain; networkx costs 0.15 s to import

    graph = nx.DiGraph(name=model.name)
    names = chain_names(model)
    for name, kind in zip(names, chain_kinds(model)):
        graph.add_node(name, kind=kind)
    nx.add_path(graph, names)
    return graph


def _norm_params(model: ModelSpec) -> int:
    return 2 * model.hidden if model.norm == "layernorm" else model.hidden


@dataclass(frozen=True)
class AttentionShape:
    """Widths that price an attention block (per model, before tensor parallelism)."""

    q_width: int  # query (and key, for MHA/GQA) projection width, all heads
    k_width: int
    v_width: int
    projection_params: int  # all weight matrices of the block's attention
    score_dim: int  # per-head dimension of the QK^T product
    o_width: int  # attention output (context) width: every query head's values


def attention_shape(model: ModelSpec) -> AttentionShape:
    """Attention projection widths and weights (MHA, GQA or MLA)."""
    h, heads = model.hidden, model.num_heads
    if model.kv_lora_rank:
        qk = model.qk_nope_head_dim + model.qk_rope_head_dim
        if model.q_lora_rank:
            q = h * model.q_lora_rank + model.q_lora_rank * heads * qk
        else:
            q = h * heads * qk
        kv = h * (model.kv_lora_rank + model.qk_rope_head_dim)
        kv += model.kv_lora_rank * heads * (model.qk_nope_head_dim + model.v_head_dim)
        out = heads * model.v_head_dim * h
        return AttentionShape(heads * qk, heads * qk, heads * model.v_head_dim, q + kv + out, qk,
                              heads * model.v_head_dim)
    d = model.head_dim
    q, kv = heads * d, model.num_kv_heads * d
    # GQA: query heads share key/value heads, but each still weights the values: the
    # context is heads x d wide
    return AttentionShape(q, kv, kv, h * (q + 2 * kv) + q * h, d, q)


def _attention_params(model: ModelSpec, tp: int) -> float:
    shape = attention_shape(model)
    split = shape.projection_params
    replicated = _norm_params(model)
    if model.qk_norm:
        replicated += 2 * shape.score_dim  # one head_dim-wide weight for queries, one for keys
    if model.kv_lora_rank:
        replicated += model.kv_lora_rank + model.q_lora_rank  # latent norms
    if model.bias:
        split += shape.q_width + shape.k_width + shape.v_width
        replicated += model.hidden  # projection bias
    return split / tp + replicated


def _mlp_params(model: ModelSpec, ffn: int) -> tuple[float, float]:
    """(split, replicated) parameters of one dense MLP of width ``ffn``."""
    h = model.hidden
    if model.mlp == "swiglu":
        return 3 * h * ffn, 0.0
    split = 2 * h * ffn + (ffn if model.bias else 0)
    return split, (h if model.bias else 0)


def block_params(model: ModelSpec, tp: int = 1) -> float:
    """Parameters of one dense transformer block on one of ``tp`` tensor-parallel ranks."""
    split, replicated = _mlp_params(model, model.ffn_hidden)
    return _attention_params(model, tp) + split / tp + replicated + _norm_params(model)


def moe_block_params(model: ModelSpec, tp: int = 1, ep: int = 1, etp: int = 1) -> tuple[float, float]:
    """(dense, expert) parameters of one MoE block on one rank.

    Dense: attention, norms, router and shared experts (tensor-parallel). Expert: the
    routed experts, ``num_experts / ep`` of them on each rank, each split ``etp`` ways
    (its row-parallel bias replicated).
    """
    expert_split, expert_replicated = _mlp_params(model, model.moe_ffn_hidden)
    expert = model.num_experts * (expert_split / etp + expert_replicated) / ep
    dense = _attention_params(model, tp) + _norm_params(model) + model.hidden * model.num_experts
    dense += model.num_shared_experts * (expert_split / tp + expert_replicated)
    return dense, expert


def embedding_params(model: ModelSpec, tp: int = 1) -> float:
    """Word (vocabulary-parallel), position and token-type embeddings on one TP rank."""
    h = model.hidden
    params = model.vocab_size * h / tp
    if model.position_embedding == "learned":
        params += model.max_position * h
    params += model.type_vocab_size * h
    if model.encoder_head:
        params += _norm_params(model)  # BERT's embedding LayerNorm
    return params


def mtp_layer_is_moe(model: ModelSpec) -> bool:
    """Whether a multi-token prediction module's transformer layer has routed experts: it
    is built from the last block's spec."""
    return model.is_moe_block(model.num_layers - 1)


def mtp_params(model: ModelSpec, tp: int = 1, ep: int = 1, etp: int = 1) -> tuple[float, float]:
    """(dense, expert) parameters of one multi-token prediction module on one rank: its
    norms, ``eh_proj`` and transformer layer (the shared embedding and output layer are
    not its own)."""
    own = 3 * _norm_params(model) + 2 * model.hidden * model.hidden / tp
    if mtp_layer_is_moe(model):
        dense, expert = moe_block_params(model, tp, ep, etp)
        return own + dense, expert
    return own + block_params(model, tp), 0.0


def head_params(model: ModelSpec, tp: int = 1, holds_embedding_copy: bool = False) -> float:
    """Final norm and LM head on one TP rank (the multi-token prediction modules apart:
    :func:`mtp_params`).

    With tied embeddings the output layer reuses the word embedding; when the head sits
    on another pipeline stage than the embedding, that stage keeps its own copy
    (``holds_embedding_copy``), as Megatron-LM does, which an untied model with MTP
    modules keeps next to its output layer (:attr:`~nest.specs.ModelSpec.head_needs_embedding`).
    """
    h = model.hidden
    # BERT is post-LN: its blocks end in a norm, so there is no final one.
    params = 0.0 if model.encoder_head else float(_norm_params(model))
    params += model.vocab_size * h / tp * ((not model.tied_embeddings) + holds_embedding_copy)
    if model.encoder_head:
        params += h * h + h  # pooler
        params += h * h + h + _norm_params(model)  # masked-LM transform
        params += model.vocab_size / tp  # decoder bias
        params += 2 * h + 2  # next-sentence classifier
    return params


def _blocks_total(model: ModelSpec, experts_used: float) -> float:
    """Parameters of the blocks and the multi-token prediction modules, routed experts
    counted ``experts_used`` of ``num_experts`` times."""
    total = 0.0
    for i in range(model.num_layers):
        if model.is_moe_block(i):
            dense, expert = moe_block_params(model)
            total += dense + expert * experts_used / model.num_experts
        else:
            total += block_params(model)
    dense, expert = mtp_params(model)
    return total + model.mtp_layers * (dense + (expert * experts_used / model.num_experts if expert else 0.0))


def parameter_count(model: ModelSpec) -> int:
    """Total unique parameters of the model."""
    experts = model.num_experts or 1
    return round(embedding_params(model) + _blocks_total(model, experts) + head_params(model))


def active_parameter_count(model: ModelSpec) -> int:
    """Parameters used per token (routed experts counted ``experts_per_token`` times)."""
    if not model.is_moe:
        return parameter_count(model)
    return round(embedding_params(model) + _blocks_total(model, model.experts_per_token)
                 + head_params(model))


def node_params(model: ModelSpec, kind: str, tp: int, tied_copy: bool, ep: int = 1, etp: int = 1) -> tuple[int, int]:
    """(dense, expert) parameters per device of a node of ``kind`` (experts over ``ep x
    etp`` ranks), rounded up."""
    if kind == EMBEDDING:
        dense, expert = embedding_params(model, tp), 0.0
    elif kind == BLOCK:
        dense, expert = block_params(model, tp), 0.0
    elif kind == MOE:
        dense, expert = moe_block_params(model, tp, ep, etp)
    else:
        dense, expert = mtp_params(model, tp, ep, etp)
        dense, expert = head_params(model, tp, tied_copy) + model.mtp_layers * dense, model.mtp_layers * expert
    return math.ceil(dense), math.ceil(expert)
