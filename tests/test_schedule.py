"""nest's step time: the exact schedule of the chosen split (nest.schedule)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

import nest
from nest import _core
from nest.cost.scenario import Scenario
from nest.parallel import Candidate
from nest.planner import simulate
from nest.schedule.simulate import simulate_schedule
from nest.schedule.step import candidate_step_s, candidate_timing, step_timing
from nest.schedule.tasks import EndTask, StageTasks


def _random_pipeline(rng: random.Random):
    pp = rng.randint(1, 7)
    vp = rng.choice([1, 1, 2, 3, 4]) if pp > 1 else 1
    m = pp * rng.randint(1, 4) if vp > 1 else rng.randint(1, 12)  # m < p, m = p, m > p

    def t(scale=1.0):
        return 0.0 if rng.random() < 0.2 else rng.random() * scale

    stages = [StageTasks(t(2), t(3), t(0.5), t(0.2), t(0.2)) for _ in range(pp * vp)]
    ends = []
    for _ in range(pp):
        reduce, optimizer, gather = t(), t(), t()
        ends.append([EndTask("reduce-scatter", reduce, True), EndTask("barrier", 0.0, False),
                     EndTask("optimizer", optimizer, False), EndTask("all-gather", gather, True)])
    return stages, pp, m, ends


def test_compiled_schedule_equals_the_event_simulation():
    """500 random pipelines (1F1B and interleaved, m below, at and above p, zero-time
    tasks and sends): the compiled sweep and the event simulation give the same finish of
    every rank and the same step, to the last bit."""
    rng = random.Random(5)
    for _ in range(500):
        stages, pp, m, ends = _random_pipeline(rng)
        sim = simulate_schedule(stages, pp, m, ends)
        compiled = step_timing(stages, pp, m, ends)
        python = step_timing(stages, pp, m, ends, engine="python")
        assert compiled.finish_s == python.finish_s
        assert compiled.step_s == python.step_s == sim.step_time_s
        assert compiled.pipeline_s == sim.pipeline_time_s


@pytest.mark.parametrize("pp,vp", [(1, 1), (4, 1), (4, 2), (3, 4), (8, 3)])
def test_equal_stages_take_the_classic_closed_forms(pp, vp):
    """Equal stages: 1F1B takes (m + p - 1) T (m >= p), interleaved 1F1B (m v + p - 1) T."""
    stage = StageTasks(0.25, 0.5, 0.125)
    for m in (pp, 2 * pp, 5 * pp):
        finish = step_timing([stage] * (pp * vp), pp, m).pipeline_s
        assert finish == pytest.approx(stage.time_s * (m * vp + pp - 1), rel=1e-12)


def test_every_rank_finishes_after_its_own_work():
    rng = random.Random(11)
    for _ in range(200):
        stages, pp, m, _ = _random_pipeline(rng)
        timing = step_timing(stages, pp, m)
        for d in range(pp):
            assert timing.finish_s[d] >= timing.work_s(d) * (1 - 1e-12) - 1e-12


@pytest.mark.parametrize("args,message", [
    ((2, 2, 3), "interleaving needs micro_batches (3) divisible by pp (2)"),
    ((0, 1, 3), "pp = 0, vp = 1, micro_batches = 3: must be positive"),
])
def test_compiled_schedule_rejects_inconsistent_sizes(args, message):
    pp, vp, _ = args
    times = [np.ones(max(pp * vp, 1))] * 5
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _core.pipeline_finish(*args, *times)


def test_compiled_schedule_rejects_bad_times():
    good = np.ones(4)
    with pytest.raises(ValueError, match="backward holds -1.000000: times must be finite and non-negative"):
        _core.pipeline_finish(2, 2, 2, good, good, -good, good, good)
    with pytest.raises(ValueError, match="send_forward has 3 entries, expected 4"):
        _core.pipeline_finish(2, 2, 2, good, good, good, np.ones(3), good)
    with pytest.raises(ValueError, match="forward must have dtype float64"):
        _core.pipeline_finish(2, 2, 2, np.ones(4, dtype=np.int64), good, good, good, good)
    with pytest.raises(ValueError, match="unknown engine 'fortran'"):
        step_timing([StageTasks(1.0, 1.0)], 1, 1, engine="fortran")


def test_plan_reports_the_schedule_not_the_closed_form():
    """gpt-1.7b on 1024 H100s at TP 2 interleaves 4 x 4 chunks of one or two blocks with 4
    micro-batches: the closed form prices every chunk as a two-block one and is 20% above
    the schedule; nest reports the schedule, which the event simulation confirms."""
    cluster = nest.load_cluster("dgx-h100", devices=1024)
    plan = nest.evaluate("gpt-1.7b", cluster, tp=2, pp=4, vp=4, dp=128, micro_batch=1, zero=1)
    p = plan.parallelism
    assert (p["pp"], p["vp"], p["num_microbatches"]) == (4, 4, 4)
    sim = simulate(plan, "gpt-1.7b", cluster)
    assert plan.step_time_s == pytest.approx(sim.step_time_s, rel=1e-12)
    assert plan.closed_form_step_time_s > 1.15 * plan.step_time_s
    doc = plan.to_dict()
    assert doc["closed_form_step_time_s"] == plan.closed_form_step_time_s
    tokens = plan.job["global_batch"] * plan.job["seq_len"]
    assert doc["throughput_tokens_per_s"] == pytest.approx(tokens / plan.step_time_s, rel=1e-12)


@pytest.mark.parametrize("kwargs", [
    dict(tp=8, pp=1, dp=8, micro_batch=1, sp=True, zero=1),
    dict(tp=2, pp=4, dp=8, micro_batch=1, sp=True, zero=0),
    dict(tp=2, pp=4, dp=8, vp=2, micro_batch=1, sp=True, zero=1, recompute="full"),
])
def test_breakdown_follows_the_schedule(kwargs):
    """The breakdown adds up to the step; the bubble is the busiest rank's idle time
    before the pipeline ends (none without a pipeline); the optimizer is the last rank's
    optimizer step; causes are m times the busiest rank's chunks."""
    cluster = nest.load_cluster("dgx-h100", devices=64)
    plan = nest.evaluate("llama2-7b", cluster, **kwargs)
    b = plan.breakdown_s
    assert sum(b.values()) == pytest.approx(plan.step_time_s, rel=1e-12)
    scn = Scenario(nest.load_model("llama2-7b"), cluster,
                   nest.JobSpec(global_batch=plan.job["global_batch"], seq_len=plan.job["seq_len"]))
    cand = Candidate.of_parallelism(plan.parallelism, scn.model.head_needs_embedding)
    timing = candidate_timing(scn, cand, [len(s.layers) for s in plan.stages])
    assert timing.step_s == plan.step_time_s
    busiest = max(range(cand.pp), key=timing.work_s)
    assert b["bubble"] == pytest.approx(timing.pipeline_s - timing.work_s(busiest), rel=1e-12, abs=1e-12)
    assert b["bubble"] >= 0
    if cand.pp == 1:
        assert b["bubble"] <= 1e-12 and b["pp_comm"] == 0
    else:
        assert b["bubble"] > 0 and b["pp_comm"] > 0
    last = max(range(cand.pp), key=timing.rank_end_s)
    optimizer = [task.seconds for task, _ in timing.end_runs[last] if task.kind == "optimizer"]
    assert b["optimizer"] == pytest.approx(sum(optimizer), rel=1e-12)
    steady = sum(b[k] for k in ("compute", "host", "tp_comm", "cp_comm", "ep_comm", "pp_comm"))
    exposed_end = plan.step_time_s - timing.pipeline_s - b["optimizer"]
    assert steady + b["dp_comm"] - exposed_end == pytest.approx(timing.work_s(busiest), rel=1e-9)


def test_engines_report_the_same_step():
    cluster = nest.load_cluster("dgx-h100", devices=64)
    kwargs = dict(tp=2, pp=4, dp=8, vp=2, micro_batch=1, sp=True, zero=1)
    cpp = nest.evaluate("llama2-7b", cluster, **kwargs)
    python = nest.evaluate("llama2-7b", cluster, engine="python", **kwargs)
    assert cpp.step_time_s == python.step_time_s
    assert cpp.closed_form_step_time_s == python.closed_form_step_time_s


@pytest.mark.slow
def test_schedule_ranking_is_the_exhaustive_optimum():
    """bert-large on 64 h100-spineleaf GPUs: every one of the 22 146 candidates solved
    without pruning and its DP split timed exactly; the fastest is the search's winner,
    and nest's plan (the finalists polished) is at least as fast. It beats the closed
    form's optimum by 2% with the same configuration (PP 2, micro-batch 8: at the host's
    pace per layer few large micro-batches win) on another split."""
    from nest.dp import engine as engine
    from nest.dp.problem import SOLVED
    from nest.parallel import SpaceLimits
    from nest.search.problems import problem as dp_problem
    from nest.search.space import enumerate_partials, expand

    cluster = nest.load_cluster("h100-spineleaf", devices=64)
    model = nest.load_model("bert-large")
    job = nest.JobSpec(global_batch=model.default_global_batch, seq_len=model.seq_len)
    scn = Scenario(model, cluster, job)
    partials = enumerate_partials(model, cluster, job, scn.num_nodes, SpaceLimits())
    cands = expand(partials, np.arange(len(partials)), SpaceLimits())
    problem = dp_problem(scn, cands)
    problem = type(problem)(**{**problem.__dict__, "cand_lower_bound": np.zeros(len(cands), dtype=np.int64)})
    result = engine.solve(problem, "cpp")
    solved = np.flatnonzero(result.status == SOLVED)
    steps = []
    for n in solved.tolist():
        start = int(problem.pos_offset[n])
        ends = [0] + result.ends[start:start + problem.stages(n)].tolist()
        steps.append(candidate_step_s(scn, cands[n], np.diff(ends).tolist()))
    closed_form = nest.plan("bert-large", cluster, ranking="closed-form")
    plan = nest.plan("bert-large", cluster)
    assert round(closed_form.closed_form_step_time_s * 1e12) == int(result.objective[solved].min())
    from nest.search.problems import ends_of
    from nest.search.search import search

    found = search(scn)  # before polishing: the fastest DP split of all
    split = np.diff([0] + ends_of(found.problem, found.result, found.local)).tolist()
    assert candidate_step_s(scn, found.candidate, split) == pytest.approx(min(steps), rel=1e-12)
    assert plan.step_time_s <= min(steps) * (1 + 1e-12)  # polishing the finalists only helps
    assert plan.step_time_s < closed_form.step_time_s * 0.98
    assert plan.parallelism == closed_form.parallelism
    assert [len(s.layers) for s in plan.stages] != [len(s.layers) for s in closed_form.stages]


def test_candidate_step_equals_the_timing():
    cluster = nest.load_cluster("dgx-h100", devices=64)
    plan = nest.evaluate("llama2-7b", cluster, tp=2, pp=4, dp=8, vp=2, micro_batch=1, sp=True, zero=1)
    scn = Scenario(nest.load_model("llama2-7b"), cluster,
                   nest.JobSpec(global_batch=plan.job["global_batch"], seq_len=plan.job["seq_len"]))
    cand = Candidate.of_parallelism(plan.parallelism, scn.model.head_needs_embedding)
    layers = [len(s.layers) for s in plan.stages]
    assert candidate_step_s(scn, cand, layers) == candidate_timing(scn, cand, layers).step_s == plan.step_time_s


def test_ranking_is_validated():
    with pytest.raises(nest.SpecError, match=r"ranking = 'fastest': must be one of schedule, closed-form"):
        nest.plan("bert-large", nest.load_cluster("dgx-h100", devices=8), ranking="fastest")


def test_cli_ranking(capsys):
    from nest.cli import main

    args = ["plan", "--model", "bert-large", "--cluster", "h100-spineleaf", "--devices", "64", "--json"]
    assert main(args) == 0
    schedule = json.loads(capsys.readouterr().out)
    assert main(args + ["--ranking", "closed-form"]) == 0
    closed_form = json.loads(capsys.readouterr().out)
    assert schedule["step_time_s"] < closed_form["step_time_s"]
    assert schedule["closed_form_step_time_s"] > closed_form["closed_form_step_time_s"]
    assert main(args + ["--ranking", "fastest"]) == 2
    assert "--ranking: invalid choice: 'fastest'" in capsys.readouterr().err


def test_polished_split_is_a_local_optimum():
    """bert-large on 256 h100-spineleaf GPUs, PP 4 with 2 micro-batches (blocks at the
    host's pace): the DP's split [7, 6, 6, 7] minimises the closed form; on the schedule
    [5, 8, 8, 5] is 6.5% faster
    (the first and last ranks also sync the embedding and the output layer, and finish
    their pipeline work early). The polished split fits, no single boundary move makes it
    faster, and nest plan returns it."""
    from nest.dp.reference import stage_details
    from nest.search.problems import problem as dp_problem
    from nest.search.search import polish_split

    cluster = nest.load_cluster("h100-spineleaf", devices=256)
    kwargs = dict(tp=1, pp=4, dp=64, micro_batch=2, zero=1)
    dp_split = nest.evaluate("bert-large", cluster, ranking="closed-form", **kwargs)
    polished = nest.evaluate("bert-large", cluster, **kwargs)
    assert [len(s.layers) for s in dp_split.stages] == [7, 6, 6, 7]
    assert [len(s.layers) for s in polished.stages] == [5, 8, 8, 5]
    assert polished.step_time_s < 0.97 * dp_split.step_time_s
    assert nest.plan("bert-large", cluster).step_time_s <= polished.step_time_s
    scn = Scenario(nest.load_model("bert-large"), cluster, nest.JobSpec(global_batch=256, seq_len=512))
    cand = Candidate.of_parallelism(polished.parallelism, scn.model.head_needs_embedding)
    problem = dp_problem(scn, [cand])
    ends = [5, 13, 21, 26]
    assert polish_split(scn, cand, problem, 0, ends) == ends
    for k in range(3):
        for delta in (-1, 1):
            trial = list(ends)
            trial[k] += delta
            if all(d["fits"] for d in stage_details(problem, 0, trial)):
                assert candidate_step_s(scn, cand, np.diff([0] + trial).tolist()) >= polished.step_time_s


def test_cli_evaluate_ranking(capsys):
    from nest.cli import main

    args = ["evaluate", "--model", "bert-large", "--cluster", "h100-spineleaf", "--devices", "256", "--tp", "1",
            "--pp", "4", "--dp", "64", "--mbs", "2", "--zero", "1", "--json"]
    layers = {}
    for ranking in ("schedule", "closed-form"):
        assert main(args + ["--ranking", ranking]) == 0
        layers[ranking] = [len(s["layers"]) for s in json.loads(capsys.readouterr().out)["stages"]]
    assert layers == {"schedule": [5, 8, 8, 5], "closed-form": [7, 6, 6, 7]}


def test_text_report_shows_both_times(capsys):
    from nest.cli import main

    assert main(["plan", "--model", "bert-large", "--cluster", "h100-spineleaf", "--devices", "64"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("step time"))
    plan = nest.plan("bert-large", nest.load_cluster("h100-spineleaf", devices=64))
    assert f"{plan.step_time_s:10.4f} s" in line
    assert f"(exact schedule; the stage DP's closed form of this split: {plan.closed_form_step_time_s:.4f} s)" in line


def test_runners_up_are_polished_so_more_options_never_slow_the_plan():
    """llama3-70b on 512 H100s: the planner polishes the best pipelines too, so the search
    with every recomputation module returns a plan at least as fast as with the classic
    modes only, and it is the fastest polished finalist. (Before the activation terms
    were corrected a runner-up, TP 4 PP 2 VP 8, won here after polishing; with them the
    first finalist is fastest, 6.3380 s against 6.3390 s, and no preset scenario tried
    shows a runner-up winning.)"""
    from nest.parallel import CLASSIC_RECOMPUTE, SpaceLimits
    from nest.search.search import FINALISTS, polish_split, search

    cluster = nest.load_cluster("dgx-h100", devices=512)
    every = nest.plan("llama3-70b", cluster)
    classic = nest.plan("llama3-70b", cluster, limits=SpaceLimits(recompute=CLASSIC_RECOMPUTE))
    assert every.step_time_s <= classic.step_time_s
    scn = Scenario(nest.load_model("llama3-70b"), cluster, nest.JobSpec(global_batch=512, seq_len=8192))
    found = search(scn)
    assert 1 <= len(found.runners_up) <= FINALISTS - 1
    assert all(o.candidate.pp > 1 for o in found.runners_up)
    polished = [candidate_step_s(scn, o.candidate, np.diff(
        [0] + polish_split(scn, o.candidate, o.problem, o.local, o.split())).tolist())
        for o in [found, *found.runners_up]]
    assert every.step_time_s == pytest.approx(min(polished), rel=1e-12)
