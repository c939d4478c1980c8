"""Why a job or a configuration does not fit, and the smallest change that makes it fit.

The search (:mod:`nest.search.search`) raises :class:`~nest.errors.InfeasibleError` with these
messages: the binding constraint (device memory, or limits that leave no configuration),
what the fullest stage holds, which knobs were already searched, and the least
disruptive changes that fit -- each one checked by planning or evaluating it.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ..cost.scenario import AnalyticSource, Scenario
from ..dp import engine as engines
from ..dp.problem import INF
from ..dp.reference import stage_details
from ..errors import InfeasibleError, RuleError, SpecError
from ..frameworks import framework
from ..parallel import RECOMPUTE_LADDER, Candidate, SpaceLimits
from ..presets.clusters import CLUSTERS, GRAPH_CLUSTERS
from ..specs import ClusterSpec
from ..units import GiB
from .floors import memory_bound
from .problems import ends_of, problem
from .space import Partials, enumerate_partials, expand, expand_arrays, model_recompute_modes

HOPELESS_BYTES = 2.0**80
"""A device memory no stage needs: a candidate without a split there has none at any size."""

def memory_message(scn: Scenario, partials: Partials, memory, limits: SpaceLimits,
                    engine: str, threads: int | None) -> str:
    """Why nothing fits, and the smallest changes that would fit.

    The binding constraint is device memory: the message gives what the most frugal
    plans need (and of what: weights and optimizer state, activations, the fixed
    reserve), then the smallest changes found to fit -- more devices (the cluster grown
    along its outermost tier), a restriction of the search lifted (recomputation, ZeRO,
    micro-batch, ... when ``limits`` excluded them), devices with more memory. The
    search itself already tried every micro-batch, recomputation and ZeRO stage the
    limits allow.
    """
    capacity = scn.cluster.device.memory_bytes
    cands = expand(partials, _frugal(scn, partials, memory, limits), limits)
    if not cands:
        raise InfeasibleError(empty_space_message(scn, limits))
    needs = [(_min_capacity(scn, c, engine, threads), i) for i, c in enumerate(cands)]
    needed, i = min(needs)
    c = cands[i]
    if math.isinf(needed):
        host = scn.host_share.usable_bytes if scn.host_share is not None else 0.0
        return (f"no plan fits in memory: the most memory-frugal plans offload optimizer state that does not fit "
                f"the host memory ({host / GiB:.2f} GiB usable per device); use more devices, or hosts with more "
                "memory")
    searched = [name for name, field in (("micro-batch", "micro_batch"), ("recomputation", "recompute"),
                                         ("ZeRO stage", "zero")) if getattr(limits, field) is None]
    words = ", ".join(searched[:-1]) + " and " + searched[-1] if len(searched) > 1 else "".join(searched)
    tried = f"; every {words} was searched" if searched else ""
    # the same devices with a restriction lifted first, then more devices, then more memory
    changes = _limit_changes(scn, limits, engine, threads) + _device_change(scn, limits, engine, threads)
    changes.append(f"devices with at least {needed / GiB:.2f} GiB")
    return (f"no plan fits in memory: the most memory-frugal plan needs {needed / GiB:.2f} GiB per "
            f"device, {scn.cluster.device.name} has {capacity / GiB:.2f} GiB (most frugal "
            f"configuration: tp={c.cfg.tp} cp={c.cfg.cp} ep={c.cfg.ep}{f' etp={c.cfg.etp}' if c.cfg.etp > 1 else ''}"
            f" pp={c.pp} dp={c.dp} zero={c.zero} micro_batch={c.cfg.micro_batch} recompute={c.cfg.recompute}"
            f"{f' optimizer_offload={c.offload:g}' if c.offload else ''}; "
            f"{_memory_parts(scn, c, needed, engine, threads)}{tried}); smallest changes that fit: "
            + "; or ".join(changes))


def _frugal(scn: Scenario, partials: Partials, memory, limits: SpaceLimits, scan: int = 4096) -> np.ndarray:
    """The four most frugal partials by ``memory`` (a bound that shards with ZeRO-3);
    under a framework, which may forbid ZeRO-2/3 with pipelining, the two most frugal of
    each pipeline depth whose candidates it runs (among the ``scan`` most frugal)."""
    order = np.argsort(memory, kind="stable")
    if scn.job.framework == "any":
        return order[:4]
    order = order[:scan]
    _, source, _ = expand_arrays(partials, order, limits)
    admitted = np.isin(order, source)  # partials with a candidate the framework runs
    picked, per_depth = [], {}
    for i in order[admitted]:
        depth = int(partials.pp[i])
        if per_depth.get(depth, 0) < 2:
            per_depth[depth] = per_depth.get(depth, 0) + 1
            picked.append(i)
    return np.array(picked, dtype=np.int64)


def _memory_parts(scn: Scenario, cand: Candidate, capacity: float, engine: str, threads: int | None) -> str:
    """What fills the fullest stage of ``cand``'s best split at ``capacity``: parameter
    state (weights, gradients, optimizer), activations in flight, the fixed part."""
    dp_problem = replace(problem(scn, [cand]), capacity=capacity)
    result = engines.solve(dp_problem, engine, threads)
    if result.best < 0:
        return "no split"
    ends = ends_of(dp_problem, result, 0)
    stage = max(stage_details(dp_problem, 0, ends), key=lambda d: d["memory_bytes"])
    start = int(dp_problem.pos_offset[0])
    k = ends.index(stage["end"])
    span = slice(stage["start"], stage["end"])
    weights = float(dp_problem.cand_mem_per_param[0]) * float(dp_problem.mem_params[0, span].sum())
    acts = float(dp_problem.pos_inflight[start + k]) * float(dp_problem.act_bytes[0, span].sum())
    fixed = float(dp_problem.cand_mem_fixed[0])
    return (f"its fullest stage holds {weights / GiB:.2f} GiB of weights, gradients and optimizer state, "
            f"{acts / GiB:.2f} GiB of activations and {fixed / GiB:.2f} GiB reserved and workspace")


def _frugal_fit(scn: Scenario, limits: SpaceLimits, engine: str, threads: int | None) -> tuple[bool, float]:
    """``(fits, bound)``: whether some plan of ``scn`` fits in memory, and the smallest
    lower bound on any plan's memory. The cheap bound first, then the stage DP on the
    candidates of the most frugal partials (:func:`_frugal`; a sufficient test: a candidate with a
    feasible split is a plan). Inputs the space or the source reject do not fit."""
    try:
        partials = enumerate_partials(scn.model, scn.cluster, scn.job, scn.num_nodes, limits)
        if not len(partials):
            return False, INF
        table = scn.config_table(partials.configs, partials.config_arrays)
        memory = memory_bound(scn, table, partials)
        bound = float(memory.min())
        if bound > scn.cluster.device.memory_bytes:
            return False, bound
        cands = expand(partials, _frugal(scn, partials, memory, limits), limits)
        return bool(cands) and engines.solve(problem(scn, cands), engine, threads).best >= 0, bound
    except SpecError:  # e.g. a measured profile lacks the TP degree a lifted limit allows
        return False, INF


def _resized(cluster: ClusterSpec, devices: int) -> ClusterSpec | None:
    """``cluster`` with ``devices`` devices: a hierarchical preset re-sized by its own
    rules, any other hierarchy grown along its outermost tier; None for graphs and for
    counts the cluster cannot have."""
    if cluster.is_graph:
        # a generated graph preset is rebuilt at the new size (graphs from files are not)
        if cluster.name not in GRAPH_CLUSTERS or devices > MAX_SUGGESTED_GRAPH_DEVICES:
            return None
        try:
            return replace(GRAPH_CLUSTERS[cluster.name].sized(devices), device=cluster.device)
        except SpecError:
            return None
    template = CLUSTERS.get(cluster.name)
    if template is not None:
        try:
            if template.sized(cluster.num_devices).tiers == cluster.tiers:
                return replace(template.sized(devices), device=cluster.device)
        except SpecError:
            return None
    outer = cluster.tiers[-1]
    inner = cluster.num_devices // outer.fanout
    if devices % inner:
        return None
    return replace(cluster, tiers=cluster.tiers[:-1] + (replace(outer, fanout=devices // inner),))


MAX_GROWTH = 12
"""Doublings of the device count tried when suggesting more devices (4096x)."""

MAX_SUGGESTED_DEVICES = 2**16
"""Largest device count the suggestion tries (enumerating huge spaces on an error path
costs more than the answer is worth)."""

MAX_SUGGESTED_GRAPH_DEVICES = 2**12
"""The same for graph presets, whose networks are built and priced per size."""


def _device_change(scn: Scenario, limits: SpaceLimits, engine: str, threads: int | None) -> list[str]:
    """``["N devices"]`` for the smallest count found to fit (doubling the cluster, then
    quarter steps between the last two sizes); ``[]`` when the cluster cannot be resized,
    when the fixed memory alone exceeds the device, or when the memory bound stops
    shrinking before a size fits (activations of one layer, not parameters, bind)."""
    n = scn.cluster.num_devices
    if scn.reserve_bytes >= scn.cluster.device.memory_bytes:
        return []

    def fit(devices: int) -> tuple[bool, float]:
        cluster = _resized(scn.cluster, devices)
        if cluster is None:
            return False, INF
        return _frugal_fit(Scenario(scn.model, cluster, scn.job, scn.source), limits, engine, threads)

    low, previous = n, _frugal_fit(scn, limits, engine, threads)[1]
    for _ in range(MAX_GROWTH):
        high = low * 2
        if high > MAX_SUGGESTED_DEVICES:
            break
        fits, bound = fit(high)
        if fits:
            for step in (1, 2, 3):  # the smallest quarter step between low and high that fits
                if (low * step) % 4 == 0 and fit(low + low * step // 4)[0]:
                    high = low + low * step // 4
                    break
            return [f"{high} devices (the cluster has {n})"]
        if bound != INF and previous != INF and bound >= 0.999 * previous:
            break  # more devices no longer lower the memory bound
        if bound != INF:
            previous = bound
        low = high
    return []


_LIFTABLE = (("recompute", "recomputation"), ("zero", "ZeRO stage"), ("micro_batch", "micro-batch"),
             ("sp", "sequence parallelism"), ("tp", "tensor parallelism"), ("pp", "pipeline stages"),
             ("cp", "context parallelism"), ("vp", "interleaving"), ("dp", "data parallelism"),
             ("offload", "optimizer offload"))


def _limit_changes(scn: Scenario, limits: SpaceLimits, engine: str, threads: int | None) -> list[str]:
    """Each restriction of the search whose removal alone makes some plan fit."""
    changes = []
    for field, label in _LIFTABLE:
        if getattr(limits, field) is not None and _frugal_fit(scn, replace(limits, **{field: None}),
                                                              engine, threads)[0]:
            changes.append(f"allow any {label} (limited to {field}={','.join(map(str, getattr(limits, field)))})")
    return changes


def empty_space_message(scn: Scenario, limits: SpaceLimits) -> str:
    """No configuration at all (before memory): the binding constraint is the limits or
    the device count and the batch."""
    restricted = [f"{f}={','.join(map(str, v))}" for f, v in vars(limits).items() if v is not None]
    why = (f" under the limits {' '.join(restricted)}; lift some of them" if restricted else
           "; use more devices or a larger global batch")
    target = "" if scn.job.framework == "any" else f" that framework {scn.job.framework} can run"
    return (f"no configuration of {scn.model.name}{target} fits {scn.cluster.num_devices} devices with global "
            f"batch {scn.job.global_batch}{why}")


def config_message(scn: Scenario, cand: Candidate, ends: list[int] | None, engine: str,
                    threads: int | None) -> str:
    """Why the fixed configuration ``cand`` (split at ``ends``, or its best split) does
    not fit, and the smallest change of each kind that makes it fit, least disruptive
    kind first: a higher ZeRO stage, recomputation, a smaller micro-batch, more pipeline
    stages (the split searched; possibly on more devices), another split; else all of
    the first three at once; always devices with more memory."""
    device = scn.cluster.device
    capacity = device.memory_bytes
    if ends is None:
        needed = _min_capacity(scn, cand, engine, threads)
        head = (f"this configuration does not fit in memory: its best split needs {needed / GiB:.2f} GiB "
                f"per device, {device.name} has {capacity / GiB:.2f} GiB")
    else:
        details = stage_details(problem(scn, [cand]), 0, ends)
        k, stage = next((k, d) for k, d in enumerate(details) if not d["fits"])
        needed = max(d["memory_bytes"] for d in details)
        head = (f"stage {k} (nodes {stage['start']}..{stage['end'] - 1}) needs {stage['memory_bytes'] / GiB:.2f} "
                f"GiB per device, {device.name} has {capacity / GiB:.2f} GiB")
    fitting, on_cluster = [], False
    for options in _single_changes(scn, cand, ends is not None):
        for label, changed, keep_split in options:  # weakest change of the kind first
            need = _need(scn, changed, ends if keep_split else None, engine, threads)
            if need <= capacity:
                here = changed.devices <= scn.cluster.num_devices
                fitting.append((not here, f"{label} ({need / GiB:.2f} GiB)"))
                on_cluster = on_cluster or here
                break
    if ends is not None:
        best = _min_capacity(scn, cand, engine, threads)
        if best <= capacity:
            fitting.append((False, f"another split (the most frugal needs {best / GiB:.2f} GiB)"))
            on_cluster = True
    if not on_cluster:  # no single change fits these devices: the frugal settings together
        cfg = cand.cfg
        zeros = (3, 2, 1, cand.zero) if cand.dp * cfg.cp > 1 else (cand.zero,)
        zero = next((z for z in zeros if _runs(scn, replace(cand, zero=z, cfg=replace(cfg, recompute="full")))),
                    cand.zero)
        for mb in dict.fromkeys((cfg.micro_batch, 1)):
            frugal = replace(cand, zero=zero, cfg=replace(cfg, recompute="full", micro_batch=mb))
            if frugal == cand or not _runs(scn, frugal):
                continue
            need = _need(scn, frugal, ends, engine, threads)
            if need <= capacity:
                parts = [f"zero={zero}"] * (zero != cand.zero) + ["recompute=full"] * (cfg.recompute != "full") \
                    + [f"micro_batch={mb}"] * (mb != cfg.micro_batch)
                fitting.append((False, f"{' with '.join(parts)} ({need / GiB:.2f} GiB)"))
                break
    # changes on the cluster's own devices first, then those needing more devices
    changes = [text for _, text in sorted(fitting, key=lambda f: f[0])]
    changes.append(f"devices with at least {needed / GiB:.2f} GiB")
    return f"{head}; smallest changes that fit: " + "; or ".join(changes)


def peak_message(scn: Scenario, peak) -> str:
    """Why a split the stage DP accepted does not fit at its exact activation peak
    (``peak``: the fullest rank's :class:`~nest.schedule.memory.DeviceMemory`)."""
    device = scn.cluster.device
    return (f"pipeline rank {peak.rank} needs {peak.total / GiB:.2f} GiB at its activation peak, {device.name} "
            f"has {device.memory_bytes / GiB:.2f} GiB (weights {peak.weights / GiB:.2f}, gradients "
            f"{peak.gradients / GiB:.2f}, optimizer {peak.optimizer / GiB:.2f}, activations "
            f"{peak.activations / GiB:.2f} GiB with {list(peak.live)} micro-batches live per chunk, transient "
            f"{peak.transient / GiB:.2f}, reserve {peak.reserve / GiB:.2f}); split the layers more evenly across "
            "its chunks, or see `nest plan` for what fits")


def _need(scn: Scenario, cand: Candidate, ends: list[int] | None, engine: str, threads: int | None) -> float:
    """Device memory ``cand`` needs: its best split's (``ends`` None) or that split's."""
    if ends is None:
        return _min_capacity(scn, cand, engine, threads)
    return max(d["memory_bytes"] for d in stage_details(problem(scn, [cand]), 0, ends))


def _runs(scn: Scenario, cand: Candidate) -> bool:
    """Whether the job's framework runs ``cand`` (a suggestion must be one it can)."""
    try:
        framework(scn.job.framework).check(scn.model, scn.job, cand)
    except RuleError:
        return False
    return True


def _single_changes(scn: Scenario, cand: Candidate, fixed_split: bool) -> list[list[tuple]]:
    """One-knob changes of ``cand`` that lower memory, by kind (least disruptive kind
    first), each kind's options weakest first: ``(label, candidate, keeps the split)``.
    Every option is a valid configuration (ZeRO needs data or context parallelism; a
    divisor of the micro-batch keeps the batch divisible and the interleaving rule) that
    the job's framework runs."""
    cfg = cand.cfg
    kinds = []
    if cand.dp * cfg.cp > 1:
        kinds.append([(f"zero={z}", replace(cand, zero=z), True) for z in range(cand.zero + 1, 4)])
    model_modes = model_recompute_modes(scn.model)
    stronger = RECOMPUTE_LADDER[RECOMPUTE_LADDER.index(cfg.recompute) + 1:]
    # recomputation and pipelining replace activation offload (Megatron-Core runs neither with it)
    kinds.append([(f"recompute={r}" + (" with activation_offload=0" if cfg.act_offload else ""),
                   replace(cand, cfg=replace(cfg, recompute=r, act_offload=0)), True)
                  for r in stronger if r in model_modes])
    kinds.append([(f"micro_batch={mb}", replace(cand, cfg=replace(cfg, micro_batch=mb)), True)
                  for mb in range(cfg.micro_batch - 1, 0, -1) if cfg.micro_batch % mb == 0])
    if cand.pp == 1 and cfg.recompute == "none" and scn.cluster.device.host is not None \
            and not scn.model.kv_lora_rank and isinstance(scn.source, AnalyticSource):
        layers = scn.model.num_layers  # eighths of the layers, then all but one
        counts = sorted({n for n in [layers * k // 8 for k in range(1, 8)] + [layers - 1] if cfg.act_offload < n})
        kinds.append([(f"activation_offload={n}", replace(cand, cfg=replace(cfg, act_offload=n)), True)
                      for n in counts])
    if not fixed_split:
        stages = []
        pp = cand.pp * 2
        while pp * cand.vp <= scn.num_nodes:
            devices = cfg.tp * cfg.cp * pp * cand.dp
            if devices > scn.cluster.num_devices and scn.cluster.is_graph:
                break  # a graph is the network as given: more devices would be another graph
            more = f" on {devices} devices" if devices > scn.cluster.num_devices else ""
            tied = scn.model.head_needs_embedding and pp > 1
            stages.append((f"pp={pp}{more}" + (" with activation_offload=0" if cfg.act_offload else ""),
                           replace(cand, pp=pp, cfg=replace(cfg, tied_copy=tied, act_offload=0)), False))
            pp *= 2
        kinds.append(stages)
    kinds = [[option for option in kind if _runs(scn, option[1])] for kind in kinds]
    return [k for k in kinds if k]


def _min_capacity(scn: Scenario, cand: Candidate, engine: str, threads: int | None) -> float:
    """Smallest device memory at which ``cand`` has a feasible split (bisection); inf when
    none has (its offloaded state does not fit the host)."""
    fixed = problem(scn, [cand])
    solvable = lambda cap: engines.solve(replace(fixed, capacity=cap), engine, threads).best >= 0  # noqa: E731
    lo, hi = 0.0, max(float(scn.cluster.device.memory_bytes), 1.0)
    if not solvable(HOPELESS_BYTES):
        return math.inf
    while not solvable(hi):
        lo, hi = hi, hi * 2
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if solvable(mid) else (mid, hi)
    return hi
