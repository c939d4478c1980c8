"""Checks shared by the planner tests: the exhaustive optimum of a small job and the
validity of the search's lower bounds (imported by test modules; pytest puts this
directory on sys.path)."""

from __future__ import annotations

import numpy as np
import pytest

import nest
from nest import engine
from nest.dp_problem import SOLVED
from nest.dp_reference import brute_force
from nest import pipeline
from nest.planner import (_candidate_bound, _ends, _partial_bound, _problem, _Ranking, _table_bound,
                          _work_floor_ps, search)
from nest.schedule import candidate_step_s, candidate_timing
from nest.space import RANK_ORDERS, SpaceLimits, enumerate_partials, expand
from nest.tables import PS, CandidateArrays, Scenario


def exhaustive_optimum(model, cluster, job, limits: SpaceLimits) -> int:
    """Every candidate of ``limits`` (dominated options included), every split, no
    pruning: the true optimum of the closed form in integer picoseconds."""
    return exhaustive_plans(model, cluster, job, limits)[0]


def exhaustive_plans(model, cluster, job, limits: SpaceLimits) -> tuple[int, float]:
    """``(closed-form optimum in picoseconds, fastest schedule in seconds)`` without
    pruning: the closed form's optimum over every candidate and split (brute force), and
    the fastest exact schedule (:mod:`nest.schedule`) of the DP's split of any
    candidate."""
    scn = Scenario(model, cluster, job)
    partials = enumerate_partials(model, cluster, job, scn.num_nodes, limits)
    cands = expand(partials, np.arange(len(partials)), limits)
    problem = _problem(scn, cands)
    best = None
    for n in range(len(cands)):
        found = brute_force(problem, n)
        if found is not None and (best is None or found[0] < best):
            best = found[0]
    unpruned = type(problem)(**{**problem.__dict__, "cand_lower_bound": np.zeros(len(cands), dtype=np.int64)})
    result = engine.solve(unpruned, "cpp")
    steps = []
    for n in np.flatnonzero(result.status == SOLVED).tolist():
        start = int(problem.pos_offset[n])
        ends = [0] + result.ends[start:start + problem.stages(n)].tolist()
        steps.append(candidate_timing(scn, cands[n], np.diff(ends).tolist()).step_s)
    return best, min(steps)


def assert_plans_are_optimal(model, cluster, job, limits: SpaceLimits):
    """Both rankings against :func:`exhaustive_plans`: ``ranking="closed-form"`` returns
    the closed form's optimum; the default ranking's candidate, before its split is
    polished, has the fastest schedule of any candidate's DP split, and polishing only
    makes it faster. Returns the plan."""
    optimum, fastest = exhaustive_plans(model, cluster, job, limits)
    closed_form = nest.plan(model, cluster, job, ranking="closed-form")
    assert round(closed_form.closed_form_step_time_s * PS) == optimum
    scn = Scenario(model, cluster, job)
    found = search(scn)
    layers = np.diff([0] + _ends(found.problem, found.result, found.local)).tolist()
    assert candidate_step_s(scn, found.candidate, layers) == pytest.approx(fastest, rel=1e-12)
    plan = nest.plan(model, cluster, job)
    assert plan.step_time_s <= fastest * (1 + 1e-12)
    assert plan.step_time_s <= closed_form.step_time_s
    return plan


def assert_bounds_below_objective(model, cluster, job, *, seed: int, sample: int) -> None:
    """lb1 (partials), lb2 (full candidates) and the table bound of ``sample`` random
    partials, expanded over every ZeRO stage and rank order, never exceed the exact
    objective the DP finds for them (memory aside: the bounds are on time), and lb2
    bounds something."""
    scn = Scenario(model, cluster, job)
    partials = enumerate_partials(model, cluster, job, scn.num_nodes, SpaceLimits())
    table = scn.config_table(partials.configs, partials.config_arrays)
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(partials), size=min(sample, len(partials)), replace=False)
    lb1 = _partial_bound(scn, table, partials, pick, RANK_ORDERS)
    rows = []
    for i, n in enumerate(pick):
        for zero in (1, 2, 3) if partials.dp[n] * table.configs[partials.config[n]].cp > 1 else (0,):
            for order in range(len(RANK_ORDERS)):
                rows.append((partials.config[n], partials.pp[n], partials.dp[n], partials.vp[n], zero, order, i))
    cols = np.array(rows, dtype=np.int64).T
    cands = CandidateArrays(cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], RANK_ORDERS)
    lb2 = _candidate_bound(scn, table, cands)
    exact = [cands.candidate(table, i) for i in range(len(cands))]
    problem = _problem(scn, exact, capacity=1e30)
    table_bound = problem.cand_lower_bound
    problem = type(problem)(**{**problem.__dict__, "cand_lower_bound": np.zeros(len(exact), dtype=np.int64)})
    result = engine.solve(problem, "cpp")
    assert (result.status == SOLVED).all()
    assert (lb2 <= result.objective).all()
    assert (lb1[cols[6]] <= result.objective).all()
    assert (table_bound <= result.objective).all()
    assert (lb2 > 0).all()
    # the "schedule" ranking's bounds (every candidate by the schedule floor) stay below
    # the exact schedule of the DP's split, and so does the busiest rank's work
    floor = _Ranking(margin=None)
    sched_lb1 = _partial_bound(scn, table, partials, pick, RANK_ORDERS, floor)
    sched_lb2 = _candidate_bound(scn, table, cands, floor)
    micro = scn.job.micro_batches(cands.dp, table.arrays.micro_batch[cands.config])
    sched_table = _table_bound(pipeline.with_schedule(scn.price(table, cands), micro, cands.vp), floor)
    for n, cand in enumerate(exact):
        layers = np.diff([0] + _ends(problem, result, n)).tolist()
        step = round(candidate_step_s(scn, cand, layers) * PS)
        work = _work_floor_ps(problem, result, n, cand.pp, scn.micro_batches(cand))
        assert max(sched_lb1[cols[6][n]], sched_lb2[n], sched_table[n], work) <= step, cand
