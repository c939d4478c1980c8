"""Plan on measured layer tables: profiles and the NEST artifact's instances.

A measured source replaces the analytic compute and memory model: every layer-graph
node is its own kind, its forward/backward seconds, parameters, kept activations and
boundary bytes come from the table (times include the tensor-parallel communication
that was measured with them). Network pricing of pipeline boundaries and data-parallel
synchronisation, memory accounting and the stage DP are nest's own.

Parameters are counted at 2 bytes each (16-bit weights in the measured runs). Expert
parameters are not distinguished in measured tables: all parameters synchronise over
the data-parallel group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .costs import KindCost, LayerConfig
from .errors import SpecError
from .nest_instance import NestInstance
from .profiles import MeasuredProfile
from .space import SpaceLimits
from .specs import ModelSpec

BYTES_PER_PARAMETER = 2


class MeasuredSource:
    """Node costs read from a :class:`~nest.profiles.MeasuredProfile` (see module doc)."""

    def __init__(self, profile: MeasuredProfile):
        self.profile = profile
        self.names = list(profile.names)
        self.kinds = list(profile.names)
        tp = min(profile.tp_degrees)
        measured, _ = profile.measurement(tp, min(profile.micro_batches(tp)))
        per_device = sum(node.param_bytes for node in measured.nodes) / BYTES_PER_PARAMETER
        self.parameters = round(per_device * tp)  # an estimate when tp > 1 (replicated norms)
        self.active_parameters = self.parameters
        self._cache: dict[tuple, dict[str, KindCost]] = {}

    def cost(self, kind: str, cfg: LayerConfig) -> KindCost:
        """The measured cost of node ``kind`` (its name) under ``cfg``."""
        if cfg.cp != 1 or cfg.ep != 1:
            raise SpecError(f"cp = {cfg.cp}, ep = {cfg.ep}: measured profiles fix the context and "
                            "expert degrees they were measured with; use 1")
        key = (cfg.tp, cfg.micro_batch, cfg.recompute)
        if key not in self._cache:
            rows = self.profile.node_costs(cfg.tp, cfg.micro_batch, BYTES_PER_PARAMETER, cfg.recompute)
            self._cache[key] = {name: _kind_cost(row) for name, row in zip(self.names, rows)}
        return self._cache[key][kind]

    def limits(self, **fixed) -> SpaceLimits:
        """The search space a profile supports: its TP degrees, cp = ep = 1, no SP split."""
        values = {"tp": tuple(self.profile.tp_degrees), "cp": (1,), "ep": (1,), "sp": (False,)}
        values.update(fixed)
        return SpaceLimits(**values)

    def model(self, name: str) -> ModelSpec:
        """A stand-in ModelSpec for validation and reporting (shapes are not used)."""
        heads = math.lcm(*self.profile.tp_degrees) * 8
        return ModelSpec(name=name, num_layers=max(len(self.names) - 2, 1), hidden=heads * 64,
                         num_heads=heads, ffn_hidden=heads * 256, vocab_size=heads, seq_len=1,
                         tied_embeddings=False, source="measured profile")


def _kind_cost(row) -> KindCost:
    return KindCost(
        fwd_s=row.fwd_s, bwd_s=row.bwd_s, recompute_s=row.recompute_s, core_fwd_s=0.0,
        core_bwd_s=0.0, tp_ops=(), cp_fwd_bytes=0.0, cp_bwd_bytes=0.0, cp_steps_fwd=0,
        cp_steps_bwd=0, ep_ops=(), params_dense=row.params, params_expert=0,
        act_bytes=row.act_bytes, out_bytes=row.out_bytes, transient_bytes=row.transient_bytes,
        model_flops=row.model_flops)


@dataclass(frozen=True)
class InstanceSetup:
    """Everything ``nest.plan`` / ``nest.evaluate`` need for a NEST artifact instance."""

    instance: NestInstance
    source: MeasuredSource
    model: ModelSpec
    limits: SpaceLimits

    @property
    def cluster(self):
        return self.instance.cluster

    @property
    def job(self):
        """The instance's job; its baselines use data-parallel degrees that do not divide
        the batch, so an uneven batch is allowed (ceil micro-batches per replica)."""
        return self.instance.job(uneven_batch=True)

    @property
    def expert_factor(self) -> int:
        """The artifact's data-parallel degree excludes expert (and context) ranks."""
        return self.instance.ep_degree * self.instance.cp_degree

    def baseline_config(self, name: str) -> dict:
        """``nest.evaluate`` keyword arguments of the instance's baseline ``name``.

        Stages the artifact leaves empty (it gives ceil(L/p) layers per stage until they
        run out) are dropped. SpecError if the baseline is unknown; InfeasibleError-worthy
        device overruns are reported by evaluate itself.
        """
        baselines = self.instance.baselines
        if name not in baselines:
            raise SpecError(f"baseline = {name!r}: instance has {', '.join(sorted(baselines)) or 'none'}")
        base = baselines[name]
        layers = [n for n in base.nodes_per_stage() if n > 0]
        return {"tp": base.t, "pp": len(layers), "dp": base.d * self.expert_factor,
                "micro_batch": self.instance.micro_batch, "recompute": self.instance.recompute,
                "layers_per_stage": layers}


def instance_setup(path: str) -> InstanceSetup:
    """Load a NEST artifact instance and the search space nest plans it over.

    The instance fixes the recomputation, the micro-batch the artifact measured and the
    expert/context degrees (folded into data parallelism, Megatron's convention); nest
    searches TP over the measured widths, PP, DP, the ZeRO stage and the rank order.
    """
    from .nest_instance import load_instance

    instance = load_instance(path)
    source = MeasuredSource(instance.profile)
    limits = source.limits(recompute=(instance.recompute,), micro_batch=(instance.micro_batch,))
    return InstanceSetup(instance, source, source.model(instance.name), limits)
