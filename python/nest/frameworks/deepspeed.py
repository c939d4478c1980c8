"""DeepSpeed: what it runs and its config JSON.

Rules and keys follow DeepSpeed ``v0.19.5`` (``cf44300``; ``master`` at ``edaa722`` only adds
the ``gradient_allreduce_op`` key). Paths are relative to the DeepSpeed repository.

* Batch: the config gives ``train_micro_batch_size_per_gpu`` and
  ``gradient_accumulation_steps`` and lets DeepSpeed derive ``train_batch_size`` from its own
  data-parallel size (``deepspeed/runtime/config.py DeepSpeedConfig._set_batch_related_parameters``):
  with a ``PipelineModule`` that size is ``world / (pp x tp)`` (``PipelineParallelGrid``), the
  plan's ``dp``; without one it is the whole world, tensor-parallel ranks included
  (AutoTP gives every rank of a TP group the same data), so a ``train_batch_size`` the plan
  wrote would be rejected. The pipeline runs ``gradient_accumulation_steps`` micro-batches
  (``deepspeed/runtime/pipe/engine.py PipelineEngine.__init__``).
* ZeRO: ``zero_optimization.stage`` 0-3; with pipeline parallelism only 0 and 1.
* Pipeline: ``PipelineModule`` takes its split in code (``partition_method``); DeepSpeed reads
  only ``pipe_partitioned``, ``grad_partitioned``, ``use_reentrant`` and
  ``activation_checkpoint_interval`` of the ``pipeline`` section. The plan's exact split is
  in the companion ``nest`` section (ignored by DeepSpeed): the ``parts`` boundaries
  ``PipelineModule._partition_layers`` would set, for a subclass that returns them.
* Recomputation: full is ``pipeline.activation_checkpoint_interval = 1`` (every layer
  checkpointed by ``PipelineModule``) or, without pipelining, the model's own
  ``deepspeed.checkpointing.checkpoint`` of each block; DeepSpeed has no selective
  recomputation.
* Tensor parallelism: AutoTP (``tensor_parallel.autotp_size``, v0.16.4+) without pipelining;
  with a ``PipelineModule`` the model does TP itself (``PipeModelDataParallelTopology``
  ``num_mp``). Neither shards activations like Megatron's sequence parallelism.
* Optimizer offload: ``zero_optimization.offload_optimizer: {device: cpu, pin_memory: true}``
  (ZeRO-Offload; ``deepspeed/runtime/zero/offload_config.py``), the whole state only (the
  ``whole-optimizer-offload`` rule). nest prices it as Megatron's hybrid optimizer with
  everything offloaded (:mod:`nest.cost.offload`): fp32 state on the host, gradients down
  in fp32 (DeepSpeed casts on the GPU) and weights up (nest prices 4 bytes, Megatron's; DeepSpeed
  sends 16 bits), the host Adam on ``job.host_threads`` threads per rank
  (the launcher's ``--bind_cores_to_rank`` sets them).
* Ranks: ``PipeModelDataParallelTopology`` orders axes ``pipe, data, model``: tensor-parallel
  ranks innermost, pipeline outermost (nest's ``tp-cp-ep-dp-pp``); expert-parallel groups are
  runs of consecutive ranks, their expert-data groups every ``ep``-th rank of a stage
  (``deepspeed/utils/groups.py _create_expert_and_data_parallel``, the path without model
  parallelism), nest's MoE folding.
"""

from __future__ import annotations

import json

from ..errors import SpecError
from ..parallel import DEFAULT_ORDER, SpaceLimits
from ..specs import JobSpec, ModelSpec
from .base import WHOLE_LAYERS, Framework, Rule, default_state, narrowed
from .plan_reader import PlanReader

_V = "DeepSpeed v0.19.5"

RULES = (
    Rule("zero-with-pipeline",
         "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism",
         f"{_V} deepspeed/runtime/pipe/engine.py PipelineEngine.__init__",
         lambda m, j, c: (c.pp == 1) | (c.zero <= 1),
         lambda m, j, cand: "zero=1, or pp=1"),
    Rule("no-interleaving",
         "the pipeline engine runs plain 1F1B, one stage per rank",
         f"{_V} deepspeed/runtime/pipe/schedule.py (TrainSchedule only)",
         lambda m, j, c: c.vp == 1,
         lambda m, j, cand: "vp=1"),
    Rule.whole_layer_recompute(
        "activation checkpointing recomputes whole layers (PipelineModule activation_checkpoint_interval, "
        "deepspeed.checkpointing.checkpoint); there is no selective or module recomputation",
        f"{_V} deepspeed/runtime/pipe/module.py PipelineModule.forward"),
    Rule("no-sequence-parallel",
         "DeepSpeed's tensor parallelism (AutoTP, or the model's own with a PipelineModule) does not shard "
         "activations along the sequence",
         f"{_V} deepspeed/runtime/tensor_parallel/config.py TPTrainingConfig",
         lambda m, j, c: ~c.sp,
         lambda m, j, cand: "sp=False"),
    Rule("no-ring-attention",
         "DeepSpeed has no ring attention: its sequence parallelism is Ulysses (all-to-all over heads), "
         "which nest does not price",
         f"{_V} deepspeed/sequence/layer.py DistributedAttention",
         lambda m, j, c: c.cp == 1,
         lambda m, j, cand: "cp=1"),
    Rule("experts-without-tensor-parallel",
         "expert groups are runs of consecutive ranks only without model parallelism",
         f"{_V} deepspeed/utils/groups.py _create_expert_and_data_parallel",
         lambda m, j, c: (c.ep == 1) | (c.tp == 1),
         lambda m, j, cand: "tp=1, or ep=1"),
    Rule.no_expert_tensor_parallel(
        "expert tensor parallelism (MoE(enable_expert_tensor_parallelism=True)) splits experts over the model's "
        "own tensor-parallel group with expert-parallel groups over the data-parallel ranks, not Megatron's "
        "expert grid nest prices",
        f"{_V} deepspeed/moe/layer.py MoE._create_process_groups and deepspeed/utils/groups.py "
        "_create_expert_data_and_model_parallel"),
    Rule("moe-zero3",
         "DeepSpeed's native MoE layers (deepspeed.moe.layer.MoE) do not run under ZeRO-3",
         f"{_V} deepspeed/runtime/engine.py DeepSpeedEngine._validate_zero3_moe_compatibility",
         lambda m, j, c: (c.zero <= 2) | (not m.is_moe),
         lambda m, j, cand: "zero=2"),
    Rule.no_activation_offload(
        "DeepSpeed offloads activations only as cpu_checkpointing: the checkpoints of its own activation "
        "checkpointing API (deepspeed.checkpointing.checkpoint, a full recomputation), not the layer offload "
        "nest prices",
        f"{_V} deepspeed/runtime/activation_checkpointing/checkpointing.py (CPU_CHECKPOINT) and config.py"),
    Rule("whole-optimizer-offload",
         "offload_optimizer moves the whole optimizer state with ZeRO-1/2; a part (ratio < 1) only with ZeRO-3, "
         "split by sub-groups of sub_group_size elements (one sub-group when a rank holds fewer: all of it), "
         "which nest does not emit",
         f"{_V} deepspeed/runtime/zero/offload_config.py DeepSpeedZeroOffloadOptimizerConfig.ratio and "
         "deepspeed/runtime/zero/config.py DeepSpeedZeroConfig.offload_ratio_check",
         lambda m, j, c: (c.offload == 0) | (c.offload == 1),
         lambda m, j, cand: "optimizer_offload=1, or optimizer_offload=0"),
    Rule.fixed_order("ranks are placed pipe-data-model (tensor parallel innermost, pipeline outermost)",
                     f"{_V} deepspeed/runtime/pipe/topology.py PipeModelDataParallelTopology"),
    Rule("overlap-needs-zero",
         "gradient reduction overlaps the backward only in ZeRO (zero_optimization.overlap_comm)",
         f"{_V} deepspeed/runtime/zero/config.py DeepSpeedZeroConfig.overlap_comm",
         lambda m, j, c: (c.zero >= 1) | (not j.overlap_grad_reduce),
         lambda m, j, cand: "zero=1"),
)


class DeepSpeed(Framework):
    """DeepSpeed (see the module docstring)."""

    name = "deepspeed"
    version = _V
    rules = RULES

    def limits(self, limits: SpaceLimits, model: ModelSpec, job: JobSpec) -> SpaceLimits:
        return narrowed(limits, vp=(1,), cp=(1,), sp=(False,), rank_orders=(DEFAULT_ORDER,),
                        recompute=WHOLE_LAYERS, etp=(1,))

    def job_errors(self, model: ModelSpec, job: JobSpec) -> None:
        default_state(self.name, _V, job)
        if job.dtype == "fp8":
            raise SpecError(f"framework = deepspeed: job.dtype = fp8: DeepSpeed's config has no FP8 training "
                            f"({_V} deepspeed/runtime/precision_config.py: bf16 and fp16); closest expressible: "
                            "dtype=bf16")
        for switch in ("overlap_param_gather", "tp_comm_overlap", "overlap_moe_expert_parallel_comm"):
            if getattr(job, switch):
                raise SpecError(f"framework = deepspeed: job.{switch} = True: no DeepSpeed config key has this "
                                f"meaning ({_V} deepspeed/runtime/zero/config.py); closest expressible: "
                                f"{switch}=False")

        if job.moe_dispatcher != "alltoall" and model.is_moe:
            raise SpecError(f"framework = deepspeed: job.moe_dispatcher = {job.moe_dispatcher}: DeepSpeed's MoE "
                            f"layer sends every routed copy with one all-to-all ({_V} deepspeed/moe/sharded_moe.py "
                            "_AllToAll); closest expressible: moe_dispatcher=alltoall")

    def launch(self, p: PlanReader) -> str:
        """The DeepSpeed config JSON, with the plan's split and degrees in a ``nest``
        section DeepSpeed ignores (the top level accepts unknown keys)."""
        arch = p.architecture()
        config = {
            "train_micro_batch_size_per_gpu": p.micro_batch,
            "gradient_accumulation_steps": p.num_microbatches,
            "gradient_clipping": 1.0,  # DeepSpeed's default since v0.19.3, written out
            "zero_optimization": {"stage": p.zero},
            "bf16": {"enabled": p.dtype == "bf16"},
            "fp16": {"enabled": p.dtype == "fp16"},
        }
        if p.zero >= 1:
            config["zero_optimization"]["overlap_comm"] = p.job_spec.overlap_grad_reduce
        if p.offload > 0:  # ZeRO-Offload: the optimizer state and its step on the host
            config["zero_optimization"]["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        if p.tp > 1 and p.pp == 1:
            config["tensor_parallel"] = {"autotp_size": p.tp}
        if p.pp > 1:
            config["pipeline"] = {"activation_checkpoint_interval": 1 if p.recompute == "full" else 0}
        parts = [0]
        for stage in p.virtual:
            parts.append(parts[-1] + len(stage))
        config["nest"] = {
            "note": "for the launcher and the model code; DeepSpeed ignores this section",
            "global_batch": p.global_batch, "data_parallel": p.dp, "seq_len": p.seq_len, "dtype": p.dtype,
            "optimizer": p.job_spec.optimizer.name, "recompute": p.recompute,
            "pipeline": {"num_stages": p.pp, "parts": parts, "blocks_per_stage": p.block_counts(),
                         "first_layer": [s[0] for s in p.virtual], "last_layer": [s[-1] for s in p.virtual],
                         "topology": f"PipeModelDataParallelTopology(num_pp={p.pp}, num_mp={p.tp}, "
                                     f"num_dp={p.dp})"},
            "tensor_parallel": p.tp, "expert_parallel": p.ep,
            "moe": ({"num_experts": arch["num_experts"], "ep_size": p.ep, "k": arch["experts_per_token"],
                     "capacity_factor": arch["capacity_factor"], "drop_tokens": bool(arch["capacity_factor"])}
                    if arch["num_experts"] else None),
            "architecture": {k: arch[k] for k in ("num_layers", "hidden", "ffn_hidden", "num_heads", "num_kv_heads",
                                                  "vocab_size", "mlp", "norm", "position_embedding",
                                                  "tied_embeddings", "bias")},
        }
        return json.dumps(config, indent=2) + "\n"


__all__ = ["DeepSpeed", "RULES"]
