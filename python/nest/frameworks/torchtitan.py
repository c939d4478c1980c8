"""torchtitan: what it runs and its command line.

Rules and options follow torchtitan ``0.3.0`` (the PyPI release; ``release/0.3`` at
``4f9e9a4``), whose job is a Python config function of a model's config registry chosen
with ``--module`` and ``--config``, overridden on the command line
(``torchtitan/config/manager.py ConfigManager._load_config``; TOML job files are gone).
The model's architecture is that function's (``Trainer.Config.model_spec`` is not on the
command line), so nest launches the registry models whose architecture equals the plan's
(:data:`REGISTRY`). Paths are relative to the torchtitan repository.

* Ranks: the device mesh is ``pp, dp_replicate, dp_shard, cp, tp`` outermost first
  (``torchtitan/distributed/parallel_dims.py ParallelDims.build_mesh``): tensor-parallel
  ranks innermost, pipeline outermost, experts carved from the innermost ranks of
  ``dp_shard x cp x tp``: nest's ``tp-cp-ep-dp-pp`` with MoE folding, and no other order.
* Data parallelism: ZeRO-0 is ``data_parallel_replicate_degree = dp`` (shard degree 1),
  ZeRO-3 ``data_parallel_shard_degree = dp`` with ``fsdp_reshard_after_forward = always``
  (weights gathered before each layer's forward and backward, gradients reduce-scattered
  per micro-batch: ``torchtitan/distributed/fsdp.py apply_fsdp_to_decoder``). Gradients
  are reduced by FSDP2's post-backward hooks during the backward, so the job must say so
  (``--overlap-grad-reduce``).
* Pipeline: ``1F1B`` (one stage per rank) or ``Interleaved1F1B``; the split is torchtitan's
  own (``torchtitan/distributed/pipeline_parallel.py _generate_llm_fqn_per_model_part``,
  with ``pipeline_parallel_first_stage_less_layers`` / ``last_stage_less_layers`` and, for
  more than two stages per rank, ``pipeline_parallel_layers_per_stage``): nest chooses
  among those splits (:meth:`Torchtitan.splits`) instead of the stage DP's.
  ``ScheduleInterleaved1F1B`` needs a micro-batch count that is a multiple of ``pp``, as
  nest's own interleaved schedule does of every candidate.
* Batch: ``training.local_batch_size`` is a data-parallel rank's samples per
  gradient-accumulation step (``torchtitan/trainer.py``): with pipelining ``m x b`` (the
  pipeline's ``local_batch_size // pipeline_parallel_microbatch_size`` micro-batches),
  without it ``b`` (``global / (b x dp)`` accumulation steps).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..errors import SpecError
from ..parallel import DEFAULT_ORDER, SpaceLimits
from ..specs import JobSpec, ModelSpec
from .base import WHOLE_LAYERS, Framework, Rule, default_state, member, narrowed
from .plan_reader import PlanReader

_V = "torchtitan 0.3.0"

# the 0.3.0 registry has no multi-token prediction (its deepseek_v3_671b none; MTP came after)
_DECODER = dict(mlp="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False, position_embedding="rope",
                encoder_head=False, causal=True, moe_layer_interval=1, mtp_layers=0)

REGISTRY = (
    # (--module, --config, the architecture of its model_spec: ModelSpec fields)
    ("llama3", "llama3_debugmodel", dict(num_layers=6, hidden=256, num_heads=16, num_kv_heads=16, ffn_hidden=768,
                                         vocab_size=2048, num_experts=0)),
    ("llama3", "llama3_8b", dict(num_layers=32, hidden=4096, num_heads=32, num_kv_heads=8, ffn_hidden=14336,
                                 vocab_size=128256, num_experts=0)),
    ("llama3", "llama3_70b", dict(num_layers=80, hidden=8192, num_heads=64, num_kv_heads=8, ffn_hidden=28672,
                                  vocab_size=128256, num_experts=0)),
    ("qwen3", "qwen3_30b_a3b", dict(num_layers=48, hidden=2048, num_heads=32, num_kv_heads=4, attention_head_dim=128,
                                    vocab_size=151936, num_experts=128, experts_per_token=8, moe_ffn_hidden=768,
                                    num_shared_experts=0, first_dense_layers=0)),
    ("deepseek_v3", "deepseek_v3_671b", dict(num_layers=61, hidden=7168, num_heads=128, vocab_size=129280,
                                             ffn_hidden=18432, num_experts=256, experts_per_token=8,
                                             moe_ffn_hidden=2048, num_shared_experts=1, first_dense_layers=3,
                                             q_lora_rank=1536, kv_lora_rank=512, qk_rope_head_dim=64,
                                             qk_nope_head_dim=128, v_head_dim=128)),
)
"""Registry configs of torchtitan 0.3.0 (``torchtitan/models/<module>/config_registry.py``
and the flavors of ``torchtitan/models/<module>/__init__.py``) with the architecture
fields they fix (besides the decoder fields all share). ``llama3_405b`` is left out: its
model_spec converts the linears to Float8 (``Float8LinearConverter``) and compiles with
async TP, which the command line cannot undo, so it would not run the bf16 plan nest priced."""


def registry_entry(arch: dict) -> tuple[str, str] | None:
    """``(--module, --config)`` of the registry model with this architecture, or None.
    torchtitan's experts are dropless (token choice, grouped GEMM), which nest prices as a
    capacity factor of at most 1."""
    if any(arch.get(k) != v for k, v in _DECODER.items()) or arch.get("capacity_factor", 0) > 1:
        return None
    for module, config, fields in REGISTRY:
        if all(arch.get(k) == v for k, v in fields.items()):
            return module, config
    return None


def generated_split(num_layers: int, stages: int, first_less: int, last_less: int) -> list[int] | None:
    """Layer-graph nodes per stage of ``_generate_llm_fqn_per_model_part`` (the embedding
    with the first stage's blocks, the last stage's blocks with norm and output), or None
    when torchtitan rejects the weights (a stage would be empty or the weights exceed the
    smallest stage)."""
    if stages == 1:
        return [num_layers + 2]
    effective = num_layers + first_less + last_less
    per, extra = divmod(effective, stages)
    if stages > effective or per == 0 or first_less > per or last_less > per:
        return None
    blocks, left = [], num_layers
    for k in range(stages):
        share = per + (k < extra) - (first_less if k == 0 else last_less if k == stages - 1 else 0)
        take = min(max(share, 0), left)
        blocks.append(take)
        left -= take
    if left or min(blocks[1:-1], default=1) == 0:
        return None
    nodes = list(blocks)
    nodes[0] += 1
    nodes[-1] += 1
    return nodes


def layers_per_stage(num_layers: int, stages: int, pp: int, first_less: int, last_less: int) -> int | None | bool:
    """The ``pipeline_parallel_layers_per_stage`` that gives ``stages`` virtual stages
    (``_get_pipeline_metadata``: ``ceil((layers + weights) / L)``); None when the default
    gives them (1 or 2 per rank); False when no value does."""
    if stages in (pp, 2 * pp):
        return None
    effective = num_layers + first_less + last_less
    # ceil(effective / value) only falls as value grows, and is at most ``stages`` from
    # this value on: the smallest value that can give them
    value = -(-effective // stages)
    return value if -(-effective // value) == stages else False


@lru_cache(maxsize=256)
def _splits(layers: int, pp: int, vp: int) -> tuple:
    stages, out, seen = pp * vp, [], set()
    first = 0
    while first <= layers and first <= (2 * layers + first) // stages:  # a weight above the smallest stage is refused
        last = 0
        while last <= layers and last <= (layers + first + last) // stages:
            nodes = generated_split(layers, stages, first, last)
            per_stage = layers_per_stage(layers, stages, pp, first, last) if nodes is not None else False
            if nodes is not None and per_stage is not False and tuple(nodes) not in seen:
                seen.add(tuple(nodes))
                out.append((nodes, {"pipeline_parallel_first_stage_less_layers": first,
                                    "pipeline_parallel_last_stage_less_layers": last,
                                    "pipeline_parallel_layers_per_stage": per_stage}))
            last += 1
        first += 1
    return tuple(out)


RULES = (
    Rule.fixed_order("the device mesh is pp, dp_replicate, dp_shard, cp, tp (tensor parallel innermost)",
                     f"{_V} torchtitan/distributed/parallel_dims.py ParallelDims.build_mesh"),
    Rule("fsdp",
         "data parallelism replicates (ZeRO-0) or shards with fully_shard (ZeRO-3, reshard after forward)",
         f"{_V} torchtitan/distributed/fsdp.py apply_fsdp_to_decoder",
         lambda m, j, c: member(c.zero, (0, 3)),
         lambda m, j, cand: "zero=3"),
    Rule("fsdp-with-pipeline",
         "with pipeline parallelism torchtitan does not reshard after forward by default and the pipeline "
         "stages drive FSDP per micro-batch, which nest does not price as ZeRO-3",
         f"{_V} torchtitan/distributed/fsdp.py get_fsdp_reshard_after_forward_policy",
         lambda m, j, c: (c.zero == 0) | (c.pp == 1),
         lambda m, j, cand: "zero=0, or pp=1"),
    Rule("replicate-without-sharded-dims",
         "with a shard degree of 1 fully_shard still shards over the context-parallel ranks and the experts "
         "over their ranks",
         f"{_V} torchtitan/distributed/parallel_dims.py ParallelDims.build_mesh (fsdp = dp_shard x cp, "
         "efsdp = dp_shard x cp x tp / ep)",
         lambda m, j, c: (c.zero != 0) | ((c.cp == 1) & (c.ep == 1)),
         lambda m, j, cand: "zero=3"),
    Rule.no_expert_tensor_parallel(
        "experts are not split over tensor-parallel ranks: the sparse mesh is pp x dp_replicate x efsdp x ep "
        "(0.2's expert_tensor_parallel_degree, ETP = 1 or TP, is gone)",
        f"{_V} torchtitan/distributed/parallel_dims.py ParallelDims.build_mesh and torchtitan/config/configs.py "
        "ParallelismConfig (expert_parallel_degree only)"),
    Rule("sequence-parallel",
         "tensor parallelism always shards the sequence (enable_sequence_parallel)",
         f"{_V} torchtitan/config/configs.py ParallelismConfig.enable_sequence_parallel",
         lambda m, j, c: c.sp == (c.tp > 1),
         lambda m, j, cand: f"sp={cand.cfg.tp > 1}"),
    Rule.whole_layer_recompute(
        "selective activation checkpointing saves chosen operators, not nest's attention-core or module "
        "recomputation",
        f"{_V} torchtitan/distributed/activation_checkpoint.py SelectiveAC"),
    Rule.no_activation_offload(
        "torchtitan's trainer has no activation offload (the experimental graph_trainer's pass aside; its CPU "
        "offload, training.enable_cpu_offload, moves parameters, gradients and optimizer state)",
        f"{_V} torchtitan/config/configs.py (enable_cpu_offload)"),
    Rule("no-optimizer-offload",
         "training.enable_cpu_offload is FSDP2's CPUOffloadPolicy, which keeps the weights and gradients on the "
         "host too; torchtitan has no optimizer-only offload",
         f"{_V} torchtitan/distributed/fsdp.py apply_fsdp_to_decoder (offload_policy = CPUOffloadPolicy())",
         lambda m, j, c: c.offload == 0,
         lambda m, j, cand: "optimizer_offload=0"),
    Rule("sequence-divisor",
         "the sequence length is a multiple of tp (sequence parallel) x 2 cp (context parallel)",
         f"{_V} torchtitan/trainer.py Trainer.__init__",
         lambda m, j, c: j.seq_len % (np.where(c.sp, c.tp, 1) * np.where(c.cp > 1, 2 * c.cp, 1)) == 0,
         lambda m, j, cand: "a tensor- and context-parallel degree that divide the sequence"),
)


class Torchtitan(Framework):
    """torchtitan (see the module docstring)."""

    name = "torchtitan"
    version = f"{_V} (release/0.3 4f9e9a4)"
    rules = RULES

    def limits(self, limits: SpaceLimits, model: ModelSpec, job: JobSpec) -> SpaceLimits:
        return narrowed(limits, rank_orders=(DEFAULT_ORDER,), zero=(0, 3), recompute=WHOLE_LAYERS, offload=(0.0,),
                        act_offload=(0,), etp=(1,))

    def job_defaults(self) -> dict:
        """FSDP2 always reduces gradients during the backward: the job overlaps them."""
        return {"overlap_grad_reduce": True}

    def job_errors(self, model: ModelSpec, job: JobSpec) -> None:
        default_state(self.name, _V, job)
        fields = {f: getattr(model, f) for f in ModelSpec.__dataclass_fields__}
        if registry_entry(fields) is None:
            names = ", ".join(f"{c} ({m})" for m, c, _ in REGISTRY)
            raise SpecError(f"framework = torchtitan: model {model.name}: {_V} launches the models of its config "
                            f"registry, whose architecture the command line cannot change (torchtitan/config/"
                            f"manager.py); known: {names}; closest expressible: framework megatron")
        if job.dtype not in ("bf16", "fp32"):
            raise SpecError(f"framework = torchtitan: job.dtype = {job.dtype}: training.mixed_precision_param is "
                            f"bfloat16 or float32 ({_V} torchtitan/config/configs.py TrainingConfig); closest "
                            "expressible: dtype=bf16")
        if not job.overlap_grad_reduce:
            raise SpecError(f"framework = torchtitan: job.overlap_grad_reduce = False: FSDP2 reduces gradients in "
                            f"its post-backward hooks, during the backward ({_V} torchtitan/distributed/fsdp.py); "
                            "closest expressible: overlap_grad_reduce=True (drop --no-overlap-grad-reduce)")
        if job.tp_comm_overlap:
            raise SpecError(f"framework = torchtitan: job.tp_comm_overlap = True: torchtitan's async TP "
                            "(compile.enable_async_tensor_parallel) compiles the model, which nest does not price "
                            f"({_V} torchtitan/config/configs.py CompileConfig); closest expressible: "
                            "tp_comm_overlap=False")

        if job.overlap_moe_expert_parallel_comm or (job.moe_dispatcher != "alltoall" and model.is_moe):
            switch = ("overlap_moe_expert_parallel_comm = True" if job.overlap_moe_expert_parallel_comm
                      else f"moe_dispatcher = {job.moe_dispatcher}")
            raise SpecError(f"framework = torchtitan: job.{switch}: nest launches torchtitan's MoE models with "
                            f"their default all-to-all token dispatcher and no combined forward-backward schedule "
                            f"({_V} torchtitan/models/common/token_dispatcher.py); closest expressible: "
                            "moe_dispatcher=alltoall, overlap_moe_expert_parallel_comm=False")

    def splits(self, num_nodes: int, pp: int, vp: int) -> list[tuple[list[int], dict]]:
        """The splits torchtitan can run: ``(nodes per virtual stage, options)`` for every
        first/last-stage weight it accepts (``options``: the ``parallelism`` values that
        give the split)."""
        return list(_splits(num_nodes - 2, pp, vp))

    def launch(self, p: PlanReader) -> str:
        """The ``torchtitan.train`` command line (``--module`` first), one option per line
        with a trailing backslash."""
        module, config = registry_entry(p.architecture())
        args = [f"--module {module}", f"--config {config}"]
        add = lambda key, value: args.append(f"--{key} {value}")  # noqa: E731
        if p.zero == 3:
            add("parallelism.data_parallel_replicate_degree", 1)
            add("parallelism.data_parallel_shard_degree", p.dp)
            add("parallelism.fsdp_reshard_after_forward", "always")
        else:
            add("parallelism.data_parallel_replicate_degree", p.dp)
            add("parallelism.data_parallel_shard_degree", 1)
        add("parallelism.tensor_parallel_degree", p.tp)
        add("parallelism.context_parallel_degree", p.cp)
        add("parallelism.expert_parallel_degree", p.ep)
        add("parallelism.pipeline_parallel_degree", p.pp)
        if p.pp > 1:
            nodes = [len(s) for s in p.virtual]
            options = next((o for n, o in self.splits(sum(nodes), p.pp, p.vp) if n == nodes), None)
            if options is None:
                raise SpecError(f"plan.stages = {nodes}: not a split torchtitan generates ({_V} "
                                "torchtitan/distributed/pipeline_parallel.py _generate_llm_fqn_per_model_part)")
            add("parallelism.pipeline_parallel_schedule", "Interleaved1F1B" if p.vp > 1 else "1F1B")
            add("parallelism.pipeline_parallel_microbatch_size", p.micro_batch)
            for key, value in options.items():
                if value is not None:
                    add(f"parallelism.{key}", value)
        local = p.micro_batch * (p.num_microbatches if p.pp > 1 else 1)
        add("training.local_batch_size", local)
        add("training.global_batch_size", p.global_batch)
        add("training.seq_len", p.seq_len)
        add("training.mixed_precision_param", "float32" if p.dtype == "fp32" else "bfloat16")
        if p.pp > 1 or p.ep > 1:
            args.append("--training.disable_cuda_graphs")  # CUDA graphs reject PP and most EP dispatchers
        args.append(f"activation-checkpoint:{'full' if p.recompute == 'full' else 'none'}")
        return " \\\n".join(args) + "\n"


__all__ = ["REGISTRY", "RULES", "Torchtitan", "generated_split", "layers_per_stage", "registry_entry"]
