"""The stage DP and the schedule on the compiled core ``nest._core`` (loaded by
:func:`nest.network.kernels.load_core`, its one loader), or in pure Python.

The stage DP runs on a :class:`~nest.dp.problem.DPProblem` with a chosen engine.

Two engines solve exactly the same problem and return identical arrays:

* ``"cpp"``: the compiled core ``nest._core`` (bisection over the bottleneck with an
  ``O(p L)`` sliding-window feasibility sweep, candidates in parallel with OpenMP);
* ``"python"``: the pure-Python reference :mod:`nest.dp.reference` (the oracle).
"""

from __future__ import annotations

import numpy as np

from ..network.kernels import load_core
from . import reference as dp_reference
from .problem import DPProblem, DPResult

ENGINES = ("cpp", "python")
"""Names accepted by :func:`solve`."""


def _core():
    """The compiled module, for the stage DP and the schedule (:func:`load_core`)."""
    return load_core("the compiled stage DP", "engine='python'")


def solve(problem: DPProblem, engine: str = "cpp", threads: int | None = None) -> DPResult:
    """Solve every candidate of ``problem`` and return the per-candidate results.

    ``engine`` is ``"cpp"`` (default) or ``"python"``. ``threads`` is the number of
    OpenMP threads of the C++ engine (``None``: the OpenMP default); the result does not
    depend on it, and the Python engine ignores it. Raises ``ValueError`` on an unknown
    engine or an inconsistent problem.
    """
    if engine == "python":
        return dp_reference.solve(problem)
    if engine != "cpp":
        raise ValueError(f"unknown stage DP engine {engine!r}; expected one of {', '.join(ENGINES)}")
    if threads is not None and int(threads) < 1:
        raise ValueError(f"threads must be >= 1 or None, got {threads}")
    p = problem
    # Only the layout is fixed up here; a wrong dtype is reported by the core.
    arrays = [np.ascontiguousarray(a) for a in (
        p.time_ps, p.params, p.mem_params, p.act_bytes, p.send_ps, p.cand_config, p.cand_scale,
        p.cand_offset, p.cand_head_scale,
        p.cand_mem_fixed, p.cand_mem_per_param, p.cand_g0, p.cand_g1, p.cand_lower_bound,
        p.pos_offset, p.pos_inflight, p.pos_mem_fixed, p.pos_tier)]
    status, objective, max_time, max_params, ends, best = _core().solve(
        *arrays, float(p.capacity), 0 if threads is None else int(threads), np.ascontiguousarray(p.host_params),
        np.ascontiguousarray(p.cand_host_per_param), float(p.host_capacity))
    return DPResult(status, objective, max_time, max_params, ends, int(best))


def pipeline_finish(pp: int, vp: int, micro_batches: int, forward_s, recompute_s, backward_s, send_forward_s,
                    send_backward_s, extra_warmup: int = 0) -> np.ndarray:
    """Per pipeline rank, the end of its last task in Megatron-LM's 1F1B (``vp = 1``) or
    interleaved 1F1B order, for per-virtual-stage task and send seconds (``pp x vp``
    float64 arrays in schedule order), with ``extra_warmup`` more warm-up forwards per
    rank (:func:`nest.parallel.warmup`): the compiled schedule
    (:mod:`nest.schedule.step`). ValueError on inconsistent input."""
    return _core().pipeline_finish(pp, vp, micro_batches, forward_s, recompute_s, backward_s, send_forward_s,
                                   send_backward_s, extra_warmup)


def has_openmp() -> bool:
    """Whether the compiled core was built with OpenMP (False if it is missing)."""
    try:
        return bool(_core().has_openmp())
    except ImportError:
        return False


def default_threads(problem: DPProblem) -> int:
    """Threads the C++ engine solves ``problem`` with when none are asked for: one for a
    batch of fewer than 32 million DP cells (stage positions x nodes^2), whose parallel
    run costs more than it saves when other processes keep the cores busy; else
    :func:`available_threads`."""
    nodes = problem.time_ps.shape[1]
    try:
        return int(_core().default_threads(float(len(problem.pos_inflight)) * nodes * nodes))
    except ImportError:
        return 1


def available_threads() -> int:
    """Threads the C++ engine uses by default (1 without OpenMP or without the core)."""
    try:
        return int(_core().max_threads())
    except ImportError:
        return 1
