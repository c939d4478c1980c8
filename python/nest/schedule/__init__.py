"""One training step of a candidate: the closed forms the stage DP minimises
(``pipeline``), the tasks of every virtual stage and rank (``tasks``), the exact step in
Megatron-LM's 1F1B or interleaved order (``step``, the time a plan reports) and the
event-driven simulation that checks it (``simulate``)."""

from .simulate import SimResult, simulate_candidate, simulate_schedule
from .step import StepTiming, candidate_step_s, candidate_timing, step_timing
from .tasks import BatchTasks, EndTask, StageTasks

__all__ = ["BatchTasks", "EndTask", "SimResult", "StageTasks", "StepTiming", "candidate_step_s",
           "candidate_timing", "simulate_candidate", "simulate_schedule", "step_timing"]
