"""The plan nest returns: a frozen object whose ``to_dict()`` is the documented JSON.

Every key is documented in docs/json.md and validated by the JSON Schema
nest/report/plan.schema.json (package data); among them

``closed_form_step_time_s``
    the DP's objective for the plan's split (the closed form of :mod:`nest.schedule.pipeline`,
    an upper bound of the schedule); ``step_time_s`` is the exact time of the split's
    schedule (:mod:`nest.schedule.step`) and every rate (throughput, MFU) and the breakdown
    follow it.

``memory``
    ``{"peak_rank": r, "ranks": [...]}``: per pipeline rank its memory at its activation
    peak (:class:`~nest.schedule.memory.DeviceMemory`: ``total_bytes``, ``weights_bytes``,
    ``gradients_bytes``, ``optimizer_bytes``, ``activations_bytes`` with
    ``live_micro_batches`` per chunk at that peak, ``transient_bytes``, ``reserve_bytes``,
    ``capacity_bytes``, and the host memory its offloaded optimizer state fills,
    ``host_bytes`` of ``host_capacity_bytes``); ``memory_per_device_bytes.max`` is the
    largest ``total_bytes`` and ``stages[].memory_bytes`` the total of the stage's rank.
``parallelism.optimizer_offload_fraction``, ``breakdown_s.offload``, ``cluster.host``
    the share of each rank's optimizer state held and stepped on the host
    (:mod:`nest.cost.offload`), the step time its host step adds beyond the GPU's, the
    host preset (None: the device has none).
``parallelism.activation_offload_layers``, ``breakdown_s.activation_offload``
    the transformer layers (the first ones) whose activations wait on the host between
    their forward and backward, and the step time the compute stream waits for their
    copies (:mod:`nest.cost.activation_offload`); their copies count in ``host_bytes``.
``breakdown_s.host``
    the part of the busiest rank's compute passes that the GPU waits for the host to
    dispatch their kernels (:mod:`nest.cost.host`; ``compute`` is the rest).
``devices_idle_reason``
    when ``devices_used`` is below the cluster's device count, why: how much slower the
    fastest plan that uses every device is, or why there is none (None: every device is
    used, or :func:`nest.planner.plan` was not asked, ``explain_idle=False``).
``stages[].devices``
    the devices of the stage's ranks: device indices on a hierarchical cluster, device
    node ids (strings) on a graph; ``stages[].ranks`` lists the ranks themselves.
``placement``
    where every rank runs: ``{"device_order": "index" | "graph", "hosts": H, "ranks":
    [{"rank", "tp", "cp", "dp", "pp", "ep", "expert_dp", "expert_tp", "device", "host", "slot"}, ...]}``
    with one entry per rank in rank order. ``tp cp dp pp`` are the rank's coordinates
    under the plan's rank order, ``expert_tp``, ``ep`` and ``expert_dp`` its place in the
    MoE folding's expert grid (a stage's ranks in ascending order as ``etp x ep x
    expert_dp``, expert TP innermost: :func:`~nest.network.layout.expert_groups`);
    ``device`` as in ``stages[].devices``; ``host`` the machine (``node<i>`` = tier-0
    group on hierarchical clusters; a graph device's ``host`` attribute, else the device)
    and ``slot`` the device's position among its host's devices (its local rank).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from .cost.offload import host_share_of_step
from .cost.pricing import KindTimes, Priced, gpu_optimizer_s, optimizer_launch_s
from .cost.scenario import AnalyticSource, Scenario
from .dp import engine as engines
from .dp.problem import DPProblem
from .dp.reference import stage_details
from .network.layout import Layout, RankPlacement, rank_placement
from .parallel import Candidate
from .presets.published import PublishedRun, best_published
from .schedule.memory import DeviceMemory, device_memory
from .schedule.step import StepTiming, batch_timing
from .schedule.tasks import BatchTasks
from .search.problems import split_closed_form_ps
from .units import PS


class FrozenDict(dict):
    """A dict that refuses changes: a frozen :class:`Plan`'s dict fields (and the dicts
    and lists inside them, as FrozenDicts and tuples), so a plan cannot be edited in
    place. :func:`thawed` gives a plain, editable deep copy; JSON encodes either."""

    def _refuse(self, *args, **kwargs):
        raise TypeError("a Plan's dicts are read-only; use plan.to_dict() for an editable copy")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self):  # pickle rebuilds it from a plain dict, not item by item
        return FrozenDict, (dict(self),)

    def __hash__(self):  # a frozen Plan hashes its fields
        return hash(tuple(sorted(self.items(), key=lambda kv: kv[0])))


def frozen(value):
    """``value`` with every dict a :class:`FrozenDict` and every list a tuple."""
    if isinstance(value, dict):
        return FrozenDict({k: frozen(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(frozen(v) for v in value)
    return value


def thawed(value):
    """A plain deep copy of ``value`` (dicts and lists) for the JSON document."""
    if isinstance(value, dict):
        return {k: thawed(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thawed(v) for v in value]
    return value


@dataclass(frozen=True)
class Stage:
    """One pipeline stage of a plan."""

    index: int
    layers: tuple[str, ...]
    devices: tuple  # device indices (hierarchical clusters) or node ids (graphs)
    time_s: float  # per micro-batch, forward + backward, including its sends
    memory_bytes: float
    params: int
    ranks: tuple[int, ...] = ()

    def to_dict(self) -> dict:
        return {"index": self.index, "layers": list(self.layers), "devices": list(self.devices),
                "ranks": list(self.ranks), "time_s": self.time_s, "memory_bytes": self.memory_bytes,
                "params": self.params}


@dataclass(frozen=True)
class Plan:
    """A costed training plan (``nest plan`` / ``nest evaluate``)."""

    parallelism: dict
    stages: tuple[Stage, ...]
    step_time_s: float  # the exact time of the plan's schedule (nest.schedule.step)
    throughput_tokens_per_s: float
    mfu: float
    devices_used: int
    memory_max_bytes: float
    memory_capacity_bytes: float
    breakdown_s: dict
    solve_time_s: float
    candidates_evaluated: int
    candidates_total: int
    model: dict
    job: dict
    cluster: dict
    engine: str
    runtime: dict  # engine, OpenMP availability, threads of the C++ DP
    # where every rank runs (arrays; the module docstring's ``placement`` in to_dict)
    placement: RankPlacement | None = field(default=None, compare=False, repr=False)
    # the DP's objective for this split: the closed form of nest.schedule.pipeline (>= step_time_s
    # for the stage shapes nest builds)
    closed_form_step_time_s: float | None = None
    # per pipeline rank, its memory at its activation peak (nest.schedule.memory)
    memory: tuple[DeviceMemory, ...] = ()
    # model FLOPs (forward and backward, no recomputation) per second and device, in TFLOP/s
    model_tflops_per_device: float = 0.0
    # why devices_used is below the cluster's devices (None: all used, or not asked)
    devices_idle_reason: str | None = None

    def __post_init__(self):
        for name in ("parallelism", "breakdown_s", "model", "job", "cluster", "runtime"):
            object.__setattr__(self, name, frozen(getattr(self, name)))

    @property
    def published_reference(self) -> PublishedRun | None:
        """The fastest published run of the plan's device family, model class and dtype
        (:mod:`nest.presets.published`), which the report holds the plan against; None
        without one or without model FLOPs (measured layers)."""
        if not self.model_tflops_per_device:
            return None
        moe = self.model.get("active_parameters", 0) < self.model.get("parameters", 0)
        return best_published(self.cluster.get("device", ""), moe, self.job.get("dtype", "bf16"))

    @property
    def peak_memory(self) -> DeviceMemory | None:
        """The rank with the most memory (the one that binds), or None."""
        return max(self.memory, key=lambda d: d.total) if self.memory else None

    def _peak_parts(self) -> dict:
        """The binding rank's memory by part (DESIGN's keys inside ``memory_per_device_bytes``)."""
        peak = self.peak_memory
        if peak is None:
            return {}
        return {"weights": peak.weights, "gradients": peak.gradients, "optimizer": peak.optimizer,
                "activations": peak.activations, "transient": peak.transient, "reserve": peak.reserve}

    def to_dict(self) -> dict:
        """The JSON document (docs/json.md; schema: nest/report/plan.schema.json), plain and editable."""
        return {
            "parallelism": thawed(self.parallelism),
            "stages": [s.to_dict() for s in self.stages],
            "step_time_s": self.step_time_s,
            "closed_form_step_time_s": self.closed_form_step_time_s,
            "throughput_tokens_per_s": self.throughput_tokens_per_s,
            "mfu": self.mfu,
            "model_tflops_per_device": self.model_tflops_per_device,
            "published_reference": None if (ref := self.published_reference) is None else {
                "tflops_per_device": ref.tflops_per_gpu, "run": ref.run, "source": ref.source},
            "devices_used": self.devices_used,
            "devices_idle_reason": self.devices_idle_reason,
            "memory_per_device_bytes": {"max": self.memory_max_bytes, "capacity": self.memory_capacity_bytes,
                                        **self._peak_parts()},
            "memory": None if not self.memory else {"peak_rank": self.peak_memory.rank,
                                                    "ranks": [d.to_dict() for d in self.memory]},
            "breakdown_s": thawed(self.breakdown_s),
            "solve_time_s": self.solve_time_s,
            "candidates_evaluated": self.candidates_evaluated,
            "candidates_total": self.candidates_total,
            "engine": self.engine,
            "runtime": thawed(self.runtime),
            "model": thawed(self.model),
            "job": thawed(self.job),
            "cluster": thawed(self.cluster),
            "placement": None if self.placement is None else {
                "device_order": "graph" if self.placement.on_graph else "index",
                "hosts": len(self.placement.hosts), "ranks": self.placement.records()},
        }


def build_plan(scn: Scenario, cand: Candidate, problem: DPProblem, local: int, ends: list[int], *,
               solve_time: float, evaluated: int, engine: str, candidates_total: int,
               threads: int | None = None, priced: Priced | None = None) -> Plan:
    """Assemble the plan of ``cand`` (row ``local`` of ``problem``) split at ``ends``;
    ``priced``: ``cand`` priced alone (:func:`~nest.cost.pricing.price_candidate`), when
    the caller has it."""
    cfg, pp, dp = cand.cfg, cand.pp, cand.dp
    micro_batches = scn.micro_batches(cand)
    details = stage_details(problem, local, ends)
    closed_form = split_closed_form_ps(problem, local, details) / PS
    tasks = BatchTasks.of(priced) if priced is not None else BatchTasks.of_candidate(scn, cand)
    timing = batch_timing(tasks, 0, [d["end"] - d["start"] for d in details], "python" if engine == "python" else "cpp")
    step = timing.step_s
    breakdown = _breakdown(scn, tasks.priced.times, pp, timing, [(d["start"], d["end"]) for d in details],
                           cand.offload)
    memory = tuple(device_memory(tasks.priced, 0, [d["end"] - d["start"] for d in details]))

    layout = Layout.of(cand)
    stage_of = layout.coordinates()["pp"]
    where = rank_placement(scn.cluster, layout, cfg.ep, cfg.etp)
    names = scn.source.names
    # .tolist() and map: plain ints and the placement's own entries without a Python-level
    # loop per element (one takes seconds at millions of ranks)
    stage_ranks = [tuple(np.flatnonzero(stage_of == d).tolist()) for d in range(pp)]
    devices_of = [tuple(map(where.device.__getitem__, ranks)) for ranks in stage_ranks]
    # parameters one rank of the stage holds (its TP / EP share; ZeRO shards only their state)
    held = np.concatenate(([0], np.cumsum((tasks.priced.col("params_dense") + tasks.priced.col("params_expert"))
                                          [0, scn.kind_index])))
    stages = tuple(
        Stage(index=k, layers=tuple(names[d["start"]:d["end"]]), devices=devices_of[k % pp],
              time_s=d["time_ps"] / PS, memory_bytes=memory[k % pp].total,
              params=int(held[d["end"]] - held[d["start"]]), ranks=stage_ranks[k % pp])
        for k, d in enumerate(details))

    used = cand.devices
    arrays = tasks.priced.table.arrays
    per_kind = {kind: float(scn.source.model_flops(kind, arrays)[0]) for kind in scn.kind_list}
    flops = sum(per_kind[kind] for kind in scn.kinds) * cfg.tp * cfg.cp * dp * micro_batches
    return Plan(
        parallelism=cand.parallelism(micro_batches),
        stages=stages,
        step_time_s=step,
        closed_form_step_time_s=closed_form,
        throughput_tokens_per_s=scn.job.tokens / step,
        mfu=flops / (step * used * scn.peak_flops),
        model_tflops_per_device=flops / (step * used) / 1e12,
        devices_used=used,
        memory_max_bytes=max(d.total for d in memory),
        memory=memory,
        memory_capacity_bytes=float(scn.cluster.device.memory_bytes),
        breakdown_s=breakdown,
        solve_time_s=solve_time,
        candidates_evaluated=evaluated,
        candidates_total=candidates_total,
        model={"name": scn.model.name, "parameters": scn.source.parameters,
               "active_parameters": scn.source.active_parameters, "layers": scn.model.num_layers,
               # the architecture a launch configuration needs (none for measured layers)
               "spec": asdict(scn.model) if isinstance(scn.source, AnalyticSource) else None},
        job=scn.job.document(),
        cluster={"name": scn.cluster.name, "devices": scn.cluster.num_devices,
                 "device": scn.cluster.device.name,
                 "host": None if (host := scn.cluster.device.host) is None else host.name,
                 "tiers": [{"name": t.name, "fanout": t.fanout, "bandwidth_GBps": t.bandwidth / 1e9,
                            "latency_us": t.latency * 1e6} for t in scn.cluster.tiers]},
        engine=engine,
        placement=where,
        runtime={"engine": engine, "openmp": engines.has_openmp(),
                 "threads": 1 if engine == "python" else (threads or engines.available_threads())},
    )


CAUSES = ("compute", "tp", "cp", "ep", "dp", "offload", "host")
"""The :class:`~nest.cost.pricing.KindTimes` causes a breakdown sums (as ``<cause>_comm``
but compute)."""


def _breakdown(scn: Scenario, times: KindTimes, pp: int, timing: StepTiming, chunks: list[tuple[int, int]],
               fraction: float = 0.0) -> dict:
    """Where the step's time goes, seen from the busiest pipeline rank: its ``m`` passes
    over its own chunks by cause, its idle time until the pipeline ends (bubble), then the
    part of the end-of-step sync and optimizer that outlasts the pipeline (on the rank that
    finishes last; the rest of the sync hides behind other ranks' drain), of which
    ``offload`` is what a host step of the offloaded ``fraction`` adds to the GPU's."""
    kinds = scn.kind_index
    busiest = max(range(pp), key=timing.work_s)
    mine = [q for q in range(len(chunks)) if q % pp == busiest]
    m = timing.micro_batches
    causes = {}
    for cause in CAUSES:
        per_kind = getattr(times, cause)[0].tolist()
        causes[cause] = m * sum(per_kind[kinds[i]] for q in mine for i in range(*chunks[q]))
    sends = m * sum(timing.stages[q].send_forward_s + timing.stages[q].send_backward_s for q in mine)
    last = max(range(pp), key=timing.rank_end_s)
    optimizer = sum(task.seconds for task, _ in timing.end_runs[last] if task.kind == "optimizer")
    # the host's part of an offloading optimizer step beyond the GPU step of the rest
    offloaded = max(0.0, optimizer - optimizer_launch_s(scn)) * host_share_of_step(gpu_optimizer_s(scn), scn.host_step_s, fraction)
    tail = timing.step_s - timing.pipeline_s
    breakdown = {
        "compute": causes["compute"] - causes["host"],
        "host": causes["host"],
        "tp_comm": causes["tp"],
        "cp_comm": causes["cp"],
        "ep_comm": causes["ep"],
        "pp_comm": sends,
        "dp_comm": causes["dp"] + tail - optimizer,
        "optimizer": optimizer - offloaded,
        "offload": offloaded,
        "activation_offload": causes["offload"],
        "bubble": max(0.0, timing.pipeline_s - timing.work_s(busiest)),
    }
    # differences of equal sums leave rounding residue (-1e-15 s): zero, never a negative time
    breakdown = {k: 0.0 if abs(v) <= 1e-12 * timing.step_s else v for k, v in breakdown.items()}
    # the node times were summed in another order: give the rounding residue to compute
    breakdown["compute"] += timing.step_s - sum(breakdown.values())
    return breakdown
