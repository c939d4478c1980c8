"""Cost tables: per layer configuration (dense ``[config, node]`` arrays) and per
candidate (scalars and per-position arrays), in the integer units of the DP.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .compute import KernelModel
from .costs import LayerConfig, NodeCostModel
from .layout import DEFAULT_ORDER, Layout
from .model import chain_kinds
from .network import GroupShape, group_shape
from .space import Candidates
from .specs import ClusterSpec, JobSpec, ModelSpec

PS = 1e12
"""Picoseconds per second: the DP's integer time unit."""

OPTIMIZER_KERNELS = 4
"""Launches of a fused multi-tensor optimizer step (its fixed cost)."""


def to_ps(seconds) -> np.ndarray:
    """Seconds to integer picoseconds (round half up)."""
    return np.floor(np.asarray(seconds, dtype=np.float64) * PS + 0.5).astype(np.int64)


@dataclass(frozen=True)
class ConfigTables:
    """Node costs of every layer configuration: arrays indexed ``[config, node]``."""

    time_ps: np.ndarray
    params: np.ndarray
    act_bytes: np.ndarray
    send_ps: np.ndarray  # [config, tier, node]
    compute_s: np.ndarray  # float, for the time breakdown
    tp_comm_s: np.ndarray
    model_flops: np.ndarray
    transient_bytes: np.ndarray  # [config]: largest transient of any node

    @property
    def total_time_ps(self) -> np.ndarray:
        return self.time_ps.sum(axis=1)


class Scenario:
    """A model, a cluster and a job: builds every table the search needs, with caches."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, job: JobSpec,
                 rank_order: str = DEFAULT_ORDER):
        self.model, self.cluster, self.job = model, cluster, job
        self.rank_order = rank_order
        self.kinds = chain_kinds(model)
        self.peak_flops = cluster.device.peak_flops(job.dtype)
        self.kernels = KernelModel(cluster.device, job.dtype_bytes, self.peak_flops)
        self.weight_bytes = 4 if job.dtype == "fp32" else 2
        self._layouts: dict[tuple[int, int, int], tuple[GroupShape | None, np.ndarray]] = {}

    @property
    def num_nodes(self) -> int:
        return len(self.kinds)

    # -- layer configurations ----------------------------------------------------------

    @lru_cache(maxsize=None)
    def tp_shape(self, tp: int) -> GroupShape:
        """Tensor-parallel groups are the innermost ``tp`` adjacent devices."""
        return group_shape(self.cluster, np.arange(tp, dtype=np.int64)[None, :])

    def config_tables(self, configs: list[LayerConfig]) -> ConfigTables:
        """Dense node-cost tables for ``configs`` (blocks share one cost evaluation)."""
        n_cfg, n_nodes, n_tiers = len(configs), self.num_nodes, len(self.cluster.tiers)
        compute = np.zeros((n_cfg, n_nodes))
        tp_comm = np.zeros((n_cfg, n_nodes))
        flops = np.zeros((n_cfg, n_nodes))
        params = np.zeros((n_cfg, n_nodes), dtype=np.int64)
        act = np.zeros((n_cfg, n_nodes), dtype=np.int64)
        out = np.zeros((n_cfg, n_nodes))
        transient = np.zeros(n_cfg, dtype=np.int64)
        kinds = np.array(self.kinds)
        for c, cfg in enumerate(configs):
            costs = NodeCostModel(self.model, self.job, self.kernels, self.tp_shape(cfg.tp))
            for kind in ("embedding", "block", "head"):
                cost = costs.cost(kind, cfg)
                mask = kinds == kind
                compute[c, mask] = cost.compute_s
                tp_comm[c, mask] = cost.tp_comm_s
                flops[c, mask] = cost.model_flops
                params[c, mask] = cost.params
                act[c, mask] = cost.act_bytes
                out[c, mask] = cost.out_bytes
                transient[c] = max(transient[c], cost.transient_bytes)
        out[:, -1] = 0.0  # the last node sends nothing
        latency = np.array([t.latency for t in self.cluster.tiers])
        bandwidth = np.array([t.effective_bandwidth for t in self.cluster.tiers])
        send = to_ps(latency[None, :, None] + out[:, None, :] / bandwidth[None, :, None])
        send[:, :, -1] = 0
        return ConfigTables(to_ps(compute + tp_comm), params, act, np.ascontiguousarray(send),
                            compute, tp_comm, flops, transient)

    # -- candidates --------------------------------------------------------------------

    def layout(self, tp: int, dp: int, pp: int) -> Layout:
        return Layout({"tp": tp, "dp": dp, "pp": pp}, self.rank_order)

    def placement(self, tp: int, dp: int, pp: int) -> tuple[GroupShape | None, np.ndarray]:
        """(worst data-parallel group shape or None, tier of each pipeline boundary)."""
        key = (tp, dp, pp)
        if key not in self._layouts:
            layout = self.layout(tp, dp, pp)
            dp_shape = layout.group_shape(self.cluster, "dp") if dp > 1 else None
            self._layouts[key] = (dp_shape, layout.boundary_tiers(self.cluster))
        return self._layouts[key]

    def memory_per_param(self, dp: np.ndarray, distopt: np.ndarray) -> np.ndarray:
        """Bytes per parameter: weights + gradients + optimizer state (sharded with ZeRO-1)."""
        opt = self.job.optimizer
        shards = np.where(distopt, dp, 1).astype(np.float64)
        return self.weight_bytes + opt.grad_bytes + opt.sharded_bytes / shards

    def optimizer_terms(self, dp: np.ndarray, distopt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(seconds, seconds per parameter)`` of the optimizer step (bandwidth-bound)."""
        opt = self.job.optimizer
        touched = opt.grad_bytes + 2 * opt.master_bytes + 2 * opt.state_bytes + self.weight_bytes
        shards = np.where(distopt, dp, 1).astype(np.float64)
        per_param = touched / self.kernels.memory_rate / shards
        return np.full(len(dp), OPTIMIZER_KERNELS * self.kernels.overhead), per_param

    def sync_terms(self, cands: Candidates) -> tuple[np.ndarray, np.ndarray]:
        """``(seconds, seconds per parameter)`` of the exposed data-parallel gradient sync.

        All-reduce of fp32 gradients, or with the distributed optimizer a reduce-scatter
        of gradients plus an all-gather of the updated bf16 weights.
        """
        g0 = np.zeros(len(cands))
        g1 = np.zeros(len(cands))
        opt = self.job.optimizer
        for n in range(len(cands)):
            tp = cands.configs[cands.config[n]].tp
            shape, _ = self.placement(tp, int(cands.dp[n]), int(cands.pp[n]))
            if shape is None:
                continue
            alpha, beta = shape.reduce_scatter_terms()
            g0[n] = 2 * alpha
            if cands.distributed_optimizer[n]:
                g1[n] = beta * (opt.grad_bytes + self.weight_bytes)
            else:
                g1[n] = 2 * beta * opt.grad_bytes
        return g0, g1

    def micro_batches(self, cands: Candidates) -> np.ndarray:
        mbs = np.array([cfg.micro_batch for cfg in cands.configs], dtype=np.int64)[cands.config]
        return self.job.global_batch // (cands.dp * mbs)
