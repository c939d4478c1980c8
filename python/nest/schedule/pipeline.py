"""Closed forms of the pipeline schedules: what the stage DP minimises for a step.

With ``m`` micro-batches, ``p`` pipeline ranks, ``v`` virtual stages per rank and the
per-micro-batch times ``T_k`` of the (virtual) stages (forward, recompute, backward and
the sends the stage pays), the DP's objective is
``scale x max T + head_scale x H + offset + G(max W)`` with ``H`` the slowest stage before
the last one (:mod:`nest.dp.problem`):

* **1F1B** (``v = 1``): ``(m - 1) max T + sum_k T_k``. The first micro-batch crosses
  every stage forward and back (the ``sum``, fill and drain at each stage's own time) and
  the other ``m - 1`` follow at the pace of the slowest stage (the classic form used by
  Alpa, Zheng et al. OSDI'22, Eq. 2; the event-driven simulator of :mod:`nest.schedule.simulate`
  reproduces it to rounding when ``m >= p``; with ``m < p`` Megatron runs all forwards
  first and the simulated step is shorter). The sum is split-independent: it is the sum
  of the node times plus, per boundary, the forward send of the boundary node and the
  backward send of its gradient on that boundary's tier. The DP uses, per boundary, the
  largest send of any node on its tier: exact when every node's output has the same size
  (every transformer chain nest builds), an upper bound otherwise.
* **Interleaved 1F1B** (``v > 1``): ``m ((v - 1) H + max(H, T_last)) + (p - 1) H`` over
  the ``p v`` virtual stages, ``T_last`` the last one (with the output layer and loss) and
  ``H`` the slowest of the others: the last rank runs ``v - 1`` chunks padded to ``H`` and
  the last chunk per micro-batch, and the fill and drain cross ``p - 1`` chunks at ``H``.
  With equal chunks it is SC'21's ``(m v + p - 1) T`` (Narayanan et al., Sec. 2.2); the
  event-driven simulation reproduces it exactly when the chunks before the last are
  equal (any ``T_last``: the NeMo / Megatron layouts, one or a few layers per chunk and a
  heavier output chunk) and never exceeds it otherwise: padding a chunk cannot shorten a
  fixed-order schedule, and a last chunk lighter than ``H`` shortens the drain by at
  most one ``H``. A rank's exact load is the sum of its own chunks, which are not
  contiguous in the layer chain, so the exact step of arbitrary chunks is not a chain
  DP.
"""

from __future__ import annotations

import numpy as np


def scale_of(micro_batches, vp, pp) -> np.ndarray:
    """The factor of ``max T`` in the closed form (int64, elementwise)."""
    m, v, p = (np.asarray(x, dtype=np.int64) for x in (micro_batches, vp, pp))
    return np.where(v == 1, m - 1, m).astype(np.int64)


def head_scale_of(micro_batches, vp, pp) -> np.ndarray:
    """The factor of ``H``, the slowest stage before the last one (int64, elementwise)."""
    m, v, p = (np.asarray(x, dtype=np.int64) for x in (micro_batches, vp, pp))
    return np.where(v == 1, 0, m * (v - 1) + p - 1).astype(np.int64)


def pipeline_ps(scale, head_scale, offset, stage_times) -> int:
    """The closed form of one candidate split into stages taking ``stage_times`` (ps)."""
    times = [int(t) for t in stage_times]
    head = max(times[:-1], default=0)
    return int(scale) * max(times) + int(head_scale) * head + int(offset)


def boundary_send_sum(send_ps: np.ndarray, pos_tier: np.ndarray, pos_offset: np.ndarray) -> np.ndarray:
    """Per candidate: ``sum`` over its stage boundaries of the largest send of any node
    but the last on the boundary's tier (``send_ps[n, tier, node]``, one row per candidate)."""
    n = len(pos_offset) - 1
    positions = np.diff(pos_offset)
    owner = np.repeat(np.arange(n), positions)
    boundary = pos_tier >= 0
    if send_ps.shape[2] > 1:
        largest = send_ps[:, :, :-1].max(axis=2)
    else:
        largest = np.zeros(send_ps.shape[:2], dtype=np.int64)
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, owner[boundary], largest[owner[boundary], pos_tier[boundary]])
    return out


def offset_of(rows: dict, vp) -> np.ndarray:
    """The split-independent term of each candidate's closed form (picoseconds): for 1F1B
    the sum of its node times plus both sends of every boundary, else 0.

    ``rows`` are per-candidate DP tables (:meth:`nest.search.problems.dp_rows`).
    """
    v = np.asarray(vp, dtype=np.int64)
    sends = boundary_send_sum(rows["send_ps"], rows["pos_tier"], rows["pos_offset"])
    return np.where(v == 1, rows["time_ps"].sum(axis=1) + 2 * sends, 0).astype(np.int64)


def with_schedule(rows: dict, micro_batches, vp) -> dict:
    """``rows`` with the closed form's ``scale``, ``head_scale`` and ``offset`` of every
    candidate, and its ``micro_batches``, ``pp`` and ``vp``."""
    positions = np.diff(rows["pos_offset"])
    pp = positions // np.asarray(vp, dtype=np.int64)
    out = dict(rows)
    out["scale"] = scale_of(micro_batches, vp, pp)
    out["head_scale"] = head_scale_of(micro_batches, vp, pp)
    out["offset"] = offset_of(rows, vp)
    out["micro_batches"] = np.asarray(micro_batches, dtype=np.int64)
    out["pp"] = pp
    out["vp"] = np.asarray(vp, dtype=np.int64)
    return out


def stage_floor(scale, head_scale, positions, stage_sum, stage_max) -> np.ndarray:
    """A lower bound on ``scale x max T + head_scale x H`` over the splits into
    ``positions`` stages whose times add up to at least ``stage_sum``, one of them at
    least ``stage_max``.

    With ``c = ceil(stage_sum / positions)``: either ``H >= c`` (the bound is
    ``(scale + head_scale) c``) or ``H <= c - 1`` and the last stage takes the rest, at
    least ``stage_sum - (positions - 1) H``; the objective then falls with ``H`` when
    ``head_scale <= scale (positions - 1)`` (every schedule of :func:`head_scale_of`), so
    ``H = c - 1`` bounds it. The slowest stage is at least ``stage_max`` either way.
    """
    a, b, n = (np.asarray(x, dtype=np.int64) for x in (head_scale, scale, positions))
    total, largest = np.asarray(stage_sum, dtype=np.int64), np.asarray(stage_max, dtype=np.int64)
    c = -(-total // n)
    below = np.maximum(c - 1, 0)
    split_last = a * below + b * np.maximum(total - (n - 1) * below, below)
    mean = np.where((a > 0) & (n > 1), np.minimum((a + b) * c, split_last), b * c)
    return np.maximum(mean, b * largest)


def time_bound(micro_batches, vp, pp, t_sum, stage_sum, stage_max, send_floor) -> np.ndarray:
    """A lower bound on ``scale x max T + head_scale x H + offset`` from lower bounds
    ``t_sum`` on the sum of node times, ``stage_sum`` on the sum of the stage times,
    ``stage_max`` on the slowest stage and ``send_floor`` on any send."""
    m, v, p = (np.asarray(x, dtype=np.int64) for x in (micro_batches, vp, pp))
    fill = np.where(v == 1, np.asarray(t_sum, dtype=np.int64) + 2 * (p - 1) * np.asarray(send_floor, dtype=np.int64), 0)
    return stage_floor(scale_of(m, v, p), head_scale_of(m, v, p), p * v, stage_sum, stage_max) + fill


def schedule_floor(micro_batches, pp, stage_sum, stage_max, sync_mean=0, rounding=0) -> np.ndarray:
    """A lower bound on the exact step (:mod:`nest.schedule.step`) of any split whose stage
    times add up to at least ``stage_sum``, one of them at least ``stage_max``, with
    ``sync_mean`` at most the ranks' mean end-of-step sync and optimizer step.

    Every rank runs its own chunks ``m`` times and syncs its own parameters, so the last
    rank to pass the barrier has done at least the mean of that work, and the step ends
    no earlier (``m x stage_sum / p + sync_mean``); the rank of the slowest stage runs it
    ``m`` times; the first micro-batch crosses every stage forward and back in turn
    (``stage_sum``). The schedule runs on unrounded seconds while these sums add times
    rounded to picoseconds: ``rounding`` picoseconds come off for that.
    """
    m, p = (np.asarray(x, dtype=np.int64) for x in (micro_batches, pp))
    total, largest = np.asarray(stage_sum, dtype=np.int64), np.asarray(stage_max, dtype=np.int64)
    mean = -(-(m * total) // p) + np.asarray(sync_mean, dtype=np.int64)
    floor = np.maximum(np.maximum(mean, total), m * largest) - np.asarray(rounding, dtype=np.int64)
    return np.maximum(floor, 0)


def rounding_ps(micro_batches, vp, nodes, positions) -> np.ndarray:
    """Picoseconds by which the sums of :func:`schedule_floor` may exceed the schedule's
    own: half a picosecond per node time, send and synchronised node, per micro-batch."""
    m, v, n, P = (np.asarray(x, dtype=np.int64) for x in (micro_batches, vp, nodes, positions))
    return (m + v) * (n + 2 * P) + 1
