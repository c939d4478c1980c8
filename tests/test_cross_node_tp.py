"""Tensor parallelism wider than one NVLink domain: priced hierarchically when asked for
(evaluate, or plan with an explicit ``SpaceLimits.tp``), never in the default search,
and never hidden by Transformer Engine's TP overlap (userbuffers need one NVLink domain)."""

from __future__ import annotations

import pytest

import nest
from nest.cost.scenario import Scenario
from nest.parallel import SpaceLimits
from nest.planner import simulate
from nest.specs import JobSpec

JOB = JobSpec(global_batch=1536, seq_len=2048)
CONFIG = dict(pp=8, micro_batch=1, sp=True, zero=1, recompute="selective")


@pytest.fixture(scope="module")
def cluster():
    return nest.load_cluster("dgx-h100", devices=256)


def test_a_tp_group_over_two_nodes_is_priced_on_both_tiers(cluster):
    """TP 16 on 8-GPU nodes: a ring of 8 on NVLink (450 GB/s, 3 us) then of 2 on the
    leaf tier (50 GB/s, 5 us) for 1/8 of the data."""
    scn = Scenario(nest.load_model("gpt3-175b"), cluster, JOB)
    shape = scn.placer.placement(16, 1, 2, 8, 1, "tp-cp-ep-dp-pp").tp
    assert shape.factors == (8, 2)
    alpha, beta = shape.reduce_scatter_terms()
    assert alpha == pytest.approx(7 * 3e-6 + 1 * 5e-6)
    assert beta == pytest.approx(7 / 8 / 450e9 + 1 / 2 / 8 / 50e9)


def test_evaluate_prices_tp_across_nodes(cluster):
    wide = nest.evaluate("gpt3-175b", cluster, JOB, tp=16, dp=2, **CONFIG)
    node = nest.evaluate("gpt3-175b", cluster, JOB, tp=8, dp=4, **CONFIG)
    assert wide.parallelism["tp"] == 16
    assert wide.breakdown_s["tp_comm"] > 2 * node.breakdown_s["tp_comm"]
    assert simulate(wide, "gpt3-175b", cluster, JOB).step_time_s == pytest.approx(wide.step_time_s, rel=1e-9)


def test_tp_overlap_hides_nothing_beyond_the_nvlink_domain(cluster):
    overlap = JobSpec(global_batch=1536, seq_len=2048, tp_comm_overlap=True)
    for tp, hidden in ((8, True), (16, False)):
        on = nest.evaluate("gpt3-175b", cluster, overlap, tp=tp, dp=32 // tp, **CONFIG)
        off = nest.evaluate("gpt3-175b", cluster, JOB, tp=tp, dp=32 // tp, **CONFIG)
        if hidden:
            assert on.breakdown_s["tp_comm"] < 0.5 * off.breakdown_s["tp_comm"]
        else:
            assert on.breakdown_s["tp_comm"] == off.breakdown_s["tp_comm"]
            assert on.step_time_s == off.step_time_s


def test_plan_goes_across_nodes_only_when_asked(cluster):
    default = nest.plan("gpt3-175b", cluster, JOB)
    assert default.parallelism["tp"] <= 8
    wide = nest.plan("gpt3-175b", cluster, JOB, limits=SpaceLimits(tp=(16,)))
    p = wide.parallelism
    assert p["tp"] == 16
    again = nest.evaluate("gpt3-175b", cluster, JOB, tp=16, pp=p["pp"], dp=p["dp"], cp=p["cp"], vp=p["vp"],
                          micro_batch=p["micro_batch"], sp=p["sp"], zero=p["zero"], recompute=p["recompute"],
                          rank_order=p["rank_order"], layers_per_stage=[len(s.layers) for s in wide.stages])
    assert again.step_time_s == pytest.approx(wide.step_time_s, rel=1e-12)
    assert default.step_time_s <= wide.step_time_s


def test_tp_wider_than_the_cluster_is_refused():
    small = nest.load_cluster("dgx-h100", devices=8)
    with pytest.raises(nest.SpecError, match=r"^tp = 16: the cluster has 8 devices$"):
        nest.evaluate("gpt3-175b", small, JOB, tp=16, dp=1, **{**CONFIG, "pp": 1, "zero": 0})


@pytest.mark.parametrize("preset", ["dgx-h100", "dgx-h100-graph"])
def test_tp_overlap_follows_the_placement_not_the_degree(preset):
    """TP 8 on two 8-GPU nodes: with TP innermost each group is one node and its
    collectives hide; with DP innermost (``dp-tp-cp-ep-pp``) each group spans both nodes
    and nothing hides, though the degree fits a node. Tiers and graphs agree."""
    cluster = nest.load_cluster(preset, devices=16)
    overlap = JobSpec(global_batch=64, seq_len=2048, tp_comm_overlap=True)
    plain = JobSpec(global_batch=64, seq_len=2048)
    config = dict(tp=8, pp=1, dp=2, micro_batch=1, sp=True, zero=1, recompute="full")
    for order, hidden in (("tp-cp-ep-dp-pp", True), ("dp-tp-cp-ep-pp", False)):
        on = nest.evaluate("gpt-7.5b", cluster, overlap, rank_order=order, **config).breakdown_s["tp_comm"]
        off = nest.evaluate("gpt-7.5b", cluster, plain, rank_order=order, **config).breakdown_s["tp_comm"]
        # hidden: one of 8 ring-exchange chunks and one of 4 pipeline chunks of each
        # half, plus the pipeline's 16 SMs over the rest (TE initialize_ub)
        assert (on < 0.3 * off) if hidden else (on == off)


def test_tp_overlap_needs_a_shared_host_on_graphs():
    """h100-fattree's devices have no host (each GPU on its own switch port, no NVLink):
    a TP group under one edge switch still has no NVLink domain for Transformer Engine
    to overlap in."""
    cluster = nest.load_cluster("h100-fattree", devices=64)  # 4 devices per edge switch
    config = dict(tp=4, pp=1, dp=16, micro_batch=1, sp=True, zero=1, recompute="full")
    on = nest.evaluate("gpt-7.5b", cluster, JobSpec(global_batch=64, seq_len=2048, tp_comm_overlap=True), **config)
    off = nest.evaluate("gpt-7.5b", cluster, JobSpec(global_batch=64, seq_len=2048), **config)
    assert on.breakdown_s["tp_comm"] == off.breakdown_s["tp_comm"] > 0
