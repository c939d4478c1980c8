"""The plan nest returns: a frozen object whose ``to_dict()`` is the documented JSON."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .dp_problem import DPProblem, sync_time
from .dp_reference import stage_details
from .model import chain_names, parameter_count
from .space import Candidates
from .tables import PS, Scenario


@dataclass(frozen=True)
class Stage:
    """One pipeline stage of a plan."""

    index: int
    layers: tuple[str, ...]
    devices: tuple[int, ...]
    time_s: float  # per micro-batch, forward + backward, including its sends
    memory_bytes: float
    params: int

    def to_dict(self) -> dict:
        return {"index": self.index, "layers": list(self.layers), "devices": list(self.devices),
                "time_s": self.time_s, "memory_bytes": self.memory_bytes, "params": self.params}


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
    model: dict
    job: dict
    cluster: dict
    engine: str

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
            "engine": self.engine,
            "model": dict(self.model),
            "job": dict(self.job),
            "cluster": dict(self.cluster),
        }


def build_plan(scn: Scenario, cands: Candidates, n: int, problem: DPProblem, local: int,
               ends: list[int], *, solve_time: float, evaluated: int, engine: str) -> Plan:
    """Assemble the plan of candidate ``n`` (``local`` in ``problem``) split at ``ends``."""
    cfg = cands.configs[cands.config[n]]
    pp, dp = int(cands.pp[n]), int(cands.dp[n])
    distopt = bool(cands.distributed_optimizer[n])
    tables = scn.config_tables([cfg])
    micro_batches = scn.job.global_batch // (dp * cfg.micro_batch)
    details = stage_details(problem, local, ends)
    t_max = max(d["time_ps"] for d in details)
    w_max = max(d["params"] for d in details)
    sync_ps = sync_time(float(problem.cand_g0[local]), float(problem.cand_g1[local]), w_max)
    step_ps = int(problem.cand_scale[local]) * t_max + sync_ps
    step = step_ps / PS

    slowest = next(d for d in details if d["time_ps"] == t_max)
    nodes = slice(slowest["start"], slowest["end"])
    node_ps = int(tables.time_ps[0, nodes].sum())
    tp_comm = float(tables.tp_comm_s[0, nodes].sum())
    dp_alpha, dp_beta = scn.sync_terms(cands.take(np.array([n])))
    dp_comm = float(dp_alpha[0] + dp_beta[0] * w_max)
    breakdown = {
        "compute": micro_batches * (node_ps / PS - tp_comm),
        "tp_comm": micro_batches * tp_comm,
        "cp_comm": 0.0,
        "ep_comm": 0.0,
        "pp_comm": micro_batches * (t_max - node_ps) / PS,
        "dp_comm": dp_comm,
        "optimizer": sync_ps / PS - dp_comm,
        "bubble": (pp - 1) * t_max / PS,
    }

    layout = scn.layout(cfg.tp, dp, pp)
    stage_of = layout.coordinates()["pp"]
    names = chain_names(scn.model)
    stages = tuple(
        Stage(index=k, layers=tuple(names[d["start"]:d["end"]]),
              devices=tuple(int(x) for x in np.flatnonzero(stage_of == k)),
              time_s=d["time_ps"] / PS, memory_bytes=float(d["memory_bytes"]), params=int(d["params"]))
        for k, d in enumerate(details))

    used = cfg.tp * pp * dp
    model_flops = float(tables.model_flops[0].sum()) * cfg.tp * micro_batches * dp
    parameters = parameter_count(scn.model)
    return Plan(
        parallelism={"tp": cfg.tp, "pp": pp, "dp": dp, "cp": 1, "ep": 1, "sp": cfg.sp, "vp": 1,
                     "zero": 1 if distopt else 0, "distributed_optimizer": distopt,
                     "recompute": cfg.recompute, "micro_batch": cfg.micro_batch,
                     "num_microbatches": micro_batches, "rank_order": scn.rank_order},
        stages=stages,
        step_time_s=step,
        throughput_tokens_per_s=scn.job.tokens / step,
        mfu=model_flops / (step * used * scn.peak_flops),
        devices_used=used,
        memory_max_bytes=max(s.memory_bytes for s in stages),
        memory_capacity_bytes=float(scn.cluster.device.memory_bytes),
        breakdown_s=breakdown,
        solve_time_s=solve_time,
        candidates_evaluated=evaluated,
        model={"name": scn.model.name, "parameters": parameters, "active_parameters": parameters,
               "layers": scn.model.num_layers},
        job={"global_batch": scn.job.global_batch, "seq_len": scn.job.seq_len, "dtype": scn.job.dtype},
        cluster={"name": scn.cluster.name, "devices": scn.cluster.num_devices,
                 "device": scn.cluster.device.name,
                 "tiers": [{"name": t.name, "fanout": t.fanout, "bandwidth_GBps": t.bandwidth / 1e9,
                            "latency_us": t.latency * 1e6} for t in scn.cluster.tiers]},
        engine=engine,
    )
