"""An event-driven simulation of one training step of a plan.

The stage DP prices a step with a closed form (:mod:`nest.pipeline`): 1F1B ``(m - 1) x
slowest stage + sum of the stage times``, interleaved ``m ((v - 1) H + max(H, T_last)) +
(p - 1) H`` (``H`` the slowest virtual stage before the last one), plus the exposed DP
sync and optimizer step of the heaviest stage. This module checks it along an
independent path: it builds the tasks of one step and lets them run on their devices and
links in the order Megatron-LM issues them.

* **Tasks.** Per virtual stage ``q`` (nodes ``[s_q, e_q)`` of the layer chain) and
  micro-batch ``j``: a forward ``F(q, j)``; with recomputation a recompute ``R(q, j)``
  just before the backward; a backward ``B(q, j)``. Their durations are the sums over the
  stage's nodes of :meth:`~nest.tables.Scenario.kind_costs` (kernel times) plus the
  exposed collectives of :meth:`~nest.tables.Scenario.kind_times` (tensor, context and
  expert parallel, ZeRO-2/3 traffic), apportioned to the pass that issues them: a block's
  tensor- and expert-parallel collectives are one per pass (forward, recompute,
  backward), ring attention's forward excess and ZeRO-3's forward gather excess go to
  the forward, the rest to the backward.
* **Point-to-point transfers.** After ``F(q, j)`` the device sends the output of node
  ``e_q - 1`` to virtual stage ``q + 1``, after ``B(q, j)`` the gradient of its input
  (the output of node ``s_q - 1``) to ``q - 1``; each is priced with
  :meth:`~nest.tables.Scenario.boundary_seconds` on the tier that the pair of pipeline
  ranks crosses (on a graph: with all the boundary's rank pairs at once)
  (:attr:`~nest.tables.Placement.boundary_tiers`, worst rank of the stage) and occupies
  both the sender (the sender pays, as in the cost model) and the directed link; the
  receiver may start the dependent task when the transfer ends. Sends are buffered (no
  rendezvous with the receiver).
* **Schedules.** Each pipeline rank executes its tasks strictly in Megatron-LM's order:
  1F1B (``forward_backward_pipelining_without_interleaving``: ``min(p - d - 1, m)``
  warm-up forwards, then one forward / one backward, then the cool-down backwards) or
  interleaved 1F1B (``..._with_interleaving``: ``2 (p - d - 1) + (v - 1) p`` warm-up
  forwards, chunks taken in groups of ``p`` micro-batches, backward chunks in reverse, all
  forwards first when ``m = p``). A task starts as soon as its device is free and its
  input has arrived.
* **End of step.** When a rank has finished its last pipeline task it reduces the
  gradients of the parameters it holds (the sum over its ``v`` chunks) over its data
  (and expert-data) parallel groups; the optimizer step waits for every rank (Megatron's
  global gradient-norm all-reduce for clipping is a barrier, priced at zero), then the
  updated weights are gathered. ZeRO-0: all-reduce | step; ZeRO-1: reduce-scatter |
  step, all-gather; ZeRO-2 (gradients reduced during the backward): | step,
  all-gather; ZeRO-3: | step. Their prices are those of
  :meth:`~nest.tables.Scenario.sync_terms` (the overlap the cost model assumes: none
  with the pipeline). The step ends when the last rank is done.

DP replicas and the tensor/context/expert ranks of a stage run identical timelines, so
one pipeline (one rank per stage) is simulated.

How the result relates to the closed form. 1F1B: when the slowest stage is the last one
and ``m >= p`` the simulated pipeline takes exactly ``(m - 1) T_max + sum T`` (stages that
split their time between forward and backward alike); an earlier bottleneck overlaps part
of the fill and drain, so the simulation is faster (nest's own plans on the presets: within
1.5%), and with ``m < p`` Megatron runs all forwards first (faster still). Interleaved:
when every virtual stage before the last has the same per-micro-batch time ``H`` the
pipeline takes exactly ``m ((v - 1) H + max(H, T_last)) + (p - 1) H`` for a last stage at
least as slow (:func:`pad_to_closed_form` reproduces it to rounding); otherwise the
simulation is faster, because a rank's steady-state load is the sum of its own chunks,
not ``v - 1`` times the slowest chunk, and the fill and drain cost the other stages' own
times -- the exact form is not a chain DP. The end-of-step sync of a rank covers its own
chunks (the closed form: ``v x`` the heaviest) and starts when that rank is done. Stages that
split forward and backward very differently can make either schedule slower than the
closed form (not the case for transformer plans).

How it relates to nest's step time. nest prices a plan's split exactly
(:mod:`nest.schedule`): the same tasks, run in the compiled core by a readiness sweep
over dense arrays instead of events. The two agree to rounding on every plan
(``SimResult.relative_difference``); the closed form's gap is
``SimResult.closed_form_difference``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from .model import BLOCK, MOE
from .tables import OPTIMIZER_KERNELS, Candidate, Scenario

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


@dataclass(frozen=True)
class Event:
    """One simulated task on one pipeline rank."""

    device: int  # pipeline rank
    kind: str  # forward, recompute, backward, send-forward, send-backward, or an EndTask kind
    start_s: float
    end_s: float
    stage: int = -1  # virtual stage (-1 for end-of-step tasks)
    micro_batch: int = -1
    comm_s: float = 0.0  # exposed collective time inside a compute task; all of a comm task
    tier: int = -1  # network tier of a send
    peer: int = -1  # receiving pipeline rank of a send

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def is_comm(self) -> bool:
        return self.kind in SEND_KINDS or (self.kind not in COMPUTE_KINDS and self.comm_s > 0)

    def to_dict(self) -> dict:
        return {"device": self.device, "kind": self.kind, "start_s": self.start_s,
                "end_s": self.end_s, "stage": self.stage, "micro_batch": self.micro_batch,
                "comm_s": self.comm_s, "tier": self.tier, "peer": self.peer}


@dataclass(frozen=True)
class SimResult:
    """The simulated step: its time, and every task on every pipeline rank."""

    step_time_s: float
    pipeline_time_s: float  # last pipeline task (before the end-of-step sync)
    schedule: str  # "1f1b" or "interleaved-1f1b"
    pp: int
    vp: int
    micro_batches: int
    stages: tuple[StageTasks, ...]  # per virtual stage
    timelines: tuple[tuple[Event, ...], ...]  # per pipeline rank, in time order
    closed_form_s: float | None = None  # the DP's closed-form objective, when known
    labels: tuple[str, ...] = field(default=())  # row labels for plots
    predicted_s: float | None = None  # the plan's step time (nest.schedule), when known

    @property
    def events(self) -> list[Event]:
        return [e for row in self.timelines for e in row]

    @property
    def sync_time_s(self) -> float:
        return self.step_time_s - self.pipeline_time_s

    @property
    def relative_difference(self) -> float | None:
        """``(plan's step time - simulated) / simulated``."""
        if self.predicted_s is None:
            return None
        return (self.predicted_s - self.step_time_s) / self.step_time_s

    @property
    def closed_form_difference(self) -> float | None:
        """``(closed form - simulated) / simulated`` (positive: the closed form is conservative)."""
        if self.closed_form_s is None:
            return None
        return (self.closed_form_s - self.step_time_s) / self.step_time_s

    def busy_s(self, device: int) -> float:
        """Seconds rank ``device`` is busy (tasks, sends, sync, optimizer)."""
        return sum(e.duration_s for e in self.timelines[device])

    def to_dict(self, events: bool = False) -> dict:
        out = {"step_time_s": self.step_time_s, "pipeline_time_s": self.pipeline_time_s,
               "sync_time_s": self.sync_time_s, "predicted_step_time_s": self.predicted_s,
               "relative_difference": self.relative_difference,
               "closed_form_step_time_s": self.closed_form_s,
               "closed_form_relative_difference": self.closed_form_difference, "schedule": self.schedule,
               "pp": self.pp, "vp": self.vp, "num_microbatches": self.micro_batches,
               "stage_times_s": [s.time_s for s in self.stages],
               "device_end_s": [row[-1].end_s if row else 0.0 for row in self.timelines]}
        if events:
            out["events"] = [e.to_dict() for e in self.events]
        return out


# -- schedules --------------------------------------------------------------------------


def one_f_one_b_order(device: int, pp: int, micro_batches: int) -> list[tuple[str, int, int]]:
    """Megatron's non-interleaved 1F1B order on ``device``: ``(F|B, virtual stage, mb)``."""
    warmup = min(pp - device - 1, micro_batches)
    ops = [("F", device, j) for j in range(warmup)]
    for i in range(micro_batches - warmup):
        ops.append(("F", device, warmup + i))
        ops.append(("B", device, i))
    ops += [("B", device, j) for j in range(micro_batches - warmup, micro_batches)]
    return ops


def interleaved_order(device: int, pp: int, vp: int, micro_batches: int) -> list[tuple[str, int, int]]:
    """Megatron's interleaved 1F1B order on ``device`` (``micro_batches % pp == 0``).

    Virtual micro-batch ``k`` is chunk ``(k mod p v) // p`` (reversed for backwards) of
    micro-batch ``(k // p v) p + k mod p``; chunk ``c`` of device ``d`` is virtual stage
    ``c p + d``.
    """
    if micro_batches % pp:
        raise ValueError(f"interleaving needs micro-batches ({micro_batches}) divisible by pp ({pp})")
    total = micro_batches * vp

    def op(kind: str, k: int) -> tuple[str, int, int]:
        chunk = (k % (pp * vp)) // pp
        if kind == "B":
            chunk = vp - 1 - chunk
        return kind, chunk * pp + device, (k // (pp * vp)) * pp + k % pp

    if micro_batches == pp:
        warmup = total
    else:
        warmup = min((pp - device - 1) * 2 + (vp - 1) * pp, total)
    ops = [op("F", k) for k in range(warmup)]
    for k in range(total - warmup):
        ops.append(op("F", k + warmup))
        ops.append(op("B", k))
    ops += [op("B", k) for k in range(total - warmup, total)]
    return ops


# -- the event simulation ---------------------------------------------------------------


def simulate_schedule(stages: Sequence[StageTasks], pp: int, micro_batches: int,
                      end_tasks: Sequence[Sequence[EndTask]] | None = None,
                      closed_form_s: float | None = None) -> SimResult:
    """Run one step of the pipeline ``stages`` (``pp x vp`` virtual stages, virtual stage
    ``q`` on rank ``q mod pp``) for ``micro_batches`` micro-batches.

    ``end_tasks[d]`` run on rank ``d`` after its last pipeline task. Raises ValueError
    on inconsistent sizes (or a deadlocked order, which would be a bug).
    """
    n_virtual = len(stages)
    if pp < 1 or n_virtual % pp or micro_batches < 1:
        raise ValueError(f"{n_virtual} virtual stages, pp = {pp}, {micro_batches} micro-batches")
    vp = n_virtual // pp
    orders = [one_f_one_b_order(d, pp, micro_batches) if vp == 1
              else interleaved_order(d, pp, vp, micro_batches) for d in range(pp)]
    arrival = {}  # ("F"|"B", q, j) -> time the task's output is available to its consumer
    done = {}  # ("F"|"B", q, j) -> end of the compute task
    free = [0.0] * pp  # device
    link_free: dict[tuple[int, int], float] = {}  # directed link between pipeline ranks
    position = [0] * pp
    timelines: list[list[Event]] = [[] for _ in range(pp)]

    def ready_time(kind: str, q: int, j: int) -> float | None:
        if kind == "F":
            return 0.0 if q == 0 else arrival.get(("F", q - 1, j))
        forward = done.get(("F", q, j))
        if forward is None:
            return None
        if q == n_virtual - 1:
            return forward
        grad = arrival.get(("B", q + 1, j))
        return None if grad is None else max(grad, forward)

    def send(device: int, q: int, j: int, kind: str, start: float) -> float:
        s = stages[q]
        if kind == "F":
            seconds, target, tier, name = s.send_forward_s, q + 1, s.send_forward_tier, SEND_FORWARD
        else:
            seconds, target, tier, name = s.send_backward_s, q - 1, s.send_backward_tier, SEND_BACKWARD
        peer = target % pp
        link = (device, peer)
        begin = max(start, link_free.get(link, 0.0))
        end = begin + seconds
        link_free[link] = end
        if seconds > 0:
            timelines[device].append(Event(device, name, begin, end, q, j, seconds, tier, peer))
        return end

    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for d in range(pp):
            while position[d] < len(orders[d]):
                kind, q, j = orders[d][position[d]]
                ready = ready_time(kind, q, j)
                if ready is None:
                    break
                s = stages[q]
                t = max(free[d], ready)
                if kind == "F":
                    end = t + s.forward_s
                    timelines[d].append(Event(d, FORWARD, t, end, q, j, s.forward_comm_s))
                    done[("F", q, j)] = end
                    if q < n_virtual - 1:
                        end = send(d, q, j, "F", end)
                    arrival[("F", q, j)] = end
                else:
                    if s.recompute_s > 0:
                        timelines[d].append(Event(d, RECOMPUTE, t, t + s.recompute_s, q, j,
                                                  s.recompute_comm_s))
                        t += s.recompute_s
                    end = t + s.backward_s
                    timelines[d].append(Event(d, BACKWARD, t, end, q, j, s.backward_comm_s))
                    done[("B", q, j)] = end
                    if q > 0:
                        end = send(d, q, j, "B", end)
                    arrival[("B", q, j)] = end
                free[d] = end
                position[d] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise ValueError("the pipeline schedule deadlocked (inconsistent task order)")

    pipeline_end = max(free)
    for d, runs in enumerate(run_end_tasks(free, end_tasks)):
        for task, start in runs:
            timelines[d].append(Event(d, task.kind, start, start + task.seconds,
                                      comm_s=task.seconds if task.comm else 0.0))
            free[d] = start + task.seconds
    rows = tuple(tuple(sorted(row, key=lambda e: (e.start_s, e.end_s))) for row in timelines)
    return SimResult(step_time_s=max(free), pipeline_time_s=pipeline_end,
                     schedule="1f1b" if vp == 1 else "interleaved-1f1b", pp=pp, vp=vp,
                     micro_batches=micro_batches, stages=tuple(stages), timelines=rows,
                     closed_form_s=closed_form_s)


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


def stage_columns(scn: Scenario, cand: Candidate, layers_per_stage: Sequence[int]) -> dict[str, np.ndarray]:
    """The per-micro-batch task durations of every virtual stage of ``cand`` split as
    given, one array per :class:`StageTasks` field of :data:`STAGE_COLUMNS` (and
    ``starts``, ``ends``: each stage's nodes)."""
    per_kind = _kind_tasks(scn, cand)
    node = np.array([per_kind[k] for k in scn.kind_list], dtype=np.float64)[scn.kind_index]
    ends = np.cumsum(np.asarray(layers_per_stage, dtype=np.int64))
    starts = np.concatenate(([0], ends[:-1])).astype(np.int64)
    sums = np.add.reduceat(node[:, :6], starts, axis=0)
    n_virtual, pp = len(ends), cand.pp
    # boundary q (after stage q's last node) is crossed forward by q, backward by q + 1
    sends = scn.boundary_seconds_array(cand, np.arange(n_virtual - 1) % pp, node[ends[:-1] - 1, 6])
    send_forward, send_backward = np.append(sends, 0.0), np.insert(sends, 0, 0.0)
    out = {name: sums[:, i] for i, name in enumerate(STAGE_COLUMNS[:6])}
    out["backward_comm_s"] = np.maximum(0.0, out["backward_comm_s"])
    out.update(send_forward_s=send_forward, send_backward_s=send_backward, starts=starts, ends=ends)
    return out


def stage_tasks(scn: Scenario, cand: Candidate, layers_per_stage: Sequence[int]) -> list[StageTasks]:
    """The per-micro-batch tasks of every virtual stage of ``cand`` split as given."""
    cols = stage_columns(scn, cand, layers_per_stage)
    tiers = scn.placement(cand).boundary_tiers
    n_virtual = len(cols["ends"])
    return [StageTasks(**{name: float(cols[name][q]) for name in STAGE_COLUMNS},
                       send_forward_tier=int(tiers[q % cand.pp]) if q < n_virtual - 1 else -1,
                       send_backward_tier=int(tiers[(q - 1) % cand.pp]) if q > 0 else -1,
                       nodes=(int(cols["starts"][q]), int(cols["ends"][q])))
            for q in range(n_virtual)]


def _kind_tasks(scn: Scenario, cand: Candidate) -> dict[str, tuple]:
    """Per node kind: forward, recompute, backward seconds, the collective parts of each,
    and the bytes of the node's output."""
    cfg = cand.cfg
    costs, times = scn.kind_costs(cfg), scn.kind_times(cand)
    place = scn.placement(cand)
    full = cfg.recompute == "full"
    per_kind = {}
    for kind, cost in costs.items():
        t = times[kind]
        block = kind in (BLOCK, MOE)
        passes = 3 if (full and block) else 2
        collective = t.tp_comm + t.ep_comm  # one share per pass
        cp_fwd = _cp_forward_excess(scn, cand, cost, place) if cfg.cp > 1 else 0.0
        cp_fwd = min(cp_fwd, t.cp_comm)
        z_fwd, z_rec = _zero3_gather_excess(scn, cand, cost, place)
        z_fwd, z_rec = min(z_fwd, t.dp_comm), min(z_rec, max(0.0, t.dp_comm - z_fwd))
        split = full and block  # a full recomputation repeats the forward's collectives
        f_comm = collective / passes + (cp_fwd / 2 if split else cp_fwd) + z_fwd
        r_comm = 0.0
        if cost.recompute_s > 0:
            r_comm = (collective / passes + cp_fwd / 2 if split else 0.0) + z_rec
        f = cost.fwd_s + f_comm
        r = cost.recompute_s + r_comm
        b = t.total - f - r  # everything else belongs to the backward
        per_kind[kind] = (f, r, b, f_comm, r_comm, b - cost.bwd_s, cost.out_bytes)
    return per_kind


def _cp_forward_excess(scn, cand, cost, place) -> float:
    """Exposed ring-attention time of the forward pass(es) (the cost model's formula)."""
    steps = cand.cfg.cp - 1
    if cost.cp_steps_fwd == 0:
        return 0.0
    lat, per_byte = place.cp_ring
    passes = cost.cp_steps_fwd / steps
    return max(0.0, cost.cp_steps_fwd * (lat + per_byte * cost.cp_fwd_bytes) - passes * cost.core_fwd_s)


def _zero3_gather_excess(scn, cand, cost, place) -> tuple[float, float]:
    """ZeRO-3 weight gathers not hidden behind the forward and the recompute."""
    if cand.zero != 3:
        return 0.0, 0.0
    gather = (place.dense_dp.all_gather(scn.weight_bytes * cost.params_dense)
              + place.expert_dp.all_gather(scn.weight_bytes * cost.params_expert))
    fwd = max(0.0, gather - cost.fwd_s)
    rec = max(0.0, gather - cost.recompute_s) if cand.cfg.recompute == "full" else 0.0
    return fwd, rec


def _padded(stage: StageTasks, slowest: StageTasks) -> StageTasks:
    """``stage`` as slow as ``slowest``: its forward plus forward send, and its recompute,
    backward plus backward send, become those of ``slowest`` (its own sends are kept and
    its compute absorbs the difference)."""
    forward_side = slowest.forward_s + slowest.send_forward_s
    backward_side = slowest.recompute_s + slowest.backward_s + slowest.send_backward_s
    return replace(stage, forward_s=max(0.0, forward_side - stage.send_forward_s),
                   recompute_s=slowest.recompute_s,
                   backward_s=max(0.0, backward_side - slowest.recompute_s - stage.send_backward_s),
                   forward_comm_s=slowest.forward_comm_s, recompute_comm_s=slowest.recompute_comm_s,
                   backward_comm_s=slowest.backward_comm_s)


def pad_to_closed_form(stages: Sequence[StageTasks]) -> list[StageTasks]:
    """The interleaved pipeline the closed form prices: every virtual stage before the
    last made as slow as the slowest of them (``H``), the last one as slow as ``H`` when it
    is faster. Its simulation takes exactly ``m ((v - 1) H + max(H, T_last)) + (p - 1) H``
    (:mod:`nest.pipeline`)."""
    if len(stages) < 2:
        return list(stages)
    head = max(stages[:-1], key=lambda s: s.time_s)
    last = stages[-1]
    padded_last = last if last.time_s >= head.time_s else _padded(last, head)
    return [_padded(s, head) for s in stages[:-1]] + [padded_last]


def end_tasks(scn: Scenario, cand: Candidate, layers_per_stage: Sequence[int],
              sync: str = "device") -> list[list[EndTask]]:
    """Per pipeline rank: gradient sync and optimizer step for the parameters it holds
    (overlapped collectives by their exposed part, :func:`nest.tables.sync_exposed`).

    ``sync="heaviest"`` charges every rank ``v x`` the virtual stage with the heaviest
    sync instead (the closed form's convention, conservative when ``v > 1``).
    """
    ends = np.cumsum(np.asarray(layers_per_stage, dtype=np.int64))
    starts = np.concatenate(([0], ends[:-1])).astype(np.int64)
    first = [scn.kinds.index(kind) for kind in scn.kind_list]  # one node of each kind
    per_kind = np.array([scn.node_sync_seconds(cand, i, i + 1) for i in first], dtype=np.float64)
    chunks = np.add.reduceat(per_kind[scn.kind_index], starts, axis=0)  # reduce, gather, optimizer
    per_rank = [chunks[d::cand.pp].sum(axis=0).tolist() for d in range(cand.pp)]
    if sync == "heaviest":
        heaviest = chunks[int(np.argmax(chunks.sum(axis=1)))]
        per_rank = [[cand.vp * float(x) for x in heaviest] for _ in range(cand.pp)]
    elif sync != "device":
        raise ValueError(f"sync = {sync!r}: must be 'device' or 'heaviest'")
    launch = OPTIMIZER_KERNELS * scn.kernels.overhead
    alpha = scn.sync_terms(cand).fixed_s - launch  # latency terms of the collectives
    out = []
    for reduce, gather, optimizer in per_rank:
        step = launch + optimizer
        barrier = EndTask(BARRIER, 0.0, False)
        if cand.zero == 0:
            tasks = [EndTask("all-reduce", alpha + reduce, True), barrier, EndTask("optimizer", step, False)]
        elif cand.zero == 1:
            tasks = [EndTask("reduce-scatter", alpha / 2 + reduce, True), barrier,
                     EndTask("optimizer", step, False), EndTask("all-gather", alpha / 2 + gather, True)]
        elif cand.zero == 2:
            tasks = [barrier, EndTask("optimizer", step, False), EndTask("all-gather", alpha + gather, True)]
        else:
            tasks = [EndTask("sync", alpha, True), barrier, EndTask("optimizer", step, False)]
        out.append(tasks)
    return out


def candidate_of(scn: Scenario, parallelism: dict) -> Candidate:
    """The :class:`~nest.tables.Candidate` of a plan's ``parallelism`` dictionary."""
    from .costs import LayerConfig

    p = parallelism
    cfg = LayerConfig(p["tp"], bool(p["sp"]), p["micro_batch"], p["recompute"],
                      scn.model.tied_embeddings and p["pp"] > 1, p.get("cp", 1), p.get("ep", 1))
    return Candidate(cfg, p["pp"], p["dp"], p.get("vp", 1), p.get("zero", 0),
                     p.get("rank_order", "tp-cp-ep-dp-pp"))


def simulate_candidate(scn: Scenario, cand: Candidate, layers_per_stage: Sequence[int],
                       closed_form_s: float | None = None, *, pad: bool = False,
                       sync: str = "device") -> SimResult:
    """Simulate one step of ``cand`` with virtual stages of ``layers_per_stage`` nodes.

    ``pad=True`` slows the stages the way the closed form sees them
    (:func:`pad_to_closed_form`) and
    ``sync="heaviest"`` syncs ``v x`` the heaviest chunk on every rank: with both, the
    simulation prices exactly what the closed form assumes (a diagnostic).
    """
    layers = [int(x) for x in layers_per_stage]
    if len(layers) != cand.virtual_stages or sum(layers) != scn.num_nodes or min(layers) < 1:
        raise ValueError(f"layers_per_stage = {layers}: needs {cand.virtual_stages} positive counts "
                         f"summing to {scn.num_nodes}")
    stages = stage_tasks(scn, cand, layers)
    if pad:
        stages = pad_to_closed_form(stages)
    result = simulate_schedule(stages, cand.pp, scn.micro_batches(cand),
                               end_tasks(scn, cand, layers, sync), closed_form_s)
    return replace(result, labels=tuple(f"stage {d}" for d in range(cand.pp)))


def simulate(plan, model=None, cluster=None, job=None, *, source=None, pad: bool = False,
             sync: str = "device") -> SimResult:
    """Simulate one training step of ``plan`` (a :class:`~nest.result.Plan`).

    ``model``, ``cluster`` and ``job`` must be those the plan was made for (specs or
    preset names); by default they are rebuilt from the plan (preset model by name, preset
    cluster by name and device count, the plan's batch, sequence length and dtype), which
    only works for presets with default job options. ``source`` as for
    :func:`nest.plan`. The result's ``predicted_s`` is the plan's step time and
    ``closed_form_s`` the DP's closed form of its split.
    ``pad`` and ``sync`` as for :func:`simulate_candidate`.
    """
    from .loading import load_cluster, load_model
    from .specs import JobSpec

    model = load_model(model if model is not None else plan.model["name"])
    if cluster is None:
        cluster = load_cluster(plan.cluster["name"], devices=plan.cluster["devices"])
    else:
        cluster = load_cluster(cluster)
    if job is None:
        job = JobSpec(**plan.job)
    scn = Scenario(model, cluster, job, source)
    cand = candidate_of(scn, plan.parallelism)
    layers = [len(s.layers) for s in plan.stages]
    result = simulate_candidate(scn, cand, layers, closed_form_s=plan.closed_form_step_time_s, pad=pad,
                                sync=sync)
    return replace(result, predicted_s=plan.step_time_s)


def render_simulation(result: SimResult) -> str:
    """A few lines for ``nest evaluate --simulate``: both step times and where they differ."""
    lines = [f"simulated step time   {result.step_time_s:.6g} s ({result.schedule}, p={result.pp}, "
             f"v={result.vp}, m={result.micro_batches})"]
    if result.predicted_s is not None:
        lines.append(f"nest step time        {result.predicted_s:.6g} s "
                     f"({result.relative_difference * 100:+.2f}% vs. simulated; the schedule priced "
                     "by nest's compiled core)")
    if result.closed_form_s is not None:
        lines.append(f"closed-form step time {result.closed_form_s:.6g} s "
                     f"({result.closed_form_difference * 100:+.2f}% vs. simulated; the DP's objective "
                     "for choosing the split)")
    lines.append(f"  pipeline {result.pipeline_time_s:.6g} s, then gradient sync and optimizer "
                 f"{result.sync_time_s:.6g} s")
    times = [s.time_s for s in result.stages]
    if len(times) > 1 and max(times) > 0:
        lines.append(f"  stage times per micro-batch {min(times):.4g}..{max(times):.4g} s"
                     + (": the closed form charges every chunk before the last as the slowest of them"
                        if result.vp > 1 else ""))
    return "\n".join(lines) + "\n"


# -- plotting ---------------------------------------------------------------------------

COLORS = {FORWARD: "#4c72b0", RECOMPUTE: "#8172b2", BACKWARD: "#55a868",
          "comm": "#dd8452", SEND_FORWARD: "#c44e52", SEND_BACKWARD: "#c44e52",
          "all-reduce": "#937860", "reduce-scatter": "#937860", "all-gather": "#937860",
          "sync": "#937860", "optimizer": "#8c8c8c"}


def _pyplot():
    try:
        import matplotlib
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError("plotting needs matplotlib: pip install 'nest-planner[plot]'") from error
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def timeline_png(result: SimResult, path, *, title: str | None = None, max_labels: int = 400) -> None:
    """Draw ``result`` as a Gantt chart into ``path`` (PNG): one row per pipeline rank.

    Forward, recompute and backward compute in blue, purple and green; the exposed
    collectives inside them (tensor/context/expert parallel, ZeRO) in orange at the end of
    the task; point-to-point sends in red; the end-of-step gradient sync in brown and
    the optimizer step in grey. Micro-batch numbers are written on compute tasks when
    there are at most ``max_labels`` of them. Needs matplotlib (``nest-planner[plot]``).
    """
    plt = _pyplot()
    from matplotlib.patches import Patch

    pp = result.pp
    scale, unit = (1e3, "ms") if result.step_time_s < 10 else (1.0, "s")
    fig, ax = plt.subplots(figsize=(12, 1.0 + 0.5 * pp))
    bars: dict[str, list[tuple[float, float]]] = {}
    rows: dict[str, list[int]] = {}

    def add(color_key, device, start, width):
        if width <= 0:
            return
        bars.setdefault(color_key, []).append((start * scale, width * scale))
        rows.setdefault(color_key, []).append(device)

    labelled = sum(1 for e in result.events if e.kind in COMPUTE_KINDS) <= max_labels
    for row in result.timelines:
        for e in row:
            if e.kind in COMPUTE_KINDS:
                add(e.kind, e.device, e.start_s, e.duration_s - e.comm_s)
                add("comm", e.device, e.end_s - e.comm_s, e.comm_s)
                if labelled and e.kind != RECOMPUTE:
                    ax.text((e.start_s + e.duration_s / 2) * scale, e.device, str(e.micro_batch),
                            ha="center", va="center", fontsize=6, color="white")
            else:
                add(e.kind, e.device, e.start_s, e.duration_s)
    for key, spans in bars.items():
        devices = np.array(rows[key])
        for d in np.unique(devices):
            ax.broken_barh([s for s, dev in zip(spans, devices) if dev == d], (d - 0.4, 0.8),
                           facecolors=COLORS.get(key, "#8c8c8c"), edgecolor="none")
    labels = result.labels or tuple(f"stage {d}" for d in range(pp))
    ax.set_yticks(range(pp))
    ax.set_yticklabels(labels)
    ax.set_ylim(pp - 0.5, -0.5)
    ax.set_xlim(0, result.step_time_s * scale * 1.01)
    ax.set_xlabel(f"time ({unit})")
    legend = [("forward", FORWARD), ("recompute", RECOMPUTE), ("backward", BACKWARD),
              ("collectives (TP/CP/EP/ZeRO)", "comm"), ("pipeline send", SEND_FORWARD),
              ("gradient sync", "all-reduce"), ("optimizer", "optimizer")]
    present = set(bars)
    present |= {"all-reduce"} if present & {"reduce-scatter", "all-gather", "sync"} else set()
    ax.legend(handles=[Patch(color=COLORS[k], label=name) for name, k in legend if k in present],
              loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.3 / max(pp, 1)), ncol=4,
              fontsize=8, frameon=False)
    closed = f", nest {result.predicted_s * scale:.4g} {unit}" if result.predicted_s else ""
    ax.set_title(title or f"{result.schedule}: p={pp} v={result.vp} m={result.micro_batches}, "
                          f"simulated step {result.step_time_s * scale:.4g} {unit}{closed}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
