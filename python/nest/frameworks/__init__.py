"""The training frameworks a plan targets: what each can run (rules over candidates, each
citing the framework's source) and how a plan is launched in it (Megatron-LM arguments, a
DeepSpeed config, a torchtitan command line). ``any`` is nest's whole search space, with no
launch format."""

from ..specs import FRAMEWORKS
from .base import Columns, Framework, Rule
from .deepspeed import DeepSpeed
from .megatron import Megatron
from .torchtitan import Torchtitan

_BY_NAME = {f.name: f for f in (Framework(), Megatron(), DeepSpeed(), Torchtitan())}
assert tuple(_BY_NAME) == FRAMEWORKS


def framework(name: str) -> Framework:
    """The framework called ``name`` (one of :data:`~nest.specs.FRAMEWORKS`)."""
    return _BY_NAME[name]


__all__ = ["FRAMEWORKS", "Columns", "DeepSpeed", "Framework", "Megatron", "Rule", "Torchtitan", "framework"]
