"""The layer graph of a model and the parameters each node holds per device.

The graph is a networkx ``DiGraph`` chain: ``embedding -> block.0 -> ... -> head``.
Parameters follow Megatron-LM's tensor-parallel layout: QKV and fc1 are
column-parallel, the attention projection and fc2 row-parallel, embeddings and the
LM head vocabulary-parallel; norms and row-parallel biases are replicated.
"""

from __future__ import annotations

import math

import networkx as nx

from .specs import ModelSpec

EMBEDDING, BLOCK, HEAD = "embedding", "block", "head"


def layer_graph(model: ModelSpec) -> nx.DiGraph:
    """The model's layer graph; node attribute ``kind`` is embedding, block or head."""
    graph = nx.DiGraph(name=model.name)
    names = ["embedding"] + [f"block.{i}" for i in range(model.num_layers)] + ["head"]
    kinds = [EMBEDDING] + [BLOCK] * model.num_layers + [HEAD]
    for name, kind in zip(names, kinds):
        graph.add_node(name, kind=kind)
    nx.add_path(graph, names)
    return graph


def chain_kinds(model: ModelSpec) -> list[str]:
    """Node kinds in execution order (the DP's node indices)."""
    graph = layer_graph(model)
    return [graph.nodes[name]["kind"] for name in nx.topological_sort(graph)]


def chain_names(model: ModelSpec) -> list[str]:
    """Node names in execution order."""
    return list(nx.topological_sort(layer_graph(model)))


def _norm_params(model: ModelSpec) -> int:
    return 2 * model.hidden if model.norm == "layernorm" else model.hidden


def block_params(model: ModelSpec, tp: int = 1) -> float:
    """Parameters of one transformer block on one of ``tp`` tensor-parallel ranks."""
    h, f = model.hidden, model.ffn_hidden
    qkv_out = h + 2 * model.kv_hidden
    split = h * qkv_out + h * h  # QKV (column) + projection (row)
    replicated = 2 * _norm_params(model)
    if model.bias:
        split += qkv_out
        replicated += h  # projection bias
    if model.mlp == "swiglu":
        split += 3 * h * f
    else:
        split += 2 * h * f
        if model.bias:
            split += f
            replicated += h  # fc2 bias
    return split / tp + replicated


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


def head_params(model: ModelSpec, tp: int = 1, holds_embedding_copy: bool = False) -> float:
    """Final norm and LM head on one TP rank.

    With tied embeddings the output layer reuses the word embedding; when the head sits
    on another pipeline stage than the embedding, that stage keeps its own copy
    (``holds_embedding_copy``), as Megatron-LM does.
    """
    h = model.hidden
    # BERT is post-LN: its blocks end in a norm, so there is no final one.
    params = 0.0 if model.encoder_head else float(_norm_params(model))
    if not model.tied_embeddings or holds_embedding_copy:
        params += model.vocab_size * h / tp
    if model.encoder_head:
        params += h * h + h  # pooler
        params += h * h + h + _norm_params(model)  # masked-LM transform
        params += model.vocab_size / tp  # decoder bias
        params += 2 * h + 2  # next-sentence classifier
    return params


def parameter_count(model: ModelSpec) -> int:
    """Total unique parameters of the model."""
    return round(embedding_params(model) + model.num_layers * block_params(model) + head_params(model))


def node_params(model: ModelSpec, kind: str, tp: int, tied_copy: bool) -> int:
    """Parameters per device of a node of ``kind`` (rounded up to whole parameters)."""
    if kind == EMBEDDING:
        value = embedding_params(model, tp)
    elif kind == BLOCK:
        value = block_params(model, tp)
    else:
        value = head_params(model, tp, tied_copy)
    return math.ceil(value)
