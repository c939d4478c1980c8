"""The search prunes with lower bounds: each must be a true lower bound of the exact
objective, on realistic and on adversarial networks (an outer tier faster than an inner
one spreads groups profitably, which once made a bound overshoot)."""

import numpy as np
import pytest

import nest
from nest import engine
from nest.dp_problem import SOLVED
from nest.planner import _candidate_bound, _partial_bound, _problem
from nest.presets.models import MODELS
from nest.space import RANK_ORDERS, SpaceLimits, enumerate_partials
from nest.specs import JobSpec, Tier
from nest.tables import CandidateArrays, Scenario


def _fast_outer_cluster():
    device = nest.load_device("h100-sxm")
    return nest.ClusterSpec("fast-outer", device, (
        Tier("node", 8, 100e9, 3e-6), Tier("pod", 4, 20e9, 5e-6), Tier("core", 4, 60e9, 4e-6)))


CASES = [
    ("qwen3-30b-a3b", lambda: nest.load_cluster("dgx-h100", devices=128), JobSpec(global_batch=256, seq_len=4096)),
    ("mixtral-8x7b", _fast_outer_cluster, JobSpec(global_batch=128, seq_len=4096)),
    ("llama2-13b", _fast_outer_cluster, JobSpec(global_batch=96, seq_len=8192)),
]


@pytest.mark.parametrize("name,cluster_of,job", CASES, ids=[c[0] for c in CASES])
def test_bounds_never_exceed_the_exact_objective(name, cluster_of, job):
    model, cluster = MODELS[name], cluster_of()
    scn = Scenario(model, cluster, job)
    partials = enumerate_partials(model, cluster, job, scn.num_nodes, SpaceLimits())
    table = scn.config_table(partials.configs, partials.config_arrays)
    rng = np.random.default_rng(7)
    pick = rng.choice(len(partials), size=min(60, len(partials)), replace=False)
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
    problem = _problem(scn, exact, capacity=1e30)  # memory aside: bounds are on time
    table_bound = problem.cand_lower_bound
    problem = type(problem)(**{**problem.__dict__, "cand_lower_bound": np.zeros(len(exact), dtype=np.int64)})
    result = engine.solve(problem, "cpp")
    solved = result.status == SOLVED
    assert solved.all()
    assert (lb2 <= result.objective).all()
    assert (lb1[cols[6]] <= result.objective).all()
    assert (table_bound <= result.objective).all()
    assert (lb2 > 0).all()  # bounds that actually bound something
