"""The joint space (issue 3): ZeRO memory and volumes, EP/CP traffic, interleaving, rank
order, and exactness of the search with all dimensions."""

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

import nest
from nest.cost.compute import KernelModel
from nest.cost.nodes import NodeCostModel
from nest.cost.pricing import price_candidate
from nest.cost.scenario import Scenario
from nest.dp.reference import brute_force
from nest.parallel import Candidate, LayerConfig, SpaceLimits
from nest.presets.clusters import CLUSTERS
from nest.presets.models import MODELS
from nest.search.problems import problem as dp_problem
from nest.search.space import enumerate_partials, expand
from nest.specs import JobSpec, ModelSpec, OptimizerSpec, Tier
from planning_checks import node_row

ZERO_PAPER = OptimizerSpec(name="adam", grad_bytes=2, master_bytes=4, state_bytes=8)  # K = 12
H100 = CLUSTERS["dgx-h100"].sized(64)


@pytest.mark.parametrize("dp", [2, 8, 64])
def test_zero_memory_matches_the_zero_paper(dp):
    """Rajbhandari et al. 2020, Figure 1: (2+2+K), 2+2+K/Nd, 2+(2+K)/Nd, (2+2+K)/Nd."""
    scn = Scenario(MODELS["gpt-1.7b"], H100, JobSpec(global_batch=512, seq_len=2048, optimizer=ZERO_PAPER))
    cfg = LayerConfig(1, False, 1, "none")
    k, nd = 12, dp
    expected = [2 + 2 + k, 2 + 2 + k / nd, 2 + (2 + k) / nd, (2 + 2 + k) / nd]
    for zero, value in enumerate(expected):
        got = price_candidate(scn, Candidate(cfg, pp=1, dp=dp, zero=zero)).sync["dense_bytes"][0]
        assert got == pytest.approx(value, rel=1e-15)


def _costs(model, cfg, seq_len=4096, flash=True):
    job = JobSpec(global_batch=64, seq_len=seq_len, flash_attention=flash)
    kernels = KernelModel(H100.device, 2, H100.device.peak_flops("bf16"))
    return NodeCostModel(model, job, kernels)


def test_expert_all_to_all_volume():
    """Dispatch + combine, forward and backward: 4 all-to-alls of tokens x top-k x hidden."""
    mixtral = MODELS["mixtral-8x7b"]
    b, s, tp, cp = 2, 4096, 2, 2
    cost = node_row(_costs(mixtral, None), "moe", LayerConfig(tp, True, b, "none", cp=cp, ep=4))
    tokens = b * s // cp // tp  # each rank routes its sequence-parallel share
    assert (cost.ep_count.tolist(), cost.ep_bytes.tolist()) == ([4], [tokens * 2 * mixtral.hidden * 2])
    full = node_row(_costs(mixtral, None), "moe", LayerConfig(tp, True, b, "full", cp=cp, ep=4))
    assert full.ep_count[0] == 6  # the recomputed forward repeats dispatch and combine
    assert node_row(_costs(mixtral, None), "moe", LayerConfig(tp, True, b, "none", cp=cp, ep=1)).ep_count.tolist() == [0]


def test_expert_parameters_split_over_ep():
    mixtral = MODELS["mixtral-8x7b"]
    one = node_row(_costs(mixtral, None), "moe", LayerConfig(1, False, 1, "none", ep=1))
    eight = node_row(_costs(mixtral, None), "moe", LayerConfig(1, False, 1, "none", ep=8))
    assert one.params_expert == 8 * 3 * 4096 * 14336
    assert eight.params_expert == one.params_expert // 8
    assert eight.params_dense == one.params_dense


def test_context_parallel_ring_volume():
    """Ring attention: cp-1 steps of the local K and V chunk forward, K, V and grads back."""
    llama = MODELS["llama3-70b"]
    b, s, tp, cp = 1, 32768, 8, 4
    cost = node_row(_costs(llama, None, seq_len=s), "block", LayerConfig(tp, True, b, "none", cp=cp))
    chunk = b * (s // cp) * 2 * llama.kv_hidden * 2 / tp  # K and V, bf16, this TP rank's heads
    assert cost.cp_fwd_bytes == chunk and cost.cp_bwd_bytes == 2 * chunk
    assert (cost.cp_steps_fwd, cost.cp_steps_bwd) == (cp - 1, cp - 1)
    plain = node_row(_costs(llama, None, seq_len=s), "block", LayerConfig(tp, True, b, "none", cp=1))
    assert cost.act_bytes == pytest.approx(plain.act_bytes / cp, rel=1e-6)


@pytest.mark.parametrize("cluster_name,exposed", [("dgx-a100", False), ("h100-spineleaf", True)])
def test_zero3_gathers_weights_every_micro_batch(cluster_name, exposed):
    """ZeRO-3 all-gathers each node's weights forward and backward and reduce-scatters its
    gradients, per micro-batch; what the node's own compute cannot hide is exposed, and
    the hidden rest costs the 16 SMs NCCL's ring channels hold (of 108 on A100, 132 on
    H100)."""
    model = MODELS["llama2-7b"]
    cluster = CLUSTERS[cluster_name].sized(64)
    scn = Scenario(model, cluster, JobSpec(global_batch=64, seq_len=4096))
    cfg = LayerConfig(1, False, 1, "none")
    cand = Candidate(cfg, pp=1, dp=64, zero=3)
    priced = price_candidate(scn, cand)
    cost = SimpleNamespace(**{name: priced.col(name)[0, scn.kind_list.index("block")]
                              for name in ("params_dense", "fwd_s", "bwd_s")})
    group = priced.places[0].dense_dp
    gather = group.all_gather(2 * cost.params_dense)
    reduce = group.reduce_scatter(4 * cost.params_dense)
    share = 16 / {"dgx-a100": 108, "h100-spineleaf": 132}[cluster_name]
    expected = max(0.0, gather - cost.fwd_s) + max(0.0, gather + reduce - cost.bwd_s)
    hidden = min(gather, cost.fwd_s) + min(gather + reduce, cost.bwd_s)
    assert priced.times.dp[0, scn.kind_list.index("block")] == pytest.approx(expected + share * hidden, rel=1e-12)
    # NVLink + 25 GB/s per GPU hides a Llama-2-7B layer's traffic; a 12.5 GiB/s leaf does not
    assert (expected > 0) == exposed
    # the closed form of the volume: (n-1)/n of the weights per rank over the slowest link
    alpha, beta = group.reduce_scatter_terms()
    assert gather == pytest.approx(alpha + beta * 2 * cost.params_dense)


@pytest.mark.parametrize("framework, zero", [("megatron", 3), ("deepspeed", 3), ("megatron", 2), ("deepspeed", 2)])
def test_backward_collectives_hide_behind_the_recomputation_too(framework, zero):
    """Under full recomputation a node's backward pass is its recomputed forward and its
    backward: the next node's prefetched gather and this node's reduce-scatter run behind
    both (Megatron-FSDP gathers once for the two; ZeRO-2 has no gather). DeepSpeed's
    ZeRO-3 gathers again for the recomputation, which hides that gather, and the backward's
    collectives hide behind the backward alone."""
    model = MODELS["llama2-7b"]
    scn = Scenario(model, CLUSTERS["h100-spineleaf"].sized(64), JobSpec(64, 4096, framework=framework))
    priced = price_candidate(scn, Candidate(LayerConfig(1, False, 1, "full"), pp=1, dp=64, zero=zero))
    block = scn.kind_list.index("block")
    cost = SimpleNamespace(**{name: priced.col(name)[0, block]
                              for name in ("params_dense", "fwd_s", "bwd_s", "recompute_s")})
    group = priced.places[0].dense_dp
    gather = group.all_gather(2 * cost.params_dense) if zero == 3 else 0.0
    reduce = group.reduce_scatter(4 * cost.params_dense)
    share = 16 / 132
    hides = lambda comm, compute: max(0.0, comm - compute) + share * min(comm, compute)  # noqa: E731
    if framework == "deepspeed" and zero == 3:
        expected = (hides(gather, cost.fwd_s) + hides(gather, cost.recompute_s)
                    + hides(gather + reduce, cost.bwd_s))
    else:
        expected = hides(gather, cost.fwd_s) * (zero == 3) + hides(gather + reduce, cost.bwd_s + cost.recompute_s)
    assert priced.times.dp[0, block] == pytest.approx(expected, rel=1e-12)
    assert gather + reduce > cost.bwd_s  # the backward alone would not hide them


def test_interleaved_in_flight_memory_and_bubble():
    model = MODELS["gpt-18b"]
    cluster = CLUSTERS["dgx-a100"].sized(256)
    scn = Scenario(model, cluster, JobSpec(global_batch=1024, seq_len=2048))
    cfg = LayerConfig(8, True, 1, "none")
    plain = Candidate(cfg, pp=4, dp=8)
    inter = Candidate(cfg, pp=4, dp=8, vp=3)
    assert dp_problem(scn, [plain]).pos_inflight.tolist() == [4, 3, 2, 1]
    # Megatron's interleaved warm-up, (p - d - 1) * 2 + (v - 1) * p chunks, plus one
    assert dp_problem(scn, [inter]).pos_inflight.tolist()[:4] == [6 + 8 + 1, 4 + 8 + 1, 2 + 8 + 1, 0 + 8 + 1]
    job = dict(tp=8, pp=4, dp=8, micro_batch=1, sp=True, zero=1)
    # on the stage DP's splits (no polishing), interleaving cuts the bubble
    one = nest.evaluate(model, cluster, scn.job, ranking="closed-form", **job)
    three = nest.evaluate(model, cluster, scn.job, vp=3, ranking="closed-form", **job)
    assert three.breakdown_s["bubble"] < one.breakdown_s["bubble"] / 2
    # the DP's interleaved split leaves rank 0 light (a chunk of the embedding alone);
    # polished on the schedule it is 10% faster
    polished = nest.evaluate(model, cluster, scn.job, vp=3, **job)
    assert polished.step_time_s < 0.92 * three.step_time_s
    assert len(three.stages) == 12 and [s.devices for s in three.stages[:4]] == \
        [s.devices for s in three.stages[4:8]]


TINY_MOE = ModelSpec(name="tiny-moe", num_layers=4, hidden=512, num_heads=8, ffn_hidden=1024,
                     vocab_size=1000, seq_len=1024, mlp="swiglu", norm="rmsnorm", bias=False,
                     tied_embeddings=False, position_embedding="rope", dropout=False,
                     num_experts=4, experts_per_token=2, moe_layer_interval=2)
EVERYTHING = SpaceLimits(sp=(False, True), zero=(0, 1, 2, 3),
                         rank_order=("tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"))


@pytest.mark.parametrize("memory_gib", [80, 0.6])
def test_joint_plan_is_the_exhaustive_optimum(memory_gib):
    cluster = CLUSTERS["dgx-a100"].sized(8)
    cluster = replace(cluster, device=replace(cluster.device, memory_bytes=memory_gib * 2**30))
    job = JobSpec(global_batch=8, seq_len=1024, reserved_memory_bytes=0.25 * 2**30)
    scn = Scenario(TINY_MOE, cluster, job)
    partials = enumerate_partials(TINY_MOE, cluster, job, scn.num_nodes, EVERYTHING)
    cands = expand(partials, np.arange(len(partials)), EVERYTHING)
    assert {c.cfg.ep for c in cands} == {1, 2, 4} and {c.cfg.cp for c in cands} == {1, 2}
    assert {c.vp for c in cands} >= {1, 2} and {c.zero for c in cands} == {0, 1, 2, 3}
    problem = dp_problem(scn, cands)
    optimum = min(found[0] for n in range(len(cands)) if (found := brute_force(problem, n)))
    plan = nest.plan(TINY_MOE, cluster, job, ranking="closed-form")
    assert round(plan.closed_form_step_time_s * 1e12) == optimum
    assert plan.memory_max_bytes <= cluster.device.memory_bytes


def test_joint_expert_search_beats_every_fixed_ep():
    """No single hand-picked EP degree is right for both cluster sizes; the joint search
    finds each scenario's best."""
    model = MODELS["qwen3-30b-a3b"]
    job = JobSpec(global_batch=256, seq_len=4096)
    scenarios = [nest.load_cluster("dgx-a100", devices=n) for n in (16, 512)]
    joint = [nest.plan(model, c, job) for c in scenarios]
    assert len({p.parallelism["ep"] for p in joint}) == 2
    for ep in (1, 2, 4, 8, 16):
        fixed = []
        for cluster in scenarios:
            try:
                fixed.append(nest.plan(model, cluster, job, limits=SpaceLimits(ep=(ep,))).step_time_s)
            except nest.InfeasibleError:
                fixed.append(float("inf"))
        assert all(f >= j.step_time_s for f, j in zip(fixed, joint))
        assert any(f > j.step_time_s for f, j in zip(fixed, joint)), ep


def test_rank_order_changes_the_answer_on_a_slow_upper_tier():
    """With a thin uplink above 4 nodes, putting pipeline neighbours outermost (the default)
    or data-parallel peers outermost prices differently; the joint search takes the best."""
    device = nest.load_device("h100-sxm")
    cluster = nest.ClusterSpec("thin-top", device, (
        Tier("nvlink", 8, 450e9, 3e-6), Tier("leaf", 4, 50e9, 5e-6), Tier("uplink", 4, 3e9, 10e-6)))
    model, job = MODELS["llama2-13b"], JobSpec(global_batch=128, seq_len=4096)
    by_order = {o: nest.plan(model, cluster, job, limits=SpaceLimits(rank_order=(o,)))
                for o in ("tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp")}
    times = {o: p.step_time_s for o, p in by_order.items()}
    assert times["tp-cp-ep-dp-pp"] != times["tp-cp-ep-pp-dp"]
    joint = nest.plan(model, cluster, job)
    assert joint.step_time_s == min(times.values())
    assert joint.parallelism["rank_order"] == min(times, key=times.get)


def test_moe_parameter_counts():
    from nest.cost.model import active_parameter_count, parameter_count
    for name in ("mixtral-8x7b", "mixtral-8x22b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3"):
        m = MODELS[name]
        assert parameter_count(m) == pytest.approx(m.published_parameters, rel=0.02)
        assert active_parameter_count(m) == pytest.approx(m.published_active_parameters, rel=0.02)


def test_json_reports_the_joint_dimensions(capsys):
    from nest.cli import main
    assert main(["plan", "--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--devices", "64",
                 "--global-batch", "256", "--json"]) == 0
    import json
    doc = json.loads(capsys.readouterr().out)
    p = doc["parallelism"]
    assert {"ep", "cp", "vp", "zero", "rank_order", "expert_dp"} <= set(p)
    assert p["tp"] * p["cp"] * p["dp"] % p["ep"] == 0
    assert doc["model"]["active_parameters"] < doc["model"]["parameters"]
    assert doc["breakdown_s"]["ep_comm"] >= 0 and "cp_comm" in doc["breakdown_s"]


@pytest.mark.parametrize("global_batch, uneven, dps, batches", [
    (256, False, [1, 2, 4, 8, 16, 32, 64, 128, 256], [1, 2, 4, 8]),
    (96, False, [1, 3, 4, 12, 32, 96], [1, 2, 3, 4, 6]),
    (100, True, list(range(1, 101)), [1, 2, 4, 5, 10]),
    (64, False, [], [1, 2]),
])
def test_the_batch_pool_is_each_dps_admitted_micro_batches(global_batch, uneven, dps, batches):
    """The search space's pool of (micro-batch, mode) entries per data-parallel degree,
    built with numpy at once, equals the per-degree construction: the micro-batch sizes
    dividing the replica's share (every size for an uneven batch), ascending, each with
    its n_rc modes and its micro-batch count."""
    from nest.search.space import _batch_pool, divisors

    job = JobSpec(global_batch=global_batch, seq_len=1024, uneven_batch=uneven)
    n_rc, stride = 3, 3
    pool, micro, starts, counts = _batch_pool(job, np.array(dps, dtype=np.int64),
                                              np.array(batches, dtype=np.int64), n_rc, stride)
    at = 0
    for i, dp in enumerate(dps):
        sizes = batches if uneven else [b for b in divisors(global_batch // dp) if b in batches]
        want = [batches.index(b) * stride + r for b in sizes for r in range(n_rc)]
        assert starts[i] == at and counts[i] == len(want)
        assert pool[at:at + len(want)].tolist() == want
        assert micro[at:at + len(want)].tolist() == [-(-global_batch // (dp * b)) for b in sizes for _ in range(n_rc)]
        at += len(want)
    assert len(pool) == len(micro) == at and len(starts) == len(counts) == len(dps)


@pytest.mark.parametrize("every_device", [False, True])
@pytest.mark.parametrize("uneven", [False, True])
def test_the_space_prefilter_keeps_every_valid_loop_combination_in_order(every_device, uneven):
    """``PartialSpace._combos`` drops the (cp, pp, dp) combinations that cannot fit before
    the expert and virtual-stage axes multiply them; what ``_valid`` then keeps must be
    exactly the full grid's valid combinations, in the same row-major order."""
    from nest.search.space import PartialSpace

    model = MODELS["mixtral-8x7b"]
    cluster = nest.load_cluster("dgx-h100", devices=48)
    job = JobSpec(global_batch=96, seq_len=4096, uneven_batch=uneven)
    space = PartialSpace(model, cluster, job, model.num_layers + 2, SpaceLimits(), every_device)
    checked = 0
    for _, tp, _ in space.pairs:
        es, vs = space._expert_axis(tp), np.arange(len(space.vps))
        cs = np.arange(len(space.cps))
        c, p, d, e, v = np.indices((len(cs), len(space.pps), len(space.dps), len(es), len(vs))).reshape(5, -1)
        e = es[e]
        ok, _ = space._valid(tp, c, p, d, e, v)
        full = np.stack([c, p, d, e, v])[:, ok]
        pre = np.stack(space._combos(tp, cs, es, vs))
        keep, _ = space._valid(tp, *pre)
        assert np.array_equal(pre[:, keep], full)
        checked += full.shape[1]
    assert checked > 0
