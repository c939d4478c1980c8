"""Megatron-LM's theoretical memory formulas, as a reference for nest's memory model.

Megatron-LM prints a "theoretical memory footprint" at start-up
(``megatron/training/theoretical_memory_usage.py``,
https://github.com/NVIDIA/Megatron-LM/blob/main/megatron/training/theoretical_memory_usage.py).
This module restates those formulas from their description (it is not Megatron's code)
so that the fidelity suite and the tests can compare nest against them:

* **Weights and optimizer** of the most loaded rank (the first pipeline stage: its
  ``1/pp`` share of the transformer layers plus the word embedding, all over ``tp``;
  a second copy of the embedding when the output layer is untied and ``pp = 1``) times
  18 bytes per parameter (bf16 weight, fp32 gradient, fp32 master weight and two fp32
  Adam moments) or ``6 + 12 / dp`` with the distributed optimizer. A layer has
  ``2 h q (1 + g / a)`` attention weights (query width ``q``, ``g`` key/value groups of
  ``a`` heads), ``2 h f`` MLP weights (``3 h f`` gated) and two norms of ``h``
  (LayerNorm weight and bias, RMSNorm weight only); biases and position embeddings are
  left out.
* **Activations** of the first stage, Korthikanti et al. 2022, Table 2, summed over the
  ``pp`` micro-batches in flight (so ``L`` layers' worth), times the interleaving
  penalty ``1 + (pp - 1) / (pp vp)``, or ``min(1, m / pp)`` without interleaving:

  - with sequence parallelism and selective recomputation: ``s b h (18 + 4 f / h)`` per
    layer, plus the embedding's ``8 s b pp`` (input ids) and ``s b h pp`` (dropout mask),
    plus, when ``pp = 1``, the output layer's ``4 s b h (1 + V / h)``, all over ``tp``;
  - otherwise (no sequence parallelism, no recomputation): ``s b h (10 + 24 / tp)`` per
    layer, the same embedding terms (not divided by ``tp``), when ``pp = 1`` the logits
    ``2 (s b V / tp + s b h)``, and 5% for temporaries.

  Neither variant models full recomputation; attention scores are left out (fused
  attention).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..specs import ModelSpec


@dataclass(frozen=True)
class MegatronMemory:
    """Bytes per device on the first pipeline stage."""

    weights_and_optimizer: float
    activations: float

    @property
    def total(self) -> float:
        return self.weights_and_optimizer + self.activations


def padded_vocab(vocab: int, tp: int, divisible_by: int = 128) -> int:
    """Megatron pads the vocabulary to a multiple of ``divisible_by x tp``."""
    multiple = divisible_by * tp
    return -(-vocab // multiple) * multiple


def _norm_size(model: ModelSpec) -> int:
    return 1 if model.norm == "rmsnorm" else 2


def layer_parameters(model: ModelSpec) -> float:
    """Parameters of one dense transformer layer as Megatron's formula counts them."""
    h, a = model.hidden, model.num_heads
    query = model.head_dim * a
    gated = 1.5 if model.mlp == "swiglu" else 1.0
    attention = 2 * h * query * (1 + model.num_kv_heads / a)
    return 2 * h * (model.ffn_hidden * gated + _norm_size(model)) + attention


def weights_and_optimizer_bytes(model: ModelSpec, tp: int, pp: int, dp: int,
                                distributed_optimizer: bool, vocab: int | None = None) -> float:
    """Weights, gradients and Adam state of the most loaded rank (bytes)."""
    if model.is_moe or model.kv_lora_rank:
        raise ValueError(f"{model.name}: only dense multi-head/grouped-query models are covered")
    vocab = model.vocab_size if vocab is None else vocab
    embedding = model.hidden * vocab
    block = layer_parameters(model) * model.num_layers + _norm_size(model) * model.hidden
    shard = (block / pp + embedding) / tp
    if not model.tied_embeddings and pp == 1:
        shard += embedding / tp
    per_parameter = 6 + 12 / dp if distributed_optimizer else 18
    return shard * per_parameter


def activation_bytes(model: ModelSpec, seq_len: int, micro_batch: int, tp: int, pp: int,
                     vp: int = 1, num_microbatches: int | None = None,
                     sp_selective: bool = True, vocab: int | None = None) -> float:
    """First-stage activation memory (bytes); ``sp_selective`` picks the variant."""
    s, b, h = seq_len, micro_batch, model.hidden
    vocab = model.vocab_size if vocab is None else vocab
    sbh = s * b * h
    if sp_selective:
        memory = sbh * (18 + 4 * model.ffn_hidden / h) * model.num_layers
    else:
        memory = sbh * (10 + 24 / tp) * model.num_layers
    memory += 8 * s * b * pp + sbh * pp  # embedding input ids and dropout mask
    if vp > 1:
        memory *= 1 + (pp - 1) / (pp * vp)
    elif pp > 1 and num_microbatches is not None:
        memory *= min(1, num_microbatches / pp)
    if sp_selective:
        if pp == 1:
            memory += sbh * 4 * (1 + vocab / h)
        return memory / tp
    if pp == 1:
        memory += (s * b * vocab / tp + sbh) * 2
    return memory * 1.05


def megatron_memory(model: ModelSpec, seq_len: int, micro_batch: int, tp: int, pp: int, dp: int,
                    vp: int = 1, num_microbatches: int | None = None, distributed_optimizer: bool = True,
                    sp_selective: bool = True, vocab: int | None = None) -> MegatronMemory:
    """Both terms for one configuration (see the module docstring)."""
    return MegatronMemory(
        weights_and_optimizer_bytes(model, tp, pp, dp, distributed_optimizer, vocab),
        activation_bytes(model, seq_len, micro_batch, tp, pp, vp, num_microbatches, sp_selective, vocab))


def relative_error(predicted: float, reference: float) -> float:
    """``(predicted - reference) / reference``."""
    if not math.isfinite(reference) or reference == 0:
        raise ValueError(f"reference = {reference!r}: must be finite and non-zero")
    return (predicted - reference) / reference
