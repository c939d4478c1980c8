"""Cost tables in the integer units of the stage DP.

A :class:`Candidate` is one fully specified configuration. :class:`Scenario` prices it:
node kinds are costed once per layer configuration (compute, memory, communication
volumes); the candidate's rank order then places every communicator group on the
network, which turns volumes into seconds, and the per-node rows of the DP follow.

Two paths compute the same numbers. The scalar one (:meth:`Scenario.kind_costs`,
:meth:`~Scenario.kind_times`, :meth:`~Scenario.sync_terms`) prices one candidate with
Python objects; reports and the simulator read it. The columnar one
(:meth:`Scenario.config_table`, :meth:`~Scenario.price`) prices many candidates with
numpy: each expression mirrors its scalar twin operation for operation and in the same
order, so every table entry is bit-identical (IEEE arithmetic is deterministic; integers
stay integers until the scalar code converts them). :meth:`~Scenario.rows` and the
search use it. Fed with :meth:`~Scenario.floor_terms` instead of a placement's exact
group prices, the same expressions give lower bounds (they are monotone in every term).

Placements price each communicator family on its reduced form (nest.layout): the same
distinct group prices as all groups of the layout, from a handful of groups, cached
across layouts.

On a graph cluster (:attr:`ClusterSpec.graph <nest.specs.ClusterSpec>`) rank ``r`` runs
on device ``device_order[r]`` and :class:`nest.topology.GraphNetwork` prices every family
of the candidate's layout with all its groups at once (contention), cached by the
family's ranks: TP, data x context and expert-data groups as ring reduce-scatters (flat
or hierarchical, whichever is faster for large messages), EP groups as all-to-alls, the
context-parallel ring as one ring step, and each pipeline boundary (stage ``k`` to
``k + 1``, the last wrapping to the first) as the concurrent transfers of all its rank
pairs. Boundaries then have prices of their own instead of a tier: the DP's send table
of a candidate has one row per boundary (``pos_tier`` = boundary index), and the
configuration table's single row is the floor every transfer respects. Floors for the
search: with the rank order's strides known, the flows the first member of the rank-0
group of each family sends, alone (a subset of the family's flows can only load links
less); otherwise bounds that hold for any group of that size (see ``GraphNetwork``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
import numpy as np

from .compute import KernelModel
from .costs import (COST_FIELDS, OP_FIELDS, RECOMPUTE_MODES, ConfigArrays, KindCost, LayerConfig,
                    NodeCostModel, kind_cost_columns, table_is_exact)
from .layout import (DEFAULT_ORDER, Layout, boundary_tiers_reduced, expert_families, expert_groups,
                     family_groups, joint_family, joint_groups, parse_order, reduce_leaders)
from .model import active_parameter_count, chain_kinds, chain_names, parameter_count
from .network import GroupShape, group_shape, pair_tier_floor, ring_floor, ring_link, shape_floor
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
    # graph clusters: (alpha[pp], beta[pp]) of every boundary, its own price (the tiers
    # above are then the levels of the device order the boundary crosses)
    boundary: tuple[np.ndarray, np.ndarray] | None = None


@dataclass(frozen=True)
class GraphGroup:
    """A communicator family priced on a graph: the :class:`~nest.network.GroupShape`
    interface the cost model uses, with the graph's alpha-beta terms (reduce-scatter for
    TP and data-parallel groups, all-to-all for EP groups; the other is unused)."""

    size: int
    rs: tuple[float, float] = (0.0, 0.0)
    a2a: tuple[float, float] = (0.0, 0.0)

    def reduce_scatter_terms(self) -> tuple[float, float]:
        return self.rs

    def all_to_all_terms(self) -> tuple[float, float]:
        return self.a2a

    def reduce_scatter(self, nbytes: float) -> float:
        if nbytes <= 0:
            return 0.0
        alpha, beta = self.rs
        return alpha + beta * nbytes

    def all_gather(self, nbytes: float) -> float:
        return self.reduce_scatter(nbytes)

    def all_reduce(self, nbytes: float) -> float:
        return 2 * self.reduce_scatter(nbytes)


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
    """End-of-step cost per parameter (dense / expert) and fixed, plus memory per parameter.

    ``*_s`` is the collectives' time per parameter, ``*_reduce_s`` and ``*_gather_s`` its
    gradient-reduction and weight-gather parts (what the overlap switches hide)."""

    fixed_s: float
    dense_s: float
    expert_s: float
    dense_optimizer_s: float
    expert_optimizer_s: float
    dense_bytes: float
    expert_bytes: float
    dense_reduce_s: float
    expert_reduce_s: float
    dense_gather_s: float
    expert_gather_s: float


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

    def cost(self, kind: str, cfg: LayerConfig) -> KindCost:
        """The cost of a node of ``kind`` under ``cfg``."""
        return self._costs.cost(kind, cfg)

    def table(self, kind: str, configs: ConfigArrays) -> dict[str, np.ndarray] | None:
        """:data:`~nest.costs.COST_FIELDS` columns of ``kind`` under every configuration
        (None when they could not be bit-identical to :meth:`cost`)."""
        if not len(configs):
            return None
        if not table_is_exact(self.model, self.job, self._costs.e, int(configs.micro_batch.max())):
            return None
        return self._costs.table(kind, configs)


# -- columnar tables ---------------------------------------------------------------------


@dataclass
class ConfigTable:
    """Node-kind costs of many layer configurations: ``cols[name][config, kind]``."""

    configs: Sequence[LayerConfig]
    arrays: ConfigArrays
    cols: dict[str, np.ndarray]
    transient: np.ndarray  # [C] int64: largest transient bytes of any kind
    send_ps: np.ndarray  # [C, tiers, kinds]: a node's output sent across a tier
    _cache: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.configs)


@dataclass
class CandidateArrays:
    """Candidates as columns: ``config`` indexes a :class:`ConfigTable`, ``order`` indexes
    ``orders``."""

    config: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    vp: np.ndarray
    zero: np.ndarray
    order: np.ndarray
    orders: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.config)

    def take(self, index) -> "CandidateArrays":
        return CandidateArrays(self.config[index], self.pp[index], self.dp[index], self.vp[index],
                               self.zero[index], self.order[index], self.orders)

    def candidate(self, table: ConfigTable, i: int) -> Candidate:
        return Candidate(table.configs[int(self.config[i])], int(self.pp[i]), int(self.dp[i]),
                         int(self.vp[i]), int(self.zero[i]), self.orders[int(self.order[i])])


@dataclass
class GroupTerms:
    """Alpha-beta terms of a candidate's groups, one array entry per candidate: exact
    (from its placement) or lower bounds over placements (see :meth:`Scenario.floor_terms`)."""

    tp: tuple[np.ndarray, np.ndarray]  # reduce-scatter (alpha, beta)
    cp_ring: tuple[np.ndarray, np.ndarray]  # (latency, seconds per byte)
    ep: tuple[np.ndarray, np.ndarray]  # all-to-all (alpha, beta)
    dense_dp: tuple[np.ndarray, np.ndarray]  # reduce-scatter (alpha, beta)
    expert_dp: tuple[np.ndarray, np.ndarray]
    dense_shards: np.ndarray
    expert_shards: np.ndarray


def tp_exposed(tp_s, degree, compute_s):
    """Exposed tensor-parallel communication under ``job.tp_comm_overlap``: each
    collective split into ``degree`` chunks pipelined with the compute they feed, so one
    chunk stays exposed, and no more hides than the node's compute lasts (scalars or
    arrays, the same operations)."""
    return np.maximum(tp_s / degree, tp_s - compute_s)


def reduce_exposed(reduce_s, bwd_s, job: JobSpec):
    """A node's gradient reduction beyond its backward under ``job.overlap_grad_reduce``,
    else all of it (scalars or arrays, the same operations)."""
    return np.maximum(0.0, reduce_s - bwd_s) if job.overlap_grad_reduce else reduce_s


def gather_exposed(gather_s, fwd_s, job: JobSpec):
    """A node's weight all-gather beyond its forward under ``job.overlap_param_gather``,
    else all of it (scalars or arrays, the same operations)."""
    return np.maximum(0.0, gather_s - fwd_s) if job.overlap_param_gather else gather_s


def sync_exposed(reduce_s, gather_s, fwd_s, bwd_s, job: JobSpec):
    """Exposed end-of-step data-parallel collectives of one node: :func:`reduce_exposed`
    plus :func:`gather_exposed`."""
    return reduce_exposed(reduce_s, bwd_s, job) + gather_exposed(gather_s, fwd_s, job)


def _reduce_scatter(alpha, beta, nbytes):
    """:meth:`GroupShape.reduce_scatter` elementwise (nothing to reduce costs nothing)."""
    return np.where(nbytes <= 0, 0.0, alpha + beta * nbytes)


def layout_strides(order: str, tp, cp, dp, pp) -> dict[str, np.ndarray]:
    """:meth:`Layout.strides` elementwise over degree arrays (expert degree 1)."""
    degrees = {"tp": tp, "cp": cp, "ep": 1, "dp": dp, "pp": pp}
    strides, stride = {}, 1
    for dim in parse_order(order):
        strides[dim] = stride
        stride = stride * degrees[dim]
    return strides


class Scenario:
    """A model, a cluster and a job: prices candidates, with caches.

    ``source`` supplies node costs (default: the analytic model); it has ``kinds`` (a
    label per node; nodes with equal labels cost alike), ``names``, ``parameters``,
    ``active_parameters`` and ``cost(kind, cfg) -> KindCost``, and optionally
    ``table(kind, ConfigArrays)`` returning :data:`~nest.costs.COST_FIELDS` columns
    identical to ``cost`` (or None).
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
        self.kind_count = np.bincount(self.kind_index, minlength=len(self.kind_list)).astype(np.int64)
        self._kind_costs: dict[LayerConfig, dict[str, KindCost]] = {}
        self._placements: dict[tuple, Placement] = {}
        self._sizes = cluster.group_sizes()
        self._period = self._sizes[-2] if len(self._sizes) > 1 else 1
        self._shapes: dict[tuple, GroupShape] = {}
        self._families: dict[tuple, object] = {}
        self._floors: dict[tuple, object] = {}
        self._terms: dict[tuple, tuple] = {}
        self._kind_times: dict[tuple, dict[str, KindTimes]] = {}
        self._sync: dict[tuple, SyncTerms] = {}
        self._latency = np.array([t.latency for t in cluster.tiers])
        self._bandwidth = np.array([t.effective_bandwidth for t in cluster.tiers])
        self.net = None
        if cluster.graph is not None:
            from .topology import network

            self.net = network(cluster.graph, cluster.device_order)

    @property
    def num_nodes(self) -> int:
        return len(self.kinds)

    # -- layer configurations ----------------------------------------------------------

    def kind_costs(self, cfg: LayerConfig) -> dict[str, KindCost]:
        """Costs of every node kind present in the model, under ``cfg`` (cached)."""
        if cfg not in self._kind_costs:
            self._kind_costs[cfg] = {kind: self.source.cost(kind, cfg) for kind in self.kind_list}
        return self._kind_costs[cfg]

    def config_table(self, configs: list[LayerConfig], arrays: ConfigArrays | None = None) -> ConfigTable:
        """Columns of every node kind under every configuration (``[config, kind]``).

        Uses the source's columnar ``table`` when it has one, else :meth:`kind_costs`.
        """
        arrays = ConfigArrays.of(configs) if arrays is None else arrays
        per_kind = None
        table = getattr(self.source, "table", None)
        if table is not None and len(configs):
            per_kind = [table(kind, arrays) for kind in self.kind_list]
            if any(p is None for p in per_kind):
                per_kind = None
        if per_kind is None:
            per_kind = [kind_cost_columns([self.kind_costs(cfg)[kind] for cfg in configs])
                        for kind in self.kind_list]
        columns = {name: np.stack([p[name] for p in per_kind], axis=1).reshape(len(configs), -1)
                   for name in COST_FIELDS}
        for name in OP_FIELDS:  # [config, kind, slot], slots padded to the largest
            slots = max(p[name].shape[1] for p in per_kind)
            columns[name] = np.stack([np.pad(p[name].reshape(len(configs), -1),
                                             ((0, 0), (0, slots - p[name].shape[1]))) for p in per_kind], axis=1)
        transient = (columns["transient_bytes"].max(axis=1) if len(configs)
                     else np.zeros(0, dtype=np.int64))
        out = columns["out_bytes"].astype(np.float64)
        if self.net is None:
            send = to_ps(self._latency[None, :, None] + out[:, None, :] / self._bandwidth[None, :, None])
        else:  # one row: below every transfer on the graph (its exact rows come with price)
            latency, per_byte = self.net.any_send_floor()
            send = to_ps(latency + per_byte * out[:, None, :])
        return ConfigTable(configs, arrays, columns, transient, send)

    def _inner_kind_ps(self, table: ConfigTable, with_comm: bool, index=None) -> np.ndarray:
        """Per config (of ``index``), per kind: picoseconds on the innermost layout."""
        index = np.arange(len(table)) if index is None else np.asarray(index, dtype=np.int64)
        if not with_comm:
            return to_ps(table.cols["compute_s"][index])
        arrays = table.arrays
        cands = CandidateArrays(index, np.ones(len(index), dtype=np.int64), arrays.ep[index],
                                np.ones(len(index), dtype=np.int64), np.zeros(len(index), dtype=np.int64),
                                np.zeros(len(index), dtype=np.int64), (DEFAULT_ORDER,))
        return to_ps(self.kind_seconds(table, cands, self.exact_terms(table, cands)[0], zero_comm=False))

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
        if key not in self._placements:
            self._placements[key] = self._place(*key)
        return self._placements[key]

    def _place(self, tp: int, cp: int, dp: int, pp: int, ep: int, order: str) -> Placement:
        if self.net is not None:
            return self._place_graph(tp, cp, dp, pp, ep, order)
        return self._place_tiers(tp, cp, dp, pp, ep, order)

    def _place_graph(self, tp: int, cp: int, dp: int, pp: int, ep: int, order: str) -> Placement:
        """Every family of the layout priced on the graph, all its groups at once."""
        net = self.net
        layout = Layout({"tp": tp, "cp": cp, "dp": dp, "pp": pp}, order)
        groups = lambda dims: family_groups(*joint_family(layout, dims))  # noqa: E731  (= joint_groups)
        stages = groups(("tp", "cp", "dp"))  # runs of ep of each stage's ranks: expert_groups
        runs = stages.reshape(stages.shape[0], -1, ep)
        ep_groups, edp_groups = runs.reshape(-1, ep), runs.transpose(0, 2, 1).reshape(-1, runs.shape[1])
        dense = groups(("cp", "dp"))
        expert_dp = (GraphGroup(edp_groups.shape[1], net.ring(edp_groups).best) if self.model.is_moe
                     else GraphGroup(edp_groups.shape[1]))  # no expert weights: nothing to sync
        stride = layout.strides()["pp"]
        ranks = np.arange(layout.size, dtype=np.int64)
        stage = (ranks // stride) % pp
        partner = np.where(stage < pp - 1, ranks + stride, ranks - (pp - 1) * stride)
        boundary = net.boundaries(ranks, partner, stage, pp) if pp > 1 else (np.zeros(1), np.zeros(1))
        return Placement(
            tp=GraphGroup(tp, net.ring(groups(("tp",))).best),
            cp_ring=net.neighbours(groups(("cp",))),
            dense_dp=GraphGroup(dense.shape[1], net.ring(dense).best),
            ep=GraphGroup(ep, a2a=net.all_to_all(ep_groups)), expert_dp=expert_dp,
            boundary_tiers=layout.boundary_tiers(self.cluster), boundary=boundary)

    def boundary_seconds(self, cand: Candidate, k: int, nbytes: float) -> float:
        """Seconds to send ``nbytes`` per rank across pipeline boundary ``k`` (stage ``k``
        to ``k + 1``; ``pp - 1`` wraps to stage 0) of the candidate's placement: on the
        tier it crosses, or on a graph with all the boundary's rank pairs at once."""
        return float(self.boundary_seconds_array(cand, np.array([k]), np.array([nbytes], dtype=np.float64))[0])

    def boundary_seconds_array(self, cand: Candidate, k: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
        """:meth:`boundary_seconds` of many sends at once (boundaries ``k``, elementwise)."""
        place = self.placement(cand)
        if place.boundary is not None:
            alpha, beta = place.boundary
            return np.asarray(alpha)[k] + np.asarray(beta)[k] * nbytes
        tiers = np.asarray(place.boundary_tiers)[k]
        latency = np.array([t.latency for t in self.cluster.tiers])
        bandwidth = np.array([t.effective_bandwidth for t in self.cluster.tiers])
        return latency[tiers] + nbytes / bandwidth[tiers]

    def _place_tiers(self, tp: int, cp: int, dp: int, pp: int, ep: int, order: str) -> Placement:
        """Every group family is priced on its reduced form (see nest.layout): the same
        distinct group prices as all groups of the layout, cached across layouts.

        With every degree and tier size a power of two, each dimension owns its own bits
        of the rank, so all groups of a dimension decompose alike: the group of rank 0
        alone is priced (leaders dropped), as nest always did there.
        """
        layout = Layout({"tp": tp, "cp": cp, "dp": dp, "pp": pp}, order)
        first = all(_power_of_two(x) for x in (tp, cp, dp, pp, ep, *self._sizes))
        family = lambda what, offsets, leaders: self._family(what, offsets, () if first else leaders)  # noqa: E731
        experts = expert_families(layout, ep)
        if experts is None:  # runs of ep do not split the stage: price the explicit groups
            ep_groups, edp_groups = expert_groups(layout, ep)
            ep_shape = self._group_shape(ep_groups[:1] if first else ep_groups)
            edp_shape = self._group_shape(edp_groups[:1] if first else edp_groups)
        else:
            ep_shape, edp_shape = (family("shape", *f) for f in experts)
        return Placement(
            tp=family("shape", *joint_family(layout, ("tp",))),
            cp_ring=family("ring", *joint_family(layout, ("cp",))),
            dense_dp=family("shape", *joint_family(layout, ("cp", "dp"))),
            ep=ep_shape, expert_dp=edp_shape,
            boundary_tiers=boundary_tiers_reduced(layout, self.cluster, self._period))

    def _family(self, what: str, offsets, leaders):
        """The group shape ("shape") or ring link ("ring") of the family ``leaders +
        offsets``, its leaders reduced (see nest.layout), cached."""
        key = (what, offsets, reduce_leaders(leaders, self._period))
        if key not in self._families:
            groups = family_groups(offsets, key[2])
            self._families[key] = (group_shape(self.cluster, groups) if what == "shape"
                                   else ring_link(self.cluster, groups))
        return self._families[key]

    def _group_shape(self, groups: np.ndarray) -> GroupShape:
        """:func:`group_shape`, cached by the groups' device indices."""
        key = (groups.shape, groups.tobytes())
        if key not in self._shapes:
            self._shapes[key] = group_shape(self.cluster, groups)
        return self._shapes[key]

    # -- candidates --------------------------------------------------------------------

    def micro_batches(self, cand: Candidate) -> int:
        return self.job.micro_batches(cand.dp, cand.cfg.micro_batch)

    def kind_times(self, cand: Candidate, zero_comm: bool = True) -> dict[str, KindTimes]:
        """Per node kind: seconds per micro-batch on one device, split by cause.

        Overlap assumptions: ring-attention transfers hide behind the attention core of
        the same pass; ZeRO-2 reduce-scatters a node's gradients during its backward and
        ZeRO-3 gathers its weights during the previous node's compute (prefetch), so
        only the excess over the node's own compute is exposed. TP and EP collectives
        are on the critical path (Megatron's defaults); with ``job.tp_comm_overlap`` the
        TP ones are exposed as :func:`tp_exposed`.
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
            if self.job.tp_comm_overlap and cand.cfg.tp > 1:
                tp = tp_exposed(tp, cand.cfg.tp, cost.compute_s)
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
        per_param, optimizer, memory, reduce, gather = [], [], [], [], []
        for is_expert, group in ((False, place.dense_dp), (True, place.expert_dp)):
            alpha, beta = group.reduce_scatter_terms()
            if is_expert and not self.model.is_moe:
                alpha = 0.0  # no expert parameters: no expert collective to wait for
            shards = group.size
            reduce.append({0: 2 * beta * opt.grad_bytes, 1: beta * opt.grad_bytes}.get(zero, 0.0))
            gather.append(beta * wb if zero in (1, 2) else 0.0)
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
                         memory[0], memory[1], reduce[0], reduce[1], gather[0], gather[1])

    def node_sync_seconds(self, cand: Candidate, start: int, stop: int) -> tuple[float, float, float]:
        """(gradient reduction, weight gather, optimizer step) seconds of the end-of-step
        sync of nodes ``[start, stop)``, collectives counted by their exposed part
        (:func:`sync_exposed`): the scalar twin of :meth:`sync_weights`, latency terms
        (``fixed_s``) left out."""
        sync, costs, kinds = self.sync_terms(cand), self.kind_costs(cand.cfg), self.kinds
        reduce = gather = optimizer = 0.0
        for i in range(start, stop):
            c = costs[kinds[i]]
            optimizer += sync.dense_optimizer_s * c.params_dense + sync.expert_optimizer_s * c.params_expert
            r = sync.dense_reduce_s * c.params_dense + sync.expert_reduce_s * c.params_expert
            g = sync.dense_gather_s * c.params_dense + sync.expert_gather_s * c.params_expert
            reduce += float(reduce_exposed(r, c.bwd_s, self.job))
            gather += float(gather_exposed(g, c.fwd_s, self.job))
        return reduce, gather, optimizer

    def inflight(self, cand: Candidate) -> np.ndarray:
        """Micro-batch activations kept per virtual stage (1F1B; interleaved per Megatron)."""
        p, v, m = cand.pp, cand.vp, self.micro_batches(cand)
        device = np.arange(p * v) % p
        if v == 1:
            return np.minimum(p - device, m).astype(np.float64)
        warmup = (p - device - 1) * 2 + (v - 1) * p  # Megatron's interleaved warm-up
        return np.minimum(warmup + 1, m * v).astype(np.float64)

    def rows(self, cands: list[Candidate]) -> dict[str, np.ndarray]:
        """The DP's per-candidate tables (one table row per candidate)."""
        configs = list(dict.fromkeys(c.cfg for c in cands))
        where = {cfg: i for i, cfg in enumerate(configs)}
        orders = tuple(dict.fromkeys(c.order for c in cands)) or (DEFAULT_ORDER,)
        column = lambda get: np.array([get(c) for c in cands], dtype=np.int64)  # noqa: E731
        arrays = CandidateArrays(column(lambda c: where[c.cfg]), column(lambda c: c.pp),
                                 column(lambda c: c.dp), column(lambda c: c.vp), column(lambda c: c.zero),
                                 column(lambda c: orders.index(c.order)), orders)
        return self.price(self.config_table(configs), arrays)

    # -- columnar pricing --------------------------------------------------------------

    def _candidate_terms(self, key: tuple) -> tuple:
        """Alpha-beta terms and boundary tiers of one placement key (cached)."""
        if key not in self._terms:
            place = self._placements.get(key)
            if place is None:
                place = self._placements[key] = self._place(*key)
            self._terms[key] = (*place.tp.reduce_scatter_terms(), *place.cp_ring,
                                *place.ep.all_to_all_terms(), *place.dense_dp.reduce_scatter_terms(),
                                *place.expert_dp.reduce_scatter_terms(), place.dense_dp.size,
                                place.expert_dp.size, place.boundary_tiers, place.boundary)
        return self._terms[key]

    def exact_terms(self, table: ConfigTable, cands: CandidateArrays) -> tuple[GroupTerms, list]:
        """Group terms of every candidate's own placement, and its boundary tiers (on a
        graph cluster: each boundary's ``(alpha[pp], beta[pp])``)."""
        arrays = table.arrays
        tp, cp, ep = arrays.tp[cands.config], arrays.cp[cands.config], arrays.ep[cands.config]
        keys = zip(tp.tolist(), cp.tolist(), cands.dp.tolist(), cands.pp.tolist(), ep.tolist(),
                   (cands.orders[o] for o in cands.order.tolist()))
        terms = [self._candidate_terms(key) for key in keys]
        if terms:
            values = np.array([t[:12] for t in terms], dtype=np.float64).T
        else:
            values = np.zeros((12, 0))
        return (GroupTerms((values[0], values[1]), (values[2], values[3]), (values[4], values[5]),
                           (values[6], values[7]), (values[8], values[9]), values[10], values[11]),
                [t[13] if self.net is not None else t[12] for t in terms])

    def floor_terms(self, table: ConfigTable, cands: CandidateArrays, orders=None) -> GroupTerms:
        """Lower bounds on every group term of each candidate, whatever its placement.

        On a graph cluster see :meth:`_graph_floor_terms`; otherwise:

        Strides follow the candidate's rank order (or, with ``orders``, the smallest
        over those orders, taking unknown degrees as 1); each group's members are at least
        its smallest dimension stride apart (expert-DP members: ``ep`` stage ranks apart),
        which bounds how many share a tier group (see :class:`~nest.network.ShapeFloor`).
        """
        if self.net is not None:
            return self._graph_floor_terms(table, cands, orders)
        arrays = table.arrays
        tp, cp, ep = arrays.tp[cands.config], arrays.cp[cands.config], arrays.ep[cands.config]
        dp, pp = cands.dp, cands.pp
        if orders is None:
            strides = [layout_strides(o, tp, cp, dp, pp) for o in cands.orders]
            rows = np.arange(len(cands))
            pick = lambda dim: np.stack([s[dim] * np.ones_like(tp) for s in strides])[cands.order, rows]  # noqa: E731
        else:
            strides = [layout_strides(o, tp, cp, dp, pp) for o in orders]
            pick = lambda dim: np.min([s[dim] * np.ones_like(tp) for s in strides], axis=0)  # noqa: E731
        s_tp, s_cp, s_dp = pick("tp"), pick("cp"), pick("dp")
        inf = np.iinfo(np.int64).max
        stage_step = np.minimum(np.where(tp > 1, s_tp, inf), np.minimum(np.where(cp > 1, s_cp, inf),
                                                                        np.where(dp > 1, s_dp, inf)))
        stage_step = np.where(stage_step == inf, 1, stage_step)
        dense_step = np.minimum(np.where(cp > 1, s_cp, inf), np.where(dp > 1, s_dp, inf))
        dense_step = np.where(dense_step == inf, 1, dense_step)
        dense_size, expert_size = dp * cp, np.maximum(tp * cp * dp // ep, 1)
        tp_f = self._shape_floors(tp, s_tp)
        ep_f = self._shape_floors(ep, stage_step)
        dd_f = self._shape_floors(dense_size, dense_step)
        ed_f = self._shape_floors(expert_size, ep * stage_step)
        span = (cp - 1) * s_cp + 1
        ring = self._lookup(("ring",), span, lambda s: ring_floor(self.cluster, int(s)), 2)
        return GroupTerms((tp_f[0], tp_f[1]), (ring[0], ring[1]), (ep_f[2], ep_f[3]), (dd_f[0], dd_f[1]),
                          (ed_f[0], ed_f[1]), dense_size.astype(np.float64), expert_size.astype(np.float64))

    def _graph_floor_terms(self, table: ConfigTable, cands: CandidateArrays, orders) -> GroupTerms:
        """:meth:`floor_terms` on a graph. With the candidates' own rank orders (``orders``
        None) every degree is known: each family is bounded by the flows the first rank
        of its rank-0 group sends, alone (:class:`~nest.topology.GraphNetwork` floors;
        a subset of a family's flows loads every link at most as much and has no longer
        paths). With ``orders`` (degrees unknown) by what any group of the family's size
        costs at least."""
        arrays, net = table.arrays, self.net
        tp, cp, ep = arrays.tp[cands.config], arrays.cp[cands.config], arrays.ep[cands.config]
        dense_size, expert_size = cands.dp * cp, np.maximum(tp * cp * cands.dp // ep, 1)
        if orders is not None:
            tp_f, dd_f, ed_f = (net.any_ring_floor(k) for k in (tp, dense_size, expert_size))
            ep_f = net.any_all_to_all_floor(ep)
            lat, per_byte = net.any_send_floor()
            on = cp > 1
            ring = (np.where(on, lat, 0.0), np.where(on, per_byte, 0.0))
        else:
            keys = np.stack([tp, cp, cands.dp, cands.pp, ep, cands.order], axis=1)
            unique, inverse = np.unique(keys, axis=0, return_inverse=True)
            values = np.array([self._graph_floor(*row[:5], cands.orders[row[5]]) for row in unique.tolist()],
                              dtype=np.float64).reshape(len(unique), 10)[inverse.ravel()].T
            tp_f, ring, ep_f, dd_f, ed_f = ((values[i], values[i + 1]) for i in range(0, 10, 2))
        if not self.model.is_moe:
            ed_f = (np.zeros(len(cands)), np.zeros(len(cands)))
        return GroupTerms(tp_f, ring, ep_f, dd_f, ed_f, dense_size.astype(np.float64),
                          expert_size.astype(np.float64))

    def _graph_floor(self, tp: int, cp: int, dp: int, pp: int, ep: int, order: str) -> tuple:
        """Floors of the families of one layout (cached): (tp, cp ring, ep, dense, expert)
        alpha-beta pairs from the rank-0 group of each."""
        key = ("graph", tp, cp, dp, pp, ep, order)
        if key not in self._floors:
            net = self.net
            layout = Layout({"tp": tp, "cp": cp, "dp": dp, "pp": pp}, order)
            first = lambda dims: joint_groups(layout, dims, first_only=True)[0]  # noqa: E731
            stage = first(("tp", "cp", "dp"))
            self._floors[key] = (*net.ring_floor(first(("tp",))), *net.neighbours_floor(first(("cp",))),
                                 *net.all_to_all_floor(stage[:ep]), *net.ring_floor(first(("cp", "dp"))),
                                 *net.ring_floor(stage[::ep]))
        return self._floors[key]

    def _shape_floors(self, size, spacing) -> list[np.ndarray]:
        def floor(pair):
            f = shape_floor(self.cluster, int(pair[0]), int(pair[1]))
            return (f.rs_alpha, f.rs_beta, f.a2a_alpha, f.a2a_beta)
        return self._lookup(("shape",), np.stack([size, spacing], axis=1), floor, 4)

    def _lookup(self, tag, keys: np.ndarray, compute, width: int) -> list[np.ndarray]:
        """``compute(key)`` for every distinct row of ``keys`` (one or two non-negative
        integer columns), cached, spread back."""
        keys = np.asarray(keys, dtype=np.int64)
        if not len(keys):
            return [np.zeros(0) for _ in range(width)]
        if keys.ndim == 2:
            radix = int(keys[:, 1].max()) + 1
            flat = keys[:, 0] * radix + keys[:, 1]
            decode = lambda k: (k // radix, k % radix)  # noqa: E731
        else:
            flat, decode = keys, lambda k: k  # noqa: E731
        unique, inverse = np.unique(flat, return_inverse=True)
        values = np.empty((len(unique), width))
        for i, key in enumerate(unique.tolist()):
            row = decode(key)
            cache_key = tag + (row if isinstance(row, tuple) else (row,))
            if cache_key not in self._floors:
                self._floors[cache_key] = compute(row)
            values[i] = self._floors[cache_key]
        inverse = inverse.ravel()
        return [values[inverse, j] for j in range(width)]

    def boundary_floor(self, table: ConfigTable, cands: CandidateArrays, orders=None) -> np.ndarray:
        """Lowest tier any pipeline boundary of each candidate can cross (stage ranks and
        their pipeline partners are a pipeline stride apart)."""
        if self.net is not None:  # the configuration table's single row is the floor
            return np.zeros(len(cands), dtype=np.int64)
        arrays = table.arrays
        tp, cp = arrays.tp[cands.config], arrays.cp[cands.config]
        if orders is None:
            strides = np.stack([layout_strides(o, tp, cp, cands.dp, cands.pp)["pp"] * np.ones_like(tp)
                                for o in cands.orders])
            stride = strides[cands.order, np.arange(len(cands))]
        else:
            stride = np.min([layout_strides(o, tp, cp, cands.dp, cands.pp)["pp"] * np.ones_like(tp)
                             for o in orders], axis=0)
        tier = self._lookup(("pair",), stride, lambda q: (pair_tier_floor(self.cluster, int(q)),), 1)[0]
        return tier.astype(np.int64)

    def kind_seconds(self, table: ConfigTable, cands: CandidateArrays, terms: GroupTerms,
                     zero_comm: bool = True) -> np.ndarray:
        """``[candidate, kind]`` seconds: :meth:`_price_kinds` ``total``, elementwise.

        With exact terms every entry equals the scalar result; with lower-bound terms it is
        a lower bound (every operation is monotone in the terms).
        """
        col = lambda name: table.cols[name][cands.config]  # noqa: E731
        one = lambda x: np.asarray(x)[:, None]  # noqa: E731
        opt, wb = self.job.optimizer, self.weight_bytes
        slot = lambda x: np.asarray(x)[:, None, None]  # noqa: E731
        # sum(count * all_reduce(bytes)) over the operations, in order (count 0: none)
        ops = col("tp_count") * (2 * _reduce_scatter(slot(terms.tp[0]), slot(terms.tp[1]), col("tp_bytes")))
        tp = ops[:, :, 0]
        for i in range(1, ops.shape[2]):
            tp = tp + ops[:, :, i]
        if self.job.tp_comm_overlap:
            degree = one(table.arrays.tp[cands.config])
            tp = np.where(degree > 1, tp_exposed(tp, degree, col("compute_s")), tp)
        lat, per_byte = one(terms.cp_ring[0]), one(terms.cp_ring[1])
        cp_degree = one(table.arrays.cp[cands.config])
        steps_fwd, steps_bwd = col("cp_steps_fwd"), col("cp_steps_bwd")
        passes = steps_fwd / np.maximum(cp_degree - 1, 1)
        cp = np.maximum(0.0, steps_fwd * (lat + per_byte * col("cp_fwd_bytes")) - passes * col("core_fwd_s"))
        cp = cp + np.maximum(0.0, steps_bwd * (lat + per_byte * col("cp_bwd_bytes")) - col("core_bwd_s"))
        cp = np.where(cp_degree > 1, cp, 0.0)
        ops = col("ep_count") * (slot(terms.ep[0]) + slot(terms.ep[1]) * col("ep_bytes"))
        ep = ops[:, :, 0]
        for i in range(1, ops.shape[2]):
            ep = ep + ops[:, :, i]
        total = col("compute_s") + tp + cp + ep
        zero = one(cands.zero)
        if zero_comm and (zero >= 2).any():
            dense, expert = col("params_dense"), col("params_expert")
            da, db = one(terms.dense_dp[0]), one(terms.dense_dp[1])
            ea, eb = one(terms.expert_dp[0]), one(terms.expert_dp[1])
            reduce = (_reduce_scatter(da, db, opt.grad_bytes * dense)
                      + _reduce_scatter(ea, eb, opt.grad_bytes * expert))
            three = zero == 3
            gather = np.where(three, _reduce_scatter(da, db, wb * dense) + _reduce_scatter(ea, eb, wb * expert), 0.0)
            full = one(table.arrays.recompute[cands.config] == RECOMPUTE_MODES.index("full"))
            dp = 0.0 + np.where(three, np.maximum(0.0, gather - col("fwd_s")), 0.0)
            dp = dp + np.where(three & full, np.maximum(0.0, gather - col("recompute_s")), 0.0)
            dp = dp + np.maximum(0.0, gather + reduce - col("bwd_s"))
            total = total + np.where(zero >= 2, dp, 0.0)
        return total

    def sync_columns(self, cands: CandidateArrays, terms: GroupTerms) -> dict[str, np.ndarray]:
        """:meth:`_price_sync` elementwise: ``fixed_s``, seconds and memory bytes per dense
        and per expert parameter (sync + optimizer step)."""
        opt, wb = self.job.optimizer, self.weight_bytes
        zero = cands.zero
        touched = opt.grad_bytes + 2 * opt.master_bytes + 2 * opt.state_bytes + wb
        fixed = np.full(len(cands), OPTIMIZER_KERNELS * self.kernels.overhead)
        out = {}
        for name, (alpha, beta), shards in (("dense", terms.dense_dp, terms.dense_shards),
                                            ("expert", terms.expert_dp, terms.expert_shards)):
            if name == "expert" and not self.model.is_moe:
                alpha = np.zeros_like(alpha)  # no expert parameters: no expert collective
            per = np.where(zero == 0, 2 * beta * opt.grad_bytes,
                           np.where(zero == 1, beta * (opt.grad_bytes + wb),
                                    np.where(zero == 2, beta * wb, 0.0)))
            out[name + "_reduce"] = np.where(zero == 0, 2 * beta * opt.grad_bytes,
                                             np.where(zero == 1, beta * opt.grad_bytes, 0.0))
            out[name + "_gather"] = np.where((zero == 1) | (zero == 2), beta * wb, 0.0)
            fixed = fixed + np.where(zero <= 1, 2 * alpha, np.where(zero == 2, alpha, 0.0))
            optimizer = touched / self.kernels.memory_rate / np.where(zero >= 1, shards, 1)
            out[name] = per + optimizer
            out[name + "_optimizer"] = optimizer
            out[name + "_bytes"] = (wb / np.where(zero >= 3, shards, 1)
                                    + opt.grad_bytes / np.where(zero >= 2, shards, 1)
                                    + opt.sharded_bytes / np.where(zero >= 1, shards, 1))
        out["fixed_s"] = fixed
        return out

    def sync_weights(self, table: ConfigTable, cands: CandidateArrays, terms: GroupTerms,
                     sync: dict[str, np.ndarray] | None = None) -> np.ndarray:
        """``[candidate, kind]`` seconds of one node's end-of-step sync and optimizer step
        (the DP's ``params`` weights before rounding): per parameter prices times the
        node's parameters, only the exposed part of overlapped collectives
        (:func:`sync_exposed`). Monotone in the terms, so floor terms give floors.
        ``sync``: :meth:`sync_columns` of the same terms, if the caller has it."""
        if sync is None:
            sync = self.sync_columns(cands, terms)
        col = lambda name: table.cols[name][cands.config]  # noqa: E731
        dense, expert = col("params_dense").astype(np.float64), col("params_expert").astype(np.float64)

        def per_node(part: str) -> np.ndarray:
            return sync["dense" + part][:, None] * dense + sync["expert" + part][:, None] * expert

        if not self.job.overlaps_sync:
            return per_node("")
        exposed = sync_exposed(per_node("_reduce"), per_node("_gather"), col("fwd_s"), col("bwd_s"), self.job)
        return per_node("_optimizer") + exposed

    def _graph_sends(self, table: ConfigTable, cands: CandidateArrays, boundary: list):
        """``send[candidate, k, node]``: node's output across boundary ``k`` of the
        candidate's placement (rows beyond its ``pp`` unused), and the boundary index of
        every stage position as its tier."""
        rows = max(int(cands.pp.max()), 1) if len(cands) else 1
        alpha = np.zeros((len(cands), rows))
        beta = np.zeros((len(cands), rows))
        for n, (a, b) in enumerate(boundary):
            alpha[n, :len(a)], beta[n, :len(b)] = a, b
        out = table.cols["out_bytes"][cands.config][:, self.kind_index].astype(np.float64)
        send = to_ps(alpha[:, :, None] + beta[:, :, None] * out[:, None, :])
        return send, [np.arange(p, dtype=np.int64) for p in cands.pp.tolist()]

    @staticmethod
    def _interleaved_ends(mem_params: np.ndarray, vp: np.ndarray, owner: np.ndarray, device: np.ndarray,
                          pp: np.ndarray) -> np.ndarray:
        """Per stage position, the bytes it holds besides its own segment; moves them out of
        ``mem_params`` (in place).

        The DP checks an interleaved rank as ``v`` copies of each of its chunks, which
        bounds the sum of its chunks. The first node (embedding) always sits in the first
        chunk of rank 0 and the last (output layer) in the last chunk of rank ``p - 1``, so
        they are charged once to every position of their rank instead of ``v`` times to
        their chunk's: rank 0 holds ``E + sum of its chunks' other nodes <= E + v x its
        largest`` (``E`` the first node's bytes), which the check of its largest chunk
        covers; likewise for the last rank. Without interleaving nothing moves.
        """
        fixed = np.zeros(len(owner))
        split = vp > 1
        if mem_params.shape[1] < 2 or not split.any():
            return fixed
        first, last = mem_params[:, 0].astype(np.float64), mem_params[:, -1].astype(np.float64)
        on = split[owner]
        fixed += np.where(on & (device == 0), first[owner], 0.0)
        fixed += np.where(on & (device == pp - 1), last[owner], 0.0)
        mem_params[split, 0] = 0
        mem_params[split, -1] = 0
        return fixed

    def price(self, table: ConfigTable, cands: CandidateArrays) -> dict[str, np.ndarray]:
        """The DP's per-candidate tables of ``cands`` (see :class:`~nest.dp_problem.DPProblem`)."""
        terms, boundary = self.exact_terms(table, cands)
        take = self.kind_index
        n = len(cands)
        seconds = self.kind_seconds(table, cands, terms)
        sync = self.sync_columns(cands, terms)
        dense = table.cols["params_dense"][cands.config].astype(np.float64)
        expert = table.cols["params_expert"][cands.config].astype(np.float64)
        if self.net is None:
            send = table.send_ps[cands.config][:, :, take]
        else:
            send, boundary = self._graph_sends(table, cands, boundary)
        send[:, :, -1] = 0  # the last node sends nothing
        v = cands.vp
        micro = self.job.micro_batches(cands.dp, table.arrays.micro_batch[cands.config])
        positions = cands.pp * v
        offset = np.concatenate(([0], np.cumsum(positions))).astype(np.int64)
        total = int(offset[-1])
        owner = np.repeat(np.arange(n), positions)
        q = np.arange(total, dtype=np.int64) - offset[owner]
        p, vv, m = cands.pp[owner], v[owner], micro[owner]
        device = q % p
        warmup = (p - device - 1) * 2 + (vv - 1) * p
        inflight = np.where(vv == 1, np.minimum(p - device, m), np.minimum(warmup + 1, m * vv)).astype(np.float64)
        tiers = np.concatenate(boundary) if boundary else np.zeros(0, dtype=np.int64)
        tier_offset = np.concatenate(([0], np.cumsum(cands.pp)))[:-1]
        pos_tier = tiers[tier_offset[owner] + device].astype(np.int64)
        pos_tier[offset[1:] - 1] = -1
        mem_params = np.ceil(sync["dense_bytes"][:, None] * dense
                             + sync["expert_bytes"][:, None] * expert).astype(np.int64)[:, take]
        pos_mem_fixed = self._interleaved_ends(mem_params, v, owner, device, p)
        return {
            "time_ps": to_ps(seconds)[:, take],
            "params": to_ps(self.sync_weights(table, cands, terms, sync))[:, take],
            "mem_params": mem_params,
            "act_bytes": table.cols["act_bytes"][cands.config][:, take],
            "send_ps": np.ascontiguousarray(send),
            "mem_fixed": (self.job.reserved_memory_bytes + table.transient[cands.config]).astype(np.float64),
            "mem_per_param": v.astype(np.float64),
            "g0": sync["fixed_s"] * PS,
            "g1": v.astype(np.float64),
            "pos_inflight": inflight,
            "pos_mem_fixed": pos_mem_fixed,
            "pos_tier": pos_tier,
            "pos_offset": offset,
        }
