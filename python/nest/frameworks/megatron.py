"""Megatron-LM / Megatron-Core: what it runs and its launch arguments.

Rules and flags follow Megatron-LM at ``core_v0.14.0`` (checked against ``main`` at
``d98e8a6``, 0.20.0.dev; differences noted where they matter). Paths are relative to the
Megatron-LM repository.

What the plan's settings become:

* ZeRO-0: data-parallel all-reduce (no flag); ZeRO-1: ``--use-distributed-optimizer``
  (fp32 main weights and Adam state sharded, full bf16 weights and fp32 gradients kept:
  ``megatron/core/distributed/param_and_grad_buffer.py``); ZeRO-2 / ZeRO-3: Megatron-FSDP,
  ``--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads|optim_grads_params
  --use-distributed-optimizer --no-gradient-accumulation-fusion --ckpt-format fsdp_dtensor``
  as ``docs/source/api-guide/custom_fsdp.md`` and the functional test
  ``gpt3_mr_mcore_te_tp2_zp_z3_resume_fsdp_dtensor_dgx_a100_1N8G`` (core_v0.14.0) run it.
* The split: ``--pipeline-model-parallel-layout`` whenever ``pp > 1``, one ``|``-separated
  group per virtual stage in model order (``E`` the embedding, ``t`` a block, ``L`` the
  output layer and loss after an ``m`` per multi-token prediction module, which must share
  the last stage with the loss, ``validate_layer_layout``;
  ``megatron/core/transformer/pipeline_parallel_layer_layout.py``),
  which expresses any split, interleaved or not: stage ``i`` runs on pipeline rank
  ``i mod pp`` as chunk ``i // pp``, exactly the order of nest's virtual stages. The layout
  excludes ``--num-virtual-stages-per-pipeline-rank`` (``validate_args``).
* Interleaving needs ``pp > 1`` and a micro-batch count that is a multiple of ``pp``
  (``megatron/core/pipeline_parallel/schedules.py forward_backward_pipelining_with_interleaving``,
  ``microbatch_group_size_per_vp_stage = pp``): nest's own interleaved schedule requires
  the same of every candidate, so it needs no rule here.
* Recomputation: selective is ``--recompute-granularity selective`` (its default module
  ``core_attn``: the attention core), a module set ``--recompute-granularity selective
  --recompute-modules ...`` (``moe_act`` needs the grouped GEMM nest emits); full is
  ``--recompute-granularity full --recompute-method uniform --recompute-num-layers 1``
  (every layer keeps only its input).
* Activation offload: ``--cpu-offloading-num-layers N`` (Megatron-LM main, where the flag
  comes from ``TransformerConfig.cpu_offloading_num_layers`` and sets ``cpu_offloading``,
  ``megatron/training/arguments.py``; core_v0.14.0 sets it only through TransformerConfig),
  on one pipeline stage without recomputation (``TransformerConfig.__post_init__``, which
  nest applies to every framework), priced by :mod:`nest.cost.activation_offload`.
* Optimizer offload: ``--optimizer-cpu-offload --optimizer-offload-fraction F
  --overlap-cpu-optimizer-d2h-h2d`` with ``--use-precision-aware-optimizer`` (the hybrid
  device optimizer runs its code path; it needs the distributed optimizer, ZeRO-1;
  ``megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py``), priced by
  :mod:`nest.cost.offload`; the host optimizer runs on ``job.host_threads`` threads
  (``OMP_NUM_THREADS``, one under torchrun by default).
* The rank order ``tp-cp-ep-dp-pp`` is Megatron's default, ``tp-cp-ep-pp-dp`` is
  ``--use-tp-pp-dp-mapping`` (``megatron/training/initialize.py _initialize_distributed``);
  experts fold into a stage's ranks as the grid ``etp x ep x expert_dp`` with
  ``--expert-tensor-parallel-size etp`` (always emitted for MoE models: its default is
  ``tp``, ``validate_args``), whose ranks ``megatron/core/parallel_state.py
  initialize_model_parallel`` generates from the same order string with ``tp`` the expert
  TP degree (the expert ``RankGenerator``): expert TP innermost, nest's expert grid.
* Architecture, batch and precision flags come from the model and the job (FP8:
  ``--fp8-format hybrid --fp8-recipe <job.fp8_recipe>``, ``delayed`` Megatron's default,
  named; FP8 weights ``--fp8-param-gather``, under ``mxfp8`` with
  ``--reuse-grad-buf-for-mxfp8-param-ag``, the zoo's pairing:
  yanring/Megatron-MoE-ModelZoo e865051 ``sbatch_benchmarking.sh``).

Megatron-LM requires ``CUDA_DEVICE_MAX_CONNECTIONS=1`` with tensor or context parallelism
on GPUs before Blackwell, and forbids it with Megatron-FSDP (``validate_args``):
:meth:`Megatron.notes` says which.
"""

from __future__ import annotations

import numpy as np

from ..errors import SpecError
from ..parallel import DEFAULT_ORDER, RECOMPUTE_MODES, SpaceLimits, ep_overlap_allowed, recompute_modules
from ..specs import JobSpec, ModelSpec
from .base import Columns, Framework, Rule, expressed_order, narrowed, same_layout
from .plan_reader import PlanReader

PP_LAST = "tp-cp-ep-pp-dp"
"""The order of ``--use-tp-pp-dp-mapping``."""

ORDERS = (DEFAULT_ORDER, PP_LAST)
"""The rank orders Megatron-LM can set up (``_initialize_distributed``)."""

_V014 = "Megatron-LM core_v0.14.0"


def _expert_tp_times_ep_is_tp_times_cp(model: ModelSpec, c: Columns) -> np.ndarray:
    """``etp x ep == tp x cp`` of Megatron's two rank grids (then the expert data-parallel
    size is the data-parallel one): a MoE model's ``--expert-tensor-parallel-size``; a
    dense model has ``ep = 1`` and Megatron's default ``etp = tp``."""
    return c.ep * c.etp == c.tp * c.cp if model.is_moe else c.cp == 1


RULES = (
    Rule("fsdp-without-pipeline",
         "ZeRO-2/3 is Megatron-FSDP, which runs with tensor, expert and context parallelism but not with "
         "pipeline parallelism",
         f"{_V014} docs/source/api-guide/custom_fsdp.md (compatible: TP, EP, CP; no functional test with PP)",
         lambda m, j, c: (c.zero < 2) | (c.pp == 1),
         lambda m, j, cand: "zero=1 (--use-distributed-optimizer), or pp=1"),
    Rule("rank-order",
         "Megatron-LM places ranks in tp-cp-ep-dp-pp order, or tp-cp-ep-pp-dp with --use-tp-pp-dp-mapping",
         f"{_V014} megatron/training/initialize.py _initialize_distributed",
         lambda m, j, c: same_layout(c, ORDERS),
         lambda m, j, cand: f"rank_order={DEFAULT_ORDER}"),
    Rule("tp-pp-dp-mapping",
         "with --use-tp-pp-dp-mapping and pp > 1 the attention and MoE layers need the same data-parallel size "
         "(expert TP x EP = TP x CP)",
         f"{_V014} megatron/core/parallel_state.py initialize_model_parallel (\"When not using pp-last rank "
         "ordering, the data parallel size of the attention and moe layers must be the same\")",
         lambda m, j, c: same_layout(c, (DEFAULT_ORDER,)) | (c.pp == 1) | _expert_tp_times_ep_is_tp_times_cp(m, c),
         lambda m, j, cand: f"rank_order={DEFAULT_ORDER}"),
    Rule("flex-dispatcher-needs-expert-ranks",
         "the flex token dispatcher (DeepEP) runs over an expert-TP x EP group of more than one rank",
         f"{_V014} megatron/core/transformer/moe/token_dispatcher.py MoEFlexTokenDispatcher.__init__ (\"Flex "
         "token dispatcher requires TPxEP > 1\", the expert-TP size times the EP size)",
         lambda m, j, c: (c.ep * c.etp > 1) | (j.moe_dispatcher != "flex") | (not m.is_moe),
         lambda m, j, cand: "an expert-parallel degree ep > 1 (or expert TP etp > 1), or moe_dispatcher=alltoall"),
    Rule("moe-tensor-parallel-needs-sp",
         "MoE layers with tensor parallelism need sequence parallelism",
         f"{_V014} megatron/core/transformer/moe/moe_layer.py MoELayer.forward",
         lambda m, j, c: ~((c.tp > 1) & ~c.sp) | (not m.is_moe),
         lambda m, j, cand: "sp=True"),
    Rule("precision-aware-optimizer",
         "16- and 8-bit Adam moments are the precision-aware optimizer's, which runs with the distributed "
         "optimizer only",
         f"{_V014} megatron/core/optimizer/optimizer_config.py OptimizerConfig.__post_init__",
         lambda m, j, c: (c.zero >= 1) | (j.optimizer.state_dtype == "fp32"),
         lambda m, j, cand: "zero=1 (--use-distributed-optimizer), or --optimizer-state-dtype fp32"),
    Rule("fp8-param-gather",
         "FP8 weights (--fp8-param-gather) need the distributed optimizer or Megatron-FSDP",
         f"{_V014} megatron/training/arguments.py validate_args",
         lambda m, j, c: (c.zero >= 1) | (not j.fp8_param_gather),
         lambda m, j, cand: "zero=1 (--use-distributed-optimizer)"),
    Rule("mxfp8-weights-distributed-optimizer",
         "MXFP8 weights (--fp8-param-gather with --fp8-recipe mxfp8) are priced as the distributed optimizer keeps "
         "them: gathered in bf16 into the gradient buffer it shares with them, then cast; Megatron-FSDP's path for "
         "them is not priced",
         f"{_V014} megatron/core/distributed/param_and_grad_buffer.py _ParamAndGradBuffer.__init__ (shared_buffer, "
         "use_distributed_optimizer), distributed_data_parallel.py start_param_sync; main d98e8a6 "
         "megatron/training/arguments.py validate_args turns the shared buffer off under Megatron-FSDP (\"not "
         "relevant or supported for Megatron-FSDP\")",
         lambda m, j, c: (c.zero == 1) | (not j.fp8_param_gather) | (j.fp8_recipe != "mxfp8"),
         lambda m, j, cand: "zero=1 (--use-distributed-optimizer), or fp8_param_gather=False"),
    Rule("optimizer-offload-distributed-optimizer",
         "optimizer offload (--optimizer-cpu-offload) needs --use-precision-aware-optimizer, which runs with the "
         "distributed optimizer only; Megatron-FSDP does not offload the optimizer",
         f"{_V014} megatron/training/arguments.py validate_args and megatron/core/optimizer/optimizer_config.py "
         "OptimizerConfig.__post_init__; main d98e8a6 fully_sharded_optimizer.py _validate_config",
         lambda m, j, c: (c.offload == 0) | (c.zero == 1),
         lambda m, j, cand: "zero=1 (--use-distributed-optimizer), or optimizer_offload=0"),
    Rule("context-parallel-sequence",
         "with context parallelism the sequence is a multiple of 2 x cp",
         f"{_V014} megatron/training/arguments.py validate_args",
         lambda m, j, c: (c.cp == 1) | (j.seq_len % (2 * c.cp) == 0),
         lambda m, j, cand: "a context-parallel degree cp with seq_len % (2 cp) == 0"),
)


class Megatron(Framework):
    """Megatron-LM (see the module docstring)."""

    name = "megatron"
    version = f"{_V014} (rules checked against main d98e8a6)"
    rules = RULES

    def limits(self, limits: SpaceLimits, model: ModelSpec, job: JobSpec) -> SpaceLimits:
        return narrowed(limits, rank_orders=ORDERS)

    def job_errors(self, model: ModelSpec, job: JobSpec) -> None:
        if job.optimizer.state_dtype is None:
            opt = job.optimizer
            raise SpecError(f"framework = megatron: job.optimizer = {opt.grad_bytes}/{opt.master_bytes}/"
                            f"{opt.state_bytes} bytes (gradient/master/state): not a layout Megatron-Core has "
                            f"({_V014} megatron/core/optimizer/optimizer_config.py); closest expressible: "
                            "--grad-dtype fp32|bf16 with --optimizer-state-dtype fp32|bf16|fp8")
        if job.overlap_param_gather and not job.overlap_grad_reduce:
            raise SpecError("framework = megatron: --overlap-param-gather needs --overlap-grad-reduce "
                            f"({_V014} megatron/training/arguments.py validate_args)")
        if model.mtp_layers and model.position_embedding != "rope":
            raise SpecError(f"framework = megatron: model.mtp_layers = {model.mtp_layers}: multi-token prediction "
                            f"runs with rotary positions only ({_V014} megatron/training/arguments.py validate_args); "
                            "closest expressible: mtp_layers=0")
        if model.mtp_layers > 1 and job.overlap_moe_expert_parallel_comm and model.is_moe:
            raise SpecError(f"framework = megatron: model.mtp_layers = {model.mtp_layers}: the EP overlap "
                            f"(--overlap-moe-expert-parallel-comm) runs with one MTP module at most ({_V014} "
                            "megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__); "
                            "closest expressible: overlap_moe_expert_parallel_comm=False")
        if model.position_embedding == "learned" and job.seq_len > model.max_position:
            raise SpecError(f"framework = megatron: seq_len = {job.seq_len}: more than the model's "
                            f"{model.max_position} positions ({_V014} validate_args: max_position_embeddings >= "
                            "seq_length)")

    def launch(self, p: PlanReader) -> str:
        """Megatron-LM arguments, one option (and its value) per line, no quoting needed:
        ``torchrun ... pretrain_gpt.py $(cat args) --data-path ... --tokenizer-type ...``."""
        lines: list[str] = []
        add = lambda flag, value=None: lines.append(flag if value is None else f"{flag} {value}")  # noqa: E731
        self._architecture(p, add)
        add("--micro-batch-size", p.micro_batch)
        add("--global-batch-size", p.global_batch)
        job = p.job_spec
        dtype = job.dtype
        if dtype in ("bf16", "fp8"):
            add("--bf16")
        elif dtype == "fp16":
            add("--fp16")
        if dtype == "fp8":
            add("--fp8-format", "hybrid")
            add("--fp8-recipe", job.fp8_recipe)
        opt = job.optimizer
        add("--optimizer", opt.name)
        if opt.grad_dtype == "bf16":
            add("--grad-reduce-in-bf16")
        if opt.state_dtype != "fp32" or p.offload > 0:
            add("--use-precision-aware-optimizer")  # the hybrid device optimizer runs its code path
        if opt.state_dtype != "fp32":  # 16-bit moments as bf16 (OptimizerSpec.state_dtype)
            add("--exp-avg-dtype", opt.state_dtype)
            add("--exp-avg-sq-dtype", opt.state_dtype)
        if p.act_offload > 0:  # main's flag (TransformerConfig.cpu_offloading_num_layers; see notes)
            add("--cpu-offloading-num-layers", p.act_offload)
        if p.offload > 0:  # nest.cost.offload prices the pipelined copies of the overlap flag
            add("--optimizer-cpu-offload")
            add("--optimizer-offload-fraction", f"{p.offload:g}")
            add("--overlap-cpu-optimizer-d2h-h2d")
        if job.fp8_param_gather:
            add("--fp8-param-gather")
            if job.fp8_recipe == "mxfp8":
                # the parameter buffer is the gradient buffer's bf16 view, each weight cast
                # to MXFP8 after its gather: what nest prices (Scenario.gather_bytes)
                add("--reuse-grad-buf-for-mxfp8-param-ag")
        add("--tensor-model-parallel-size", p.tp)
        add("--pipeline-model-parallel-size", p.pp)
        if p.cp > 1:
            add("--context-parallel-size", p.cp)
        if p.sp:
            add("--sequence-parallel")
        if p.architecture()["num_experts"]:
            add("--expert-model-parallel-size", p.ep)
            add("--expert-tensor-parallel-size", p.etp)
        if expressed_order({"tp": p.tp, "cp": p.cp, "dp": p.dp, "pp": p.pp}, p.order, ORDERS) == PP_LAST:
            add("--use-tp-pp-dp-mapping")
        if p.zero == 1:
            add("--use-distributed-optimizer")
        elif p.zero in (2, 3):
            add("--use-megatron-fsdp")
            add("--data-parallel-sharding-strategy", "optim_grads" if p.zero == 2 else "optim_grads_params")
            add("--use-distributed-optimizer")
            add("--no-gradient-accumulation-fusion")
            add("--ckpt-format", "fsdp_dtensor")
        if p.pp > 1:
            add("--pipeline-model-parallel-layout", "|".join(p.stage_codes()))
        if p.recompute == "selective":
            add("--recompute-granularity", "selective")  # its default module, core_attn
        elif p.recompute not in ("none", "full"):
            add("--recompute-granularity", "selective")
            add("--recompute-modules", " ".join(sorted(recompute_modules(p.recompute))))
        elif p.recompute == "full":
            add("--recompute-granularity", "full")
            add("--recompute-method", "uniform")
            add("--recompute-num-layers", 1)
        if job.overlap_grad_reduce:
            add("--overlap-grad-reduce")
        if job.overlap_param_gather and p.zero >= 1:  # ZeRO-0 gathers nothing
            add("--overlap-param-gather")
        if job.tp_comm_overlap and p.tp > 1:  # without TP there is nothing to overlap
            add("--tp-comm-overlap")
        # only where Megatron runs (and nest priced) the combined 1F1B: elsewhere the flag
        # is rejected by TransformerConfig or would change nothing
        if (job.overlap_moe_expert_parallel_comm and p.architecture()["num_experts"]
                and ep_overlap_allowed(p.ep, p.pp, p.vp, RECOMPUTE_MODES.index(p.recompute))):
            add("--overlap-moe-expert-parallel-comm")
        return "\n".join(lines)

    @staticmethod
    def _architecture(p: PlanReader, add) -> None:
        m = p.architecture()
        add("--num-layers", m["num_layers"])
        add("--hidden-size", m["hidden"])
        add("--ffn-hidden-size", m["ffn_hidden"])
        add("--num-attention-heads", m["num_heads"])
        if m["kv_lora_rank"]:
            add("--multi-latent-attention")
            if m["q_lora_rank"]:
                add("--q-lora-rank", m["q_lora_rank"])
            add("--kv-lora-rank", m["kv_lora_rank"])
            add("--qk-head-dim", m["qk_nope_head_dim"])
            add("--qk-pos-emb-head-dim", m["qk_rope_head_dim"])
            add("--v-head-dim", m["v_head_dim"])
        else:
            if m["num_kv_heads"] != m["num_heads"]:
                add("--group-query-attention")
                add("--num-query-groups", m["num_kv_heads"])
            add("--kv-channels", m["attention_head_dim"] or m["hidden"] // m["num_heads"])
        add("--seq-length", p.seq_len)
        add("--max-position-embeddings", max(m["max_position"], p.seq_len) if m["position_embedding"] == "rope"
            else m["max_position"])
        add("--position-embedding-type", "rope" if m["position_embedding"] == "rope" else "learned_absolute")
        add("--normalization", "RMSNorm" if m["norm"] == "rmsnorm" else "LayerNorm")
        if m["mlp"] == "swiglu":
            add("--swiglu")
        if not m["tied_embeddings"]:
            add("--untie-embeddings-and-output-weights")
        if not m["bias"]:
            add("--disable-bias-linear")
        if not m["dropout"]:
            add("--hidden-dropout", 0)
            add("--attention-dropout", 0)
        add("--vocab-size", m["vocab_size"])
        if m.get("mtp_layers"):
            add("--mtp-num-layers", m["mtp_layers"])
        if not p.job_spec.flash_attention:
            add("--attention-backend", "unfused")
        if m["num_experts"]:
            add("--num-experts", m["num_experts"])
            add("--moe-router-topk", m["experts_per_token"])
            add("--moe-ffn-hidden-size", m["moe_ffn_hidden"])
            if m["num_shared_experts"]:
                add("--moe-shared-expert-intermediate-size", m["num_shared_experts"] * m["moe_ffn_hidden"])
            pattern = [int(i >= m["first_dense_layers"] and (i - m["first_dense_layers"]) % m["moe_layer_interval"] == 0)
                       for i in range(m["num_layers"])]
            add("--moe-layer-freq", "[" + ",".join(map(str, pattern)) + "]")
            if p.job_spec.moe_dispatcher == "flex":  # DeepEP (the flag core_v0.14.0 and main both accept)
                add("--moe-token-dispatcher-type", "flex")
                add("--moe-enable-deepep")
            else:
                add("--moe-token-dispatcher-type", "alltoall")
            add("--moe-grouped-gemm")
            if m["capacity_factor"]:
                add("--moe-expert-capacity-factor", m["capacity_factor"])
                if p.job_spec.moe_dispatcher != "flex":  # flex does not pad (nest's price neither)
                    add("--moe-pad-expert-input-to-capacity")

    def notes(self, plan: dict) -> list[str]:
        """What the launch needs besides the arguments (environment variables)."""
        p = PlanReader(plan)
        blackwell = any(name in str(plan.get("cluster", {}).get("device", "")) for name in ("b200", "b100", "gb200"))
        notes = []
        if p.zero >= 2:
            notes.append("unset CUDA_DEVICE_MAX_CONNECTIONS (Megatron-FSDP requires it unset or > 1)")
        elif (p.tp > 1 or p.cp > 1) and not blackwell:
            notes.append("export CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron-LM requires it for tensor or context "
                         "parallelism before Blackwell)")
        threads = p.job_spec.host_threads
        if p.act_offload > 0:
            notes.append("--cpu-offloading-num-layers is Megatron-LM main's (d98e8a6: generated from TransformerConfig, "
                         "it sets cpu_offloading); core_v0.14.0's command line has no flag for it: set "
                         f"TransformerConfig(cpu_offloading=True, cpu_offloading_num_layers={p.act_offload}) there "
                         "(Megatron-Bridge: model.cpu_offloading_num_layers). "
                         + ("nest priced Transformer Engine >= 2.10's default offload (v2): do not set "
                            "NVTE_CPU_OFFLOAD_V1" if p.job_spec.activation_offload_handler == "v2" else
                            "With Transformer Engine >= 2.10 export NVTE_CPU_OFFLOAD_V1=1: nest prices TE 2.7's "
                            "handler, which 2.10 keeps as its v1 path"))
        if p.offload > 0:
            notes.append(f"export OMP_NUM_THREADS={threads} (the host optimizer's threads per rank, as nest priced "
                         "them; torchrun sets 1 when it starts several processes per node)")
        return notes


__all__ = ["Megatron", "ORDERS", "PP_LAST", "RECOMPUTE_MODES", "RULES"]
