"""Pure-Python stage DP: the oracle for the C++ core and the baseline in benchmarks.

It solves exactly the problem described in :mod:`nest.dp.problem` with the textbook
min-max recurrence (``O(p L^2)`` per bottleneck query) instead of the C++ core's
bisection with an ``O(p L)`` sliding-window feasibility sweep, so the two are
independent implementations that must return identical arrays.

Per candidate, the objective ``scale * maxT + offset + G(maxW)`` has two maxima. Both are
non-decreasing functions of the split's ``(maxT, maxW)``, so an optimum lies on the
Pareto front of ``(maxT, maxW)``. The front is walked from the smallest ``maxT``:
``t = minT(w_cap)``, then ``w = minW(t)`` is the point with that ``t``; the next point
has ``maxW < w``. The walk stops as soon as no later point can beat the incumbent.

With ``head_scale > 0`` the objective also reads ``H``, the slowest stage before the
last one: ``head_scale * H + scale * max(H, T_last)`` is non-decreasing in
``(H, W, T_last)``. For every value ``tau`` a last stage can take, the walk above runs
over ``(H, W)`` among the splits whose last stage takes at most ``tau``, and each point
is completed by its fastest last stage; the optimum is the best point of all walks (the
C++ core skips most values of ``tau``).
"""

from __future__ import annotations

import numpy as np

from .problem import CHUNK, INF, INFEASIBLE, PRUNED, SOLVED, DPProblem, DPResult, sync_time


class _Candidate:
    """The prefix sums and position data of one candidate, with segment predicates."""

    def __init__(self, problem: DPProblem, n: int):
        c = int(problem.cand_config[n])
        self.nodes = problem.num_nodes
        self.p = problem.stages(n)
        # the five prefix sums in one int64 pass (built per candidate, split and polish step)
        prefix = np.zeros((5, self.nodes + 1), dtype=np.int64)
        np.cumsum(np.stack((problem.time_ps[c], problem.params[c], problem.act_bytes[c], problem.mem_params[c],
                            problem.host_params[c])), axis=1, out=prefix[:, 1:])
        self.prefix_time, self.prefix_params, self.prefix_act, self.prefix_mem, self.prefix_host = prefix.tolist()
        self.host_per_param = float(problem.cand_host_per_param[n])
        self.host_capacity = problem.host_capacity
        self.send = problem.send_ps[c].tolist()
        start = int(problem.pos_offset[n])
        self.inflight = problem.pos_inflight[start:start + self.p].tolist()
        self.pos_fixed = problem.pos_mem_fixed[start:start + self.p].tolist()
        self.tier = problem.pos_tier[start:start + self.p].tolist()
        self.mem_fixed = float(problem.cand_mem_fixed[n])
        self.mem_per_param = float(problem.cand_mem_per_param[n])
        self.capacity = problem.capacity
        # (k, i, j) -> (params, time, fits) of that stage: what allowed() compares with the
        # caps; the min-max recurrences ask for the same segments under many caps
        self._segments: dict[tuple[int, int, int], tuple[int, int, bool]] = {}

    def stage_time(self, k: int, i: int, j: int) -> int:
        t = self.prefix_time[j] - self.prefix_time[i]
        if k < self.p - 1:
            t += self.send[self.tier[k]][j - 1]
        if k > 0:
            t += self.send[self.tier[k - 1]][i - 1]
        return t

    def stage_params(self, i: int, j: int) -> int:
        return self.prefix_params[j] - self.prefix_params[i]

    def fits(self, k: int, i: int, j: int) -> bool:
        return self.memory(k, i, j) <= self.capacity and self.host_memory(i, j) <= self.host_capacity

    def host_memory(self, i: int, j: int) -> float:
        """Host bytes stage ``[i, j)`` fills with offloaded optimizer state."""
        return self.host_per_param * float(self.prefix_host[j] - self.prefix_host[i])

    def memory(self, k: int, i: int, j: int) -> float:
        """Bytes stage ``k`` needs for nodes ``[i, j)`` (the DP's float64 order)."""
        w = float(self.prefix_mem[j] - self.prefix_mem[i])
        a = float(self.prefix_act[j] - self.prefix_act[i])
        return self.mem_fixed + self.pos_fixed[k] + self.mem_per_param * w + self.inflight[k] * a

    def allowed(self, k: int, i: int, j: int, t_cap: int, w_cap: int, l_cap: int | None = None) -> bool:
        """Stage ``k`` may take nodes ``[i, j)`` (``l_cap``, default ``t_cap``: the time
        cap of the last stage)."""
        cap = t_cap if l_cap is None or k < self.p - 1 else l_cap
        segment = self._segments.get((k, i, j))
        if segment is None:
            segment = self._segments[k, i, j] = (self.stage_params(i, j), self.stage_time(k, i, j), self.fits(k, i, j))
        params, time, fits = segment
        return params <= w_cap and time <= cap and fits

    def head_time(self, k: int, i: int, j: int) -> int:
        return self.stage_time(k, i, j) if k < self.p - 1 else 0

    def last_time(self, k: int, i: int, j: int) -> int:
        return self.stage_time(k, i, j) if k == self.p - 1 else 0

    def min_max(self, cost, t_cap: int, w_cap: int, l_cap: int | None = None) -> int:
        """Smallest achievable max over stages of ``cost(k, i, j)`` under the caps."""
        best = [INF] * (self.nodes + 1)
        best[0] = -1  # "no stage yet": below any cost
        for k in range(self.p):
            nxt = [INF] * (self.nodes + 1)
            for j in range(k + 1, self.nodes - (self.p - 1 - k) + 1):
                value = INF
                for i in range(k, j):
                    if best[i] == INF or not self.allowed(k, i, j, t_cap, w_cap, l_cap):
                        continue
                    value = min(value, max(best[i], cost(k, i, j)))
                nxt[j] = value
            best = nxt
        return best[self.nodes]

    def min_time(self, w_cap: int) -> int:
        return self.min_max(self.stage_time, INF, w_cap)

    def min_params(self, t_cap: int) -> int:
        return self.min_max(lambda k, i, j: self.stage_params(i, j), t_cap, INF)

    def lexicographic_ends(self, t_cap: int, w_cap: int, l_cap: int | None = None) -> list[int]:
        """The lexicographically smallest vector of stage ends under the caps."""
        completes = [[False] * (self.nodes + 1) for _ in range(self.p + 1)]
        completes[self.p][self.nodes] = True
        for k in range(self.p - 1, -1, -1):
            for i in range(self.nodes):
                completes[k][i] = any(
                    completes[k + 1][j] and self.allowed(k, i, j, t_cap, w_cap, l_cap)
                    for j in range(i + 1, self.nodes + 1))
        ends, i = [], 0
        for k in range(self.p):
            j = next(j for j in range(i + 1, self.nodes + 1)
                     if completes[k + 1][j] and self.allowed(k, i, j, t_cap, w_cap, l_cap))
            ends.append(j)
            i = j
        return ends


def solve_candidate(problem: DPProblem, n: int) -> tuple[int, int, int, list[int]] | None:
    """Optimal ``(objective, max_time, max_params, ends)`` of candidate ``n``, or None."""
    cand = _Candidate(problem, n)
    scale, offset = int(problem.cand_scale[n]), int(problem.cand_offset[n])
    g0, g1 = float(problem.cand_g0[n]), float(problem.cand_g1[n])
    if int(problem.cand_head_scale[n]) > 0:
        return _solve_split_last(cand, scale, int(problem.cand_head_scale[n]), offset, g0, g1)
    w_floor = cand.min_params(INF)
    if w_floor == INF:
        return None
    best = None
    w_cap = INF
    while True:
        t = cand.min_time(w_cap)
        if t == INF:
            break
        w = cand.min_params(t)
        objective = scale * t + offset + sync_time(g0, g1, w)
        if best is None or objective < best[0]:
            best = (objective, t, w)
        w_cap = w - 1
        if scale * (t + 1) + offset + sync_time(g0, g1, w_floor) >= best[0]:
            break
    objective, t, w = best
    return objective, t, w, cand.lexicographic_ends(t, w)


def _solve_split_last(cand: _Candidate, scale: int, head_scale: int, offset: int, g0: float,
                      g1: float) -> tuple[int, int, int, list[int]] | None:
    """``solve_candidate`` for ``head_scale > 0``: every walk, key ``(F, H, W, T_last)``."""
    def stage_params(k, i, j):
        return cand.stage_params(i, j)

    last = cand.p - 1
    taus = sorted({cand.stage_time(last, i, cand.nodes) for i in range(last, cand.nodes)})
    best = None
    for tau in taus:
        w_cap = INF
        while True:
            t = cand.min_max(cand.head_time, INF, w_cap, tau)
            if t == INF:
                break
            w = cand.min_max(stage_params, t, INF, tau)
            t_last = cand.min_max(cand.last_time, t, w, tau)
            objective = head_scale * t + scale * max(t, t_last) + offset + sync_time(g0, g1, w)
            if best is None or (objective, t, w, t_last) < best:
                best = (objective, t, w, t_last)
            w_cap = w - 1
    if best is None:
        return None
    objective, t, w, t_last = best
    return objective, max(t, t_last), w, cand.lexicographic_ends(t, w, t_last)


def solve(problem: DPProblem) -> DPResult:
    """Solve every candidate (with chunked lower-bound pruning) and pick the winner."""
    n_cand = problem.num_candidates
    status = np.full(n_cand, PRUNED, dtype=np.int64)
    objective = np.full(n_cand, INF, dtype=np.int64)
    max_time = np.full(n_cand, INF, dtype=np.int64)
    max_params = np.full(n_cand, INF, dtype=np.int64)
    ends = np.full(int(problem.pos_offset[-1]), -1, dtype=np.int64)
    incumbent = INF
    for chunk_start in range(0, n_cand, CHUNK):
        chunk = range(chunk_start, min(chunk_start + CHUNK, n_cand))
        for n in chunk:
            if problem.cand_lower_bound[n] > incumbent:
                continue
            found = solve_candidate(problem, n)
            if found is None:
                status[n] = INFEASIBLE
                continue
            status[n] = SOLVED
            objective[n], max_time[n], max_params[n], split = found
            start = int(problem.pos_offset[n])
            ends[start:start + len(split)] = split
        solved = objective[:chunk.stop]
        incumbent = int(solved.min()) if len(solved) else INF
    winners = np.flatnonzero(status == SOLVED)
    best = int(winners[np.argmin(objective[winners])]) if len(winners) else -1
    return DPResult(status, objective, max_time, max_params, ends, best)


def brute_force(problem: DPProblem, n: int) -> tuple[int, int, int, list[int]] | None:
    """Enumerate every split of candidate ``n``; same key as the DP. Tests only."""
    from itertools import combinations

    cand = _Candidate(problem, n)
    scale, offset = int(problem.cand_scale[n]), int(problem.cand_offset[n])
    head_scale = int(problem.cand_head_scale[n])
    g0, g1 = float(problem.cand_g0[n]), float(problem.cand_g1[n])
    best = None
    for cuts in combinations(range(1, cand.nodes), cand.p - 1):
        ends = list(cuts) + [cand.nodes]
        starts = [0] + list(cuts)
        if not all(cand.fits(k, i, j) for k, (i, j) in enumerate(zip(starts, ends))):
            continue
        times = [cand.stage_time(k, i, j) for k, (i, j) in enumerate(zip(starts, ends))]
        t, head = max(times), max(times[:-1], default=0)
        w = max(cand.stage_params(i, j) for i, j in zip(starts, ends))
        objective = scale * t + head_scale * head + offset + sync_time(g0, g1, w)
        key = (objective, t, w, [], ends) if head_scale == 0 else (objective, head, w, [times[-1]], ends)
        if best is None or key < best:
            best = key
    return None if best is None else (best[0], max([best[1], *best[3]]), best[2], best[4])


def stage_times(problem: DPProblem, n: int, ends: list[int]) -> list[int]:
    """Per stage of candidate ``n`` split at ``ends``: its time (ps) as the DP prices it
    (:meth:`_Candidate.stage_time`, from the time table alone: the search bounds every
    split it keeps with this)."""
    c, p, start = int(problem.cand_config[n]), problem.stages(n), int(problem.pos_offset[n])
    prefix = [0, *np.cumsum(problem.time_ps[c]).tolist()]
    send, tier = problem.send_ps[c].tolist(), problem.pos_tier[start:start + p].tolist()
    times = []
    for k, (i, j) in enumerate(zip([0] + list(ends[:-1]), ends)):
        t = prefix[j] - prefix[i]
        if k < p - 1:
            t += send[tier[k]][j - 1]
        if k > 0:
            t += send[tier[k - 1]][i - 1]
        times.append(t)
    return times


def split_fits(problem: DPProblem, n: int):
    """``fits(ends)``: whether every stage of candidate ``n`` split at ``ends`` fits, as
    :func:`stage_details` says, for checking many splits of one candidate (the tables
    are read once)."""
    cand = _Candidate(problem, n)

    def fits(ends) -> bool:
        return all(cand.fits(k, i, j) for k, (i, j) in enumerate(zip([0] + list(ends[:-1]), ends)))
    return fits


def stage_details(problem: DPProblem, n: int, ends: list[int]) -> list[dict]:
    """Per stage of candidate ``n`` split at ``ends``: time (ps), params, memory, fit.

    Uses the same integer tables and float evaluation order as the DP, so a split found
    by either engine is re-costed bit for bit.
    """
    cand = _Candidate(problem, n)
    starts = [0] + list(ends[:-1])
    details = []
    for k, (i, j) in enumerate(zip(starts, ends)):
        w = cand.stage_params(i, j)
        details.append({"start": i, "end": j, "time_ps": cand.stage_time(k, i, j), "params": w,
                        "memory_bytes": cand.memory(k, i, j), "fits": cand.fits(k, i, j)})
    return details


