"""The dense tables the stage DP consumes, and the result arrays it returns.

Everything that crosses into the C++ core is a C-contiguous int64 or float64 numpy
array. Times are integers in picoseconds and sizes integers in bytes / parameters so
that every sum, difference and comparison in the DP is exact; this is what lets the
fast C++ search and the simple Python reference agree to the last bit, tie-breaking
included.

Notation (one candidate = one intra-layer configuration with a fixed stage count p):

* nodes ``0..L-1`` form a chain; a split gives stage ``k`` the nodes ``[e_{k-1}, e_k)``
  with ``e_{-1} = 0`` and ``e_{p-1} = L``; every stage is non-empty.
* stage time ``T_k = sum(time[i..j)) + send[tier_k][j-1]   (k < p-1: activations forward)
  + send[tier_{k-1}][i-1]   (k > 0: gradients backward)`` -- the sender pays.
* stage parameters ``W_k = sum(params[i..j))`` (the weight of the exposed sync).
* stage memory ``mem_fixed + pos_mem_fixed_k + mem_per_param * M_k + inflight_k *
  sum(act[i..j))`` with ``M_k = sum(mem_params[i..j))`` must be ``<= capacity`` (evaluated
  in float64 in exactly this order; ``pos_mem_fixed_k``: bytes position ``k`` holds besides
  its own segment). ``params`` and ``mem_params`` differ when parameter kinds are synchronised
  and sharded differently (MoE experts versus dense weights).
* host memory ``host_per_param * sum(host_params[i..j)) <= host_capacity`` too (offloaded
  optimizer state; zeros without offload).
* objective ``F = scale * max_k T_k + head_scale * H + offset + G(max_k W_k)`` with
  ``H = max_{k < p-1} T_k`` (0 when ``p = 1``) the slowest stage before the last one,
  ``offset`` the split-independent part of the schedule's time (see :mod:`nest.schedule.pipeline`)
  and ``G(w) = floor(g0 + g1 * w + 0.5)`` (picoseconds; the exposed data-parallel
  gradient sync and optimizer step of the stage with the most parameters).

Among splits with the smallest ``F`` the DP returns the one with the smallest
``max T`` (``head_scale > 0``: the smallest ``H``), then the smallest ``max W`` (then the
fastest last stage), then the lexicographically smallest vector of stage ends.
Candidates are visited in the given order in chunks of ``CHUNK``; a candidate whose
``lower_bound`` exceeds the best objective of earlier chunks is pruned.
The chunking makes the set of pruned candidates independent of the thread count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CHUNK = 32
"""Candidates solved between two updates of the pruning incumbent."""

SOLVED = 0
INFEASIBLE = 1
PRUNED = 2

INF = np.iinfo(np.int64).max


def _as_array(name: str, value, dtype, ndim: int) -> np.ndarray:
    array = np.ascontiguousarray(value, dtype=dtype)
    if array.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {array.shape}")
    return array


@dataclass(frozen=True)
class DPProblem:
    """All candidates of one search, as dense arrays (see the module docstring).

    Layer-config tables are indexed ``[config, node]``; ``send_ps`` is indexed
    ``[config, tier, node]`` and holds the time to send node ``i``'s output across a
    boundary on that tier. Per-candidate arrays are indexed by candidate. Per-position
    arrays are concatenated: candidate ``n`` owns ``pos_offset[n]:pos_offset[n+1]``,
    one entry per stage.
    """

    time_ps: np.ndarray  # int64 [C, L]
    params: np.ndarray  # int64 [C, L]
    mem_params: np.ndarray  # int64 [C, L]
    act_bytes: np.ndarray  # int64 [C, L]
    send_ps: np.ndarray  # int64 [C, NT, L]
    cand_config: np.ndarray  # int64 [N]
    cand_scale: np.ndarray  # int64 [N], >= 0
    cand_offset: np.ndarray  # int64 [N], >= 0
    cand_head_scale: np.ndarray  # int64 [N], >= 0
    cand_mem_fixed: np.ndarray  # float64 [N]
    cand_mem_per_param: np.ndarray  # float64 [N]
    cand_g0: np.ndarray  # float64 [N]
    cand_g1: np.ndarray  # float64 [N]
    cand_lower_bound: np.ndarray  # int64 [N]
    pos_offset: np.ndarray  # int64 [N + 1]
    pos_inflight: np.ndarray  # float64 [P]
    pos_mem_fixed: np.ndarray  # float64 [P]
    pos_tier: np.ndarray  # int64 [P]; entry k: tier of the boundary after stage k (-1 last)
    capacity: float
    host_params: np.ndarray | None = None  # int64 [C, L]; None: zeros
    cand_host_per_param: np.ndarray | None = None  # float64 [N]; None: zeros
    host_capacity: float = 0.0

    @staticmethod
    def build(**arrays) -> "DPProblem":
        """Coerce arrays to the exact dtypes and layouts and check their shapes.

        ``mem_params`` defaults to ``params``, ``cand_offset``, ``cand_head_scale`` and
        ``pos_mem_fixed`` and the host-memory tables to zeros.
        """
        arrays = dict(arrays)
        arrays.setdefault("mem_params", arrays["params"])
        for name in ("cand_offset", "cand_head_scale"):
            arrays.setdefault(name, np.zeros(len(arrays["cand_scale"]), dtype=np.int64))
        arrays.setdefault("pos_mem_fixed", np.zeros(len(arrays["pos_inflight"])))
        arrays.setdefault("host_params", np.zeros(np.shape(arrays["time_ps"]), dtype=np.int64))
        arrays.setdefault("cand_host_per_param", np.zeros(len(arrays["cand_scale"])))
        spec = {
            "time_ps": (np.int64, 2), "params": (np.int64, 2), "mem_params": (np.int64, 2),
            "act_bytes": (np.int64, 2),
            "send_ps": (np.int64, 3), "cand_config": (np.int64, 1), "cand_scale": (np.int64, 1),
            "cand_offset": (np.int64, 1), "cand_head_scale": (np.int64, 1),
            "cand_mem_fixed": (np.float64, 1), "cand_mem_per_param": (np.float64, 1),
            "cand_g0": (np.float64, 1), "cand_g1": (np.float64, 1),
            "cand_lower_bound": (np.int64, 1), "pos_offset": (np.int64, 1),
            "pos_inflight": (np.float64, 1), "pos_mem_fixed": (np.float64, 1), "pos_tier": (np.int64, 1),
            "host_params": (np.int64, 2), "cand_host_per_param": (np.float64, 1),
        }
        coerced = {name: _as_array(name, arrays[name], dtype, ndim)
                   for name, (dtype, ndim) in spec.items()}
        problem = DPProblem(capacity=float(arrays["capacity"]),
                            host_capacity=float(arrays.get("host_capacity", 0.0)), **coerced)
        problem.check()
        return problem

    @property
    def num_nodes(self) -> int:
        return int(self.time_ps.shape[1])

    @property
    def num_candidates(self) -> int:
        return int(self.cand_config.shape[0])

    def stages(self, n: int) -> int:
        """Number of pipeline stages of candidate ``n``."""
        return int(self.pos_offset[n + 1] - self.pos_offset[n])

    def check(self) -> None:
        """Raise ``ValueError`` on inconsistent shapes or values (mirrors the C++ checks)."""
        configs, nodes = self.time_ps.shape
        if any(a.shape != (configs, nodes) for a in (self.params, self.mem_params, self.act_bytes)):
            raise ValueError("params, mem_params and act_bytes must have the shape of time_ps")
        if self.host_params.shape != (configs, nodes):
            raise ValueError("host_params must have the shape of time_ps")
        if self.send_ps.ndim != 3 or self.send_ps.shape[0] != configs or self.send_ps.shape[2] != nodes:
            raise ValueError("send_ps must have shape [configs, tiers, nodes]")
        n = self.cand_config.shape[0]
        for name in ("cand_scale", "cand_offset", "cand_head_scale", "cand_mem_fixed",
                     "cand_mem_per_param", "cand_g0", "cand_g1", "cand_lower_bound", "cand_host_per_param"):
            if getattr(self, name).shape != (n,):
                raise ValueError(f"{name} must have one entry per candidate")
        if self.pos_offset.shape != (n + 1,) or self.pos_offset[0] != 0:
            raise ValueError("pos_offset must have candidates + 1 entries starting at 0")
        total = int(self.pos_offset[-1])
        if any(a.shape != (total,) for a in (self.pos_inflight, self.pos_mem_fixed, self.pos_tier)):
            raise ValueError("pos_inflight, pos_mem_fixed and pos_tier must have pos_offset[-1] entries")
        if nodes == 0:
            raise ValueError("the layer chain is empty")
        for name in ("time_ps", "params", "mem_params", "act_bytes", "send_ps", "host_params"):
            if (getattr(self, name) < 0).any():
                raise ValueError(f"{name} must be non-negative")
        for name in ("cand_mem_fixed", "cand_mem_per_param", "cand_g0", "cand_g1", "pos_inflight",
                     "pos_mem_fixed", "cand_host_per_param"):
            values = getattr(self, name)
            if not np.isfinite(values).all() or (values < 0).any():
                raise ValueError(f"{name} must be finite and non-negative")
        if not np.isfinite(self.capacity):
            raise ValueError("capacity must be finite")
        if not np.isfinite(self.host_capacity):
            raise ValueError("host_capacity must be finite")
        if n and ((self.cand_config < 0).any() or (self.cand_config >= configs).any()):
            raise ValueError("cand_config out of range")
        if (self.cand_scale < 0).any():
            raise ValueError("cand_scale must be non-negative")
        if (self.cand_offset < 0).any():
            raise ValueError("cand_offset must be non-negative")
        if (self.cand_head_scale < 0).any():
            raise ValueError("cand_head_scale must be non-negative")
        if (self.cand_lower_bound < 0).any():
            raise ValueError("cand_lower_bound must be non-negative")
        stages = np.diff(self.pos_offset)
        if (stages < 1).any() or (stages > nodes).any():
            raise ValueError("every candidate needs 1 <= stages <= nodes")
        tiers = self.send_ps.shape[1]
        last = self.pos_offset[1:] - 1
        inner = np.ones(total, dtype=bool)
        inner[last] = False
        if ((self.pos_tier[inner] < 0) | (self.pos_tier[inner] >= tiers)).any():
            raise ValueError("pos_tier out of range")


@dataclass(frozen=True)
class DPResult:
    """Per-candidate outcome: status (SOLVED/INFEASIBLE/PRUNED), objective, the split.

    ``ends`` uses the candidates' position layout: stage ``k`` of candidate ``n`` ends
    (exclusive) at node ``ends[pos_offset[n] + k]``; entries of unsolved candidates are -1.
    ``best`` is the winning candidate (smallest objective, then smallest index) or -1.
    """

    status: np.ndarray
    objective: np.ndarray
    max_time: np.ndarray
    max_params: np.ndarray
    ends: np.ndarray
    best: int

    @property
    def evaluated(self) -> int:
        """Candidates whose split was actually searched (not pruned)."""
        return int((self.status != PRUNED).sum())


def sync_time(g0: float, g1: float, params: int) -> int:
    """``G(w)``: the integer picoseconds of the exposed data-parallel sync for ``w`` params."""
    return int(np.floor(g0 + g1 * float(params) + 0.5))
