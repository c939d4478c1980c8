"""Published training measurements that nest's predictions are compared with.

Every point is a configuration that ran, with the parallel layout, batch, precision and
recomputation its source states, and the measured throughput converted to seconds per
iteration in the source's own FLOP convention. Sources:

* ``sc21-t1``: Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on
  GPU Clusters Using Megatron-LM" (SC21, arXiv:2104.04473), Table 1 (weak scaling, A100
  80GB on Selene, seq 2048, vocab 51200, full recomputation). Micro-batches and the
  interleaving depth are those of the paper's script,
  https://github.com/NVIDIA/Megatron-LM/blob/main/examples/sc21/run_table_1.sh
  (``--recompute-method uniform``; ``DDP=torch`` overlaps the gradient all-reduce with
  the backward for the four smallest models, ``DDP=local`` does not). Throughput is
  "teraFLOP/s per GPU" with the paper's count ``F = 96 B s l h^2 (1 + s / 6h + V / 16lh)``.
* ``sc21-t2``: same paper, Table 2: PTD-P (TP 8; 175B with PP 12, 530B with PP 35) and
  DeepSpeed ZeRO-3 without model parallelism, strong scaling at fixed batch. ZeRO-3
  rows are priced as nest's ZeRO-3 (prefetched gathers, gradient reduce-scatter per
  micro-batch).
* ``korthikanti``: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
  Transformer Models" (arXiv:2205.05198), abstract: the 530B model on 2240 A100 reaches
  54.2% model FLOPs utilisation with sequence parallelism and selective recomputation,
  42.1% with full recomputation (model FLOPs ``72 B s l h^2 (1 + s / 6h + V / 12lh)``).
  The layout (TP 8, PP 35, interleaved 3) and batch (2240) follow SC21's 530B runs.
* ``nemo-24.12``: NVIDIA NeMo Framework 24.12 performance summary, pre-training on
  DGX H100 with FP8 (the 24.09 page lists the same numbers),
  https://docs.nvidia.com/nemo-framework/user-guide/24.12/nemotoolkit/performance/performance_summary.html.
  Tokens/s/GPU are measured; "Model TFLOP/s/GPU" gives the FLOPs per token NeMo counts.
  Settings of the performance recipes (e.g.
  https://github.com/NVIDIA/NeMo/blob/main/nemo/collections/llm/recipes/gpt3_175b.py):
  distributed optimizer, sequence parallelism with TP, no activation recomputation,
  BF16 gradient reduction (``grad_reduce_in_fp32=False``), DP gradient and parameter
  overlap, TP communication overlap (userbuffers). Model shapes: NeMo's GPTConfig5B /
  20B / 175B (dropout 0.1, GPT-2 vocabulary padded to 128 x TP) and the Llama presets.
  The Nemotron rows are left out (squared-ReLU MLP and other details nest does not
  model).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nest.cost.memory_formulas import padded_vocab
from nest.presets.clusters import CLUSTERS
from nest.presets.devices import DEVICES
from nest.presets.models import MODELS
from nest.specs import ClusterSpec, ModelSpec, Tier

SOURCES = {
    "sc21-t1": "Narayanan et al. 2021 (SC21, arXiv:2104.04473), Table 1; "
               "github.com/NVIDIA/Megatron-LM/blob/main/examples/sc21/run_table_1.sh",
    "sc21-t2": "Narayanan et al. 2021 (SC21, arXiv:2104.04473), Table 2",
    "korthikanti": "Korthikanti et al. 2022 (arXiv:2205.05198), abstract (530B, 2240 A100)",
    "nemo-24.12": "NeMo 24.12 performance summary, DGX H100 FP8: docs.nvidia.com/nemo-framework/"
                  "user-guide/24.12/nemotoolkit/performance/performance_summary.html",
}

A100_PEAK = 312e12


@dataclass(frozen=True)
class Point:
    """One published run. ``measured_step_s`` is derived from the reported metric."""

    source: str
    label: str
    model: ModelSpec
    gpus: int
    system: str  # "selene" (DGX A100, HDR IB) or "eos" (DGX H100, NDR IB)
    global_batch: int
    seq_len: int
    dtype: str
    tp: int
    pp: int
    mbs: int
    vp: int = 1
    cp: int = 1
    zero: int = 0
    recompute: str = "none"
    sp: bool = False
    flash: bool = True
    grad_bytes: int = 4
    measured_step_s: float = 0.0
    reported: str = ""  # the metric as published
    flops_per_token: float = 0.0  # the source's FLOP count per token (TFLOP/s column)
    overlaps: frozenset = field(default_factory=frozenset)  # "dp", "tp", "pp" (phase-2 prototype)
    group: str = ""  # ranking group: same source, model and GPU count
    headline: bool = True  # counted in the time-fidelity statistics

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp * self.cp)

    @property
    def tokens(self) -> int:
        return self.global_batch * self.seq_len


def selene(gpus: int) -> ClusterSpec:
    """DGX A100 80GB nodes (NVLink 3, 300 GB/s per GPU and direction) on 8 x HDR 200 Gb/s
    InfiniBand per node (25 GB/s per GPU), a non-blocking fat tree (one tier: every
    inter-node pair sees the same bandwidth). Latencies as the ``dgx-a100`` preset."""
    template = CLUSTERS["dgx-a100"]
    nvlink, leaf = template.tiers[0], template.tiers[1]
    if gpus % 8:
        raise ValueError(f"gpus = {gpus}: Selene has 8 GPUs per node")
    tiers = (nvlink, Tier("ib", gpus // 8, leaf.bandwidth, leaf.latency))
    return ClusterSpec("selene", DEVICES["a100-80gb"], tiers, source="DGX A100 SuperPOD (Selene)")


def eos(gpus: int) -> ClusterSpec:
    """DGX H100 nodes (NVLink 4, 8 x NDR 400 Gb/s): the ``dgx-h100`` preset."""
    return CLUSTERS["dgx-h100"].sized(gpus)


def cluster_of(point: Point) -> ClusterSpec:
    return selene(point.gpus) if point.system == "selene" else eos(point.gpus)


# -- SC21 -------------------------------------------------------------------------------


def sc21_flops(model: ModelSpec, batch: int, seq: int) -> float:
    """SC21's FLOPs per iteration (with full recomputation): 96 B s l h^2 (1 + s/6h + V/16lh)."""
    l, h, v = model.num_layers, model.hidden, model.vocab_size
    return 96 * batch * seq * l * h * h * (1 + seq / (6 * h) + v / (16 * l * h))


def model_flops(model: ModelSpec, batch: int, seq: int) -> float:
    """Model FLOPs per iteration (no recomputation): 72 B s l h^2 (1 + s/6h + V/12lh)."""
    l, h, v = model.num_layers, model.hidden, model.vocab_size
    return 72 * batch * seq * l * h * h * (1 + seq / (6 * h) + v / (12 * l * h))


def _sc21(source, name, tp, pp, gpus, batch, mbs, vp, tflops, ddp_overlap, zero=0, group="",
          headline=True) -> Point:
    model = MODELS[name]
    flops = sc21_flops(model, batch, 2048)
    return Point(source, f"{name} {gpus} GPUs TP{tp} PP{pp}" + (f" VP{vp}" if vp > 1 else "")
                 + (" ZeRO-3" if zero == 3 else ""), model, gpus, "selene", batch, 2048, "fp16",
                 tp, pp, mbs, vp=vp, zero=zero, recompute="full", flash=False,
                 measured_step_s=flops / (tflops * 1e12 * gpus), reported=f"{tflops:g} TFLOP/s/GPU",
                 flops_per_token=flops / (batch * 2048),
                 overlaps=frozenset({"dp"}) if ddp_overlap else frozenset(), group=group,
                 headline=headline)


SC21_TABLE1 = [
    _sc21("sc21-t1", "gpt-1.7b", 1, 1, 32, 512, 16, 1, 137, True),
    _sc21("sc21-t1", "gpt-3.6b", 2, 1, 64, 512, 16, 1, 138, True),
    _sc21("sc21-t1", "gpt-7.5b", 4, 1, 128, 512, 16, 1, 142, True),
    _sc21("sc21-t1", "gpt-18b", 8, 1, 256, 1024, 8, 1, 135, True),
    _sc21("sc21-t1", "gpt-39b", 8, 2, 512, 1536, 4, 1, 138, False),
    _sc21("sc21-t1", "gpt-76b", 8, 4, 1024, 1792, 2, 3, 140, False),
    _sc21("sc21-t1", "gpt-145b", 8, 8, 1536, 2304, 2, 2, 148, False),
    _sc21("sc21-t1", "gpt-310b", 8, 16, 1920, 2160, 1, 2, 155, False),
    _sc21("sc21-t1", "gpt-530b", 8, 35, 2520, 2520, 1, 3, 163, False),
    _sc21("sc21-t1", "gpt-1t", 8, 64, 3072, 3072, 1, 1, 163, False),
]

SC21_TABLE2 = [
    _sc21("sc21-t2", "gpt3-175b", 8, 12, 384, 1536, 1, 1, 153, False, group="175B@384"),
    _sc21("sc21-t2", "gpt3-175b", 8, 12, 768, 1536, 1, 1, 149, False, group="175B@768"),
    _sc21("sc21-t2", "gpt3-175b", 8, 12, 1536, 1536, 1, 1, 141, False, group="175B@1536"),
    _sc21("sc21-t2", "gpt-530b", 8, 35, 560, 2240, 1, 3, 171, False),
    _sc21("sc21-t2", "gpt-530b", 8, 35, 1120, 2240, 1, 3, 167, False, group="530B@1120"),
    _sc21("sc21-t2", "gpt-530b", 8, 35, 2240, 2240, 1, 3, 159, False, group="530B@2240"),
    # DeepSpeed ZeRO-3 without model parallelism (exploratory: not in the headline)
    _sc21("sc21-t2", "gpt3-175b", 1, 1, 384, 1536, 4, 1, 144, True, zero=3, group="175B@384", headline=False),
    _sc21("sc21-t2", "gpt3-175b", 1, 1, 768, 1536, 2, 1, 88, True, zero=3, group="175B@768", headline=False),
    _sc21("sc21-t2", "gpt3-175b", 1, 1, 1536, 1536, 1, 1, 44, True, zero=3, group="175B@1536", headline=False),
    _sc21("sc21-t2", "gpt-530b", 1, 1, 640, 2560, 4, 1, 138, True, zero=3, headline=False),
    _sc21("sc21-t2", "gpt-530b", 1, 1, 1120, 2240, 2, 1, 98, True, zero=3, group="530B@1120", headline=False),
    _sc21("sc21-t2", "gpt-530b", 1, 1, 2240, 2240, 1, 1, 48, True, zero=3, group="530B@2240", headline=False),
]


def _korthikanti(recompute: str, sp: bool, mfu: float) -> Point:
    model, gpus, batch = MODELS["gpt-530b"], 2240, 2240
    flops = model_flops(model, batch, 2048)
    return Point("korthikanti", f"gpt-530b 2240 GPUs TP8 PP35 VP3 {recompute}" + (" SP" if sp else ""),
                 model, gpus, "selene", batch, 2048, "bf16", 8, 35, 1, vp=3, recompute=recompute, sp=sp,
                 flash=False, measured_step_s=flops / (mfu * A100_PEAK * gpus), reported=f"MFU {100 * mfu:g}%",
                 flops_per_token=flops / (batch * 2048), group="530B@2240 (2022)")


KORTHIKANTI = [_korthikanti("full", False, 0.421), _korthikanti("selective", True, 0.542)]


# -- NeMo 24.12, DGX H100, FP8 ----------------------------------------------------------


def nemo_gpt(name: str, layers: int, hidden: int, heads: int, tp: int) -> ModelSpec:
    """NeMo's GPTConfig<size>: GELU MLP of 4h, LayerNorm, learned positions, dropout 0.1,
    tied embeddings, GPT-2 vocabulary (50257) padded to 128 x TP."""
    return ModelSpec(name=name, num_layers=layers, hidden=hidden, num_heads=heads, ffn_hidden=4 * hidden,
                     vocab_size=padded_vocab(50257, tp), seq_len=2048)


def _nemo(name, model, gpus, gbs, mbs, seq, tp, pp, cp, vp, tokens_per_s, tflops, group="") -> Point:
    flops_per_token = tflops * 1e12 / tokens_per_s
    return Point("nemo-24.12", f"{name} {gpus} GPUs TP{tp} PP{pp}" + (f" CP{cp}" if cp > 1 else "")
                 + (f" VP{vp}" if vp > 1 else ""), model, gpus, "eos", gbs, seq, "fp8", tp, pp, mbs,
                 vp=vp, cp=cp, zero=1, recompute="none", sp=tp > 1, flash=True, grad_bytes=2,
                 measured_step_s=gbs * seq / (tokens_per_s * gpus), reported=f"{tokens_per_s:g} tokens/s/GPU",
                 flops_per_token=flops_per_token,
                 overlaps=frozenset({"dp", "pp"} | ({"tp"} if tp > 1 else set())), group=group)


NEMO = [
    _nemo("gpt3-5b", nemo_gpt("gpt3-5b", 24, 4096, 32, 1), 64, 2048, 4, 2048, 1, 1, 1, 1, 23406, 765),
    _nemo("gpt3-20b", nemo_gpt("gpt3-20b", 44, 6144, 48, 2), 64, 256, 2, 2048, 2, 1, 1, 1, 5851, 750),
    _nemo("gpt3-175b", nemo_gpt("gpt3-175b", 96, 12288, 96, 4), 128, 256, 1, 2048, 4, 8, 1, 6, 716, 771),
    _nemo("gpt3-175b", nemo_gpt("gpt3-175b", 96, 12288, 96, 4), 512, 2048, 2, 2048, 4, 8, 1, 6, 825, 888),
    _nemo("llama2-7b", MODELS["llama2-7b"], 8, 128, 1, 4096, 1, 1, 1, 1, 16934, 780),
    _nemo("llama2-13b", MODELS["llama2-13b"], 16, 128, 1, 4096, 1, 4, 1, 10, 8715, 760),
    _nemo("llama2-70b", MODELS["llama2-70b"], 64, 128, 1, 4096, 4, 4, 1, 20, 1728, 768),
    _nemo("llama3-8b", MODELS["llama3-8b"], 8, 128, 1, 8192, 1, 1, 2, 1, 12273, 711),
    _nemo("llama3-70b", MODELS["llama3-70b"], 64, 128, 1, 8192, 4, 4, 2, 5, 1524, 734),
]

POINTS: list[Point] = SC21_TABLE1 + SC21_TABLE2 + KORTHIKANTI + NEMO
"""Every point, in report order."""
