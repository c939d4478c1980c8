"""The step time nest reports for a plan: the exact time of its pipeline schedule.

The stage DP splits a candidate by the closed form of :mod:`nest.schedule.pipeline`, an
upper bound of the schedule's time (equal to it for the stage shapes its docstring
lists); the search ranks candidates, and polishes the chosen split, by the exact step
(:mod:`nest.search`). A split's step is priced this way: the per-micro-batch tasks of
every virtual stage (:meth:`nest.schedule.tasks.BatchTasks.stage_columns`) run through
Megatron-LM's 1F1B or interleaved 1F1B order in the compiled core
(:func:`nest.dp.engine.pipeline_finish`, the longest path of the schedule in
``O(m v p)``), then every rank syncs the gradients of the parameters it holds and the
optimizer steps (:meth:`~nest.schedule.tasks.BatchTasks.end_tasks`). The event-driven
simulator (:func:`nest.schedule.simulate.simulate_schedule`) computes the same schedule
along its own path; the ``"python"`` engine uses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..cost.scenario import Scenario
from ..dp import engine as engines
from ..parallel import Candidate
from .tasks import BatchTasks, EndTask, StageTasks, run_end_tasks


@dataclass(frozen=True)
class StepTiming:
    """When each pipeline rank finishes its pipeline and its end-of-step tasks.

    ``finish_s[d]``: end of rank ``d``'s last pipeline task (or send);
    ``end_runs[d]``: its end-of-step tasks with their start times. The step ends when the
    last of them does.
    """

    stages: tuple[StageTasks, ...]
    pp: int
    micro_batches: int
    finish_s: tuple[float, ...]
    end_runs: tuple[tuple[tuple[EndTask, float], ...], ...]

    def rank_end_s(self, rank: int) -> float:
        """When rank ``rank`` is done with the step."""
        return _done(self.finish_s[rank], self.end_runs[rank])

    @property
    def step_s(self) -> float:
        """The step time: the last rank done."""
        return max(self.rank_end_s(d) for d in range(self.pp))

    @property
    def pipeline_s(self) -> float:
        """The end of the last pipeline task on any rank."""
        return max(self.finish_s)

    def work_s(self, rank: int) -> float:
        """Pipeline work of rank ``rank``: ``m`` times its chunks' tasks and the sends they
        make (none forward from the last virtual stage, none backward from the first)."""
        last = len(self.stages) - 1
        return self.micro_batches * sum(
            s.forward_s + s.recompute_s + s.backward_s + (s.send_forward_s if q < last else 0.0)
            + (s.send_backward_s if q > 0 else 0.0)
            for q, s in enumerate(self.stages) if q % self.pp == rank)


def step_timing(stages: Sequence[StageTasks], pp: int, micro_batches: int,
                ends: Sequence[Sequence[EndTask]] | None = None, engine: str = "cpp",
                extra_warmup: int = 0) -> StepTiming:
    """Run ``stages`` (``pp x vp`` virtual stages in schedule order) for ``micro_batches``
    micro-batches, then each rank's ``ends``; ``extra_warmup`` more warm-up forwards per
    rank (:func:`~nest.parallel.warmup`). ``engine="cpp"`` uses the compiled
    schedule, ``"python"`` the event-driven simulator. ValueError on inconsistent input."""
    stages = tuple(stages)
    if pp < 1 or not stages or len(stages) % pp:
        raise ValueError(f"{len(stages)} virtual stages, pp = {pp}: needs a positive multiple of pp")
    if engine == "python":
        from .simulate import simulate_schedule  # the reference engine, loaded when asked for

        sim = simulate_schedule(stages, pp, micro_batches, extra_warmup=extra_warmup)
        finish = [max((e.end_s for e in row), default=0.0) for row in sim.timelines]
    elif engine == "cpp":
        finish = _compiled_finish(pp, micro_batches, {name: [getattr(s, name) for s in stages] for name in _TIMES},
                                  extra_warmup)
    else:
        raise ValueError(f"unknown engine {engine!r}; expected one of {', '.join(engines.ENGINES)}")
    runs = run_end_tasks(finish, ends)
    return StepTiming(stages, pp, micro_batches, tuple(finish), tuple(tuple(r) for r in runs))


def batch_timing(tasks: BatchTasks, n: int, layers_per_stage: Sequence[int], engine: str = "cpp") -> StepTiming:
    """The exact step of candidate ``n`` of a priced batch with virtual stages of
    ``layers_per_stage`` nodes."""
    layers = [int(x) for x in layers_per_stage]
    pp = int(tasks.priced.cands.pp[n])
    return step_timing(tasks.stage_tasks(n, layers), pp, int(tasks.priced.micro_batches()[n]),
                       tasks.end_tasks(n, layers), engine, int(tasks.priced.extra_warmup[n]))


def batch_step_s(tasks: BatchTasks, n: int, layers_per_stage: Sequence[int], engine: str = "cpp") -> float:
    """The step time of :func:`batch_timing`; with the compiled schedule (``"cpp"``)
    without building the per-stage task objects: what the search ranks candidates by."""
    if engine == "python":
        return batch_timing(tasks, n, layers_per_stage, engine).step_s
    pp = int(tasks.priced.cands.pp[n])
    finish = _compiled_finish(pp, int(tasks.priced.micro_batches()[n]), tasks.stage_columns(n, layers_per_stage),
                              int(tasks.priced.extra_warmup[n]))
    runs = run_end_tasks(finish, tasks.end_tasks(n, layers_per_stage))
    return max(_done(f, r) for f, r in zip(finish, runs))


def candidate_timing(scn: Scenario, cand: Candidate, layers_per_stage: Sequence[int],
                     engine: str = "cpp") -> StepTiming:
    """The exact step of one candidate with virtual stages of ``layers_per_stage`` nodes."""
    return batch_timing(BatchTasks.of_candidate(scn, cand), 0, layers_per_stage, engine)


def candidate_step_s(scn: Scenario, cand: Candidate, layers_per_stage: Sequence[int], engine: str = "cpp") -> float:
    """The step time of :func:`candidate_timing`."""
    return batch_step_s(BatchTasks.of_candidate(scn, cand), 0, layers_per_stage, engine)


_TIMES = ("forward_s", "recompute_s", "backward_s", "send_forward_s", "send_backward_s")


def _compiled_finish(pp: int, micro_batches: int, columns, extra_warmup: int = 0) -> list[float]:
    """Per rank, the end of its last pipeline task: the compiled schedule of the
    per-stage times in ``columns`` (a mapping with the :data:`_TIMES` keys)."""
    times = [np.ascontiguousarray(columns[name], dtype=np.float64) for name in _TIMES]
    return engines.pipeline_finish(pp, len(times[0]) // pp, micro_batches, *times, extra_warmup).tolist()


def _done(finish: float, runs) -> float:
    """When a rank that finished its pipeline at ``finish`` is done with ``runs``."""
    return runs[-1][1] + runs[-1][0].seconds if runs else finish
