"""An event-driven simulation of one training step of a plan.

The stage DP prices a step with a closed form (:mod:`nest.schedule.pipeline`): 1F1B ``(m - 1) x
slowest stage + sum of the stage times``, interleaved ``m ((v - 1) H + max(H, T_last)) +
(p - 1) H`` (``H`` the slowest virtual stage before the last one), plus the exposed DP
sync and optimizer step of the heaviest stage. This module checks it along an
independent path: it builds the tasks of one step and lets them run on their devices and
links in the order Megatron-LM issues them.

* **Tasks** are those of :mod:`nest.schedule.tasks`: per virtual stage and micro-batch a
  forward, a recompute and a backward, the sends after them, and each rank's end-of-step
  sync and optimizer step.
* **Point-to-point transfers.** After ``F(q, j)`` the device sends the output of its last
  node to virtual stage ``q + 1``, after ``B(q, j)`` the gradient of its input to ``q - 1``;
  each occupies both the sender (the sender pays, as in the cost model) and the directed
  link; the receiver may start the dependent task when the transfer ends. Sends are
  buffered (no rendezvous with the receiver).
* **Schedules.** Each pipeline rank executes its tasks strictly in Megatron-LM's order:
  1F1B (``forward_backward_pipelining_without_interleaving``: ``min(p - d - 1, m)``
  warm-up forwards, then one forward / one backward, then the cool-down backwards) or
  interleaved 1F1B (``..._with_interleaving``: ``2 (p - d - 1) + (v - 1) p`` warm-up
  forwards, chunks taken in groups of ``p`` micro-batches, backward chunks in reverse, all
  forwards first when ``m = p``). A task starts as soon as its device is free and its
  input has arrived.
* **End of step.** Each rank runs its end-of-step tasks after its last pipeline task;
  a barrier waits for every rank. The step ends when the last rank is done.

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
(:mod:`nest.schedule.step`): the same tasks, run in the compiled core by a readiness sweep
over dense arrays instead of events. The two agree to rounding on every plan
(``SimResult.relative_difference``); the closed form's gap is
``SimResult.closed_form_difference``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

from ..cost.scenario import Scenario
from ..parallel import Candidate
from .order import as_tuples
from .tasks import (
    BACKWARD,
    COMPUTE_KINDS,
    FORWARD,
    RECOMPUTE,
    SEND_BACKWARD,
    SEND_FORWARD,
    SEND_KINDS,
    BatchTasks,
    EndTask,
    StageTasks,
    run_end_tasks,
)


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
    predicted_s: float | None = None  # the plan's step time (nest.schedule.step), when known

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


# -- the event simulation ---------------------------------------------------------------


def simulate_schedule(stages: Sequence[StageTasks], pp: int, micro_batches: int,
                      end_tasks: Sequence[Sequence[EndTask]] | None = None,
                      closed_form_s: float | None = None, extra_warmup: int = 0) -> SimResult:
    """Run one step of the pipeline ``stages`` (``pp x vp`` virtual stages, virtual stage
    ``q`` on rank ``q mod pp``) for ``micro_batches`` micro-batches, with
    ``extra_warmup`` more warm-up forwards per rank (:func:`~nest.parallel.warmup`).

    ``end_tasks[d]`` run on rank ``d`` after its last pipeline task. Raises ValueError
    on inconsistent sizes (or a deadlocked order, which would be a bug).
    """
    n_virtual = len(stages)
    if pp < 1 or n_virtual % pp or micro_batches < 1:
        raise ValueError(f"{n_virtual} virtual stages, pp = {pp}, {micro_batches} micro-batches")
    vp = n_virtual // pp
    orders = [as_tuples(d, pp, vp, micro_batches, extra_warmup) for d in range(pp)]
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
    (:mod:`nest.schedule.pipeline`)."""
    if len(stages) < 2:
        return list(stages)
    head = max(stages[:-1], key=lambda s: s.time_s)
    last = stages[-1]
    padded_last = last if last.time_s >= head.time_s else _padded(last, head)
    return [_padded(s, head) for s in stages[:-1]] + [padded_last]



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
    tasks = BatchTasks.of_candidate(scn, cand)
    stages = tasks.stage_tasks(0, layers)
    if pad:
        stages = pad_to_closed_form(stages)
    result = simulate_schedule(stages, cand.pp, scn.micro_batches(cand), tasks.end_tasks(0, layers, sync),
                               closed_form_s, int(tasks.priced.extra_warmup[0]))
    return replace(result, labels=tuple(f"stage {d}" for d in range(cand.pp)))


