"""The stage DP: dense integer tables in (:mod:`nest.dp.problem`), an exact split of every
candidate out, solved by the compiled core or the pure-Python reference
(:mod:`nest.dp.reference`, the oracle). :mod:`nest.dp.engine` is the only door to the
compiled module ``nest._core``."""

from .engine import ENGINES, available_threads, has_openmp, solve
from .problem import DPProblem, DPResult

__all__ = ["ENGINES", "DPProblem", "DPResult", "available_threads", "has_openmp", "solve"]
