"""Expert load imbalance of dropless routing (nest.cost.imbalance): the busiest
expert-parallel rank sets a MoE layer's pace and memory."""

import math
from dataclasses import replace

import numpy as np
import pytest

import nest
from nest.cost.compute import KernelModel
from nest.cost.imbalance import expected_max_normal, rank_load_factor
from nest.cost.nodes import NodeCostModel
from nest.errors import SpecError
from nest.parallel import ConfigArrays, LayerConfig
from nest.presets.models import MODELS
from nest.specs import JobSpec

QWEN = MODELS["qwen3-235b-a22b"]


def test_expected_maximum_of_normals():
    """E[max] of 2 and 3 standard normals in closed form, of 8 from the tables."""
    assert expected_max_normal(1) == 0.0
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-9)
    assert expected_max_normal(3) == pytest.approx(3 / (2 * math.sqrt(math.pi)), abs=1e-9)
    assert expected_max_normal(8) == pytest.approx(1.4236003, abs=1e-6)


def test_rank_load_factor_by_hand():
    """128 experts over 8 ranks of 16: the rank's CV is cv sqrt(112 / (16 x 127))."""
    cv = 0.5
    expected = 1 + cv * math.sqrt(112 / (16 * 127)) * expected_max_normal(8)
    assert rank_load_factor(cv, 128, [8])[0] == pytest.approx(expected, rel=1e-12)
    assert rank_load_factor(cv, 128, [1])[0] == 1.0  # one rank holds every expert
    assert rank_load_factor(0.0, 128, [8, 32])[0] == 1.0
    assert rank_load_factor(cv, 128, [8], capacity=1.1)[0] == 1.1  # a dropping dispatcher caps it
    assert rank_load_factor(100.0, 128, [4])[0] == 4.0  # at most every rank's tokens on one
    # more ranks: each holds fewer experts and there are more to be the busiest
    factors = rank_load_factor(cv, 128, [2, 4, 8, 16, 32, 64, 128])
    assert (np.diff(factors) > 0).all()


def _moe_row(cv, config, capacity=0.0, dispatcher="alltoall"):
    model = replace(QWEN, capacity_factor=capacity)
    job = JobSpec(1024, 4096, moe_load_cv=cv, moe_dispatcher=dispatcher)
    device = nest.load_cluster("dgx-h100", devices=8).device
    costs = NodeCostModel(model, job, KernelModel.for_job(device, job))
    return {k: np.asarray(v)[0] for k, v in costs.table("moe", ConfigArrays.of([config])).items()}, costs


def test_the_busiest_rank_sets_a_layer_by_hand():
    """Its expert GEMMs and activation see the load factor's tokens, the all-to-alls carry
    its bytes, its routed activations the load factor's share."""
    config = LayerConfig(2, True, 1, "none", ep=32)
    cv = 0.8
    f = rank_load_factor(cv, 128, [32])[0]
    busy, costs = _moe_row(cv, config)
    even, _ = _moe_row(0.0, config)
    assert busy["ep_bytes"][0] == pytest.approx(f * even["ep_bytes"][0], rel=1e-12)
    k, m, e = costs.k, QWEN, 2
    routed = 4096 / 2 * 8  # the tokens this rank routes, top-8 copies
    local = 128 // 32

    def experts(tokens):
        gemm = k.gemm(tokens / local, 2 * m.moe_ffn_hidden, m.hidden) + k.gemm(tokens / local, m.hidden,
                                                                                 m.moe_ffn_hidden)
        return local * gemm + k.stream(3 * tokens * m.moe_ffn_hidden * e, kernels=local)

    assert busy["mlp_fwd_s"] - even["mlp_fwd_s"] == pytest.approx(experts(f * routed) - experts(routed), rel=1e-9)
    assert busy["act_bytes"] > even["act_bytes"]
    # only the routed copies grow: fc1 input and output, activation output, probability
    per_copy = e * m.hidden + e * 2 * m.moe_ffn_hidden + e * m.moe_ffn_hidden + 4
    assert busy["act_bytes"] - even["act_bytes"] == pytest.approx((f - 1) * routed * per_copy, abs=2)


def test_drop_and_pad_computes_the_capacity_whatever_the_routing():
    config = LayerConfig(2, True, 1, "none", ep=32)
    assert _moe_row(1.0, config, capacity=1.25)[0]["fwd_s"] == _moe_row(0.0, config, capacity=1.25)[0]["fwd_s"]
    # a dropping flex dispatcher computes at most the capacity
    capped, _ = _moe_row(3.0, config, capacity=1.1, dispatcher="flex")
    even, _ = _moe_row(0.0, config, capacity=1.1, dispatcher="flex")
    assert capped["ep_bytes"][0] == pytest.approx(1.1 * even["ep_bytes"][0])


def test_imbalance_only_lengthens_the_step():
    cluster = nest.load_cluster("dgx-h100", devices=256)
    config = dict(tp=2, pp=8, vp=4, dp=16, ep=32, micro_batch=1, sp=True, zero=1, recompute="layernorm,moe_act")
    steps = [nest.evaluate(QWEN, cluster, JobSpec(2048, 4096, moe_load_cv=cv, moe_dispatcher="flex"),
                           **config).step_time_s for cv in (0.0, 0.2, 0.4)]
    assert steps == sorted(steps) and steps[0] < steps[-1]
    # the busiest rank's activations: a layout that fits balanced routing may not fit a skewed one
    with pytest.raises(nest.InfeasibleError, match="does not fit in memory"):
        nest.evaluate(QWEN, cluster, JobSpec(2048, 4096, moe_load_cv=1.0, moe_dispatcher="flex"), **config)
    dense = nest.evaluate("llama3-8b", nest.load_cluster("dgx-h100", devices=8), JobSpec(64, 4096, moe_load_cv=2.0),
                          tp=8, pp=1, dp=1, micro_batch=1)
    assert dense.step_time_s == nest.evaluate("llama3-8b", nest.load_cluster("dgx-h100", devices=8),
                                              JobSpec(64, 4096), tp=8, pp=1, dp=1, micro_batch=1).step_time_s


def test_bad_load_cv_is_one_line():
    with pytest.raises(SpecError, match=r"^job.moe_load_cv = -0.1: must be a finite number >= 0$"):
        JobSpec(64, 4096, moe_load_cv=-0.1)
    with pytest.raises(SpecError, match=r"^job.moe_load_cv = 20: must be at most 16.0$"):
        JobSpec(64, 4096, moe_load_cv=20)
    assert JobSpec(64, 4096, moe_load_cv=0.5).document()["moe_load_cv"] == 0.5
    assert "moe_load_cv" not in JobSpec(64, 4096).document()
