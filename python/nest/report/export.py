"""A plan -> the launch configuration of a training framework.

``emit(plan_dict, fmt)`` takes the JSON document of :meth:`nest.result.Plan.to_dict`
(DESIGN.md section 5) and returns text for ``fmt``:

``megatron``
    Megatron-LM command-line arguments, one option (with its value) per line, so the
    text can be pasted into a bash array or substituted into a command line
    (``torchrun pretrain_gpt.py $(nest plan ... --emit megatron) ...``). Names are
    those of ``megatron/training/arguments.py``: ``--tensor-model-parallel-size``,
    ``--pipeline-model-parallel-size``, ``--context-parallel-size``,
    ``--expert-model-parallel-size`` (with ``--expert-tensor-parallel-size`` for MoE
    models), ``--sequence-parallel``,
    ``--num-virtual-stages-per-pipeline-rank`` (chosen over
    ``--num-layers-per-virtual-pipeline-stage`` because only it combines with uneven
    first/last stages), ``--decoder-first-pipeline-num-layers`` /
    ``--decoder-last-pipeline-num-layers`` when only the first and last stages differ,
    ``--pipeline-model-parallel-layout`` (``E``/``t``/``L`` per stage, ``|`` between
    stages) for any other uneven split, ``--recompute-granularity``
    (``--recompute-method uniform --recompute-num-layers 1`` with ``full``),
    ``--use-distributed-optimizer`` (ZeRO-1/2; ZeRO-3 becomes ``--use-megatron-fsdp
    --data-parallel-sharding-strategy optim_grads_params``), ``--micro-batch-size``,
    ``--global-batch-size``, ``--seq-length``, ``--num-layers``, ``--bf16`` / ``--fp16``
    / ``--bf16 --fp8-format hybrid``, and ``--use-tp-pp-dp-mapping`` for the rank order
    ``tp-cp-ep-pp-dp`` (Megatron's default is ``tp-cp-ep-dp-pp``; other orders cannot
    be expressed and raise SpecError).

``deepspeed``
    A DeepSpeed config JSON: ``train_batch_size``, ``train_micro_batch_size_per_gpu``,
    ``gradient_accumulation_steps``, ``zero_optimization.stage``, ``bf16.enabled`` /
    ``fp16.enabled``, ``tensor_parallel.autotp_size`` (DeepSpeed >= 0.16.4 AutoTP) when
    TP > 1, and the ``pipeline`` section DeepSpeed's config parser reads (``stages``,
    ``partition = "uniform"`` when every stage holds as many blocks,
    ``activation_checkpoint_interval`` 1 for full recomputation). DeepSpeed's ``PipelineModule``
    takes its stage boundaries in code, not from the config, so the exact split is in a
    companion ``"nest"`` section (ignored by DeepSpeed): the ``parts`` boundary list
    ``PipelineModule`` uses internally (indices into the node chain, stage k holds
    ``[parts[k], parts[k+1])``), each stage's first and last node and block count, and
    the CP/EP/SP degrees and rank order that
    DeepSpeed configures in model code (Ulysses, ``deepspeed.moe.layer.MoE(ep_size=)``).
    DeepSpeed's pipeline engine has no interleaved schedule: ``vp > 1`` raises SpecError.

``torchtitan``
    A torchtitan TOML fragment with the names of ``torchtitan/config/job_config.py``:
    ``[parallelism]`` ``data_parallel_replicate_degree``, ``data_parallel_shard_degree``
    (FSDP for ZeRO >= 1; ZeRO-1/2 use ``fsdp_reshard_after_forward = "never"``, ZeRO-3
    ``"always"``; ZeRO-0 replicates, except that expert parallelism, which torchtitan
    borrows from FSDP ranks, makes it HSDP with shard degree ep / cp),
    ``tensor_parallel_degree``,
    ``pipeline_parallel_degree``, ``pipeline_parallel_schedule`` (``1F1B`` or
    ``Interleaved1F1B``), ``pipeline_parallel_microbatch_size``,
    ``module_fqns_per_model_part`` (torchtitan's Llama module names ``tok_embeddings``,
    ``layers.N``, ``norm``, ``output``), ``context_parallel_degree``,
    ``expert_parallel_degree``; ``[training]`` ``local_batch_size``,
    ``global_batch_size``, ``seq_len``, ``mixed_precision_param``;
    ``[activation_checkpoint]`` ``mode``; ``[model]`` ``converters = ["float8"]`` for
    fp8. torchtitan always shards the sequence with TP (sequence parallel), and accepts
    only bfloat16/float32 parameters (fp16 raises SpecError).

``hostfile``
    The rank -> device map of the plan's ``placement`` as an Open MPI rankfile, one line
    per rank: ``rank R=HOST slot=S`` (``mpirun -np N --rankfile FILE``; ``S`` is the
    device's position among its host's devices, i.e. its local rank / CUDA device index),
    after ``#`` comment lines that say how to launch it with torchrun when torchrun can
    express it (every host's ranks consecutive with slots ascending: then ``RANK =
    node_rank x P + LOCAL_RANK`` reproduces the map, with the hosts' node ranks in the
    order they first appear) and that it cannot otherwise.

Stage layers are the plan's node names (``embedding``, ``block.N``, ``head``). With
``vp > 1`` the plan's stages are either the ``pp * vp`` virtual stages in model order
or the ``pp`` physical stages of an even interleaved split.
"""

from __future__ import annotations

import json
import re

from ..errors import SpecError
from ..parallel import RECOMPUTE_MODES

FORMATS = ("megatron", "deepspeed", "torchtitan")
"""The frameworks :func:`emit` writes launch configurations for."""

PLACEMENT_FORMATS = ("hostfile",)
"""The rank -> device maps :func:`emit` writes (from the plan's ``placement``)."""

_BLOCK = re.compile(r"^block\.(\d+)$")


def emit(plan_dict: dict, fmt: str) -> str:
    """The launch configuration of ``plan_dict`` (``Plan.to_dict()``) for framework ``fmt``."""
    if fmt not in FORMATS + PLACEMENT_FORMATS:
        raise SpecError(f"emit = {fmt!r}: unknown format (known: {', '.join(FORMATS + PLACEMENT_FORMATS)})")
    if fmt == "hostfile":
        return _hostfile(plan_dict)
    plan = _Plan(plan_dict)
    return {"megatron": _megatron, "deepspeed": _deepspeed, "torchtitan": _torchtitan}[fmt](plan)


def _hostfile(plan_dict: dict) -> str:
    """An Open MPI rankfile of the plan's placement (module docstring)."""
    placement = plan_dict.get("placement") if isinstance(plan_dict, dict) else None
    ranks = placement.get("ranks") if isinstance(placement, dict) else None
    if not isinstance(ranks, list) or not ranks:
        raise SpecError(f"plan.placement = {placement!r}: needs ranks (a plan of nest >= the placement output)")
    for i, r in enumerate(ranks):
        if not (isinstance(r, dict) and r.get("rank") == i and "host" in r and "slot" in r):
            raise SpecError(f"plan.placement.ranks[{i}] = {r!r}: needs rank {i}, host and slot")
    hosts = list(dict.fromkeys(str(r["host"]) for r in ranks))
    per_host = {h: [r for r in ranks if str(r["host"]) == h] for h in hosts}
    width = max(len(v) for v in per_host.values())
    contiguous = all(
        [r["rank"] for r in members] == list(range(members[0]["rank"], members[0]["rank"] + len(members)))
        and [r["slot"] for r in members] == list(range(len(members))) and len(members) == width
        for members in per_host.values())
    lines = [f"# nest placement: {len(ranks)} ranks on {len(hosts)} hosts (Open MPI rankfile)",
             f"# mpirun -np {len(ranks)} --rankfile THIS_FILE ...   (slot S: the rank uses device S of its host)"]
    if contiguous:
        lines.append(f"# torchrun --nnodes {len(hosts)} --nproc-per-node {width} --node-rank <i> ...: host i is "
                     f"the i-th host below ({hosts[0]} is 0); RANK = node_rank * {width} + LOCAL_RANK")
    else:
        lines.append("# torchrun cannot express this placement (a host's ranks are not consecutive); "
                     "use the rankfile")
    lines += [f"rank {r['rank']}={r['host']} slot={r['slot']}" for r in ranks]
    return "\n".join(lines)


# -- reading the plan ---------------------------------------------------------------

class _Plan:
    """The fields of a plan dict every exporter needs, checked once."""

    def __init__(self, data: dict):
        if not isinstance(data, dict):
            raise SpecError(f"plan = {data!r}: must be a plan dict (Plan.to_dict())")
        par = self._section(data, "parallelism")
        job = self._section(data, "job")
        self.tp = self._degree(par, "tp")
        self.pp = self._degree(par, "pp")
        self.dp = self._degree(par, "dp")
        self.cp = self._degree(par, "cp", 1)
        self.ep = self._degree(par, "ep", 1)
        self.vp = self._degree(par, "vp", 1)
        self.micro_batch = self._degree(par, "micro_batch")
        self.num_microbatches = self._degree(par, "num_microbatches")
        self.sp = bool(par.get("sp", False))
        self.expert_tp = self._degree(par, "expert_tp", self.tp)
        model = data.get("model") if isinstance(data.get("model"), dict) else {}
        self.moe = (self.ep > 1 or model.get("active_parameters", model.get("parameters"))
                    != model.get("parameters"))
        zero = par.get("zero", 0)
        if zero not in (0, 1, 2, 3):
            raise SpecError(f"parallelism.zero = {zero!r}: must be 0, 1, 2 or 3")
        self.zero = max(zero, 1 if par.get("distributed_optimizer") else 0)
        self.recompute = par.get("recompute", "none")
        if self.recompute not in RECOMPUTE_MODES:
            raise SpecError(f"parallelism.recompute = {self.recompute!r}: must be none, selective or full")
        self.rank_order = par.get("rank_order", "tp-cp-ep-dp-pp")
        self.global_batch = self._degree(job, "global_batch")
        self.seq_len = self._degree(job, "seq_len")
        self.dtype = job.get("dtype", "bf16")
        if self.dtype not in ("bf16", "fp16", "fp8", "fp32"):
            raise SpecError(f"job.dtype = {self.dtype!r}: must be bf16, fp16, fp8 or fp32")
        if self.global_batch != self.micro_batch * self.num_microbatches * self.dp:
            raise SpecError(f"job.global_batch = {self.global_batch}: differs from micro_batch x "
                            f"num_microbatches x dp = {self.micro_batch} x {self.num_microbatches} "
                            f"x {self.dp}")
        self.stages = self._stages(data)
        self.virtual = self._virtual_stages()
        self.num_layers = sum(self._blocks(s) for s in self.virtual)
        declared = data.get("model", {}).get("layers") if isinstance(data.get("model"), dict) else None
        if declared is not None and declared != self.num_layers:
            raise SpecError(f"model.layers = {declared!r}: the stages hold {self.num_layers} blocks")

    @staticmethod
    def _section(data: dict, key: str) -> dict:
        value = data.get(key)
        if not isinstance(value, dict):
            raise SpecError(f"plan.{key} = {value!r}: missing or not a mapping")
        return value

    @staticmethod
    def _degree(section: dict, key: str, default=None) -> int:
        value = section.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise SpecError(f"plan {key} = {value!r}: must be a positive integer")
        return value

    def _stages(self, data: dict) -> list[list[str]]:
        stages = data.get("stages")
        if not isinstance(stages, list) or not stages:
            raise SpecError(f"plan.stages = {stages!r}: must be a non-empty list")
        layers = []
        for i, stage in enumerate(stages):
            names = stage.get("layers") if isinstance(stage, dict) else None
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise SpecError(f"plan.stages[{i}].layers = {names!r}: must be a list of node names")
            for name in names:
                if name not in ("embedding", "head") and not _BLOCK.match(name):
                    raise SpecError(f"plan.stages[{i}].layers: node {name!r} is not embedding, "
                                    "block.N or head")
            layers.append(list(names))
        return layers

    @staticmethod
    def _blocks(names: list[str]) -> int:
        return sum(1 for n in names if _BLOCK.match(n))

    def _virtual_stages(self) -> list[list[str]]:
        """The ``pp * vp`` model chunks in model order (chunk k runs on rank k % pp)."""
        chunks = self.pp * self.vp
        if len(self.stages) == chunks:
            virtual = self.stages
        elif len(self.stages) == self.pp and self.vp > 1:
            virtual = self._even_interleaving()
        else:
            raise SpecError(f"plan.stages: {len(self.stages)} stages for pp = {self.pp}, vp = {self.vp}")
        flat = [n for s in virtual for n in s]
        blocks = [int(_BLOCK.match(n).group(1)) for n in flat if _BLOCK.match(n)]
        if blocks != list(range(len(blocks))):
            raise SpecError("plan.stages: blocks are not block.0, block.1, ... in stage order")
        if "embedding" in flat and flat[0] != "embedding" or flat.count("embedding") > 1:
            raise SpecError("plan.stages: the embedding must be the first node of the first stage")
        if "head" in flat and flat[-1] != "head" or flat.count("head") > 1:
            raise SpecError("plan.stages: the head must be the last node of the last stage")
        return virtual

    def _even_interleaving(self) -> list[list[str]]:
        total = sum(self._blocks(s) for s in self.stages)
        chunks = self.pp * self.vp
        if total % chunks:
            raise SpecError(f"plan.stages: {total} blocks do not split evenly into pp x vp = "
                            f"{chunks} model chunks; give the plan's virtual stages instead")
        size = total // chunks
        virtual = [[f"block.{i}" for i in range(k * size, (k + 1) * size)] for k in range(chunks)]
        names = {n for s in self.stages for n in s}
        if "embedding" in names:
            virtual[0].insert(0, "embedding")
        if "head" in names:
            virtual[-1].append("head")
        for rank, stage in enumerate(self.stages):
            expected = sorted(n for k in range(rank, chunks, self.pp) for n in virtual[k])
            if sorted(stage) != expected:
                raise SpecError(f"plan.stages[{rank}].layers: not the even interleaved split "
                                f"(expected {expected[:3]}...)")
        return virtual

    def block_counts(self) -> list[int]:
        """Transformer blocks per virtual stage, in model order."""
        return [self._blocks(s) for s in self.virtual]


# -- Megatron-LM ----------------------------------------------------------------------

def _megatron_rank_order(plan: _Plan) -> list[str]:
    degrees = {"tp": plan.tp, "cp": plan.cp, "ep": plan.ep, "dp": plan.dp, "pp": plan.pp}
    order = str(plan.rank_order).split("-")
    if sorted(order) != sorted(degrees):
        raise SpecError(f"parallelism.rank_order = {plan.rank_order!r}: must name tp, cp, ep, dp, pp")

    def reduced(dims):
        """The dimensions of degree > 1, in order (the others do not move ranks)."""
        return [d for d in dims if degrees[d] > 1]

    if reduced(order) == reduced("tp-cp-ep-dp-pp".split("-")):
        return []
    if reduced(order) == reduced("tp-cp-ep-pp-dp".split("-")):
        return ["--use-tp-pp-dp-mapping"]
    raise SpecError(f"parallelism.rank_order = {plan.rank_order!r}: Megatron-LM places ranks only "
                    "in the orders tp-cp-ep-dp-pp and tp-cp-ep-pp-dp (--use-tp-pp-dp-mapping)")


def _megatron_pipeline(plan: _Plan) -> list[str]:
    counts = plan.block_counts()
    if plan.pp == 1:
        return []
    if len(set(counts)) == 1:
        return [f"--num-virtual-stages-per-pipeline-rank {plan.vp}"] if plan.vp > 1 else []
    middle = counts[1:-1]
    if plan.vp == 1 and min(counts) > 0 and len(set(middle)) <= 1:
        # Megatron splits the layers left after the first and last stages evenly over
        # the middle stages (none when pp = 2).
        return [f"--decoder-first-pipeline-num-layers {counts[0]}",
                f"--decoder-last-pipeline-num-layers {counts[-1]}"]
    layout = []
    for stage in plan.virtual:
        layout.append("".join("E" if n == "embedding" else "L" if n == "head" else "t"
                              for n in stage))
    if not layout[-1].endswith("L"):
        layout[-1] += "L"  # Megatron's layout always names the loss; it sits after the last block
    if not layout[0].startswith("E"):
        layout[0] = "E" + layout[0]
    return [f"--pipeline-model-parallel-layout {'|'.join(layout)}"]


def _megatron(plan: _Plan) -> str:
    args = [
        f"--tensor-model-parallel-size {plan.tp}",
        f"--pipeline-model-parallel-size {plan.pp}",
        f"--context-parallel-size {plan.cp}",
        f"--expert-model-parallel-size {plan.ep}",
    ]
    if plan.moe:
        args.append(f"--expert-tensor-parallel-size {plan.expert_tp}")
    args += _megatron_pipeline(plan)
    if plan.sp:
        args.append("--sequence-parallel")
    if plan.recompute == "selective":
        args.append("--recompute-granularity selective")
    elif plan.recompute == "full":
        args += ["--recompute-granularity full", "--recompute-method uniform",
                 "--recompute-num-layers 1"]
    if plan.zero == 3:
        args += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy optim_grads_params"]
    elif plan.zero >= 1:
        args.append("--use-distributed-optimizer")
    args += _megatron_rank_order(plan)
    args += [
        f"--num-layers {plan.num_layers}",
        f"--seq-length {plan.seq_len}",
        f"--micro-batch-size {plan.micro_batch}",
        f"--global-batch-size {plan.global_batch}",
    ]
    args += {"bf16": ["--bf16"], "fp16": ["--fp16"], "fp8": ["--bf16", "--fp8-format hybrid"],
             "fp32": []}[plan.dtype]
    return "\n".join(args) + "\n"


# -- DeepSpeed --------------------------------------------------------------------------

def _deepspeed(plan: _Plan) -> str:
    if plan.vp > 1:
        raise SpecError(f"parallelism.vp = {plan.vp}: DeepSpeed's pipeline engine has no "
                        "interleaved schedule")
    counts = [len(s) for s in plan.virtual]
    parts = [0]
    for c in counts:
        parts.append(parts[-1] + c)
    config = {
        "train_batch_size": plan.global_batch,
        "train_micro_batch_size_per_gpu": plan.micro_batch,
        "gradient_accumulation_steps": plan.num_microbatches,
        "zero_optimization": {"stage": plan.zero},
        "bf16": {"enabled": plan.dtype in ("bf16", "fp8")},
        "fp16": {"enabled": plan.dtype == "fp16"},
    }
    if plan.tp > 1:
        config["tensor_parallel"] = {"autotp_size": plan.tp}
    if plan.pp > 1:
        config["pipeline"] = {"stages": plan.pp}
        if len(set(plan.block_counts())) == 1:
            config["pipeline"]["partition"] = "uniform"  # PipelineModule(partition_method=)
        config["pipeline"]["activation_checkpoint_interval"] = 1 if plan.recompute == "full" else 0
    config["nest"] = {
        "note": "companion section for the launcher; DeepSpeed ignores it",
        "pipeline": {"num_stages": plan.pp, "parts": parts,
                     "first_layer": [s[0] for s in plan.virtual],
                     "last_layer": [s[-1] for s in plan.virtual],
                     "blocks_per_stage": plan.block_counts()},
        "tensor_parallel": plan.tp, "sequence_parallel": plan.sp,
        "context_parallel": plan.cp, "expert_parallel": plan.ep, "data_parallel": plan.dp,
        "recompute": plan.recompute, "rank_order": plan.rank_order, "seq_len": plan.seq_len,
        "dtype": plan.dtype,
    }
    return json.dumps(config, indent=2) + "\n"


# -- torchtitan ---------------------------------------------------------------------------

def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def _torchtitan_fqns(stage: list[str]) -> list[str]:
    fqns = []
    for name in stage:
        if name == "embedding":
            fqns.append("tok_embeddings")
        elif name == "head":
            fqns += ["norm", "output"]
        else:
            fqns.append("layers." + _BLOCK.match(name).group(1))
    return fqns


def _torchtitan(plan: _Plan) -> str:
    if plan.dtype == "fp16":
        raise SpecError("job.dtype = 'fp16': torchtitan trains with bfloat16 or float32 parameters")
    par = {}
    if plan.zero == 0 and plan.ep <= plan.cp:
        par["data_parallel_replicate_degree"] = plan.dp
        par["data_parallel_shard_degree"] = 1
    elif plan.zero == 0:
        # torchtitan borrows expert ranks from FSDP (cp <= ep <= dp_shard x cp): shard
        # over the smallest group that holds the experts and replicate across groups.
        shard = plan.ep // plan.cp
        if plan.ep % plan.cp or plan.dp % shard:
            raise SpecError(f"parallelism.ep = {plan.ep}: torchtitan needs ep / cp to divide dp "
                            f"(cp = {plan.cp}, dp = {plan.dp})")
        par["data_parallel_replicate_degree"] = plan.dp // shard
        par["data_parallel_shard_degree"] = shard
        par["fsdp_reshard_after_forward"] = "never"
    else:
        par["data_parallel_replicate_degree"] = 1
        par["data_parallel_shard_degree"] = plan.dp
        par["fsdp_reshard_after_forward"] = "always" if plan.zero == 3 else "never"
    par["tensor_parallel_degree"] = plan.tp
    par["pipeline_parallel_degree"] = plan.pp
    if plan.pp > 1:
        par["pipeline_parallel_schedule"] = "Interleaved1F1B" if plan.vp > 1 else "1F1B"
        par["pipeline_parallel_microbatch_size"] = plan.micro_batch
        parts = [_torchtitan_fqns(s) for s in plan.virtual]
        # torchtitan must place every module: a plan without embedding/head nodes (e.g. on
        # a NEST instance) still has them in the first and last model chunk.
        if "tok_embeddings" not in parts[0]:
            parts[0].insert(0, "tok_embeddings")
        if "output" not in parts[-1]:
            parts[-1] += ["norm", "output"]
        par["module_fqns_per_model_part"] = parts
    par["context_parallel_degree"] = plan.cp
    par["expert_parallel_degree"] = plan.ep
    # With pipelining the micro-batches of a step form the local batch; without it
    # torchtitan accumulates gradients over global / (local x dp) steps.
    local = plan.micro_batch * (plan.num_microbatches if plan.pp > 1 else 1)
    training = {"local_batch_size": local, "global_batch_size": plan.global_batch,
                "seq_len": plan.seq_len,
                "mixed_precision_param": "float32" if plan.dtype == "fp32" else "bfloat16"}
    sections = [("parallelism", par), ("training", training),
                ("activation_checkpoint", {"mode": plan.recompute})]
    if plan.dtype == "fp8":
        sections.append(("model", {"converters": ["float8"]}))
    lines = []
    for title, values in sections:
        lines.append(f"[{title}]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in values.items()]
        lines.append("")
    return "\n".join(lines)
