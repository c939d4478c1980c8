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

import numpy as np

from ..cost.nodes import COST_FIELDS, OP_FIELDS, field_dtype
from ..errors import SpecError
from ..parallel import CLASSIC_RECOMPUTE, RECOMPUTE_MODES, ConfigArrays, SpaceLimits
from ..specs import ModelSpec
from .nest_instance import NestInstance, load_instance
from .profiles import MeasuredCost, MeasuredProfile

BYTES_PER_PARAMETER = 2


_MEASURED_COLUMNS = {"fwd_s": "fwd_s", "bwd_s": "bwd_s", "recompute_s": "recompute_s", "compute_s": "compute_s",
                     "params_dense": "params", "act_bytes": "act_bytes", "out_bytes": "out_bytes",
                     "transient_bytes": "transient_bytes"}
"""Cost columns (:data:`~nest.cost.nodes.COST_FIELDS`) a profile's :class:`MeasuredCost` fills."""


class MeasuredSource:
    """Node costs read from a :class:`~nest.inputs.profiles.MeasuredProfile` (see module doc)."""

    def __init__(self, profile: MeasuredProfile):
        self.profile = profile
        self.names = list(profile.names)
        self.kinds = list(profile.names)
        tp = min(profile.tp_degrees)
        measured, _ = profile.measurement(tp, min(profile.micro_batches(tp)))
        per_device = sum(node.param_bytes for node in measured.nodes) / BYTES_PER_PARAMETER
        self.parameters = round(per_device * tp)  # an estimate when tp > 1 (replicated norms)
        self.active_parameters = self.parameters
        self._node = {name: i for i, name in enumerate(self.names)}
        self._rows: dict[tuple, list[MeasuredCost]] = {}
        self._columns: dict[tuple, dict[str, np.ndarray]] = {}

    def _measured(self, configs: ConfigArrays, i: int) -> list[MeasuredCost]:
        """Every node's measured cost under configuration ``i`` (cached)."""
        key = self._key(configs, i)
        if key not in self._rows:
            self._rows[key] = self.profile.node_costs(*key[:2], BYTES_PER_PARAMETER, key[2])
        return self._rows[key]

    def _key(self, configs: ConfigArrays, i: int) -> tuple[int, int, str]:
        """What the measurement of configuration ``i`` depends on: TP, micro-batch and
        recomputation (the other degrees must be the ones measured)."""
        if configs.cp[i] != 1 or configs.ep[i] != 1:
            raise SpecError(f"cp = {configs.cp[i]}, ep = {configs.ep[i]}: measured profiles fix the context and "
                            "expert degrees they were measured with; use 1")
        if configs.etp[i] != 1:
            raise SpecError(f"etp = {configs.etp[i]}: measured profiles fix the expert tensor-parallel degree they "
                            "were measured with; use 1")
        return int(configs.tp[i]), int(configs.micro_batch[i]), RECOMPUTE_MODES[int(configs.recompute[i])]

    def _key_columns(self, configs: ConfigArrays, i: int) -> dict[str, np.ndarray]:
        """:meth:`_measured` of configuration ``i`` as one array per measured column, over
        the nodes (cached with the rows)."""
        key = self._key(configs, i)
        if key not in self._columns:
            rows = self._measured(configs, i)
            self._columns[key] = {name: np.array([getattr(r, field) for r in rows], dtype=field_dtype(name))
                                  for name, field in _MEASURED_COLUMNS.items()}
        return self._columns[key]

    def tables(self, kinds: list[str], configs: ConfigArrays) -> dict[str, np.ndarray]:
        """The cost columns of nodes ``kinds`` (their names) under every configuration at
        once, ``[configuration, kind]`` (``[configuration, kind, slot]`` for the
        :data:`~nest.cost.nodes.OP_FIELDS`): what :meth:`table` gives kind by kind, stacked.
        Measured times include the tensor-parallel collectives, so there are no collective
        volumes."""
        n, nodes = len(configs), np.array([self._node[kind] for kind in kinds], dtype=np.int64)
        per_config = [self._key_columns(configs, i) for i in range(n)]
        out = {name: np.zeros((n, len(kinds)), dtype=field_dtype(name)) for name in COST_FIELDS}
        for name in _MEASURED_COLUMNS:
            for i, columns in enumerate(per_config):
                out[name][i] = columns[name][nodes]
        out.update({name: np.zeros((n, len(kinds), 1)) for name in OP_FIELDS})
        return out

    def table(self, kind: str, configs: ConfigArrays) -> dict[str, np.ndarray]:
        """The cost columns of node ``kind`` (its name) under every configuration
        (:meth:`tables` of that one kind)."""
        return {name: column[:, 0] for name, column in self.tables([kind], configs).items()}

    def model_flops(self, kind: str, configs: ConfigArrays) -> np.ndarray:
        """The measured model FLOPs of node ``kind`` under every configuration."""
        node = self._node[kind]
        return np.array([self._measured(configs, i)[node].model_flops for i in range(len(configs))], dtype=np.float64)

    def limits(self, **fixed) -> SpaceLimits:
        """The search space a profile supports: its TP degrees, cp = ep = etp = 1, no SP
        split, the classic recomputation modes (a profile measures no modules)."""
        values = {"tp": tuple(self.profile.tp_degrees), "cp": (1,), "ep": (1,), "etp": (1,), "sp": (False,),
                  "recompute": CLASSIC_RECOMPUTE}
        values.update(fixed)
        return SpaceLimits(**values)

    def check_model(self, model: ModelSpec, where: str) -> None:
        """SpecError unless ``model`` (given beside the profile, for its name and
        architecture) has the profile's layer chain: as many transformer blocks as the
        profile measured between its first node and its last."""
        blocks = len(self.names) - 2
        if blocks != model.num_layers:
            raise SpecError(f"profile = {where!r}: measures {blocks} transformer blocks ({self.names[1]} .. "
                            f"{self.names[-2]}), model {model.name} has {model.num_layers}; pass the model the "
                            "profile measured, or leave --model out")

    def model(self, name: str) -> ModelSpec:
        """A stand-in ModelSpec for validation and reporting (shapes are not used)."""
        heads = math.lcm(*self.profile.tp_degrees) * 8
        return ModelSpec(name=name, num_layers=max(len(self.names) - 2, 1), hidden=heads * 64,
                         num_heads=heads, ffn_hidden=heads * 256, vocab_size=heads, seq_len=1,
                         tied_embeddings=False, source="measured profile")


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
    instance = load_instance(path)
    source = MeasuredSource(instance.profile)
    limits = source.limits(recompute=(instance.recompute,), micro_batch=(instance.micro_batch,))
    return InstanceSetup(instance, source, source.model(instance.name), limits)
