"""The plausibility view: a plan's model FLOP rate next to the fastest published run of its
device family, model class and dtype (nest.presets.published)."""

from __future__ import annotations

import pytest

import nest
from nest.presets.published import PUBLISHED, best_published, device_family
from nest.report.text import render
from nest.specs import JobSpec


def test_plausibility_view_holds_the_plan_against_published_runs():
    assert device_family("h200") == device_family("h100-sxm") == "h100" and device_family("b200") is None
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
