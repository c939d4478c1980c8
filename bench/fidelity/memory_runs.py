"""Memory fidelity: nest's per-GPU memory against public training runs.

    python bench/fidelity/memory_runs.py        # prints the table, writes memory_results.md

Each run is one published sample (its source, the framework's memory statistic, the
configuration as the source gives it; values derived from the source are marked). Every
run ran, so nest must find its configuration feasible; where a peak is published nest's
tensors (its fullest rank's total less the device reserve, which covers what PyTorch's
allocator does not see) are compared with it. ``allocated`` peaks (Megatron-Core's
``mem-max-allocated-bytes``) compare directly; ``reserved`` peaks add the allocator's
fragmentation on top. Runs whose framework keeps memory differently from Megatron-Core
with Transformer Engine (torchtitan's FSDP2 with torchao FP8 and torch.compile) are shown
and left out of the error statistics (``calibrates = False``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from megatron_flops import megatron_flops  # noqa: E402

import nest  # noqa: E402
from nest.presets.models import MODELS  # noqa: E402
from nest.specs import ModelSpec, OptimizerSpec  # noqa: E402

GiB = 2**30

# Megatron-LM's functional-test GPT (tests/functional_tests/test_cases/gpt/gpt3_7b_*_memory_speed/
# model_config.yaml at main d98e8a6): LayerNorm, GeLU, biases, learned positions, dropout
# 0.1, GQA 8, an untied 131073-token vocabulary padded to a multiple of 128 x TP.
MLM_GPT7B = ModelSpec(name="mlm-gpt3-7b-test", num_layers=32, hidden=4096, num_heads=32, num_kv_heads=8,
                      ffn_hidden=16384, vocab_size=131584, seq_len=8192, mlp="gelu", norm="layernorm", bias=True,
                      tied_embeddings=False, position_embedding="learned", dropout=True)

# Megatron-Bridge's FP8 current-scaling H100 presets (performance summary 25.11, recipes at
# v0.2.0): per-tensor current scaling (training/mixed_precision.py
# bf16_with_fp8_current_scaling_mixed: fp8_recipe "tensorwise"), FP8 weights gathered in
# FP8, bf16 gradient reduction, overlapped DP collectives.
FP8_CS = dict(dtype="fp8", fp8_recipe="tensorwise", fp8_param_gather=True,
              optimizer=OptimizerSpec.of("adam", "bf16", "fp32"), overlap_grad_reduce=True, overlap_param_gather=True)
# Its MXFP8 preset (bf16_with_mxfp8_mixed, at 067f987): MXFP8 weights, gathered in bf16
# through the gradient buffer (reuse_grad_buf_for_mxfp8_param_ag), the rest as FP8-CS.
MXFP8 = dict(FP8_CS, fp8_recipe="mxfp8")
# Megatron's default split of Llama 3 70B's 80 layers over pp x vp virtual stages (no
# pipeline layout, no --account-for-* flags: the embedding joins the first stage's layers
# and the output layer the last's), in nest's nodes (embedding, 80 blocks, head)
MEGATRON_SPLIT_80_40 = [3] + [2] * 38 + [3]
MEGATRON_SPLIT_80_20 = [5] + [4] * 18 + [5]
BRIDGE = "https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/main/docs/performance-summary.md"
BRIDGE_ARCHIVE = BRIDGE.replace("summary.md", "summary-archive.md")
GB200_RECIPES = "perf_recipes/llama/gb200/llama3.py at 067f987"
# Megatron-Core's MoE model zoo: 256 H100 with 8x50 GB/s InfiniBand, BF16, the benchmarking
# config model_configs/benchmarking/Qwen3-235B-A22B.yaml (distributed optimizer, overlapped
# gradient reduction and weight gather, dropless) at e865051.
ZOO_QWEN3 = "yanring/Megatron-MoE-ModelZoo best_practice/qwen3/readme.md (H100 table, e865051)"
# The BF16 runs add --tp-comm-overlap (sbatch_benchmarking.sh, since b09773a).
ZOO_JOB = dict(overlap_grad_reduce=True, overlap_param_gather=True, moe_dispatcher="flex", tp_comm_overlap=True)
# --account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split: the
# embedding and the loss count as layers, 96 of them for Qwen3-235B's 94
ZOO_SPLIT_PP8_VP4 = [3] * 32
QWEN3_ROUTER_CV = 1.87
"""nest's ``moe_load_cv`` of Qwen3-235B-A22B's trained router (the model zoo loads the
checkpoint and trains on real data with an auxiliary loss): the value at which nest's
step at 16k tokens is the published forced-balance throughput's 1.245 times as long
dropless; the 32k-128k pairs are predictions. The H100 table's 4k rows do not say whether
they forced balanced routing (``--moe-router-force-load-balancing``): the cross-node EP32
rows are ``run_235b.sh``'s command, which does; the intra-node EP8 rows (other commits,
no command given) are shown both ways."""
MCR = "Megatron-Core MoE report (arXiv 2603.07685)"
ZOO_MIXTRAL = "yanring/Megatron-MoE-ModelZoo best_practice/mixtral/run_mixtral_8x22B.sh (e865051)"
MIXTRAL_ROUTER_CV = 0.05
"""nest's ``moe_load_cv`` of the model zoo's Mixtral-8x22B router (aux loss 1e-2): its
dropless step is 465/445 of the forced one."""


@dataclass(frozen=True)
class Run:
    """One published run: ``config`` are ``nest.evaluate``'s keyword arguments, ``job``
    ``nest.job_spec``'s; ``measured_GiB`` the published peak (None: not published)."""

    id: str
    source: str
    model: ModelSpec
    devices: int
    seq_len: int
    global_batch: int
    config: dict
    job: dict = field(default_factory=dict)
    preset: str = "dgx-h100"
    measured_GiB: float | None = None
    kind: str = ""  # what the peak measures
    calibrates: bool = True
    notes: str = ""
    tokens_per_gpu_s: float | None = None  # the published throughput, where given
    tflops_per_gpu: float | None = None  # or Megatron-LM's model TFLOP/s per GPU (megatron_flops)
    sets_router: bool = False  # its step set the router's moe_load_cv: shown, not counted in the errors
    # the source does not say whether routing was forced: the moe_load_cv of the trained router
    # the run loads, for the dropless reading shown beside the forced one
    unstated_router_cv: float | None = None

    @property
    def measured_step_s(self) -> float | None:
        """The published step time: from the throughput in tokens, or from Megatron-LM's
        TFLOP/s with its own FLOP count; None when neither is published."""
        if self.tokens_per_gpu_s:
            return self.global_batch * self.seq_len / (self.tokens_per_gpu_s * self.devices)
        if self.tflops_per_gpu:
            return megatron_flops(self.model, self.seq_len, self.global_batch) / (self.tflops_per_gpu * 1e12
                                                                                 * self.devices)
        return None


RUNS = [
    Run("mlm-ft-7b-tp1pp4-h100", "Megatron-LM tests/functional_tests/test_cases/gpt/gpt3_7b_tp1_pp4_memory_speed "
        "(golden_values_dev_dgx_h100.json, main d98e8a6)", MLM_GPT7B, 8, 8192, 8,
        dict(tp=1, pp=4, vp=8, dp=2, micro_batch=1, sp=False, zero=1, recompute="none",
             layers_per_stage=[2] + [1] * 30 + [2]),  # --num-layers-per-virtual-pipeline-stage 1
        dict(overlap_grad_reduce=True, overlap_param_gather=True),
        measured_GiB=60720852992 / GiB, kind="max allocated, last rank",
        notes="dp derived (8 GPUs / tp pp); the last rank, whose peak the test records; the vocabulary padded "
              "to a multiple of 128 x 4 (the TP4 test's; 128 for TP1 would be 384 fewer rows)"),
    Run("mlm-ft-7b-tp4pp1-h100", "Megatron-LM tests/functional_tests/test_cases/gpt/gpt3_7b_tp4_pp1_memory_speed "
        "(golden_values_dev_dgx_h100.json, main d98e8a6)", MLM_GPT7B, 8, 8192, 8,
        dict(tp=4, pp=1, dp=2, micro_batch=2, sp=False, zero=1, recompute="none"),
        dict(overlap_grad_reduce=True, overlap_param_gather=True),
        measured_GiB=57143791616 / GiB, kind="max allocated, last rank", notes="dp derived"),
    Run("mb-qwen3-30b-ep16-h100", "Megatron-Bridge skills/nemo-mbridge-perf-expert-parallel-overlap/SKILL.md "
        "(HybridEP production-shape benchmark, 2026-07-25)", MODELS["qwen3-30b-a3b"], 16, 4096, 1024,
        dict(tp=1, pp=1, dp=16, ep=16, micro_batch=1, sp=False, zero=1, recompute="none"),
        dict(overlap_grad_reduce=True, moe_dispatcher="flex", overlap_moe_expert_parallel_comm=True),
        measured_GiB=62.166, kind="max allocated, rank 0",
        tokens_per_gpu_s=1024 * 4096 / 20.992 / 16,
        notes="distributed optimizer assumed (Bridge's default); recomputation not stated (none assumed); "
              "step 20.992 s (iterations 41-50) with the flex dispatcher (HybridEP), force-balanced routing, "
              "EP communication overlap (overlap_moe_expert_parallel_comm) and CUDA graphs of the router"),
    Run("mb-l70b-sft-tp4pp4vp5", "Megatron-Bridge skills/nemo-mbridge-perf-memory-tuning card (PR #3107): "
        "Llama3-70B SFT, FP8-CS, 32 H100", MODELS["llama3-70b"], 32, 4096, 32,
        dict(tp=4, pp=4, vp=5, dp=2, micro_batch=1, sp=True, zero=1, recompute="selective"), FP8_CS,
        measured_GiB=59.0, kind="\"~59 gb\" (unit and statistic not stated)", calibrates=False,
        notes="ran only with expandable segments; 58.8 gb without them was an OOM"),
    Run("ps2511-h100-l3-70b", BRIDGE + " (25.11, H100 FP8-CS)", MODELS["llama3-70b"], 64, 8192, 128,
        dict(tp=4, pp=8, vp=5, dp=2, micro_batch=1, sp=True, zero=1, recompute="none",
             layers_per_stage=MEGATRON_SPLIT_80_40),
        FP8_CS, tokens_per_gpu_s=1602, notes="Megatron's default split (v0.2.0 llama3_70b_pretrain_config)"),
    Run("ps2511-h100-l31-405b", BRIDGE + " (25.11, H100 FP8-CS)", MODELS["llama3.1-405b"], 1024, 8192, 512,
        dict(tp=8, pp=8, vp=8, cp=2, dp=8, micro_batch=1, sp=True, zero=1, recompute="none",
             layers_per_stage=[2] * 64),
        FP8_CS, tokens_per_gpu_s=292,
        notes="v0.2.0 llama31_405b_pretrain_config: --account-for-embedding/loss-in-pipeline-split, 128 / 64"),
    Run("ps2511-h100-q3-235b", BRIDGE + " (25.11, H100 FP8-CS)", MODELS["qwen3-235b-a22b"], 256, 4096, 2048,
        dict(tp=2, pp=8, vp=4, dp=16, ep=32, micro_batch=1, sp=True, zero=1, recompute="none"),
        dict(FP8_CS, overlap_moe_expert_parallel_comm=True), tokens_per_gpu_s=1575,
        notes="expert TP 1; the preset overlaps EP all-to-alls (moe_a2a_overlap); "
                                     "force-balanced dropless routing"),
    Run("ps2604-gb200-l3-70b-mxfp8", BRIDGE_ARCHIVE + " (26.04.01, DGX-GB200 MXFP8)", MODELS["llama3-70b"], 64,
        8192, 256, dict(tp=2, pp=4, vp=5, dp=8, micro_batch=1, sp=True, zero=1, recompute="none",
                        layers_per_stage=MEGATRON_SPLIT_80_20), MXFP8,
        preset="gb200-nvl72", tokens_per_gpu_s=3712,
        notes=f"{GB200_RECIPES} llama3_70b_pretrain_64gpu_gb200_fp8mx_config (TP overlap with its FP8 userbuffers "
              "config); the same configuration measured 3613, 3837, 3828 and 3712 tokens/s/GPU in releases 26.02 to "
              "26.04.01"),
    Run("ps2604-gb200-l3-70b-fsdp-fp8cs", BRIDGE_ARCHIVE + " (26.04.01, DGX-GB200 FP8)", MODELS["llama3-70b"], 64,
        8192, 256, dict(tp=1, pp=1, dp=64, micro_batch=2, sp=False, zero=3, recompute="none", activation_offload=40),
        dict(FP8_CS, framework="megatron"), preset="gb200-nvl72", tokens_per_gpu_s=4224,
        notes=f"{GB200_RECIPES} llama3_70b_pretrain_64gpu_gb200_fp8cs_config: Megatron-FSDP optim_grads_params "
              "(FSDP 64), 40 layers' activations offloaded to the Grace host; measured 4040, 4357, 4143 and 4224 "
              "tokens/s/GPU in releases 26.02 to 26.04.01"),
    Run("ps2509-h100-dsv3", BRIDGE + " (25.09, H100)", MODELS["deepseek-v3"], 1024, 4096, 8192,
        dict(tp=2, pp=8, vp=4, dp=64, ep=64, micro_batch=1, sp=True, zero=1, recompute="mla_up_proj,mlp",
             layers_per_stage=[2] + [2] * 30 + [1]),  # the preset's layout Et|(tt|)*30mL
        dict(FP8_CS, moe_dispatcher="flex", overlap_moe_expert_parallel_comm=True), tokens_per_gpu_s=1297,
        notes="recompute modules mla_up_proj and mlp, pipeline layout Et|(tt|)*30mL (the multi-token "
              "prediction module with the loss), DeepEP dispatcher and EP overlap (v0.2.0 preset); FP8-CS "
              "assumed"),
    Run("zoo-q3-235b-ep32-h100", ZOO_QWEN3 + " (cross-node EP, 19.7 s)", MODELS["qwen3-235b-a22b"], 256, 4096, 2048,
        dict(tp=2, pp=8, vp=4, dp=16, ep=32, micro_batch=1, sp=True, zero=1, recompute="layernorm,moe_act",
             layers_per_stage=ZOO_SPLIT_PP8_VP4),
        dict(ZOO_JOB), tokens_per_gpu_s=2048 * 4096 / (19.7 * 256),
        notes="BF16, DeepEP (flex), recompute norm and act (layernorm,moe_act); step time as published"),
    Run("zoo-q3-235b-ep32-overlap-h100", ZOO_QWEN3 + " (cross-node EP, +1f1b overlap, 17.6 s)",
        MODELS["qwen3-235b-a22b"], 256, 4096, 2048,
        dict(tp=2, pp=8, vp=4, dp=16, ep=32, micro_batch=1, sp=True, zero=1, recompute="layernorm,moe_act",
             layers_per_stage=ZOO_SPLIT_PP8_VP4),
        dict(ZOO_JOB, overlap_moe_expert_parallel_comm=True), tokens_per_gpu_s=2048 * 4096 / (17.6 * 256),
        notes="the run above with the 1F1B EP overlap (A2A_OVERLAP=1)"),
    Run("zoo-q3-235b-ep8-fsdp-h100", ZOO_QWEN3 + " (intra-node EP, FSDP, 17.6 s)", MODELS["qwen3-235b-a22b"], 256,
        4096, 2048, dict(tp=2, pp=1, dp=128, ep=8, micro_batch=4, sp=True, zero=3, recompute="full"),
        dict(ZOO_JOB, framework="megatron"), tokens_per_gpu_s=2048 * 4096 / (17.6 * 256),
        unstated_router_cv=QWEN3_ROUTER_CV, notes="Megatron-FSDP (ZeRO-3), full recomputation, micro-batch 4"),
    Run("zoo-q3-235b-a2a-pp32-h100", ZOO_QWEN3 + " (intra-node EP, A2A dispatcher, PP32, 24.2 s)",
        MODELS["qwen3-235b-a22b"], 256, 4096, 2048,
        dict(tp=2, pp=32, vp=3, dp=4, ep=8, micro_batch=1, sp=True, zero=1, recompute="layernorm,moe_act",
             layers_per_stage=[1] * 96),  # --account-for-embedding/loss-in-pipeline-split: 96 / 96
        dict(ZOO_JOB, moe_dispatcher="alltoall"), tokens_per_gpu_s=2048 * 4096 / (24.2 * 256),
        unstated_router_cv=QWEN3_ROUTER_CV,
        notes="alltoall dispatcher; the embedding and the loss each count as a layer of the split"),
    Run("zoo-q3-235b-tp4-ep8-h100", ZOO_QWEN3 + " (intra-node EP, TP4, 29.0 s)", MODELS["qwen3-235b-a22b"], 256,
        4096, 2048, dict(tp=4, pp=8, vp=4, dp=8, ep=8, micro_batch=1, sp=True, zero=1, recompute="none",
                         layers_per_stage=ZOO_SPLIT_PP8_VP4),
        dict(ZOO_JOB), tokens_per_gpu_s=2048 * 4096 / (29.0 * 256), unstated_router_cv=QWEN3_ROUTER_CV,
        notes="DeepEP (flex), no recomputation"),
    *[Run(f"zoo-q3-235b-{seq // 1024}k-{'forced' if forced else 'dropless'}-h100",
          ZOO_QWEN3 + f" (Long Context table, {seq // 1024}k: {'forced balance' if forced else 'dropless'})",
          MODELS["qwen3-235b-a22b"], 256, seq, 256,
          dict(tp=4, pp=8, vp=4, cp=cp, dp=8 // cp, ep=8, micro_batch=1, sp=True, zero=1, recompute="moe",
               layers_per_stage=ZOO_SPLIT_PP8_VP4),
          dict(ZOO_JOB, moe_load_cv=0.0 if forced else QWEN3_ROUTER_CV), tflops_per_gpu=tflops,
          sets_router=not forced and seq == 16384,
          notes="recompute modules layernorm and moe (nest: moe); " + (
              "--moe-router-force-load-balancing" if forced else
              f"the checkpoint's router at nest's moe_load_cv {QWEN3_ROUTER_CV}, the value whose forced/dropless "
              "ratio at 16k is the published 1.245 (the other lengths are predictions)"))
      for seq, cp, pair in ((16384, 1, (295, 237)), (32768, 2, (335, 277)), (65536, 4, (368, 320)),
                            (131072, 8, (389, 357)))
      for forced, tflops in ((True, pair[0]), (False, pair[1]))],
    *[Run(f"zoo-mixtral-8x22b-{name}-h100", ZOO_MIXTRAL + f" ({name}: ~{tflops} TFLOP/s)",
          replace(MODELS["mixtral-8x22b"], capacity_factor=1.0 if name == "token-drop" else 0.0), 128, 4096, 256,
          dict(tp=2, pp=8, vp=7, dp=8, ep=8, micro_batch=1, sp=True, zero=1, recompute="none",
               layers_per_stage=[2] + [1] * 54 + [2]),
          dict(overlap_grad_reduce=True, overlap_param_gather=True, tp_comm_overlap=dtype == "bf16",
               moe_load_cv=cv, **({"dtype": "fp8", "fp8_recipe": "blockwise", "fp8_param_gather": True,
                                   "optimizer": OptimizerSpec.of("adam", "fp32", "bf16")} if dtype == "fp8" else {})),
          tflops_per_gpu=tflops, sets_router=name == "dropless",
          notes="alltoall dispatcher, runtime.conf's TP2 PP8 EP8 VPP7; " + {
              "dropless": f"the checkpoint's router at nest's moe_load_cv {MIXTRAL_ROUTER_CV}, the value whose "
                          "step is the published 465/445 of the forced run's",
              "forced": "--moe-router-force-load-balancing",
              "fp8": "--fp8-recipe blockwise --fp8-param-gather, precision-aware optimizer, forced balance",
              "token-drop": "--moe-expert-capacity-factor 1.0 --moe-pad-expert-input-to-capacity"}[name])
      for name, tflops, cv, dtype in (("forced", 465, 0.0, "bf16"), ("dropless", 445, MIXTRAL_ROUTER_CV, "bf16"),
                                      ("fp8", 560, 0.0, "fp8"), ("token-drop", 470, 0.0, "bf16"))],
    Run("mcr-h100-q3-235b", MCR + ", Table 11 (Qwen3-235B, H100, BF16: 320 TFLOP/s, 2132 tokens/s per GPU); "
        "run_h100_235b.sh", MODELS["qwen3-235b-a22b"], 256, 4096, 2048,
        dict(tp=2, pp=8, vp=4, dp=16, ep=32, micro_batch=1, sp=True, zero=1, recompute="layernorm,moe_act",
             layers_per_stage=ZOO_SPLIT_PP8_VP4),
        dict(ZOO_JOB, overlap_moe_expert_parallel_comm=True), tokens_per_gpu_s=2132,
        notes="forced balance, DeepEP, 1F1B EP overlap with delayed wgrad, CUDA graphs of the router and the "
              "dispatch preprocessing (not modelled)"),
    Run("mcr-h100-dsv3", MCR + ", Table 11 (DeepSeek-V3, 1024 H100, FP8 blockwise: 368 TFLOP/s, 1412 tokens/s "
        "per GPU); run_deepseek_v3_h100.sh", MODELS["deepseek-v3"], 1024, 4096, 8192,
        dict(tp=2, pp=8, vp=4, dp=64, ep=64, micro_batch=1, sp=True, zero=1, recompute="mla_up_proj,mlp",
             layers_per_stage=[2] + [2] * 30 + [1]),
        dict(dtype="fp8", fp8_recipe="blockwise", fp8_param_gather=True, overlap_grad_reduce=True,
             overlap_param_gather=True, optimizer=OptimizerSpec.of("adam", "fp32", "bf16"), moe_dispatcher="flex",
             overlap_moe_expert_parallel_comm=True), tokens_per_gpu_s=1412,
        notes="forced balance, DeepEP, 1F1B EP overlap with delayed wgrad, no CUDA graphs, layout Et|(tt|)*30mL, "
              "BF16 Adam moments (precision-aware optimizer)"),
    Run("ps2606-h100-l3-70b-sft", BRIDGE + " (26.06, H100 SFT)", MODELS["llama3-70b"], 32, 4096, 32,
        dict(tp=4, pp=4, vp=5, dp=2, micro_batch=1, sp=True, zero=1, recompute="none",
             layers_per_stage=MEGATRON_SPLIT_80_20), FP8_CS,
        tokens_per_gpu_s=1638, notes="Megatron's default split (llama3_70b_sft_32gpu_h100_fp8cs_config at 067f987)"),
    Run("issue-qwen3-30b-pp2vp24", "the published H100 FP8 run nest issue 17 quotes (PP2 VP24 EP8 MBS2)",
        MODELS["qwen3-30b-a3b"], 16, 4096, 256,
        dict(tp=1, pp=2, vp=24, dp=8, ep=8, micro_batch=2, sp=False, zero=1, recompute="none"), FP8_CS,
        notes="16 GPUs and global batch 256 assumed"),
    Run("tt2412-t4-1", "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Table 4 (2D, compile, Float8)",
        MODELS["llama3-70b"], 256, 8192, 512, dict(tp=8, pp=1, dp=32, micro_batch=16, sp=True, zero=3, recompute="full"),
        dict(dtype="fp8", overlap_grad_reduce=True), preset="dgx-h100-96gb", measured_GiB=71.9,
        kind="max reserved", calibrates=False,
        notes="torchtitan FSDP2, torchao FP8 and torch.compile keep memory unlike Megatron-Core + TE"),
    Run("tt2412-t2-4", "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Table 2 (FSDP + CP 8)",
        MODELS["llama3-8b"], 8, 262144, 1, dict(tp=1, pp=1, dp=1, cp=8, micro_batch=1, sp=False, zero=3,
                                                 recompute="full"),
        dict(dtype="fp8", overlap_grad_reduce=True), preset="dgx-h100-96gb", measured_GiB=84.5,
        kind="max reserved", calibrates=False, notes="as tt2412-t4-1"),
]
# Every MoE run here is dropless (the recipes and the model zoo's configs set no capacity
# factor, nest's presets neither) but the zoo's Mixtral token-drop run.


def cluster(run: Run):
    """The run's cluster; the torchtitan runs used Grand Teton H100s with 96 GB of HBM2e
    (nvidia-smi's total for them is not published: 96 GB taken as stated)."""
    if run.preset == "dgx-h100-96gb":
        base = nest.load_cluster("dgx-h100", devices=run.devices)
        return replace(base, device=replace(base.device, name="h100-96gb", memory_bytes=96e9))
    return nest.load_cluster(run.preset, devices=run.devices)


@dataclass(frozen=True)
class Result:
    run: Run
    fits: bool
    tensors_GiB: float | None  # nest's fullest rank less the reserve
    total_GiB: float | None
    capacity_GiB: float
    reason: str = ""

    @property
    def error(self) -> float | None:
        if self.run.measured_GiB is None or self.tensors_GiB is None:
            return None
        return self.tensors_GiB / self.run.measured_GiB - 1


def evaluate(run: Run) -> Result:
    """nest's memory of the run's configuration (infeasible: ``fits`` False and why)."""
    c = cluster(run)
    job = nest.job_spec(run.model, global_batch=run.global_batch, seq_len=run.seq_len, **run.job)
    capacity = c.device.memory_bytes / GiB
    try:
        plan = nest.evaluate(run.model, c, job, **run.config)
    except nest.InfeasibleError as error:
        return Result(run, False, None, None, capacity, str(error))
    # the rank the statistic was read on, else the fullest
    peak = plan.memory[-1] if "last rank" in run.kind else plan.memory[0] if "rank 0" in run.kind \
        else plan.peak_memory
    return Result(run, True, (peak.total - peak.reserve) / GiB, peak.total / GiB, capacity)


def table(results: list[Result]) -> list[str]:
    lines = ["| run | configuration | measured (GiB) | statistic | nest tensors (GiB) | error | nest total / "
             "capacity (GiB) | fits |", "|---|---|---:|---|---:|---:|---:|---|"]
    for r in results:
        c = r.run.config
        layout = " ".join(f"{k}{c[k]}" for k in ("tp", "pp", "vp", "cp", "ep", "dp") if c.get(k, 1) != 1 or k == "tp")
        layout += f" mbs{c['micro_batch']} z{c['zero']} {c['recompute']} {r.run.job.get('dtype', 'bf16')}"
        measured = "" if r.run.measured_GiB is None else f"{r.run.measured_GiB:.2f}"
        err = "" if r.error is None else f"{100 * r.error:+.1f}%" + ("" if r.run.calibrates else " (not calibrating)")
        mem = "" if r.total_GiB is None else f"{r.tensors_GiB:.2f}"
        total = "" if r.total_GiB is None else f"{r.total_GiB:.1f} / {r.capacity_GiB:.1f}"
        lines.append(f"| {r.run.id} | {r.run.model.name} {r.run.devices} GPUs {layout} | {measured} | "
                     f"{r.run.kind} | {mem} | {err} | {total} | {'yes' if r.fits else 'NO: ' + r.reason[:80]} |")
    return lines


def main() -> int:
    results = [evaluate(run) for run in RUNS]
    lines = ["# Memory fidelity", "", "Generated by `python bench/fidelity/memory_runs.py` (see its docstring).", ""]
    lines += table(results)
    errors = [abs(r.error) for r in results if r.error is not None and r.run.calibrates]
    lines += ["", f"Runs that ran and fit in nest: {sum(r.fits for r in results)} of {len(results)}. "
              f"Calibrating peaks: {len(errors)}, largest |error| {100 * max(errors):.1f}%.", "",
              "Sources and notes:", ""]
    lines += [f"* `{r.id}`: {r.source}" + (f"; {r.notes}" if r.notes else "") for r in RUNS]
    text = "\n".join(lines) + "\n"
    (HERE / "memory_results.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
