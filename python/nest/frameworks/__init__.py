"""The training frameworks a plan targets: what each can run (rules over candidates, each
citing the framework's source) and how a plan is launched in it (Megatron-LM arguments, a
DeepSpeed config, a torchtitan command line). ``any`` is nest's whole search space, with no
launch format.

A framework's module is imported the first time it is asked for: a plan for ``any`` or
for Megatron-LM does not load DeepSpeed's or torchtitan's rules.
"""

import importlib

from .._lazy import lazy_exports
from ..specs import FRAMEWORKS as FRAMEWORKS
from .base import Columns as Columns
from .base import Framework as Framework
from .base import Rule as Rule

# name -> (module, class) of each framework; "any" is the base class itself.
_CLASSES = {"any": (".base", "Framework"), "megatron": (".megatron", "Megatron"),
            "deepspeed": (".deepspeed", "DeepSpeed"), "torchtitan": (".torchtitan", "Torchtitan")}
assert tuple(_CLASSES) == FRAMEWORKS
_INSTANCES: dict[str, Framework] = {}


def framework(name: str) -> Framework:
    """The framework called ``name`` (one of :data:`~nest.specs.FRAMEWORKS`), one shared
    instance per name. An unknown name raises :class:`KeyError`."""
    found = _INSTANCES.get(name)
    if found is None:
        module, cls = _CLASSES[name]
        found = _INSTANCES[name] = getattr(importlib.import_module(module, __name__), cls)()
    return found


_EXPORTS = {cls: module for module, cls in _CLASSES.values() if module != ".base"}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
__all__ = sorted([*_EXPORTS, "FRAMEWORKS", "Columns", "Framework", "Rule", "framework"])
