"""Megatron-Core's pipeline orders: the forwards and backwards each pipeline rank runs, in
order (megatron/core/pipeline_parallel/schedules.py at core_v0.14.0:
``get_pp_rank_microbatches``, ``get_schedule_table``, ``convert_schedule_table_to_order``).

A rank runs ``w`` warm-up forwards, then alternates one forward and one backward, then
drains the remaining backwards. Without interleaving ``w = min(p - d - 1, m)``; with
``v`` model chunks ``w = min(2 (p - d - 1) + (v - 1) p, m v)`` (the group of micro-batches
per chunk is ``p``, Megatron's default ``microbatch_group_size_per_vp_stage``), and
virtual micro-batch ``k`` is chunk ``(k mod p v) // p`` of micro-batch
``(k // p v) p + k mod p`` (chunks taken in reverse for the backwards). The compiled
schedule (``cpp/schedule.cpp``) walks the same order.

``extra`` warm-up forwards (0 or 1) are Megatron's combined 1F1B under
``--overlap-moe-expert-parallel-comm``: one more warm-up forward, so that every forward
of the steady state runs together with an independent backward
(``get_pp_rank_microbatches``; with ``p = 1``, ``combined_1f1b_schedule_for_no_pipelining``
runs the first forward alone, then each forward with the previous micro-batch's
backward).
"""

from __future__ import annotations

import numpy as np

from ..parallel import warmup


def device_ops(device: int, pp: int, vp: int, micro_batches: int, extra: int = 0
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``device``'s order as arrays: ``(forward?, chunk, micro-batch)`` per operation
    (chunk ``c`` of device ``d`` is virtual stage ``c p + d``)."""
    if vp > 1 and micro_batches % pp:
        raise ValueError(f"interleaving needs micro-batches ({micro_batches}) divisible by pp ({pp})")
    total = micro_batches * vp
    k = np.arange(total, dtype=np.int64)
    if vp == 1:
        chunk_f = chunk_b = np.zeros(total, dtype=np.int64)
        micro = k
    else:
        chunk_f = (k % (pp * vp)) // pp
        chunk_b = vp - 1 - chunk_f
        micro = (k // (pp * vp)) * pp + k % pp
    w = warmup(device, pp, vp, micro_batches, extra)
    steady = total - w
    # positions: warm-up forwards, (forward, backward) pairs, the drained backwards
    forward = np.concatenate((np.ones(w, bool), np.tile([True, False], steady), np.zeros(w, bool)))
    index = np.concatenate((np.arange(w), np.stack((np.arange(w, total), np.arange(steady)), 1).ravel(),
                            np.arange(steady, total)))
    chunk = np.where(forward, chunk_f[index], chunk_b[index])
    return forward, chunk, micro[index]


def as_tuples(device: int, pp: int, vp: int, micro_batches: int, extra: int = 0) -> list[tuple[str, int, int]]:
    """``device``'s order as ``(F|B, virtual stage, micro-batch)`` tuples."""
    forward, chunk, micro = device_ops(device, pp, vp, micro_batches, extra)
    return [("F" if f else "B", int(c) * pp + device, int(j)) for f, c, j in zip(forward, chunk, micro)]


def one_f_one_b_order(device: int, pp: int, micro_batches: int) -> list[tuple[str, int, int]]:
    """Megatron's non-interleaved 1F1B order on ``device``: ``(F|B, virtual stage, mb)``."""
    return as_tuples(device, pp, 1, micro_batches)


def interleaved_order(device: int, pp: int, vp: int, micro_batches: int) -> list[tuple[str, int, int]]:
    """Megatron's interleaved 1F1B order on ``device`` (``micro_batches % pp == 0``)."""
    return as_tuples(device, pp, vp, micro_batches)
