"""Cost tables in the integer units of the stage DP.

A :class:`Candidate` is one fully specified configuration. :class:`Scenario` prices it:
node kinds are costed once per layer configuration (compute, memory, communication
volumes); the candidate's rank order then places every communicator group on the
network, which turns volumes into seconds, and the per-node rows of the DP follow.
"""

from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from .compute import KernelModel
from .costs import KindCost, LayerConfig, NodeCostModel
from .layout import DEFAULT_ORDER, Layout, expert_groups, joint_groups
from .model import active_parameter_count, chain_kinds, chain_names, parameter_count
from .network import GroupShape, group_shape, ring_link
from .specs import ClusterSpec, JobSpec, ModelSpec

PS = 1e12
"""Picoseconds per second: the DP's integer time unit."""

OPTIMIZER_KERNELS = 4
"""Launches of a fused multi-tensor optimizer step (its fixed cost)."""

ZERO_STAGES = (0, 1, 2, 3)


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def to_ps(seconds) -> np.ndarray:
    """Seconds to integer picoseconds (round half up)."""
    return np.floor(np.asarray(seconds, dtype=np.float64) * PS + 0.5).astype(np.int64)


@dataclass(frozen=True)
class Candidate:
    """One configuration: layer config, pipeline/data degrees, interleaving, ZeRO, order."""

    cfg: LayerConfig
    pp: int
    dp: int
    vp: int = 1
    zero: int = 0
    order: str = DEFAULT_ORDER

    @property
    def devices(self) -> int:
        return self.cfg.tp * self.cfg.cp * self.dp * self.pp

    @property
    def virtual_stages(self) -> int:
        return self.pp * self.vp


@dataclass(frozen=True)
class Placement:
    """Prices of every communicator group of one layout (worst group of each kind)."""

    tp: GroupShape
    cp_ring: tuple[float, float]  # (latency, seconds per byte) of the slowest ring link
    dense_dp: GroupShape  # data x context ranks holding the same dense weights
    ep: GroupShape
    expert_dp: GroupShape
    boundary_tiers: np.ndarray  # [pp]; entry k: stage k -> k+1 (last: wrap to stage 0)


@dataclass(frozen=True)
class KindTimes:
    """Seconds per micro-batch of one node kind under one candidate, by cause."""

    compute: float
    tp_comm: float
    cp_comm: float
    ep_comm: float
    dp_comm: float  # ZeRO-2/3 traffic during the micro-batch, exposed part

    @property
    def total(self) -> float:
        return self.compute + self.tp_comm + self.cp_comm + self.ep_comm + self.dp_comm


@dataclass(frozen=True)
class SyncTerms:
    """End-of-step cost per parameter (dense / expert) and fixed, plus memory per parameter."""

    fixed_s: float
    dense_s: float
    expert_s: float
    dense_optimizer_s: float
    expert_optimizer_s: float
    dense_bytes: float
    expert_bytes: float


class AnalyticSource:
    """Node costs from the analytic model: nodes of one kind (block, moe, ...) cost alike."""

    def __init__(self, model: ModelSpec, job: JobSpec, kernels: KernelModel):
        self.model = model
        self.kinds = chain_kinds(model)
        self.names = chain_names(model)
        self.parameters = parameter_count(model)
        self.active_parameters = active_parameter_count(model)
        self._costs = NodeCostModel(model, job, kernels)

    def cost(self, kind: str, cfg: LayerConfig) -> KindCost:
        """The cost of a node of ``kind`` under ``cfg``."""
        return self._costs.cost(kind, cfg)


class Scenario:
    """A model, a cluster and a job: prices candidates, with caches.

    ``source`` supplies node costs (default: the analytic model); it has ``kinds`` (a
    label per node; nodes with equal labels cost alike), ``names``, ``parameters``,
    ``active_parameters`` and ``cost(kind, cfg) -> KindCost``.
    """

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, job: JobSpec, source=None):
        self.model, self.cluster, self.job = model, cluster, job
        self.peak_flops = cluster.device.peak_flops(job.dtype)
        self.kernels = KernelModel(cluster.device, job.dtype_bytes, self.peak_flops)
        self.weight_bytes = 4 if job.dtype == "fp32" else 2
        self.source = source or AnalyticSource(model, job, self.kernels)
        self.kinds = list(self.source.kinds)
        self.kind_list = list(dict.fromkeys(self.kinds))
        self.kind_index = np.array([self.kind_list.index(k) for k in self.kinds], dtype=np.int64)
        self._kind_costs: dict[LayerConfig, dict[str, KindCost]] = {}
        self._placements: dict[tuple, Placement] = {}
        self._sizes = cluster.group_sizes()
        self._shapes: dict[tuple, GroupShape] = {}
        self._kind_times: dict[tuple, dict[str, KindTimes]] = {}
        self._sync: dict[tuple, SyncTerms] = {}

    @property
    def num_nodes(self) -> int:
        return len(self.kinds)

    # -- layer configurations ----------------------------------------------------------

    def kind_costs(self, cfg: LayerConfig) -> dict[str, KindCost]:
        """Costs of every node kind present in the model, under ``cfg`` (cached)."""
        if cfg not in self._kind_costs:
            self._kind_costs[cfg] = {kind: self.source.cost(kind, cfg) for kind in self.kind_list}
        return self._kind_costs[cfg]

    def compute_rows(self, configs: list[LayerConfig], with_comm: bool = True) -> dict[str, np.ndarray]:
        """Per config, per node: picoseconds, params, activations, for lower bounds.

        Times include tensor-parallel, context-parallel and expert all-to-all communication
        when ``with_comm``: under every rank order that starts with ``tp-cp`` the TP and CP
        groups are the innermost ``tp`` and ``tp x cp`` devices whatever the other degrees,
        and an aligned run of ``ep`` adjacent devices is the cheapest place an EP group can
        have; otherwise compute only.
        """
        rows = {"time_ps": np.zeros((len(configs), self.num_nodes), dtype=np.int64),
                "params": np.zeros((len(configs), self.num_nodes), dtype=np.int64),
                "expert_params": np.zeros((len(configs), self.num_nodes), dtype=np.int64),
                "act_bytes": np.zeros((len(configs), self.num_nodes), dtype=np.int64),
                "transient": np.zeros(len(configs), dtype=np.int64)}
        for c, cfg in enumerate(configs):
            costs = self.kind_costs(cfg)
            per_kind = [costs[kind] for kind in self.kind_list]
            take = self.kind_index
            if with_comm:
                inner = Candidate(cfg, 1, cfg.ep)  # stage = tp x cp x ep adjacent devices
                times = self.kind_times(inner, zero_comm=False)
                seconds = [times[k].total for k in self.kind_list]
            else:
                seconds = [k.compute_s for k in per_kind]
            rows["time_ps"][c] = to_ps(seconds)[take]
            rows["params"][c] = np.array([k.params_dense for k in per_kind])[take]
            rows["expert_params"][c] = np.array([k.params_expert for k in per_kind])[take]
            rows["act_bytes"][c] = np.array([k.act_bytes for k in per_kind])[take]
            rows["transient"][c] = max(k.transient_bytes for k in costs.values())
        return rows

    # -- placement ---------------------------------------------------------------------

    def layout(self, cand: Candidate) -> Layout:
        cfg = cand.cfg
        return Layout({"tp": cfg.tp, "cp": cfg.cp, "dp": cand.dp, "pp": cand.pp}, cand.order)

    @staticmethod
    def _placement_key(cand: Candidate) -> tuple:
        return (cand.cfg.tp, cand.cfg.cp, cand.dp, cand.pp, cand.cfg.ep, cand.order)

    def placement(self, cand: Candidate) -> Placement:
        """Group prices of the candidate's layout (cached per layout and EP degree)."""
        key = self._placement_key(cand)
        cfg = cand.cfg
        if key not in self._placements:
            layout = self.layout(cand)
            # With every degree and tier size a power of two, each dimension owns its own
            # bits of the rank, so all groups of a dimension decompose alike: pricing the
            # group of rank 0 is exact. Otherwise every group is priced.
            first = all(_power_of_two(x) for x in (*key[:5], *self._sizes))
            shape = lambda groups: self._group_shape(groups[:1] if first else groups)  # noqa: E731
            groups = lambda dims: joint_groups(layout, dims, first_only=first)  # noqa: E731
            ep_groups, edp_groups = expert_groups(layout, cfg.ep)
            self._placements[key] = Placement(
                tp=shape(groups(("tp",))),
                cp_ring=ring_link(self.cluster, groups(("cp",))),
                dense_dp=shape(groups(("cp", "dp"))),
                ep=shape(ep_groups), expert_dp=shape(edp_groups),
                boundary_tiers=layout.boundary_tiers(self.cluster))
        return self._placements[key]

    def _group_shape(self, groups: np.ndarray) -> GroupShape:
        """:func:`group_shape`, cached by the groups' device indices."""
        key = (groups.shape, groups.tobytes())
        if key not in self._shapes:
            self._shapes[key] = group_shape(self.cluster, groups)
        return self._shapes[key]

    # -- candidates --------------------------------------------------------------------

    def micro_batches(self, cand: Candidate) -> int:
        return self.job.global_batch // (cand.dp * cand.cfg.micro_batch)

    def kind_times(self, cand: Candidate, zero_comm: bool = True) -> dict[str, KindTimes]:
        """Per node kind: seconds per micro-batch on one device, split by cause.

        Overlap assumptions: ring-attention transfers hide behind the attention core of
        the same pass; ZeRO-2 reduce-scatters a node's gradients during its backward and
        ZeRO-3 gathers its weights during the previous node's compute (prefetch), so
        only the excess over the node's own compute is exposed. TP and EP collectives
        are on the critical path (Megatron's defaults).
        """
        key = (cand.cfg, self._placement_key(cand), cand.zero, zero_comm)
        if key not in self._kind_times:
            self._kind_times[key] = self._price_kinds(cand, zero_comm)
        return self._kind_times[key]

    def _price_kinds(self, cand: Candidate, zero_comm: bool) -> dict[str, KindTimes]:
        place = self.placement(cand)
        opt = self.job.optimizer
        out = {}
        for kind, cost in self.kind_costs(cand.cfg).items():
            tp = sum(count * place.tp.all_reduce(nbytes) for count, nbytes in cost.tp_ops)
            lat, per_byte = place.cp_ring
            cp = 0.0
            if cand.cfg.cp > 1:
                passes = cost.cp_steps_fwd / (cand.cfg.cp - 1)
                cp = max(0.0, cost.cp_steps_fwd * (lat + per_byte * cost.cp_fwd_bytes)
                         - passes * cost.core_fwd_s)
                cp += max(0.0, cost.cp_steps_bwd * (lat + per_byte * cost.cp_bwd_bytes) - cost.core_bwd_s)
            alpha, beta = place.ep.all_to_all_terms()
            ep = sum(count * (alpha + beta * nbytes) for count, nbytes in cost.ep_ops)
            dp = 0.0
            if zero_comm and cand.zero >= 2:
                reduce = (place.dense_dp.reduce_scatter(opt.grad_bytes * cost.params_dense)
                          + place.expert_dp.reduce_scatter(opt.grad_bytes * cost.params_expert))
                gather = 0.0
                if cand.zero == 3:
                    gather = (place.dense_dp.all_gather(self.weight_bytes * cost.params_dense)
                              + place.expert_dp.all_gather(self.weight_bytes * cost.params_expert))
                    dp += max(0.0, gather - cost.fwd_s)
                    if cand.cfg.recompute == "full":
                        dp += max(0.0, gather - cost.recompute_s)
                dp += max(0.0, gather + reduce - cost.bwd_s)
            out[kind] = KindTimes(cost.compute_s, tp, cp, ep, dp)
        return out

    def sync_terms(self, cand: Candidate) -> SyncTerms:
        """End-of-step data-parallel sync and optimizer step, and memory per parameter.

        ZeRO-0: all-reduce of fp32 gradients; 1: reduce-scatter of gradients and all-gather
        of the updated weights (Megatron's distributed optimizer); 2: gradients are already
        reduced per micro-batch, the weights are all-gathered; 3: nothing (weights stay
        sharded). Dense weights sync over the data x context ranks, experts over their
        expert-data-parallel group.
        """
        key = (self._placement_key(cand), cand.zero)
        if key not in self._sync:
            self._sync[key] = self._price_sync(cand)
        return self._sync[key]

    def _price_sync(self, cand: Candidate) -> SyncTerms:
        place = self.placement(cand)
        opt, wb = self.job.optimizer, self.weight_bytes
        zero = cand.zero
        touched = opt.grad_bytes + 2 * opt.master_bytes + 2 * opt.state_bytes + wb
        fixed = OPTIMIZER_KERNELS * self.kernels.overhead
        per_param, optimizer, memory = [], [], []
        for group in (place.dense_dp, place.expert_dp):
            alpha, beta = group.reduce_scatter_terms()
            shards = group.size
            if zero == 0:
                per_param.append(2 * beta * opt.grad_bytes)
                fixed += 2 * alpha
            elif zero == 1:
                per_param.append(beta * (opt.grad_bytes + wb))
                fixed += 2 * alpha
            elif zero == 2:
                per_param.append(beta * wb)
                fixed += alpha
            else:
                per_param.append(0.0)
            optimizer.append(touched / self.kernels.memory_rate / (shards if zero >= 1 else 1))
            memory.append(wb / (shards if zero >= 3 else 1)
                          + opt.grad_bytes / (shards if zero >= 2 else 1)
                          + opt.sharded_bytes / (shards if zero >= 1 else 1))
        return SyncTerms(fixed, per_param[0], per_param[1], optimizer[0], optimizer[1],
                         memory[0], memory[1])

    def inflight(self, cand: Candidate) -> np.ndarray:
        """Micro-batch activations kept per virtual stage (1F1B; interleaved per Megatron)."""
        p, v, m = cand.pp, cand.vp, self.micro_batches(cand)
        device = np.arange(p * v) % p
        if v == 1:
            return np.minimum(p - device, m).astype(np.float64)
        warmup = (p - device - 1) * 2 + (v - 1) * p  # Megatron's interleaved warm-up
        return np.minimum(warmup + 1, m * v).astype(np.float64)

    def rows(self, cands: list[Candidate]) -> dict[str, np.ndarray]:
        """The DP's per-candidate tables (one table row per candidate).

        Per candidate only per-kind numbers are computed in Python; the ``[candidate,
        node]`` tables are then gathered by node kind in one numpy operation each.
        """
        n, n_kinds = len(cands), len(self.kind_list)
        latency = np.array([t.latency for t in self.cluster.tiers])
        bandwidth = np.array([t.effective_bandwidth for t in self.cluster.tiers])
        seconds = np.zeros((n, n_kinds))
        dense = np.zeros((n, n_kinds))
        expert = np.zeros((n, n_kinds))
        act = np.zeros((n, n_kinds), dtype=np.int64)
        out = np.zeros((n, n_kinds))
        sync_per = np.zeros((n, 4))  # dense sync+opt, expert sync+opt, dense bytes, expert bytes
        scalars = {name: np.zeros(n) for name in ("mem_fixed", "mem_per_param", "g0", "g1")}
        scalars["scale"] = np.zeros(n, dtype=np.int64)
        inflight, pos_tiers = [], []
        for i, cand in enumerate(cands):
            costs = self.kind_costs(cand.cfg)
            times = self.kind_times(cand)
            sync = self.sync_terms(cand)
            for kind, cost in costs.items():
                j = self.kind_list.index(kind)
                seconds[i, j] = times[kind].total
                dense[i, j], expert[i, j] = cost.params_dense, cost.params_expert
                act[i, j], out[i, j] = cost.act_bytes, cost.out_bytes
            sync_per[i] = (sync.dense_s + sync.dense_optimizer_s, sync.expert_s + sync.expert_optimizer_s,
                           sync.dense_bytes, sync.expert_bytes)
            v = cand.vp
            scalars["scale"][i] = self.micro_batches(cand) * v + cand.pp - 1
            scalars["mem_fixed"][i] = self.job.reserved_memory_bytes + max(
                c.transient_bytes for c in costs.values())
            scalars["mem_per_param"][i] = v  # a device holds v chunks like this one
            scalars["g0"][i] = sync.fixed_s * PS
            scalars["g1"][i] = v
            inflight.append(self.inflight(cand))
            tiers = self.placement(cand).boundary_tiers[np.arange(cand.virtual_stages) % cand.pp]
            tiers[-1] = -1
            pos_tiers.append(tiers)
        take = self.kind_index
        table = {
            "time_ps": to_ps(seconds)[:, take],
            "params": to_ps(sync_per[:, :1] * dense + sync_per[:, 1:2] * expert)[:, take],
            "mem_params": np.ceil(sync_per[:, 2:3] * dense + sync_per[:, 3:4] * expert).astype(np.int64)[:, take],
            "act_bytes": act[:, take],
        }
        send = to_ps(latency[None, :, None] + out[:, None, :] / bandwidth[None, :, None])[:, :, take]
        send[:, :, -1] = 0  # the last node sends nothing
        table["send_ps"] = np.ascontiguousarray(send)
        table.update(scalars)
        table["pos_inflight"] = np.concatenate(inflight) if inflight else np.zeros(0)
        table["pos_tier"] = np.concatenate(pos_tiers) if pos_tiers else np.zeros(0, dtype=np.int64)
        table["pos_offset"] = np.concatenate(([0], np.cumsum([c.virtual_stages for c in cands]))).astype(np.int64)
        return table
