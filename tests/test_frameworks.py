"""Framework-true search (nest.frameworks): the space under a framework is exactly the
candidates its rules admit, the search over it is exact, and a fixed configuration that
breaks a rule is refused with the rule's name (API and CLI)."""

from __future__ import annotations

import functools
import json
from dataclasses import replace

import numpy as np
import pytest

import nest
from nest.cli import main
from nest.cost.offload import offload_ready
from nest.cost.scenario import Scenario
from nest.dp import engine
from nest.dp.problem import SOLVED
from nest.dp.reference import brute_force, stage_details
from nest.errors import RuleError, SpecError
from nest.frameworks import FRAMEWORKS, Columns, framework, torchtitan
from nest.frameworks.base import expressed_order
from nest.frameworks.megatron import ORDERS, PP_LAST
from nest.parallel import DEFAULT_ORDER, Candidate, LayerConfig, SpaceLimits
from nest.presets.clusters import CLUSTERS
from nest.schedule.step import candidate_step_s
from nest.search.problems import problem, split_closed_form_ps
from nest.search.space import enumerate_partials, expand
from nest.specs import JobSpec, ModelSpec, OptimizerSpec
from nest.units import PS

GPT = ModelSpec(name="tiny-gpt", num_layers=4, hidden=1024, num_heads=16, ffn_hidden=4096, vocab_size=32000,
                seq_len=1024)
DECODER = dict(mlp="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False, position_embedding="rope",
               dropout=False)
MOE = ModelSpec(name="tiny-moe", num_layers=4, hidden=1024, num_heads=16, ffn_hidden=2048, vocab_size=32000,
                seq_len=1024, num_experts=4, experts_per_token=2, **DECODER)
# torchtitan 0.3.0's llama3 "debugmodel" flavour (torchtitan/models/llama3/__init__.py _debugmodel)
DEBUG = ModelSpec(name="llama3-debug", num_layers=6, hidden=256, num_heads=16, num_kv_heads=16, ffn_hidden=768,
                  vocab_size=2048, seq_len=2048, **DECODER)
ORDERS_TRIED = (DEFAULT_ORDER, PP_LAST, "cp-tp-ep-dp-pp")
# optimizer offload 0.5 breaks each framework's offload rule (torchtitan: any; DeepSpeed: partial; Megatron: not ZeRO-1)
EVERYTHING = SpaceLimits(sp=(False, True), zero=(0, 1, 2, 3), rank_order=ORDERS_TRIED, offload=(0.0, 0.5))


def cluster(devices: int = 16, memory_gib: float = 80, preset: str = "dgx-a100"):
    c = CLUSTERS[preset].sized(devices)
    return replace(c, device=replace(c.device, memory_bytes=memory_gib * 2**30))


def job(fw: str, **options) -> JobSpec:
    options.setdefault("global_batch", 16)
    options.setdefault("seq_len", 1024)
    return nest.job_spec(GPT, framework=fw, reserved_memory_bytes=0.25 * 2**30, **options)


@pytest.fixture
def tiny_moe_in_torchtitan(monkeypatch):
    """torchtitan launches registry models only; register the tiny MoE as one."""
    fields = {k: getattr(MOE, k) for k in ("num_layers", "hidden", "num_heads", "ffn_hidden", "vocab_size",
                                           "num_experts", "experts_per_token")}
    monkeypatch.setattr(torchtitan, "REGISTRY", torchtitan.REGISTRY + (("qwen3", "tiny_moe", fields),))


# (framework, model, job options): together they reach every rule the search can meet
SPACES = [
    ("megatron", GPT, {}),
    ("megatron", MOE, {"overlap_grad_reduce": True, "moe_dispatcher": "flex"}),
    ("megatron", GPT, {"optimizer": OptimizerSpec.of("adam", "bf16", "bf16"), "dtype": "fp8",
                       "fp8_param_gather": True}),  # on H100s: FP8
    ("megatron", GPT, {"dtype": "fp8", "fp8_recipe": "mxfp8", "fp8_param_gather": True}),  # on GB200s: MXFP8
    ("deepspeed", GPT, {"overlap_grad_reduce": True}),
    ("deepspeed", MOE, {}),
    ("torchtitan", DEBUG, {"seq_len": 1040}),  # 1040 tokens: 2 cp 2 x tp 8 does not divide them
    ("torchtitan", MOE, {}),
]
# Rules nest's own space already keeps (only a fixed configuration can break them,
# search/space.py): cp splits the sequence in 2 cp chunks; MoE with TP has SP.
SEARCH_NEVER_BREAKS = {("megatron", "context-parallel-sequence"), ("megatron", "moe-tensor-parallel-needs-sp")}


def _space(model, jobspec, limits=EVERYTHING, on=None) -> set[Candidate]:
    if offload_ready(jobspec) is not None or model.is_moe:  # 16-bit moments cannot offload; the dense
        limits = replace(limits, offload=(0.0,))  # models' spaces meet the offload rules
    scn = Scenario(model, on or cluster(), jobspec)
    partials = enumerate_partials(model, scn.cluster, jobspec, scn.num_nodes, limits)
    return set(expand(partials, np.arange(len(partials)), limits))


@functools.lru_cache(maxsize=None)
def _spaces(case: int) -> tuple[set, set, dict]:
    """SPACES[case]: the unrestricted space, the framework's, and the rules each candidate
    of the first breaks."""
    fw, model, options = SPACES[case]
    jobspec = job(fw, **options)
    on = (cluster(preset="gb200-nvl72") if jobspec.fp8_recipe == "mxfp8" else
          cluster(preset="dgx-h100") if jobspec.dtype == "fp8" else None)
    # activation offload where a rule refuses it (Megatron's search over it: test_activation_offload)
    limits = EVERYTHING if fw == "megatron" else replace(EVERYTHING, act_offload=(0, 2))
    everything = _space(model, replace(jobspec, framework="any"), limits, on=on)
    return everything, _space(model, jobspec, limits, on=on), {c: _broken(fw, model, jobspec, c) for c in everything}


def _broken(fw, model, jobspec, cand) -> set[str]:
    """The rules ``cand`` breaks, one candidate at a time (not the search's mask); the
    check refuses it naming the first of them."""
    target = framework(fw)
    columns = Columns.of_candidate(cand)
    broken = [r.name for r in target.rules if not r.admits(model, jobspec, columns)[0]]
    try:
        target.check(model, jobspec, cand)
        assert not broken
    except RuleError as error:
        assert str(error).startswith(f"framework = {fw}: {broken[0]}: ")
    return set(broken)


FAST_SPACES = (0, 3)
"""The spaces checked in the default run (dense GPT under Megatron-LM and DeepSpeed); the
others are tens of thousands of candidates checked one at a time each: -m slow."""


@pytest.mark.parametrize("case", [pytest.param(case, marks=() if case in FAST_SPACES else pytest.mark.slow)
                                  for case in range(len(SPACES))], ids=[f"{f}-{m.name}" for f, m, _ in SPACES])
def test_the_space_is_what_the_rules_admit(case, tiny_moe_in_torchtitan):
    everything, restricted, broken = _spaces(case)
    assert restricted == {c for c, rules in broken.items() if not rules}
    assert restricted and len(restricted) < len(everything)


@pytest.mark.slow  # every space of SPACES
def test_every_rule_is_met_by_some_space(tiny_moe_in_torchtitan):
    """Each rule excludes candidates the unrestricted search has (or is one nest's space
    never breaks): the space tests above are not vacuous."""
    met = {(SPACES[case][0], rule) for case in range(len(SPACES)) for rules in _spaces(case)[2].values()
           for rule in rules}
    every = {(fw, r.name) for fw in FRAMEWORKS for r in framework(fw).rules}
    assert every - met == SEARCH_NEVER_BREAKS


# -- exactness over the restricted space -------------------------------------------------

def _admitted(fw, model, jobspec, limits=EVERYTHING, on=None) -> list[Candidate]:
    everything = sorted(_space(model, replace(jobspec, framework="any"), limits, on), key=repr)
    return [c for c in everything if not _broken(fw, model, jobspec, c)]


@pytest.mark.parametrize("fw", ["megatron", "deepspeed"])
@pytest.mark.parametrize("memory_gib", [pytest.param(80, marks=pytest.mark.slow), 0.9])
def test_restricted_search_is_exact(fw, memory_gib):
    """Brute force over the admitted candidates (every split): the closed-form ranking
    returns the optimum; the default ranking's step is at most the fastest schedule of any
    admitted candidate's DP split."""
    c = cluster(memory_gib=memory_gib)
    jobspec = job(fw, overlap_grad_reduce=fw == "deepspeed")
    limits = replace(EVERYTHING, micro_batch=(1, 4))
    cands = _admitted(fw, GPT, jobspec, limits, on=c)
    scn = Scenario(GPT, c, jobspec)
    dp_problem = problem(scn, cands)
    optimum = min(found[0] for n in range(len(cands)) if (found := brute_force(dp_problem, n)) is not None)
    closed = nest.plan(GPT, c, jobspec, limits=limits, ranking="closed-form")
    assert round(closed.closed_form_step_time_s * PS) == optimum
    unpruned = type(dp_problem)(**{**dp_problem.__dict__, "cand_lower_bound": np.zeros(len(cands), dtype=np.int64)})
    result = engine.solve(unpruned, "cpp")
    fastest = min(candidate_step_s(scn, cands[n], np.diff([0] + result.ends[int(dp_problem.pos_offset[n]):int(
        dp_problem.pos_offset[n]) + dp_problem.stages(n)].tolist()).tolist())
        for n in np.flatnonzero(result.status == SOLVED).tolist())
    best = nest.plan(GPT, c, jobspec, limits=limits)
    assert best.step_time_s <= fastest * (1 + 1e-12)
    framework(fw).check(GPT, jobspec, Candidate.of_parallelism(best.parallelism, GPT.head_needs_embedding))


@pytest.mark.parametrize("memory_gib,pp", [pytest.param(80, None, marks=pytest.mark.slow), (0.35, (2, 3, 4)),
                                           (0.3, (2, 3, 4))])
def test_torchtitan_search_is_exact_over_its_splits(memory_gib, pp):
    """torchtitan splits the layers itself: brute force over the admitted candidates and
    every split torchtitan generates (memory of each stage, closed form and exact
    schedule) against ``plan`` (with pipelining forced, the winner's split is one of
    several that fit)."""
    c = cluster(devices=8, memory_gib=memory_gib)
    jobspec = nest.job_spec(DEBUG, global_batch=8, seq_len=2048, framework="torchtitan",
                            reserved_memory_bytes=0.25 * 2**30)
    limits = SpaceLimits(micro_batch=(1, 2), cp=(1, 2), pp=pp)
    # nest's default space has no ZeRO-0 with data parallelism (ZeRO-1 costs no more);
    # torchtitan's has (data_parallel_replicate_degree): enumerate every stage
    cands = _admitted("torchtitan", DEBUG, jobspec, replace(limits, zero=(0, 1, 2, 3)), on=c)
    scn = Scenario(DEBUG, c, jobspec)
    dp_problem = problem(scn, cands)
    closed, step = [], []
    for n, cand in enumerate(cands):
        for split, _ in framework("torchtitan").splits(scn.num_nodes, cand.pp, cand.vp):
            details = stage_details(dp_problem, n, np.cumsum(split).tolist())
            if all(d["fits"] for d in details):
                closed.append(split_closed_form_ps(dp_problem, n, details))
                step.append(candidate_step_s(scn, cand, split))
    assert 0 < len(step) < sum(len(framework("torchtitan").splits(scn.num_nodes, x.pp, x.vp)) for x in cands) or \
        memory_gib > 1
    assert round(nest.plan(DEBUG, c, jobspec, limits=limits, ranking="closed-form").closed_form_step_time_s * PS) \
        == min(closed)
    assert nest.plan(DEBUG, c, jobspec, limits=limits).step_time_s == pytest.approx(min(step), rel=1e-12)


# -- a fixed configuration that breaks a rule -----------------------------------------------

# (framework, rule, model, evaluate keyword arguments, job options): each breaks exactly that rule
BREAKS = [
    ("megatron", "fsdp-without-pipeline", GPT, dict(tp=1, pp=2, dp=8, zero=2), {}),
    ("megatron", "rank-order", GPT, dict(tp=2, pp=2, dp=4, rank_order="dp-tp-cp-ep-pp"), {}),
    ("megatron", "tp-pp-dp-mapping", GPT, dict(tp=1, pp=2, dp=4, cp=2, rank_order=PP_LAST), {}),
    ("megatron", "moe-tensor-parallel-needs-sp", MOE, dict(tp=2, pp=1, dp=8, ep=4, sp=False), {}),
    ("megatron", "flex-dispatcher-needs-expert-ranks", MOE, dict(tp=1, pp=1, dp=16, ep=1), {"moe_dispatcher": "flex"}),
    ("megatron", "precision-aware-optimizer", GPT, dict(tp=1, pp=1, dp=16, zero=0),
     {"optimizer": OptimizerSpec.of("adam", "fp32", "bf16")}),
    ("megatron", "fp8-param-gather", GPT, dict(tp=1, pp=1, dp=16, zero=0), {"dtype": "fp8", "fp8_param_gather": True}),
    ("megatron", "mxfp8-weights-distributed-optimizer", GPT, dict(tp=1, pp=1, dp=16, zero=3),
     {"dtype": "fp8", "fp8_recipe": "mxfp8", "fp8_param_gather": True}),
    ("megatron", "context-parallel-sequence", GPT, dict(tp=1, pp=1, dp=4, cp=4), {"seq_len": 1020}),
    ("megatron", "optimizer-offload-distributed-optimizer", GPT, dict(tp=1, pp=1, dp=16, zero=3, optimizer_offload=0.5),
     {}),
    ("deepspeed", "whole-optimizer-offload", GPT, dict(tp=1, pp=1, dp=16, zero=1, optimizer_offload=0.5), {}),
    ("deepspeed", "zero-with-pipeline", GPT, dict(tp=1, pp=2, dp=8, zero=2), {}),
    ("deepspeed", "no-interleaving", GPT, dict(tp=1, pp=2, dp=4, vp=2), {}),
    ("deepspeed", "no-selective-recompute", GPT, dict(tp=1, pp=1, dp=16, recompute="selective"), {}),
    ("deepspeed", "no-sequence-parallel", GPT, dict(tp=2, pp=1, dp=8, sp=True), {}),
    ("deepspeed", "no-ring-attention", GPT, dict(tp=1, pp=1, dp=8, cp=2), {}),
    ("deepspeed", "experts-without-tensor-parallel", MOE, dict(tp=2, pp=1, dp=8, ep=4), {}),
    ("deepspeed", "moe-zero3", MOE, dict(tp=1, pp=1, dp=16, ep=4, zero=3), {}),
    ("deepspeed", "rank-order", GPT, dict(tp=1, pp=2, dp=8, rank_order=PP_LAST), {}),
    ("deepspeed", "overlap-needs-zero", GPT, dict(tp=1, pp=2, dp=8, zero=0), {"overlap_grad_reduce": True}),
    ("torchtitan", "rank-order", DEBUG, dict(tp=2, pp=2, dp=4, zero=0, sp=True, rank_order=PP_LAST), {}),
    ("torchtitan", "fsdp", DEBUG, dict(tp=1, pp=1, dp=16, zero=1), {}),
    ("torchtitan", "fsdp-with-pipeline", DEBUG, dict(tp=1, pp=2, dp=8, zero=3), {}),
    ("torchtitan", "replicate-without-sharded-dims", DEBUG, dict(tp=1, pp=1, dp=8, cp=2, zero=0), {}),
    ("torchtitan", "sequence-parallel", DEBUG, dict(tp=2, pp=1, dp=8, zero=3, sp=False), {}),
    ("torchtitan", "no-selective-recompute", DEBUG, dict(tp=1, pp=1, dp=16, zero=3, recompute="selective"), {}),
    ("torchtitan", "sequence-divisor", DEBUG, dict(tp=8, pp=1, dp=1, cp=2, zero=3, sp=True), {"seq_len": 1040}),
    ("torchtitan", "no-optimizer-offload", DEBUG, dict(tp=1, pp=1, dp=16, zero=3, optimizer_offload=1.0), {}),
    ("torchtitan", "no-activation-offload", DEBUG, dict(tp=1, pp=1, dp=16, zero=3, activation_offload=1), {}),
    ("deepspeed", "no-activation-offload", GPT, dict(tp=1, pp=1, dp=16, zero=1, activation_offload=2), {}),
    ("deepspeed", "no-expert-tensor-parallel", MOE, dict(tp=1, pp=1, dp=16, ep=2, etp=2), {}),
    ("torchtitan", "no-expert-tensor-parallel", MOE, dict(tp=1, pp=1, dp=16, ep=2, etp=2, zero=3), {}),
]


VERSIONS = {"megatron": "Megatron-LM core_v0.14.0", "deepspeed": "DeepSpeed v0.19.5", "torchtitan": "torchtitan 0.3.0"}


def test_every_rule_has_a_breaking_configuration():
    assert {(f, r) for f, r, *_ in BREAKS} == {(fw, r.name) for fw in FRAMEWORKS for r in framework(fw).rules}


@pytest.mark.parametrize("fw,rule,model,config,options", BREAKS, ids=[f"{f}-{r}" for f, r, *_ in BREAKS])
def test_evaluate_names_the_broken_rule(fw, rule, model, config, options, tiny_moe_in_torchtitan):
    config = {"micro_batch": 1, "recompute": "none", **config}
    jobspec = nest.job_spec(model, global_batch=16, framework=fw, **{"seq_len": 1024, **options})
    preset = "gb200-nvl72" if jobspec.fp8_recipe == "mxfp8" else "dgx-h100" if jobspec.dtype == "fp8" else "dgx-a100"
    with pytest.raises(RuleError, match=rf"^framework = {fw}: {rule}: .* \({VERSIONS[fw]} .*\); closest expressible: "):
        nest.evaluate(model, cluster(preset=preset), jobspec, **config)
    # the same configuration without the framework is fine (the rule, not the config, refuses it)
    nest.evaluate(model, cluster(memory_gib=1000, preset=preset), replace(jobspec, framework="any"), **config)
    assert [r.name for r in framework(fw).rules if not r.admits(model, jobspec, _columns(config, jobspec))[0]] \
        == [rule]


def _columns(config: dict, jobspec: JobSpec):
    cfg = LayerConfig(config.get("tp", 1), config.get("sp", False), config["micro_batch"],
                      config["recompute"], True, config.get("cp", 1), config.get("ep", 1),
                      config.get("activation_offload", 0), config.get("etp", 1))
    cand = Candidate(cfg, config["pp"], config["dp"], config.get("vp", 1), config.get("zero", 0),
                     config.get("rank_order", DEFAULT_ORDER), config.get("optimizer_offload", 0.0))
    return Columns.of_candidate(cand)


def test_cli_evaluate_exits_2_with_the_rule(capsys):
    code = main(["evaluate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--devices", "64", "--tp", "2",
                 "--pp", "4", "--dp", "8", "--mbs", "1", "--zero", "2", "--framework", "megatron"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("nest: error: framework = megatron: fsdp-without-pipeline: ZeRO-2/3 is Megatron-FSDP")
    assert "closest expressible: zero=1 (--use-distributed-optimizer), or pp=1" in err
    assert len(err.strip().splitlines()) == 1


def test_torchtitan_split_the_user_fixed_is_refused_with_the_closest():
    jobspec = nest.job_spec(DEBUG, global_batch=16, framework="torchtitan")
    options = [nodes for nodes, _ in framework("torchtitan").splits(8, 3, 1)]
    assert [2, 2, 4] not in options
    with pytest.raises(RuleError, match=r"^layers_per_stage = 2,2,4: framework = torchtitan splits the layers "
                                        r"itself; closest expressible: (\d+),(\d+),(\d+)$") as error:
        nest.evaluate(DEBUG, cluster(), jobspec, tp=1, pp=3, dp=4, micro_batch=1, zero=0, layers_per_stage=[2, 2, 4])
    closest = [int(n) for n in str(error.value).rsplit(": ", 1)[1].split(",")]
    distance = lambda split: sum(abs(a - b) for a, b in zip(split, [2, 2, 4]))  # noqa: E731
    assert closest in options and distance(closest) == min(map(distance, options)) == 2
    nest.evaluate(DEBUG, cluster(), jobspec, tp=1, pp=3, dp=4, micro_batch=1, zero=0, layers_per_stage=closest)


# -- jobs a framework cannot run at all --------------------------------------------------------

@pytest.mark.parametrize("fw,model,options,message", [
    ("deepspeed", GPT, {"dtype": "fp8"}, "framework = deepspeed: job.dtype = fp8: DeepSpeed's config has no FP8"),
    ("deepspeed", GPT, {"tp_comm_overlap": True}, "framework = deepspeed: job.tp_comm_overlap = True"),
    ("megatron", GPT, {"overlap_param_gather": True},
     "framework = megatron: --overlap-param-gather needs --overlap-grad-reduce"),
    ("megatron", GPT, {"seq_len": 4096}, "framework = megatron: seq_len = 4096: more than the model's 1024"),
    ("torchtitan", GPT, {}, "framework = torchtitan: model tiny-gpt: torchtitan 0.3.0 launches the models of "
                            "its config registry"),
    ("torchtitan", DEBUG, {"dtype": "fp16"}, "framework = torchtitan: job.dtype = fp16"),
    ("torchtitan", DEBUG, {"overlap_grad_reduce": False}, "framework = torchtitan: job.overlap_grad_reduce = False"),
])
def test_jobs_the_framework_cannot_run(fw, model, options, message):
    jobspec = nest.job_spec(model, global_batch=16, framework=fw, **options)
    with pytest.raises(SpecError, match=f"^{message}"):
        nest.plan(model, cluster(preset="dgx-h100"), jobspec)


def test_suggestions_are_configurations_the_framework_runs():
    """A configuration that does not fit gets only changes its framework can run:
    torchtitan with pipelining has no ZeRO-1/2/3 to suggest, so none is."""
    jobspec = nest.job_spec(DEBUG, global_batch=16, framework="torchtitan", reserved_memory_bytes=0.25 * 2**30)
    c = cluster(memory_gib=0.34)
    with pytest.raises(nest.InfeasibleError) as error:
        nest.evaluate(DEBUG, c, jobspec, tp=1, pp=2, dp=8, micro_batch=2, zero=0)
    message = str(error.value)
    assert "smallest changes that fit: " in message and "zero=" not in message.split("smallest changes")[1]
    with pytest.raises(nest.InfeasibleError) as error:
        nest.evaluate(DEBUG, c, replace(jobspec, framework="any"), tp=1, pp=2, dp=8, micro_batch=2, zero=0)
    assert "zero=3 with recompute=full" in str(error.value)


def test_suggested_device_count_is_the_smallest_the_framework_fits_on():
    """llama2-70b on 8 A100s under DeepSpeed: the device-count search tests the most
    frugal candidates DeepSpeed runs (ZeRO-3 without pipelining), not nest's most frugal
    ones (ZeRO-3 with a pipeline, which DeepSpeed refuses): 16 devices fit, and 16 is
    what the message says."""
    jobspec = nest.job_spec(nest.load_model("llama2-70b"), framework="deepspeed")
    with pytest.raises(nest.InfeasibleError) as error:
        nest.plan("llama2-70b", nest.load_cluster("dgx-a100", devices=8), jobspec)
    assert "smallest changes that fit: 16 devices (the cluster has 8)" in str(error.value)
    plan = nest.plan("llama2-70b", nest.load_cluster("dgx-a100", devices=16), jobspec)
    # the fastest plan there may pipeline, but then without ZeRO-2/3 (DeepSpeed's rule)
    assert plan.devices_used == 16 and (plan.parallelism["pp"] == 1 or plan.parallelism["zero"] <= 1)


def test_torchtitan_jobs_overlap_the_gradient_reduction_by_default():
    assert nest.job_spec(DEBUG, global_batch=8, framework="torchtitan").overlap_grad_reduce
    assert not nest.job_spec(DEBUG, global_batch=8).overlap_grad_reduce
    assert not nest.job_spec(DEBUG, global_batch=8, framework="torchtitan", overlap_grad_reduce=None,
                             tp_comm_overlap=None).tp_comm_overlap


def test_rank_orders_that_place_ranks_alike_are_expressible():
    """A user order that only moves dimensions of degree 1 is Megatron's default."""
    degrees = {"tp": 1, "cp": 2, "dp": 4, "pp": 2}
    assert expressed_order(degrees, "tp-cp-ep-dp-pp", ORDERS) == DEFAULT_ORDER
    assert expressed_order(degrees, "cp-tp-ep-dp-pp", ORDERS) == DEFAULT_ORDER
    assert expressed_order(degrees, "cp-tp-ep-pp-dp", ORDERS) == PP_LAST
    assert expressed_order(degrees, "dp-cp-tp-ep-pp", ORDERS) is None
    assert expressed_order({**degrees, "pp": 1}, "tp-cp-ep-pp-dp", ORDERS) == DEFAULT_ORDER


# -- the command line ---------------------------------------------------------------------------

def _plan_json(capsys, *args) -> dict:
    assert main(["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--devices", "64", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_emit_implies_the_framework(capsys):
    plan = _plan_json(capsys, "--framework", "deepspeed")
    assert plan["job"]["framework"] == "deepspeed"
    assert main(["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--devices", "64", "--emit",
                 "deepspeed"]) == 0
    emitted = json.loads(capsys.readouterr().out)
    assert emitted["nest"]["data_parallel"] == plan["parallelism"]["dp"]
    assert emitted["zero_optimization"]["stage"] == plan["parallelism"]["zero"]
    code = main(["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--devices", "64", "--emit",
                 "deepspeed", "--framework", "megatron"])
    assert code == 2
    assert "framework = megatron: conflicts with --emit deepspeed" in capsys.readouterr().err


def test_a_plan_made_for_one_framework_is_refused_by_another(capsys):
    plan = _plan_json(capsys, "--framework", "megatron", "--seq-len", "65536", "--global-batch", "64")
    assert plan["parallelism"]["cp"] > 1
    from nest.report.export import emit

    with pytest.raises(RuleError, match="framework = deepspeed: no-ring-attention"):
        emit(plan, "deepspeed")


def test_compare_and_sweep_keep_to_the_framework(tmp_path, capsys):
    assert main(["compare", "--model", "llama3-8b", "--cluster", "dgx-h100", "--devices", "64", "--framework",
                 "torchtitan", "--strategies", "manual,nest", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    rows = rows["rows"] if isinstance(rows, dict) else rows
    assert {r["strategy"] for r in rows} == {"manual", "nest"}
    for row in rows:
        assert row["feasible"], row["reason"]
        assert row["parallelism"]["zero"] in (0, 3) and row["parallelism"]["recompute"] != "selective"
    grid = tmp_path / "grid.yaml"
    grid.write_text("models: [llama3-8b]\nclusters: [{cluster: dgx-h100, devices: [64]}]\n"
                    "jobs: [{framework: deepspeed}, {}]\n")
    out = tmp_path / "rows.jsonl"
    assert main(["sweep", str(grid), "--out", str(out), "--quiet", "--workers", "1", "--framework",
                 "torchtitan"]) == 0
    capsys.readouterr()
    rows = [r for r in map(json.loads, out.read_text().splitlines()) if "nest_sweep_journal" not in r]
    got = sorted((r.get("framework"), r["zero"]) for r in rows)
    assert [f for f, _ in got] == ["deepspeed", "torchtitan"]
    assert all(zero in (0, 3) for f, zero in got if f == "torchtitan")
