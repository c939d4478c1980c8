"""The best published training throughput per device family, model class and dtype: what a
plan's model FLOP rate is held against in the report (a plausibility view, not a bound).

Each entry is one measured run as its source reports it, in *model* TFLOP/s per GPU (the
FLOPs of the model's forward and backward, recomputation not counted: the MFU
convention). A plan above every published run of its kind is not impossible, but its
prediction is then the optimistic end of what nest models (see bench/fidelity/results.md
for how far nest's step times are from these and other runs).
"""

from __future__ import annotations

from dataclasses import dataclass

BRIDGE_2602 = ("Megatron-Bridge docs/performance-summary.md, 26.02 NeMo container tables (commit 05d48ac02): "
               "https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/main/docs/performance-summary.md")


@dataclass(frozen=True)
class PublishedRun:
    """One published run: ``family`` of its device, whether the model is a MoE, the dtype
    its linear layers trained in, and its model TFLOP/s per GPU."""

    family: str
    moe: bool
    dtype: str
    tflops_per_gpu: float
    run: str
    source: str


PUBLISHED = (
    PublishedRun("a100", False, "bf16", 0.542 * 312, "GPT 530B on 2240 A100s (54.2% MFU)",
                 "Korthikanti et al. 2022, Reducing Activation Recomputation in Large Transformer Models, "
                 "arXiv:2205.05198, abstract"),
    PublishedRun("h100", False, "bf16", 430.0, "Llama 3 405B on 8192 H100s, TP8 PP16",
                 "Llama Team 2024, The Llama 3 Herd of Models, arXiv:2407.21783, Table 4"),
    PublishedRun("h100", False, "fp8", 784.0, "Llama 3.1 405B on 1024 H100s, TP8 PP8 CP2 VP8", BRIDGE_2602),
    PublishedRun("h100", True, "fp8", 242.0, "Qwen3-235B-A22B on 256 H100s, TP2 PP8 VP4 EP32", BRIDGE_2602),
    PublishedRun("h100", True, "bf16", 276.0, "Qwen3-235B-A22B on 256 H100s, TP2 PP8 VP4 EP32, DeepEP, 1F1B "
                 "overlap", "yanring/Megatron-MoE-ModelZoo best_practice/qwen3/readme.md (H100 table, e865051)"),
)
"""The runs, at most one per (family, moe, dtype): the fastest we found published."""

_FAMILIES = {"a100": ("a100",), "h100": ("h100", "h200")}


def device_family(device_name: str) -> str | None:
    """The family of a device preset name (``h100-sxm`` and ``h200`` share the H100's
    tensor cores), or None for devices without published runs here."""
    name = device_name.lower()
    return next((family for family, prefixes in _FAMILIES.items() if name.startswith(prefixes)), None)


def best_published(device_name: str, moe: bool, dtype: str) -> PublishedRun | None:
    """The published run to hold a plan of this device, model class and dtype against
    (fp16 counts as bf16), or None."""
    family = device_family(device_name)
    dtype = "bf16" if dtype == "fp16" else dtype
    return next((r for r in PUBLISHED if (r.family, r.moe, r.dtype) == (family, moe, dtype)), None)
