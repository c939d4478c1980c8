"""The plausibility view: a plan's model FLOP rate next to the fastest published run of its
device family, model class and dtype (nest.presets.published)."""

from __future__ import annotations

import pytest

import nest
from nest.presets.published import PUBLISHED, best_published, device_family
from nest.report.text import render
from nest.specs import JobSpec


def test_plausibility_view_holds_the_plan_against_published_runs():
    assert device_family("h200") == device_family("h100-sxm") == "h100" and device_family("tpuv4") is None
    assert (device_family("gb200"), device_family("b200")) == ("gb200", "b200")
    assert best_published("h100-sxm", True, "fp8").run.startswith("Qwen3-235B")
    assert best_published("a100-80gb", False, "fp16") is best_published("a100-80gb", False, "bf16")
    assert len({(r.family, r.moe, r.dtype) for r in PUBLISHED}) == len(PUBLISHED)
    plan = nest.plan("gpt3-175b", nest.load_cluster("dgx-a100", devices=1024), JobSpec(global_batch=1536, seq_len=2048))
    doc = plan.to_dict()
    assert doc["model_tflops_per_device"] == pytest.approx(plan.mfu * 312, rel=1e-9)
    assert doc["published_reference"]["run"] == "GPT 530B on 2240 A100s (54.2% MFU)"
    text = render(plan)
    ratio = plan.model_tflops_per_device / (0.542 * 312)
    assert (f"this plan is {ratio:.2f}x that: optimistic" in text) == (ratio > 1)
    graph = nest.plan("llama2-7b", nest.load_cluster("tpuv4-torus", devices=64), JobSpec(global_batch=64, seq_len=1024))
    assert graph.published_reference is None and "fastest published" not in render(graph)


def test_blackwell_plans_meet_bridges_blackwell_runs():
    """GB200 plans are held against Megatron-Bridge's fastest DGX-GB200 rows (nest's
    Blackwell compute is optimistic: bench/fidelity/results.md), FP8 and MXFP8 alike, and
    B200 MoE plans against the DGX-B200 rows; dense B200 has no published row here."""
    assert best_published("gb200", False, "fp8").tflops_per_gpu == 2144.0
    assert best_published("gb200", True, "fp8").run.startswith("DeepSeek-V3 on 256 GB200s")
    assert best_published("b200", True, "bf16").run.startswith("GPT-OSS 120B on 64 B200s")
    assert best_published("b200", False, "bf16") is None
    job = JobSpec(global_batch=256, seq_len=8192, dtype="fp8", fp8_recipe="mxfp8")
    plan = nest.plan("llama3-70b", nest.load_cluster("gb200-nvl72", devices=72), job)
    assert plan.published_reference.family == "gb200"
    assert "fastest published dense fp8 run on GB200: 2144, Llama 3.1 405B on 256 GB200s" in render(plan)
