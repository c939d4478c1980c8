"""nest: network- and memory-aware planning of distributed deep-learning training.

Python API::

    import nest
    plan = nest.plan("gpt3-175b", nest.load_cluster("dgx-a100", devices=1024))
    print(plan.step_time_s, plan.to_dict()["parallelism"])
"""

from .errors import InfeasibleError, RuleError, SpecError
from .inputs.coerce import job_spec
from .inputs.loading import load_cluster, load_device, load_model
from .parallel import SpaceLimits
from .planner import evaluate, plan, simulate
from .result import Plan, Stage
from .specs import ClusterSpec, DeviceSpec, JobSpec, ModelSpec, OptimizerSpec, Tier

__version__ = "0.1.0"

__all__ = [
    "ClusterSpec", "DeviceSpec", "InfeasibleError", "JobSpec", "ModelSpec", "OptimizerSpec",
    "Plan", "RuleError", "SpaceLimits", "SpecError", "Stage", "Tier", "evaluate", "job_spec",
    "load_cluster", "load_device", "load_model", "plan", "simulate",
]
