"""Named planning strategies to compare nest against (the NEST paper's baselines).

Every strategy takes a model, a sized cluster and a job (specs or preset names, as
:func:`nest.plan`) and returns a :class:`StrategyResult`: a :class:`~nest.result.Plan`
costed by nest's model on the *real* cluster, or the reason it found none.

``manual``
    Megatron-LM's rules as practitioners apply them (Narayanan et al. 2021, section 3.3;
    the Megatron-LM / NeMo recipes): tensor parallelism over a whole node (the largest
    TP degree that divides the heads and fits the innermost tier) when the model needs
    model parallelism, i.e. when it does not fit on one device with data parallelism
    alone; then the smallest pipeline depth that divides the layers and fits in memory
    (trying no, selective, then full recomputation at each depth; depths with which
    ``tp x pp`` divides the device count first, so that no device idles); the remaining
    devices data-parallel (the largest degree that divides the batch); micro-batch 1,
    sequence parallelism with TP, the distributed optimizer (ZeRO-1) with DP, expert
    parallelism over as many ranks as divide the experts (MoE), no context parallelism
    or interleaving, the default rank order and the layers split evenly (the embedding
    joins the first stage, the head the last).
``topology-blind``
    The same exact search (:func:`nest.plan`) on a copy of the cluster whose tiers all
    have one flat bandwidth and latency (the Piper / Phaze view of the network: by
    default the average a pair of devices sees, each tier weighted by the number of
    device pairs whose innermost common tier it is), then the configuration and split
    it chose re-costed with :func:`nest.evaluate` on the real cluster.
``mcmc``
    A seeded, budgeted Metropolis-Hastings search over the same joint space
    (FlexFlow-style: Jia et al. 2019): a state is a configuration and a split, a
    proposal changes one dimension (TP, PP, CP, EP, VP, micro-batch, recomputation,
    ZeRO stage, rank order) or moves one stage boundary; a state is costed with
    :func:`nest.evaluate` on the real cluster and accepted with probability
    ``min(1, exp(-beta (new - old) / old))``. It starts from the manual configuration
    (or pure data parallelism) and returns the best state visited in ``budget``
    proposals.
``given``
    Any configuration (:func:`nest.evaluate`'s keyword arguments).
``nest``
    :func:`nest.plan`.

Under a job's framework (``job.framework``) every strategy keeps to what the framework
runs: its limits narrow the values tried, ``manual`` takes the framework's default split
and its nearest ZeRO stage (torchtitan's FSDP for the distributed optimizer), MCMC moves
among the framework's splits, and a configuration that breaks one of its rules is
infeasible for the strategy (its reason names the rule).
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field, replace

from ..errors import InfeasibleError, RuleError, SpecError
from ..frameworks import framework
from ..inputs.coerce import coerce_inputs
from ..parallel import CLASSIC_RECOMPUTE, RANK_ORDERS, SpaceLimits
from ..planner import evaluate, plan
from ..result import Plan
from ..search.space import (
    VIRTUAL_STAGES,
    context_parallel_degrees,
    divisors,
    expert_parallel_degrees,
    model_recompute_modes,
    tensor_parallel_degrees,
)
from ..specs import ClusterSpec, JobSpec, ModelSpec, Tier

STRATEGIES = ("manual", "topology-blind", "mcmc", "nest")
"""The strategies :func:`nest.studies.compare.compare` runs by default, in display order."""

ALL_STRATEGIES = STRATEGIES + ("given",)

MCMC_BUDGET = 300
"""Default number of MCMC proposals (each one :func:`nest.evaluate` call, ~1-5 ms)."""

MCMC_BETA = 20.0
"""Inverse temperature: a proposal 5% slower than the current state is accepted with
probability exp(-1)."""



@dataclass(frozen=True)
class StrategyResult:
    """The outcome of one strategy: a plan on the real cluster, or why there is none."""

    strategy: str
    plan: Plan | None
    reason: str | None = None
    wall_s: float = 0.0
    info: dict = field(default_factory=dict)

    @property
    def feasible(self) -> bool:
        return self.plan is not None

    def config(self) -> dict | None:
        """The plan's configuration as :func:`nest.evaluate` keyword arguments."""
        return None if self.plan is None else plan_config(self.plan)


def plan_config(p: Plan) -> dict:
    """``nest.evaluate`` keyword arguments that reproduce ``p`` (configuration and split)."""
    par = p.parallelism
    return {"tp": par["tp"], "pp": par["pp"], "dp": par["dp"], "cp": par["cp"], "ep": par["ep"],
            "vp": par["vp"], "sp": par["sp"], "zero": par["zero"], "recompute": par["recompute"],
            "micro_batch": par["micro_batch"], "rank_order": par["rank_order"],
            "optimizer_offload": par["optimizer_offload_fraction"],
            "activation_offload": par["activation_offload_layers"],
            "layers_per_stage": [len(s.layers) for s in p.stages]}




def _timed(name: str, run) -> StrategyResult:
    started = time.perf_counter()
    try:
        found, info = run()
    except (InfeasibleError, RuleError) as error:  # a rule of the job's framework: not runnable there
        return StrategyResult(name, None, str(error), time.perf_counter() - started)
    if isinstance(found, str):
        return StrategyResult(name, None, found, time.perf_counter() - started, info)
    return StrategyResult(name, found, None, time.perf_counter() - started, info)


def _nodes(model: ModelSpec, source) -> int:
    return len(source.kinds) if source is not None else model.num_layers + 2


def even_split(nodes: int, stages: int) -> list[int]:
    """``nodes`` layer-graph nodes in ``stages`` contiguous parts differing by at most one
    (the larger parts in the middle, where the embedding and head are not)."""
    base, extra = divmod(nodes, stages)
    sizes = [base] * stages
    middle = list(range(stages))
    middle.sort(key=lambda k: (abs(2 * k - (stages - 1)), k))
    for k in middle[:extra]:
        sizes[k] += 1
    return sizes


def manual_split(num_layers: int, pp: int, vp: int = 1) -> list[int]:
    """Megatron's even split of ``num_layers`` blocks over ``pp x vp`` stages, with the
    embedding on the first stage and the head on the last (layer-graph nodes)."""
    stages = pp * vp
    per = num_layers // stages
    sizes = [per] * stages
    sizes[0] += 1
    sizes[-1] += 1
    return sizes


# -- manual -------------------------------------------------------------------------------


def manual_config(model, cluster, job=None, *, source=None, limits: SpaceLimits = SpaceLimits()):
    """The manual (Megatron-rules) configuration: ``(evaluate kwargs, plan)`` or a reason.

    See the module docstring for the rules.
    """
    model, cluster, job = coerce_inputs(model, cluster, job)
    fw = framework(job.framework)
    limits = fw.limits(limits, model, job)
    devices = cluster.num_devices
    tps = list(limits.tp) if limits.tp else tensor_parallel_degrees(model, cluster)
    nodes = _nodes(model, source)
    layers = nodes - 2
    # why each tried configuration failed; a refusal's diagnosis (what fills the memory)
    # is only written out when nothing fits, re-asked then (it costs more than the try)
    reasons: list = []

    def attempt(tp: int, pp: int, recompute: str):
        dp_room = devices // (tp * pp)
        dps = [d for d in divisors(job.global_batch) if d <= dp_room]
        if not dps:
            return None
        dp = dps[-1]
        ep = math.gcd(model.num_experts, tp * dp) if model.is_moe else 1
        sp = tp > 1 and (limits.sp is None or True in limits.sp)
        # The distributed optimizer with DP; where the framework lacks it, its sharding
        # (ZeRO-3: torchtitan's FSDP) or none.
        zeros = [z for z in ((1, 3, 2, 0) if dp > 1 else (0,)) if limits.zero is None or z in limits.zero]
        splits = fw.splits(nodes, pp, 1)
        split = splits[0][0] if splits else manual_split(layers, pp)  # the framework's default split
        broken = []
        for zero in zeros:
            kwargs = {"tp": tp, "pp": pp, "dp": dp, "micro_batch": 1, "recompute": recompute, "sp": sp,
                      "zero": zero, "cp": 1, "ep": ep, "vp": 1, "rank_order": (limits.rank_order or RANK_ORDERS)[0],
                      "layers_per_stage": split}
            try:
                return kwargs, evaluate(model, cluster, job, source=source, explain=False, **kwargs)
            except RuleError as error:
                broken.append(str(error))
            except InfeasibleError:
                reasons.append((f"tp={tp} pp={pp} dp={dp} recompute={recompute}", kwargs))
                return None
        reasons.append(f"tp={tp} pp={pp} dp={dp} recompute={recompute}: "
                       + (broken[0] if broken else f"no ZeRO stage among {limits.zero}"))
        return None

    recomputes = list(limits.recompute) if limits.recompute else list(CLASSIC_RECOMPUTE)
    # Depths that split the blocks evenly; practitioners also keep every device busy
    # (tp x pp divides the device count) when some depth allows it.
    depths = [p for p in divisors(layers) if p * min(tps) <= devices and p <= nodes]
    # Does the model need model parallelism? Only if data parallelism alone does not fit.
    if 1 in tps:
        for recompute in recomputes:
            found = attempt(1, 1, recompute)
            if found:
                return found
    tp = max(t for t in tps)
    whole = [p for p in depths if (devices // tp) % p == 0]
    for pp in whole + [p for p in depths if p not in whole]:
        if tp * pp > devices:
            break
        for recompute in recomputes:
            found = attempt(tp, pp, recompute)
            if found:
                return found
    if not reasons:
        return f"no Megatron-style configuration of {model.name} fits {devices} devices"
    smallest = min((_refusal(model, cluster, job, source, *r) if isinstance(r, tuple) else r for r in reasons),
                   key=_needed_gib)
    return f"no Megatron-style configuration fits in memory (most frugal: {smallest})"


def _refusal(model, cluster, job, source, label: str, kwargs: dict) -> str:
    """``label: why`` the configuration ``kwargs`` does not fit (evaluate's diagnosis)."""
    try:
        evaluate(model, cluster, job, source=source, **kwargs)
    except InfeasibleError as error:
        return f"{label}: {error}"
    raise RuntimeError(f"{label}: evaluate refused it, then fitted when asked why")


def _needed_gib(reason: str) -> float:
    try:
        return float(reason.split(" needs ")[1].split(" GiB")[0])
    except (IndexError, ValueError):
        return math.inf


def manual(model, cluster, job=None, *, source=None, limits: SpaceLimits = SpaceLimits(),
           **_) -> StrategyResult:
    """Megatron-style manual configuration (module docstring), costed on ``cluster``."""
    def run():
        found = manual_config(model, cluster, job, source=source, limits=limits)
        if isinstance(found, str):
            return found, {}
        return found[1], {}
    return _timed("manual", run)


# -- topology-blind -----------------------------------------------------------------------


def flat_cluster(cluster: ClusterSpec, bandwidth: float | None = None,
                 latency: float | None = None) -> ClusterSpec:
    """``cluster`` with every tier at one bandwidth and latency (same fanouts).

    Defaults: the averages over ordered pairs of distinct devices, each pair at the
    bandwidth (latency) of the innermost tier containing both.
    """
    sizes = (1,) + cluster.group_sizes()
    pairs = [sizes[t + 1] - sizes[t] for t in range(len(cluster.tiers))]
    total = sum(pairs) or 1
    if bandwidth is None:
        bandwidth = sum(w * t.effective_bandwidth for w, t in zip(pairs, cluster.tiers)) / total
    if latency is None:
        latency = sum(w * t.latency for w, t in zip(pairs, cluster.tiers)) / total
    tiers = tuple(Tier(t.name, t.fanout, bandwidth, latency) for t in cluster.tiers)
    return replace(cluster, name=f"{cluster.name}-flat", tiers=tiers, graph=None, device_order=())


def topology_blind(model, cluster, job=None, *, source=None, limits: SpaceLimits = SpaceLimits(),
                   engine: str = "cpp", threads: int | None = None,
                   flat_bandwidth: float | None = None, **_) -> StrategyResult:
    """nest's search on a flat network, re-costed on the real one."""
    def run():
        m, c, j = coerce_inputs(model, cluster, job)
        flat = flat_cluster(c, flat_bandwidth)
        # only the blind plan's configuration and split are used: no idle-device search
        blind = plan(m, flat, j, engine=engine, threads=threads, limits=limits, source=source, explain_idle=False)
        real = evaluate(m, c, j, source=source, **plan_config(blind))
        return real, {"flat_bandwidth_GBps": flat.tiers[0].bandwidth / 1e9,
                      "flat_latency_us": flat.tiers[0].latency * 1e6,
                      "predicted_step_time_s": blind.step_time_s}
    return _timed("topology-blind", run)


# -- nest and given -----------------------------------------------------------------------


def nest_plan(model, cluster, job=None, *, source=None, limits: SpaceLimits = SpaceLimits(),
              engine: str = "cpp", threads: int | None = None, **_) -> StrategyResult:
    """nest's own plan."""
    def run():
        return plan(model, cluster, job, engine=engine, threads=threads, limits=limits,
                    source=source), {}
    return _timed("nest", run)


def given(model, cluster, job=None, *, config: dict | None = None, source=None, **_) -> StrategyResult:
    """A user configuration (``nest.evaluate`` keyword arguments). Without ``dp`` the
    largest data-parallel degree that fits the devices and divides the batch is used."""
    def run():
        if not config:
            raise SpecError("strategy 'given' needs a configuration (tp, pp, micro_batch, ...)")
        m, c, j = coerce_inputs(model, cluster, job)
        kwargs = dict(config)
        if kwargs.get("dp") is None:
            room = c.num_devices // (kwargs.get("tp", 1) * kwargs.get("cp", 1) * kwargs.get("pp", 1))
            mbs = kwargs.get("micro_batch", 1)
            fits = [d for d in divisors(j.global_batch // mbs) if d <= room] if j.global_batch % mbs == 0 else []
            if not fits:
                return f"tp x cp x pp = {c.num_devices // max(room, 1)}: no data-parallel degree fits", {}
            kwargs["dp"] = fits[-1]
        try:
            return evaluate(m, c, j, source=source, **kwargs), {}
        except SpecError as error:
            return str(error), {}
    return _timed("given", run)


# -- MCMC -----------------------------------------------------------------------------------


_DIMENSIONS = ("tp", "pp", "cp", "ep", "vp", "micro_batch", "recompute", "zero", "rank_order",
               "split", "split")  # boundary moves twice as likely: the split has many degrees


class _Chain:
    """The MCMC state space of one (model, cluster, job)."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, job: JobSpec, source, limits):
        self.model, self.cluster, self.job, self.source = model, cluster, job, source
        self.framework = framework(job.framework)
        limits = self.framework.limits(limits, model, job)
        self.devices = cluster.num_devices
        self.nodes = _nodes(model, source)
        self.tps = list(limits.tp) if limits.tp else tensor_parallel_degrees(model, cluster)
        self.cps = list(limits.cp) if limits.cp else context_parallel_degrees(job, self.devices)
        self.eps = list(limits.ep) if limits.ep else expert_parallel_degrees(model)
        self.vps = list(limits.vp) if limits.vp else list(VIRTUAL_STAGES)
        self.recomputes = list(limits.recompute) if limits.recompute else list(model_recompute_modes(model))
        self.orders = list(limits.rank_order) if limits.rank_order else list(RANK_ORDERS)
        self.zeros = list(limits.zero) if limits.zero else [0, 1, 2, 3]
        self.batches = list(limits.micro_batch) if limits.micro_batch else divisors(job.global_batch)
        self.pps = list(limits.pp) if limits.pp else list(range(1, self.nodes + 1))
        self.sequence_parallel = limits.sp is None or True in limits.sp
        self.cache: dict[tuple, float] = {}
        self.plans: dict[tuple, Plan] = {}
        self.evaluations = 0

    @staticmethod
    def key(state: dict) -> tuple:
        return tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in sorted(state.items()))

    def repair(self, s: dict, resplit: bool) -> dict | None:
        """Make ``s`` consistent: dp the largest that fits, ep, vp, ZeRO and the split."""
        s = dict(s)
        room = self.devices // (s["tp"] * s["cp"] * s["pp"])
        if room < 1 or self.job.global_batch % s["micro_batch"]:
            return None
        dps = [d for d in divisors(self.job.global_batch // s["micro_batch"]) if d <= room]
        if not dps:
            return None
        s["dp"] = dps[-1]
        ranks = s["tp"] * s["cp"] * s["dp"]
        if self.model.is_moe and ranks % s["ep"]:
            s["ep"] = max(e for e in self.eps if ranks % e == 0)
        micro = self.job.global_batch // (s["dp"] * s["micro_batch"])
        if s["vp"] > 1 and (s["pp"] == 1 or micro % s["pp"] or s["pp"] * s["vp"] > self.nodes):
            s["vp"] = 1
        if s["dp"] * s["cp"] == 1:
            s["zero"] = 0
        s["sp"] = s["tp"] > 1 and self.sequence_parallel
        stages = s["pp"] * s["vp"]
        if stages > self.nodes:
            return None
        options = self.splits(s["pp"], s["vp"])
        if options is not None:  # the framework splits the layers itself
            if not options:
                return None
            if list(s["split"]) not in options:
                s["split"] = list(options[0])
        elif resplit or len(s["split"]) != stages:
            s["split"] = even_split(self.nodes, stages)
        return s

    def splits(self, pp: int, vp: int) -> list[list[int]] | None:
        """The splits the job's framework can run (None: any)."""
        options = self.framework.splits(self.nodes, pp, vp)
        return None if options is None else [list(nodes) for nodes, _ in options]

    def cost(self, s: dict) -> float:
        k = self.key(s)
        if k not in self.cache:
            self.evaluations += 1
            kwargs = {name: s[name] for name in ("tp", "pp", "dp", "cp", "ep", "vp", "sp", "zero",
                                                  "recompute", "micro_batch", "rank_order")}
            try:
                p = evaluate(self.model, self.cluster, self.job, source=self.source,
                             layers_per_stage=list(s["split"]), explain=False, **kwargs)
                self.cache[k] = p.step_time_s
                self.plans[k] = p
            except (InfeasibleError, SpecError):
                self.cache[k] = math.inf
        return self.cache[k]

    @staticmethod
    def _neighbour(values: list, current, rng: random.Random):
        if current not in values:
            return rng.choice(values)
        i = values.index(current)
        options = [values[j] for j in (i - 1, i + 1) if 0 <= j < len(values)]
        return rng.choice(options) if options else current

    def propose(self, s: dict, rng: random.Random) -> dict | None:
        dim = rng.choice(_DIMENSIONS)
        t = dict(s)
        options = self.splits(s["pp"], s["vp"]) if dim == "split" else None
        if options is not None:
            others = [o for o in options if o != list(s["split"])]
            return self.repair({**t, "split": rng.choice(others)}, resplit=False) if others else None
        if dim == "split":
            split = list(s["split"])
            if len(split) < 2:
                return None
            b = rng.randrange(len(split) - 1)  # boundary between stage b and b + 1
            step = rng.choice((-1, 1)) * rng.choice((1, 1, 1, 2, 3))
            if split[b] + step < 1 or split[b + 1] - step < 1:
                return None
            split[b] += step
            split[b + 1] -= step
            t["split"] = split
            return self.repair(t, resplit=False)
        values = {"tp": self.tps, "pp": self.pps, "cp": self.cps, "ep": self.eps, "vp": self.vps,
                  "micro_batch": self.batches, "recompute": self.recomputes, "zero": self.zeros,
                  "rank_order": self.orders}[dim]
        if len(values) < 2:
            return None
        if dim in ("recompute", "zero", "rank_order"):
            t[dim] = rng.choice([v for v in values if v != s[dim]] or values)
        else:
            t[dim] = self._neighbour(values, s[dim], rng)
        if t[dim] == s[dim]:
            return None
        return self.repair(t, resplit=dim in ("pp", "vp"))


def mcmc(model, cluster, job=None, *, seed: int = 0, budget: int = MCMC_BUDGET,
         beta: float = MCMC_BETA, source=None, limits: SpaceLimits = SpaceLimits(),
         **_) -> StrategyResult:
    """FlexFlow-style MCMC over the joint space, ``budget`` proposals, seeded."""
    def run():
        m, c, j = coerce_inputs(model, cluster, job)
        chain = _Chain(m, c, j, source, limits)
        rng = random.Random(seed)
        starts = []
        found = manual_config(m, c, j, source=source, limits=limits)
        if not isinstance(found, str):
            kwargs = found[0]
            starts.append({k: kwargs[k] for k in ("tp", "pp", "cp", "ep", "vp", "micro_batch",
                                                   "recompute", "zero", "rank_order")}
                          | {"split": list(kwargs["layers_per_stage"])})
        data_parallel = {"tp": min(chain.tps), "pp": 1, "cp": 1, "ep": 1, "vp": 1, "micro_batch": 1,
                         "recompute": "full", "zero": 3, "rank_order": chain.orders[0], "split": [chain.nodes]}
        starts.append(data_parallel)
        current, current_cost = None, math.inf
        for start in starts:
            state = chain.repair(start, resplit=False)
            if state is not None and chain.cost(state) < current_cost:
                current, current_cost = state, chain.cost(state)
        proposals = 0
        while current is None and proposals < budget:  # random restarts until something fits
            proposals += 1
            state = chain.repair({"tp": rng.choice(chain.tps), "pp": rng.choice(chain.pps),
                                  "cp": rng.choice(chain.cps), "ep": rng.choice(chain.eps),
                                  "vp": 1, "micro_batch": 1, "recompute": "full",
                                  "zero": rng.choice(chain.zeros), "rank_order": chain.orders[0],
                                  "split": []}, resplit=True)
            if state is not None and chain.cost(state) < math.inf:
                current, current_cost = state, chain.cost(state)
        if current is None:
            return (f"MCMC found no configuration that fits in memory in {budget} proposals "
                    f"(seed {seed})"), {"proposals": proposals}
        best, best_cost = current, current_cost
        accepted = 0
        while proposals < budget:
            proposals += 1
            state = chain.propose(current, rng)
            if state is None:
                continue
            cost = chain.cost(state)
            if cost == math.inf:
                continue
            if cost <= current_cost or rng.random() < math.exp(-beta * (cost - current_cost) / current_cost):
                current, current_cost = state, cost
                accepted += 1
                if cost < best_cost:
                    best, best_cost = state, cost
        return chain.plans[chain.key(best)], {"proposals": proposals, "evaluations": chain.evaluations,
                                              "accepted": accepted, "seed": seed}
    return _timed("mcmc", run)


_RUNNERS = {"manual": manual, "topology-blind": topology_blind, "mcmc": mcmc, "nest": nest_plan,
            "given": given}


def run_strategy(name: str, model, cluster, job=None, **options) -> StrategyResult:
    """Run strategy ``name`` (one of :data:`ALL_STRATEGIES`); ``options`` go to it
    (``seed``, ``budget``, ``config``, ``engine``, ``threads``, ``limits``, ``source``,
    ``flat_bandwidth``); options a strategy does not use are ignored."""
    if name not in _RUNNERS:
        raise SpecError(f"strategy = {name!r}: must be one of {', '.join(ALL_STRATEGIES)}")
    return _RUNNERS[name](model, cluster, job, **options)
