"""The host's dispatch floor of a layer pass (nest.cost.host) and ZeRO-3's recompute gathers."""

from dataclasses import replace

import numpy as np
import pytest

import nest
from nest.cost import host
from nest.cost.compute import KernelModel
from nest.cost.nodes import NodeCostModel
from nest.parallel import ConfigArrays, LayerConfig
from nest.inputs.loading import host_from_mapping
from nest.presets.devices import DEVICES
from nest.presets.hosts import HOSTS
from nest.presets.models import MODELS
from nest.specs import JobSpec, ModelSpec

H100 = nest.load_cluster("dgx-h100", devices=64)
TINY = ModelSpec(name="tiny", num_layers=4, hidden=256, num_heads=8, ffn_hidden=1024, vocab_size=1024, seq_len=256)


def _row(model, job, config, kind, gpu_only=False, monkeypatch=None, device=H100.device):
    if gpu_only:
        monkeypatch.setattr(host, "HOST_OP_S", 0.0)
    table = NodeCostModel(model, job, KernelModel.for_job(device, job)).table(kind, ConfigArrays.of([config]))
    if gpu_only:
        monkeypatch.undo()
    return {name: float(np.asarray(table[name]).ravel()[0]) for name in ("fwd_s", "bwd_s", "recompute_s", "host_s")}


def test_a_small_dense_layer_runs_at_the_hosts_pace(monkeypatch):
    job = JobSpec(64, 256)
    config = LayerConfig(tp=8, sp=True, micro_batch=1, recompute="none")
    gpu = _row(TINY, job, config, "block", gpu_only=True, monkeypatch=monkeypatch)
    row = _row(TINY, job, config, "block")
    # 77 calls forward, 95 backward, each 12 us: far above the tiny layer's kernels
    assert gpu["fwd_s"] < 77 * 12e-6 and gpu["bwd_s"] < 95 * 12e-6
    assert row["fwd_s"] == pytest.approx(77 * 12e-6) and row["bwd_s"] == pytest.approx(95 * 12e-6)
    assert row["host_s"] == pytest.approx(row["fwd_s"] + row["bwd_s"] - gpu["fwd_s"] - gpu["bwd_s"])



@pytest.mark.parametrize("device, slowdown", [("gb200", 37.08 / 13.48), ("gh200", 33.17 / 13.48), ("b200", 1.0)])
def test_a_grace_host_dispatches_each_call_slower(monkeypatch, device, slowdown):
    """TransformerEngine issue #2053's like-for-like call (one torch.nn.Linear forward):
    37.08 us of CPU on GB200's Grace, 33.17 us on GH200's, 13.48 us on a DGX H100's Xeon.
    A host-bound layer pass scales by that ratio; the same GPU on an x86 host does not."""
    job = JobSpec(64, 256)
    config = LayerConfig(tp=8, sp=True, micro_batch=1, recompute="none")
    spec = DEVICES[device]
    assert spec.host.dispatch_slowdown == pytest.approx(slowdown)
    row = _row(TINY, job, config, "block", device=spec)
    assert row["fwd_s"] == pytest.approx(77 * 12e-6 * slowdown)
    assert row["bwd_s"] == pytest.approx(95 * 12e-6 * slowdown)
    on_x86 = _row(TINY, job, config, "block", device=replace(spec, host=HOSTS["dgx-b200"]))
    assert on_x86["fwd_s"] == pytest.approx(77 * 12e-6) and on_x86["bwd_s"] == pytest.approx(95 * 12e-6)
    gpu = _row(TINY, job, config, "block", gpu_only=True, monkeypatch=monkeypatch, device=spec)
    assert row["host_s"] == pytest.approx(row["fwd_s"] + row["bwd_s"] - gpu["fwd_s"] - gpu["bwd_s"])


def test_a_host_file_sets_its_dispatch_slowdown():
    spec = host_from_mapping({"base": "dgx-h100", "dispatch_slowdown": 2.5})
    assert spec.dispatch_slowdown == 2.5 and host.dispatch_s(replace(DEVICES["h100-sxm"], host=spec)) == 2.5 * 12e-6
    assert host.dispatch_s(replace(DEVICES["h100-sxm"], host=None)) == host.HOST_OP_S

def test_fp8_adds_its_quantizers_calls():
    ops = host.block_host_ops(False, True)
    assert ops == {"fwd": 77 + 8, "bwd": 95 + 15}


def test_a_large_layer_hides_its_host_work(monkeypatch):
    job = JobSpec(1536, 2048)
    config = LayerConfig(tp=8, sp=True, micro_batch=1, recompute="none")
    gpu = _row(MODELS["gpt3-175b"], job, config, "block", gpu_only=True, monkeypatch=monkeypatch)
    row = _row(MODELS["gpt3-175b"], job, config, "block")
    assert row["host_s"] == 0.0 and row["fwd_s"] == gpu["fwd_s"] and row["bwd_s"] == gpu["bwd_s"]


def test_each_local_expert_adds_its_grouped_gemm_calls():
    by_ep = {ep: host.block_host_ops(True, False, 128 / ep) for ep in (8, 16)}
    assert by_ep[8]["fwd"] - by_ep[16]["fwd"] == pytest.approx(8 * 2)
    assert by_ep[8]["bwd"] - by_ep[16]["bwd"] == pytest.approx(8 * 10)
    assert by_ep[16]["fwd"] == pytest.approx(50 + 120 + 2 * 8)


@pytest.mark.parametrize("capacity, dispatcher, waits", [(0.0, "alltoall", True), (1.0, "alltoall", False),
                                                        (1.0, "flex", True), (0.0, "flex", True)])
def test_a_dropless_moe_forward_waits_on_the_gpu_once(monkeypatch, capacity, dispatcher, waits):
    """GPU-bound (DeepSeek-V3 at EP 64: ~4 ms of kernels against ~2.2 ms of calls), so the
    forward is its kernels plus the post-wait gap, drop-and-pad excepted; the backward
    never waits."""
    model = replace(MODELS["deepseek-v3"], capacity_factor=capacity)
    job = JobSpec(1024, 4096, moe_dispatcher=dispatcher)
    config = LayerConfig(tp=2, sp=True, micro_batch=1, recompute="none", ep=64)
    gpu = _row(model, job, config, "moe", gpu_only=True, monkeypatch=monkeypatch)
    row = _row(model, job, config, "moe")
    gap = host.SYNC_GAP_OPS * host.HOST_OP_S
    assert row["fwd_s"] == pytest.approx(gpu["fwd_s"] + (gap if waits else 0.0))
    assert row["bwd_s"] == gpu["bwd_s"]


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize("tp, mbs", [(1, 1), (4, 2), (8, 1)])
def test_the_host_only_lengthens_a_pass(monkeypatch, recompute, tp, mbs):
    model, job = MODELS["qwen3-30b-a3b"], JobSpec(256, 4096, dtype="fp8")
    config = LayerConfig(tp=tp, sp=tp > 1, micro_batch=mbs, recompute=recompute, ep=8)
    gpu = _row(model, job, config, "moe", gpu_only=True, monkeypatch=monkeypatch)
    row = _row(model, job, config, "moe")
    for name in ("fwd_s", "bwd_s", "recompute_s"):
        assert row[name] >= gpu[name]
    added = sum(row[n] - gpu[n] for n in ("fwd_s", "bwd_s", "recompute_s"))
    assert row["host_s"] == pytest.approx(added)
    if recompute == "full":
        assert row["recompute_s"] == pytest.approx(row["fwd_s"])


def test_the_breakdown_reports_the_host_part():
    cluster = nest.load_cluster("dgx-h100", devices=8)
    plan = nest.evaluate(TINY, cluster, JobSpec(64, 256), tp=8, pp=1, dp=1, micro_batch=1, sp=True)
    breakdown = plan.breakdown_s
    assert breakdown["host"] > 0.5 * breakdown["compute"]
    assert sum(breakdown.values()) == pytest.approx(plan.step_time_s)


def _zero3_full(framework):
    cluster = nest.load_cluster("dgx-h100", devices=16)
    job = JobSpec(64, 4096, framework=framework, overlap_grad_reduce=True)
    return nest.evaluate("llama3-8b", cluster, job, tp=1, pp=1, dp=16, micro_batch=1, zero=3, recompute="full")


def test_megatron_fsdp_gathers_once_for_recompute_and_backward():
    """Megatron-FSDP and FSDP2 reuse the backward's gather for the recomputation; DeepSpeed
    gathers a third time, so its ZeRO-3 step is longer by that exposed gather."""
    megatron, torchtitan, deepspeed = (_zero3_full(f) for f in ("megatron", "torchtitan", "deepspeed"))
    assert megatron.breakdown_s["dp_comm"] < deepspeed.breakdown_s["dp_comm"]
    assert megatron.step_time_s < deepspeed.step_time_s
    assert torchtitan.breakdown_s["dp_comm"] == pytest.approx(megatron.breakdown_s["dp_comm"])
