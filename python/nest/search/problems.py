"""Priced candidates -> the stage DP's tables (:class:`~nest.dp.problem.DPProblem`).

:func:`dp_rows` turns a priced batch (:func:`nest.cost.pricing.price`) into the DP's
integer tables, one row per candidate, with the closed form's factors of each
(:func:`nest.schedule.pipeline.with_schedule`); :func:`build_problem` makes the problem,
:func:`problem` does both for a list of candidates.

Memory per stage position (the DP checks ``mem_fixed + pos_mem_fixed + mem_per_param x
parameter bytes + inflight x activation bytes <= capacity``): parameter bytes follow the
ZeRO sharding (:func:`nest.cost.pricing.sync_columns`); a stage's activations count at
the most micro-batch chunks its rank holds at once in Megatron's order
(:func:`_live`, as :func:`nest.schedule.memory.live_summary` replays it: ``min(p - k, m)`` for 1F1B stage ``k``, the
warm-up count plus one, ``min(2 (p - d - 1) + (v - 1) p + 1, m v)``, for an interleaved
rank); the output layer's activations at its own chunk's count (:func:`_interleaved_head`)
and its 16-bit logits on the last stage only. An interleaved rank is checked as ``v``
copies of each of its chunks, which is exact when its chunks are alike;
:func:`nest.schedule.memory.peak_activations` replays the exact peak of any split.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..cost.pricing import Priced, price, sync_weights
from ..cost.scenario import Scenario
from ..dp.problem import DPProblem, DPResult, sync_time
from ..parallel import Candidate
from ..schedule import pipeline
from ..units import PS, to_ps
from .floors import table_bound


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


def _live(pp: np.ndarray, vp: np.ndarray, micro: np.ndarray, owner: np.ndarray, device: np.ndarray
          ) -> np.ndarray:
    """Per stage position, the most micro-batch-chunks its rank holds at once in
    Megatron's order: the warm-up forwards plus one, ``min(p - d, m)`` without
    interleaving, ``min(2 (p - d - 1) + (v - 1) p + 1, m v)`` with it (what
    :func:`~nest.schedule.memory.live_summary` replays, checked against it in
    tests/test_peak_memory.py; the output layer's chunk holds one micro-batch at most).
    The combined 1F1B of EP overlap holds as many: its extra warm-up forward stands for
    the steady forward it then runs together with a backward."""
    p, v, m = pp[owner], vp[owner], micro[owner]
    one_f_one_b = np.minimum(p - device, m)
    interleaved = np.minimum(2 * (p - device - 1) + (v - 1) * p + 1, m * v)
    return np.where(v == 1, one_f_one_b, interleaved).astype(np.float64)


def _interleaved_head(act_bytes: np.ndarray, vp: np.ndarray, owner: np.ndarray, device: np.ndarray,
                      pp: np.ndarray) -> np.ndarray:
    """Per stage position, the output layer's activations charged apart; moves them out of
    ``act_bytes`` (in place) for interleaved candidates.

    The DP charges a position's activations at its rank's peak count of micro-batch
    chunks. The output layer's chunk holds far fewer (at most one micro-batch in
    Megatron's order), so its activations are charged once, at that chunk's own peak
    count, to every position of the last rank: as :func:`_interleaved_ends` does for
    its weights, this bounds the rank's peak together with the check of its largest chunk.
    Without interleaving the last stage's count is already the chunk's."""
    fixed = np.zeros(len(owner))
    split = vp > 1
    if act_bytes.shape[1] < 2 or not split.any():
        return fixed
    last = act_bytes[:, -1].astype(np.float64)  # one micro-batch
    fixed += np.where(split[owner] & (device == pp - 1), last[owner], 0.0)
    act_bytes[split, -1] = 0
    return fixed


def dp_rows(priced: Priced) -> dict[str, np.ndarray]:
    """The DP's per-candidate tables of a priced batch, with the closed form's factors."""
    scn, table, cands, sync = priced.scn, priced.table, priced.cands, priced.sync
    take = scn.kind_index
    n = len(cands)
    dense = priced.col("params_dense").astype(np.float64)
    expert = priced.col("params_expert").astype(np.float64)
    send, boundary = scn.placer.candidate_sends(table.send_ps[cands.config][:, :, take],
                                                priced.col("out_bytes")[:, take], priced.places)
    send[:, :, -1] = 0  # the last node sends nothing
    v = cands.vp
    micro = priced.micro_batches()
    positions = cands.pp * v
    offset = np.concatenate(([0], np.cumsum(positions))).astype(np.int64)
    total = int(offset[-1])
    owner = np.repeat(np.arange(n), positions)
    q = np.arange(total, dtype=np.int64) - offset[owner]
    p = cands.pp[owner]
    device = q % p
    inflight = _live(cands.pp, v, micro, owner, device)
    tiers = np.concatenate(boundary) if boundary else np.zeros(0, dtype=np.int64)
    tier_offset = np.concatenate(([0], np.cumsum(cands.pp)))[:-1]
    pos_tier = tiers[tier_offset[owner] + device].astype(np.int64)
    pos_tier[offset[1:] - 1] = -1
    mem_params = np.ceil(sync["dense_bytes"][:, None] * dense + sync["expert_bytes"][:, None] * expert
                         + scn.fp8_weight_cache(cands.zero)[:, None] * (dense + expert) * scn.gemm_kinds
                         ).astype(np.int64)[:, take]
    pos_mem_fixed = _interleaved_ends(mem_params, v, owner, device, p)
    pos_mem_fixed[offset[1:] - 1] += table.last_transient[cands.config]  # the loss runs on the last stage
    act_bytes = priced.col("act_bytes")[:, take].copy()
    pos_mem_fixed += _interleaved_head(act_bytes, v, owner, device, p)
    host_params = np.ceil(sync["dense_host_bytes"][:, None] * dense + sync["expert_host_bytes"][:, None] * expert
                          ).astype(np.int64)[:, take]
    # activation offload's host copies (one pipeline stage: its first node stands for them)
    host_params[:, 0] += table.offload_host[cands.config]
    rows = {
        "time_ps": to_ps(priced.times.total)[:, take],
        "params": to_ps(sync_weights(scn, table, cands, sync))[:, take],
        "mem_params": mem_params,
        "act_bytes": act_bytes,
        "send_ps": np.ascontiguousarray(send),
        "mem_fixed": (scn.reserve_bytes + table.transient[cands.config] + priced.pair_transient).astype(np.float64),
        "mem_per_param": v.astype(np.float64),
        "host_params": host_params,
        "host_per_param": v.astype(np.float64),
        "g0": sync["fixed_s"] * PS,
        "g1": v.astype(np.float64),
        "pos_inflight": inflight,
        "pos_mem_fixed": pos_mem_fixed,
        "pos_tier": pos_tier,
        "pos_offset": offset,
    }
    return pipeline.with_schedule(rows, micro, v)


def build_problem(scn: Scenario, rows: dict, capacity: float | None = None,
                  lower_bound: np.ndarray | None = None) -> DPProblem:
    """The DP problem of :func:`dp_rows`; the DP skips a candidate whose ``lower_bound``
    (default: :func:`~nest.search.floors.table_bound`) exceeds the best it has found.
    ``capacity``: device memory (default: the cluster's device)."""
    bound = table_bound(rows) if lower_bound is None else lower_bound
    return DPProblem.build(
        time_ps=rows["time_ps"], params=rows["params"], mem_params=rows["mem_params"],
        act_bytes=rows["act_bytes"], send_ps=rows["send_ps"], cand_config=np.arange(len(rows["scale"])),
        cand_scale=rows["scale"], cand_offset=rows["offset"], cand_head_scale=rows["head_scale"],
        cand_mem_fixed=rows["mem_fixed"],
        cand_mem_per_param=rows["mem_per_param"], cand_g0=rows["g0"], cand_g1=rows["g1"],
        cand_lower_bound=bound, pos_offset=rows["pos_offset"],
        pos_inflight=rows["pos_inflight"], pos_mem_fixed=rows["pos_mem_fixed"], pos_tier=rows["pos_tier"],
        capacity=scn.cluster.device.memory_bytes if capacity is None else capacity,
        host_params=rows["host_params"], cand_host_per_param=rows["host_per_param"],
        host_capacity=0.0 if scn.host_share is None else scn.host_share.usable_bytes)


def problem(scn: Scenario, cands: Sequence[Candidate], capacity: float | None = None) -> DPProblem:
    """The DP problem of ``cands`` (one row each, in order)."""
    return build_problem(scn, dp_rows(price(scn, *scn.batch(cands))), capacity)


def select(rows: dict, keep: np.ndarray) -> dict:
    """The tables of the candidates ``keep`` (a boolean mask) only."""
    offset = rows["pos_offset"]
    positions = np.diff(offset)
    position_keep = np.repeat(keep, positions)
    out = {name: rows[name][keep] for name in ("time_ps", "params", "mem_params", "act_bytes", "send_ps",
                                               "scale", "head_scale", "offset", "mem_fixed",
                                               "mem_per_param", "g0", "g1", "micro_batches", "pp", "vp",
                                               "host_params", "host_per_param")}
    out["pos_inflight"] = rows["pos_inflight"][position_keep]
    out["pos_mem_fixed"] = rows["pos_mem_fixed"][position_keep]
    out["pos_tier"] = rows["pos_tier"][position_keep]
    out["pos_offset"] = np.concatenate(([0], np.cumsum(positions[keep]))).astype(np.int64)
    return out


def split_closed_form_ps(problem: DPProblem, n: int, details: list[dict]) -> int:
    """The closed form (pipeline and the heaviest stage's sync, picoseconds) of candidate
    ``n`` split as ``details`` (:func:`~nest.dp.reference.stage_details`)."""
    w_max = max(d["params"] for d in details)
    sync_ps = sync_time(float(problem.cand_g0[n]), float(problem.cand_g1[n]), w_max)
    return pipeline.pipeline_ps(problem.cand_scale[n], problem.cand_head_scale[n], problem.cand_offset[n],
                                [d["time_ps"] for d in details]) + sync_ps


def ends_of(problem: DPProblem, result: DPResult, n: int) -> list[int]:
    """The stage ends of candidate ``n``'s solved split (node indices, exclusive)."""
    start = int(problem.pos_offset[n])
    return [int(e) for e in result.ends[start:start + problem.stages(n)]]
