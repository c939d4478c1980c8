"""Communication overlap switches (Megatron-LM's --overlap-grad-reduce,
--overlap-param-gather, --tp-comm-overlap; the EP overlap has its own tests in
test_moe_dispatch.py): what each hides, that the DP, the scalar
twins and the simulator agree, and that the search stays exact and its bounds valid."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

import nest
from nest.cost.pricing import price_candidate, sync_exposed
from nest.cost.scenario import Scenario
from nest.network.placement import to_ps
from nest.parallel import RANK_ORDERS, Candidate, SpaceLimits
from nest.planner import simulate
from nest.presets.models import MODELS
from nest.schedule.tasks import BatchTasks
from nest.search.problems import problem as dp_problem
from nest.specs import OVERLAP_SWITCHES, JobSpec, ModelSpec
from planning_checks import assert_bounds_below_objective, assert_plans_are_optimal

ALL_ON = dict.fromkeys(OVERLAP_SWITCHES, True)
CONFIG = dict(tp=8, pp=4, dp=2, vp=1, micro_batch=1, sp=True, zero=1, recompute="selective")


def _scenario(**switches):
    job = JobSpec(global_batch=64, seq_len=2048, **switches)
    return Scenario(MODELS["gpt3-175b"], nest.load_cluster("dgx-a100", devices=64), job), job


def _candidate(scn):
    return Candidate.of_parallelism({**CONFIG, "rank_order": "tp-cp-ep-dp-pp"}, scn.model.head_needs_embedding)


def test_switches_default_off_and_reject_non_booleans():
    job = JobSpec(global_batch=8, seq_len=128)
    assert not any(getattr(job, name) for name in OVERLAP_SWITCHES)
    for name in OVERLAP_SWITCHES:
        with pytest.raises(nest.SpecError, match=f"job.{name} = 'yes': must be true or false"):
            JobSpec(global_batch=8, seq_len=128, **{name: "yes"})
    plan = nest.evaluate("gpt3-175b", nest.load_cluster("dgx-a100", devices=64), job, **CONFIG)
    assert set(plan.to_dict()["job"]) == {"global_batch", "seq_len", "dtype", "optimizer", "flash_attention",
                                          "framework"}


def test_exposed_sync_by_hand():
    """A node's gradient reduction hides behind its backward, the weight gather behind
    its forward; only the excess is exposed."""
    job = JobSpec(global_batch=8, seq_len=128, overlap_grad_reduce=True)
    assert sync_exposed(3.0, 2.0, 1.0, 1.0, job) == 2.0 + 2.0
    assert sync_exposed(0.5, 2.0, 1.0, 1.0, job) == 0.0 + 2.0
    job = replace(job, overlap_param_gather=True)
    assert sync_exposed(3.0, 2.0, 1.5, 1.0, job) == 2.0 + 0.5
    assert sync_exposed(3.0, 2.0, 1.5, 1.0, JobSpec(global_batch=8, seq_len=128)) == 5.0


def test_tp_overlap_exposes_one_chunk_of_each_method_and_the_sms_it_holds():
    """TE's userbuffers (v2.7 initialize_ub): half of the collectives ring-exchange in
    tp = 8 chunks, half pipeline in 4 chunks on 16 of the A100's 108 SMs; each half
    meets half the node's compute."""
    off, _ = _scenario()
    on, _ = _scenario(tp_comm_overlap=True)
    cand = _candidate(off)
    before, after = price_candidate(off, cand), price_candidate(on, cand)
    for k, kind in enumerate(off.kind_list):
        tp, compute = before.times.tp[0, k], before.col("compute_s")[0, k]
        ring = max(tp / 2 / 8, tp / 2 - compute / 2)
        pipeline = max(tp / 2 / 4, tp / 2 - compute / 2)
        assert after.times.tp[0, k] == pytest.approx(ring + pipeline + 16 / 108 * (tp / 2 - pipeline), rel=1e-12)
        assert after.times.tp[0, k] < tp or tp == 0
        assert after.times.compute[0, k] == before.times.compute[0, k]


def test_hidden_collectives_cost_the_sms_they_hold():
    """A gradient reduce-scatter hidden behind the backward costs the 16 SMs of NCCL's
    ring channels (of 108 on A100) over the time it hides; the excess is exposed."""
    job = JobSpec(global_batch=8, seq_len=128, overlap_grad_reduce=True, overlap_param_gather=True)
    share = 16 / 108
    assert sync_exposed(3.0, 2.0, 1.0, 1.0, job, share) == pytest.approx(2.0 + share * 1.0 + 1.0 + share * 1.0)
    assert sync_exposed(0.5, 0.0, 1.0, 1.0, job, share) == pytest.approx(share * 0.5)
    scn, _ = _scenario()
    cand = replace(_candidate(scn), zero=3)
    k = scn.kind_list.index("block")
    with_sms = price_candidate(scn, cand)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("nest.cost.pricing.NCCL_COMM_SMS", 10**6)  # more SMs than the device: free
        free = price_candidate(scn, cand)
    # the forward's window: its kernels and the TP collectives they wait for (half of the
    # layer's, none recomputed here)
    assert with_sms.col("recompute_tp_share")[0, k] == 0 and with_sms.times.tp[0, k] > 0
    fwd = with_sms.col("fwd_s")[0, k] + with_sms.times.tp[0, k] / 2
    # ZeRO-3's prefetched gather outlasts the forward (two replicas across nodes): the
    # excess is exposed either way, and holding 16 SMs it costs their share of the forward
    assert free.times.dp_forward[0, k] > 0
    assert with_sms.times.dp_forward[0, k] - free.times.dp_forward[0, k] == pytest.approx(share * fwd, rel=1e-9)
    assert with_sms.times.compute[0, k] == free.times.compute[0, k]


def test_dp_sync_weights_equal_the_schedules_end_tasks():
    """The DP's per-node sync weights equal the exposed reduction, gather and optimizer
    step the schedule's end-of-step tasks charge the node, for every switch combination
    and ZeRO stage."""
    for switches in ({}, {"overlap_grad_reduce": True}, {"overlap_param_gather": True}, ALL_ON):
        for zero in (0, 1, 2, 3):
            scn, _ = _scenario(**switches)
            cand = replace(_candidate(scn), zero=zero)
            params = dp_problem(scn, [cand]).params[0]
            tasks = BatchTasks.of_candidate(scn, cand)
            for i in range(scn.num_nodes):
                reduce, gather, optimizer = tasks.sync[0, scn.kind_index[i]]
                assert abs(int(params[i]) - int(to_ps(reduce + gather + optimizer))) <= 1, (switches, zero, i)


def test_each_switch_only_shortens_the_step():
    cluster = nest.load_cluster("dgx-a100", devices=64)
    base = JobSpec(global_batch=64, seq_len=2048)
    off = nest.evaluate("gpt3-175b", cluster, base, **CONFIG)
    for name in OVERLAP_SWITCHES:
        on = nest.evaluate("gpt3-175b", cluster, replace(base, **{name: True}), **CONFIG)
        if name == "overlap_moe_expert_parallel_comm":  # a dense model has no all-to-all to hide
            assert on.step_time_s == off.step_time_s and on.memory == off.memory
        else:
            assert on.step_time_s < off.step_time_s, name
    every = nest.evaluate("gpt3-175b", cluster, replace(base, **ALL_ON), **CONFIG)
    # two replicas across nodes: a node's gradient reduce-scatter takes longer than its
    # backward, so part of it stays exposed
    assert 0 < every.breakdown_s["dp_comm"] < off.breakdown_s["dp_comm"]
    assert every.breakdown_s["tp_comm"] < off.breakdown_s["tp_comm"] / 4
    assert nest.plan("gpt3-175b", cluster, replace(base, **ALL_ON)).step_time_s <= \
        nest.plan("gpt3-175b", cluster, base).step_time_s


@pytest.mark.parametrize("switches", [{"overlap_grad_reduce": True}, ALL_ON], ids=["grad", "all"])
def test_simulation_prices_the_same_overlap(switches):
    """Without a pipeline the simulation equals the closed form; with one, the padded
    pipeline of the closed form does, and the faithful simulation is not slower."""
    cluster = nest.load_cluster("dgx-h100", devices=64)
    job = JobSpec(global_batch=64, seq_len=2048, **switches)
    flat = nest.evaluate("llama2-7b", cluster, job, tp=2, pp=1, dp=32, micro_batch=1, sp=True, zero=1)
    assert simulate(flat).step_time_s == pytest.approx(flat.step_time_s, rel=1e-9)
    for zero in (0, 1, 2):
        piped = nest.evaluate("llama2-7b", cluster, job, tp=2, pp=4, dp=8, vp=2, micro_batch=1, sp=True,
                              zero=zero)
        assert simulate(piped, pad=True, sync="heaviest").step_time_s == pytest.approx(
            piped.closed_form_step_time_s, rel=1e-9)
        assert simulate(piped).step_time_s == pytest.approx(piped.step_time_s, rel=1e-9)
        assert simulate(piped).step_time_s <= piped.closed_form_step_time_s * (1 + 1e-9)


TINY = ModelSpec(name="tiny", num_layers=4, hidden=256, num_heads=8, ffn_hidden=1024, vocab_size=32000,
                 seq_len=1024)


@pytest.mark.parametrize("memory_gib", [pytest.param(80, marks=pytest.mark.slow), 1.0])
def test_plan_with_overlap_is_the_exhaustive_optimum(memory_gib):
    cluster = nest.load_cluster("dgx-a100", devices=16)
    cluster = replace(cluster, device=replace(cluster.device, memory_bytes=memory_gib * 2**30))
    job = JobSpec(global_batch=16, seq_len=1024, reserved_memory_bytes=0.25 * 2**30, **ALL_ON)
    everything = SpaceLimits(sp=(False, True), zero=(0, 1, 2, 3), rank_order=RANK_ORDERS, offload=(0.0,))
    assert_plans_are_optimal(TINY, cluster, job, everything)


@pytest.mark.parametrize("dispatcher", ["alltoall", "flex"])
def test_bounds_stay_below_the_objective_with_overlap(dispatcher):
    job = JobSpec(global_batch=256, seq_len=4096, moe_dispatcher=dispatcher, **ALL_ON)
    assert_bounds_below_objective(MODELS["qwen3-30b-a3b"], nest.load_cluster("dgx-h100", devices=128), job,
                                  seed=11, sample=40)


def test_cli_switches_reach_the_plan():
    args = [sys.executable, "-m", "nest", "evaluate", "--model", "llama2-7b", "--cluster", "dgx-h100",
            "--devices", "16", "--tp", "2", "--pp", "2", "--dp", "4", "--mbs", "1", "--sp", "--zero", "1",
            "--json"]
    plain = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)
    flags = ["--overlap-grad-reduce", "--overlap-param-gather", "--tp-comm-overlap", "--overlap-moe-expert-parallel-comm"]
    overlapped = json.loads(subprocess.run(args + flags, capture_output=True, text=True, check=True).stdout)
    assert {k: overlapped["job"][k] for k in OVERLAP_SWITCHES} == ALL_ON
    assert overlapped["step_time_s"] < plain["step_time_s"]
    assert np.isclose(sum(overlapped["breakdown_s"].values()), overlapped["step_time_s"], rtol=1e-9)


def test_zero3_collectives_hide_behind_the_whole_pass():
    """A ZeRO-3 weight gather hides behind its pass on the compute stream: the kernels and
    the TP / CP / EP communication they wait for (half of the TP and EP operations in each
    of forward and backward beyond the recomputation's share)."""
    from nest.cost.pricing import pass_windows

    columns = {"fwd_s": np.array([2.0]), "bwd_s": np.array([4.0]), "recompute_s": np.array([2.0]),
               "recompute_tp_share": np.array([0.2]), "recompute_ep_share": np.array([1 / 3])}
    forward, recompute, backward = pass_windows(columns.__getitem__, np.array([1.0]), np.array([0.5]),
                                                np.array([0.2]), np.array([0.6]))
    assert forward[0] == pytest.approx(2.0 + 0.4 + 0.2 + 0.2)
    assert backward[0] == pytest.approx(4.0 + 0.4 + 0.3 + 0.2)
    assert recompute[0] == pytest.approx(2.0 + 0.2 + 0.2)
    # a Megatron-FSDP MoE layer whose expert all-to-alls are exposed: its gather hides
    # behind them too, so less of it is exposed than behind the kernels alone, and the
    # forward never ends before its kernels and communication do
    scn = Scenario(MODELS["qwen3-30b-a3b"], nest.load_cluster("dgx-h100", devices=32),
                   JobSpec(global_batch=64, seq_len=4096, framework="megatron"))
    cand = Candidate.of_parallelism({"tp": 1, "pp": 1, "dp": 32, "ep": 8, "micro_batch": 1, "recompute": "none",
                                     "sp": False, "zero": 3, "rank_order": "tp-cp-ep-dp-pp"},
                                    scn.model.head_needs_embedding)
    k = scn.kind_list.index("moe")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("nest.cost.pricing.NCCL_COMM_SMS", 10**6)  # SMs free: exposed time only
        whole = price_candidate(scn, cand).times
        patch.setattr("nest.cost.pricing.pass_windows",
                      lambda col, *_: (col("fwd_s"), col("recompute_s"), col("bwd_s")))
        kernels_only = price_candidate(scn, cand).times
    ep_forward = whole.ep[0, k] / 2
    assert ep_forward > 0 and kernels_only.dp_forward[0, k] > 0
    assert whole.dp_forward[0, k] == pytest.approx(max(0.0, kernels_only.dp_forward[0, k] - ep_forward), abs=1e-12)
    assert whole.total[0, k] < kernels_only.total[0, k]
