"""The tasks of one training step of a candidate, per virtual stage and per pipeline rank.

* **Pipeline tasks.** Per virtual stage ``q`` (nodes ``[s_q, e_q)`` of the layer chain)
  and micro-batch: a forward; with recomputation a recompute just before the backward; a
  backward. Their durations are the sums over the stage's nodes of the kernel times and
  the exposed collectives of :func:`nest.cost.pricing.kind_times` (tensor, context and
  expert parallel, ZeRO-2/3 traffic), apportioned to the pass that issues them: a block's
  tensor- and expert-parallel collectives are one per pass (forward, backward, and the
  share its recomputation repeats: all of them for a full recomputation, a dense MLP's
  pair or a MoE layer's all-to-alls for module recomputation), ring attention's forward excess and ZeRO-3's forward gather excess go to
  the forward, the rest to the backward. After its forward a stage sends the output of
  its last node to the next stage, after its backward the gradient of its input to the
  previous one, on the boundary the pair of pipeline ranks crosses
  (:meth:`nest.network.placement.Placer.boundary_seconds`); the sender pays.
* **End of step** (:meth:`BatchTasks.end_tasks`). When a rank has finished its last
  pipeline task it reduces the gradients of the parameters it holds (the sum over its
  ``v`` chunks) over its data (and expert-data) parallel groups; the optimizer step waits
  for every rank (Megatron's global gradient-norm all-reduce for clipping is a barrier,
  priced at zero), then the updated weights are gathered. ZeRO-0: all-reduce | step;
  ZeRO-1: reduce-scatter | step, all-gather; ZeRO-2 (gradients reduced during the
  backward): | step, all-gather; ZeRO-3: | step. Overlapped collectives count by their
  exposed part (:func:`nest.cost.pricing.sync_exposed`).

DP replicas and the tensor/context/expert ranks of a stage run identical timelines, so
one pipeline (one rank per stage) describes the step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..cost.pricing import Priced, optimizer_launch_s, price_candidate, sync_parts
from ..cost.scenario import Scenario
from ..parallel import RECOMPUTE_MODES, Candidate

FORWARD, RECOMPUTE, BACKWARD = "forward", "recompute", "backward"
SEND_FORWARD, SEND_BACKWARD = "send-forward", "send-backward"
COMPUTE_KINDS = (FORWARD, RECOMPUTE, BACKWARD)
SEND_KINDS = (SEND_FORWARD, SEND_BACKWARD)
BARRIER = "barrier"


@dataclass(frozen=True)
class StageTasks:
    """Per-micro-batch task durations (seconds) of one virtual stage.

    ``*_comm_s`` is the part of a task's duration spent in exposed collectives (tensor,
    context, expert parallel, ZeRO), shown as communication on timelines. ``send_*`` are
    the point-to-point transfers the stage pays after its forward (to the next stage)
    and its backward (to the previous one); ``*_tier`` is the network tier they cross.
    """

    forward_s: float
    backward_s: float
    recompute_s: float = 0.0
    send_forward_s: float = 0.0
    send_backward_s: float = 0.0
    forward_comm_s: float = 0.0
    backward_comm_s: float = 0.0
    recompute_comm_s: float = 0.0
    send_forward_tier: int = -1
    send_backward_tier: int = -1
    nodes: tuple[int, int] = (0, 0)

    @property
    def time_s(self) -> float:
        """Per-micro-batch time including both sends (the DP's stage time)."""
        return (self.forward_s + self.recompute_s + self.backward_s + self.send_forward_s
                + self.send_backward_s)


@dataclass(frozen=True)
class EndTask:
    """A task a pipeline rank runs after its last backward (sync or optimizer).

    A task of kind ``"barrier"`` (no duration) makes the tasks after it wait until every
    rank has finished the tasks before it.
    """

    kind: str  # "all-reduce", "reduce-scatter", "all-gather", "optimizer", "barrier"
    seconds: float
    comm: bool


def run_end_tasks(finish: Sequence[float], end_tasks: Sequence[Sequence[EndTask]] | None
                  ) -> list[list[tuple[EndTask, float]]]:
    """Per pipeline rank, its end-of-step tasks with their start times, given when each
    rank finished its pipeline tasks (``finish``): tasks run back to back, a barrier
    waits for every rank, tasks without duration are dropped."""
    pp = len(finish)
    free = list(finish)
    runs: list[list[tuple[EndTask, float]]] = [[] for _ in range(pp)]
    phases = [_phases(end_tasks[d]) if end_tasks is not None else [[]] for d in range(pp)]
    for phase in range(max(len(p) for p in phases)):
        if phase:  # a barrier: every rank has finished the previous phase
            free = [max(free)] * pp
        for d in range(pp):
            for task in (phases[d][phase] if phase < len(phases[d]) else ()):
                if task.seconds > 0:
                    runs[d].append((task, free[d]))
                    free[d] += task.seconds
    return runs


def _phases(tasks: Sequence[EndTask]) -> list[list[EndTask]]:
    """End-of-step tasks split at barriers."""
    phases: list[list[EndTask]] = [[]]
    for task in tasks:
        if task.kind == BARRIER:
            phases.append([])
        else:
            phases[-1].append(task)
    return phases


# -- tasks of a plan --------------------------------------------------------------------

STAGE_COLUMNS = ("forward_s", "recompute_s", "backward_s", "forward_comm_s", "recompute_comm_s",
                 "backward_comm_s", "send_forward_s", "send_backward_s")
"""The :class:`StageTasks` durations :meth:`BatchTasks.stage_columns` gives."""


def kind_tasks(priced: Priced) -> np.ndarray:
    """``[candidate, kind, 7]``: per node kind its forward, recompute and backward seconds,
    the exposed-collective part of each, and the bytes of its output."""
    t = priced.times
    col = priced.col
    # a full recomputation repeats the forward's ring attention (only blocks have one)
    split = (priced.table.arrays.recompute[priced.cands.config] == RECOMPUTE_MODES.index("full"))[:, None]
    # the recomputation's share of the node's collectives (recompute_*_share), the rest
    # split evenly between the forward and the backward
    tp_share, ep_share = col("recompute_tp_share"), col("recompute_ep_share")
    recomputed = t.tp * tp_share + t.ep * ep_share
    cp_forward, z_forward = t.cp_forward, t.dp_forward  # parts of t.cp and t.dp (kind_times)
    z_recompute = np.minimum(t.dp_recompute, np.maximum(0.0, t.dp - z_forward))
    f_comm = (t.tp + t.ep - recomputed) / 2 + np.where(split, cp_forward / 2, cp_forward) + z_forward
    r_comm = np.where(col("recompute_s") > 0, recomputed + np.where(split, cp_forward / 2, 0.0) + z_recompute, 0.0)
    f = col("fwd_s") + f_comm + (0.0 if t.offload_forward is None else t.offload_forward)
    r = col("recompute_s") + r_comm
    b = t.total - f - r  # everything else belongs to the backward
    return np.stack(np.broadcast_arrays(f, r, b, f_comm, r_comm, b - col("bwd_s"),
                                        col("out_bytes").astype(np.float64)), axis=2)


@dataclass
class BatchTasks:
    """The per-kind tasks of a priced batch of candidates: ``node[candidate, kind]`` as
    :func:`kind_tasks`, ``sync[candidate, kind]`` as :func:`nest.cost.pricing.sync_parts`.
    Candidate ``n`` with virtual stages of ``layers`` nodes each is then a matter of sums."""

    priced: Priced
    node: np.ndarray
    sync: np.ndarray

    @staticmethod
    def of(priced: Priced) -> "BatchTasks":
        """The tasks of every candidate of ``priced``."""
        return BatchTasks(priced, kind_tasks(priced), sync_parts(priced.scn, priced.table, priced.cands,
                                                                 priced.sync))

    @staticmethod
    def of_candidate(scn: Scenario, cand: Candidate) -> "BatchTasks":
        """The tasks of one candidate (row 0)."""
        return BatchTasks.of(price_candidate(scn, cand))

    def stage_columns(self, n: int, layers_per_stage: Sequence[int]) -> dict[str, np.ndarray]:
        """The per-micro-batch task durations of every virtual stage of candidate ``n`` split
        as given, one array per :data:`STAGE_COLUMNS` field (and ``starts``, ``ends``: each
        stage's nodes)."""
        scn = self.priced.scn
        node = self.node[n][scn.kind_index]
        ends = np.cumsum(np.asarray(layers_per_stage, dtype=np.int64))
        starts = np.concatenate(([0], ends[:-1])).astype(np.int64)
        sums = np.add.reduceat(node[:, :6], starts, axis=0)
        n_virtual, pp = len(ends), int(self.priced.cands.pp[n])
        # boundary q (after stage q's last node) is crossed forward by q, backward by q + 1
        sends = scn.placer.boundary_seconds(self.priced.places[n], np.arange(n_virtual - 1) % pp,
                                            node[ends[:-1] - 1, 6])
        send_forward, send_backward = np.concatenate((sends, [0.0])), np.concatenate(([0.0], sends))
        out = {name: sums[:, i] for i, name in enumerate(STAGE_COLUMNS[:6])}
        out["backward_comm_s"] = np.maximum(0.0, out["backward_comm_s"])
        out.update(send_forward_s=send_forward, send_backward_s=send_backward, starts=starts, ends=ends)
        return out

    def stage_tasks(self, n: int, layers_per_stage: Sequence[int]) -> list[StageTasks]:
        """The per-micro-batch tasks of every virtual stage of candidate ``n``."""
        cols = self.stage_columns(n, layers_per_stage)
        tiers = self.priced.places[n].boundary_tiers
        pp = int(self.priced.cands.pp[n])
        n_virtual = len(cols["ends"])
        return [StageTasks(**{name: float(cols[name][q]) for name in STAGE_COLUMNS},
                           send_forward_tier=int(tiers[q % pp]) if q < n_virtual - 1 else -1,
                           send_backward_tier=int(tiers[(q - 1) % pp]) if q > 0 else -1,
                           nodes=(int(cols["starts"][q]), int(cols["ends"][q])))
                for q in range(n_virtual)]

    def end_tasks(self, n: int, layers_per_stage: Sequence[int], sync: str = "device") -> list[list[EndTask]]:
        """Per pipeline rank of candidate ``n``: gradient sync and optimizer step for the
        parameters it holds. ``sync="heaviest"`` charges every rank ``v x`` the virtual
        stage with the heaviest sync instead (the closed form's convention, conservative
        when ``v > 1``)."""
        scn, cands = self.priced.scn, self.priced.cands
        pp, vp, zero = int(cands.pp[n]), int(cands.vp[n]), int(cands.zero[n])
        ends = np.cumsum(np.asarray(layers_per_stage, dtype=np.int64))
        starts = np.concatenate(([0], ends[:-1])).astype(np.int64)
        chunks = np.add.reduceat(self.sync[n][scn.kind_index], starts, axis=0)  # reduce, gather, optimizer
        # rank d's chunks are rows d, d + pp, ...: summed in that order, as chunks[d::pp] would be
        per_rank = chunks.reshape(-1, pp, chunks.shape[1]).sum(axis=0).tolist()
        if sync == "heaviest":
            heaviest = chunks[int(np.argmax(chunks.sum(axis=1)))]
            per_rank = [[vp * float(x) for x in heaviest] for _ in range(pp)]
        elif sync != "device":
            raise ValueError(f"sync = {sync!r}: must be 'device' or 'heaviest'")
        launch = optimizer_launch_s(scn)
        alpha = float(self.priced.sync["fixed_s"][n]) - launch  # latency terms of the collectives
        out = []
        barrier = EndTask(BARRIER, 0.0, False)
        for reduce, gather, optimizer in per_rank:
            step = launch + optimizer
            if zero == 0:
                tasks = [EndTask("all-reduce", alpha + reduce, True), barrier, EndTask("optimizer", step, False)]
            elif zero == 1:
                tasks = [EndTask("reduce-scatter", alpha / 2 + reduce, True), barrier,
                         EndTask("optimizer", step, False), EndTask("all-gather", alpha / 2 + gather, True)]
            elif zero == 2:
                tasks = [barrier, EndTask("optimizer", step, False), EndTask("all-gather", alpha + gather, True)]
            else:
                tasks = [EndTask("sync", alpha, True), barrier, EndTask("optimizer", step, False)]
            out.append(tasks)
        return out
