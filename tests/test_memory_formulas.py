"""Megatron-LM's theoretical memory formulas (nest.cost.memory_formulas) on a hand-computed
example, and nest's first-stage memory against them."""

import pytest

from nest.cost.memory_formulas import (
    activation_bytes,
    layer_parameters,
    megatron_memory,
    padded_vocab,
    weights_and_optimizer_bytes,
)
from nest.cost.pricing import price_candidate
from nest.cost.scenario import Scenario
from nest.parallel import Candidate, LayerConfig
from nest.presets.clusters import CLUSTERS
from nest.presets.models import MODELS
from nest.search.problems import problem as dp_problem
from nest.specs import JobSpec, ModelSpec

# h = 1024, 4 layers, 16 heads, ffn 4096, vocabulary 1024, LayerNorm, GELU, tied
SMALL = ModelSpec(name="small", num_layers=4, hidden=1024, num_heads=16, ffn_hidden=4096, vocab_size=1024,
                  seq_len=512)


def test_hand_computed_weights_and_optimizer():
    # one layer: 2h (f + 2) + 2 h^2 (1 + 1) = 2048 * 4098 + 4 * 1024^2
    assert layer_parameters(SMALL) == 12_587_008
    # block = 4 layers + final LayerNorm (2h); first stage of pp 2 holds half + embedding, over tp 2
    shard = (50_350_080 / 2 + 1024 * 1024) / 2
    assert shard == 13_111_808
    assert weights_and_optimizer_bytes(SMALL, tp=2, pp=2, dp=4, distributed_optimizer=True) == shard * 9
    assert weights_and_optimizer_bytes(SMALL, tp=2, pp=2, dp=4, distributed_optimizer=False) == shard * 18


def test_hand_computed_activations():
    s, b, h = 512, 2, 1024
    sbh = s * b * h
    embedding = 8 * s * b * 2 + sbh * 2  # pp = 2 micro-batches of input ids and dropout masks
    # sequence parallel + selective: 34 s b h per layer, all over tp
    assert activation_bytes(SMALL, s, b, tp=2, pp=2, num_microbatches=8) == (34 * sbh * 4 + embedding) / 2
    # fewer micro-batches than stages: only m of the pp in flight
    assert activation_bytes(SMALL, s, b, tp=2, pp=2, num_microbatches=1) == (34 * sbh * 4 + embedding) / 2 / 2
    # interleaved: penalty 1 + (pp - 1) / (pp vp)
    assert activation_bytes(SMALL, s, b, tp=2, pp=2, vp=2) == (34 * sbh * 4 + embedding) * 1.25 / 2
    # without sequence parallelism: (10 + 24 / tp) s b h per layer, 5% for temporaries
    assert activation_bytes(SMALL, s, b, tp=2, pp=2, num_microbatches=8, sp_selective=False) == \
        pytest.approx((22 * sbh * 4 + embedding) * 1.05, rel=1e-15)
    # pp = 1 adds the output layer: 4 s b h (1 + V / h) with SP
    one = activation_bytes(SMALL, s, b, tp=2, pp=1)
    assert one == (34 * sbh * 4 + 8 * s * b + sbh + 4 * sbh * 2) / 2


def test_padded_vocabulary_and_total():
    assert padded_vocab(50257, 1) == 50304
    assert padded_vocab(50257, 4) == 50688
    mem = megatron_memory(SMALL, 512, 2, tp=2, pp=2, dp=4, num_microbatches=8)
    assert mem.total == mem.weights_and_optimizer + mem.activations


@pytest.mark.parametrize("name,tp,pp,b,sp", [
    ("gpt3-175b", 8, 8, 1, True), ("gpt3-175b", 8, 8, 1, False), ("gpt-18b", 8, 1, 2, True),
    ("gpt-18b", 8, 1, 2, False), ("gpt-7.5b", 4, 2, 4, True), ("gpt-7.5b", 4, 2, 4, False),
    ("gpt-1.7b", 1, 1, 8, False), ("llama2-70b", 8, 4, 1, True)])
def test_nest_first_stage_memory_within_10_percent_of_megatron(name, tp, pp, b, sp):
    """Non-interleaved layouts, fused attention, FP32 gradients (the formula's assumptions):
    nest's weights, optimizer state and activations of the first stage agree. The
    formula's variant without sequence parallelism counts GPT's layer (4h GELU MLP,
    dropout masks): a dropout-free SwiGLU model with grouped-query attention keeps less
    (nest: -13% for Llama-2-70B), so Llama is compared with sequence parallelism only."""
    model = MODELS[name]
    dp, seq, batch = 4, model.seq_len, 64 * b
    cluster = CLUSTERS["dgx-a100"].sized(tp * pp * dp)
    scn = Scenario(model, cluster, JobSpec(batch, seq))
    cfg = LayerConfig(tp, sp and tp > 1, b, "selective" if sp and tp > 1 else "none", model.tied_embeddings and pp > 1)
    cand = Candidate(cfg, pp, dp, 1, 1)
    priced = price_candidate(scn, cand)
    first = scn.kind_index[:1 + model.num_layers // pp]
    weights = sum(priced.col("params_dense")[0, k] * priced.sync["dense_bytes"][0] for k in first)
    acts = float(dp_problem(scn, [cand]).pos_inflight[0]) * sum(priced.col("act_bytes")[0, k] for k in first)
    ref = megatron_memory(model, seq, b, tp, pp, dp, num_microbatches=batch // (dp * b),
                          sp_selective=cfg.sp)
    assert weights == pytest.approx(ref.weights_and_optimizer, rel=0.03)
    assert weights + acts == pytest.approx(ref.total, rel=0.10)
