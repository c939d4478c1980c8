"""Checks shared by the planner tests: the exhaustive optimum of a small job and the
validity of the search's lower bounds (imported by test modules; pytest puts this
directory on sys.path)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import nest
from nest.cost.nodes import NodeCostModel
from nest.cost.pricing import price
from nest.cost.scenario import Scenario
from nest.dp import engine
from nest.dp.problem import SOLVED
from nest.dp.reference import brute_force
from nest.parallel import RANK_ORDERS, CandidateArrays, ConfigArrays, LayerConfig, SpaceLimits
from nest.schedule.step import candidate_step_s, candidate_timing
from nest.search.floors import Ranking, candidate_bound, partial_bound, table_bound
from nest.search.problems import dp_rows, ends_of, problem
from nest.search.search import search, work_floor_ps
from nest.search.space import enumerate_partials, expand
from nest.units import PS


def node_row(costs: NodeCostModel, kind: str, cfg: LayerConfig) -> SimpleNamespace:
    """Row 0 of the one-row cost table of ``cfg``: every column as an attribute, plus
    ``model_flops``."""
    arrays = ConfigArrays.of([cfg])
    row = SimpleNamespace(**{name: column[0] for name, column in costs.table(kind, arrays).items()})
    row.model_flops = costs.model_flops(kind, arrays)[0]
    return row


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
    dp_problem = problem(scn, cands)
    best = None
    for n in range(len(cands)):
        found = brute_force(dp_problem, n)
        if found is not None and (best is None or found[0] < best):
            best = found[0]
    unpruned = type(dp_problem)(**{**dp_problem.__dict__, "cand_lower_bound": np.zeros(len(cands), dtype=np.int64)})
    result = engine.solve(unpruned, "cpp")
    steps = []
    for n in np.flatnonzero(result.status == SOLVED).tolist():
        start = int(dp_problem.pos_offset[n])
        ends = [0] + result.ends[start:start + dp_problem.stages(n)].tolist()
        steps.append(candidate_timing(scn, cands[n], np.diff(ends).tolist()).step_s)
    return best, min(steps)


def assert_plans_are_optimal(model, cluster, job, limits: SpaceLimits, searched: SpaceLimits | None = None):
    """Both rankings against :func:`exhaustive_plans`: ``ranking="closed-form"`` returns
    the closed form's optimum; the default ranking's candidate, before its split is
    polished, has the fastest schedule of any candidate's DP split, and polishing only
    makes it faster. The searches run the default space but for ``limits.offload`` (the
    exhaustive space's dominated options aside, the same), or ``searched``. Returns the plan."""
    optimum, fastest = exhaustive_plans(model, cluster, job, limits)
    same = SpaceLimits(offload=limits.offload) if searched is None else searched
    closed_form = nest.plan(model, cluster, job, ranking="closed-form", limits=same)
    assert round(closed_form.closed_form_step_time_s * PS) == optimum
    scn = Scenario(model, cluster, job)
    found = search(scn, same)
    layers = np.diff([0] + ends_of(found.problem, found.result, found.local)).tolist()
    assert candidate_step_s(scn, found.candidate, layers) == pytest.approx(fastest, rel=1e-12)
    plan = nest.plan(model, cluster, job, limits=same)
    assert plan.step_time_s <= fastest * (1 + 1e-12)
    assert plan.step_time_s <= closed_form.step_time_s
    return plan


def assert_bounds_below_objective(model, cluster, job, *, seed: int, sample: int,
                                  limits: SpaceLimits = SpaceLimits()) -> None:
    """lb1 (partials), lb2 (full candidates) and the table bound of ``sample`` random
    partials of the space ``limits`` gives, expanded over every ZeRO stage and rank order,
    never exceed the exact objective the DP finds for them (memory aside: the bounds are on
    time), and lb2 bounds something."""
    scn = Scenario(model, cluster, job)
    partials = enumerate_partials(model, cluster, job, scn.num_nodes, limits)
    table = scn.config_table(partials.configs, partials.config_arrays)
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(partials), size=min(sample, len(partials)), replace=False)
    lb1 = partial_bound(scn, table, partials, pick, RANK_ORDERS)
    rows = []
    for i, n in enumerate(pick):
        for zero in (1, 2, 3) if partials.dp[n] * table.configs[partials.config[n]].cp > 1 else (0,):
            for order in range(len(RANK_ORDERS)):
                rows.append((partials.config[n], partials.pp[n], partials.dp[n], partials.vp[n], zero, order, i))
    cols = np.array(rows, dtype=np.int64).T
    cands = CandidateArrays(cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], RANK_ORDERS)
    lb2 = candidate_bound(scn, table, cands)
    exact = [cands.candidate(table.configs, i) for i in range(len(cands))]
    dp_problem = problem(scn, exact, capacity=1e30)
    table_floor = dp_problem.cand_lower_bound
    dp_problem = type(dp_problem)(**{**dp_problem.__dict__, "cand_lower_bound": np.zeros(len(exact), dtype=np.int64)})
    result = engine.solve(dp_problem, "cpp")
    assert (result.status == SOLVED).all()
    assert (lb2 <= result.objective).all()
    assert (lb1[cols[6]] <= result.objective).all()
    assert (table_floor <= result.objective).all()
    assert (lb2 > 0).all()
    # the "schedule" ranking's bounds (every candidate by the schedule floor) stay below
    # the exact schedule of the DP's split, and so does the busiest rank's work
    floor = Ranking(margin=None)
    sched_lb1 = partial_bound(scn, table, partials, pick, RANK_ORDERS, floor)
    sched_lb2 = candidate_bound(scn, table, cands, floor)
    sched_table = table_bound(dp_rows(price(scn, table, cands)), floor)
    for n, cand in enumerate(exact):
        layers = np.diff([0] + ends_of(dp_problem, result, n)).tolist()
        step = round(candidate_step_s(scn, cand, layers) * PS)
        work = work_floor_ps(dp_problem, result, n, cand.pp, scn.micro_batches(cand))
        assert max(sched_lb1[cols[6][n]], sched_lb2[n], sched_table[n], work) <= step, cand
