"""nest: network- and memory-aware planning of distributed deep-learning training.

Python API::

    import nest
    plan = nest.plan("gpt3-175b", nest.load_cluster("dgx-a100", devices=1024))
    print(plan.step_time_s, plan.to_dict()["parallelism"])

The names below load on first use: ``import nest`` imports no numpy and no submodule, so
a command pays only for what it runs.
"""

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "ClusterSpec": ".specs",
    "DeviceSpec": ".specs",
    "InfeasibleError": ".errors",
    "JobSpec": ".specs",
    "ModelSpec": ".specs",
    "OptimizerSpec": ".specs",
    "Plan": ".result",
    "RuleError": ".errors",
    "SpaceLimits": ".degrees",
    "SpecError": ".errors",
    "Stage": ".result",
    "Tier": ".specs",
    "evaluate": ".planner",
    "job_spec": ".inputs.coerce",
    "load_cluster": ".inputs.loading",
    "load_device": ".inputs.loading",
    "load_model": ".inputs.loading",
    "plan": ".planner",
    "simulate": ".planner",
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # what the lazy names are, for type checkers and editors
    from .errors import InfeasibleError as InfeasibleError
    from .errors import RuleError as RuleError
    from .errors import SpecError as SpecError
    from .inputs.coerce import job_spec as job_spec
    from .inputs.loading import load_cluster as load_cluster
    from .inputs.loading import load_device as load_device
    from .inputs.loading import load_model as load_model
    from .degrees import SpaceLimits as SpaceLimits
    from .planner import evaluate as evaluate
    from .planner import plan as plan
    from .planner import simulate as simulate
    from .result import Plan as Plan
    from .result import Stage as Stage
    from .specs import ClusterSpec as ClusterSpec
    from .specs import DeviceSpec as DeviceSpec
    from .specs import JobSpec as JobSpec
    from .specs import ModelSpec as ModelSpec
    from .specs import OptimizerSpec as OptimizerSpec
    from .specs import Tier as Tier
