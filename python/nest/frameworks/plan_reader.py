"""Reading a plan's JSON document for the launch configurations."""

from __future__ import annotations

import re
from functools import cached_property

from ..errors import SpecError, short_repr
from ..parallel import DEFAULT_ORDER, RECOMPUTE_MODES, Candidate, LayerConfig, check_fraction
from ..specs import JobSpec

_BLOCK = re.compile(r"^block\.(\d+)$")


class PlanReader:
    """The fields of a plan's JSON document every launch configuration needs, checked once
    (a document from another tool or an edited file gets a SpecError naming the field)."""

    def __init__(self, data: dict):
        if not isinstance(data, dict):
            raise SpecError(f"plan = {short_repr(data)}: must be a plan document (Plan.to_dict())")
        par = self._section(data, "parallelism")
        job = self._section(data, "job")
        self.job = job
        model = data.get("model") if isinstance(data.get("model"), dict) else {}
        spec = model.get("spec")
        self.model_spec = spec if isinstance(spec, dict) else None
        self.tp = self._degree(par, "tp")
        self.pp = self._degree(par, "pp")
        self.dp = self._degree(par, "dp")
        self.cp = self._degree(par, "cp", 1)
        self.ep = self._degree(par, "ep", 1)
        self.etp = self._degree(par, "expert_tp", 1)
        self.vp = self._degree(par, "vp", 1)
        self.micro_batch = self._degree(par, "micro_batch")
        self.num_microbatches = self._degree(par, "num_microbatches")
        self.sp = bool(par.get("sp", False))
        zero = par.get("zero", 0)
        if zero not in (0, 1, 2, 3):
            raise SpecError(f"parallelism.zero = {zero!r}: must be 0, 1, 2 or 3")
        self.zero = max(zero, 1 if par.get("distributed_optimizer") else 0)
        self.offload = check_fraction(par.get("optimizer_offload_fraction", 0.0), "parallelism.optimizer_offload_fraction")
        self.act_offload = par.get("activation_offload_layers", 0)
        if isinstance(self.act_offload, bool) or not isinstance(self.act_offload, int) or self.act_offload < 0:
            raise SpecError(f"parallelism.activation_offload_layers = {self.act_offload!r}: must be a whole number "
                            "of layers")
        self.recompute = par.get("recompute", "none")
        if self.recompute not in RECOMPUTE_MODES:
            raise SpecError(f"parallelism.recompute = {self.recompute!r}: must be one of {', '.join(RECOMPUTE_MODES)}")
        self.order = par.get("rank_order", DEFAULT_ORDER)
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
        declared = model.get("layers")
        if declared is not None and declared != self.num_layers:
            raise SpecError(f"model.layers = {declared!r}: the stages hold {self.num_layers} blocks")

    @staticmethod
    def _section(data: dict, key: str) -> dict:
        value = data.get(key)
        if not isinstance(value, dict):
            raise SpecError(f"plan.{key} = {short_repr(value)}: missing or not a mapping")
        return value

    @staticmethod
    def _degree(section: dict, key: str, default=None) -> int:
        value = section.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise SpecError(f"plan {key} = {short_repr(value)}: must be a positive integer")
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

    def stage_codes(self) -> list[str]:
        """Per virtual stage in model order: ``E`` for the embedding, ``t`` per block, ``L``
        for the output layer and loss, after an ``m`` per multi-token prediction module,
        which nest's head node holds (Megatron's layout letters)."""
        loss = "m" * (self.model_spec or {}).get("mtp_layers", 0) + "L"
        codes = ["".join("E" if n == "embedding" else loss if n == "head" else "t" for n in stage)
                 for stage in self.virtual]
        if not codes[0].startswith("E"):
            codes[0] = "E" + codes[0]  # a plan without embedding/head nodes (measured layers)
        if not codes[-1].endswith("L"):
            codes[-1] += "L"
        return codes

    def architecture(self) -> dict:
        """The model's architecture (``model.spec`` of the document): SpecError when the
        plan has none (a launch configuration needs the model's shape)."""
        if self.model_spec is None:
            raise SpecError("plan.model.spec: missing; a launch configuration needs the model's architecture "
                            "(plans of measured layers have none)")
        return self.model_spec

    @cached_property
    def job_spec(self) -> JobSpec:
        """The plan's job as a :class:`~nest.specs.JobSpec` (batch, sequence, dtype,
        optimizer, attention, overlap switches, framework): what the launchers read."""
        return JobSpec.of_document(self.job)

    def candidate(self, head_needs_embedding: bool) -> Candidate:
        """The plan's configuration, from the checked fields (``zero`` with the
        distributed optimizer folded in; ``head_needs_embedding``: the model's,
        :attr:`~nest.specs.ModelSpec.head_needs_embedding`)."""
        cfg = LayerConfig(self.tp, self.sp, self.micro_batch, self.recompute, head_needs_embedding and self.pp > 1,
                          self.cp, self.ep, self.act_offload, self.etp)
        return Candidate(cfg, self.pp, self.dp, self.vp, self.zero, self.order, self.offload)
