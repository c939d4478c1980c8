"""Studies over many plans: baselines to compare against (``baselines``), ``nest compare``
(``compare``) and ``nest sweep`` (``sweep``, with its ``journal`` and ``sweep_plot``)."""

from .baselines import ALL_STRATEGIES, STRATEGIES, StrategyResult, run_strategy
from .compare import CompareRow, compare
from .sweep import expand_grid, run_sweep

__all__ = ["ALL_STRATEGIES", "STRATEGIES", "CompareRow", "StrategyResult", "compare", "expand_grid",
           "run_strategy", "run_sweep"]
