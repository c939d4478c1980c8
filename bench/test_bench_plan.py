"""Speed goals of the foundation (report ratios measured in one run; never asserted).

* ``nest plan --model gpt3-175b --cluster dgx-a100 --devices 1024``: solve time < 1 s.
* The C++ DP >= 100x faster than the Python reference on identical tables.
* Growth of the solve time from 64 to 16384 devices.
* Ranking by the exact schedule (default) against ranking by the closed form.
* The search restricted to a framework against the whole space.
* Optimizer offload: none, the default (where nothing else fits) and every fraction everywhere.
* Interleaved candidates: the DP with the last virtual stage priced apart against the
  same candidates under SC'21's ``(m v + p - 1) x slowest`` (one max).
"""

import numpy as np
import pytest

import nest
from nest.cost.scenario import Scenario
from nest.planner import clear_shared_scenarios
from nest.dp import engine as engine
from nest.search.problems import problem as dp_problem
from nest.search.space import enumerate_partials, expand
from nest.specs import JobSpec


@pytest.mark.parametrize("devices", [64, 256, 1024, 4096, 16384])
def test_plan_gpt3_dgx_a100(benchmark, devices):
    cluster = nest.load_cluster("dgx-a100", devices=devices)
    benchmark.group = "plan gpt3-175b dgx-a100"
    # every round from scratch, as a process plans (a later call on equal specs reuses the
    # first one's cost tables and placement prices: nest.planner.SHARED_SCENARIOS)
    plan = benchmark.pedantic(nest.plan, args=("gpt3-175b", cluster), setup=clear_shared_scenarios, rounds=3,
                              iterations=1)
    benchmark.extra_info["solve_time_s"] = plan.solve_time_s
    benchmark.extra_info["candidates_evaluated"] = plan.candidates_evaluated
    benchmark.extra_info["parallelism"] = plan.parallelism


def _identical_tables(count: int = 64, interleaved: bool = False):
    """``count`` pipelined candidates (pp >= 4; 1F1B or interleaved) of gpt-1.7b on 64
    A100s, with pruning disabled so every engine solves every one."""
    model, cluster = nest.load_model("gpt-1.7b"), nest.load_cluster("dgx-a100", devices=64)
    scn = Scenario(model, cluster, JobSpec(global_batch=512, seq_len=2048))
    partials = enumerate_partials(model, cluster, scn.job, scn.num_nodes)
    schedule = partials.vp > 1 if interleaved else partials.vp == 1
    index = np.flatnonzero((partials.pp >= 4) & schedule)[:count]
    problem = dp_problem(scn, expand(partials, index)[:count])
    from dataclasses import replace
    return replace(problem, cand_lower_bound=np.zeros_like(problem.cand_lower_bound))


@pytest.mark.parametrize("which", ["cpp-1-thread", "cpp", "python"])
def test_dp_engines_identical_tables(benchmark, which):
    problem = _identical_tables()
    benchmark.group = "stage DP on identical tables (64 candidates, pp >= 4, 26 nodes)"
    name, threads = ("cpp", 1) if which == "cpp-1-thread" else (which, None)
    rounds = 1 if name == "python" else 20
    result = benchmark.pedantic(engine.solve, args=(problem, name, threads), rounds=rounds, iterations=1)
    assert result.evaluated == 64


@pytest.mark.parametrize("objective", ["last-apart", "one-max"])
def test_dp_interleaved_objective(benchmark, objective):
    from dataclasses import replace
    problem = _identical_tables(interleaved=True)
    assert (problem.cand_head_scale > 0).all()
    if objective == "one-max":  # (m v + p - 1) x slowest virtual stage
        problem = replace(problem, cand_scale=problem.cand_scale + problem.cand_head_scale,
                          cand_head_scale=np.zeros_like(problem.cand_head_scale))
    benchmark.group = "stage DP, 64 interleaved candidates of gpt-1.7b (C++, 1 thread)"
    result = benchmark.pedantic(engine.solve, args=(problem, "cpp", 1), rounds=20, iterations=1)
    assert result.evaluated == len(problem.cand_scale)


RANKING_CASES = [("gpt3-175b", "dgx-a100", 1024), ("llama3-70b", "dgx-h100", 512),
                 ("mixtral-8x7b", "h100-spineleaf", 1024), ("deepseek-v3", "dgx-h100", 2048),
                 ("gpt-1t", "dgx-a100", 3072), ("gpt-7.5b", "dgx-h100", 1024)]


@pytest.mark.parametrize("ranking", ["closed-form", "schedule"])
@pytest.mark.parametrize("model,cluster,devices", RANKING_CASES)
def test_plan_ranking(benchmark, model, cluster, devices, ranking):
    """Ranking candidates by the exact schedule of their split (the default) against the
    closed form: solve time, and the step time each finds (in extra_info)."""
    c = nest.load_cluster(cluster, devices=devices)
    benchmark.group = f"plan {model} {cluster} {devices}: ranking"
    plan = benchmark.pedantic(nest.plan, args=(model, c), kwargs={"ranking": ranking}, rounds=3, iterations=1)
    benchmark.extra_info["step_time_s"] = plan.step_time_s
    benchmark.extra_info["closed_form_step_time_s"] = plan.closed_form_step_time_s
    benchmark.extra_info["candidates_evaluated"] = plan.candidates_evaluated


FRAMEWORK_CASES = [("llama3-70b", "dgx-h100", 512), ("gpt3-175b", "dgx-a100", 1024), ("deepseek-v3", "dgx-h100", 2048)]


@pytest.mark.parametrize("fw", ["any", "megatron", "deepspeed", "torchtitan"])
@pytest.mark.parametrize("model,cluster,devices", FRAMEWORK_CASES)
def test_plan_framework(benchmark, model, cluster, devices, fw):
    """The search restricted to a framework (its limits narrow the enumeration, its rules
    mask the full candidates, torchtitan's own splits replace the DP's) against the whole
    space: solve time, and the step time each finds (in extra_info)."""
    spec = nest.load_model(model)
    if fw == "torchtitan" and model == "gpt3-175b":
        pytest.skip("torchtitan launches its registry models only")
    c = nest.load_cluster(cluster, devices=devices)
    job = nest.job_spec(spec, framework=fw)
    benchmark.group = f"plan {model} {cluster} {devices}: framework"
    plan = benchmark.pedantic(nest.plan, args=(spec, c, job), rounds=3, iterations=1)
    benchmark.extra_info["step_time_s"] = plan.step_time_s
    benchmark.extra_info["parallelism"] = plan.parallelism
    benchmark.extra_info["candidates_evaluated"] = plan.candidates_evaluated


OFFLOAD_CASES = [("gpt3-175b", "dgx-a100", 1024), ("llama3-70b", "dgx-h100", 64), ("gpt3-175b", "dgx-a100", 64)]
OFFLOAD_SPACES = {"none": (0.0,), "when-needed": None, "everywhere": (0.0, 0.25, 0.5, 0.75, 1.0)}


@pytest.mark.parametrize("space", list(OFFLOAD_SPACES))
@pytest.mark.parametrize("model,cluster,devices", OFFLOAD_CASES)
def test_plan_offload(benchmark, model, cluster, devices, space):
    """Optimizer offload as a search dimension: without it, the default (a fraction only
    where a configuration fits no other way) and every fraction everywhere; solve time,
    and the step each finds (in extra_info)."""
    c = nest.load_cluster(cluster, devices=devices)
    limits = nest.SpaceLimits(offload=OFFLOAD_SPACES[space])
    benchmark.group = f"plan {model} {cluster} {devices}: optimizer offload"
    plan = benchmark.pedantic(nest.plan, args=(model, c), kwargs={"limits": limits}, rounds=3, iterations=1)
    benchmark.extra_info["step_time_s"] = plan.step_time_s
    benchmark.extra_info["offload"] = plan.parallelism["optimizer_offload_fraction"]
    benchmark.extra_info["candidates_evaluated"] = plan.candidates_evaluated


ACTIVATION_SPACES = {"none": None, "eighths": (0, 4, 8, 12, 16, 20, 24, 28), "every-layer": tuple(range(32))}


@pytest.mark.parametrize("space", list(ACTIVATION_SPACES))
def test_plan_activation_offload(benchmark, space):
    """Activation offload as a search dimension (llama3-8b at 16k tokens on one DGX H100,
    where it beats recomputation): without it, every eighth of the layers, every count;
    solve time, and the step each finds (in extra_info)."""
    c = nest.load_cluster("dgx-h100", devices=8)
    job = nest.JobSpec(global_batch=32, seq_len=16384)
    limits = nest.SpaceLimits(act_offload=ACTIVATION_SPACES[space])
    benchmark.group = "plan llama3-8b dgx-h100 8 at 16k: activation offload"
    plan = benchmark.pedantic(nest.plan, args=("llama3-8b", c, job), kwargs={"limits": limits}, rounds=3,
                              iterations=1)
    benchmark.extra_info["step_time_s"] = plan.step_time_s
    benchmark.extra_info["activation_offload_layers"] = plan.parallelism["activation_offload_layers"]
