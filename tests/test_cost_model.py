"""Cost model: activation memory (Korthikanti et al. 2022), FLOPs (Narayanan et al. 2021),
collectives (alpha-beta), memory per parameter."""

import math
from dataclasses import replace

import numpy as np
import pytest

from nest.cost.compute import KernelModel
from nest.cost.model import node_params
from nest.cost.nodes import NodeCostModel
from nest.cost.pricing import price_candidate
from nest.cost.scenario import Scenario
from nest.network.layout import Layout, joint_groups
from nest.network.tiers import group_shape
from nest.parallel import Candidate, LayerConfig
from nest.presets.clusters import CLUSTERS
from nest.presets.models import MODELS
from nest.specs import JobSpec
from planning_checks import node_row

GPT = MODELS["gpt3-175b"]
CLUSTER = CLUSTERS["dgx-a100"].sized(1024)


def _block(model, job, cfg, kind="block"):
    kernels = KernelModel(CLUSTER.device, 2, CLUSTER.device.peak_flops("bf16"))
    return node_row(NodeCostModel(model, job, kernels), kind, cfg)


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize("b", [1, 2])
def test_korthikanti_activation_formulas(tp, b):
    """GPT's shapes give Korthikanti et al.'s counts plus what they leave out: the two
    LayerNorms' fp32 mean and rstd (8 bytes per token each, outside the TP region)."""
    job = JobSpec(global_batch=64, seq_len=2048, flash_attention=False)
    s, h, a = 2048, GPT.hidden, GPT.num_heads
    sbh = s * b * h
    stats = 2 * 8 * s * b
    expect = {
        (False, "none"): sbh * (10 + 24 / tp + 5 * a * s / (h * tp)) + stats,
        (True, "none"): sbh / tp * (34 + 5 * a * s / h) + stats / tp,
        (True, "selective"): sbh / tp * 34 + stats / tp,
        (False, "selective"): sbh * (10 + 24 / tp) + stats,
        (False, "full"): 2 * sbh,
        (True, "full"): 2 * sbh / tp,
    }
    for (sp, rc), value in expect.items():
        if sp and tp == 1:
            continue
        got = _block(GPT, job, LayerConfig(tp, sp, b, rc)).act_bytes
        assert got == pytest.approx(value, rel=1e-12, abs=1), (sp, rc)


def test_flash_attention_drops_quadratic_term():
    job = JobSpec(global_batch=64, seq_len=2048, flash_attention=True)
    got = _block(GPT, job, LayerConfig(8, True, 1, "none")).act_bytes
    sbh = 2048 * GPT.hidden
    # 34 sbh / t, the norms' statistics and an fp32 log-sum-exp per head and token
    assert got == sbh * 34 // 8 + 2 * 8 * 2048 // 8 + 4 * GPT.num_heads * 2048 // 8


def test_model_flops_follow_narayanan():
    """Per block, fwd+bwd: 72 b s h^2 (1 + s / (6h))."""
    job = JobSpec(global_batch=64, seq_len=2048)
    b, s, h = 2, 2048, GPT.hidden
    cost = _block(GPT, job, LayerConfig(4, True, b, "full"))
    assert cost.model_flops * 4 == pytest.approx(72 * b * s * h * h * (1 + s / (6 * h)), rel=1e-12)


def test_grouped_query_attention_keeps_the_core_flops():
    """GQA shares key/value heads but every query head still computes its scores and
    weights the values: the attention core costs the same as with one KV head per query
    head, the block's FLOPs differ only by the smaller K/V projections, and the context
    activation stays heads x head_dim wide."""
    mha = MODELS["llama2-7b"]
    gqa = replace(mha, name="llama2-7b-gqa", num_kv_heads=mha.num_heads // 4)
    job = JobSpec(global_batch=64, seq_len=4096)
    b, s, h, d = 1, 4096, mha.hidden, mha.head_dim
    for cfg in (LayerConfig(1, False, b, "none"), LayerConfig(4, True, b, "none")):
        one, grouped = _block(mha, job, cfg), _block(gqa, job, cfg)
        assert grouped.core_fwd_s == one.core_fwd_s and grouped.core_bwd_s == one.core_bwd_s
        kv_saved = 2 * h * (mha.num_heads - gqa.num_kv_heads) * d  # K and V projection weights
        assert (one.model_flops - grouped.model_flops) * cfg.tp == pytest.approx(6 * b * s * kv_saved, rel=1e-12)
        # only K and V shrink among the kept activations: the QKV output (K, V) and the
        # rotated K the attention keeps
        kv_bytes = 2 * b * s * (mha.num_heads - gqa.num_kv_heads) * d * 2 / cfg.tp
        assert one.act_bytes - grouped.act_bytes == pytest.approx(kv_bytes, rel=1e-12)


def test_full_recompute_adds_a_forward_pass():
    job = JobSpec(global_batch=64, seq_len=2048)
    none = _block(GPT, job, LayerConfig(8, True, 1, "none"))
    full = _block(GPT, job, LayerConfig(8, True, 1, "full"))
    selective = _block(GPT, job, LayerConfig(8, True, 1, "selective"))
    assert none.compute_s < selective.compute_s < full.compute_s
    assert full.compute_s == pytest.approx(none.compute_s * 4 / 3, rel=0.1)
    assert full.tp_count[0] == 1.5 * none.tp_count[0] == 6  # 2 fwd + 2 bwd + 2 recomputed


def test_ring_all_reduce_single_tier():
    shape = group_shape(CLUSTER, np.arange(8)[None])
    nbytes = 1e9
    tier = CLUSTER.tiers[0]
    assert shape.all_reduce(nbytes) == pytest.approx(2 * 7 / 8 * nbytes / tier.bandwidth + 2 * 7 * tier.latency)


def test_hierarchical_all_reduce_two_tiers():
    """16 ranks = 2 per node x 8 nodes in one leaf: RS in node, ring across nodes on 1/2."""
    layout = Layout({"tp": 4, "dp": 16, "pp": 1})
    groups = joint_groups(layout, ("dp",))
    shape = group_shape(CLUSTER, groups)
    assert shape.factors == (2, 8, 1)
    nvlink, leaf = CLUSTER.tiers[0], CLUSTER.tiers[1]
    n = 4e9
    expect = 2 * ((1 / 2) * n / nvlink.bandwidth + nvlink.latency
                  + (7 / 8) * (n / 2) / leaf.bandwidth + 7 * leaf.latency)
    assert shape.all_reduce(n) == pytest.approx(expect, rel=1e-12)


@pytest.mark.parametrize("order", ["tp-cp-ep-dp-pp", "dp-tp-pp-cp-ep", "pp-dp-cp-ep-tp"])
def test_joint_groups_are_the_ranks_that_differ_only_in_their_dimensions(order):
    """Leaders from the other dimensions' offsets are the ranks with coordinate 0 in every
    dimension of the group (the definition), rows ascending, for every subset of
    dimensions."""
    import itertools

    layout = Layout({"tp": 4, "cp": 2, "dp": 3, "pp": 2}, order)
    coords = layout.coordinates()
    for k in range(0, 5):
        for dims in itertools.combinations(("tp", "cp", "ep", "dp", "pp"), k):
            others = [d for d in coords if d not in dims]
            key = sum(coords[d] * 100 ** i for i, d in enumerate(others))  # the coordinates outside dims
            expected = np.array([np.flatnonzero(key == v) for v in np.unique(key)])
            expected = expected[np.argsort(expected[:, 0])]
            assert np.array_equal(joint_groups(layout, dims), expected), dims


def test_non_uniform_group_priced_as_flat_ring_on_outer_tier():
    shape = group_shape(CLUSTER, np.array([[6, 7, 8, 9, 10, 11]]))
    assert shape.factors == (1, 6, 1)


def test_pipeline_boundary_tiers_follow_rank_order():
    # tp 2 x dp 2 = 4 devices per stage: stages 0|1 share a node, 1|2 cross to the leaf.
    # The last entry is the wrap-around from the last stage to the first (interleaving).
    layout = Layout({"tp": 2, "dp": 2, "pp": 4})
    assert layout.boundary_tiers(CLUSTER).tolist() == [0, 1, 0, 1]
    layout = Layout({"tp": 8, "dp": 16, "pp": 4})  # 128 devices per stage, leaves of 256
    assert layout.boundary_tiers(CLUSTER).tolist() == [1, 2, 1, 2]
    # pp inside dp: stage neighbours are adjacent blocks of 16 devices
    layout = Layout({"tp": 8, "dp": 16, "pp": 2}, "tp-cp-ep-pp-dp")
    assert layout.boundary_tiers(CLUSTER).tolist() == [1, 1]


def test_memory_per_parameter_megatron_and_zero1():
    scn = Scenario(GPT, CLUSTER, JobSpec(global_batch=1536, seq_len=2048))
    cfg = LayerConfig(8, True, 1, "none")
    plain = price_candidate(scn, Candidate(cfg, pp=8, dp=8, zero=0)).sync["dense_bytes"][0]
    sharded = price_candidate(scn, Candidate(cfg, pp=8, dp=8, zero=1)).sync["dense_bytes"][0]
    assert plain == 18  # Megatron: 2 weight + 4 fp32 grad + 12 Adam state
    assert sharded == 6 + 12 / 8


def test_tied_embedding_copy_only_across_stages():
    assert node_params(GPT, "head", 8, True)[0] - node_params(GPT, "head", 8, False)[0] == \
        math.ceil(GPT.vocab_size * GPT.hidden / 8)


def test_alltoall_dispatcher_sorts_tokens_by_local_expert():
    """Megatron's alltoall dispatcher sorts the received tokens by local expert and back
    when a rank holds several experts: four more passes over the routed copies than the
    flex dispatcher or one expert per rank (core_v0.14.0 token_dispatcher.py, "Permutation 2")."""
    import nest
    from nest.parallel import ConfigArrays, LayerConfig
    from nest.presets.models import MODELS
    from nest.specs import JobSpec

    model = MODELS["qwen3-30b-a3b"]  # 128 experts
    device = nest.load_device("h100-sxm")
    for ep, sorted_ in ((16, True), (128, False)):
        times = {}
        for dispatcher in ("alltoall", "flex"):
            job = JobSpec(global_batch=16, seq_len=4096, moe_dispatcher=dispatcher, overlap_grad_reduce=False)
            kernels = KernelModel(device, job.dtype_bytes, device.peak_flops(job.dtype))
            costs = NodeCostModel(model, job, kernels)
            arrays = ConfigArrays.of([LayerConfig(1, False, 1, "none", False, 1, ep)])
            times[dispatcher] = costs._moe(arrays)[1][0]
        routed = 4096 * model.experts_per_token * model.hidden * 2
        extra = 4 * routed / kernels.memory_rate + 2 * kernels.overhead if sorted_ else 0.0
        assert times["alltoall"] - times["flex"] == pytest.approx(extra, rel=1e-9, abs=1e-15)
