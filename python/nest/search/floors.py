"""Lower bounds of the search: on a candidate's closed form, its schedule and its memory.

The search (:mod:`nest.search.search`) discards a candidate only when one of these
bounds exceeds the incumbent. ``lb1`` (:func:`partial_bound`) bounds every candidate of a
partial (degrees but the ZeRO stage and the rank order known), ``lb2``
(:func:`candidate_bound`) a full candidate before it is priced exactly, and
:func:`table_bound` a priced one before the stage DP solves it; :func:`memory_bound` is
the memory filter (the most frugal sharding).

Why the bounds are valid:

* *Floors*: a group of ``n`` ranks whose members are at least ``d`` device indices apart
  (``d`` the smallest stride of its dimensions under the rank order; EP groups are runs of
  a stage's ranks, expert-DP groups take every ``ep``-th) has one of the shapes
  :class:`~nest.network.tiers.ShapeFloor` enumerates, so each alpha/beta term of its price is at
  least that term's minimum over them; a ring spanning at least ``(n - 1) d + 1`` devices
  sits on a tier whose groups hold that span (:func:`~nest.network.tiers.ring_floor`); a pipeline
  pair a stride ``q`` apart is in different groups of every tier whose groups have at most
  ``q`` devices (:func:`~nest.network.tiers.pair_tier_floor`). Degrees unknown for ``lb1`` are
  taken as 1, which only shrinks strides. Every price is built from these terms and the
  node's fixed costs by additions, multiplications by non-negative numbers and ``max(0,
  .)``; IEEE rounding is monotone, so lower terms give lower or equal seconds, and
  rounding to picoseconds and ``G(w) = floor(g0 + g1 w + 0.5)`` are monotone too.
* *Split*: for any split into ``P`` stages, ``sum_k T_k = sum of node times + 2 x sum over
  boundaries of the send of the boundary node`` (the stage before sends its output
  forward, the stage after sends the gradient back, both on the boundary's tier), so
  ``max_k T_k >= ceil(sum_k T_k / P)`` (interleaved: :func:`nest.schedule.pipeline.stage_floor`
  bounds ``scale x max T + head_scale x H`` from the same sum); the stage holding the
  slowest node also sends at least once when ``P > 1``. The heaviest stage has
  ``W >= max(ceil(sum W / P), max node W)``. The objective
  ``scale x max T + head_scale x H + offset + G(max W)`` is monotone in all of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..arrays import distinct_rows, isin, setdiff, unique
from ..cost.model import BLOCK, MOE
from ..cost.pricing import kind_times, sync_columns, sync_weights
from ..cost.scenario import ConfigTable, Scenario
from ..network.placement import GroupTerms
from ..parallel import DEFAULT_ORDER, CandidateArrays
from ..schedule import pipeline
from ..units import PS, to_ps
from .space import PartialChunk, Partials

ONE_F_ONE_B_MARGIN = 0.10
"""With the ``"schedule"`` ranking, a 1F1B candidate is solved while the closed form's
lower bound is within this fraction of the best schedule (the closed form is an upper
bound of a 1F1B schedule, and close to it: nest's plans of every preset within 5.3%);
``None`` bounds 1F1B candidates by :func:`nest.schedule.pipeline.schedule_floor` like interleaved
ones, which is exact but leaves the fill and drain out and so solves many more."""


@dataclass(frozen=True)
class Ranking:
    """How the ``"schedule"`` ranking bounds candidates: interleaved ones (and every one
    when ``margin`` is None) by a lower bound on the schedule itself
    (:func:`nest.schedule.pipeline.schedule_floor`), 1F1B ones by the closed form's lower bound,
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

def ceil_div(a, b):
    return -(-a // b)


def config_sums(scn: Scenario, kind_values: np.ndarray) -> np.ndarray:
    """Per row, the sum over the layer chain of per-kind integers."""
    return (kind_values * scn.kind_count).sum(axis=1)


def memory_factors(scn: Scenario, table: ConfigTable) -> tuple[np.ndarray, np.ndarray]:
    """Per configuration, the factors of :func:`memory_bound` (one row each, a single
    gather): dense and expert parameter bytes, cp, tp x cp, ep x etp (the ranks sharing a
    stage's expert-DP groups), activation bytes; and the fixed part (reserved + transient)."""
    def compute():
        arrays = table.arrays
        opt, wb = scn.job.optimizer, scn.weight_bytes
        per_param = wb + opt.grad_bytes + opt.sharded_bytes * (1 - scn.max_offload)
        return (np.stack([config_sums(scn, table.cols["params_dense"]) * per_param, arrays.cp,
                          config_sums(scn, table.cols["params_expert"]) * per_param, arrays.tp * arrays.cp,
                          arrays.ep * arrays.etp, config_sums(scn, table.cols["act_bytes"])], axis=1),
                scn.reserve_bytes + table.transient)
    return table.cached("memory", compute)


def memory_bound(scn: Scenario, table: ConfigTable, partials: Partials) -> np.ndarray:
    """Lower bound on the peak memory per device (the most frugal sharding: ZeRO-3 over
    data x context, experts over theirs, the most optimizer state offloaded; activations
    of one micro-batch per stage)."""
    per_config, fixed = memory_factors(scn, table)
    c, p, dp = partials.config, partials.pp, partials.dp
    dense, cp, expert, tp_cp, ep_etp, acts = per_config[c].T
    return fixed[c] + (dense / (dp * cp) + expert / (tp_cp * dp // ep_etp) + acts) / p


def chunk_memory(scn: Scenario, table: ConfigTable, chunk: PartialChunk) -> np.ndarray:
    """:func:`memory_bound` of a chunk's partials: the parameter terms are one value per
    loop combination (all its partials have the same parameters), then the remaining
    operations per partial, in the same order."""
    per_config, fixed = memory_factors(scn, table)
    first = np.concatenate(([0], np.flatnonzero(np.diff(chunk.owner)) + 1))
    dense, cp, expert, tp_cp, ep_etp, _ = per_config[chunk.config[first]].T
    shared = dense / (chunk.dp * cp) + expert / (tp_cp * chunk.dp // ep_etp)
    owner = chunk.owner
    return fixed[chunk.config] + (shared[owner] + per_config[chunk.config, 5]) / chunk.pp[owner]


def candidate_memory_floor(scn: Scenario, table: ConfigTable, cands: CandidateArrays) -> np.ndarray:
    """Per full candidate, a lower bound on its peak memory per device with its own ZeRO
    stage and offload fraction: reserve and
    transient, its parameters' bytes (:func:`~nest.cost.pricing.sync_columns` sharding)
    and one micro-batch's activations, spread evenly over its stages; and the
    transformer blocks spread over ranks that hold ``c_d`` micro-batches of each block's
    activations (``min(p - d, m)`` for rank ``d`` of 1F1B; with ``v`` chunks the stage DP's
    count of live micro-batch chunks over ``v``, which its check of ``v`` copies of every
    chunk implies summed over the rank's chunks), every block at least the cheapest
    block's bytes: some rank then holds at least ``blocks / sum_d 1 / (params + c_d acts)``.
    A candidate above the device is one the stage DP finds no split for."""
    per_config, fixed = memory_factors(scn, table)
    c, zero = cands.config, cands.zero
    opt, wb = scn.job.optimizer, scn.weight_bytes
    dense, cp, expert, tp_cp, ep_etp, acts = per_config[c].T
    frugal = wb + opt.grad_bytes + opt.sharded_bytes * (1 - scn.max_offload)
    shards = {"dense": cands.dp * cp, "expert": tp_cp * cands.dp // ep_etp}
    total = acts.astype(np.float64)
    per_param = {}
    for name, params in (("dense", dense / frugal), ("expert", expert / frugal)):
        s = shards[name]
        per_param[name] = (wb / np.where(zero >= 3, s, 1) + opt.grad_bytes / np.where(zero >= 2, s, 1)
                           + opt.sharded_bytes * (1 - cands.offload) / np.where(zero >= 1, s, 1))
        total = total + params * per_param[name]
    floor = total / cands.pp
    blocks = np.flatnonzero(isin(np.asarray(scn.kind_list), (BLOCK, MOE)))
    if len(blocks) and len(cands):
        cols = lambda name: table.cols[name][c][:, blocks].astype(np.float64)  # noqa: E731
        block_params = (cols("params_dense") * per_param["dense"][:, None]
                        + cols("params_expert") * per_param["expert"][:, None]).min(axis=1)
        block_acts = cols("act_bytes").min(axis=1)
        micro = scn.job.micro_batches(cands.dp, table.arrays.micro_batch[c]).astype(np.float64)
        inverse = _inverse_sum(block_params, block_acts, cands.pp.astype(np.float64),
                               cands.vp.astype(np.float64), micro)
        # the harmonic sums are evaluated to ~1e-12; a millionth keeps the floor below
        floor = np.maximum(floor, scn.kind_count[blocks].sum() / (inverse * (1 + 1e-6)))
    return fixed[c] + floor


def _harmonic(x: np.ndarray, count: np.ndarray) -> np.ndarray:
    """``sum_{j < count} 1 / (j + x)`` for ``x > 0``: term by term up to 16 terms, else
    ``digamma(x + count) - digamma(x)`` (recurrence to 8, then its asymptotic series)."""
    out = np.empty(len(x))
    few = count <= 16
    terms = np.arange(16)[None, :]
    out[few] = np.where(terms < count[few, None], 1 / (terms + x[few, None]), 0.0).sum(axis=1)
    x, count = x[~few], count[~few]
    # far from 0 the difference of two digammas cancels: the series difference term by term
    end = x + count
    far = np.log1p(count / x) - 0.5 * (1 / end - 1 / x) - (1 / end**2 - 1 / x**2) / 12
    near = _digamma(np.minimum(end, 1e3 + count)) - _digamma(np.minimum(x, 1e3))
    out[~few] = np.where(x > 1e3, far, near)
    return out


def _digamma(x: np.ndarray) -> np.ndarray:
    """The digamma function of ``x > 0`` to about 1e-12."""
    x = np.asarray(x, dtype=np.float64).copy()
    shift = np.zeros_like(x)
    for _ in range(8):
        low = x < 8
        shift = np.where(low, shift + 1 / x, shift)
        x = np.where(low, x + 1, x)
    inv = 1 / (x * x)
    series = np.log(x) - 0.5 / x - inv * (1 / 12 - inv * (1 / 120 - inv * (1 / 252 - inv / 240)))
    return series - shift


def _inverse_sum(params: np.ndarray, acts: np.ndarray, pp: np.ndarray, vp: np.ndarray,
                 micro: np.ndarray) -> np.ndarray:
    """``sum_d 1 / (params + c_d acts)`` over the ``pp`` ranks of each candidate (the
    counts ``c_d`` of :func:`candidate_memory_floor`)."""
    safe_acts = np.where(acts > 0, acts, 1.0)  # no activations: the last line
    # 1F1B: c = min(i, m) for i = 1..p
    k = np.minimum(pp, micro)
    one_f = _harmonic(1 + params / safe_acts, k) / safe_acts + (pp - k) / (params + micro * acts)
    # interleaved: c = min(2 j + (v - 1) p + 1, m v) / v for j = 0..p-1
    c0 = (vp - 1) * pp + 1
    uncapped = np.clip(np.floor((micro * vp - c0) / 2) + 1, 0, pp)
    inter = (vp / (2 * safe_acts)) * _harmonic((c0 + vp * params / safe_acts) / 2, uncapped) \
        + (pp - uncapped) / (params + micro * acts)
    out = np.where(vp == 1, one_f, inter)
    return np.where(acts > 0, out, pp / np.maximum(params, 1e-300))


def send_floors(scn: Scenario, table: ConfigTable) -> np.ndarray:
    """``[config, tier]``: the cheapest send of any node but the last on that tier or
    any tier above it (what a boundary at least costs when it crosses that tier)."""
    senders = unique(scn.kind_index[:-1])
    if not len(senders):
        return np.zeros(table.send_ps.shape[:2], dtype=np.int64)
    cheapest = table.send_ps[:, :, senders].min(axis=2)
    return np.minimum.accumulate(cheapest[:, ::-1], axis=1)[:, ::-1]


def stage_floors(t_sum, t_max, positions, send):
    """Lower bounds on the sum of the stage times of any split into ``positions`` stages
    (the node times and two sends per boundary) and on its slowest stage (the one of the
    slowest node, which sends at least once when there are several stages)."""
    send = np.where(positions > 1, send, 0)
    return t_sum + 2 * (positions - 1) * send, t_max + send


def sync_floor(g0, g1, w_sum, w_max, positions):
    """``G`` of the stage with the most parameters, at least (as the DP evaluates it)."""
    w_floor = np.maximum(ceil_div(w_sum, positions), w_max)
    return np.floor(g0 + g1 * w_floor.astype(np.float64) + 0.5).astype(np.int64)


def partial_bound(scn: Scenario, table: ConfigTable, partials: Partials, index: np.ndarray,
                   orders: tuple[str, ...], ranking: "Ranking | None" = None) -> np.ndarray:
    """``lb1`` of the partials at ``index`` (see the module docstring)."""
    return partial_bound_of(scn, table, partials.config[index], partials.pp[index], partials.dp[index],
                             partials.vp[index], orders, ranking)


def partial_bound_of(scn: Scenario, table: ConfigTable, c, p, dp, v, orders: tuple[str, ...],
                      ranking: "Ranking | None" = None) -> np.ndarray:
    def compute():
        pseudo = CandidateArrays(np.arange(len(table)), *(np.ones(len(table), dtype=np.int64) for _ in range(3)),
                                 np.zeros(len(table), dtype=np.int64), np.zeros(len(table), dtype=np.int64),
                                 orders)
        # degrees unknown at this level are 1: strides, hence spacings, only shrink
        terms = scn.placer.floor_terms(pseudo.degrees(table.arrays), any_of=orders)
        kinds = to_ps(kind_times(scn, table, pseudo, terms, zero_comm=False).total)
        return np.stack([config_sums(scn, kinds), kinds.max(axis=1), send_floors(scn, table)[:, 0],
                         table.arrays.micro_batch], axis=1)
    t_sum, t_max, send, micro_batch = table.cached(("lb1", orders), compute)[c].T
    m = scn.job.micro_batches(dp, micro_batch)
    floors = stage_floors(t_sum, t_max, p * v, send)
    closed_form = pipeline.time_bound(m, v, p, t_sum, *floors, send)
    if ranking is None:
        return closed_form
    rounding = pipeline.rounding_ps(m, v, scn.num_nodes, p * v)
    return ranking.bound(v, closed_form, pipeline.schedule_floor(m, p, *floors, rounding=rounding))


def candidate_bound(scn: Scenario, table: ConfigTable, cands: CandidateArrays,
                     ranking: "Ranking | None" = None) -> np.ndarray:
    """``lb2`` of every candidate (see the module docstring)."""
    # Candidates share most of their prices: the floors depend on the degrees and the
    # order only, and the per-kind prices on the floors' values, the configuration, the
    # ZeRO stage and the offload (and under EP overlap the schedule's shape). Each
    # distinct placement is floored once and each distinct row of those inputs priced
    # once; the same inputs give the same floats.
    placed, placed_of = distinct_rows(cands.config, cands.dp, cands.pp, cands.order)
    degrees = cands.take(placed).degrees(table.arrays)
    values = scn.placer.floor_terms(degrees).values()
    keys = [cands.config, cands.zero, np.searchsorted(unique(cands.offload), cands.offload),
            *values.view(np.int64)[:, placed_of]]
    if scn.job.overlap_moe_expert_parallel_comm and scn.model.is_moe:
        keys += [cands.pp, cands.vp, cands.dp]  # the combined 1F1B's unpaired passes (pricing.unpaired_share)
    first, inverse = distinct_rows(*keys)
    distinct = cands.take(first)
    terms = GroupTerms.of_values(values[:, placed_of[first]])
    kinds = to_ps(kind_times(scn, table, distinct, terms).total)
    sync = sync_columns(scn, distinct, terms)
    weights = to_ps(sync_weights(scn, table, distinct, sync))
    fixed = (sync["fixed_s"] * PS)[inverse]
    w_sum = config_sums(scn, weights)[inverse]
    t_sum, t_max = config_sums(scn, kinds)[inverse], kinds.max(axis=1)[inverse]
    positions = cands.pp * cands.vp
    boundary = scn.placer.boundary_floor(degrees)[placed_of]
    send = table.cached("sends", lambda: send_floors(scn, table))[cands.config, boundary]
    micro = scn.job.micro_batches(cands.dp, table.arrays.micro_batch[cands.config])
    g = sync_floor(fixed, cands.vp.astype(np.float64), w_sum, weights.max(axis=1)[inverse], positions)
    floors = stage_floors(t_sum, t_max, positions, send)
    closed_form = pipeline.time_bound(micro, cands.vp, cands.pp, t_sum, *floors, send) + g
    if ranking is None:
        return closed_form
    mean = sync_floor(fixed, cands.vp.astype(np.float64), w_sum, 0, positions)
    rounding = pipeline.rounding_ps(micro, cands.vp, scn.num_nodes, positions)
    return ranking.bound(cands.vp, closed_form, pipeline.schedule_floor(micro, cands.pp, *floors, mean, rounding))


def table_bound(rows: dict, ranking: "Ranking | None" = None) -> np.ndarray:
    """Lower bound on each candidate's objective from its exact tables: the time floor
    with the cheapest send of each boundary's own tier, and the sync floor (with a
    ``ranking``: :meth:`Ranking.bound`)."""
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
    g = sync_floor(rows["g0"], rows["g1"], params.sum(axis=1), params.max(axis=1), positions)
    closed_form = floor + rows["offset"] + g
    if ranking is None:
        return closed_form
    mean = sync_floor(rows["g0"], rows["g1"], params.sum(axis=1), 0, positions)
    rounding = pipeline.rounding_ps(rows["micro_batches"], rows["vp"], time_ps.shape[1], positions)
    return ranking.bound(rows["vp"], closed_form,
                         pipeline.schedule_floor(rows["micro_batches"], rows["pp"], *floors, mean, rounding))


def inner_kind_ps(scn: Scenario, table: ConfigTable, with_comm: bool, index: np.ndarray) -> np.ndarray:
    """Per configuration of ``index``, per kind: picoseconds on the configuration's
    innermost layout (default rank order, one stage, the fewest replicas whose ranks hold
    an expert-parallel group and its expert-TP ranks: ``dp = ep etp / gcd(ep etp, tp cp)``),
    or of compute alone. The TP, CP and expert groups are those of any larger ``dp`` (the
    expert grid's first ``ep x etp`` ranks of the stage), and the layout fits every cluster
    a candidate of it fits."""
    index = np.asarray(index, dtype=np.int64)
    if not with_comm:
        return to_ps(table.cols["compute_s"][index])
    arrays, ones, zeros = table.arrays, np.ones(len(index), dtype=np.int64), np.zeros(len(index), dtype=np.int64)
    ep, inner = arrays.ep[index] * arrays.etp[index], arrays.tp[index] * arrays.cp[index]
    cands = CandidateArrays(index, ones, ep // np.gcd(ep, inner), ones, zeros, zeros, (DEFAULT_ORDER,))
    terms, _ = scn.placer.exact_terms(cands.degrees(arrays))
    return to_ps(kind_times(scn, table, cands, terms, zero_comm=False).total)


def cheap_bound(scn: Scenario, table: ConfigTable, partials: Partials, index: np.ndarray,
           orders: tuple[str, ...]) -> np.ndarray:
    """The cheap bound earlier versions sorted partials by: ``(m v + p - 1) x max(ceil(sum /
    (p v)), largest node)``, node times on the configuration's innermost layout."""
    c = partials.config[index]
    with_comm = all(o.startswith("tp-cp-") for o in orders)
    cache = table.cached(("cheap", with_comm), dict)
    missing = setdiff(c, np.fromiter(cache, dtype=np.int64, count=len(cache)))
    if len(missing):
        kinds = inner_kind_ps(scn, table, with_comm, missing)
        for i, t_sum, t_max in zip(missing.tolist(), config_sums(scn, kinds).tolist(), kinds.max(axis=1).tolist()):
            cache[i] = (t_sum, t_max)
    t_sum = np.array([cache[i][0] for i in c.tolist()], dtype=np.int64)
    t_max = np.array([cache[i][1] for i in c.tolist()], dtype=np.int64)
    p, v = partials.pp[index], partials.vp[index]
    m = scn.job.micro_batches(partials.dp[index], table.arrays.micro_batch[c])
    return (m * v + p - 1) * np.maximum(ceil_div(t_sum, p * v), t_max)
