"""Studies over many plans: baselines to compare against (``baselines``), ``nest compare``
(``compare``) and ``nest sweep`` (``sweep``, with its ``journal`` and ``sweep_plot``)."""

from .._lazy import lazy_exports

# Eager: importing the submodule 'compare' binds its name on this package, which would
# shadow a lazy function of the same name.
from .compare import compare as compare

_EXPORTS = {
    "ALL_STRATEGIES": ".baselines",
    "CompareRow": ".compare",
    "STRATEGIES": ".baselines",
    "StrategyResult": ".baselines",
    "expand_grid": ".sweep",
    "run_strategy": ".baselines",
    "run_sweep": ".sweep",
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
__all__ = sorted([*_EXPORTS, "compare"])
