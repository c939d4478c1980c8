"""The event-driven step simulator: hand-computed schedules, the closed form, presets."""

import random

import pytest

import nest
from nest.cost.scenario import Scenario
from nest.parallel import Candidate
from nest.planner import simulate
from nest.presets.models import MODELS
from nest.report.text import render_simulation
from nest.report.timeline import timeline_png
from nest.schedule.order import interleaved_order, one_f_one_b_order
from nest.schedule.simulate import simulate_candidate, simulate_schedule
from nest.schedule.tasks import EndTask, StageTasks
from nest.studies.baselines import manual_config


def _ops(result, device):
    return [(e.kind, e.stage, e.micro_batch, e.start_s, e.end_s) for e in result.timelines[device]]


# -- schedules and hand-computed timelines -------------------------------------------------


def test_megatron_orders():
    # 1F1B, 3 stages, 4 micro-batches: p - d - 1 warm-up forwards, then 1F1B, then drain.
    assert one_f_one_b_order(0, 3, 4) == [("F", 0, 0), ("F", 0, 1), ("F", 0, 2), ("B", 0, 0),
                                          ("F", 0, 3), ("B", 0, 1), ("B", 0, 2), ("B", 0, 3)]
    assert one_f_one_b_order(2, 3, 4) == [("F", 2, 0), ("B", 2, 0), ("F", 2, 1), ("B", 2, 1),
                                          ("F", 2, 2), ("B", 2, 2), ("F", 2, 3), ("B", 2, 3)]
    # Interleaved, p = 2, v = 2, m = 4 on device 0: warm-up 2 (p - d - 1) + (v - 1) p = 4
    # forwards in groups of p micro-batches per chunk; backwards take chunks in reverse.
    order = interleaved_order(0, 2, 2, 4)
    assert order[:4] == [("F", 0, 0), ("F", 0, 1), ("F", 2, 0), ("F", 2, 1)]
    assert order[4:8] == [("F", 0, 2), ("B", 2, 0), ("F", 0, 3), ("B", 2, 1)]
    assert sorted(order) == sorted({(k, q, j) for k in "FB" for q in (0, 2) for j in range(4)})
    with pytest.raises(ValueError):
        interleaved_order(0, 2, 2, 3)


def test_two_stage_1f1b_by_hand():
    """p = 2, m = 3; stage 0: F 1, B 2, forward send 0.5; stage 1: F 2, B 3, gradient send 0.25."""
    stages = [StageTasks(forward_s=1, backward_s=2, send_forward_s=0.5),
              StageTasks(forward_s=2, backward_s=3, send_backward_s=0.25)]
    r = simulate_schedule(stages, pp=2, micro_batches=3)
    assert _ops(r, 0) == [
        ("forward", 0, 0, 0, 1), ("send-forward", 0, 0, 1, 1.5),
        ("forward", 0, 1, 1.5, 2.5), ("send-forward", 0, 1, 2.5, 3),
        ("backward", 0, 0, 6.75, 8.75),  # waits for stage 1's gradient (6.5 + 0.25)
        ("forward", 0, 2, 8.75, 9.75), ("send-forward", 0, 2, 9.75, 10.25),
        ("backward", 0, 1, 12, 14), ("backward", 0, 2, 17.25, 19.25)]
    assert _ops(r, 1) == [
        ("forward", 1, 0, 1.5, 3.5), ("backward", 1, 0, 3.5, 6.5), ("send-backward", 1, 0, 6.5, 6.75),
        ("forward", 1, 1, 6.75, 8.75), ("backward", 1, 1, 8.75, 11.75),
        ("send-backward", 1, 1, 11.75, 12), ("forward", 1, 2, 12, 14), ("backward", 1, 2, 14, 17),
        ("send-backward", 1, 2, 17, 17.25)]
    assert r.step_time_s == 19.25
    # The closed form prices the bubble at the slowest stage: (m + p - 1) x 5.25 = 21.
    assert (3 + 2 - 1) * max(s.time_s for s in stages) == 21


def test_three_stage_unequal_by_hand():
    """p = 3, m = 2, F = (1, 2, 1), B = (1, 3, 2), no transfers: 13 (closed form 20)."""
    stages = [StageTasks(1, 1), StageTasks(2, 3), StageTasks(1, 2)]
    r = simulate_schedule(stages, pp=3, micro_batches=2)
    assert [(e.kind[0], e.micro_batch, e.start_s, e.end_s) for e in r.timelines[0]] == [
        ("f", 0, 0, 1), ("f", 1, 1, 2), ("b", 0, 9, 10), ("b", 1, 12, 13)]
    assert [(e.kind[0], e.micro_batch, e.start_s, e.end_s) for e in r.timelines[1]] == [
        ("f", 0, 1, 3), ("f", 1, 3, 5), ("b", 0, 6, 9), ("b", 1, 9, 12)]
    assert [(e.kind[0], e.micro_batch, e.start_s, e.end_s) for e in r.timelines[2]] == [
        ("f", 0, 3, 4), ("b", 0, 4, 6), ("f", 1, 6, 7), ("b", 1, 7, 9)]
    assert r.step_time_s == 13


def test_interleaved_by_hand():
    """p = 2, v = 2, m = 2, every chunk F 1, B 2: (m v + p - 1) 3 = 15. Rank 0 warms up
    with all 2 (p - 1) + (v - 1) p = 4 forwards, rank 1 with (v - 1) p = 2 (core_v0.14.0
    has no all-forward special case for m = p)."""
    stages = [StageTasks(1, 2) for _ in range(4)]
    r = simulate_schedule(stages, pp=2, micro_batches=2)
    assert [(e.kind[0], e.stage, e.micro_batch, e.start_s) for e in r.timelines[0]] == [
        ("f", 0, 0, 0), ("f", 0, 1, 1), ("f", 2, 0, 2), ("f", 2, 1, 3),
        ("b", 2, 0, 6), ("b", 2, 1, 9), ("b", 0, 0, 11), ("b", 0, 1, 13)]
    assert [(e.kind[0], e.stage, e.micro_batch, e.start_s) for e in r.timelines[1]] == [
        ("f", 1, 0, 1), ("f", 1, 1, 2), ("f", 3, 0, 3), ("b", 3, 0, 4),
        ("f", 3, 1, 6), ("b", 3, 1, 7), ("b", 1, 0, 9), ("b", 1, 1, 11)]
    assert r.step_time_s == 15
    assert r.schedule == "interleaved-1f1b"


def test_recompute_runs_before_backward_and_end_tasks_follow():
    stages = [StageTasks(1, 2, recompute_s=0.5), StageTasks(1, 2, recompute_s=0.5)]
    ends = [[EndTask("all-reduce", 1.0, True), EndTask("optimizer", 0.25, False)]] * 2
    r = simulate_schedule(stages, pp=2, micro_batches=1, end_tasks=ends)
    kinds = [e.kind for e in r.timelines[0]]
    assert kinds == ["forward", "recompute", "backward", "all-reduce", "optimizer"]
    # F0 1, F1 1, R1 0.5, B1 2, R0 0.5, B0 2 = 7, then the sync of stage 0: 8.25
    assert r.pipeline_time_s == 7 and r.step_time_s == 8.25
    assert r.timelines[1][-1].end_s == 4.5 + 1.25


def test_barrier_before_the_optimizer():
    stages = [StageTasks(1, 1), StageTasks(1, 1)]
    ends = [[EndTask("reduce-scatter", 3.0, True), EndTask("barrier", 0.0, False),
             EndTask("optimizer", 1.0, False), EndTask("all-gather", 0.5, True)],
            [EndTask("reduce-scatter", 0.5, True), EndTask("barrier", 0.0, False),
             EndTask("optimizer", 1.0, False), EndTask("all-gather", 0.5, True)]]
    r = simulate_schedule(stages, pp=2, micro_batches=1, end_tasks=ends)
    # pipeline: F0 [0,1] F1 [1,2] B1 [2,3] B0 [3,4]; stage 1 reduces [3, 3.5], stage 0
    # [4, 7]; both step after the barrier at 7.
    assert [(e.kind, e.start_s) for e in r.timelines[1][-3:]] == [
        ("reduce-scatter", 3), ("optimizer", 7), ("all-gather", 8)]
    assert r.step_time_s == 8.5 and r.pipeline_time_s == 4


# -- the closed form ------------------------------------------------------------------------


@pytest.mark.parametrize("pp,vp,m", [(1, 1, 3), (2, 1, 1), (3, 1, 2), (4, 1, 8), (4, 1, 3),
                                      (2, 2, 2), (4, 2, 4), (4, 2, 12), (3, 4, 6), (8, 2, 16)])
def test_balanced_pipeline_equals_closed_form(pp, vp, m):
    """Every virtual stage equally slow (sends included): exactly (m v + p - 1) T."""
    n = pp * vp
    send_f, send_b = 0.1, 0.07
    stages = [StageTasks(forward_s=1.0 + (send_f if q == n - 1 else 0.0),
                         backward_s=2.0 + (send_b if q == 0 else 0.0),
                         send_forward_s=send_f if q < n - 1 else 0.0,
                         send_backward_s=send_b if q > 0 else 0.0) for q in range(n)]
    assert len({round(s.time_s, 12) for s in stages}) == 1
    r = simulate_schedule(stages, pp, m)
    assert r.step_time_s == pytest.approx((m * vp + pp - 1) * stages[0].time_s, rel=1e-12)


def _alpa(stages, m):
    times = [s.time_s for s in stages]
    return (m - 1) * max(times) + sum(times)


def test_1f1b_closed_form_bounds_the_schedule():
    """Unequal stages that split their work between forward and backward alike (as
    transformer stages do), with transfers: 1F1B finishes no later than the DP's closed
    form (m - 1) max T + sum T, and exactly then when the last stage is the slowest and
    m >= p."""
    rng = random.Random(7)
    for _ in range(300):
        pp, m = rng.randint(1, 6), rng.randint(1, 10)
        share = rng.uniform(0.2, 0.6)
        work = [rng.uniform(0.2, 1.0) for _ in range(pp)]
        stages = [StageTasks(share * w, (1 - share) * w) for w in work]
        r = simulate_schedule(stages, pp, m)
        assert r.step_time_s <= _alpa(stages, m) * (1 + 1e-12)
        assert r.step_time_s >= max(r.busy_s(d) for d in range(pp)) - 1e-12
        work[-1] = max(work) * rng.uniform(1.0, 1.3)
        stages = [StageTasks(share * w, (1 - share) * w) for w in work]
        m = max(m, pp)
        assert simulate_schedule(stages, pp, m).step_time_s == pytest.approx(_alpa(stages, m), rel=1e-12)


def test_1f1b_closed_form_is_not_a_bound_for_odd_splits():
    """A forward-heavy stage before a backward-heavy one: the schedule stalls beyond the
    closed form (why the DP's form is a bound only for proportional stages)."""
    stages = [StageTasks(0.6, 0.05), StageTasks(0.05, 0.8), StageTasks(0.3, 0.05)]
    r = simulate_schedule(stages, pp=3, micro_batches=9)
    assert r.step_time_s == pytest.approx(8.85) and _alpa(stages, 9) == pytest.approx(8.65)


def _interleaved(stages, pp, m):
    """nest's interleaved closed form (nest.schedule.pipeline) of these virtual stages."""
    vp = len(stages) // pp
    head, last = max(s.time_s for s in stages[:-1]), stages[-1].time_s
    return m * ((vp - 1) * head + max(head, last)) + (pp - 1) * head


def test_interleaved_closed_form_needs_similar_chunks():
    """With v > 1 the closed form is not a bound when chunks split forward and backward
    very differently (a forward-heavy chunk before a backward-heavy one stalls the ring)."""
    splits = [(0.9, 0.1), (0.1, 0.9), (0.9, 0.1), (0.1, 0.9)]
    r = simulate_schedule([StageTasks(f, b) for f, b in splits], pp=2, micro_batches=2)
    assert r.step_time_s == pytest.approx(6.6)  # by hand: rank 0's last backward ends at 6.6
    assert _interleaved([StageTasks(f, b) for f, b in splits], 2, 2) == pytest.approx(5.0)
    # Same per-chunk proportions: the bound holds again.
    rng = random.Random(3)
    for _ in range(100):
        pp, vp = rng.randint(2, 4), rng.randint(2, 3)
        m = pp * rng.randint(1, 3)
        share = rng.uniform(0.2, 0.6)
        stages = [StageTasks(share * w, (1 - share) * w) for w in
                  (rng.uniform(0.3, 1.0) for _ in range(pp * vp))]
        r = simulate_schedule(stages, pp, m)
        assert r.step_time_s <= _interleaved(stages, pp, m) * (1 + 1e-12)


def test_interleaved_closed_form_prices_the_last_chunk_apart():
    """Equal chunks and a slower last one (the output layer and loss; NeMo's 1-layer
    chunks): the schedule takes exactly m ((v - 1) H + T_last) + (p - 1) H, less than
    SC'21's (m v + p - 1) T_last the DP used before; any chunks of the same proportions
    finish no later than the form."""
    rng = random.Random(11)
    for _ in range(200):
        pp, vp = rng.choice([2, 3, 4, 8]), rng.choice([2, 3, 4, 6])
        m = pp * rng.choice([1, 2, 3, 4])
        share = rng.uniform(0.25, 0.5)
        last = rng.uniform(1.0, 3.0)
        stages = [StageTasks(share, 1 - share)] * (pp * vp - 1) + [StageTasks(share * last, (1 - share) * last)]
        r = simulate_schedule(stages, pp, m)
        assert r.step_time_s == pytest.approx(_interleaved(stages, pp, m), rel=1e-12)
        assert r.step_time_s <= (m * vp + pp - 1) * last * (1 + 1e-12)
        light = [StageTasks(share * w, (1 - share) * w) for w in
                 [rng.uniform(0.2, 1.0) for _ in range(pp * vp - 1)] + [rng.uniform(0.2, 3.0)]]
        assert simulate_schedule(light, pp, m).step_time_s <= _interleaved(light, pp, m) * (1 + 1e-12)


# -- plans ----------------------------------------------------------------------------------


def _check_events(r):
    seen = {}
    for row in r.timelines:
        for a, b in zip(row, row[1:]):
            assert b.start_s >= a.end_s - 1e-12, "a device runs one task at a time"
        for e in row:
            if e.kind in ("forward", "backward"):
                key = (e.kind, e.stage, e.micro_batch)
                assert key not in seen
                seen[key] = e
    n = r.pp * r.vp
    assert len(seen) == 2 * n * r.micro_batches
    for (kind, q, j), e in seen.items():
        if kind == "forward" and q > 0:
            assert e.start_s >= seen[("forward", q - 1, j)].end_s
        if kind == "backward" and q < n - 1:
            assert e.start_s >= seen[("backward", q + 1, j)].end_s


def _sim_checks(plan, model, cluster, job=None):
    """The faithful simulation, and the one of the pipeline the closed form assumes."""
    r = simulate(plan, model, cluster, job)
    # The simulator builds its stage times on its own path; they are the plan's.
    for stage, tasks in zip(plan.stages, r.stages):
        assert tasks.time_s == pytest.approx(stage.time_s, rel=1e-9, abs=1e-10)
    closed = simulate(plan, model, cluster, job, pad=plan.parallelism["vp"] > 1, sync="heaviest")
    return r, closed


def _closed_form_exact(plan, closed) -> None:
    """Interleaved: the padded pipeline (nest.schedule.simulate.pad_to_closed_form) takes the
    closed form exactly. 1F1B: the closed form (m - 1) max T + sum T is exact when the
    slowest stage is the last one."""
    times = [s.time_s for s in plan.stages]
    m, pp = plan.parallelism["num_microbatches"], plan.parallelism["pp"]
    if plan.parallelism["vp"] > 1 or (m >= pp and times[-1] == max(times)):
        # node times are rounded to picoseconds in the closed form, not in the simulation
        assert closed.step_time_s == pytest.approx(plan.closed_form_step_time_s, rel=1e-9, abs=1e-10)


CASES = [  # (model, cluster, devices, evaluate kwargs)
    ("gpt3-175b", "dgx-a100", 64, dict(tp=8, pp=8, dp=1, micro_batch=1, sp=True, recompute="full")),
    ("gpt3-175b", "dgx-h100", 256, dict(tp=8, pp=4, dp=8, vp=3, micro_batch=1, sp=True, zero=1,
                                        recompute="selective")),
    ("llama2-7b", "h100-spineleaf", 64, dict(tp=2, pp=4, dp=8, vp=2, micro_batch=2, sp=True, zero=3)),
    ("mixtral-8x7b", "dgx-h100", 128, dict(tp=2, pp=4, dp=16, ep=8, micro_batch=1, sp=True, zero=1,
                                           rank_order="tp-cp-ep-pp-dp")),
    ("llama3-70b", "tpuv4-fattree", 256, dict(tp=4, pp=8, dp=4, cp=2, micro_batch=1, sp=True, zero=2,
                                              recompute="full")),
]


@pytest.mark.parametrize("model,cluster,devices,kwargs", CASES)
def test_plans_simulate_consistently(model, cluster, devices, kwargs):
    c = nest.load_cluster(cluster, devices=devices)
    plan = nest.evaluate(model, c, **kwargs)
    r, closed = _sim_checks(plan, model, c)
    _check_events(r)
    assert r.step_time_s == pytest.approx(plan.step_time_s, rel=1e-9)
    assert r.step_time_s <= plan.closed_form_step_time_s * (1 + 1e-9)
    _closed_form_exact(plan, closed)
    assert (r.closed_form_s, r.predicted_s) == (plan.closed_form_step_time_s, plan.step_time_s)
    assert r.schedule == ("1f1b" if kwargs.get("vp", 1) == 1 else "interleaved-1f1b")


SLOW_AT_512 = ("gpt-1t", "llama3.1-405b", "deepseek-v3")
"""Presets whose 512-device plans and simulations take tens of seconds each (the longest
pipelines and the most experts): -m slow only."""


def _preset_cases():
    """Every preset but :data:`SLOW_AT_512` at 512 devices in the default run; those and
    64 and 2048 devices too with -m slow (two minutes of plans and simulations)."""
    return [pytest.param(name, devices, marks=[pytest.mark.slow] if devices != 512 or name in SLOW_AT_512 else [])
            for name in MODELS for devices in (64, 512, 2048)]


def _variants(model: str, cluster):
    """``(plan, split is the DP's or Megatron's)``: the Megatron-style configuration,
    pipelined ones (4 stages, 1F1B and interleaved, ZeRO-1) with the DP's split and with
    the split polished on the schedule, and nest's plan (ZeRO-0/1, no context
    parallelism)."""
    spec = nest.load_model(model)
    job = nest.JobSpec(global_batch=spec.default_global_batch, seq_len=spec.seq_len)
    try:
        yield nest.plan(model, cluster, limits=nest.SpaceLimits(zero=(0, 1), cp=(1,))), False
    except nest.InfeasibleError:
        pass
    found = manual_config(model, cluster)
    if not isinstance(found, str):
        yield found[1], True
    tp = 8 if spec.num_heads % 8 == 0 and spec.num_kv_heads % 8 == 0 else 1
    pp = 4
    dp = cluster.num_devices // (tp * pp)
    while job.global_batch % dp:
        dp //= 2
    ep = min(spec.num_experts, tp * dp) if spec.is_moe else 1
    for vp in (1, 2):
        for ranking in ("closed-form", "schedule"):
            try:
                yield nest.evaluate(model, cluster, tp=tp, pp=pp, dp=dp, vp=vp, ep=ep, micro_batch=1, sp=tp > 1,
                                    zero=1 if dp > 1 else 0, recompute="full", ranking=ranking), \
                    ranking == "closed-form"
            except (nest.InfeasibleError, nest.SpecError):
                pass


@pytest.mark.parametrize("model,devices", _preset_cases())
def test_every_preset_agrees_with_closed_form(model, devices):
    """Every preset model on 64, 512 and 2048 H100s, plans without overlap assumptions
    (ZeRO-0/1, no context parallelism), nest's own plan among them: nest's step time
    equals the event-driven simulation to 1e-9 (issue 5 asks for 1%). The simulation of
    the pipeline the closed form assumes (chunks before the last as slow as the slowest
    of them, v x the heaviest chunk synchronised) equals the DP's closed form to 1e-9;
    the faithful simulation is never slower than the closed form, equal to it without a
    pipeline and, interleaved on the DP's or Megatron's split, at most 3.5% faster (8% on
    2048; the closed form pads the embedding's chunk to the slowest and syncs v x the
    heaviest chunk)."""
    cluster = nest.load_cluster("dgx-h100", devices=devices)
    checked = 0
    for p, dp_split in _variants(model, cluster):
        assert p.parallelism["zero"] <= 1 and p.parallelism["cp"] == 1
        r, closed = _sim_checks(p, model, cluster)
        _closed_form_exact(p, closed)
        assert r.step_time_s == pytest.approx(p.step_time_s, rel=1e-9)
        closed_form = p.closed_form_step_time_s
        assert r.step_time_s <= closed_form * (1 + 1e-9)
        if p.parallelism["pp"] == 1:
            assert closed_form == pytest.approx(p.step_time_s, rel=1e-9)
        if p.parallelism["vp"] > 1 and dp_split:
            # measured on 64 and 512 devices: 28 of 36 within 1%, worst 3.1% (bert-large,
            # 512 devices, m = 16); on 2048 fewer micro-batches leave the padded chunks more
            # exposed: worst 7.4% (gpt-7.5b, m = 8, its blocks at the host's pace)
            assert closed_form <= r.step_time_s * (1.035 if devices <= 512 else 1.08)
        checked += 1
    if not checked:
        pytest.skip(f"nothing fits {model} on {devices} devices")


def test_simulate_rebuilds_preset_specs_and_candidate():
    plan = nest.plan("bert-large", nest.load_cluster("h100-spineleaf", devices=128))
    r = simulate(plan)  # model, cluster and job rebuilt from the plan
    assert (r.closed_form_s, r.predicted_s) == (plan.closed_form_step_time_s, plan.step_time_s)
    assert r.step_time_s == pytest.approx(plan.step_time_s, rel=1e-9)
    assert r.step_time_s <= plan.closed_form_step_time_s * (1 + 1e-9)
    scn = Scenario(nest.load_model("bert-large"), nest.load_cluster("h100-spineleaf", devices=128),
                   nest.JobSpec(global_batch=256, seq_len=512))
    cand = Candidate.of_parallelism(plan.parallelism, scn.model.head_needs_embedding)
    assert (cand.pp, cand.dp, cand.zero) == (plan.parallelism["pp"], plan.parallelism["dp"],
                                             plan.parallelism["zero"])
    with pytest.raises(ValueError):
        simulate_candidate(scn, cand, [1] * cand.virtual_stages)
    assert r.to_dict()["step_time_s"] == r.step_time_s
    assert "events" in r.to_dict(events=True)
    text = render_simulation(r)
    assert "simulated step time" in text and "closed-form step time" in text and "nest step time" in text
    assert r.to_dict()["relative_difference"] == pytest.approx(0.0, abs=1e-9)


def test_timeline_png(tmp_path):
    pytest.importorskip("matplotlib")
    c = nest.load_cluster("dgx-a100", devices=64)
    plan = nest.evaluate("gpt3-175b", c, nest.JobSpec(global_batch=16, seq_len=2048), tp=8, pp=4,
                         dp=2, vp=2, micro_batch=1, sp=True, zero=1, recompute="full")
    r = simulate(plan, "gpt3-175b", c, nest.JobSpec(global_batch=16, seq_len=2048))
    path = tmp_path / "timeline.png"
    timeline_png(r, path)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


@pytest.mark.parametrize("model,devices", _preset_cases())
def test_nest_1f1b_plans_agree_with_simulation(model, devices):
    """nest's own best 1F1B plan without overlap assumptions for every preset model at two
    scales: the faithful simulation is not slower than the DP's step time and, with at
    least as many micro-batches as stages, within 2% of it (measured worst 1.4%: the
    closed form charges the fill and drain as if the slowest stage were the last and the
    end-of-step sync as if every stage finished with the pipeline)."""
    cluster = nest.load_cluster("dgx-h100", devices=devices)
    limits = nest.SpaceLimits(zero=(0, 1), cp=(1,), vp=(1,))
    try:
        plan = nest.plan(model, cluster, limits=limits)
    except nest.InfeasibleError:
        pytest.skip(f"nothing fits {model} on {devices} devices")
    r = simulate(plan, model, cluster)
    # not a strict bound: dense and MoE stages split forward and backward differently
    # (deepseek-v3 on 256 H100s simulates 0.02% slower than the closed form)
    assert r.step_time_s <= plan.step_time_s * 1.001
    if plan.parallelism["num_microbatches"] >= plan.parallelism["pp"]:
        assert plan.step_time_s <= r.step_time_s * 1.02


def test_graph_cluster_plan_simulates_on_the_graph_prices():
    """On a graph cluster the simulator's sends are the boundary prices on the graph: its
    stage times are the plan's, and the simulated step is no slower than the DP's."""
    cluster = nest.load_cluster("h100-fattree", devices=64)
    plan = nest.evaluate("llama2-7b", cluster, tp=2, pp=4, dp=8, micro_batch=1, sp=True, zero=1)
    r, closed = _sim_checks(plan, "llama2-7b", cluster)
    assert r.step_time_s == pytest.approx(plan.step_time_s, rel=1e-9)
    assert r.step_time_s <= plan.closed_form_step_time_s * (1 + 1e-9)
    _closed_form_exact(plan, closed)
