"""The search: bound every candidate, solve the promising ones with the stage DP.

Partial candidates (everything but the ZeRO stage and the rank order) are sorted by a
cheap lower bound: compute-only time, ``(m v + p - 1) x max(ceil(sum / (p v)), largest
node)``. They are expanded and priced in fixed-size batches: each batch gets exact
per-candidate tables (every group placed on the network by its rank order) and an exact
lower bound, the DP prunes inside it, and later batches keep only partials whose cheap
bound does not exceed the best objective found. Batch boundaries do not depend on the
thread count, so the result is deterministic.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from . import engine as engines
from .dp_problem import INF, INFEASIBLE, DPProblem, DPResult
from .dp_reference import stage_details
from .errors import InfeasibleError, SpecError
from .layout import DEFAULT_ORDER, parse_order
from .loading import load_cluster, load_model
from .result import Plan, build_plan
from .space import RANK_ORDERS, Partials, SpaceLimits, check_tp, enumerate_partials, expand
from .specs import ClusterSpec, JobSpec, ModelSpec
from .tables import Candidate, Scenario

BATCH = 192
"""Partial candidates expanded and solved per DP call."""

GiB = 2**30


def _ceil_div(a, b):
    return -(-a // b)


@dataclass
class _Bounds:
    cheap: np.ndarray  # lower bound on the objective (picoseconds)
    memory: np.ndarray  # lower bound on the peak memory (bytes)


def _bounds(scn: Scenario, partials: Partials, limits: SpaceLimits) -> _Bounds:
    orders = limits.rank_order or RANK_ORDERS
    rows = scn.compute_rows(partials.configs, with_comm=all(o.startswith("tp-cp-") for o in orders))
    c, p, v = partials.config, partials.pp, partials.vp
    mbs = np.array([cfg.micro_batch for cfg in partials.configs], dtype=np.int64)[c]
    m = scn.job.global_batch // (partials.dp * mbs)
    positions = p * v
    time_floor = np.maximum(_ceil_div(rows["time_ps"].sum(axis=1)[c], positions), rows["time_ps"].max(axis=1)[c])
    cheap = (m * v + p - 1) * time_floor
    # Memory: the most frugal sharding (ZeRO-3 over data x context, experts over theirs).
    opt, wb = scn.job.optimizer, scn.weight_bytes
    cp = np.array([cfg.cp for cfg in partials.configs], dtype=np.int64)[c]
    tp = np.array([cfg.tp for cfg in partials.configs], dtype=np.int64)[c]
    ep = np.array([cfg.ep for cfg in partials.configs], dtype=np.int64)[c]
    per_param = wb + opt.grad_bytes + opt.sharded_bytes
    dense = rows["params"].sum(axis=1)[c] * per_param / (partials.dp * cp)
    expert = rows["expert_params"].sum(axis=1)[c] * per_param / (tp * cp * partials.dp // ep)
    acts = rows["act_bytes"].sum(axis=1)[c]
    memory = scn.job.reserved_memory_bytes + rows["transient"][c] + (dense + expert + acts) / p
    return _Bounds(cheap, memory)


def _problem(scn: Scenario, cands: list[Candidate], capacity: float | None = None) -> DPProblem:
    rows = scn.rows(cands)
    positions = np.diff(rows["pos_offset"])
    t_sum, t_max = rows["time_ps"].sum(axis=1), rows["time_ps"].max(axis=1)
    w_sum, w_max = rows["params"].sum(axis=1), rows["params"].max(axis=1)
    time_floor = np.maximum(_ceil_div(t_sum, positions), t_max)
    w_floor = np.maximum(_ceil_div(w_sum, positions), w_max)
    bound = rows["scale"] * time_floor + np.floor(rows["g0"] + rows["g1"] * w_floor + 0.5).astype(np.int64)
    return DPProblem.build(
        time_ps=rows["time_ps"], params=rows["params"], mem_params=rows["mem_params"],
        act_bytes=rows["act_bytes"], send_ps=rows["send_ps"], cand_config=np.arange(len(cands)),
        cand_scale=rows["scale"], cand_mem_fixed=rows["mem_fixed"],
        cand_mem_per_param=rows["mem_per_param"], cand_g0=rows["g0"], cand_g1=rows["g1"],
        cand_lower_bound=bound, pos_offset=rows["pos_offset"], pos_inflight=rows["pos_inflight"],
        pos_tier=rows["pos_tier"],
        capacity=scn.cluster.device.memory_bytes if capacity is None else capacity)


@dataclass
class SearchOutcome:
    """The winning candidate with its batch problem and result, and search statistics."""

    candidate: Candidate
    problem: DPProblem
    result: DPResult
    local: int
    evaluated: int
    total: int


def search(scn: Scenario, limits: SpaceLimits = SpaceLimits(), engine: str = "cpp",
           threads: int | None = None) -> SearchOutcome:
    """Find the best candidate; InfeasibleError if nothing fits in memory."""
    partials = enumerate_partials(scn.model, scn.cluster, scn.job, scn.num_nodes, limits)
    if len(partials) == 0:
        raise InfeasibleError(f"no configuration of {scn.model.name} fits {scn.cluster.num_devices} "
                              f"devices with global batch {scn.job.global_batch}")
    bounds = _bounds(scn, partials, limits)
    capacity = scn.cluster.device.memory_bytes
    order = np.flatnonzero(bounds.memory <= capacity)
    order = order[np.argsort(bounds.cheap[order], kind="stable")]
    best_objective, best = INF, None
    evaluated = total = 0
    for start in range(0, len(order), BATCH):
        index = order[start:start + BATCH]
        index = index[bounds.cheap[index] <= best_objective]
        if len(index) == 0:
            break  # sorted: every later partial is bounded out too
        cands = expand(partials, index, limits)
        problem = _problem(scn, cands)
        result = engines.solve(problem, engine, threads)
        evaluated += result.evaluated
        total += len(cands)
        if result.best >= 0 and result.objective[result.best] < best_objective:
            best_objective = int(result.objective[result.best])
            best = SearchOutcome(cands[result.best], problem, result, result.best, 0, 0)
    if best is None:
        raise InfeasibleError(_memory_message(scn, partials, bounds, limits, engine, threads))
    best.evaluated, best.total = evaluated, total
    return best


def _memory_message(scn: Scenario, partials: Partials, bounds: _Bounds, limits: SpaceLimits,
                    engine: str, threads: int | None) -> str:
    """Why nothing fits: the smallest per-device memory any of the most frugal plans needs."""
    capacity = scn.cluster.device.memory_bytes
    frugal = np.argsort(bounds.memory, kind="stable")[:4]
    cands = expand(partials, frugal, limits)
    needs = [(_min_capacity(scn, c, engine, threads), i) for i, c in enumerate(cands)]
    needed, i = min(needs)
    c = cands[i]
    return (f"no plan fits in memory: the most memory-frugal plan needs {needed / GiB:.2f} GiB per "
            f"device, {scn.cluster.device.name} has {capacity / GiB:.2f} GiB (most frugal "
            f"configuration: tp={c.cfg.tp} cp={c.cfg.cp} ep={c.cfg.ep} pp={c.pp} dp={c.dp} "
            f"zero={c.zero} micro_batch={c.cfg.micro_batch} recompute={c.cfg.recompute}); use more "
            "devices, devices with more memory, or a smaller model")


def _min_capacity(scn: Scenario, cand: Candidate, engine: str, threads: int | None) -> float:
    """Smallest device memory at which ``cand`` has a feasible split (bisection)."""
    problem = _problem(scn, [cand])
    solvable = lambda cap: engines.solve(replace(problem, capacity=cap), engine, threads).best >= 0  # noqa: E731
    lo, hi = 0.0, max(float(scn.cluster.device.memory_bytes), 1.0)
    while not solvable(hi):
        lo, hi = hi, hi * 2
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if solvable(mid) else (mid, hi)
    return hi


def _coerce(model, cluster, job) -> tuple[ModelSpec, ClusterSpec, JobSpec]:
    model, cluster = load_model(model), load_cluster(cluster)
    if job is None:
        if not model.default_global_batch:
            raise SpecError(f"job: model {model.name} has no default global batch; pass a JobSpec")
        job = JobSpec(global_batch=model.default_global_batch, seq_len=model.seq_len)
    return model, cluster, job


def plan(model: ModelSpec | str, cluster: ClusterSpec | str, job: JobSpec | None = None, *,
         engine: str = "cpp", threads: int | None = None,
         limits: SpaceLimits = SpaceLimits(), source=None) -> Plan:
    """The fastest plan for ``job`` on ``cluster`` that fits in memory.

    ``model`` and ``cluster`` are specs or preset names (a preset cluster at its default
    size); ``job`` defaults to the model's published batch and sequence length.
    ``limits`` restricts the joint space (TP, PP, DP, CP, EP, VP, micro-batch,
    recomputation, SP, ZeRO stage, rank order). ``source`` replaces the analytic node
    costs (measured profiles; see :class:`~nest.tables.Scenario`). Raises
    :class:`~nest.errors.InfeasibleError` when no plan fits and
    :class:`~nest.errors.SpecError` on inconsistent inputs.
    """
    started = time.perf_counter()
    model, cluster, job = _coerce(model, cluster, job)
    scn = Scenario(model, cluster, job, source)
    outcome = search(scn, limits, engine, threads)
    return build_plan(scn, outcome.candidate, outcome.problem, outcome.local,
                      _ends(outcome.problem, outcome.result, outcome.local),
                      solve_time=time.perf_counter() - started, evaluated=outcome.evaluated,
                      engine=engine, candidates_total=outcome.total)


def _ends(problem: DPProblem, result: DPResult, n: int) -> list[int]:
    start = int(problem.pos_offset[n])
    return [int(e) for e in result.ends[start:start + problem.stages(n)]]


def evaluate(model: ModelSpec | str, cluster: ClusterSpec | str, job: JobSpec | None = None, *,
             tp: int, pp: int, dp: int, micro_batch: int, recompute: str = "none", sp: bool = False,
             distributed_optimizer: bool = False, zero: int | None = None, cp: int = 1, ep: int = 1,
             vp: int = 1, rank_order: str = DEFAULT_ORDER, layers_per_stage: list[int] | None = None,
             engine: str = "cpp", threads: int | None = None, source=None) -> Plan:
    """Cost one fixed configuration; with ``layers_per_stage`` also a fixed split.

    ``zero`` is the ZeRO stage (0-3); ``distributed_optimizer=True`` is ZeRO-1 (Megatron's
    name for it). With ``vp > 1`` the split has ``pp x vp`` virtual stages, listed in
    schedule order. Without a split the optimal split for that configuration is searched.
    Inputs as for :func:`plan`.
    """
    started = time.perf_counter()
    model, cluster, job = _coerce(model, cluster, job)
    scn = Scenario(model, cluster, job, source)
    if zero is None:
        zero = 1 if distributed_optimizer else 0
    elif distributed_optimizer and zero != 1:
        raise SpecError(f"zero = {zero}: conflicts with distributed_optimizer (ZeRO-1)")
    cand = Candidate(_fixed_config(scn, tp, sp, micro_batch, recompute, cp, ep, pp),
                     pp, dp, vp, zero, rank_order)
    _check_fixed(scn, cand, layers_per_stage)
    problem = _problem(scn, [cand])
    if layers_per_stage is None:
        result = engines.solve(problem, engine, threads)
        if result.status[0] == INFEASIBLE:
            needed = _min_capacity(scn, cand, engine, threads)
            raise InfeasibleError(
                f"this configuration does not fit in memory: its best split needs {needed / GiB:.2f} "
                f"GiB per device, {cluster.device.name} has {cluster.device.memory_bytes / GiB:.2f} GiB")
        ends = _ends(problem, result, 0)
    else:
        ends = [int(e) for e in np.cumsum(layers_per_stage)]
        for k, stage in enumerate(stage_details(problem, 0, ends)):
            if not stage["fits"]:
                raise InfeasibleError(
                    f"stage {k} (nodes {stage['start']}..{stage['end'] - 1}) needs "
                    f"{stage['memory_bytes'] / GiB:.2f} GiB per device, {cluster.device.name} has "
                    f"{cluster.device.memory_bytes / GiB:.2f} GiB")
    return build_plan(scn, cand, problem, 0, ends, solve_time=time.perf_counter() - started,
                      evaluated=1, engine=engine, candidates_total=1)


def _fixed_config(scn: Scenario, tp, sp, micro_batch, recompute, cp, ep, pp):
    from .costs import LayerConfig

    for name, value in (("tp", tp), ("pp", pp), ("micro_batch", micro_batch), ("cp", cp), ("ep", ep)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise SpecError(f"{name} = {value!r}: must be a positive integer")
    check_tp(scn.model, scn.cluster, tp)
    return LayerConfig(tp, sp, micro_batch, recompute, scn.model.tied_embeddings and pp > 1, cp, ep)


def _check_fixed(scn: Scenario, cand: Candidate, layers) -> None:
    job, devices, cfg = scn.job, scn.cluster.num_devices, cand.cfg
    for name, value in (("dp", cand.dp), ("vp", cand.vp)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise SpecError(f"{name} = {value!r}: must be a positive integer")
    if cand.devices > devices:
        raise SpecError(f"tp * cp * pp * dp = {cand.devices}: exceeds the cluster's {devices} devices")
    if job.global_batch % (cand.dp * cfg.micro_batch):
        raise SpecError(f"global_batch = {job.global_batch}: must be divisible by dp * micro_batch "
                        f"= {cand.dp * cfg.micro_batch}")
    if cand.virtual_stages > scn.num_nodes:
        raise SpecError(f"pp * vp = {cand.virtual_stages}: more stages than the {scn.num_nodes} "
                        "layer-graph nodes")
    if cand.vp > 1 and (cand.pp == 1 or scn.micro_batches(cand) % cand.pp):
        raise SpecError(f"vp = {cand.vp}: interleaving needs pp > 1 and a micro-batch count "
                        f"({scn.micro_batches(cand)}) divisible by pp ({cand.pp})")
    if cfg.recompute not in ("none", "selective", "full"):
        raise SpecError(f"recompute = {cfg.recompute!r}: must be one of none, selective, full")
    if cfg.sp and cfg.tp == 1:
        raise SpecError("sp = True: sequence parallelism needs tp > 1")
    if cand.zero not in (0, 1, 2, 3):
        raise SpecError(f"zero = {cand.zero!r}: must be 0, 1, 2 or 3")
    if cand.zero and cand.dp * cfg.cp == 1:
        raise SpecError(f"zero = {cand.zero}: sharding needs dp * cp > 1")
    if job.seq_len % cfg.cp:
        raise SpecError(f"cp = {cfg.cp}: must divide seq_len ({job.seq_len})")
    if cfg.ep > 1 and not scn.model.is_moe:
        raise SpecError(f"ep = {cfg.ep}: {scn.model.name} has no experts")
    if scn.model.is_moe and (scn.model.num_experts % cfg.ep or (cfg.tp * cfg.cp * cand.dp) % cfg.ep):
        raise SpecError(f"ep = {cfg.ep}: must divide num_experts ({scn.model.num_experts}) and "
                        f"tp * cp * dp ({cfg.tp * cfg.cp * cand.dp})")
    parse_order(cand.order)
    if layers is not None:
        text = ",".join(map(str, layers))
        if len(layers) != cand.virtual_stages or any((not isinstance(x, int)) or x < 1 for x in layers):
            raise SpecError(f"layers_per_stage = {text}: needs {cand.virtual_stages} positive counts")
        if sum(layers) != scn.num_nodes:
            raise SpecError(f"layers_per_stage = {text}: sums to {sum(layers)}, the layer graph has "
                            f"{scn.num_nodes} nodes (embedding, {scn.model.num_layers} blocks, head)")
