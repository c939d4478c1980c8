"""The stage DP: dense integer tables in (:mod:`nest.dp.problem`), an exact split of every
candidate out, solved by the compiled core or the pure-Python reference
(:mod:`nest.dp.reference`, the oracle). :mod:`nest.dp.engine` is the only door to the
compiled module ``nest._core``."""

from .._lazy import lazy_exports

_EXPORTS = {
    "DPProblem": ".problem",
    "DPResult": ".problem",
    "ENGINES": ".engine",
    "available_threads": ".engine",
    "has_openmp": ".engine",
    "solve": ".engine",
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
__all__ = sorted(_EXPORTS)
