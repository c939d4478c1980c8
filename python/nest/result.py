"""The plan nest returns: a frozen object whose ``to_dict()`` is the documented JSON.

Besides the keys of DESIGN.md section 5, the document has

``stages[].devices``
    the devices of the stage's ranks: device indices on a hierarchical cluster, device
    node ids (strings) on a graph; ``stages[].ranks`` lists the ranks themselves.
``placement``
    where every rank runs: ``{"device_order": "index" | "graph", "hosts": H, "ranks":
    [{"rank", "tp", "cp", "dp", "pp", "ep", "expert_dp", "device", "host", "slot"}, ...]}``
    with one entry per rank in rank order. ``tp cp dp pp`` are the rank's coordinates
    under the plan's rank order, ``ep`` and ``expert_dp`` its place in the MoE folding
    (position in its expert-parallel run of the stage's ranks, and that run);
    ``device`` as in ``stages[].devices``; ``host`` the machine (``node<i>`` = tier-0
    group on hierarchical clusters; a graph device's ``host`` attribute, else the device)
    and ``slot`` the device's position among its host's devices (its local rank).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import engine as engines
from . import pipeline
from .dp_problem import DPProblem, sync_time
from .dp_reference import stage_details
from .layout import RankPlacement, rank_placement
from .specs import OVERLAP_SWITCHES
from .tables import OPTIMIZER_KERNELS, PS, Candidate, Scenario


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
    step_time_s: float
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

    def to_dict(self) -> dict:
        """The JSON document of DESIGN.md section 5."""
        return {
            "parallelism": dict(self.parallelism),
            "stages": [s.to_dict() for s in self.stages],
            "step_time_s": self.step_time_s,
            "throughput_tokens_per_s": self.throughput_tokens_per_s,
            "mfu": self.mfu,
            "devices_used": self.devices_used,
            "memory_per_device_bytes": {"max": self.memory_max_bytes,
                                        "capacity": self.memory_capacity_bytes},
            "breakdown_s": dict(self.breakdown_s),
            "solve_time_s": self.solve_time_s,
            "candidates_evaluated": self.candidates_evaluated,
            "candidates_total": self.candidates_total,
            "engine": self.engine,
            "runtime": dict(self.runtime),
            "model": dict(self.model),
            "job": dict(self.job),
            "cluster": dict(self.cluster),
            "placement": None if self.placement is None else {
                "device_order": "graph" if self.placement.on_graph else "index",
                "hosts": len(self.placement.hosts), "ranks": self.placement.records()},
        }


def build_plan(scn: Scenario, cand: Candidate, problem: DPProblem, local: int, ends: list[int], *,
               solve_time: float, evaluated: int, engine: str, candidates_total: int,
               threads: int | None = None) -> Plan:
    """Assemble the plan of ``cand`` (row ``local`` of ``problem``) split at ``ends``."""
    cfg, pp, dp, v = cand.cfg, cand.pp, cand.dp, cand.vp
    micro_batches = scn.micro_batches(cand)
    details = stage_details(problem, local, ends)
    t_max = max(d["time_ps"] for d in details)
    w_max = max(d["params"] for d in details)
    sync_ps = sync_time(float(problem.cand_g0[local]), float(problem.cand_g1[local]), w_max)
    pipeline_ps = pipeline.pipeline_ps(problem.cand_scale[local], problem.cand_head_scale[local],
                                       problem.cand_offset[local], [d["time_ps"] for d in details])
    step_ps = pipeline_ps + sync_ps
    step = step_ps / PS

    costs, times, sync = scn.kind_costs(cfg), scn.kind_times(cand), scn.sync_terms(cand)
    kinds = scn.kinds
    slowest = next(d for d in details if d["time_ps"] == t_max)
    nodes = range(slowest["start"], slowest["end"])
    # the busiest rank's steady work in units of the slowest stage: m for 1F1B; for
    # interleaved 1F1B m ((v - 1) H + slowest) / slowest (v - 1 chunks at H, the slowest
    # before the last one, and the last chunk), so that the bubble is (p - 1) H
    head_ps = max((d["time_ps"] for d in details[:-1]), default=0)
    steady = micro_batches * v
    if v > 1 and t_max > 0:
        steady = micro_batches * ((v - 1) * head_ps + t_max) / t_max
    causes = {c: steady * sum(getattr(times[kinds[i]], c) for i in nodes)
              for c in ("compute", "tp_comm", "cp_comm", "ep_comm", "dp_comm")}
    node_ps = int(problem.time_ps[local, slowest["start"]:slowest["end"]].sum())
    heaviest = next(d for d in details if d["params"] == w_max)
    reduce, gather, _ = scn.node_sync_seconds(cand, heaviest["start"], heaviest["end"])
    alpha = sync.fixed_s - OPTIMIZER_KERNELS * scn.kernels.overhead
    end_sync = alpha + v * (reduce + gather)
    breakdown = {
        "compute": causes["compute"],
        "tp_comm": causes["tp_comm"],
        "cp_comm": causes["cp_comm"],
        "ep_comm": causes["ep_comm"],
        "pp_comm": steady * (t_max - node_ps) / PS,
        "dp_comm": causes["dp_comm"] + end_sync,
        "optimizer": sync_ps / PS - end_sync,
        # fill and drain: the closed form's pipeline time beyond m v slowest stages
        "bubble": (pipeline_ps - steady * t_max) / PS,
    }
    # kernels and collectives were rounded to picoseconds per node: give the residue to compute
    breakdown["compute"] += step - sum(breakdown.values())

    layout = scn.layout(cand)
    stage_of = layout.coordinates()["pp"]
    where = rank_placement(scn.cluster, layout, cfg.ep)
    names = scn.source.names
    stage_ranks = [tuple(int(x) for x in np.flatnonzero(stage_of == k % pp)) for k in range(len(details))]
    stages = tuple(
        Stage(index=k, layers=tuple(names[d["start"]:d["end"]]),
              devices=tuple(where.device[r] for r in stage_ranks[k]),
              time_s=d["time_ps"] / PS, memory_bytes=float(d["memory_bytes"]), params=int(d["params"]),
              ranks=stage_ranks[k])
        for k, d in enumerate(details))

    used = cand.devices
    flops = sum(costs[kind].model_flops for kind in kinds) * cfg.tp * cfg.cp * dp * micro_batches
    parameters = scn.source.parameters
    return Plan(
        parallelism={"tp": cfg.tp, "pp": pp, "dp": dp, "cp": cfg.cp, "ep": cfg.ep, "sp": cfg.sp,
                     "vp": v, "zero": cand.zero, "distributed_optimizer": cand.zero >= 1,
                     "recompute": cfg.recompute, "micro_batch": cfg.micro_batch,
                     "num_microbatches": micro_batches, "rank_order": cand.order,
                     "expert_tp": 1, "expert_dp": cfg.tp * cfg.cp * dp // cfg.ep},
        stages=stages,
        step_time_s=step,
        throughput_tokens_per_s=scn.job.tokens / step,
        mfu=flops / (step * used * scn.peak_flops),
        devices_used=used,
        memory_max_bytes=max(s.memory_bytes for s in stages),
        memory_capacity_bytes=float(scn.cluster.device.memory_bytes),
        breakdown_s=breakdown,
        solve_time_s=solve_time,
        candidates_evaluated=evaluated,
        candidates_total=candidates_total,
        model={"name": scn.model.name, "parameters": parameters,
               "active_parameters": scn.source.active_parameters, "layers": scn.model.num_layers},
        job={"global_batch": scn.job.global_batch, "seq_len": scn.job.seq_len, "dtype": scn.job.dtype,
             **{name: getattr(scn.job, name) for name in OVERLAP_SWITCHES if getattr(scn.job, name)}},
        cluster={"name": scn.cluster.name, "devices": scn.cluster.num_devices,
                 "device": scn.cluster.device.name,
                 "tiers": [{"name": t.name, "fanout": t.fanout, "bandwidth_GBps": t.bandwidth / 1e9,
                            "latency_us": t.latency * 1e6} for t in scn.cluster.tiers]},
        engine=engine,
        placement=where,
        runtime={"engine": engine, "openmp": engines.has_openmp(),
                 "threads": 1 if engine == "python" else (threads or engines.available_threads())},
    )

