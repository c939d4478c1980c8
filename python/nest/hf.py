"""Deprecated alias of :mod:`nest.inputs.hf` (Hugging Face ``config.json`` files), kept
for one release because the README of 0.1 documented ``nest.hf``."""

from .inputs.hf import *  # noqa: F401,F403
from .inputs.hf import __all__  # noqa: F401
