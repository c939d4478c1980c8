"""The search: bound every candidate, solve the promising ones with the stage DP.

The stage DP splits every candidate it solves by the closed form of its schedule
(:mod:`nest.pipeline`). Candidates are ranked by their *score*:

* ``ranking="closed-form"``: the closed form itself (the DP's objective). The result is
  the candidate with the smallest objective and, among equal objectives, the first in
  the order ``(cheap bound, partial index, expansion position)`` -- the order in which
  earlier versions of nest solved candidates, so ties resolve as they did.
* ``ranking="schedule"`` (the default): the exact time of the schedule of that split
  (:mod:`nest.schedule`), the step time the plan reports; ties by the closed form, then
  the same order. The closed form over-prices interleaved schedules whose chunks differ
  (a rank's load is the sum of its own chunks, not ``v`` times the slowest), by 20-60%
  on some candidates, so it cannot rank them.

Everything else only decides how fast that candidate is found: candidates are discarded
only by lower bounds, compared non-strictly (a candidate whose bound equals the
incumbent is still solved, so ties are seen). With ``"closed-form"`` the bounds below
bound the objective. With ``"schedule"`` an interleaved candidate is bounded by
:func:`nest.pipeline.schedule_floor` of the same sums (the busiest rank's work and the
ranks' mean sync, the slowest stage run ``m`` times, one micro-batch's round trip),
which bounds its schedule, and its solved split is timed unless its busiest rank's work
alone exceeds the incumbent; a 1F1B candidate is bounded by the closed form's bound and
solved while that is within :data:`ONE_F_ONE_B_MARGIN` of the best score (the closed
form is at most that much above a 1F1B schedule on the candidates that matter; with the
margin set to ``None`` every candidate is bounded by the schedule floor, which is exact
but solves 3-8x more candidates).

1. **Partials** (everything but the ZeRO stage and the rank order) are enumerated in
   chunks (:class:`~nest.space.PartialSpace`). The memory filter is the historical one
   (the most frugal sharding). ``lb1`` bounds every candidate of a partial:
   :func:`nest.pipeline.stage_floor` of a stage sum ``sum t + 2 (P - 1) s`` and a slowest
   stage ``max t + s`` (for 1F1B ``scale x max(ceil(stage sum / P), max t + s)``), plus
   ``fill``, with ``P = p v`` and the closed form's scales (:mod:`nest.pipeline`; for
   1F1B ``fill = sum t + 2 (P - 1) s`` bounds its split-independent sum of stage times,
   else 0),
   node times ``t`` whose communication terms are floors (below), ZeRO-2/3 traffic and the
   end-of-step sync left out (both >= 0), and ``s`` the cheapest send of any node's output
   on any tier. One pass keeps at least ``KEEP`` partials with the smallest ``lb1``;
   another pass collects the rest only if the best objective exceeds the largest kept.
2. **Blocks** of the smallest ``lb1`` (every partial up to a threshold) are expanded while
   ``lb1`` does not exceed the incumbent; each full candidate gets ``lb2``: the same time
   bound with its own ZeRO-2/3 traffic, rank-order strides and pipeline tiers, plus
   ``G(w_floor)``, the sync and optimizer step of the heaviest stage at floor prices.
3. **Pricing**: candidates are priced exactly in ``lb2`` order, ``SUB_BATCH`` at a time;
   those whose exact-table bound (exact node times, the cheapest send on each boundary's
   real tier, exact sync prices) does not exceed the incumbent go to the stage DP.

Why the bounds are valid:

* *Floors*: a group of ``n`` ranks whose members are at least ``d`` device indices apart
  (``d`` the smallest stride of its dimensions under the rank order; EP groups are runs of
  a stage's ranks, expert-DP groups take every ``ep``-th) has one of the shapes
  :class:`~nest.network.ShapeFloor` enumerates, so each alpha/beta term of its price is at
  least that term's minimum over them; a ring spanning at least ``(n - 1) d + 1`` devices
  sits on a tier whose groups hold that span (:func:`~nest.network.ring_floor`); a pipeline
  pair a stride ``q`` apart is in different groups of every tier whose groups have at most
  ``q`` devices (:func:`~nest.network.pair_tier_floor`). Degrees unknown for ``lb1`` are
  taken as 1, which only shrinks strides. Every price is built from these terms and the
  node's fixed costs by additions, multiplications by non-negative numbers and ``max(0,
  .)``; IEEE rounding is monotone, so lower terms give lower or equal seconds, and
  rounding to picoseconds and ``G(w) = floor(g0 + g1 w + 0.5)`` are monotone too.
* *Split*: for any split into ``P`` stages, ``sum_k T_k = sum of node times + 2 x sum over
  boundaries of the send of the boundary node`` (the stage before sends its output
  forward, the stage after sends the gradient back, both on the boundary's tier), so
  ``max_k T_k >= ceil(sum_k T_k / P)`` (interleaved: :func:`nest.pipeline.stage_floor`
  bounds ``scale x max T + head_scale x H`` from the same sum); the stage holding the
  slowest node also sends at least once when ``P > 1``. The heaviest stage has
  ``W >= max(ceil(sum W / P), max node W)``. The objective
  ``scale x max T + head_scale x H + offset + G(max W)`` is monotone in all of them.

Batches are formed from the data and the incumbent only, never from thread timing, and
the DP's result does not depend on the thread count: the search is deterministic.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from . import engine as engines
from . import diagnose, pipeline, schedule
from .dp_problem import INF, INFEASIBLE, SOLVED, DPProblem, DPResult
from .dp_reference import stage_details, stage_times
from .errors import InfeasibleError, SpecError
from .layout import DEFAULT_ORDER, parse_order
from .loading import load_cluster, load_model
from .result import Plan, build_plan
from .space import (RANK_ORDERS, PartialChunk, Partials, PartialSpace, SpaceLimits, check_tp,
                    enumerate_partials, expand_arrays)
from .specs import ClusterSpec, JobSpec, ModelSpec
from .tables import PS, Candidate, CandidateArrays, ConfigTable, Scenario, to_ps

BLOCK = 2048
"""Partial candidates (at least) whose full candidates are bounded together."""

SUB_BATCH = 64
"""Candidates priced exactly and handed to the stage DP per call."""

RANKINGS = ("schedule", "closed-form")
"""What :func:`plan` ranks candidates by: the exact schedule of their DP split, or the
closed form the DP minimises."""

ONE_F_ONE_B_MARGIN = 0.10
"""With the ``"schedule"`` ranking, a 1F1B candidate is solved while the closed form's
lower bound is within this fraction of the best schedule (the closed form is an upper
bound of a 1F1B schedule, and close to it: nest's plans of every preset within 5.3%);
``None`` bounds 1F1B candidates by :func:`nest.pipeline.schedule_floor` like interleaved
ones, which is exact but leaves the fill and drain out and so solves many more."""


@dataclass(frozen=True)
class _Ranking:
    """How the ``"schedule"`` ranking bounds candidates: interleaved ones (and every one
    when ``margin`` is None) by a lower bound on the schedule itself
    (:func:`nest.pipeline.schedule_floor`), 1F1B ones by the closed form's lower bound,
    which may exceed the best schedule by ``margin``."""

    margin: float | None = ONE_F_ONE_B_MARGIN

    def uses_floor(self, vp) -> np.ndarray:
        vp = np.asarray(vp)
        return vp > 1 if self.margin is not None else np.ones(vp.shape, dtype=bool)

    def bound(self, vp, closed_form, floor) -> np.ndarray:
        """The bound a candidate is compared with: the schedule floor or the closed form's."""
        return np.where(self.uses_floor(vp), floor, closed_form)

    def slack(self, vp) -> np.ndarray:
        """The fraction by which a candidate's bound may exceed the best schedule."""
        return np.where(self.uses_floor(vp), 0.0, self.margin or 0.0)

GiB = 2**30


def _ceil_div(a, b):
    return -(-a // b)


@dataclass
class _Bounds:
    cheap: np.ndarray  # the historical cheap bound (picoseconds): the tie-breaking order
    memory: np.ndarray  # lower bound on the peak memory (bytes)


def _orders(limits: SpaceLimits) -> tuple[str, ...]:
    orders = tuple(limits.rank_order or RANK_ORDERS)
    for order in orders:
        parse_order(order)
    return orders


def _config_sums(scn: Scenario, kind_values: np.ndarray) -> np.ndarray:
    """Per row, the sum over the layer chain of per-kind integers."""
    return (kind_values * scn.kind_count).sum(axis=1)


def _memory_factors(scn: Scenario, table: ConfigTable) -> tuple[np.ndarray, np.ndarray]:
    """Per configuration, the factors of :func:`_memory_bound` (one row each, a single
    gather): dense and expert parameter bytes, cp, tp x cp, ep, activation bytes; and the
    fixed part (reserved + transient)."""
    if "memory" not in table._cache:
        arrays = table.arrays
        opt, wb = scn.job.optimizer, scn.weight_bytes
        per_param = wb + opt.grad_bytes + opt.sharded_bytes
        table._cache["memory"] = (
            np.stack([_config_sums(scn, table.cols["params_dense"]) * per_param, arrays.cp,
                      _config_sums(scn, table.cols["params_expert"]) * per_param, arrays.tp * arrays.cp,
                      arrays.ep, _config_sums(scn, table.cols["act_bytes"])], axis=1),
            scn.job.reserved_memory_bytes + table.transient)
    return table._cache["memory"]


def _memory_bound(scn: Scenario, table: ConfigTable, partials: Partials) -> np.ndarray:
    """Lower bound on the peak memory per device (the most frugal sharding: ZeRO-3 over
    data x context, experts over theirs; activations of one micro-batch per stage)."""
    per_config, fixed = _memory_factors(scn, table)
    c, p, dp = partials.config, partials.pp, partials.dp
    dense, cp, expert, tp_cp, ep, acts = per_config[c].T
    return fixed[c] + (dense / (dp * cp) + expert / (tp_cp * dp // ep) + acts) / p


def _chunk_memory(scn: Scenario, table: ConfigTable, chunk: PartialChunk) -> np.ndarray:
    """:func:`_memory_bound` of a chunk's partials: the parameter terms are one value per
    loop combination (all its partials have the same parameters), then the remaining
    operations per partial, in the same order."""
    per_config, fixed = _memory_factors(scn, table)
    first = np.concatenate(([0], np.flatnonzero(np.diff(chunk.owner)) + 1))
    dense, cp, expert, tp_cp, ep, _ = per_config[chunk.config[first]].T
    shared = dense / (chunk.dp * cp) + expert / (tp_cp * chunk.dp // ep)
    owner = chunk.owner
    return fixed[chunk.config] + (shared[owner] + per_config[chunk.config, 5]) / chunk.pp[owner]


def _send_floors(scn: Scenario, table: ConfigTable) -> np.ndarray:
    """``[config, tier]``: the cheapest send of any node but the last on that tier or
    any tier above it (what a boundary at least costs when it crosses that tier)."""
    senders = np.unique(scn.kind_index[:-1])
    if not len(senders):
        return np.zeros(table.send_ps.shape[:2], dtype=np.int64)
    cheapest = table.send_ps[:, :, senders].min(axis=2)
    return np.minimum.accumulate(cheapest[:, ::-1], axis=1)[:, ::-1]


def _stage_floors(t_sum, t_max, positions, send):
    """Lower bounds on the sum of the stage times of any split into ``positions`` stages
    (the node times and two sends per boundary) and on its slowest stage (the one of the
    slowest node, which sends at least once when there are several stages)."""
    send = np.where(positions > 1, send, 0)
    return t_sum + 2 * (positions - 1) * send, t_max + send


def _sync_floor(g0, g1, w_sum, w_max, positions):
    """``G`` of the stage with the most parameters, at least (as the DP evaluates it)."""
    w_floor = np.maximum(_ceil_div(w_sum, positions), w_max)
    return np.floor(g0 + g1 * w_floor.astype(np.float64) + 0.5).astype(np.int64)


def _partial_bound(scn: Scenario, table: ConfigTable, partials: Partials, index: np.ndarray,
                   orders: tuple[str, ...], ranking: "_Ranking | None" = None) -> np.ndarray:
    """``lb1`` of the partials at ``index`` (see the module docstring)."""
    return _partial_bound_of(scn, table, partials.config[index], partials.pp[index], partials.dp[index],
                             partials.vp[index], orders, ranking)


def _partial_bound_of(scn: Scenario, table: ConfigTable, c, p, dp, v, orders: tuple[str, ...],
                      ranking: "_Ranking | None" = None) -> np.ndarray:
    if "lb1" not in table._cache:
        pseudo = CandidateArrays(np.arange(len(table)), *(np.ones(len(table), dtype=np.int64) for _ in range(3)),
                                 np.zeros(len(table), dtype=np.int64), np.zeros(len(table), dtype=np.int64),
                                 orders)
        # degrees unknown at this level are 1: strides, hence spacings, only shrink
        terms = scn.floor_terms(table, pseudo, orders=orders)
        kinds = to_ps(scn.kind_seconds(table, pseudo, terms, zero_comm=False))
        table._cache["lb1"] = np.stack([_config_sums(scn, kinds), kinds.max(axis=1), _send_floors(scn, table)[:, 0],
                                        table.arrays.micro_batch], axis=1)
    t_sum, t_max, send, micro_batch = table._cache["lb1"][c].T
    m = scn.job.micro_batches(dp, micro_batch)
    floors = _stage_floors(t_sum, t_max, p * v, send)
    closed_form = pipeline.time_bound(m, v, p, t_sum, *floors, send)
    if ranking is None:
        return closed_form
    rounding = pipeline.rounding_ps(m, v, scn.num_nodes, p * v)
    return ranking.bound(v, closed_form, pipeline.schedule_floor(m, p, *floors, rounding=rounding))


def _candidate_bound(scn: Scenario, table: ConfigTable, cands: CandidateArrays,
                     ranking: "_Ranking | None" = None) -> np.ndarray:
    """``lb2`` of every candidate (see the module docstring)."""
    terms = scn.floor_terms(table, cands)
    kinds = to_ps(scn.kind_seconds(table, cands, terms))
    positions = cands.pp * cands.vp
    if "sends" not in table._cache:
        table._cache["sends"] = _send_floors(scn, table)
    send = table._cache["sends"][cands.config, scn.boundary_floor(table, cands)]
    micro = scn.job.micro_batches(cands.dp, table.arrays.micro_batch[cands.config])
    sync = scn.sync_columns(cands, terms)
    weights = to_ps(scn.sync_weights(table, cands, terms, sync))
    g = _sync_floor(sync["fixed_s"] * PS, cands.vp.astype(np.float64), _config_sums(scn, weights),
                    weights.max(axis=1), positions)
    t_sum = _config_sums(scn, kinds)
    floors = _stage_floors(t_sum, kinds.max(axis=1), positions, send)
    closed_form = pipeline.time_bound(micro, cands.vp, cands.pp, t_sum, *floors, send) + g
    if ranking is None:
        return closed_form
    mean = _sync_floor(sync["fixed_s"] * PS, cands.vp.astype(np.float64), _config_sums(scn, weights), 0, positions)
    rounding = pipeline.rounding_ps(micro, cands.vp, scn.num_nodes, positions)
    return ranking.bound(cands.vp, closed_form, pipeline.schedule_floor(micro, cands.pp, *floors, mean, rounding))


def _table_bound(rows: dict, ranking: "_Ranking | None" = None) -> np.ndarray:
    """Lower bound on each candidate's objective from its exact tables: the time floor
    with the cheapest send of each boundary's own tier, and the sync floor (with a
    ``ranking``: :meth:`_Ranking.bound`)."""
    offset = rows["pos_offset"]
    positions = np.diff(offset)
    n = len(positions)
    owner = np.repeat(np.arange(n), positions)
    boundary = rows["pos_tier"] >= 0
    cheapest = rows["send_ps"][:, :, :-1].min(axis=2) if rows["send_ps"].shape[2] > 1 else \
        np.zeros(rows["send_ps"].shape[:2], dtype=np.int64)
    sends = cheapest[owner[boundary], rows["pos_tier"][boundary]]
    send_sum = np.zeros(n, dtype=np.int64)
    np.add.at(send_sum, owner[boundary], sends)
    send_min = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(send_min, owner[boundary], sends)
    send_min = np.where(positions > 1, send_min, 0)
    time_ps, params = rows["time_ps"], rows["params"]
    floors = time_ps.sum(axis=1) + 2 * send_sum, time_ps.max(axis=1) + send_min
    floor = pipeline.stage_floor(rows["scale"], rows["head_scale"], positions, *floors)
    g = _sync_floor(rows["g0"], rows["g1"], params.sum(axis=1), params.max(axis=1), positions)
    closed_form = floor + rows["offset"] + g
    if ranking is None:
        return closed_form
    mean = _sync_floor(rows["g0"], rows["g1"], params.sum(axis=1), 0, positions)
    rounding = pipeline.rounding_ps(rows["micro_batches"], rows["vp"], time_ps.shape[1], positions)
    return ranking.bound(rows["vp"], closed_form,
                         pipeline.schedule_floor(rows["micro_batches"], rows["pp"], *floors, mean, rounding))


def _cheap(scn: Scenario, table: ConfigTable, partials: Partials, index: np.ndarray,
           orders: tuple[str, ...]) -> np.ndarray:
    """The cheap bound earlier versions sorted partials by: ``(m v + p - 1) x max(ceil(sum /
    (p v)), largest node)``, node times on the configuration's innermost layout."""
    c = partials.config[index]
    with_comm = all(o.startswith("tp-cp-") for o in orders)
    cache = table._cache.setdefault(("cheap", with_comm), {})
    missing = np.setdiff1d(c, np.fromiter(cache, dtype=np.int64, count=len(cache)))
    if len(missing):
        kinds = scn._inner_kind_ps(table, with_comm, missing)
        for i, t_sum, t_max in zip(missing.tolist(), _config_sums(scn, kinds).tolist(), kinds.max(axis=1).tolist()):
            cache[i] = (t_sum, t_max)
    t_sum = np.array([cache[i][0] for i in c.tolist()], dtype=np.int64)
    t_max = np.array([cache[i][1] for i in c.tolist()], dtype=np.int64)
    p, v = partials.pp[index], partials.vp[index]
    m = scn.job.micro_batches(partials.dp[index], table.arrays.micro_batch[c])
    return (m * v + p - 1) * np.maximum(_ceil_div(t_sum, p * v), t_max)


def _problem(scn: Scenario, cands: list[Candidate], capacity: float | None = None) -> DPProblem:
    rows = pipeline.with_schedule(scn.rows(cands), [scn.micro_batches(c) for c in cands],
                                  [c.vp for c in cands])
    return _build_problem(scn, rows, capacity)


def _build_problem(scn: Scenario, rows: dict, capacity: float | None = None,
                   lower_bound: np.ndarray | None = None) -> DPProblem:
    """The DP problem of priced ``rows``; the DP skips a candidate whose
    ``lower_bound`` (default: :func:`_table_bound`) exceeds the best it has found."""
    bound = _table_bound(rows) if lower_bound is None else lower_bound
    return DPProblem.build(
        time_ps=rows["time_ps"], params=rows["params"], mem_params=rows["mem_params"],
        act_bytes=rows["act_bytes"], send_ps=rows["send_ps"], cand_config=np.arange(len(rows["scale"])),
        cand_scale=rows["scale"], cand_offset=rows["offset"], cand_head_scale=rows["head_scale"],
        cand_mem_fixed=rows["mem_fixed"],
        cand_mem_per_param=rows["mem_per_param"], cand_g0=rows["g0"], cand_g1=rows["g1"],
        cand_lower_bound=bound, pos_offset=rows["pos_offset"],
        pos_inflight=rows["pos_inflight"], pos_mem_fixed=rows["pos_mem_fixed"], pos_tier=rows["pos_tier"],
        capacity=scn.cluster.device.memory_bytes if capacity is None else capacity)


def _select(rows: dict, keep: np.ndarray) -> dict:
    """The tables of the candidates ``keep`` (a boolean mask) only."""
    offset = rows["pos_offset"]
    positions = np.diff(offset)
    position_keep = np.repeat(keep, positions)
    out = {name: rows[name][keep] for name in ("time_ps", "params", "mem_params", "act_bytes", "send_ps",
                                               "scale", "head_scale", "offset", "mem_fixed",
                                               "mem_per_param", "g0", "g1", "micro_batches", "pp", "vp")}
    out["pos_inflight"] = rows["pos_inflight"][position_keep]
    out["pos_mem_fixed"] = rows["pos_mem_fixed"][position_keep]
    out["pos_tier"] = rows["pos_tier"][position_keep]
    out["pos_offset"] = np.concatenate(([0], np.cumsum(positions[keep]))).astype(np.int64)
    return out


@dataclass
class SearchOutcome:
    """The winning candidate with its batch problem and result, and search statistics.

    ``evaluated``: candidates the stage DP solved; ``total``: candidates priced exactly
    (tables built); ``bounded``: full candidates given a lower bound; ``partials``:
    partial candidates enumerated.
    """

    candidate: Candidate
    problem: DPProblem
    result: DPResult
    local: int
    evaluated: int
    total: int
    bounded: int = 0
    partials: int = 0


class _Search:
    """State of one search: the incumbent, its score and tie-breaking key, and counters.

    A candidate's score is its closed form (``ranking`` None) or the exact time of its
    DP split's schedule, in picoseconds; a candidate is solved while its bound
    (:class:`_Ranking`) does not exceed :meth:`limit`."""

    def __init__(self, scn: Scenario, table: ConfigTable, partials: Partials, numbers: np.ndarray,
                 limits: SpaceLimits, engine: str, threads: int | None, ranking: _Ranking | None = None):
        self.scn, self.table, self.partials, self.limits = scn, table, partials, limits
        self.numbers = numbers  # each partial's index in the whole enumeration
        self.engine, self.threads = engine, threads
        self.orders = _orders(limits)
        self.score = INF
        self.key: tuple | None = None
        self.best: SearchOutcome | None = None
        self.evaluated = self.priced = self.bounded = 0
        self.ranking = ranking  # None: by the closed form
        self.closed_form = INF  # the incumbent's

    def limit(self, vp) -> np.ndarray:
        """Per candidate (by its ``vp``): the largest closed form, or bound on it, that can
        still beat the incumbent."""
        vp = np.asarray(vp)
        if self.score >= INF:
            return np.full(vp.shape, INF, dtype=np.int64)
        if self.ranking is None:
            return np.full(vp.shape, self.score, dtype=np.int64)
        return self.score + (self.score * self.ranking.slack(vp)).astype(np.int64)

    @property
    def widest_limit(self) -> int:
        """:meth:`limit` of the schedule with the widest margin."""
        return int(self.limit(np.array([1, 2])).max())

    def extend(self, partials: Partials, numbers: np.ndarray) -> None:
        """Add partials (found by a later pass) to the ones blocks index into."""
        old = self.partials
        self.partials = Partials(old.configs, *(np.concatenate((getattr(old, f), getattr(partials, f)))
                                                for f in ("config", "pp", "dp", "vp")), old.config_arrays)
        self.numbers = np.concatenate((self.numbers, numbers))

    def block(self, index: np.ndarray) -> None:
        """Bound the full candidates of the partials at ``index``; price and solve the
        promising ones, best bound first."""
        cands, source, position = expand_arrays(self.partials, index, self.limits)
        self.bounded += len(cands)
        bound = _candidate_bound(self.scn, self.table, cands, self.ranking)
        order = np.flatnonzero(bound <= self.limit(cands.vp))
        order = order[np.argsort(bound[order], kind="stable")]
        for start in range(0, len(order), SUB_BATCH):
            sub = order[start:start + SUB_BATCH]
            sub = sub[bound[sub] <= self.limit(cands.vp[sub])]
            if not len(sub):
                if bound[order[start]] > self.widest_limit:
                    break  # sorted: every later candidate is bounded out too
                continue
            self._solve(cands.take(sub), source[sub], position[sub])

    def _solve(self, cands: CandidateArrays, source: np.ndarray, position: np.ndarray) -> None:
        micro = self.scn.job.micro_batches(cands.dp, self.table.arrays.micro_batch[cands.config])
        rows = pipeline.with_schedule(self.scn.price(self.table, cands), micro, cands.vp)
        self.priced += len(cands)
        bound = _table_bound(rows, self.ranking)
        keep = bound <= self.limit(cands.vp)
        if not keep.any():
            return
        rows = _select(rows, keep)
        cands, source, position, micro = cands.take(keep), source[keep], position[keep], micro[keep]
        bound = bound[keep]
        if self.ranking is not None:
            # the DP drops a candidate whose bound exceeds the best closed form it has
            # seen, which is at least the schedule of that candidate
            bound = (bound / (1.0 + self.ranking.slack(cands.vp))).astype(np.int64)
        problem = _build_problem(self.scn, rows, lower_bound=bound)
        result = engines.solve(problem, self.engine, self.threads)
        self.evaluated += result.evaluated
        solved = np.flatnonzero((result.status == SOLVED) & self._may_win(result.objective, cands.vp))
        if not len(solved):
            return
        cheap = _cheap(self.scn, self.table, self.partials, source[solved], self.orders)
        keys = [(int(b), int(s), int(p)) for b, s, p in zip(cheap, self.numbers[source[solved]], position[solved])]
        for n, key in sorted(zip(solved.tolist(), keys), key=lambda e: (int(result.objective[e[0]]), e[1])):
            closed_form = int(result.objective[n])
            if not self._may_win(closed_form, cands.vp[n]):
                continue  # the incumbent improved since the batch was filtered
            candidate = None
            if self.ranking is None:
                score = closed_form
            elif _work_floor_ps(problem, result, n, int(cands.pp[n]), int(micro[n])) > self.score:
                continue  # its busiest rank alone takes longer than the incumbent's step
            else:
                candidate = cands.candidate(self.table, n)
                score = self._schedule_ps(candidate, problem, result, n)
            if (score, closed_form, key) < (self.score, self.closed_form, self.key or ()):
                self.score, self.closed_form, self.key = score, closed_form, key
                self.best = SearchOutcome(candidate or cands.candidate(self.table, n), problem, result, n, 0, 0)

    def _may_win(self, closed_form, vp) -> np.ndarray:
        """Whether a split with this closed form may still beat the incumbent: its closed
        form is within the limit, except for candidates bounded by the schedule floor,
        whose closed form says nothing about their schedule's lower end."""
        within = np.asarray(closed_form) <= self.limit(vp)
        if self.ranking is None:
            return within
        return within | self.ranking.uses_floor(vp)

    def _schedule_ps(self, candidate: Candidate, problem: DPProblem, result: DPResult, n: int) -> int:
        """The exact schedule of the DP's split of candidate ``n``, in picoseconds."""
        layers = np.diff([0] + _ends(problem, result, n)).tolist()
        if self.engine == "python":
            return int(round(schedule.candidate_timing(self.scn, candidate, layers, "python").step_s * PS))
        return int(round(schedule.candidate_step_s(self.scn, candidate, layers) * PS))


KEEP = 1 << 16
"""Partials kept from the first pass (at least; those with the smallest lb1)."""


class _Pass:
    """One pass over the enumeration: the memory-feasible partials whose lb1 is in
    ``(low, high]``, at most about ``KEEP`` of them (the smallest lb1; ``high`` drops to
    the largest lb1 kept when the pass had to leave some out)."""

    def __init__(self, scn: Scenario, table: ConfigTable, space: PartialSpace, orders, low: int, high: int,
                 ranking: _Ranking | None = None):
        self.high = high
        parts, kept = [], 0
        combos = 0
        pp, dp, vp = [], [], []
        self.count = 0
        for chunk in space.chunks():
            self.count += len(chunk)
            pp.append(chunk.pp), dp.append(chunk.dp), vp.append(chunk.vp)
            fits = np.flatnonzero(_chunk_memory(scn, table, chunk) <= scn.cluster.device.memory_bytes)
            owner, config = chunk.owner[fits], chunk.config[fits]
            bound = _partial_bound_of(scn, table, config, chunk.pp[owner], chunk.dp[owner], chunk.vp[owner], orders,
                                      ranking)
            keep = (bound > low) & (bound <= self.high)
            parts.append((bound[keep], owner[keep] + combos, config[keep], chunk.first + fits[keep]))
            combos += len(chunk.pp)
            kept += int(keep.sum())
            if kept > 2 * KEEP:
                bounds = np.concatenate([p[0] for p in parts])
                self.high = int(np.partition(bounds, KEEP - 1)[KEEP - 1])
                parts = [tuple(a[p[0] <= self.high] for a in p) for p in parts]
                kept = sum(len(p[0]) for p in parts)
        cat = lambda i, dtype=np.int64: (np.concatenate([p[i] for p in parts]) if parts  # noqa: E731
                                         else np.zeros(0, dtype=dtype))
        self.bound, owner, config, self.numbers = cat(0), cat(1), cat(2), cat(3)
        combo = lambda values: np.concatenate(values)[owner] if values else np.zeros(0, dtype=np.int64)  # noqa: E731
        self.partials = Partials(space.configs, config, combo(pp), combo(dp), combo(vp), space.config_arrays)


def _check_ranking(ranking: str) -> None:
    if ranking not in RANKINGS:
        raise SpecError(f"ranking = {ranking!r}: must be one of {', '.join(RANKINGS)}")


def search(scn: Scenario, limits: SpaceLimits = SpaceLimits(), engine: str = "cpp",
           threads: int | None = None, ranking: str = "schedule") -> SearchOutcome:
    """Find the best candidate; InfeasibleError if nothing fits in memory.

    ``ranking="closed-form"``: the candidate (and split) with the smallest closed form;
    ``"schedule"``: the candidate whose DP split has the fastest exact schedule
    (:class:`_Ranking` says which candidates are bounded how)."""
    _check_ranking(ranking)
    by = _Ranking() if ranking == "schedule" else None
    space = PartialSpace(scn.model, scn.cluster, scn.job, scn.num_nodes, limits)
    if not len(space.configs):
        raise InfeasibleError(diagnose.empty_space_message(scn, limits))
    table = scn.config_table(space.configs, space.config_arrays)
    orders = _orders(limits)
    state = None
    low = -1
    while True:
        # Every pass after the first collects the partials the previous ones left out
        # whose lb1 does not exceed the best score (widened by its margin).
        found = _Pass(scn, table, space, orders, low, INF if state is None else state.widest_limit, by)
        if found.count == 0:
            raise InfeasibleError(diagnose.empty_space_message(scn, limits))
        if state is None:
            state = _Search(scn, table, found.partials, found.numbers, limits, engine, threads, by)
        else:
            state.extend(found.partials, found.numbers)
        offset = len(state.partials) - len(found.partials)
        remaining, bound = np.arange(len(found.partials)) + offset, found.bound
        while len(remaining):
            keep = bound <= state.limit(state.partials.vp[remaining])
            remaining, bound = remaining[keep], bound[keep]
            if not len(remaining):
                break
            take = bound <= (np.partition(bound, BLOCK - 1)[BLOCK - 1] if len(bound) > BLOCK else bound.max())
            state.block(remaining[take])
            remaining, bound = remaining[~take], bound[~take]
        if found.high >= state.widest_limit:
            break  # every partial whose lb1 could beat the best score was seen
        low = found.high
    if state.best is None:
        partials = enumerate_partials(scn.model, scn.cluster, scn.job, scn.num_nodes, limits)
        memory = _memory_bound(scn, table, partials)
        raise InfeasibleError(diagnose.memory_message(scn, partials, _Bounds(None, memory), limits, engine, threads))
    best = state.best
    best.evaluated, best.total, best.bounded, best.partials = (state.evaluated, state.priced, state.bounded,
                                                               found.count)
    return best


def coerce_inputs(model, cluster, job) -> tuple[ModelSpec, ClusterSpec, JobSpec]:
    """Specs from specs or preset names; ``job`` defaults to the model's published batch."""
    model, cluster = load_model(model), load_cluster(cluster)
    if job is None:
        if not model.default_global_batch:
            raise SpecError(f"job: model {model.name} has no default global batch; pass a JobSpec")
        job = JobSpec(global_batch=model.default_global_batch, seq_len=model.seq_len)
    return model, cluster, job


@contextmanager
def _priceable(scn: Scenario):
    """Turn the DP's int64 range checks into a SpecError naming the job: specs bound
    every size, but a product of them (nodes x time x micro-batches) can still exceed
    what integer picoseconds hold."""
    try:
        yield
    except OverflowError as error:  # integer byte/picosecond columns of the cost tables
        raise SpecError(f"job = {scn.job.global_batch} x {scn.job.seq_len} tokens of {scn.model.name}: "
                        f"too large to price in int64 bytes and picoseconds ({error})") from None
    except ValueError as error:
        if "overflows int64" not in str(error) and "must be non-negative" not in str(error):
            raise
        raise SpecError(f"job = {scn.job.global_batch} x {scn.job.seq_len} tokens of {scn.model.name}: "
                        f"a step is too long to price in int64 picoseconds ({error})") from None


def plan(model: ModelSpec | str, cluster: ClusterSpec | str, job: JobSpec | None = None, *,
         engine: str = "cpp", threads: int | None = None,
         limits: SpaceLimits = SpaceLimits(), source=None, ranking: str = "schedule") -> Plan:
    """The fastest plan for ``job`` on ``cluster`` that fits in memory.

    ``model`` and ``cluster`` are specs or preset names (a preset cluster at its default
    size); ``job`` defaults to the model's published batch and sequence length.
    ``limits`` restricts the joint space (TP, PP, DP, CP, EP, VP, micro-batch,
    recomputation, SP, ZeRO stage, rank order). ``source`` replaces the analytic node
    costs (measured profiles; see :class:`~nest.tables.Scenario`). The stage DP splits
    each candidate by the closed form of its schedule; ``ranking`` compares candidates
    by the exact schedule of that split (``"schedule"``, the time the plan reports) or
    by the closed form itself (``"closed-form"``, the DP's exact optimum). Raises
    :class:`~nest.errors.InfeasibleError` when no plan fits and
    :class:`~nest.errors.SpecError` on inconsistent inputs.
    """
    started = time.perf_counter()
    model, cluster, job = coerce_inputs(model, cluster, job)
    scn = Scenario(model, cluster, job, source)
    with _priceable(scn):
        outcome = search(scn, limits, engine, threads, ranking)
    ends = _ends(outcome.problem, outcome.result, outcome.local)
    if ranking == "schedule":
        ends = polish_split(scn, outcome.candidate, outcome.problem, outcome.local, ends, engine)
    return build_plan(scn, outcome.candidate, outcome.problem, outcome.local, ends,
                      solve_time=time.perf_counter() - started, evaluated=outcome.evaluated,
                      engine=engine, candidates_total=outcome.total, threads=threads)


POLISH_EVALUATIONS = 256
"""At most this many schedules are timed while polishing a split."""


def polish_split(scn: Scenario, cand: Candidate, problem: DPProblem, local: int, ends: list[int],
                 engine: str = "cpp") -> list[int]:
    """``ends`` with stage boundaries moved one node at a time while the exact schedule
    of the split gets faster and every stage still fits (first improvement, boundaries in
    order, at most :data:`POLISH_EVALUATIONS` schedules timed).

    The DP's split minimises the closed form, whose optimum is not always the
    schedule's: the end-of-step sync of each rank starts when that rank is done, so
    stages holding the embedding or the output layer gain from fewer blocks, and with
    fewer micro-batches than stages the fill and drain matter more than the slowest
    stage.
    """
    def step(trial: list[int]) -> float:
        layers = np.diff([0] + trial).tolist()
        if engine == "python":
            return schedule.candidate_timing(scn, cand, layers, "python").step_s
        return schedule.candidate_step_s(scn, cand, layers)

    ends = list(ends)
    best, budget, improved = step(ends), POLISH_EVALUATIONS, True
    while improved and budget > 0:
        improved = False
        for k in range(len(ends) - 1):
            for delta in (-1, 1):
                trial = ends[:k] + [ends[k] + delta] + ends[k + 1:]
                if not (trial[k - 1] if k else 0) < trial[k] < trial[k + 1] or budget <= 0:
                    continue
                if not all(d["fits"] for d in stage_details(problem, local, trial)):
                    continue
                budget -= 1
                seconds = step(trial)
                if seconds < best:
                    best, ends, improved = seconds, trial, True
    return ends


def _work_floor_ps(problem: DPProblem, result: DPResult, n: int, pp: int, micro_batches: int) -> int:
    """A lower bound on the exact schedule of candidate ``n``'s split: every pipeline rank
    runs its chunks (the DP's stage times, sends included) once per micro-batch, less two
    picoseconds of rounding per node and micro-batch."""
    work = [0] * pp
    for k, t in enumerate(stage_times(problem, n, _ends(problem, result, n))):
        work[k % pp] += t
    return micro_batches * (max(work) - 2 * (problem.num_nodes + 1))


def _ends(problem: DPProblem, result: DPResult, n: int) -> list[int]:
    start = int(problem.pos_offset[n])
    return [int(e) for e in result.ends[start:start + problem.stages(n)]]


def evaluate(model: ModelSpec | str, cluster: ClusterSpec | str, job: JobSpec | None = None, *,
             tp: int, pp: int, dp: int, micro_batch: int, recompute: str = "none", sp: bool = False,
             distributed_optimizer: bool = False, zero: int | None = None, cp: int = 1, ep: int = 1,
             vp: int = 1, rank_order: str = DEFAULT_ORDER, layers_per_stage: list[int] | None = None,
             engine: str = "cpp", threads: int | None = None, source=None, ranking: str = "schedule") -> Plan:
    """Cost one fixed configuration; with ``layers_per_stage`` also a fixed split.

    ``zero`` is the ZeRO stage (0-3); ``distributed_optimizer=True`` is ZeRO-1 (Megatron's
    name for it). With ``vp > 1`` the split has ``pp x vp`` virtual stages, listed in
    schedule order. Without a split, the stage DP's split for that configuration,
    polished on the exact schedule (:func:`polish_split`) unless ``ranking`` is
    ``"closed-form"``, as :func:`plan` splits it. Inputs as for :func:`plan`.
    """
    started = time.perf_counter()
    model, cluster, job = coerce_inputs(model, cluster, job)
    scn = Scenario(model, cluster, job, source)
    if zero is None:
        zero = 1 if distributed_optimizer else 0
    elif distributed_optimizer and zero != 1:
        raise SpecError(f"zero = {zero}: conflicts with distributed_optimizer (ZeRO-1)")
    cand = Candidate(_fixed_config(scn, tp, sp, micro_batch, recompute, cp, ep, pp),
                     pp, dp, vp, zero, rank_order)
    _check_fixed(scn, cand, layers_per_stage)
    with _priceable(scn):
        problem = _problem(scn, [cand])
        result = engines.solve(problem, engine, threads) if layers_per_stage is None else None
    _check_ranking(ranking)
    if layers_per_stage is None:
        if result.status[0] == INFEASIBLE:
            raise InfeasibleError(diagnose.config_message(scn, cand, None, engine, threads))
        ends = _ends(problem, result, 0)
        if ranking == "schedule":
            ends = polish_split(scn, cand, problem, 0, ends, engine)
    else:
        ends = [int(e) for e in np.cumsum(layers_per_stage)]
        if not all(stage["fits"] for stage in stage_details(problem, 0, ends)):
            raise InfeasibleError(diagnose.config_message(scn, cand, ends, engine, threads))
    return build_plan(scn, cand, problem, 0, ends, solve_time=time.perf_counter() - started,
                      evaluated=1, engine=engine, candidates_total=1, threads=threads)


def _fixed_config(scn: Scenario, tp, sp, micro_batch, recompute, cp, ep, pp):
    from .costs import LayerConfig

    for name, value in (("tp", tp), ("pp", pp), ("micro_batch", micro_batch), ("cp", cp), ("ep", ep)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise SpecError(f"{name} = {value!r}: must be a positive integer")
    check_tp(scn.model, scn.cluster, tp)
    return LayerConfig(tp, sp, micro_batch, recompute, scn.model.tied_embeddings and pp > 1, cp, ep)


def _check_fixed(scn: Scenario, cand: Candidate, layers) -> None:
    job, devices, cfg = scn.job, scn.cluster.num_devices, cand.cfg
    for name, value in (("dp", cand.dp), ("vp", cand.vp)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise SpecError(f"{name} = {value!r}: must be a positive integer")
    if cand.devices > devices:
        raise SpecError(f"tp * cp * pp * dp = {cand.devices}: exceeds the cluster's {devices} devices")
    if job.global_batch % (cand.dp * cfg.micro_batch) and not job.uneven_batch:
        raise SpecError(f"global_batch = {job.global_batch}: must be divisible by dp * micro_batch "
                        f"= {cand.dp * cfg.micro_batch}")
    if cand.virtual_stages > scn.num_nodes:
        raise SpecError(f"pp * vp = {cand.virtual_stages}: more stages than the {scn.num_nodes} "
                        "layer-graph nodes")
    if cand.vp > 1 and (cand.pp == 1 or scn.micro_batches(cand) % cand.pp):
        raise SpecError(f"vp = {cand.vp}: interleaving needs pp > 1 and a micro-batch count "
                        f"({scn.micro_batches(cand)}) divisible by pp ({cand.pp})")
    if cfg.recompute not in ("none", "selective", "full"):
        raise SpecError(f"recompute = {cfg.recompute!r}: must be one of none, selective, full")
    if cfg.sp and cfg.tp == 1:
        raise SpecError("sp = True: sequence parallelism needs tp > 1")
    if cand.zero not in (0, 1, 2, 3):
        raise SpecError(f"zero = {cand.zero!r}: must be 0, 1, 2 or 3")
    if cand.zero and cand.dp * cfg.cp == 1:
        raise SpecError(f"zero = {cand.zero}: sharding needs dp * cp > 1")
    if job.seq_len % cfg.cp:
        raise SpecError(f"cp = {cfg.cp}: must divide seq_len ({job.seq_len})")
    if cfg.ep > 1 and not scn.model.is_moe:
        raise SpecError(f"ep = {cfg.ep}: {scn.model.name} has no experts")
    if scn.model.is_moe and (scn.model.num_experts % cfg.ep or (cfg.tp * cfg.cp * cand.dp) % cfg.ep):
        raise SpecError(f"ep = {cfg.ep}: must divide num_experts ({scn.model.num_experts}) and "
                        f"tp * cp * dp ({cfg.tp * cfg.cp * cand.dp})")
    parse_order(cand.order)
    if layers is not None:
        text = ",".join(map(str, layers))
        if len(layers) != cand.virtual_stages or any((not isinstance(x, int)) or x < 1 for x in layers):
            raise SpecError(f"layers_per_stage = {text}: needs {cand.virtual_stages} positive counts")
        if sum(layers) != scn.num_nodes:
            raise SpecError(f"layers_per_stage = {text}: sums to {sum(layers)}, the layer graph has "
                            f"{scn.num_nodes} nodes (embedding, {scn.model.num_layers} blocks, head)")
