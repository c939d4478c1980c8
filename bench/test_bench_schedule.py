"""Speed of pricing a plan's schedule exactly (report ratios measured in one run).

nest prices every plan it returns (and every configuration ``nest evaluate`` and the
baselines cost) with the compiled schedule of :mod:`nest.schedule`. The goal: negligible
next to the search, and far faster than the event-driven simulator that checks it.

* deepseek-v3 on 1024 h100-spineleaf GPUs: nest's plan is 1F1B with p = 32, m = 288
  (18 432 forward and backward tasks); gpt3-175b on 1024 dgx-a100 GPUs: p = 8, v = 4.
* ``compiled``: building the tasks and running the compiled sweep; ``event``: the same
  tasks through :func:`nest.schedule.simulate.simulate_schedule`.
"""

import pytest

import nest
from nest.cost.scenario import Scenario
from nest.inputs.coerce import coerce_inputs
from nest.parallel import Candidate
from nest.schedule.simulate import simulate_candidate
from nest.schedule.step import candidate_timing

CASES = [("deepseek-v3", "h100-spineleaf", 1024), ("gpt3-175b", "dgx-a100", 1024)]


def _case(model, cluster, devices):
    c = nest.load_cluster(cluster, devices=devices)
    plan = nest.plan(model, c, limits=nest.SpaceLimits(zero=(0, 1), cp=(1,)))
    spec, c, job = coerce_inputs(model, c, None)
    scn = Scenario(spec, c, job)
    cand = Candidate.of_parallelism(plan.parallelism, scn.model.head_needs_embedding)
    return scn, cand, [len(s.layers) for s in plan.stages], plan


@pytest.mark.parametrize("engine", ["compiled", "event"])
@pytest.mark.parametrize("model,cluster,devices", CASES)
def test_price_schedule(benchmark, model, cluster, devices, engine):
    scn, cand, layers, plan = _case(model, cluster, devices)
    benchmark.group = f"schedule {model} p{cand.pp} v{cand.vp} m{scn.micro_batches(cand)}"
    if engine == "compiled":
        step = benchmark(lambda: candidate_timing(scn, cand, layers).step_s)
    else:
        step = benchmark(lambda: simulate_candidate(scn, cand, layers).step_time_s)
    assert step == plan.step_time_s
    benchmark.extra_info["plan_solve_time_s"] = plan.solve_time_s
