"""What a layout's communicator groups cost on the cluster's network.

A :class:`Placer` prices the groups of a candidate's layout (its degrees and rank order,
:class:`~nest.parallel.DegreeColumns`): tensor-parallel groups, the context-parallel
ring, data x context groups holding the same dense weights, the expert grid's
expert-tensor-parallel, expert-parallel and expert-data-parallel groups (MoE parallel
folding, :func:`~nest.network.layout.expert_groups`), and every pipeline boundary. It gives
the search what it needs as alpha-beta terms per candidate (:class:`GroupTerms`): exact
ones from the candidate's own :class:`Placement`, or lower bounds that hold for any
placement (:meth:`Placer.floor_terms`). There is one placer per kind of network:

* :class:`TierPlacer`, hierarchical tiers (:mod:`nest.network.tiers`). Each family is
  priced on its reduced form (:mod:`nest.network.layout`): the same distinct group prices
  as all groups of the layout, from a handful of groups, cached across layouts. A
  boundary's price is the tier its worst rank pair crosses.
* :class:`GraphPlacer`, arbitrary graphs (:mod:`nest.network.graph`): rank ``r`` runs on
  device ``device_order[r]`` and every family of the layout is priced with all its groups
  at once (contention), cached by the family's ranks: TP, expert-TP, data x context and
  expert-data groups as ring reduce-scatters (flat or hierarchical, whichever is faster for
  large messages), EP groups as all-to-alls, the context-parallel ring as one ring step, and
  each pipeline boundary (stage ``k`` to ``k + 1``, the last wrapping to the first) as the
  concurrent transfers of all its rank pairs. Boundaries then have prices of their own
  instead of a tier: the DP's send table of a candidate has one row per boundary, and the
  configuration table's single row is the floor every transfer respects. Floors with the
  rank order's strides known: the flows the first member of the rank-0 group of each
  family sends, alone (a subset of the family's flows can only load links less);
  otherwise bounds that hold for any group of that size.

The all-to-alls of a MoE layer run over its expert-parallel groups, except under a flex
dispatcher with expert TP: Megatron-Core's ``MoEFlexTokenDispatcher`` dispatches over the
expert-TP x EP group, each token to every expert-TP rank of its experts (core_v0.14.0
``token_dispatcher.py``: ``_DeepepManager(group=self.tp_ep_group, router_topk=tp_size *
moe_router_topk, num_experts=tp_size * num_moe_experts)``, ``_initialize_metadata``), so
the placer prices the ``ep`` term on that group (:attr:`Placer.flex`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..parallel import DegreeColumns
from ..specs import ClusterSpec
from ..units import to_ps
from .layout import (
    Layout,
    boundary_tiers_reduced,
    expert_families,
    expert_groups,
    expert_tp_groups,
    family_groups,
    joint_family,
    joint_groups,
    layout_strides,
    reduce_leaders,
)
from .tiers import GroupShape, TokenDispatch, group_shape, pair_tier_floors, ring_floor, ring_link, shape_floors


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def reduce_scatter_s(alpha, beta, nbytes):
    """Seconds of reduce-scatters of ``nbytes`` on groups with terms ``(alpha, beta)``,
    elementwise (:meth:`GroupShape.reduce_scatter`: nothing to reduce costs nothing)."""
    return np.where(nbytes <= 0, 0.0, alpha + beta * nbytes)


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
    # every TP group inside one NVLink domain (the innermost tier; on graphs one host,
    # the devices' ``host`` attribute): what Transformer Engine's TP overlap needs
    tp_inner: bool = True
    # the expert-tensor-parallel groups (None: expert TP 1, nothing to gather)
    expert_tp: GroupShape | GraphGroup | None = None

    def terms(self) -> tuple[float, ...]:
        """The fifteen numbers of :class:`GroupTerms`, in its field order."""
        etp = self.expert_tp.reduce_scatter_terms() if self.expert_tp is not None else (0.0, 0.0)
        return (*self.tp.reduce_scatter_terms(), *self.cp_ring, *self.ep.all_to_all_terms(),
                *self.dense_dp.reduce_scatter_terms(), *self.expert_dp.reduce_scatter_terms(),
                self.dense_dp.size, self.expert_dp.size, float(self.tp_inner), *etp)


@dataclass(frozen=True)
class GraphGroup:
    """A communicator family priced on a graph: the :class:`~nest.network.tiers.GroupShape`
    interface the cost model uses, with the graph's alpha-beta terms (reduce-scatter for
    TP and data-parallel groups, all-to-all for EP groups; the other is unused)."""

    size: int
    rs: tuple[float, float] = (0.0, 0.0)
    a2a: tuple[float, float] = (0.0, 0.0)

    def reduce_scatter_terms(self) -> tuple[float, float]:
        return self.rs

    def all_to_all_terms(self) -> tuple[float, float]:
        return self.a2a


@dataclass
class GroupTerms:
    """Alpha-beta terms of a candidate's groups, one array entry per candidate: exact
    (from its placement) or lower bounds over placements (:meth:`Placer.floor_terms`)."""

    tp: tuple[np.ndarray, np.ndarray]  # reduce-scatter (alpha, beta)
    cp_ring: tuple[np.ndarray, np.ndarray]  # (latency, seconds per byte)
    ep: tuple[np.ndarray, np.ndarray]  # all-to-all (alpha, beta)
    dense_dp: tuple[np.ndarray, np.ndarray]  # reduce-scatter (alpha, beta)
    expert_dp: tuple[np.ndarray, np.ndarray]
    dense_shards: np.ndarray
    expert_shards: np.ndarray
    # 1.0 where the TP groups stay inside one NVLink domain (Placement.tp_inner); lower
    # bounds take 1.0, the cheaper case
    tp_inner: np.ndarray
    expert_tp: tuple[np.ndarray, np.ndarray]  # reduce-scatter (alpha, beta) of the expert-TP groups

    def values(self) -> np.ndarray:
        """The ``[15, candidates]`` array of :meth:`of_values`."""
        return np.stack([self.tp[0], self.tp[1], self.cp_ring[0], self.cp_ring[1], self.ep[0], self.ep[1],
                         self.dense_dp[0], self.dense_dp[1], self.expert_dp[0], self.expert_dp[1],
                         self.dense_shards, self.expert_shards, self.tp_inner, self.expert_tp[0],
                         self.expert_tp[1]]).astype(np.float64)

    @staticmethod
    def of_values(values: np.ndarray) -> "GroupTerms":
        """Terms from a ``[15, candidates]`` array in field order (:meth:`Placement.terms`)."""
        return GroupTerms((values[0], values[1]), (values[2], values[3]), (values[4], values[5]),
                          (values[6], values[7]), (values[8], values[9]), values[10], values[11], values[12],
                          (values[13], values[14]))


class Placer:
    """Prices the communicator groups of layouts on one cluster, with caches.

    ``has_experts``: the model has routed experts (otherwise expert-data-parallel groups
    have nothing to synchronise and cost nothing); ``dispatch``: a flex dispatcher's
    token routing (:class:`~nest.network.tiers.TokenDispatch`; None: plain all-to-alls);
    ``flex``: the all-to-alls are a flex dispatcher's, over the expert-TP x EP groups
    (default: whenever ``dispatch`` is given)."""

    def __init__(self, cluster: ClusterSpec, has_experts: bool, dispatch: TokenDispatch | None = None,
                 flex: bool | None = None):
        self.cluster, self.has_experts, self.dispatch = cluster, has_experts, dispatch
        self.flex = dispatch is not None if flex is None else flex
        self._placements: dict[tuple, Placement] = {}
        self._terms: dict[tuple, tuple] = {}
        self._floors: dict[tuple, object] = {}

    def placement(self, tp: int, cp: int, dp: int, pp: int, ep: int, order: str, etp: int = 1) -> Placement:
        """Group prices of the layout ``(tp, cp, dp, pp, order)`` with experts ``ep x etp``
        (cached)."""
        key = (tp, cp, dp, pp, ep, order, etp)
        if key not in self._placements:
            self._placements[key] = self._place(*key)
        return self._placements[key]

    def _place(self, tp: int, cp: int, dp: int, pp: int, ep: int, order: str, etp: int) -> Placement:
        raise NotImplementedError

    def _dispatch(self, etp: int) -> TokenDispatch | None:
        """The flex dispatch of groups whose tokens go to ``etp`` expert-TP ranks each."""
        return None if self.dispatch is None else replace(self.dispatch, shards=etp)

    def exact_terms(self, degrees: DegreeColumns) -> tuple[GroupTerms, list[Placement]]:
        """Group terms of every candidate's own placement, and the placements."""
        places, rows = [], []
        for key in degrees.keys():
            if key not in self._terms:
                place = self.placement(*key)
                self._terms[key] = (place, place.terms())
            place, values = self._terms[key]
            places.append(place)
            rows.append(values)
        values = np.array(rows, dtype=np.float64).T if rows else np.zeros((15, 0))
        return GroupTerms.of_values(values), places

    def floor_terms(self, degrees: DegreeColumns, any_of: tuple[str, ...] | None = None) -> GroupTerms:
        """Lower bounds on every group term of each candidate, whatever its placement: under
        its own rank order, or (``any_of``) under any of those orders with unknown degrees
        taken as 1 (they only shrink strides)."""
        raise NotImplementedError

    def boundary_floor(self, degrees: DegreeColumns, any_of: tuple[str, ...] | None = None) -> np.ndarray:
        """Per candidate, the lowest row of the configuration table's sends
        (:meth:`send_rows`) any of its pipeline boundaries can cost."""
        raise NotImplementedError

    def send_rows(self, out_bytes: np.ndarray) -> np.ndarray:
        """``[config, row, node kind]`` picoseconds to send a node's output (``out_bytes``
        ``[config, kind]``) across a boundary priced by row ``row``."""
        raise NotImplementedError

    def candidate_sends(self, table_sends: np.ndarray, out_bytes: np.ndarray, places: list[Placement]
                        ) -> tuple[np.ndarray, list[np.ndarray]]:
        """The DP's ``send[candidate, row, node]`` of candidates with these placements
        (``table_sends``: their configurations' :meth:`send_rows` per node; ``out_bytes``
        ``[candidate, node]``), and per candidate the row of each of its boundaries."""
        raise NotImplementedError

    def boundary_seconds(self, place: Placement, k: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
        """Seconds to send ``nbytes`` per rank across pipeline boundaries ``k`` (stage ``k``
        to ``k + 1``; ``pp - 1`` wraps to stage 0) of ``place``, elementwise."""
        raise NotImplementedError

    def _lookup(self, tag, keys: np.ndarray, compute, width: int) -> list[np.ndarray]:
        """``compute(key)`` for every distinct row of ``keys`` (one or two non-negative
        integer columns), cached, spread back."""
        return self._lookup_many(tag, keys, lambda rows: [compute(row) for row in rows], width)

    def _lookup_many(self, tag, keys: np.ndarray, compute_many, width: int) -> list[np.ndarray]:
        """:meth:`_lookup` with ``compute_many(rows)`` giving the values of all the rows not
        cached yet in one call (``width`` values per row)."""
        keys = np.asarray(keys, dtype=np.int64)
        if not len(keys):
            return [np.zeros(0) for _ in range(width)]
        if keys.ndim == 2:
            radix = int(keys[:, 1].max()) + 1
            unique, inverse = np.unique(keys[:, 0] * radix + keys[:, 1], return_inverse=True)
            rows = list(zip((unique // radix).tolist(), (unique % radix).tolist()))
        else:
            unique, inverse = np.unique(keys, return_inverse=True)
            rows = unique.tolist()
        cache = self._floors.setdefault(tag, {})  # per tag, keyed by the row
        missing = [row for row in rows if row not in cache]
        if missing:
            cache.update(zip(missing, compute_many(missing)))
        values = np.array([cache[row] for row in rows], dtype=np.float64).reshape(len(unique), width)
        inverse = inverse.ravel()
        return [values[inverse, j] for j in range(width)]


def _strides(degrees: DegreeColumns, any_of):
    """``pick(dim)``: each candidate's stride of ``dim`` under its own order, or the
    smallest under any of ``any_of``."""
    d = degrees
    if any_of is None:
        strides = [layout_strides(o, d.tp, d.cp, d.dp, d.pp) for o in d.orders]
        rows = np.arange(len(d))
        return lambda dim: np.stack([s[dim] * np.ones_like(d.tp) for s in strides])[d.order, rows]
    strides = [layout_strides(o, d.tp, d.cp, d.dp, d.pp) for o in any_of]
    return lambda dim: np.min([s[dim] * np.ones_like(d.tp) for s in strides], axis=0)


class TierPlacer(Placer):
    """Prices on hierarchical tiers (see the module docstring)."""

    def __init__(self, cluster: ClusterSpec, has_experts: bool, dispatch: TokenDispatch | None = None):
        super().__init__(cluster, has_experts, dispatch)
        self._sizes = cluster.group_sizes()
        self._period = self._sizes[-2] if len(self._sizes) > 1 else 1
        self._shapes: dict[tuple, GroupShape] = {}
        self._families: dict[tuple, object] = {}
        self._latency = np.array([t.latency for t in cluster.tiers])
        self._bandwidth = np.array([t.effective_bandwidth for t in cluster.tiers])

    def _place(self, tp: int, cp: int, dp: int, pp: int, ep: int, order: str, etp: int) -> Placement:
        """Every group family priced on its reduced form (see nest.network.layout): the
        same distinct group prices as all groups of the layout, cached across layouts.

        With every degree and tier size a power of two, each dimension owns its own bits
        of the rank, so all groups of a dimension decompose alike: the group of rank 0
        alone is priced (leaders dropped).
        """
        layout = Layout({"tp": tp, "cp": cp, "dp": dp, "pp": pp}, order)
        first = all(_power_of_two(x) for x in (tp, cp, dp, pp, ep, etp, *self._sizes))
        family = lambda what, offsets, leaders: self._family(what, offsets, () if first else leaders)  # noqa: E731
        experts = expert_families(layout, ep, etp)
        if experts is None:  # the grid does not split the stage's dimensions: the explicit groups
            explicit = {"ep": lambda: expert_groups(layout, ep, etp)[0],
                        "expert_dp": lambda: expert_groups(layout, ep, etp)[1],
                        "expert_tp": lambda: expert_tp_groups(layout, ep, etp),
                        "expert_tp_ep": lambda: expert_tp_groups(layout, ep, etp, with_ep=True)}
            shape = lambda name: self._group_shape(explicit[name]()[:1] if first else explicit[name]())  # noqa: E731
        else:
            shape = lambda name: family("shape", *experts[name])  # noqa: E731
        ep_shape = shape("expert_tp_ep" if self.flex else "ep")
        tp_shape = family("shape", *joint_family(layout, ("tp",)))  # the worst TP group
        return Placement(
            tp=tp_shape,
            cp_ring=family("ring", *joint_family(layout, ("cp",))),
            dense_dp=family("shape", *joint_family(layout, ("cp", "dp"))),
            ep=replace(ep_shape, dispatch=self._dispatch(etp)), expert_dp=shape("expert_dp"),
            boundary_tiers=boundary_tiers_reduced(layout, self.cluster, self._period),
            tp_inner=all(f == 1 for f in tp_shape.factors[1:]),
            expert_tp=shape("expert_tp") if etp > 1 else None)

    def _family(self, what: str, offsets, leaders):
        """The group shape ("shape") or ring link ("ring") of the family ``leaders +
        offsets``, its leaders reduced (see nest.network.layout), cached."""
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

    def floor_terms(self, degrees: DegreeColumns, any_of: tuple[str, ...] | None = None) -> GroupTerms:
        """Each group's members are at least its smallest dimension stride apart (in the
        expert grid, EP members ``etp`` stage ranks apart, expert-DP members ``ep x etp``),
        which bounds how many share a tier group (see :class:`~nest.network.tiers.ShapeFloor`)."""
        d = degrees
        tp, cp, ep, dp, etp = d.tp, d.cp, d.ep, d.dp, d.etp
        pick = _strides(d, any_of)
        s_tp, s_cp, s_dp = pick("tp"), pick("cp"), pick("dp")
        inf = np.iinfo(np.int64).max
        stage_step = np.minimum(np.where(tp > 1, s_tp, inf), np.minimum(np.where(cp > 1, s_cp, inf),
                                                                        np.where(dp > 1, s_dp, inf)))
        stage_step = np.where(stage_step == inf, 1, stage_step)
        dense_step = np.minimum(np.where(cp > 1, s_cp, inf), np.where(dp > 1, s_dp, inf))
        dense_step = np.where(dense_step == inf, 1, dense_step)
        dense_size, expert_size = dp * cp, np.maximum(tp * cp * dp // (ep * etp), 1)
        tp_f = self._shape_floors(tp, s_tp)
        ep_f = self._all_to_all_floors(ep, etp, stage_step)
        dd_f = self._shape_floors(dense_size, dense_step)
        ed_f = self._shape_floors(expert_size, ep * etp * stage_step)
        et_f = self._shape_floors(etp, stage_step)
        span = (cp - 1) * s_cp + 1
        ring = self._lookup(("ring",), span, lambda s: ring_floor(self.cluster, int(s)), 2)
        return GroupTerms((tp_f[0], tp_f[1]), (ring[0], ring[1]), (ep_f[0], ep_f[1]), (dd_f[0], dd_f[1]),
                          (ed_f[0], ed_f[1]), dense_size.astype(np.float64), expert_size.astype(np.float64),
                          np.ones(len(d)), (et_f[0], et_f[1]))

    def _shape_floors(self, size, spacing) -> list[np.ndarray]:
        return self._lookup_many(("shape",), np.stack([size, spacing], axis=1),
                                 lambda pairs: self._floors_of(pairs, self.dispatch), 4)

    def _floors_of(self, pairs: list[tuple[int, int]], dispatch: TokenDispatch | None) -> np.ndarray:
        """:func:`~nest.network.tiers.shape_floors` of (size, spacing) pairs."""
        sizes, spacings = np.array(pairs, dtype=np.int64).reshape(-1, 2).T
        return shape_floors(self.cluster, sizes, spacings, dispatch)

    def _all_to_all_floors(self, ep, etp, spacing) -> list[np.ndarray]:
        """All-to-all floors of the expert groups of ranks ``spacing`` apart in a stage:
        EP groups (every ``etp``-th rank), or under a flex dispatcher the expert-TP x EP
        groups whose tokens go to ``etp`` ranks each."""
        if not self.flex:
            return self._shape_floors(ep, etp * spacing)[2:]
        alpha, beta = np.zeros(len(ep)), np.zeros(len(ep))
        for shards in np.unique(etp).tolist():
            rows = etp == shards

            def floors(pairs, dispatch=self._dispatch(shards)):
                return self._floors_of(pairs, dispatch)[:, 2:]
            keys = np.stack([ep[rows] * shards, spacing[rows]], axis=1)
            alpha[rows], beta[rows] = self._lookup_many(("a2a", shards), keys, floors, 2)
        return [alpha, beta]

    def boundary_floor(self, degrees: DegreeColumns, any_of: tuple[str, ...] | None = None) -> np.ndarray:
        """The lowest tier any pipeline boundary can cross (stage ranks and their pipeline
        partners are a pipeline stride apart)."""
        return pair_tier_floors(self.cluster, _strides(degrees, any_of)("pp"))

    def send_rows(self, out_bytes: np.ndarray) -> np.ndarray:
        """One row per tier: its latency plus the bytes at its bandwidth."""
        out = out_bytes.astype(np.float64)
        return to_ps(self._latency[None, :, None] + out[:, None, :] / self._bandwidth[None, :, None])

    def candidate_sends(self, table_sends, out_bytes, places):
        return table_sends, [p.boundary_tiers for p in places]

    def boundary_seconds(self, place: Placement, k: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
        tiers = np.asarray(place.boundary_tiers)[k]
        return self._latency[tiers] + nbytes / self._bandwidth[tiers]


class GraphPlacer(Placer):
    """Prices on a graph (see the module docstring)."""

    def __init__(self, cluster: ClusterSpec, has_experts: bool, dispatch: TokenDispatch | None = None):
        from .graph import network  # scipy and the routing tables only for graph clusters

        super().__init__(cluster, has_experts, None, flex=dispatch is not None)  # plain all-to-alls (see placer_for)
        self.net = network(cluster.graph, cluster.device_order)
        # per rank, its NVLink domain: the device's host (a device without one shares none)
        attrs = cluster.graph.nodes
        hosts = [("host", str(attrs[d]["host"])) if attrs[d].get("host") is not None else ("device", str(d))
                 for d in cluster.device_order]
        self._domain = np.unique([f"{kind}:{name}" for kind, name in hosts], return_inverse=True)[1].ravel()
        self._pipeline: dict[tuple[int, int, int], tuple] = {}  # (ranks, pp, pp stride) -> boundaries

    def _place(self, tp: int, cp: int, dp: int, pp: int, ep: int, order: str, etp: int) -> Placement:
        """Every family of the layout priced on the graph, all its groups at once."""
        net = self.net
        layout = Layout({"tp": tp, "cp": cp, "dp": dp, "pp": pp}, order)
        ep_groups, edp_groups = expert_groups(layout, ep, etp)
        if self.flex:
            ep_groups = expert_tp_groups(layout, ep, etp, with_ep=True)
        dense = joint_groups(layout, ("cp", "dp"))
        expert_dp = (GraphGroup(edp_groups.shape[1], net.ring(edp_groups).best) if self.has_experts
                     else GraphGroup(edp_groups.shape[1]))  # no expert weights: nothing to sync
        boundary, boundary_tiers = self._boundaries(layout)
        tp_groups = joint_groups(layout, ("tp",))
        domains = self._domain[tp_groups]
        return Placement(
            tp=GraphGroup(tp, net.ring(tp_groups).best),
            cp_ring=net.neighbours(joint_groups(layout, ("cp",))),
            dense_dp=GraphGroup(dense.shape[1], net.ring(dense).best),
            ep=GraphGroup(ep_groups.shape[1], a2a=net.all_to_all(ep_groups)), expert_dp=expert_dp,
            boundary_tiers=boundary_tiers, boundary=boundary,
            tp_inner=bool((domains == domains[:, :1]).all()),
            expert_tp=GraphGroup(etp, net.ring(expert_tp_groups(layout, ep, etp)).best) if etp > 1 else None)

    def _boundaries(self, layout: Layout) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
        """The pipeline boundaries' prices and tiers of ``layout`` (cached: every rank's
        pipeline partner follows from the ranks, the stages and the pipeline stride alone)."""
        pp = layout.degrees.get("pp", 1)
        key = (layout.size, pp, layout.strides()["pp"])
        if key not in self._pipeline:
            prices = self.net.boundaries(*layout.pipeline_partners(), pp) if pp > 1 else (np.zeros(1), np.zeros(1))
            self._pipeline[key] = (prices, layout.boundary_tiers(self.cluster))
        return self._pipeline[key]

    def floor_terms(self, degrees: DegreeColumns, any_of: tuple[str, ...] | None = None) -> GroupTerms:
        """With the candidates' own rank orders every degree is known: each family is
        bounded by the flows the first rank of its rank-0 group sends, alone
        (:class:`~nest.network.graph.GraphNetwork` floors; a subset of a family's flows
        loads every link at most as much and has no longer paths). With ``any_of``
        (degrees unknown) by what any group of the family's size costs at least."""
        d, net = degrees, self.net
        tp, cp, ep, etp = d.tp, d.cp, d.ep, d.etp
        dense_size, expert_size = d.dp * cp, np.maximum(tp * cp * d.dp // (ep * etp), 1)
        if any_of is not None:
            tp_f, dd_f, ed_f, et_f = (net.any_ring_floor(k) for k in (tp, dense_size, expert_size, etp))
            ep_f = net.any_all_to_all_floor(ep * etp if self.flex else ep)
            lat, per_byte = net.any_send_floor()
            on = cp > 1
            ring = (np.where(on, lat, 0.0), np.where(on, per_byte, 0.0))
        else:
            keys = np.stack([tp, cp, d.dp, d.pp, ep, d.order, etp], axis=1)
            unique, inverse = np.unique(keys, axis=0, return_inverse=True)
            values = np.array([self._layout_floor(*row[:5], d.orders[row[5]], row[6]) for row in unique.tolist()],
                              dtype=np.float64).reshape(len(unique), 12)[inverse.ravel()].T
            tp_f, ring, ep_f, dd_f, ed_f, et_f = ((values[i], values[i + 1]) for i in range(0, 12, 2))
        if not self.has_experts:
            ed_f = (np.zeros(len(d)), np.zeros(len(d)))
        return GroupTerms(tp_f, ring, ep_f, dd_f, ed_f, dense_size.astype(np.float64),
                          expert_size.astype(np.float64), np.ones(len(d)), et_f)

    def _layout_floor(self, tp: int, cp: int, dp: int, pp: int, ep: int, order: str, etp: int) -> tuple:
        """Floors of the families of one layout (cached): (tp, cp ring, ep, dense, expert,
        expert TP) alpha-beta pairs from the rank-0 group of each (the all-to-all's under a
        flex dispatcher from its expert-TP x EP group)."""
        key = ("graph", tp, cp, dp, pp, ep, order, etp)
        if key not in self._floors:
            net = self.net
            layout = Layout({"tp": tp, "cp": cp, "dp": dp, "pp": pp}, order)
            first = lambda dims: joint_groups(layout, dims, first_only=True)[0]  # noqa: E731
            stage = first(("tp", "cp", "dp"))
            a2a = stage[:ep * etp] if self.flex else stage[:ep * etp:etp]
            self._floors[key] = (*net.ring_floor(first(("tp",))), *net.neighbours_floor(first(("cp",))),
                                 *net.all_to_all_floor(a2a), *net.ring_floor(first(("cp", "dp"))),
                                 *net.ring_floor(stage[::ep * etp]), *net.ring_floor(stage[:etp]))
        return self._floors[key]

    def boundary_floor(self, degrees: DegreeColumns, any_of: tuple[str, ...] | None = None) -> np.ndarray:
        """Row 0: the configuration table's single row is the floor of every transfer."""
        return np.zeros(len(degrees), dtype=np.int64)

    def send_rows(self, out_bytes: np.ndarray) -> np.ndarray:
        """One row below every transfer on the graph (the exact rows come per candidate)."""
        latency, per_byte = self.net.any_send_floor()
        return to_ps(latency + per_byte * out_bytes.astype(np.float64)[:, None, :])

    def candidate_sends(self, table_sends, out_bytes, places):
        """One row per boundary of each candidate's placement (rows beyond its ``pp``
        unused); boundary ``k`` is row ``k``."""
        used = np.array([len(p.boundary[0]) for p in places], dtype=np.int64)
        rows = int(used.max()) if len(places) else 1
        out = out_bytes.astype(np.float64)
        # rows past a candidate's boundaries stay 0 (what 0 + 0 x bytes rounds to): only
        # the candidates with at least r boundaries are converted at row r
        send = np.zeros((len(places), rows, out.shape[1]), dtype=np.int64)
        for count in np.unique(used).tolist():
            take = np.flatnonzero(used == count)
            alpha = np.array([places[n].boundary[0] for n in take.tolist()], dtype=np.float64).reshape(len(take), count)
            beta = np.array([places[n].boundary[1] for n in take.tolist()], dtype=np.float64).reshape(len(take), count)
            send[take, :count] = to_ps(alpha[:, :, None] + beta[:, :, None] * out[take][:, None, :])
        return send, [np.arange(len(p.boundary_tiers), dtype=np.int64) for p in places]

    def boundary_seconds(self, place: Placement, k: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
        alpha, beta = place.boundary
        return np.asarray(alpha)[k] + np.asarray(beta)[k] * nbytes


def placer_for(cluster: ClusterSpec, has_experts: bool, dispatch: TokenDispatch | None = None) -> Placer:
    """The placer of ``cluster``'s kind of network (graphs price every all-to-all as a
    plain one: their routing has no notion of a node to deduplicate copies into)."""
    return (GraphPlacer if cluster.is_graph else TierPlacer)(cluster, has_experts, dispatch)
