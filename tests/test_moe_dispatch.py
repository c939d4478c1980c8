"""Expert-parallel token dispatch: the flex dispatcher's per-node deduplication
(job.moe_dispatcher = "flex") and Megatron's combined 1F1B overlap of the dispatch and
combine all-to-alls (job.overlap_moe_expert_parallel_comm): each term by hand, that every
switch only shortens the step, that the schedule with one more warm-up forward agrees
with the simulator and the memory replay, that the search stays exact, and that the
launch carries the flags exactly where nest priced them."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import replace

import numpy as np
import pytest

import nest
from nest.cost.pricing import ep_pair_exposed, price_candidate
from nest.cost.scenario import Scenario
from nest.dp import engine
from nest.frameworks import framework
from nest.frameworks.plan_reader import PlanReader
from nest.network.tiers import GroupShape, TokenDispatch
from nest.parallel import RECOMPUTE_MODES, Candidate, SpaceLimits, ep_overlap_allowed, warmup
from nest.presets.models import MODELS
from nest.schedule.memory import live_summary
from nest.schedule.order import device_ops
from nest.schedule.simulate import simulate_schedule
from nest.schedule.tasks import StageTasks
from nest.search.problems import _live
from nest.specs import JobSpec, ModelSpec
from nest.units import PS
from planning_checks import exhaustive_plans

QWEN = MODELS["qwen3-30b-a3b"]
EP16 = dict(tp=1, pp=1, dp=16, ep=16, micro_batch=1, sp=False, zero=1, recompute="none")


def test_node_ratio_is_the_expected_number_of_nodes_a_token_reaches():
    # 128 experts on 2 nodes, top-8: the token reaches the other node unless all 8
    # experts are local; exact count by binomial coefficients (an independent formula)
    for experts, k, nodes in ((128, 8, 2), (256, 8, 8), (128, 8, 4), (64, 2, 8), (16, 4, 4)):
        per_node = experts // nodes
        miss = math.comb(experts - per_node, k) / math.comb(experts, k)
        assert TokenDispatch(experts, k).node_ratio(nodes) == pytest.approx(nodes * (1 - miss) / k, rel=1e-12)
    assert TokenDispatch(128, 8).node_ratio(1) == 1.0
    # top-1: a token reaches one node, as the plain all-to-all's single copy does
    assert TokenDispatch(64, 1).node_ratio(8) == pytest.approx(1.0)


def test_flex_all_to_all_terms_by_hand():
    # 16 ranks: 8 per node on 2 nodes; NVLink 400 GB/s, network 50 GB/s
    plain = GroupShape((8, 2), (400e9, 50e9), (1e-6, 5e-6))
    flex = replace(plain, dispatch=TokenDispatch(128, 8))
    assert plain.all_to_all_terms() == (5e-6, max(7 / 16 / 400e9, 8 / 16 / 50e9))
    ratio = 2 * (1 - math.comb(64, 8) / math.comb(128, 8)) / 8
    # NVLink forwards every copy the landing GPU does not keep; the network carries a
    # token once per remote node it reaches
    assert flex.all_to_all_terms() == pytest.approx((5e-6, max(7 / 8 / 400e9, ratio * 8 / 16 / 50e9)), rel=1e-12)
    inside = GroupShape((8, 1), (400e9, 50e9), (1e-6, 5e-6))
    assert replace(inside, dispatch=TokenDispatch(128, 8)).all_to_all_terms() == inside.all_to_all_terms()


def test_pair_exposure_by_hand():
    # nothing to hide behind: the four all-to-alls run back to back
    assert ep_pair_exposed(1.0, 0.0, 0.0, 0.0, 0.0) == pytest.approx(4.0)
    # compute much longer than every all-to-all: only the first combine gradient, which
    # nothing precedes on the compute stream beyond the forward attention, can show
    assert ep_pair_exposed(0.1, 1.0, 1.0, 2.0, 2.0) == pytest.approx(0.0)
    # by hand: a2a 1, attn_f 0.5, mlp_f 1, mlp_b 2 (dgrad 1, wgrad 1), attn_b 1
    # comm: combine_b [0,1], dispatch_f [1,2], dispatch_b [2,3], combine_f [4,5]
    # comp: attn_f [0,.5], dgrad [1,2], wgrad [2,3], mlp_f [3,4], attn_b [4,5] -> end 5
    assert ep_pair_exposed(1.0, 0.5, 1.0, 2.0, 1.0) == pytest.approx(5.0 - 4.5)
    rng = np.random.default_rng(3)
    for _ in range(200):
        a2a, *parts = rng.uniform(0, 2, size=5)
        exposed = ep_pair_exposed(a2a, *parts)
        assert -1e-12 <= exposed <= 4 * a2a + 1e-12


def test_overlapped_ep_term_by_hand_on_one_layer():
    """One MoE layer of qwen3-30b on 16 H100s (EP16 over two nodes): the pair's exposure
    from its own columns, the unpaired share of the first rank (1 of 16 micro-batches
    runs alone each way) exposed in full, and the hidden part's SM contention
    (20 of 132 SMs)."""
    cluster, job = _qwen(overlap_moe_expert_parallel_comm=True)
    scn = Scenario(QWEN, cluster, job)
    cand = Candidate.of_parallelism({**EP16, "rank_order": "tp-cp-ep-dp-pp"}, QWEN.head_needs_embedding)
    priced = price_candidate(scn, cand)
    kind = scn.kind_list.index("moe")
    col = lambda name: float(priced.col(name)[0, kind])  # noqa: E731
    a2a = float(priced.terms.ep[0][0]) + float(priced.terms.ep[1][0]) * float(priced.col("ep_bytes")[0, kind, 0])
    full = 4 * a2a
    pair = ep_pair_exposed(a2a, col("fwd_s") - col("mlp_fwd_s"), col("mlp_fwd_s"), col("mlp_bwd_s"),
                           col("bwd_s") - col("mlp_bwd_s") + col("recompute_s"))
    alone = 1 / 16  # m = 256 / 16 = 16 micro-batches, one warm-up forward
    expected = pair + alone * (full - pair) + (1 - alone) * (full - pair) * 20 / 132
    assert priced.times.ep[0, kind] == pytest.approx(expected, rel=1e-12)
    assert 0 < pair < full


def test_overlap_applies_where_megatron_runs_it():
    none, full, moe = (RECOMPUTE_MODES.index(m) for m in ("none", "full", "moe"))
    assert ep_overlap_allowed(8, 1, 1, none) and ep_overlap_allowed(8, 4, 2, none)
    assert not ep_overlap_allowed(1, 1, 1, none)  # ep > 1
    assert not ep_overlap_allowed(8, 4, 1, none)  # pp > 1 needs virtual stages
    assert not ep_overlap_allowed(8, 1, 1, full) and not ep_overlap_allowed(8, 1, 1, moe)
    assert ep_overlap_allowed(8, 1, 1, RECOMPUTE_MODES.index("moe_act"))


def _qwen(**job):
    """16 H100s with room for every configuration (these tests are about time)."""
    cluster = nest.load_cluster("dgx-h100", devices=16)
    cluster = replace(cluster, device=replace(cluster.device, memory_bytes=1e15))
    base = nest.job_spec(QWEN, global_batch=256, seq_len=4096, dtype="fp8", overlap_grad_reduce=True)
    return cluster, replace(base, **job)


def test_each_switch_only_shortens_the_step():
    cluster, base = _qwen()
    off = nest.evaluate(QWEN, cluster, base, **EP16)
    flex = nest.evaluate(QWEN, cluster, replace(base, moe_dispatcher="flex"), **EP16)
    over = nest.evaluate(QWEN, cluster, replace(base, overlap_moe_expert_parallel_comm=True), **EP16)
    both = nest.evaluate(QWEN, cluster, replace(base, moe_dispatcher="flex", overlap_moe_expert_parallel_comm=True),
                         **EP16)
    assert both.breakdown_s["ep_comm"] < min(flex.breakdown_s["ep_comm"], over.breakdown_s["ep_comm"])
    assert flex.breakdown_s["ep_comm"] < off.breakdown_s["ep_comm"] / 2  # 2 nodes: ~1 copy instead of 4
    assert both.step_time_s < min(flex.step_time_s, over.step_time_s) < off.step_time_s
    # flex receives tokens per rank and permutes them once: no sort by local expert
    assert flex.breakdown_s["compute"] < off.breakdown_s["compute"] < 1.2 * flex.breakdown_s["compute"]
    # where Megatron does not run the combined 1F1B (pp > 1 without virtual stages),
    # the switch changes nothing
    piped = dict(EP16, pp=2, dp=8, ep=8)
    assert (nest.evaluate(QWEN, cluster, replace(base, overlap_moe_expert_parallel_comm=True), **piped).step_time_s
            == nest.evaluate(QWEN, cluster, base, **piped).step_time_s)


def test_overlap_holds_one_more_layer_not_one_more_micro_batch():
    """The combined 1F1B runs one more warm-up forward, then frees a backward's layers as
    its paired forward allocates them: the same live micro-batches, plus one layer."""
    cluster, base = _qwen()
    for config in (EP16, dict(EP16, pp=2, dp=8, ep=8, vp=2)):
        off = nest.evaluate(QWEN, cluster, base, **config)
        on = nest.evaluate(QWEN, cluster, replace(base, overlap_moe_expert_parallel_comm=True), **config)
        scn = Scenario(QWEN, cluster, replace(base, overlap_moe_expert_parallel_comm=True))
        cand = Candidate.of_parallelism({**config, "rank_order": "tp-cp-ep-dp-pp"}, QWEN.head_needs_embedding)
        layer = price_candidate(scn, cand).col("act_bytes")[0, scn.kind_list.index("moe")]
        for before, after in zip(off.memory, on.memory):
            # as many micro-batch-chunks (which chunks may differ: the pairs shift them)
            assert sum(after.live) == sum(before.live), config
            assert after.transient == before.transient + layer
        if config is EP16:  # one chunk: the same activations
            assert on.memory[0].activations == off.memory[0].activations


def test_unpaired_passes_expose_their_all_to_alls():
    """With one micro-batch per replica nothing pairs: the overlap hides nothing."""
    cluster, base = _qwen()
    job = replace(base, global_batch=16)
    off = nest.evaluate(QWEN, cluster, job, **EP16)
    on = nest.evaluate(QWEN, cluster, replace(job, overlap_moe_expert_parallel_comm=True), **EP16)
    assert on.breakdown_s["ep_comm"] == pytest.approx(off.breakdown_s["ep_comm"], rel=1e-12)


@pytest.mark.parametrize("pp,vp,m", [(1, 1, 1), (1, 1, 5), (2, 2, 4), (4, 2, 8), (4, 3, 4), (3, 2, 6), (2, 4, 2)])
def test_extra_warmup_schedule_matches_the_simulator_and_the_live_counts(pp, vp, m):
    rng = random.Random(pp * 100 + vp * 10 + m)
    stages = [StageTasks(forward_s=rng.uniform(0.5, 2), recompute_s=rng.uniform(0, 0.3),
                         backward_s=rng.uniform(1, 4), send_forward_s=rng.uniform(0, 0.2),
                         send_backward_s=rng.uniform(0, 0.2)) for _ in range(pp * vp)]
    cols = [np.array([getattr(s, name) for s in stages]) for name in
            ("forward_s", "recompute_s", "backward_s", "send_forward_s", "send_backward_s")]
    compiled = engine.pipeline_finish(pp, vp, m, *cols, extra_warmup=1)
    sim = simulate_schedule(stages, pp, m, extra_warmup=1)
    assert compiled.tolist() == pytest.approx([row[-1].end_s for row in sim.timelines], rel=1e-12)
    # a paired forward and backward count as one operation: as many live micro-batches
    # as the plain order's closed form
    summary = live_summary(pp, vp, m, 1)
    closed = _live(np.array([pp]), np.array([vp]), np.array([m]), np.zeros(pp, dtype=np.int64), np.arange(pp))
    assert summary.total.tolist() == closed.astype(int).tolist() == live_summary(pp, vp, m).total.tolist()
    for d in range(pp):
        forward, _, _ = device_ops(d, pp, vp, m, 1)
        leading = next((i for i, f in enumerate(forward) if not f), len(forward))
        assert leading == warmup(d, pp, vp, m, 1) + (1 if warmup(d, pp, vp, m, 1) < m * vp else 0)


def test_pipeline_finish_rejects_a_bad_extra_warmup():
    ones = [np.ones(1)] * 5
    with pytest.raises(ValueError, match="extra_warmup = 2: must be 0 or 1"):
        engine.pipeline_finish(1, 1, 2, *ones, extra_warmup=2)


TINY_MOE = ModelSpec(name="tiny-moe", num_layers=4, hidden=512, num_heads=8, ffn_hidden=1024,
                     vocab_size=1000, seq_len=1024, mlp="swiglu", norm="rmsnorm", bias=False,
                     tied_embeddings=False, position_embedding="rope", dropout=False,
                     num_experts=8, experts_per_token=2, moe_layer_interval=1, capacity_factor=0.0)


@pytest.mark.parametrize("memory_gib", [pytest.param(80, marks=pytest.mark.slow), 0.4])
def test_plan_with_ep_switches_is_the_exhaustive_optimum(memory_gib):
    """Micro-batch 1 and 8 micro-batches per replica or more: the overlapped all-to-alls
    pair, and the search over every degree, ZeRO stage, recompute mode and split returns
    the brute-force optimum of the closed form and the fastest exact schedule."""
    cluster = nest.load_cluster("dgx-h100", devices=16)
    cluster = replace(cluster, device=replace(cluster.device, memory_bytes=memory_gib * 2**30))
    job = JobSpec(global_batch=128, seq_len=1024, reserved_memory_bytes=0.25 * 2**30, moe_dispatcher="flex",
                  overlap_moe_expert_parallel_comm=True)
    limits = SpaceLimits(micro_batch=(1,), sp=(True,), zero=(0, 1))
    optimum, fastest = exhaustive_plans(TINY_MOE, cluster, job, limits)
    closed_form = nest.plan(TINY_MOE, cluster, job, limits=limits, ranking="closed-form")
    assert round(closed_form.closed_form_step_time_s * PS) == optimum
    plan = nest.plan(TINY_MOE, cluster, job, limits=limits)
    assert plan.step_time_s <= fastest * (1 + 1e-12)
    assert plan.memory_max_bytes <= cluster.device.memory_bytes
    assert plan.parallelism["ep"] > 1  # the overlapped all-to-alls are in the answer


def _launch(config, **job):
    cluster, base = _qwen(**job)
    plan = nest.evaluate(QWEN, cluster, replace(base, framework="megatron"), **config)
    return framework("megatron").launch(PlanReader(plan.to_dict()))


def test_megatron_launch_carries_the_switches_where_priced():
    both = dict(moe_dispatcher="flex", overlap_moe_expert_parallel_comm=True)
    args = _launch(EP16, **both).splitlines()
    assert "--overlap-moe-expert-parallel-comm" in args
    assert "--moe-token-dispatcher-type flex" in args and "--moe-enable-deepep" in args
    assert "--moe-pad-expert-input-to-capacity" not in args  # flex does not pad
    plain = _launch(EP16).splitlines()
    assert "--moe-token-dispatcher-type alltoall" in plain and "--overlap-moe-expert-parallel-comm" not in plain
    # pp 2 without virtual stages: Megatron would reject the flag; nest priced no overlap
    assert "--overlap-moe-expert-parallel-comm" not in _launch(dict(EP16, pp=2, dp=8, ep=8), **both).splitlines()
    assert "--overlap-moe-expert-parallel-comm" in _launch(dict(EP16, pp=2, dp=8, ep=8, vp=2), **both).splitlines()


@pytest.mark.parametrize("name,switch", list(itertools.product(("deepspeed", "torchtitan"),
                                                               (dict(moe_dispatcher="flex"),
                                                                dict(overlap_moe_expert_parallel_comm=True)))))
def test_other_frameworks_refuse_the_switches(name, switch):
    job = replace(JobSpec(global_batch=16, seq_len=1024), framework=name, **switch)
    if name == "torchtitan":
        job = replace(job, overlap_grad_reduce=True)
    key = next(iter(switch))
    with pytest.raises(nest.SpecError, match=f"framework = {name}: job.{key} = "):
        framework(name).job_errors(QWEN, job)


def test_job_document_round_trips_the_switches():
    job = JobSpec(global_batch=16, seq_len=1024, moe_dispatcher="flex", overlap_moe_expert_parallel_comm=True)
    doc = job.document()
    assert doc["moe_dispatcher"] == "flex" and doc["overlap_moe_expert_parallel_comm"] is True
    assert JobSpec.of_document(doc) == job
    assert "moe_dispatcher" not in JobSpec(global_batch=16, seq_len=1024).document()
    with pytest.raises(nest.SpecError, match="job.moe_dispatcher = 'deepep'"):
        JobSpec(global_batch=16, seq_len=1024, moe_dispatcher="deepep")


def test_flex_is_priced_as_plain_on_graphs_and_unchanged_for_dense_models():
    cluster = nest.load_cluster("dgx-h100", devices=16)
    job = JobSpec(global_batch=64, seq_len=2048)
    dense = dict(tp=8, pp=1, dp=2, micro_batch=1, sp=True, zero=1)
    assert (nest.evaluate("llama3-8b", cluster, replace(job, moe_dispatcher="flex"), **dense).step_time_s
            == nest.evaluate("llama3-8b", cluster, job, **dense).step_time_s)
    scn = Scenario(QWEN, cluster, replace(job, moe_dispatcher="flex"))
    cand = Candidate.of_parallelism({**EP16, "rank_order": "tp-cp-ep-dp-pp"}, QWEN.head_needs_embedding)
    assert price_candidate(scn, cand).places[0].ep.dispatch == TokenDispatch(128, 8)
    graph = nest.load_cluster("dgx-h100-graph", devices=16)
    graph = replace(graph, device=replace(graph.device, memory_bytes=1e15))
    assert (nest.evaluate(QWEN, graph, replace(job, moe_dispatcher="flex"), **EP16).breakdown_s["ep_comm"]
            == nest.evaluate(QWEN, graph, job, **EP16).breakdown_s["ep_comm"])

