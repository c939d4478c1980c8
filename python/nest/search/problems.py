"""Priced candidates -> the stage DP's tables (:class:`~nest.dp.problem.DPProblem`).

:func:`dp_rows` turns a priced batch (:func:`nest.cost.pricing.price`) into the DP's
integer tables, one row per candidate, with the closed form's factors of each
(:func:`nest.schedule.pipeline.with_schedule`); :func:`build_problem` makes the problem,
:func:`problem` does both for a list of candidates.

Memory per stage position (the DP checks ``mem_fixed + pos_mem_fixed + mem_per_param x
parameter bytes + inflight x activation bytes <= capacity``): parameter bytes follow the
ZeRO sharding (:func:`nest.cost.pricing.sync_columns`); a 1F1B stage ``k`` of ``p`` keeps
``min(p - k, m)`` micro-batches of activations, an interleaved rank Megatron's warm-up
count plus one, ``min(2 (p - d - 1) + (v - 1) p + 1, m v)`` (Narayanan et al. 2021).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..cost.pricing import Priced, price, sync_weights
from ..cost.scenario import Scenario
from ..dp.problem import DPProblem, DPResult, sync_time
from ..network.placement import to_ps
from ..parallel import Candidate
from ..schedule import pipeline
from ..units import PS
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
    pos_mem_fixed = _interleaved_ends(mem_params, v, owner, device, p)
    rows = {
        "time_ps": to_ps(priced.times.total)[:, take],
        "params": to_ps(sync_weights(scn, table, cands, sync))[:, take],
        "mem_params": mem_params,
        "act_bytes": priced.col("act_bytes")[:, take],
        "send_ps": np.ascontiguousarray(send),
        "mem_fixed": (scn.job.reserved_memory_bytes + table.transient[cands.config]).astype(np.float64),
        "mem_per_param": v.astype(np.float64),
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
        capacity=scn.cluster.device.memory_bytes if capacity is None else capacity)


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
                                               "mem_per_param", "g0", "g1", "micro_batches", "pp", "vp")}
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
