"""Optimizer offload (issue 21): host memory and the host link as specs, offload as a search
dimension, its memory and time by hand, the search's exactness over the enlarged space,
the frameworks' flags, and one public measurement."""

from dataclasses import replace

import numpy as np
import pytest

import nest
from nest.cost import offload
from nest.cost.scenario import Scenario
from nest.dp.reference import brute_force
from nest.errors import SpecError
from nest.frameworks import framework
from nest.parallel import SpaceLimits
from nest.presets.clusters import CLUSTERS
from nest.presets.devices import DEVICES
from nest.presets.hosts import ADAM_RATE_SPR, HOSTS
from nest.search.problems import problem as dp_problem
from nest.search.space import enumerate_partials, expand
from nest.specs import JobSpec, ModelSpec, OptimizerSpec
from nest.units import GiB

TINY = ModelSpec(name="tiny", num_layers=4, hidden=1024, num_heads=16, ffn_hidden=4096, vocab_size=32000,
                 seq_len=1024)
FRACTIONS = SpaceLimits(offload=offload.OFFLOAD_FRACTIONS)


def _cluster(memory_gib: float, devices: int = 8, host_gib: float | None = None):
    cluster = CLUSTERS["dgx-h100"].sized(devices)
    device = cluster.device
    host = device.host if host_gib is None else replace(device.host, memory_bytes=host_gib * GiB * 8)
    return replace(cluster, device=replace(device, memory_bytes=memory_gib * GiB, host=host))


FOUR_NODES = CLUSTERS["dgx-h100"].sized(32)
SPLIT = [21, 20, 20, 21]


def _llama_half(fraction: float, threads: int = 1) -> nest.Plan:
    """llama3-70b, TP8 PP4 on four DGX H100, ``fraction`` of the optimizer state offloaded
    (one replica: ZeRO-0 without offload, with it the distributed optimizer of one rank)."""
    return nest.evaluate("llama3-70b", FOUR_NODES, JobSpec(global_batch=64, seq_len=8192, host_threads=threads),
                         tp=8, pp=4, dp=1, micro_batch=1, recompute="full", layers_per_stage=SPLIT,
                         optimizer_offload=fraction)


# -- specs and presets -------------------------------------------------------------------

def test_host_share_splits_the_server_among_its_devices():
    host = HOSTS["dgx-a100"]  # 1 TiB, 8 GPUs, two per PCIe Gen4 switch
    share = host.share(8)
    assert share.usable_bytes == 1024 * GiB / 8 - 16 * GiB
    assert share.copy_rate == pytest.approx(31.5e9 * 0.8 / 2)
    assert share.adam_rate == ADAM_RATE_SPR and share.threads == 1
    alone = host.share(1, threads=200)  # one GPU of the server: all of it, threads capped at its cores
    assert alone.usable_bytes == 1024 * GiB - 16 * GiB and alone.threads == 128
    assert alone.copy_rate == pytest.approx(31.5e9 * 0.8)


def test_every_nvidia_preset_has_a_host_and_the_others_none():
    for name, device in DEVICES.items():
        assert (device.host is not None) == (name not in ("mi300x", "tpuv4", "tpuv5p")), name
    assert DEVICES["gh200"].host.link_bandwidth == 450e9  # NVLink-C2C, each way


def test_a_gb200_nvl72_rack_is_one_nvlink_domain_on_grace_hosts():
    rack = nest.load_cluster("gb200-nvl72", devices=72)
    assert [(t.name, t.fanout) for t in rack.tiers] == [("nvlink", 72)]
    su = nest.load_cluster("gb200-nvl72")
    assert [(t.name, t.fanout) for t in su.tiers] == [("nvlink", 72), ("leaf", 8)]
    assert su.device.host is HOSTS["grace-gb200"] and su.tiers[0].bandwidth == 900e9
    with pytest.raises(SpecError, match="a multiple of 72 devices"):
        nest.load_cluster("gb200-nvl72", devices=100)
    # beyond eight GPUs tensor parallelism stays on NVLink: a TP8 x DP9 rack is one tier
    plan = nest.evaluate("llama3-70b", rack, JobSpec(global_batch=72, seq_len=8192), tp=8, pp=1, dp=9,
                         micro_batch=1, recompute="full", zero=3)
    assert plan.devices_used == 72 and plan.breakdown_s["tp_comm"] > 0


@pytest.mark.parametrize("field,value,message", [
    ("link_shared_by", 9, "host.link_shared_by = 9: must be at most 8"),
    ("memory_efficiency", 1.5, "host.memory_efficiency = 1.5: must be a fraction in (0, 1]"),
    ("adam_rate_per_thread", 0, "host.adam_rate_per_thread = 0: must be a positive finite number"),
    ("dispatch_slowdown", -1.0, "host.dispatch_slowdown = -1.0: must be a positive finite number"),
])
def test_bad_host_fields_name_the_field(field, value, message):
    with pytest.raises(SpecError) as info:
        replace(HOSTS["dgx-h100"], **{field: value})
    assert str(info.value) == message


def test_offload_needs_a_host_and_fp32_adam_state():
    with pytest.raises(SpecError, match="optimizer_offload = 0.5: device mi300x has no host memory spec"):
        nest.evaluate("llama3-8b", nest.load_cluster("mi300x-8", devices=8) if "mi300x-8" in CLUSTERS else
                      replace(CLUSTERS["dgx-h100"].sized(8), device=DEVICES["mi300x"]),
                      tp=8, pp=1, dp=1, micro_batch=1, optimizer_offload=0.5)
    job = JobSpec(global_batch=64, seq_len=8192, optimizer=OptimizerSpec.of("adam", "fp32", "bf16"))
    with pytest.raises(SpecError, match="job.optimizer_state_dtype = bf16: optimizer offload keeps fp32"):
        nest.evaluate("llama3-8b", nest.load_cluster("dgx-h100", devices=8), job, tp=8, pp=1, dp=1,
                      micro_batch=1, optimizer_offload=0.5)
    with pytest.raises(SpecError, match=r"optimizer_offload = 0.5: needs a sharded optimizer \(zero >= 1"):
        nest.evaluate("llama3-8b", nest.load_cluster("dgx-h100", devices=8), JobSpec(global_batch=64, seq_len=8192),
                      tp=4, pp=1, dp=2, micro_batch=1, zero=0, optimizer_offload=0.5)


# -- memory and time by hand -------------------------------------------------------------

def test_memory_and_time_of_half_the_state_on_the_host_by_hand():
    """Each offloaded parameter takes its master weight and moments (12 bytes) off the
    device and puts them, with a pinned fp32 gradient (16 bytes), on the host; its host
    Adam step takes 1 / (0.66e9 params/s) on torchrun's one thread, the slowest of the
    three pipelined streams (gradients down and fp32 masters up, 4 bytes each, over PCIe Gen5)."""
    kept, half = _llama_half(0.0), _llama_half(0.5)
    for k, h in zip(kept.memory, half.memory):
        params = k.optimizer / 12  # fp32 master + two fp32 moments, one replica: unsharded
        assert h.optimizer == pytest.approx(k.optimizer / 2, rel=1e-12)
        assert h.host == pytest.approx(0.5 * params * 16, rel=1e-12)
        assert h.weights == k.weights and h.gradients == k.gradients and h.activations == k.activations
        assert h.host_capacity == 2048 * GiB / 8 - 16 * GiB
    heaviest = max(k.optimizer for k in kept.memory) / 12
    copy = 63e9 * 0.8  # one Gen5 link per GPU
    host_s = max(4 / copy, 1 / ADAM_RATE_SPR)
    assert host_s == 1 / ADAM_RATE_SPR
    assert half.breakdown_s["offload"] == pytest.approx(0.5 * heaviest * host_s
                                                        - 0.5 * kept.breakdown_s["optimizer"], rel=1e-3)
    assert half.step_time_s > kept.step_time_s


@pytest.mark.parametrize("fraction", [0.25, 0.5, 0.75, 1.0])
def test_offload_never_shortens_a_fixed_configuration(fraction):
    assert _llama_half(fraction).step_time_s > _llama_half(0.0).step_time_s
    assert _llama_half(fraction).memory_max_bytes < _llama_half(0.0).memory_max_bytes


def test_the_host_step_is_the_slowest_of_its_three_streams():
    fast_cpu = offload.host_step_s(nest.specs.HostShare(1e12, 1e12, 10e9, 1e12, 64))
    assert fast_cpu == 4 / 10e9  # the copies bound it
    dram = offload.host_step_s(nest.specs.HostShare(1e12, 28e9, 1e12, 1e12, 64))
    assert dram == 1.0 / 1e9  # 28 bytes per parameter at 28 GB/s


# -- the search --------------------------------------------------------------------------

def test_offload_only_adds_feasible_plans():
    """At enough memory the search's plan is the same with and without offload; at too
    little, only offload fits."""
    job = JobSpec(global_batch=16, seq_len=1024)
    roomy = _cluster(80)
    assert (nest.plan(TINY, roomy, job, limits=FRACTIONS).step_time_s
            == nest.plan(TINY, roomy, job, limits=SpaceLimits(offload=(0.0,))).step_time_s)
    tight = _cluster(0.55)
    job = replace(job, reserved_memory_bytes=0.45 * GiB)
    with pytest.raises(nest.InfeasibleError, match="allow any optimizer offload"):
        nest.plan(TINY, tight, job, limits=SpaceLimits(offload=(0.0,)))
    assert nest.plan(TINY, tight, job).parallelism["optimizer_offload_fraction"] > 0


def test_host_memory_bounds_the_offload():
    """With a host too small for any offloaded state nothing offloads: the search reports
    that the job does not fit."""
    job = JobSpec(global_batch=16, seq_len=1024, reserved_memory_bytes=0.45 * GiB)
    tiny_host = _cluster(0.55, host_gib=16.001)  # 16 GiB per device reserved: ~1 MiB usable
    with pytest.raises(nest.InfeasibleError):
        nest.plan(TINY, tiny_host, job, limits=FRACTIONS)


@pytest.mark.parametrize("memory_gib", [0.6, 0.7, 0.8])
def test_search_is_exact_over_the_offload_fractions(memory_gib):
    """Brute force over every candidate (every offload fraction, every split) against the
    search's closed-form optimum, where device memory makes offload matter."""
    cluster = _cluster(memory_gib)
    job = JobSpec(global_batch=16, seq_len=1024, reserved_memory_bytes=0.45 * GiB)
    limits = replace(FRACTIONS, tp=(1, 2), zero=(0, 1, 3))
    scn = Scenario(TINY, cluster, job)
    partials = enumerate_partials(TINY, cluster, job, scn.num_nodes, limits)
    cands = expand(partials, np.arange(len(partials)), limits)
    assert {c.offload for c in cands} == set(offload.OFFLOAD_FRACTIONS)
    problem = dp_problem(scn, cands)
    best = min((found[0] for n in range(len(cands)) if (found := brute_force(problem, n)) is not None),
               default=None)
    plan = nest.plan(TINY, cluster, job, limits=limits, ranking="closed-form")
    assert round(plan.closed_form_step_time_s * 1e12) == best


# -- frameworks --------------------------------------------------------------------------

def test_megatron_launches_the_hybrid_device_optimizer():
    args = framework("megatron").emit(_llama_half(0.5).to_dict()).split("\n")
    for flag in ("--use-precision-aware-optimizer", "--optimizer-cpu-offload", "--optimizer-offload-fraction 0.5",
                 "--overlap-cpu-optimizer-d2h-h2d", "--use-distributed-optimizer"):
        assert flag in args
    assert args.count("--use-precision-aware-optimizer") == 1
    assert "--optimizer-cpu-offload" not in framework("megatron").emit(_llama_half(0.0).to_dict())


def test_deepspeed_offloads_the_whole_optimizer():
    import json
    job = nest.job_spec(nest.load_model("llama3-8b"), global_batch=64, seq_len=8192, framework="deepspeed")
    plan = nest.evaluate("llama3-8b", nest.load_cluster("dgx-h100", devices=8), job, tp=1, pp=1, dp=8,
                         micro_batch=1, zero=2, recompute="full", optimizer_offload=1.0)
    config = json.loads(framework("deepspeed").emit(plan.to_dict()))
    assert config["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": True}


def test_the_json_document_carries_the_fraction_and_host_memory():
    doc = _llama_half(0.5).to_dict()
    assert doc["parallelism"]["optimizer_offload_fraction"] == 0.5
    assert doc["breakdown_s"]["offload"] > 0
    assert all(r["host_bytes"] > 0 and r["host_capacity_bytes"] > r["host_bytes"] for r in doc["memory"]["ranks"])
    again = nest.evaluate("llama3-70b", FOUR_NODES, nest.specs.JobSpec.of_document(doc["job"]), tp=8, pp=4, dp=1,
                          micro_batch=1, recompute="full", layers_per_stage=SPLIT,
                          optimizer_offload=doc["parallelism"]["optimizer_offload_fraction"])
    assert again.step_time_s == doc["step_time_s"]


def test_host_threads_speed_the_host_step_up_to_the_dram_share():
    """More threads per rank speed the host Adam until it streams the rank's share of the
    server's DRAM (DGX H100: 2 x 8 DDR5-4800 channels, 70% reached, 8 ranks)."""
    one, four = _llama_half(1.0), _llama_half(1.0, threads=4)
    stream = 2 * 8 * 4800e6 * 8 * 0.7 / 8
    per_param = {1: 1 / ADAM_RATE_SPR, 4: max(1 / (4 * ADAM_RATE_SPR), 28 / stream)}
    assert per_param[4] == 28 / stream  # DRAM-bound at four threads
    assert four.breakdown_s["offload"] / one.breakdown_s["offload"] == pytest.approx(per_param[4] / per_param[1],
                                                                                     rel=0.01)
    assert "export OMP_NUM_THREADS=4" in " ".join(framework("megatron").notes(four.to_dict()))


# -- a public measurement ----------------------------------------------------------------

QWEN3_06B = ModelSpec(name="qwen3-0.6b", num_layers=28, hidden=1024, num_heads=16, num_kv_heads=8,
                      attention_head_dim=128, qk_norm=True, ffn_hidden=3072, vocab_size=151936, seq_len=4096,
                      mlp="swiglu", norm="rmsnorm", bias=False, tied_embeddings=True, position_embedding="rope")


@pytest.mark.parametrize("fraction,added_s", [(0.5, 1.216 - 0.752), (1.0, 1.678 - 0.752)])
def test_nemo_rl_single_h100_offload_increment_within_15_percent(fraction, added_s):
    """NeMo-RL PR #3628 (github.com/NVIDIA-NeMo/RL/pull/3628): Qwen3-0.6B on one H100 with
    Megatron-Core's hybrid optimizer and --overlap-cpu-optimizer-d2h-h2d; mean step over
    steps 11-100 0.752 s without offload, 1.216 s at 50%, 1.678 s at 100%. The batch is not
    published, so the check is the step time offload adds, which does not depend on it;
    nest's host Adam rate comes from a different run (Megatron-Bridge's, on 16 H100s)."""
    cluster = nest.load_cluster("dgx-h100", devices=8)
    single = replace(cluster, tiers=(replace(cluster.tiers[0], fanout=1),))
    job = JobSpec(global_batch=8, seq_len=4096)
    kept = nest.evaluate(QWEN3_06B, single, job, tp=1, pp=1, dp=1, micro_batch=1)
    moved = nest.evaluate(QWEN3_06B, single, job, tp=1, pp=1, dp=1, micro_batch=1, optimizer_offload=fraction)
    assert moved.step_time_s - kept.step_time_s == pytest.approx(added_s, rel=0.15)


def test_a_cluster_file_sets_or_removes_the_host(tmp_path):
    """``device.host`` in a file: a preset with overrides (the server's memory), or null
    (nothing can offload)."""
    tiers = "tiers:\n  - {name: nvlink, fanout: 8, bandwidth_GBps: 450, latency_us: 3}\n"
    big = tmp_path / "big.yaml"
    big.write_text("name: big\ndevice: {base: h100-sxm, host: {base: dgx-h100, memory_GiB: 4096}}\n" + tiers)
    cluster = nest.load_cluster(str(big))
    assert cluster.device.host.memory_bytes == 4096 * GiB and cluster.device.host.cores == 112
    assert Scenario(TINY, cluster, JobSpec(global_batch=8, seq_len=1024)).host_share.usable_bytes == 496 * GiB
    none = tmp_path / "none.yaml"
    none.write_text("name: none\ndevice: {base: h100-sxm, host: null}\n" + tiers)
    with pytest.raises(SpecError, match="device h100-sxm has no host memory spec"):
        nest.evaluate(TINY, nest.load_cluster(str(none)), JobSpec(global_batch=8, seq_len=1024), tp=1, pp=1, dp=8,
                      micro_batch=1, zero=1, optimizer_offload=0.5)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ndevice: {base: h100-sxm, host: {base: dgx-h100, memory_TB: 4}}\n" + tiers)
    with pytest.raises(SpecError, match="memory_TB"):
        nest.load_cluster(str(bad))


def test_kept_parameters_widen_a_bf16_gradient_buffer():
    """With --grad-reduce-in-bf16 the GPU part of the hybrid optimizer keeps an fp32 copy
    of each kept parameter's gradient (hybrid_optimizer.py _set_sub_optimizer_grads): 4 more
    bytes per kept parameter than the 12 of its master and moments, none without offload."""
    opt = OptimizerSpec.of("adam", "bf16", "fp32")
    assert offload.state_bytes(opt, 0.0) == 12
    assert offload.state_bytes(opt, 0.25) == pytest.approx(0.75 * 16)
    assert offload.state_bytes(opt, 1.0) == 0
    assert offload.state_bytes(OptimizerSpec.of("adam", "fp32", "fp32"), 0.25) == pytest.approx(0.75 * 12)


def test_the_memory_floor_sums_agree_with_the_direct_sum():
    """The closed-form harmonic sums of the memory floor (digamma differences) against the
    sum over every rank, over thirteen orders of magnitude of bytes (the floor divides by
    1 + 1e-6 of them, far above this error)."""
    from nest.search.floors import _inverse_sum
    rng = np.random.default_rng(0)
    n = 4000
    params, acts = 10 ** rng.uniform(3, 12, n), 10 ** rng.uniform(-2, 11, n)
    acts[:40] = 0
    pp = rng.integers(1, 129, n).astype(float)
    vp = np.where(rng.random(n) < 0.5, 1, rng.integers(2, 9, n)).astype(float)
    micro = rng.integers(1, 300, n).astype(float)
    rank, p, v = np.arange(128)[None, :], pp[:, None], vp[:, None]
    live = np.where(v == 1, np.minimum(p - rank, micro[:, None]),
                    np.minimum(2 * (p - rank - 1) + (v - 1) * p + 1, micro[:, None] * v) / v)
    direct = np.where(rank < p, 1 / (params[:, None] + live * acts[:, None]), 0.0).sum(axis=1)
    assert np.max(np.abs(_inverse_sum(params, acts, pp, vp, micro) / direct - 1)) < 1e-9
