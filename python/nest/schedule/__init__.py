"""One training step of a candidate: the closed forms the stage DP minimises
(``pipeline``), the tasks of every virtual stage and rank (``tasks``), the exact step in
Megatron-LM's 1F1B or interleaved order (``step``, the time a plan reports) and the
event-driven simulation that checks it (``simulate``)."""

from .._lazy import lazy_exports

_EXPORTS = {
    "BatchTasks": ".tasks",
    "EndTask": ".tasks",
    "SimResult": ".simulate",
    "StageTasks": ".tasks",
    "StepTiming": ".step",
    "candidate_step_s": ".step",
    "candidate_timing": ".step",
    "simulate_candidate": ".simulate",
    "simulate_schedule": ".simulate",
    "step_timing": ".step",
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
__all__ = sorted(_EXPORTS)
