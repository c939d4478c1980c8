"""Activation offload (issue 21): Transformer Engine's layer offload as Megatron-Core runs
it (nest.cost.activation_offload): which bytes move, the handler's windows and stalls by
hand, the memory it frees, the search's exactness over offloaded-layer counts, and the
frameworks' rules and flags."""

import json
from dataclasses import replace

import numpy as np
import pytest

import nest
from launch_readers import assert_round_trip
from nest.cost.activation_offload import apply, stall_s, stall_s_v2, window_map
from nest.cost.activations import Activations
from nest.cost.scenario import Scenario
from nest.dp.reference import brute_force
from nest.errors import SpecError
from nest.frameworks import framework
from nest.frameworks.plan_reader import PlanReader
from nest.parallel import ConfigArrays, LayerConfig, SpaceLimits
from nest.presets.clusters import CLUSTERS
from nest.search.problems import problem as dp_problem
from nest.search.space import enumerate_partials, expand
from nest.specs import JobSpec, ModelSpec
from nest.units import GiB

# llama-like: RMSNorm, rope, SwiGLU, GQA, no dropout, no biases
TINY = ModelSpec(name="tiny-llama", num_layers=4, hidden=1024, num_heads=16, num_kv_heads=4, ffn_hidden=4096,
                 vocab_size=32000, seq_len=1024, norm="rmsnorm", mlp="swiglu", position_embedding="rope",
                 bias=False, dropout=False, tied_embeddings=False)
JOB = JobSpec(global_batch=16, seq_len=1024)


def _cluster(memory_gib: float, devices: int = 8):
    cluster = CLUSTERS["dgx-h100"].sized(devices)
    return replace(cluster, device=replace(cluster.device, memory_bytes=memory_gib * GiB))


def _one(model: ModelSpec, job: JobSpec = JOB, tp: int = 1, sp: bool = False):
    return Activations(model, job), ConfigArrays.of([LayerConfig(tp, sp, 1, "none")])


# -- the handler's schedule --------------------------------------------------------------

def test_the_window_map_is_transformer_engines():
    """TE 2.7 AsyncDoubleBufferGroupOffloadHandler.layer_window_map, worked by hand."""
    assert window_map(4, 3).tolist() == [1, 2, 3]
    assert window_map(32, 12).tolist() == [2, 5, 8, 11, 14, 17, 20, 23, 25, 27, 29, 31]
    assert window_map(32, 8).tolist() == [3, 7, 11, 15, 19, 23, 27, 31]
    for layers in range(2, 40):
        for groups in range(1, layers):
            w = window_map(layers, groups)
            assert w[-1] == layers - 1 and (np.diff(w) > 0).all() and (w >= np.arange(groups) + 1).all()


def test_stalls_by_hand():
    """Four layers of 1 s forward and 2 s backward, three offloaded, copies of 2.5 s:
    every forward window is one layer (1.5 s short each); the backward windows are one
    layer of 2 s (0.5 s short each: the first reload, issued before layer 3, is waited for
    before layer 2; the last before layer 0)."""
    ones = np.ones((1, 4))
    forward, backward = stall_s(3, ones, 2 * ones, 2.5 * ones, 2.5 * ones)
    assert forward.tolist() == [4.5]
    assert backward.tolist() == [1.5]
    nothing = stall_s(3, ones, 2 * ones, 0 * ones, 0 * ones)
    assert nothing[0].tolist() == [0.0] and nothing[1].tolist() == [0.0]
    # copies shorter than their windows hide completely
    hidden = stall_s(1, ones, 2 * ones, 2.9 * ones, 2.9 * ones)
    assert hidden[0].tolist() == [0.0] and hidden[1].tolist() == [0.0]


def test_v2_stalls_by_hand():
    """TE v2 (DefaultOffloadSynchronizer), four layers of 1 s forward and 2 s backward, two
    offloaded, copies of 2.5 s on one stream: layer 0's copy (1 s to 3.5 s) must end before
    layer 2 (L - N + 0) starts at 2 s, a 1.5 s wait; layer 1's (3.5 s to 6 s) before layer 3,
    which starts at 4.5 s: 1.5 s more. Backward: layer 1's reload starts with layer 2's
    backward (L - 1 - N + 1), at 2 s, ends at 4.5 s, when layer 1 is due at 4 s: 0.5 s;
    layer 0's starts with layer 1's backward, at 4.5 s, ends at 7 s, due at 6.5 s: 0.5 s."""
    ones = np.ones((1, 4))
    forward, backward = stall_s_v2(2, ones, 2 * ones, 2.5 * ones, 2.5 * ones)
    assert forward.tolist() == [3.0] and backward.tolist() == [1.0]
    # copies within their windows (L - N - 1 layers) hide completely; N = L - 1 never hides
    hidden = stall_s_v2(2, ones, 2 * ones, 0.9 * ones, 0.9 * ones)
    assert hidden[0].tolist() == [0.0] and hidden[1].tolist() == [0.0]
    last = stall_s_v2(3, ones, 2 * ones, 0.5 * ones, 0.5 * ones)
    assert last[0][0] > 0 and last[1][0] > 0


def test_v2_holds_no_group_in_flight():
    """activation_offload.apply under each handler: both free the first N layers' freed
    bytes and fill the host with their copies; only v1 holds a group in flight."""
    layers, kinds = 4, 2  # kind 0: the embedding, kind 1: the blocks
    kind_index = np.array([0, 1, 1, 1, 1])
    layer_kinds = np.array([False, True])
    for handler, in_flight_expected in (("v1", 70), ("v2", 0)):
        columns = {"act_bytes": np.array([[10, 100]]), "offload_freed_bytes": np.array([[0, 70]]),
                   "offload_copied_bytes": np.array([[0, 80]]), "fwd_s": np.ones((1, kinds)),
                   "bwd_s": np.ones((1, kinds)), "offload_fwd_s": np.zeros((1, kinds)),
                   "offload_bwd_s": np.zeros((1, kinds))}
        in_flight, host = apply(columns, np.array([2]), kind_index, layer_kinds, 1e12, handler=handler)
        assert in_flight.tolist() == [in_flight_expected] and host.tolist() == [160]
        assert columns["act_bytes"].tolist() == [[10, 100 - 2 * 70 // layers]]
    with pytest.raises(SpecError, match="must be v1 or v2"):
        apply(columns, np.array([2]), kind_index, layer_kinds, 1e12, handler="v3")


# -- what moves ----------------------------------------------------------------------------

def test_a_llama_block_offloads_everything_it_keeps():
    """Every tensor a llama block keeps is marked by TE 2.7 or Megatron's SwiGLU; the
    copies carry the attention output twice (the attention and the output projection
    each push it; under FP8 with delayed scaling the projection pushes its FP8 copy,
    which it alone keeps)."""
    acts, c = _one(TINY)
    kept, _ = acts.kept(c, moe=False)
    freed, copied = acts.offloaded(c, moe=False)
    assert freed[0] == kept[0]
    n, a = JOB.seq_len, acts.attn
    assert copied[0] - freed[0] == n * 2 * a.o_width  # the output's second copy
    fp8 = Activations(TINY, replace(JOB, dtype="fp8"))
    kept, _ = fp8.kept(c, moe=False)
    assert all(x[0] == kept[0] for x in fp8.offloaded(c, moe=False))


@pytest.mark.parametrize("change, kept_back", [
    ({"dropout": True}, lambda n, h, f, a, m: 2 * n * h),  # two dropout masks of a byte each
    ({"mlp": "gelu", "ffn_hidden": 4096}, lambda n, h, f, a, m: 2 * n * f),  # the GELU's input
    # the norms' contiguous copies of q and k, and their statistics (TE's RMSNorm op)
    ({"qk_norm": True}, lambda n, h, f, a, m: n * (2 * (a.q_width + a.k_width) + 4 * (m.num_heads + m.num_kv_heads))),
])
def test_what_nothing_marks_stays_on_the_device(change, kept_back):
    model = replace(TINY, **change)
    acts, c = _one(model)
    kept, _ = acts.kept(c, moe=False)
    freed, _ = acts.offloaded(c, moe=False)
    assert kept[0] - freed[0] == kept_back(JOB.seq_len, model.hidden, model.ffn_hidden, acts.attn, model)


def test_latent_attention_is_refused():
    with pytest.raises(SpecError, match="latent attention"):
        nest.evaluate("deepseek-v3", nest.load_cluster("dgx-h100", devices=8), tp=1, pp=1, dp=8, micro_batch=1,
                      activation_offload=2)


# -- memory and time of a configuration -----------------------------------------------------

def test_the_table_frees_the_first_layers_and_holds_one_in_flight():
    cluster = _cluster(80)
    scn = Scenario(TINY, cluster, JOB)
    base = scn.config_table([LayerConfig(1, False, 1, "none")])
    for groups in (1, 2, 3):
        table = scn.config_table([LayerConfig(1, False, 1, "none", act_offload=groups)])
        block = scn.kind_list.index("block")
        freed = int(table.cols["offload_freed_bytes"][0, block])
        copied = int(table.cols["offload_copied_bytes"][0, block])
        total = lambda t: int(t.cols["act_bytes"][0][scn.kind_index].sum())  # noqa: E731
        assert total(base) - total(table) == groups * freed  # 4 alike blocks: the shares are exact
        assert table.transient[0] == max(base.transient[0], freed)
        assert table.offload_host[0] == groups * copied
        stall = table.cols["offload_fwd_s"][0] + table.cols["offload_bwd_s"][0]
        assert stall[block] * TINY.num_layers >= 0 and stall[scn.kind_index[0]] == 0


@pytest.mark.parametrize("groups", [1, 2, 3])
def test_offload_never_shortens_a_step_and_never_adds_memory(groups):
    cluster = nest.load_cluster("dgx-h100", devices=8)
    job = JobSpec(global_batch=32, seq_len=16384)
    fixed = dict(tp=1, pp=1, dp=8, micro_batch=1, zero=3)
    model = nest.load_model("llama3-8b")
    base = nest.evaluate(model, replace(cluster, device=replace(cluster.device, memory_bytes=200 * GiB)), job,
                         **fixed)
    moved = nest.evaluate(model, replace(cluster, device=replace(cluster.device, memory_bytes=200 * GiB)), job,
                          activation_offload=8 * groups, **fixed)
    assert moved.step_time_s >= base.step_time_s
    assert moved.memory_max_bytes < base.memory_max_bytes
    assert moved.breakdown_s["activation_offload"] == pytest.approx(moved.step_time_s - base.step_time_s, rel=1e-9)
    assert moved.memory[0].host > 0 and base.memory[0].host == 0


def test_llama3_8b_at_16k_fits_eight_h100s_without_recomputation_only_by_offload():
    """TP1 PP1 ZeRO-3 on one DGX H100 at 16k tokens: without recomputation it needs ~99
    GiB; offloading 12 of 32 layers fits it, and beats recomputing the MLP."""
    cluster = nest.load_cluster("dgx-h100", devices=8)
    job = JobSpec(global_batch=32, seq_len=16384)
    fixed = dict(tp=1, pp=1, dp=8, micro_batch=1, zero=3)
    with pytest.raises(nest.InfeasibleError, match=r"or activation_offload=12 \(73\.36 GiB\)"):
        nest.evaluate("llama3-8b", cluster, job, **fixed)  # the smallest eighth of the layers that fits
    with pytest.raises(nest.InfeasibleError, match=r"recompute=mlp with activation_offload=0 \(52\.88 GiB\); .*"
                                                   r"or activation_offload=12"):
        nest.evaluate("llama3-8b", cluster, job, activation_offload=4, **fixed)  # too few: suggestions drop it
    with pytest.raises(SpecError, match="activation_offload: runs without recomputation"):
        Scenario(nest.load_model("llama3-8b"), cluster, job).config_table(
            [LayerConfig(1, False, 1, "selective", act_offload=4)])
    moved = nest.evaluate("llama3-8b", cluster, job, activation_offload=12, **fixed)
    recomputed = nest.evaluate("llama3-8b", cluster, job, recompute="mlp", **fixed)
    assert moved.step_time_s < recomputed.step_time_s
    assert moved.to_dict()["parallelism"]["activation_offload_layers"] == 12


# -- the search ----------------------------------------------------------------------------

@pytest.mark.parametrize("memory_gib", [0.9, 1.2, 80])
def test_search_is_exact_over_offloaded_layer_counts(memory_gib):
    """Brute force over every candidate (every offloaded-layer count, every split) against
    the search's closed-form optimum; offload only pairs with one stage and no
    recomputation."""
    cluster = _cluster(memory_gib)
    job = replace(JOB, reserved_memory_bytes=0.45 * GiB)
    limits = SpaceLimits(tp=(1, 2), zero=(0, 1, 3), act_offload=(0, 1, 2, 3), offload=(0.0,))
    scn = Scenario(TINY, cluster, job)
    partials = enumerate_partials(TINY, cluster, job, scn.num_nodes, limits)
    cands = expand(partials, np.arange(len(partials)), limits)
    assert {c.cfg.act_offload for c in cands} == {0, 1, 2, 3}
    assert all(c.pp == 1 and c.cfg.recompute == "none" for c in cands if c.cfg.act_offload)
    problem = dp_problem(scn, cands)
    best = min((found[0] for n in range(len(cands)) if (found := brute_force(problem, n)) is not None),
               default=None)
    plan = nest.plan(TINY, cluster, job, limits=limits, ranking="closed-form")
    assert round(plan.closed_form_step_time_s * 1e12) == best
    if memory_gib == 80:  # no memory pressure: offload changes nothing
        assert plan.parallelism["activation_offload_layers"] == 0
        assert plan.step_time_s == nest.plan(TINY, cluster, job, limits=replace(limits, act_offload=None),
                                             ranking="closed-form").step_time_s


def test_bad_counts_name_the_field():
    cluster = nest.load_cluster("dgx-h100", devices=8)
    with pytest.raises(SpecError, match=r"activation_offload = 32: must be a whole number of layers from 0 to 31"):
        nest.evaluate("llama3-8b", cluster, tp=1, pp=1, dp=8, micro_batch=1, activation_offload=32)
    with pytest.raises(SpecError, match="one pipeline stage without recomputation"):
        nest.evaluate("llama3-8b", cluster, tp=1, pp=2, dp=4, micro_batch=1, activation_offload=4)
    with pytest.raises(SpecError, match="one pipeline stage without recomputation"):
        nest.evaluate("llama3-8b", cluster, tp=1, pp=1, dp=8, micro_batch=1, recompute="full", activation_offload=4)
    with pytest.raises(SpecError, match="activation_offload = True"):
        nest.plan("llama3-8b", cluster, limits=SpaceLimits(act_offload=(True,)))
    hostless = replace(cluster, device=replace(cluster.device, host=None))
    with pytest.raises(SpecError, match="no host memory"):
        nest.evaluate("llama3-8b", hostless, tp=1, pp=1, dp=8, micro_batch=1, activation_offload=4)


# -- frameworks ----------------------------------------------------------------------------

def _offloading_plan(name: str = "megatron") -> nest.Plan:
    cluster = nest.load_cluster("dgx-h100", devices=8)
    job = JobSpec(global_batch=32, seq_len=16384, framework=name)
    return nest.evaluate("llama3-8b", cluster, job, tp=1, pp=1, dp=8, micro_batch=1, zero=1 if name != "megatron"
                         else 3, activation_offload=12)


def test_megatron_launches_the_layer_offload():
    plan = _offloading_plan().to_dict()
    fw = framework("megatron")
    args = fw.emit(plan).split("\n")
    assert "--cpu-offloading-num-layers 12" in args
    assert any("NVTE_CPU_OFFLOAD_V1=1" in note for note in fw.notes(plan))
    assert PlanReader(plan).candidate(False).cfg.act_offload == 12
    assert assert_round_trip(plan, "megatron")["activation_offload_layers"] == 12
    assert "--cpu-offloading-num-layers" not in fw.emit(nest.evaluate(
        "llama3-8b", nest.load_cluster("dgx-h100", devices=8), JobSpec(global_batch=32, seq_len=4096),
        tp=1, pp=1, dp=8, micro_batch=1, zero=3).to_dict())


BRIDGE_GB200_FP8CS = ["evaluate", "--model", "llama3-70b", "--cluster", "gb200-nvl72", "--devices", "64",
                      "--global-batch", "256", "--seq-len", "8192", "--tp", "1", "--pp", "1", "--dp", "64",
                      "--mbs", "2", "--zero", "3", "--dtype", "fp8", "--activation-offload", "40"]
"""Megatron-Bridge 067f987 perf_recipes/llama/gb200/llama3.py
``llama3_70b_pretrain_64gpu_gb200_fp8cs_config``: FP8 current scaling (tensorwise), TE 2.18
(its uv.lock) whose default offload is v2, a configuration NVIDIA publishes as running."""


def test_the_published_gb200_fp8_current_scaling_recipe_fits_as_it_runs(capsys):
    from nest.cli import main

    assert main(BRIDGE_GB200_FP8CS + ["--fp8-recipe", "tensorwise", "--activation-offload-handler", "v2",
                                      "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    memory = doc["memory_per_device_bytes"]
    assert memory["max"] <= memory["capacity"]
    assert doc["job"]["fp8_recipe"] == "tensorwise" and doc["job"]["activation_offload_handler"] == "v2"
    # priced as the delayed recipe with TE 2.7's handler it does not fit: the switches matter
    assert main(BRIDGE_GB200_FP8CS) == 3
    capsys.readouterr()
    assert main(BRIDGE_GB200_FP8CS + ["--fp8-recipe", "tensorwise", "--activation-offload-handler", "v2",
                                      "--emit", "megatron"]) == 0
    launch = capsys.readouterr()
    assert "--fp8-recipe tensorwise" in launch.out and "do not set NVTE_CPU_OFFLOAD_V1" in launch.err


def test_job_fp8_recipe_and_offload_handler_are_checked():
    with pytest.raises(nest.SpecError, match=r"^job.fp8_recipe = 'tensorwise': is an FP8 recipe; needs dtype fp8, not bf16$"):
        nest.JobSpec(global_batch=8, seq_len=1024, fp8_recipe="tensorwise")
    with pytest.raises(nest.SpecError, match=r"^job.activation_offload_handler = 'v3': must be one of v1, v2$"):
        nest.JobSpec(global_batch=8, seq_len=1024, activation_offload_handler="v3")
