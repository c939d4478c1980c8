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


def _bridge_archive(release: str) -> str:
    """The source of a row of Bridge's archived performance tables of ``release``."""
    return (f"Megatron-Bridge docs/performance-summary-archive.md, {release} NeMo container tables (commit "
            "067f987df): https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/main/docs/performance-summary-archive.md")


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
    # Blackwell: Bridge's DGX-GB200 and DGX-B200 tables (the fastest row of each kind over
    # releases 26.02 to 26.08; "fp8" counts MXFP8 and FP8 current scaling alike)
    PublishedRun("gb200", False, "fp8", 2144.0, "Llama 3.1 405B on 256 GB200s, TP4 PP16 VP4, FP8 current scaling",
                 _bridge_archive("26.04.01")),
    PublishedRun("gb200", True, "fp8", 1292.0, "DeepSeek-V3 on 256 GB200s, PP4 VP4 EP64, MXFP8",
                 _bridge_archive("26.06")),
    PublishedRun("gb200", True, "bf16", 452.0, "GPT-OSS 120B on 64 GB200s, EP64", _bridge_archive("26.04.01")),
    PublishedRun("b200", True, "fp8", 864.0, "DeepSeek-V3 on 256 B200s, PP8 VP2 EP32, MXFP8",
                 _bridge_archive("26.04.01")),
    PublishedRun("b200", True, "bf16", 373.0, "GPT-OSS 120B on 64 B200s, EP8", _bridge_archive("26.02.01")),
)
"""The runs, at most one per (family, moe, dtype): the fastest we found published."""

_FAMILIES = {"a100": ("a100",), "h100": ("h100", "h200"), "gb200": ("gb200",), "b200": ("b200",)}


def device_family(device_name: str) -> str | None:
    """The family of a device preset name (``h100-sxm`` and ``h200`` share the H100's
    tensor cores; the GB200 and the B200 differ in power and clocks), or None for devices
    without published runs here."""
    name = device_name.lower()
    return next((family for family, prefixes in _FAMILIES.items() if name.startswith(prefixes)), None)


def best_published(device_name: str, moe: bool, dtype: str) -> PublishedRun | None:
    """The published run to hold a plan of this device, model class and dtype against
    (fp16 counts as bf16), or None."""
    family = device_family(device_name)
    dtype = "bf16" if dtype == "fp16" else dtype
    return next((r for r in PUBLISHED if (r.family, r.moe, r.dtype) == (family, moe, dtype)), None)
