"""What users call: plan a job, evaluate one configuration, simulate a plan's step.

:func:`plan` searches the joint space (:mod:`nest.search`) and returns the fastest plan
that fits in memory; :func:`evaluate` costs a configuration the user fixed (and, without
a split, the stage DP's split of it); :func:`simulate` replays a plan's step event by
event (:mod:`nest.schedule.simulate`). All three resolve their inputs the same way
(:func:`nest.inputs.coerce.coerce_inputs`).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from .cost.activation_offload import offload_layer_counts
from .cost.offload import offload_fractions
from .cost.pricing import price_candidate
from .cost.scenario import Scenario
from .dp import engine as engines
from .dp.problem import INFEASIBLE
from .dp.reference import stage_details
from .errors import InfeasibleError, RuleError, SpecError
from .frameworks import framework
from .inputs.coerce import checked_degree, checked_switch, checked_threads, coerce_inputs
from .parallel import (
    DEFAULT_ORDER,
    RECOMPUTE_MODES,
    ZERO_STAGES,
    Candidate,
    LayerConfig,
    SpaceLimits,
    check_fraction,
    parse_order,
)
from .result import Plan, build_plan
from .schedule.memory import fits
from .schedule.step import batch_step_s
from .schedule.tasks import BatchTasks
from .search.problems import build_problem, dp_rows, ends_of
from .search.search import NoFullUse, SearchOutcome, check_ranking, framework_split, polish, polish_split, search
from .search.space import check_etp, check_tp, model_recompute_modes
from .specs import ClusterSpec, JobSpec, ModelSpec

if TYPE_CHECKING:
    from .schedule.simulate import SimResult


@contextmanager
def _priceable(scn: Scenario):
    """Turn the DP's int64 range checks into a SpecError naming the job: specs bound
    every size, but a product of them (nodes x time x micro-batches) can still exceed
    what integer picoseconds hold."""
    try:
        yield
    except OverflowError as error:  # integer byte/picosecond columns of the cost tables
        raise SpecError(f"job = {scn.job.global_batch} x {scn.job.seq_len} tokens of {scn.model.name}: "
                        f"too large to price in int64 bytes and picoseconds ({error})") from None
    except ValueError as error:
        if "overflows int64" not in str(error) and "must be non-negative" not in str(error):
            raise
        raise SpecError(f"job = {scn.job.global_batch} x {scn.job.seq_len} tokens of {scn.model.name}: "
                        f"a step is too long to price in int64 picoseconds ({error})") from None


SHARED_SCENARIOS = 4
"""Scenarios (cost tables and placement prices) kept for the next call on the same
model, cluster and job: a comparison or a Markov chain evaluates hundreds of
configurations of one job."""

_scenarios: OrderedDict = OrderedDict()


def _scenario(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, source=None) -> Scenario:
    """The :class:`~nest.cost.scenario.Scenario` of these specs, shared with the last
    :data:`SHARED_SCENARIOS` calls on equal specs (it only caches what is computed from
    them, so sharing changes no price); measured sources are never shared. A graph
    cluster's graph and device order are left out of its equality: they count here by
    identity (the shared Scenario holds the graph, so its id names no other graph)."""
    key = (model, cluster, id(cluster.graph), cluster.device_order, job)
    try:
        hash(key)
    except TypeError:  # a spec holding something unhashable: nothing to share by
        key = None
    if source is not None or key is None:
        return Scenario(model, cluster, job, source)
    scn = _scenarios.get(key)
    if scn is None:
        scn = _scenarios[key] = Scenario(model, cluster, job)
        while len(_scenarios) > SHARED_SCENARIOS:
            _scenarios.popitem(last=False)
    _scenarios.move_to_end(key)
    return scn


def clear_shared_scenarios() -> None:
    """Forget the Scenarios kept for later calls (:data:`SHARED_SCENARIOS`): the next
    call prices from scratch, as a fresh process does (benchmarks of a cold call)."""
    _scenarios.clear()


def plan(model: ModelSpec | str, cluster: ClusterSpec | str, job: JobSpec | None = None, *,
         engine: str = "cpp", threads: int | None = None,
         limits: SpaceLimits = SpaceLimits(), source=None, ranking: str = "schedule",
         explain_idle: bool = True) -> Plan:
    """The fastest plan for ``job`` on ``cluster`` that fits in memory.

    ``model`` and ``cluster`` are specs or preset names (a preset cluster at its default
    size); ``job`` defaults to the model's published batch and sequence length.
    ``limits`` restricts the joint space (TP, PP, DP, CP, EP, expert TP, VP, micro-batch,
    recomputation, SP, ZeRO stage, rank order). ``source`` replaces the analytic node
    costs (measured profiles; see :mod:`nest.cost.scenario`). The stage DP splits each
    candidate by the closed form of its schedule; ``ranking`` compares candidates by the
    exact schedule of that split (``"schedule"``, the time the plan reports) or by the
    closed form itself (``"closed-form"``, the DP's exact optimum). Raises
    :class:`~nest.errors.InfeasibleError` when no plan fits and
    :class:`~nest.errors.SpecError` on inconsistent inputs.

    When the plan leaves devices idle, ``explain_idle`` searches the plans that use every
    device once more and says in :attr:`~nest.result.Plan.devices_idle_reason` how much
    slower the fastest of them is, or why there is none.
    """
    started = time.perf_counter()
    threads = checked_threads(threads)
    explain_idle = checked_switch("explain_idle", explain_idle)
    model, cluster, job = coerce_inputs(model, cluster, job)
    scn = _scenario(model, cluster, job, source)
    best = _searched_plan(scn, limits, engine, threads, ranking, started)
    if explain_idle and best.devices_used < cluster.num_devices:
        best = replace(best, devices_idle_reason=_idle_reason(scn, limits, engine, threads, ranking, best),
                       solve_time_s=time.perf_counter() - started)
    return best


def _searched_plan(scn: Scenario, limits: SpaceLimits, engine: str, threads: int | None, ranking: str,
                   started: float, every_device: bool = False) -> Plan:
    """The search's plan (polished as :func:`plan` documents)."""
    with _priceable(scn):
        outcome = search(scn, limits, engine, threads, ranking, every_device)
    # the search's counts: a runner-up that polishing lifts above the winner has none
    evaluated, total = outcome.evaluated, outcome.total
    ends = outcome.split()
    if ranking == "schedule" and outcome.ends is None:  # a framework's own splits are not polished
        outcome, ends = _best_polished(scn, [outcome, *outcome.runners_up], engine)
    return build_plan(scn, outcome.candidate, outcome.problem, outcome.local, ends,
                      solve_time=time.perf_counter() - started, evaluated=evaluated,
                      engine=engine, candidates_total=total, threads=threads)


def _idle_reason(scn: Scenario, limits: SpaceLimits, engine: str, threads: int | None, ranking: str,
                 best: Plan) -> str:
    """Why ``best`` leaves devices idle: the fastest plan that uses every device is
    slower (by how much), or there is none (no degrees multiply to the device count, or
    none of those fits in memory)."""
    devices = scn.cluster.num_devices
    try:
        full = _searched_plan(scn, limits, engine, threads, ranking, time.perf_counter(), every_device=True)
    except NoFullUse as error:
        batch = "" if scn.job.uneven_batch else f", dp dividing the global batch {scn.job.global_batch}"
        within = "" if limits == SpaceLimits() else ", within the limits"
        return (f"{error} (tp x cp x pp x dp = {devices}{batch}, pp at most the model's {scn.num_nodes} "
                f"pipeline nodes{within})")
    except InfeasibleError as error:  # some configurations use every device; none of them fits
        return str(error)
    p = full.parallelism
    slower = full.step_time_s / best.step_time_s - 1
    etp = f" ETP {p['expert_tp']}" if p.get("expert_tp", 1) > 1 else ""
    return (f"the fastest plan using all {devices} (TP {p['tp']} PP {p['pp']} DP {p['dp']} CP {p['cp']} "
            f"EP {p['ep']}{etp} VP {p['vp']}) takes {full.step_time_s:.4g} s, {100 * slower:.1f}% slower")


def _best_polished(scn: Scenario, finalists: list[SearchOutcome], engine: str) -> tuple[SearchOutcome, list[int]]:
    """The finalist (best first) whose polished split has the fastest schedule, and that
    split (the first on ties)."""
    best = None
    for outcome in finalists:
        ends, seconds = polish(scn, outcome.candidate, outcome.problem, outcome.local, outcome.split(), engine)
        if best is None or seconds < best[0]:
            best = (seconds, outcome, ends)
    return best[1], best[2]


def evaluate(model: ModelSpec | str, cluster: ClusterSpec | str, job: JobSpec | None = None, *,
             tp: int, pp: int, dp: int, micro_batch: int, recompute: str = "none", sp: bool = False,
             distributed_optimizer: bool = False, zero: int | None = None, cp: int = 1, ep: int = 1,
             vp: int = 1, rank_order: str = DEFAULT_ORDER, layers_per_stage: list[int] | None = None,
             optimizer_offload: float = 0.0, activation_offload: int = 0, engine: str = "cpp",
             threads: int | None = None, source=None, ranking: str = "schedule", explain: bool = True,
             etp: int = 1) -> Plan:
    """Cost one fixed configuration; with ``layers_per_stage`` also a fixed split.

    ``etp`` is the expert tensor-parallel degree (Megatron's
    ``--expert-tensor-parallel-size``): each routed expert split over ``etp`` ranks of the
    expert grid ``etp x ep x expert_dp`` a stage's ``tp x cp x dp`` ranks fold into.

    ``zero`` is the ZeRO stage (0-3); ``distributed_optimizer=True`` is ZeRO-1 (Megatron's
    name for it). ``optimizer_offload`` is the fraction of each rank's optimizer state
    held and stepped on the host (:mod:`nest.cost.offload`; it needs a sharded optimizer,
    which a single replica gets as ZeRO-1). ``activation_offload`` is the number of
    transformer layers, the first ones, whose activations wait on the host between their
    forward and backward (:mod:`nest.cost.activation_offload`: one pipeline stage, no
    recomputation). With ``vp > 1`` the split has ``pp x vp`` virtual stages, listed in
    schedule order. Without a split, the stage DP's split for that configuration,
    polished on the exact schedule (:func:`~nest.search.search.polish_split`) unless
    ``ranking`` is ``"closed-form"``, as :func:`plan` splits it. Inputs as for
    :func:`plan`. ``explain=False``: a configuration that does not fit raises
    :class:`~nest.errors.InfeasibleError` without the diagnosis of what fills the memory
    and which changes fit, which costs more than the evaluation (for searches that only
    need to know).
    """
    started = time.perf_counter()
    threads = checked_threads(threads)
    sp, distributed_optimizer = checked_switch("sp", sp), checked_switch("distributed_optimizer", distributed_optimizer)
    tp, pp, dp, micro_batch, cp, ep, vp, etp = (checked_degree(name, value) for name, value in (
        ("tp", tp), ("pp", pp), ("dp", dp), ("micro_batch", micro_batch), ("cp", cp), ("ep", ep), ("vp", vp),
        ("etp", etp)))
    if zero is not None:
        zero = checked_degree("zero", zero, low=0)
    offload = check_fraction(optimizer_offload)
    model, cluster, job = coerce_inputs(model, cluster, job)
    offload_fractions((offload,), cluster.device, job)  # a host to offload to, an optimizer that can
    (layers,) = offload_layer_counts((activation_offload,), model, cluster.device)
    if layers and (pp > 1 or recompute != "none"):
        raise SpecError(f"activation_offload = {layers}: runs on one pipeline stage without recomputation "
                        f"(pp = {pp}, recompute = {recompute}; Megatron-Core TransformerConfig.__post_init__)")
    scn = _scenario(model, cluster, job, source)
    if zero is None:
        zero = 1 if distributed_optimizer or (offload and dp * cp == 1) else 0
    elif distributed_optimizer and zero != 1:
        raise SpecError(f"zero = {zero}: conflicts with distributed_optimizer (ZeRO-1)")
    if offload and not zero:
        raise SpecError(f"optimizer_offload = {offload:g}: needs a sharded optimizer (zero >= 1, "
                        "distributed_optimizer)")
    cand = Candidate(_fixed_config(scn, tp, sp, micro_batch, recompute, cp, ep, pp, layers, etp), pp, dp, vp,
                     zero, rank_order, offload)
    _check_fixed(scn, cand, layers_per_stage)
    fw = framework(job.framework)
    fw.check(model, job, cand)
    options = fw.splits(scn.num_nodes, pp, vp)
    if options is not None and layers_per_stage is not None and list(layers_per_stage) not in [o for o, _ in options]:
        closest = min((o for o, _ in options), key=lambda o: sum(abs(a - b) for a, b in zip(o, layers_per_stage)))
        raise RuleError(f"layers_per_stage = {','.join(map(str, layers_per_stage))}: framework = {fw.name} "
                        f"splits the layers itself; closest expressible: {','.join(map(str, closest))}")
    with _priceable(scn):
        priced = price_candidate(scn, cand)  # once: the DP's tables, a framework's splits, the plan
        fixed = build_problem(scn, dp_rows(priced))
        result = engines.solve(fixed, engine, threads) if layers_per_stage is None else None
    check_ranking(ranking)
    if layers_per_stage is None:
        if result.status[0] == INFEASIBLE:
            raise _refusal(explain, lambda: _diagnose().config_message(scn, cand, None, engine, threads))
        if options is not None:
            tasks = BatchTasks.of(priced)
            found = framework_split(fixed, 0, options, None if ranking == "closed-form" else
                                    lambda nodes: batch_step_s(tasks, 0, nodes, engine),
                                    lambda nodes: fits(tasks.priced, 0, nodes))
            if found is None:
                raise _refusal(explain, lambda: _diagnose().config_message(scn, cand, None, engine, threads),
                               f"no split framework {fw.name} generates fits in memory")
            ends = found[2]
        else:
            ends = ends_of(fixed, result, 0)
            if ranking == "schedule":
                ends = polish_split(scn, cand, fixed, 0, ends, engine)
    else:
        ends = [int(e) for e in np.cumsum(layers_per_stage)]
        if not all(stage["fits"] for stage in stage_details(fixed, 0, ends)):
            raise _refusal(explain, lambda: _diagnose().config_message(scn, cand, ends, engine, threads))
    built = build_plan(scn, cand, fixed, 0, ends, solve_time=time.perf_counter() - started,
                       evaluated=1, engine=engine, candidates_total=1, threads=threads, priced=priced)
    if built.peak_memory.total > scn.cluster.device.memory_bytes:
        raise _refusal(explain, lambda: _diagnose().peak_message(scn, built.peak_memory))
    if built.devices_used < cluster.num_devices:
        built = replace(built, devices_idle_reason=f"the configuration's tp x cp x pp x dp = {tp} x {cp} x {pp} x "
                                                   f"{dp} = {built.devices_used}")
    return built


def _refusal(explain: bool, message, prefix: str | None = None) -> InfeasibleError:
    """The InfeasibleError of :func:`evaluate`: ``prefix: message()``, or without
    ``explain`` the prefix alone (by default: the configuration does not fit)."""
    head = prefix or "the configuration does not fit in memory"
    if not explain:
        return InfeasibleError(head)
    return InfeasibleError(f"{prefix}: {message()}" if prefix else message())


def _diagnose():
    """The module that explains refusals, imported by the first refusal: a plan that fits
    never pays for it (issue 19)."""
    from .search import diagnose

    return diagnose


def simulate(plan: Plan, model=None, cluster=None, job: JobSpec | None = None, *, source=None, pad: bool = False,
             sync: str = "device") -> SimResult:
    """Simulate one training step of ``plan`` (a :class:`~nest.result.Plan`).

    ``model``, ``cluster`` and ``job`` must be those the plan was made for (specs or
    preset names); by default they are rebuilt from the plan (preset model by name, preset
    cluster by name and device count, the plan's batch, sequence length, dtype and
    overlap switches), which only works for presets with default job options. ``source``
    as for :func:`plan`. The result's ``predicted_s`` is the plan's step time and
    ``closed_form_s`` the DP's closed form of its split. ``pad`` and ``sync`` as for
    :func:`~nest.schedule.simulate.simulate_candidate`.
    """
    model, cluster, job = coerce_inputs(model if model is not None else plan.model["name"],
                                        cluster if cluster is not None else plan.cluster["name"],
                                        job if job is not None else JobSpec.of_document(plan.job),
                                        devices=plan.cluster["devices"] if cluster is None else None)
    scn = Scenario(model, cluster, job, source)
    cand = Candidate.of_parallelism(plan.parallelism, model.head_needs_embedding)
    layers = [len(s.layers) for s in plan.stages]
    from .schedule.simulate import simulate_candidate  # the event-driven replay, loaded when asked for

    result = simulate_candidate(scn, cand, layers, closed_form_s=plan.closed_form_step_time_s, pad=pad, sync=sync)
    return replace(result, predicted_s=plan.step_time_s)


def _positive(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SpecError(f"{name} = {value!r}: must be a positive integer")


def _fixed_config(scn: Scenario, tp, sp, micro_batch, recompute, cp, ep, pp, act_offload=0, etp=1) -> LayerConfig:
    for name, value in (("tp", tp), ("pp", pp), ("micro_batch", micro_batch), ("cp", cp), ("ep", ep)):
        _positive(name, value)
    check_tp(scn.model, scn.cluster, tp)
    check_etp(scn.model, etp)
    return LayerConfig(tp, sp, micro_batch, recompute, scn.model.head_needs_embedding and pp > 1, cp, ep,
                       act_offload, etp)


def _check_fixed(scn: Scenario, cand: Candidate, layers) -> None:
    job, devices, cfg = scn.job, scn.cluster.num_devices, cand.cfg
    for name, value in (("dp", cand.dp), ("vp", cand.vp)):
        _positive(name, value)
    if cand.devices > devices:
        raise SpecError(f"tp * cp * pp * dp = {cand.devices}: exceeds the cluster's {devices} devices")
    if job.global_batch % (cand.dp * cfg.micro_batch) and not job.uneven_batch:
        raise SpecError(f"global_batch = {job.global_batch}: must be divisible by dp * micro_batch "
                        f"= {cand.dp * cfg.micro_batch}")
    if cand.virtual_stages > scn.num_nodes:
        raise SpecError(f"pp * vp = {cand.virtual_stages}: more stages than the {scn.num_nodes} "
                        "layer-graph nodes")
    if cand.vp > 1 and (cand.pp == 1 or scn.micro_batches(cand) % cand.pp):
        raise SpecError(f"vp = {cand.vp}: interleaving needs pp > 1 and a micro-batch count "
                        f"({scn.micro_batches(cand)}) divisible by pp ({cand.pp})")
    if cfg.recompute not in RECOMPUTE_MODES:
        raise SpecError(f"recompute = {cfg.recompute!r}: must be one of {', '.join(RECOMPUTE_MODES)}")
    modes = model_recompute_modes(scn.model)
    if cfg.recompute not in modes:
        raise SpecError(f"recompute = {cfg.recompute}: recomputes a module {scn.model.name} does not have "
                        f"(its modes: {', '.join(modes)})")
    if cfg.sp and cfg.tp == 1:
        raise SpecError("sp = True: sequence parallelism needs tp > 1")
    if cand.zero not in ZERO_STAGES:
        raise SpecError(f"zero = {cand.zero!r}: must be 0, 1, 2 or 3")
    if cand.zero and cand.dp * cfg.cp == 1 and not (cand.zero == 1 and cand.offload):
        raise SpecError(f"zero = {cand.zero}: sharding needs dp * cp > 1")
    if job.seq_len % cfg.cp:
        raise SpecError(f"cp = {cfg.cp}: must divide seq_len ({job.seq_len})")
    if cfg.ep > 1 and not scn.model.is_moe:
        raise SpecError(f"ep = {cfg.ep}: {scn.model.name} has no experts")
    if scn.model.is_moe and (scn.model.num_experts % cfg.ep or (cfg.tp * cfg.cp * cand.dp) % cfg.ep):
        raise SpecError(f"ep = {cfg.ep}: must divide num_experts ({scn.model.num_experts}) and "
                        f"tp * cp * dp ({cfg.tp * cfg.cp * cand.dp})")
    if (cfg.tp * cfg.cp * cand.dp) % (cfg.ep * cfg.etp):
        # Megatron-Core's expert grid: the world divides into etp x ep x pp
        # (core_v0.14.0 parallel_state.py initialize_model_parallel)
        raise SpecError(f"etp = {cfg.etp}: ep * etp = {cfg.ep * cfg.etp} must divide tp * cp * dp "
                        f"({cfg.tp * cfg.cp * cand.dp})")
    parse_order(cand.order)
    if layers is not None:
        text = ",".join(map(str, layers))
        if len(layers) != cand.virtual_stages or any((not isinstance(x, int)) or x < 1 for x in layers):
            raise SpecError(f"layers_per_stage = {text}: needs {cand.virtual_stages} positive counts")
        if sum(layers) != scn.num_nodes:
            raise SpecError(f"layers_per_stage = {text}: sums to {sum(layers)}, the layer graph has "
                            f"{scn.num_nodes} nodes (embedding, {scn.model.num_layers} blocks, head)")
