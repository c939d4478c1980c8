"""A model, a cluster and a job: the node-kind cost tables of its layer configurations.

A :class:`Scenario` holds what every price of a search shares: the specs, the kernel
model of the device, the node costs (a *source*: the analytic model of
:mod:`nest.cost.nodes` or measured layer tables), the layer chain's node kinds and the
network's :class:`~nest.network.placement.Placer`. :meth:`Scenario.config_table` prices
node kinds under many layer configurations at once; :mod:`nest.cost.pricing` turns a
table and candidates into seconds on the candidates' placements.

A source has ``kinds`` (a label per node of the chain; nodes with equal labels cost
alike), ``names``, ``parameters``, ``active_parameters``, ``table(kind, ConfigArrays)``
returning the :data:`~nest.cost.nodes.COST_FIELDS` and :data:`~nest.cost.nodes.OP_FIELDS`
columns of that kind, and ``model_flops(kind, ConfigArrays)`` (forward + backward model
FLOPs of one micro-batch on one device, for MFU).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..arrays import unique
from ..errors import SpecError
from ..network.placement import placer_for
from ..network.tiers import TokenDispatch
from ..parallel import RECOMPUTE_MODES, Candidate, CandidateArrays, ConfigArrays, LayerConfig
from ..specs import ClusterSpec, JobSpec, ModelSpec
from . import activation_offload, offload
from .compute import KernelModel
from .efficiency import MX_COPY_BYTES
from .model import BLOCK, MOE, active_parameter_count, chain_kinds, chain_names, parameter_count
from .nodes import COST_FIELDS, OP_FIELDS, NodeCostModel


class AnalyticSource:
    """Node costs from the analytic model: nodes of one kind (block, moe, ...) cost alike."""

    def __init__(self, model: ModelSpec, job: JobSpec, kernels: KernelModel):
        self.model = model
        self.job = job
        self.kinds = chain_kinds(model)
        self.names = chain_names(model)
        self.parameters = parameter_count(model)
        self.active_parameters = active_parameter_count(model)
        self._costs = NodeCostModel(model, job, kernels)

    def table(self, kind: str, configs: ConfigArrays) -> dict[str, np.ndarray]:
        """Cost columns of ``kind`` under every configuration."""
        return self._costs.table(kind, configs)

    def model_flops(self, kind: str, configs: ConfigArrays) -> np.ndarray:
        """Model FLOPs of ``kind`` under every configuration."""
        return self._costs.model_flops(kind, configs)


_SINGLE_TABLES = 4096  # one-configuration tables a Scenario keeps (a few KiB each)


@dataclass
class ConfigTable:
    """Node-kind costs of many layer configurations: ``cols[name][config, kind]``.

    ``derived`` keeps what searches compute once per table (bounds per configuration);
    use :meth:`cached`."""

    configs: Sequence[LayerConfig]
    arrays: ConfigArrays
    cols: dict[str, np.ndarray]
    transient: np.ndarray  # [C] int64: largest transient bytes of the kinds before the last node
    send_ps: np.ndarray  # [C, rows, kinds]: a node's output sent across a boundary (Placer.send_rows)
    # [C] int64: what the last node (the output layer and loss) needs beyond ``transient``
    # while it runs; only the stage holding it pays it
    last_transient: np.ndarray | None = None
    # [C] int64: host bytes the activation offload's copies of one micro-batch fill
    offload_host: np.ndarray | None = None
    derived: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.offload_host is None:
            self.offload_host = np.zeros(len(self.configs), dtype=np.int64)

    def __len__(self) -> int:
        return len(self.configs)

    def cached(self, key, compute):
        """``compute()``, once per table and key."""
        if key not in self.derived:
            self.derived[key] = compute()
        return self.derived[key]


class Scenario:
    """A model, a cluster and a job, with its node costs and the network's placer.

    ``source`` supplies node costs (default: the analytic model; see the module
    docstring)."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, job: JobSpec, source=None):
        self.model, self.cluster, self.job = model, cluster, job
        self.peak_flops = cluster.device.peak_flops(job.dtype)
        self.kernels = KernelModel.for_job(cluster.device, job)
        # bytes per weight held: fp32, FP8 with --fp8-param-gather, else 16-bit. MXFP8
        # weights hold a row- and a column-wise copy with their scales (TE 2.7
        # module/base.py reset_parameters: the weight quantizer's usage is row-wise and,
        # when training, column-wise)
        mx = job.dtype == "fp8" and job.fp8_recipe == "mxfp8"
        both_copies = 2 * MX_COPY_BYTES if mx else 2  # an FP8 weight's row- and column-wise copies
        self.weight_bytes = 4 if job.dtype == "fp32" else (both_copies if mx else 1) if job.fp8_param_gather else 2
        # bytes per weight its all-gathers (and the optimizer's weight update) move:
        # Megatron gathers MXFP8 weights in bf16 into the gradient buffer, which it shares
        # with them, and casts them after (core_v0.14.0 param_and_grad_buffer.py
        # _ParamAndGradBuffer.__init__ "shared_buffer", distributed_data_parallel.py
        # start_param_sync "cast from bf16 to MXFP8 during copy")
        self.gather_bytes = 2 if mx and job.fp8_param_gather else self.weight_bytes
        # FP8 without FP8 weights: Transformer Engine keeps each GEMM weight's FP8 copy,
        # row- and column-wise (the transpose the backward's data gradient needs, or
        # MXFP8's column-wise copy), from the first micro-batch to the last
        # (transformer_engine/pytorch/module/linear.py, TE 2.7: the weight workspace
        # cached under "weight" while Megatron passes is_first_microbatch,
        # megatron/core/pipeline_parallel/schedules.py)
        self.fp8_weight_cache_bytes = both_copies if job.dtype == "fp8" and not job.fp8_param_gather else 0
        self.reserve_bytes = (cluster.device.reserved_bytes if job.reserved_memory_bytes is None
                              else job.reserved_memory_bytes)
        # one device's share of its server's memory, DRAM bandwidth and host link (every
        # device of a server offloads at once; a cluster smaller than a server has it all)
        host = cluster.device.host
        self.host_share = (None if host is None else
                           host.share(min(host.devices, cluster.num_devices), job.host_threads))
        # the most of its optimizer state a rank can offload (the memory floors' frugal case)
        self.max_offload = max(offload.offload_fractions(None, cluster.device, job))
        self.host_step_s = 0.0 if self.host_share is None else offload.host_step_s(self.host_share)
        self.source = source or AnalyticSource(model, job, self.kernels)
        self.kinds = list(self.source.kinds)
        self.kind_list = list(dict.fromkeys(self.kinds))
        self.kind_index = np.array([self.kind_list.index(k) for k in self.kinds], dtype=np.int64)
        self.kind_count = np.bincount(self.kind_index, minlength=len(self.kind_list)).astype(np.int64)
        dispatch = (TokenDispatch(model.num_experts, model.experts_per_token)
                    if model.is_moe and job.moe_dispatcher == "flex" else None)
        self.placer = placer_for(cluster, model.is_moe, dispatch)
        # the kinds whose weights are GEMMs Transformer Engine runs in FP8 (not the
        # embedding, the output layer or measured layers)
        analytic = isinstance(self.source, AnalyticSource)
        self.gemm_kinds = np.array([analytic and k in (BLOCK, MOE) for k in self.kind_list], dtype=bool)
        # one-configuration tables by configuration: polishing and timing single candidates
        # price the same few configurations hundreds of times
        self._single_tables: dict[LayerConfig, ConfigTable] = {}

    def fp8_weight_cache(self, zero) -> np.ndarray:
        """Per ZeRO stage in ``zero`` (scalar or array), the bytes per GEMM weight of
        Transformer Engine's FP8 weight copies (:attr:`fp8_weight_cache_bytes`): kept for
        the whole weights unless ZeRO-3 gathers a layer's weights only while it runs."""
        return np.where(np.asarray(zero) >= 3, 0.0, float(self.fp8_weight_cache_bytes))

    @property
    def num_nodes(self) -> int:
        return len(self.kinds)

    def micro_batches(self, cand: Candidate) -> int:
        """Micro-batches per replica and step of ``cand``."""
        return self.job.micro_batches(cand.dp, cand.cfg.micro_batch)

    def config_table(self, configs: Sequence[LayerConfig], arrays: ConfigArrays | None = None) -> ConfigTable:
        """Columns of every node kind under every configuration (``[config, kind]``)."""
        arrays = ConfigArrays.of(configs) if arrays is None else arrays
        n = len(configs)
        columns = self._kind_columns(arrays)
        in_flight, host = self._activation_offload(columns, arrays)
        before = unique(self.kind_index[:-1])
        last = columns["transient_bytes"][:, self.kind_index[-1]] if n else np.zeros(0, dtype=np.int64)
        transient = (columns["transient_bytes"][:, before].max(axis=1) if n and len(before)
                     else np.zeros(n, dtype=np.int64))
        transient = np.maximum(transient, in_flight)
        return ConfigTable(configs, arrays, columns, transient, self.placer.send_rows(columns["out_bytes"]),
                           np.maximum(last - transient, 0), host)

    def _kind_columns(self, arrays: ConfigArrays) -> dict[str, np.ndarray]:
        """The source's columns of every node kind, ``[config, kind]`` (``[config, kind,
        slot]`` for the operations, slots padded with zeros to the largest): from its
        ``tables`` when it prices every kind at once (measured sources, hundreds of
        kinds), else kind by kind."""
        tables = getattr(self.source, "tables", None)
        if tables is not None:
            return tables(self.kind_list, arrays)
        n = len(arrays)
        per_kind = [self.source.table(kind, arrays) for kind in self.kind_list]
        columns = {name: np.stack([p[name] for p in per_kind], axis=1).reshape(n, -1) for name in COST_FIELDS}
        for name in OP_FIELDS:
            slots = max(p[name].shape[1] for p in per_kind)
            padded = np.zeros((n, len(per_kind), slots), dtype=np.result_type(*(p[name] for p in per_kind)))
            for k, p in enumerate(per_kind):
                padded[:, k, :p[name].shape[1]] = p[name].reshape(n, -1)
            columns[name] = padded
        return columns

    def _activation_offload(self, columns: dict, arrays: ConfigArrays) -> tuple[np.ndarray, np.ndarray]:
        """Activation offload priced into ``columns`` (:func:`nest.cost.activation_offload.apply`):
        per configuration the group in flight while the last layer runs, and the host bytes."""
        counts = np.asarray(arrays.act_offload, dtype=np.int64)
        if not (counts > 0).any():
            return np.zeros(len(counts), dtype=np.int64), np.zeros(len(counts), dtype=np.int64)
        if not isinstance(self.source, AnalyticSource):
            raise SpecError("activation_offload: measured layers do not say which tensors Transformer Engine "
                            "offloads; it needs the analytic model")
        if self.host_share is None:
            raise SpecError(f"activation_offload: device {self.cluster.device.name} has no host memory to "
                            "offload to")
        if ((counts > 0) & (arrays.recompute != RECOMPUTE_MODES.index("none"))).any():
            raise SpecError("activation_offload: runs without recomputation (Megatron-Core "
                            "TransformerConfig.__post_init__)")
        layer_kinds = np.array([k in (BLOCK, MOE) for k in self.kind_list], dtype=bool)
        return activation_offload.apply(columns, counts, self.kind_index, layer_kinds, self.host_share.copy_rate,
                                        handler=self.job.activation_offload_handler)

    def batch(self, cands: Sequence[Candidate]) -> tuple[ConfigTable, CandidateArrays]:
        """The configuration table of ``cands`` and the candidates as columns into it."""
        configs, arrays = CandidateArrays.of(cands)
        if len(configs) != 1:
            return self.config_table(configs), arrays
        table = self._single_tables.get(configs[0])
        if table is None:
            if len(self._single_tables) >= _SINGLE_TABLES:
                self._single_tables.clear()
            table = self._single_tables[configs[0]] = self.config_table(configs)
        return table, arrays
