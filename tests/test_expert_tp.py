"""Expert tensor parallelism (issue 18): Megatron-Core's expert grid ``etp x ep x
expert_dp`` (core_v0.14.0): one MoE layer's costs at ``etp`` 2 against 1 by hand, the
grid's groups against Megatron's own rank generator, their prices on the tiers they
cross, the search with the new dimension against brute force, the frameworks' rules and
Megatron's launch read back."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace

import numpy as np
import pytest

import nest
from nest.cli import main
from nest.cost.activations import Activations
from nest.cost.compute import KernelModel
from nest.cost.imbalance import rank_load_factor
from nest.cost.model import node_params
from nest.cost.nodes import NodeCostModel
from nest.cost.pricing import ep_pair_exposed, price_candidate
from nest.cost.scenario import Scenario
from nest.errors import RuleError, SpecError
from nest.frameworks.megatron import PP_LAST
from nest.network.layout import Layout, expert_families, expert_groups, expert_tp_groups, family_groups, \
    rank_placement
from nest.network.tiers import GroupShape, TokenDispatch, group_shape
from nest.parallel import DEFAULT_ORDER, Candidate, CandidateArrays, ConfigArrays, LayerConfig, SpaceLimits
from nest.presets.clusters import CLUSTERS
from nest.search.space import enumerate_partials, expand
from nest.specs import JobSpec, ModelSpec, Tier
from launch_readers import assert_round_trip
from planning_checks import assert_bounds_below_objective, assert_plans_are_optimal, exhaustive_plans, node_row

MOE = ModelSpec(name="etp-moe", num_layers=4, hidden=1024, num_heads=16, ffn_hidden=2048, vocab_size=32000,
                seq_len=1024, mlp="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False,
                position_embedding="rope", dropout=False, num_experts=8, experts_per_token=2,
                moe_ffn_hidden=1024)
H100 = CLUSTERS["dgx-h100"].sized(64)  # 8 GPUs per node on NVLink, nodes on a 50 GB/s leaf
JOB = JobSpec(global_batch=16, seq_len=1024)
H, E, K, F = MOE.hidden, MOE.num_experts, MOE.experts_per_token, MOE.moe_ffn_hidden


def _kernels() -> KernelModel:
    return KernelModel(H100.device, 2, H100.device.peak_flops("bf16"))


def _moe_row(cfg: LayerConfig, job: JobSpec = JOB):
    return node_row(NodeCostModel(MOE, job, _kernels()), "moe", cfg)


class RecordingKernels(KernelModel):
    """The device's own kernel model, noting the ``(m, n, k)`` of every GEMM it prices."""

    def __init__(self, *args):
        super().__init__(*args)
        self.gemms: list[tuple[float, float, float]] = []

    def gemm(self, m, n, k):
        self.gemms.append(tuple(float(np.ravel(x)[0]) for x in (m, n, k)))
        return super().gemm(m, n, k)


# -- one MoE layer by hand ----------------------------------------------------------------

def test_expert_gemms_see_etp_times_the_tokens_at_one_etp_th_of_the_width():
    """tp 2 with SP, micro-batch 2 of 1024 tokens: a rank routes 1024 tokens to 2 experts,
    2048 copies; ep 2 leaves 4 experts a rank. Expert TP 2 gathers its pair's copies: each
    local expert sees 2 x 2048 / 4 = 1024 tokens, fc1 [1024, h] x [h, 2 f / 2] and fc2
    [1024, f / 2] x [f / 2, h] (TEGroupedMLP: column- then row-parallel)."""
    shapes = {}
    for etp in (1, 2):
        k = RecordingKernels(H100.device, 2, H100.device.peak_flops("bf16"))
        NodeCostModel(MOE, JOB, k).table("moe", ConfigArrays.of([LayerConfig(2, True, 2, "none", ep=2, etp=etp)]))
        shapes[etp] = k.gemms
    tokens = 2 * 1024 // 2 * K // (E // 2)
    assert {(tokens, 2 * F, H), (tokens, H, F)} <= set(shapes[1])
    assert {(2 * tokens, 2 * F / 2, H), (2 * tokens, H, F / 2)} <= set(shapes[2])
    # the attention's GEMMs do not change, and each expert GEMM keeps its FLOPs
    assert shapes[1][:2] == shapes[2][:2] and len(shapes[1]) == len(shapes[2]) == 4
    assert [m * n * k for m, n, k in shapes[1][2:]] == [m * n * k for m, n, k in shapes[2][2:]]


@pytest.mark.parametrize("etp", [2, 4])
def test_gather_and_scatter_of_the_received_tokens(etp):
    """The alltoall dispatcher's all-gather after the dispatch and reduce-scatter before the
    combine (token_dispatcher.py dispatch_postprocess / combine_preprocess), forward and
    backward: 4 collectives of etp x received x h x 2 bytes; a recomputation that repeats
    the MoE layer (full, moe) repeats the forward's two; the all-to-alls stay the EP
    group's own, of the tokens a rank routes."""
    routed = 2 * 1024 // 2 * K  # micro-batch 2, tp 2 with SP
    row = _moe_row(LayerConfig(2, True, 2, "none", ep=2, etp=etp))
    assert (row.ep_count.tolist(), row.ep_bytes.tolist()) == ([4], [routed * H * 2])
    assert (row.etp_count.tolist(), row.etp_bytes.tolist()) == ([4], [etp * routed * H * 2])
    for mode, count in (("full", 6), ("moe", 6), ("moe_act", 4), ("selective", 4)):
        again = _moe_row(LayerConfig(2, True, 2, mode, ep=2, etp=etp))
        assert again.etp_count.tolist() == [count] and again.ep_count.tolist() == [count]
        assert again.recompute_ep_share == (count - 4) / count
    assert _moe_row(LayerConfig(2, True, 2, "none", ep=2)).etp_count.tolist() == [0]
    # the busiest EP rank's load (nest.cost.imbalance acts on the ep ranks) sets both
    skewed = _moe_row(LayerConfig(2, True, 2, "none", ep=2, etp=etp), replace(JOB, moe_load_cv=0.3))
    load = float(rank_load_factor(0.3, E, np.array([2]))[0])
    assert load > 1 and skewed.etp_bytes[0] == pytest.approx(etp * routed * load * H * 2, rel=1e-15)
    assert skewed.ep_bytes[0] == pytest.approx(routed * load * H * 2, rel=1e-15)


def test_flex_dispatches_over_the_expert_tp_by_ep_group():
    """MoEFlexTokenDispatcher: every routed copy goes to each expert-TP rank of its expert
    (router_topk = tp_size x topk over the ETP x EP group): etp times the all-to-all
    bytes, no gather or scatter; with ep 1 the all-to-all still runs over the ETP group."""
    flex = replace(JOB, moe_dispatcher="flex")
    routed = 2 * 1024 // 2 * K
    for ep in (1, 2):
        row = _moe_row(LayerConfig(2, True, 2, "none", ep=ep, etp=2), flex)
        assert (row.ep_count.tolist(), row.ep_bytes.tolist()) == ([4], [2 * routed * H * 2])
        assert row.etp_count.tolist() == [0]
    assert _moe_row(LayerConfig(2, True, 2, "none", ep=1), flex).ep_count.tolist() == [0]


def test_saved_activations_and_parameters_by_hand():
    """Per routed copy a rank keeps its group's gathered fc1 input (q h) and probability (4)
    etp times, the fc1 output (e G f / etp) and activation (q f / etp) etp times: only the
    first two grow. Expert parameters per rank: (E / ep) x 3 h f / etp."""
    acts = Activations(MOE, JOB)
    n = 2 * 1024  # micro-batch 2: tokens of the rank's sequence
    routed = n // 2 * K  # with SP over tp 2
    router = n * 2 * 4 * E // 2  # fp32 logits and scores, outside the TP region
    for etp in (1, 2, 4):
        parts = acts.block_parts(ConfigArrays.of([LayerConfig(2, True, 2, "none", ep=2, etp=etp)]), moe=True)
        per_copy = etp * (2 * H + 4) + 2 * 2 * F  # fc1 input and probability; fc1 output, 16 bits
        assert parts["moe"][0] == router + routed * per_copy
        assert parts["act"][0] == routed * 2 * F  # the activation output, fc2's input
        dense, expert = node_params(MOE, "moe", 2, False, 2, etp)
        assert expert == E // 2 * 3 * H * F // etp
        assert dense == node_params(MOE, "moe", 2, False, 2, 1)[0]


def test_collectives_are_priced_on_the_expert_tp_group():
    """tp 4, dp 16, ep 4, etp 2 on 8-GPU nodes: the expert-TP groups are pairs of NVLink
    peers, a reduce-scatter of n bytes costs latency + n / 2 / bandwidth; the MoE layer's
    EP cause is its four all-to-alls plus the four gathers and scatters on those terms.
    Expert gradients sync over tp cp dp / (ep etp) = 8 ranks."""
    scn = Scenario(MOE, H100, JOB)
    cand = Candidate(LayerConfig(4, True, 1, "none", ep=4, etp=2), pp=1, dp=16, zero=1)
    priced = price_candidate(scn, cand)
    nvlink = scn.cluster.tiers[0]
    assert (priced.terms.expert_tp[0][0], priced.terms.expert_tp[1][0]) == (nvlink.latency,
                                                                            0.5 / nvlink.effective_bandwidth)
    moe = scn.kind_list.index("moe")
    col = lambda name: priced.col(name)[0, moe]  # noqa: E731
    a2a = 4 * (priced.terms.ep[0][0] + priced.terms.ep[1][0] * col("ep_bytes")[0])
    gathers = 4 * (nvlink.latency + 0.5 / nvlink.effective_bandwidth * col("etp_bytes")[0])
    assert priced.times.ep[0, moe] == pytest.approx(a2a + gathers, rel=1e-12)
    assert priced.terms.expert_shards[0] == cand.expert_dp == 8
    _, edp = expert_groups(Layout.of(cand), 4, 2)
    assert (priced.terms.expert_dp[0][0], priced.terms.expert_dp[1][0]) == \
        group_shape(scn.cluster, edp).reduce_scatter_terms()


def test_an_expert_tp_group_across_nodes_is_priced_on_both_tiers():
    """etp 16 on 8-GPU nodes (tp 1, dp 32, ep 2): each expert-TP group spans two nodes,
    a hierarchical reduce-scatter (7 NVLink steps, then 1 across); the EP pairs are 16
    ranks apart, always across the leaf."""
    assert H100.group_sizes()[1] >= 32
    scn = Scenario(MOE, H100, JOB)
    priced = price_candidate(scn, Candidate(LayerConfig(1, False, 1, "none", ep=2, etp=16), pp=1, dp=32, zero=1))
    nvlink, leaf = scn.cluster.tiers
    alpha = 7 * nvlink.latency + leaf.latency
    beta = 7 / 8 / nvlink.effective_bandwidth + 1 / 2 / 8 / leaf.effective_bandwidth
    assert (priced.terms.expert_tp[0][0], priced.terms.expert_tp[1][0]) == pytest.approx((alpha, beta), rel=1e-15)
    assert (priced.terms.ep[0][0], priced.terms.ep[1][0]) == (leaf.latency, 0.5 / leaf.effective_bandwidth)


def test_the_gathers_stay_exposed_under_the_ep_overlap():
    """Megatron's combined 1F1B runs dispatch_postprocess and combine_preprocess inside
    experts_compute, on the compute stream: the gathers add in full, and lengthen the
    expert compute the all-to-alls of the other micro-batch hide behind."""
    job = replace(JOB, global_batch=256, overlap_moe_expert_parallel_comm=True)  # 16 micro-batches
    scn = Scenario(MOE, H100, job)
    priced = price_candidate(scn, Candidate(LayerConfig(4, True, 1, "none", ep=4, etp=2), pp=1, dp=16, zero=1))
    moe = scn.kind_list.index("moe")
    col = lambda name: priced.col(name)[0, moe]  # noqa: E731
    gathers = 4 * (priced.terms.expert_tp[0][0] + priced.terms.expert_tp[1][0] * col("etp_bytes")[0])
    one = priced.terms.ep[0][0] + priced.terms.ep[1][0] * col("ep_bytes")[0]
    mlp_f, mlp_b = col("mlp_fwd_s"), col("mlp_bwd_s")
    pair = ep_pair_exposed(one, col("fwd_s") - mlp_f, mlp_f + gathers / 2, mlp_b + gathers / 2,
                           col("bwd_s") - mlp_b + col("recompute_s"))
    # pp 1: one extra warm-up forward of 16 passes runs alone; the hidden rest of the
    # others costs the dispatch kernels' SMs
    alone, share = 1 / 16, 20 / scn.kernels.curve.sms
    exposed = pair + alone * (4 * one - pair) + (1 - alone) * (4 * one - pair) * share
    assert 0 <= pair < 4 * one and priced.times.ep[0, moe] == pytest.approx(gathers + exposed, rel=1e-12)


# -- the grid against Megatron's rank generator ---------------------------------------------

def megatron_ranks(sizes: dict, order: str, token: str) -> set[tuple[int, ...]]:
    """``RankGenerator(**sizes, order=order).get_ranks(token)`` of Megatron-Core core_v0.14.0
    ``parallel_state.py`` (``generate_masked_orthogonal_rank_groups``): a rank is the
    mixed-radix number of its coordinates in ``order`` (first innermost); a group holds the
    ranks that differ only in ``token``'s dimensions."""
    names = order.split("-")
    shape = [sizes[n] for n in names]
    groups: dict[tuple, list[int]] = {}
    for rank in range(math.prod(shape)):
        coords, rest = [], rank
        for size in shape:
            coords.append(rest % size)
            rest //= size
        key = tuple(c for n, c in zip(names, coords) if n not in token.split("-"))
        groups.setdefault(key, []).append(rank)
    return {tuple(g) for g in groups.values()}


GRIDS = [  # tp, cp, dp, pp, ep, etp, order
    (4, 1, 4, 2, 2, 2, DEFAULT_ORDER), (2, 2, 2, 2, 4, 2, DEFAULT_ORDER), (1, 1, 8, 2, 2, 4, DEFAULT_ORDER),
    (8, 1, 2, 1, 1, 8, DEFAULT_ORDER), (4, 2, 2, 2, 4, 2, PP_LAST), (2, 1, 4, 3, 1, 2, PP_LAST),
]


@pytest.mark.parametrize("tp,cp,dp,pp,ep,etp,order", GRIDS)
def test_expert_grid_is_megatrons(tp, cp, dp, pp, ep, etp, order):
    """The expert RankGenerator takes the same order with tp = etp, cp = 1 and dp = the
    expert-DP size (initialize_model_parallel): its expert-TP ('tp'), EP ('ep'),
    expert-DP ('dp') and ETP x EP ('tp-ep', the flex dispatcher's) groups are nest's, as
    explicit groups, as mixed-radix families, and as the plan's rank coordinates."""
    layout = Layout({"tp": tp, "cp": cp, "dp": dp, "pp": pp}, order)
    edp = tp * cp * dp // (ep * etp)
    sizes = {"tp": etp, "cp": 1, "ep": ep, "dp": edp, "pp": pp}
    rows = lambda groups: {tuple(int(x) for x in row) for row in groups}  # noqa: E731
    ep_groups, edp_groups = expert_groups(layout, ep, etp)
    ours = {"tp": rows(expert_tp_groups(layout, ep, etp)), "ep": rows(ep_groups), "dp": rows(edp_groups),
            "tp-ep": rows(expert_tp_groups(layout, ep, etp, with_ep=True))}
    for token, groups in ours.items():
        assert groups == megatron_ranks(sizes, order, token), token
    families = expert_families(layout, ep, etp)
    for token, name in (("tp", "expert_tp"), ("ep", "ep"), ("dp", "expert_dp"), ("tp-ep", "expert_tp_ep")):
        assert rows(family_groups(*families[name])) == ours[token], name
    # the same pipeline groups as the dense generator's (the assert that follows the grid)
    dense = {"tp": tp, "cp": cp, "ep": 1, "dp": dp, "pp": pp}
    assert megatron_ranks(dense, order, "pp") == megatron_ranks(sizes, order, "pp")
    where = rank_placement(CLUSTERS["dgx-h100"].sized(layout.size), layout, ep, etp)
    for name, dims in (("tp", ("expert_dp", "ep")), ("ep", ("expert_dp", "expert_tp")),
                       ("dp", ("ep", "expert_tp"))):
        for group in ours[name]:
            for dim in dims:
                assert len({int(where.coords[dim][r]) for r in group}) == 1
    assert where.records()[-1]["expert_tp"] == etp - 1


def test_a_grid_that_does_not_split_the_stage_uses_its_explicit_groups():
    """tp 3 and dp 2 with pp 2 in tp-cp-ep-pp-dp order: a stage's ranks are {0, 1, 2, 6,
    7, 8}, its expert-TP pairs (0, 1), (2, 6), (7, 8); the other stage's (5, 9) crosses
    the 8-GPU node: the expert-TP price is that pair's, across the leaf."""
    layout = Layout({"tp": 3, "cp": 1, "dp": 2, "pp": 2}, PP_LAST)
    assert expert_families(layout, 3, 2) is None
    assert {tuple(map(int, g)) for g in expert_tp_groups(layout, 3, 2)} == \
        {(0, 1), (2, 6), (7, 8), (3, 4), (5, 9), (10, 11)}
    model = replace(MOE, hidden=1536, num_heads=12, num_kv_heads=12, ffn_hidden=3072, num_experts=6,
                    moe_ffn_hidden=1536)
    scn = Scenario(model, CLUSTERS["dgx-h100"].sized(16), JOB)
    priced = price_candidate(scn, Candidate(LayerConfig(3, True, 1, "none", ep=3, etp=2), pp=2, dp=2, zero=1,
                                            order=PP_LAST))
    leaf = scn.cluster.tiers[1]
    terms = (priced.terms.expert_tp[0][0], priced.terms.expert_tp[1][0])
    assert terms == (leaf.latency, 0.5 / leaf.effective_bandwidth)


def test_flex_node_ratio_counts_the_nodes_a_token_reaches():
    """Enumerate every choice of k experts: a node receives a token once when it holds a
    shard of any chosen expert. Expert-TP groups inside a node (8 ranks a node, etp 2) and
    across nodes (etp 16: an EP rank's shards on two nodes)."""
    for experts, k, ranks, per_node, shards in ((8, 2, 16, 8, 2), (8, 2, 32, 8, 16), (16, 4, 32, 8, 4),
                                                (8, 1, 16, 8, 2), (4, 2, 16, 4, 8)):
        ep, nodes = ranks // shards, ranks // per_node
        node_of = lambda rank: rank // per_node  # noqa: E731
        holders = {x: {node_of((x // (experts // ep)) * shards + s) for s in range(shards)} for x in range(experts)}
        reached = [len(set().union(*(holders[x] for x in chosen)))
                   for chosen in itertools.combinations(range(experts), k)]
        expected = min(1.0, np.mean(reached) / (shards * k))
        assert TokenDispatch(experts, k, shards).node_ratio(nodes, ranks) == pytest.approx(expected, rel=1e-12)
    # one shard: the expert-parallel formula unchanged
    assert TokenDispatch(128, 8).node_ratio(4, 32) == TokenDispatch(128, 8).node_ratio(4)
    shape = GroupShape((8, 2), (400e9, 50e9), (1e-6, 5e-6), TokenDispatch(8, 2, 2))
    assert shape.all_to_all_terms()[1] == pytest.approx(
        max(7 / 8 / 400e9, TokenDispatch(8, 2, 2).node_ratio(2, 16) * 8 / 16 / 50e9), rel=1e-15)


# -- floors and the search -------------------------------------------------------------------

def _fast_outer_cluster():
    device = nest.load_device("h100-sxm")
    return nest.ClusterSpec("fast-outer", device, (
        Tier("node", 8, 100e9, 3e-6), Tier("pod", 4, 20e9, 5e-6), Tier("core", 4, 60e9, 4e-6)))


@pytest.mark.parametrize("cluster_of", [_fast_outer_cluster, lambda: nest.load_cluster("dgx-h100-rail", devices=64)],
                         ids=["tiers", "graph"])
@pytest.mark.parametrize("dispatcher", ["alltoall", "flex"])
def test_floor_terms_stay_below_the_exact_terms(cluster_of, dispatcher):
    """Every group term of the floors (under the candidate's own order, and under any of
    the orders with unknown degrees 1) is at most the placement's, expert TP included."""
    cluster = cluster_of()
    scn = Scenario(MOE, cluster, replace(JOB, moe_dispatcher=dispatcher))
    cands = [Candidate(LayerConfig(tp, tp > 1, 1, "none", cp=cp, ep=ep, etp=etp), pp=pp, dp=dp, zero=1, order=order)
             for tp, cp, dp, pp, ep, etp in ((2, 1, 8, 2, 4, 2), (4, 1, 4, 2, 2, 4), (1, 2, 8, 2, 2, 8),
                                             (8, 1, 4, 2, 4, 8), (2, 2, 4, 2, 8, 2), (1, 1, 64, 1, 8, 8))
             for order in (DEFAULT_ORDER, PP_LAST)]
    configs, arrays = CandidateArrays.of(cands)
    degrees = arrays.degrees(ConfigArrays.of(configs))
    exact, _ = scn.placer.exact_terms(degrees)
    for floor in (scn.placer.floor_terms(degrees), scn.placer.floor_terms(degrees, any_of=(DEFAULT_ORDER, PP_LAST))):
        for name in ("tp", "cp_ring", "ep", "dense_dp", "expert_dp", "expert_tp"):
            for low, high in zip(getattr(floor, name), getattr(exact, name)):
                assert (low <= high * (1 + 1e-12)).all(), name
    assert (exact.expert_tp[1] > 0).all()


@pytest.mark.parametrize("dispatcher", ["alltoall", "flex"])
def test_bounds_hold_with_expert_tp(dispatcher):
    """lb1, lb2 and the table bound stay below the exact objective over a space with expert
    TP beyond tp (a flex dispatcher's all-to-alls over the ETP x EP groups too), on a
    network whose outer tier is faster than its middle one."""
    job = JobSpec(global_batch=32, seq_len=2048, moe_dispatcher=dispatcher)
    assert_bounds_below_objective(MOE, _fast_outer_cluster(), job, seed=3, sample=40,
                                  limits=SpaceLimits(etp=(1, 2, 4, 8)))


TINY = ModelSpec(name="tiny-wide-experts", num_layers=4, hidden=512, num_heads=8, ffn_hidden=1024, vocab_size=1000,
                 seq_len=1024, mlp="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False,
                 position_embedding="rope", dropout=False, num_experts=2, experts_per_token=1, moe_ffn_hidden=8192)
EVERYTHING = SpaceLimits(sp=(False, True), zero=(0, 1, 2, 3), rank_order=(DEFAULT_ORDER, PP_LAST))


def _tiny_cluster(memory_gib: float):
    cluster = CLUSTERS["dgx-a100"].sized(8)
    return replace(cluster, device=replace(cluster.device, memory_bytes=memory_gib * 2**30))


@pytest.mark.parametrize("memory_gib", [pytest.param(80, marks=pytest.mark.slow), 0.9])
def test_the_search_with_expert_tp_is_the_exhaustive_optimum(memory_gib):
    """Two wide experts on 8 GPUs without ZeRO-2/3: brute force over every candidate
    (expert TP 1 or tp; dominated options too) and every split against both rankings.
    With little memory the optimum splits the experts over TP ranks, faster than any plan
    without expert TP."""
    job = JobSpec(global_batch=16, seq_len=1024, reserved_memory_bytes=0.25 * 2**30)
    cluster = _tiny_cluster(memory_gib)
    scn = Scenario(TINY, cluster, job)
    limits = replace(EVERYTHING, zero=(0, 1))
    partials = enumerate_partials(TINY, cluster, job, scn.num_nodes, limits)
    cands = expand(partials, np.arange(len(partials)), limits)
    assert {c.cfg.etp for c in cands} == {1, 2, 4, 8} and all(c.cfg.etp in (1, c.cfg.tp) for c in cands)
    plan = assert_plans_are_optimal(TINY, cluster, job, limits, searched=SpaceLimits(zero=(0, 1)))
    if memory_gib < 1:
        assert plan.parallelism["expert_tp"] > 1
        assert nest.plan(TINY, cluster, job, limits=SpaceLimits(zero=(0, 1), etp=(1,))).step_time_s > \
            plan.step_time_s


@pytest.mark.slow  # brute force over etp 2 and 4 at every tp: ~15 s alone
def test_an_explicit_expert_tp_limit_searches_beyond_tp_exactly():
    """``SpaceLimits.etp`` names degrees the default leaves out (etp between 1 and tp, and
    above tp): the closed form's optimum over that space is the brute force's."""
    job = JobSpec(global_batch=8, seq_len=1024, reserved_memory_bytes=0.25 * 2**30)
    cluster = _tiny_cluster(0.9)
    limits = replace(EVERYTHING, etp=(2, 4), micro_batch=(1, 2))
    scn = Scenario(TINY, cluster, job)
    partials = enumerate_partials(TINY, cluster, job, scn.num_nodes, limits)
    cands = expand(partials, np.arange(len(partials)), limits)
    assert any(c.cfg.etp > c.cfg.tp for c in cands) and any(1 < c.cfg.etp < c.cfg.tp for c in cands)
    assert {c.cfg.etp for c in cands} == {2, 4}
    optimum, _ = exhaustive_plans(TINY, cluster, job, limits)
    plan = nest.plan(TINY, cluster, job, limits=limits, ranking="closed-form")
    assert round(plan.closed_form_step_time_s * 1e12) == optimum


def test_the_default_space_splits_experts_over_tp_and_dense_models_never():
    """By default a MoE configuration's experts are whole (etp 1) or split over its TP
    group (etp = tp, Megatron's own default); a dense model's never."""
    job = JobSpec(global_batch=64, seq_len=1024)
    scn = Scenario(MOE, H100, job)
    partials = enumerate_partials(MOE, H100, job, scn.num_nodes)
    arrays = partials.config_arrays
    pairs = set(zip(arrays.tp.tolist(), arrays.etp.tolist()))
    assert pairs == {(tp, etp) for tp in (1, 2, 4, 8) for etp in {1, tp}}
    gpt = nest.load_model("gpt-1.7b")
    nodes = Scenario(gpt, H100, job).num_nodes
    assert set(enumerate_partials(gpt, H100, job, nodes).config_arrays.etp.tolist()) == {1}
    with pytest.raises(SpecError, match=r"^etp = 2: gpt-1.7b has no experts$"):
        enumerate_partials(gpt, H100, job, nodes, SpaceLimits(etp=(2,)))
    with pytest.raises(SpecError, match=r"^etp = 3: must divide the experts' width moe_ffn_hidden \(1024\)$"):
        enumerate_partials(MOE, H100, job, scn.num_nodes, SpaceLimits(etp=(3,)))


# -- frameworks, launch, reports ---------------------------------------------------------------

def _evaluate(fw: str, memory_gib: float = 1000, **config):
    cluster = CLUSTERS["dgx-a100"].sized(16)
    cluster = replace(cluster, device=replace(cluster.device, memory_bytes=memory_gib * 2**30))
    job = nest.job_spec(MOE, global_batch=16, seq_len=1024, framework=fw)
    return nest.evaluate(MOE, cluster, job, **{"micro_batch": 1, **config})


def test_megatron_pp_last_mapping_needs_expert_tp_times_ep_to_be_tp_times_cp():
    """--use-tp-pp-dp-mapping with pp > 1: the expert DP size must be the DP size
    (initialize_model_parallel), i.e. etp x ep = tp x cp."""
    fine = _evaluate("megatron", tp=4, pp=2, dp=2, sp=True, ep=2, etp=2, rank_order=PP_LAST)
    assert fine.parallelism["expert_dp"] == fine.parallelism["dp"] == 2
    _evaluate("megatron", tp=4, pp=2, dp=2, sp=True, ep=4, etp=1, rank_order=PP_LAST)
    with pytest.raises(RuleError, match=r"^framework = megatron: tp-pp-dp-mapping: .*\(expert TP x EP = TP x CP\) "
                                        r"\(Megatron-LM core_v0.14.0 megatron/core/parallel_state.py .*"
                                        r"closest expressible: rank_order=tp-cp-ep-dp-pp$"):
        _evaluate("megatron", tp=4, pp=2, dp=2, sp=True, ep=4, etp=2, rank_order=PP_LAST)


@pytest.mark.parametrize("config", [dict(tp=4, pp=2, dp=2, ep=2, etp=2, rank_order=PP_LAST),
                                    dict(tp=2, pp=2, dp=4, ep=2, etp=2, vp=2),
                                    dict(tp=1, pp=1, dp=16, ep=4, etp=4, zero=3)])
def test_megatron_launch_reads_back_the_expert_grid(config):
    """--expert-tensor-parallel-size is the plan's; Megatron's reading (its grid asserts,
    the expert DP size world / (etp ep pp)) is the plan's."""
    plan = _evaluate("megatron", sp=config["tp"] > 1, **config).to_dict()
    got = assert_round_trip(plan, "megatron")
    assert got["args"]["--expert-tensor-parallel-size"] == str(config["etp"])
    assert got["expert_dp"] == plan["parallelism"]["expert_dp"] == 16 // (config["ep"] * config["etp"] * config["pp"])


def test_evaluate_refuses_impossible_grids_in_one_line(capsys):
    base = ["evaluate", "--cluster", "dgx-h100", "--devices", "64", "--pp", "1", "--mbs", "1"]
    mixtral = ["--model", "mixtral-8x7b", "--tp", "2", "--dp", "4", "--sp"]
    cases = [(mixtral + ["--ep", "4", "--etp", "4"], "etp = 4: ep * etp = 16 must divide tp * cp * dp (8)"),
             (mixtral + ["--ep", "2", "--etp", "3"], "etp = 3: must divide the experts' width moe_ffn_hidden (14336)"),
             (["--model", "gpt-1.7b", "--tp", "2", "--dp", "4", "--etp", "2"], "etp = 2: gpt-1.7b has no experts")]
    for args, message in cases:
        assert main(base + args) == 2
        err = capsys.readouterr().err.strip()
        assert err.splitlines() == [f"nest: error: {message}"]


def test_plan_document_and_report_carry_expert_tp(capsys):
    assert main(["evaluate", "--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--devices", "64", "--tp", "4",
                 "--pp", "1", "--dp", "16", "--ep", "4", "--etp", "2", "--mbs", "1", "--sp",
                 "--distributed-optimizer", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    p = doc["parallelism"]
    assert (p["expert_tp"], p["expert_dp"]) == (2, 4 * 16 // 8)
    cand = Candidate.of_parallelism(p, True)
    assert cand.cfg.etp == 2 and cand.expert_dp == 8
    old = {k: v for k, v in p.items() if k != "expert_tp"}  # a document written before expert TP
    assert Candidate.of_parallelism(old, True).cfg.etp == 1
    ranks = doc["placement"]["ranks"]
    assert [r["expert_tp"] for r in ranks[:4]] == [0, 1, 0, 1] and [r["ep"] for r in ranks[:4]] == [0, 0, 1, 1]
    assert main(["evaluate", "--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--devices", "64", "--tp", "4",
                 "--pp", "1", "--dp", "16", "--ep", "4", "--etp", "2", "--mbs", "1", "--sp",
                 "--distributed-optimizer"]) == 0
    assert "EP 4  ETP 2  VP 1" in capsys.readouterr().out
