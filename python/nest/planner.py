"""The search: bound every candidate, solve the promising ones with the stage DP.

Candidates are sorted by a cheap lower bound (compute time and optimizer step only;
no layout needed) and handed to the DP in fixed-size batches. Each batch gets exact
per-candidate tables (data-parallel group and pipeline-boundary tiers) and an exact
lower bound, the DP prunes inside it, and later batches keep only candidates whose
cheap bound does not exceed the best objective found. Batch boundaries do not depend
on the thread count, so the result is deterministic.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from . import engine as engines
from .dp_problem import INF, INFEASIBLE, DPProblem, DPResult
from .dp_reference import stage_details
from .errors import InfeasibleError, SpecError
from .layout import DEFAULT_ORDER
from .loading import load_cluster, load_model
from .result import Plan, build_plan
from .space import Candidates, SpaceLimits, enumerate_candidates
from .specs import ClusterSpec, JobSpec, ModelSpec
from .tables import PS, ConfigTables, Scenario

BATCH = 256
"""Candidates per DP call between two refinements of the pruning bound."""

GiB = 2**30


@dataclass
class _Bounds:
    """Vectorised per-candidate scalars and bounds."""

    scale: np.ndarray
    mem_fixed: np.ndarray
    mem_per_param: np.ndarray
    opt0: np.ndarray
    opt1: np.ndarray
    cheap_bound: np.ndarray
    memory_bound: np.ndarray


def _ceil_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return -(-a // b)


def _sync_ps(g0, g1, w) -> np.ndarray:
    return np.floor(np.asarray(g0) + np.asarray(g1) * np.asarray(w, dtype=np.float64) + 0.5).astype(np.int64)


def _bounds(scn: Scenario, tables: ConfigTables, cands: Candidates) -> _Bounds:
    c, p = cands.config, cands.pp
    m = scn.micro_batches(cands)
    scale = m + p - 1
    mem_fixed = scn.job.reserved_memory_bytes + tables.transient_bytes[c].astype(np.float64)
    mpp = scn.memory_per_param(cands.dp, cands.distributed_optimizer)
    opt0, opt1 = scn.optimizer_terms(cands.dp, cands.distributed_optimizer)
    opt0, opt1 = opt0 * PS, opt1 * PS
    total_time = tables.total_time_ps[c]
    time_floor = np.maximum(_ceil_div(total_time, p), tables.time_ps.max(axis=1)[c])
    total_params = tables.params.sum(axis=1)[c]
    params_floor = np.maximum(_ceil_div(total_params, p), tables.params.max(axis=1)[c])
    cheap = scale * time_floor + _sync_ps(opt0, opt1, params_floor)
    total_act = tables.act_bytes.sum(axis=1)[c].astype(np.float64)
    memory = mem_fixed + np.maximum(mpp * params_floor, (mpp * total_params + total_act) / p)
    return _Bounds(scale, mem_fixed, mpp, opt0, opt1, cheap, memory)


def _problem(scn: Scenario, tables: ConfigTables, cands: Candidates, bounds: _Bounds,
             index: np.ndarray) -> DPProblem:
    batch = cands.take(index)
    sync0, sync1 = scn.sync_terms(batch)
    g0 = bounds.opt0[index] + sync0 * PS
    g1 = bounds.opt1[index] + sync1 * PS
    p = batch.pp
    m = scn.micro_batches(batch)
    offsets = np.concatenate(([0], np.cumsum(p)))
    inflight = np.empty(int(offsets[-1]))
    tiers = np.full(int(offsets[-1]), -1, dtype=np.int64)
    for n in range(len(batch)):
        start, stages = offsets[n], int(p[n])
        inflight[start:start + stages] = np.minimum(stages - np.arange(stages), m[n])
        _, boundary = scn.placement(batch.configs[batch.config[n]].tp, int(batch.dp[n]), stages)
        tiers[start:start + stages - 1] = boundary
    c = batch.config
    params_floor = np.maximum(_ceil_div(tables.params.sum(axis=1)[c], p), tables.params.max(axis=1)[c])
    exact_bound = np.maximum(bounds.cheap_bound[index], bounds.scale[index] * np.maximum(
        _ceil_div(tables.total_time_ps[c], p), tables.time_ps.max(axis=1)[c]) + _sync_ps(g0, g1, params_floor))
    return DPProblem.build(
        time_ps=tables.time_ps, params=tables.params, act_bytes=tables.act_bytes,
        send_ps=tables.send_ps, cand_config=c, cand_scale=bounds.scale[index],
        cand_mem_fixed=bounds.mem_fixed[index], cand_mem_per_param=bounds.mem_per_param[index],
        cand_g0=g0, cand_g1=g1, cand_lower_bound=exact_bound, pos_offset=offsets,
        pos_inflight=inflight, pos_tier=tiers, capacity=scn.cluster.device.memory_bytes)


@dataclass
class SearchOutcome:
    """The best candidate's problem and result, and search statistics."""

    problem: DPProblem | None
    result: DPResult | None
    candidate: int
    candidates: Candidates
    evaluated: int
    total: int


def search(scn: Scenario, limits: SpaceLimits = SpaceLimits(), engine: str = "cpp",
           threads: int | None = None) -> SearchOutcome:
    """Find the best candidate; InfeasibleError if nothing fits in memory."""
    cands = enumerate_candidates(scn.model, scn.cluster, scn.job, scn.num_nodes, limits)
    if len(cands) == 0:
        raise InfeasibleError(f"no configuration of {scn.model.name} fits {scn.cluster.num_devices} "
                              f"devices with global batch {scn.job.global_batch}")
    tables = scn.config_tables(cands.configs)
    bounds = _bounds(scn, tables, cands)
    capacity = scn.cluster.device.memory_bytes
    fits = bounds.memory_bound <= capacity
    order = np.flatnonzero(fits)
    order = order[np.argsort(bounds.cheap_bound[order], kind="stable")]
    best_objective, best = INF, None
    evaluated = 0
    position = 0
    while position < len(order):
        index = order[position:position + BATCH]
        index = index[bounds.cheap_bound[index] <= best_objective]
        position += BATCH
        if len(index) == 0:
            break  # sorted: every later candidate is bounded out too
        problem = _problem(scn, tables, cands, bounds, index)
        result = engines.solve(problem, engine, threads)
        evaluated += result.evaluated
        if result.best >= 0 and result.objective[result.best] < best_objective:
            best_objective = int(result.objective[result.best])
            best = (problem, result, int(index[result.best]))
    if best is None:
        raise InfeasibleError(_memory_message(scn, tables, cands, bounds, engine, threads))
    problem, result, candidate = best
    return SearchOutcome(problem, result, candidate, cands, evaluated, len(cands))


def _memory_message(scn: Scenario, tables: ConfigTables, cands: Candidates, bounds: _Bounds,
                    engine: str, threads: int | None) -> str:
    """Why nothing fits: the smallest per-device memory any of the most frugal plans needs."""
    capacity = scn.cluster.device.memory_bytes
    frugal = np.argsort(bounds.memory_bound, kind="stable")[:4]
    needed = min(_min_capacity(scn, tables, cands, bounds, int(n), engine, threads) for n in frugal)
    cfg = cands.configs[cands.config[frugal[0]]]
    return (f"no plan fits in memory: the most memory-frugal plan needs {needed / GiB:.2f} GiB per "
            f"device, {scn.cluster.device.name} has {capacity / GiB:.2f} GiB (most frugal "
            f"configuration: tp={cfg.tp} pp={cands.pp[frugal[0]]} dp={cands.dp[frugal[0]]} "
            f"micro_batch={cfg.micro_batch} recompute={cfg.recompute}); use more devices, devices "
            "with more memory, or a smaller model")


def _min_capacity(scn: Scenario, tables: ConfigTables, cands: Candidates, bounds: _Bounds, n: int,
                  engine: str, threads: int | None) -> float:
    """Smallest device memory at which candidate ``n`` has a feasible split (bisection)."""
    problem = _problem(scn, tables, cands, bounds, np.array([n]))
    lo, hi = float(bounds.memory_bound[n]), max(float(bounds.memory_bound[n]), 1.0)
    while engines.solve(replace(problem, capacity=hi), engine, threads).best < 0:
        lo, hi = hi, hi * 2
    for _ in range(40):
        mid = (lo + hi) / 2
        if engines.solve(replace(problem, capacity=mid), engine, threads).best >= 0:
            hi = mid
        else:
            lo = mid
    return hi


def _coerce(model, cluster, job) -> tuple[ModelSpec, ClusterSpec, JobSpec]:
    model, cluster = load_model(model), load_cluster(cluster)
    if job is None:
        if not model.default_global_batch:
            raise SpecError(f"job: model {model.name} has no default global batch; pass a JobSpec")
        job = JobSpec(global_batch=model.default_global_batch, seq_len=model.seq_len)
    return model, cluster, job


def plan(model: ModelSpec | str, cluster: ClusterSpec | str, job: JobSpec | None = None, *,
         engine: str = "cpp",
         threads: int | None = None, limits: SpaceLimits = SpaceLimits(),
         rank_order: str = DEFAULT_ORDER) -> Plan:
    """The fastest plan for ``job`` on ``cluster`` that fits in memory.

    ``model`` and ``cluster`` are specs or preset names (a preset cluster at its default
    size); ``job`` defaults to the model's published batch and sequence length. Raises
    :class:`~nest.errors.InfeasibleError` when no plan fits and
    :class:`~nest.errors.SpecError` on inconsistent inputs.
    """
    started = time.perf_counter()
    model, cluster, job = _coerce(model, cluster, job)
    scn = Scenario(model, cluster, job, rank_order)
    outcome = search(scn, limits, engine, threads)
    local = outcome.result.best
    ends = _ends(outcome.problem, outcome.result, local)
    return build_plan(scn, outcome.candidates, outcome.candidate, outcome.problem, local, ends,
                      solve_time=time.perf_counter() - started, evaluated=outcome.evaluated,
                      engine=engine)


def _ends(problem: DPProblem, result: DPResult, n: int) -> list[int]:
    start = int(problem.pos_offset[n])
    return [int(e) for e in result.ends[start:start + problem.stages(n)]]


def evaluate(model: ModelSpec | str, cluster: ClusterSpec | str, job: JobSpec | None = None, *,
             tp: int, pp: int, dp: int,
             micro_batch: int, recompute: str = "none", sp: bool = False,
             distributed_optimizer: bool = False, layers_per_stage: list[int] | None = None,
             engine: str = "cpp", threads: int | None = None,
             rank_order: str = DEFAULT_ORDER) -> Plan:
    """Cost one fixed configuration; with ``layers_per_stage`` also a fixed split.

    Without a split the optimal split for that configuration is searched. Inputs as
    for :func:`plan`.
    """
    started = time.perf_counter()
    model, cluster, job = _coerce(model, cluster, job)
    scn = Scenario(model, cluster, job, rank_order)
    _check_fixed(scn, tp, pp, dp, micro_batch, recompute, sp, distributed_optimizer, layers_per_stage)
    limits = SpaceLimits(tp=(tp,), pp=(pp,), dp=(dp,), micro_batch=(micro_batch,),
                         recompute=(recompute,), sp=(sp,), distributed_optimizer=(distributed_optimizer,))
    cands = enumerate_candidates(model, cluster, job, scn.num_nodes, limits)
    assert len(cands) == 1, "a fully fixed configuration is exactly one candidate"
    tables = scn.config_tables(cands.configs)
    bounds = _bounds(scn, tables, cands)
    problem = _problem(scn, tables, cands, bounds, np.array([0]))
    if layers_per_stage is None:
        result = engines.solve(problem, engine, threads)
        if result.status[0] == INFEASIBLE:
            needed = _min_capacity(scn, tables, cands, bounds, 0, engine, threads)
            raise InfeasibleError(
                f"this configuration does not fit in memory: its best split needs {needed / GiB:.2f} "
                f"GiB per device, {cluster.device.name} has {cluster.device.memory_bytes / GiB:.2f} GiB")
        ends = _ends(problem, result, 0)
    else:
        ends = [int(e) for e in np.cumsum(layers_per_stage)]
        for stage in stage_details(problem, 0, ends):
            if not stage["fits"]:
                raise InfeasibleError(
                    f"stage {ends.index(stage['end'])} (nodes {stage['start']}..{stage['end'] - 1}) "
                    f"needs {stage['memory_bytes'] / GiB:.2f} GiB per device, "
                    f"{cluster.device.name} has {cluster.device.memory_bytes / GiB:.2f} GiB")
    return build_plan(scn, cands, 0, problem, 0, ends, solve_time=time.perf_counter() - started,
                      evaluated=1, engine=engine)


def _check_fixed(scn: Scenario, tp, pp, dp, micro_batch, recompute, sp, distopt, layers) -> None:
    job, devices = scn.job, scn.cluster.num_devices
    for name, value in (("tp", tp), ("pp", pp), ("dp", dp), ("micro_batch", micro_batch)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise SpecError(f"{name} = {value!r}: must be a positive integer")
    if tp * pp * dp > devices:
        raise SpecError(f"tp * pp * dp = {tp * pp * dp}: exceeds the cluster's {devices} devices")
    if tp > scn.cluster.tiers[0].fanout:
        raise SpecError(f"tp = {tp}: tensor parallelism must stay within one '{scn.cluster.tiers[0].name}' "
                        f"group of {scn.cluster.tiers[0].fanout} devices")
    if job.global_batch % (dp * micro_batch):
        raise SpecError(f"global_batch = {job.global_batch}: must be divisible by dp * micro_batch "
                        f"= {dp * micro_batch}")
    if pp > scn.num_nodes:
        raise SpecError(f"pp = {pp}: more stages than the {scn.num_nodes} layer-graph nodes")
    if recompute not in ("none", "selective", "full"):
        raise SpecError(f"recompute = {recompute!r}: must be one of none, selective, full")
    if sp and tp == 1:
        raise SpecError("sp = True: sequence parallelism needs tp > 1")
    if distopt and dp == 1:
        raise SpecError("distributed_optimizer = True: needs dp > 1")
    if layers is not None:
        if len(layers) != pp or any((not isinstance(x, int)) or x < 1 for x in layers):
            raise SpecError(f"layers_per_stage = {','.join(map(str, layers))}: needs {pp} positive counts")
        if sum(layers) != scn.num_nodes:
            raise SpecError(f"layers_per_stage = {','.join(map(str, layers))}: sums to {sum(layers)}, "
                            f"the layer graph has {scn.num_nodes} nodes (embedding, "
                            f"{scn.model.num_layers} blocks, head)")
