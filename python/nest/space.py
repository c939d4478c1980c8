"""The search space: intra-layer configurations and the candidates built on them.

A *layer configuration* fixes what shapes one node's cost (tensor-parallel degree,
sequence parallelism, micro-batch, recomputation, whether the head stage keeps a copy
of tied embeddings). A *candidate* adds the pipeline and data-parallel degrees and the
distributed optimizer. Candidates are held column-wise in numpy arrays so that tens of
thousands of them are bounded and sorted without Python loops.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .costs import RECOMPUTE_MODES, LayerConfig
from .errors import SpecError
from .specs import ClusterSpec, JobSpec, ModelSpec


def divisors(n: int) -> list[int]:
    """Positive divisors of ``n`` in ascending order."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


@dataclass(frozen=True)
class SpaceLimits:
    """Optional restrictions of the search space (all None: search everything).

    Each field fixes a dimension to the given values (``tp=(8,)``) or leaves it free.
    """

    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    dp: tuple[int, ...] | None = None
    micro_batch: tuple[int, ...] | None = None
    recompute: tuple[str, ...] | None = None
    sp: tuple[bool, ...] | None = None
    distributed_optimizer: tuple[bool, ...] | None = None


@dataclass
class Candidates:
    """Column-wise candidates; ``config`` indexes ``configs``."""

    configs: list[LayerConfig]
    config: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    distributed_optimizer: np.ndarray
    extra: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.config)

    def take(self, index: np.ndarray) -> "Candidates":
        """The candidates at ``index`` (same config list)."""
        return Candidates(self.configs, self.config[index], self.pp[index], self.dp[index],
                          self.distributed_optimizer[index],
                          {k: v[index] for k, v in self.extra.items()})


def tensor_parallel_degrees(model: ModelSpec, cluster: ClusterSpec) -> list[int]:
    """Powers of two up to the innermost tier's size that divide the head counts."""
    limit = cluster.tiers[0].fanout
    degrees, tp = [], 1
    while tp <= limit:
        if model.num_heads % tp == 0 and model.num_kv_heads % tp == 0 and model.ffn_hidden % tp == 0:
            degrees.append(tp)
        tp *= 2
    return degrees


def enumerate_candidates(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, num_nodes: int,
                         limits: SpaceLimits = SpaceLimits()) -> Candidates:
    """Every candidate of the space that fits the device count and divides the batch.

    Layer configurations are laid out as a dense grid ``[tp, tied, micro-batch, sp,
    recompute]`` so that a candidate's configuration index is computed, not looked up.
    """
    devices = cluster.num_devices
    if limits.tp is not None:
        for t in limits.tp:
            _check_tp(model, cluster, t)
    tps = list(limits.tp) if limits.tp is not None else tensor_parallel_degrees(model, cluster)
    recomputes = tuple(limits.recompute or RECOMPUTE_MODES)
    sps = tuple(limits.sp) if limits.sp is not None else (False, True)
    batches = divisors(job.global_batch)
    if limits.micro_batch is not None:
        batches = [b for b in batches if b in limits.micro_batch]
    ties = (False, True) if model.tied_embeddings else (False,)
    configs = [LayerConfig(tp, sp, mbs, rc, tied)
               for tp in tps for tied in ties for mbs in batches for sp in sps for rc in recomputes]
    per_tp = len(ties) * len(batches) * len(sps) * len(recomputes)
    per_tie = len(batches) * len(sps) * len(recomputes)
    batch_pos = {b: i for i, b in enumerate(batches)}
    sp_rc = np.arange(len(sps) * len(recomputes), dtype=np.int64)
    sp_of = np.repeat(np.array(sps, dtype=bool), len(recomputes))

    parts: dict[str, list] = {"config": [], "pp": [], "dp": [], "distopt": []}
    pps = limits.pp or tuple(range(1, num_nodes + 1))
    dps_all = divisors(job.global_batch)
    for ti, tp in enumerate(tps):
        allowed = sp_rc if tp > 1 else sp_rc[~sp_of]  # SP needs tensor parallelism
        for pp in pps:
            if pp > num_nodes:
                continue
            room = devices // (tp * pp)
            tied = int(model.tied_embeddings and pp > 1)
            for dp in dps_all:
                if dp > room or (limits.dp is not None and dp not in limits.dp):
                    continue
                positions = [batch_pos[b] for b in divisors(job.global_batch // dp) if b in batch_pos]
                if not positions:
                    continue
                base = ti * per_tp + tied * per_tie
                ids = (base + np.asarray(positions, dtype=np.int64)[:, None] * len(sp_rc)
                       + allowed[None, :]).ravel()
                distopts = (False, True) if dp > 1 else (False,)
                if limits.distributed_optimizer is not None:
                    distopts = tuple(o for o in limits.distributed_optimizer if dp > 1 or not o)
                for distopt in distopts:
                    parts["config"].append(ids)
                    parts["pp"].append(np.full(len(ids), pp, dtype=np.int64))
                    parts["dp"].append(np.full(len(ids), dp, dtype=np.int64))
                    parts["distopt"].append(np.full(len(ids), distopt, dtype=bool))

    def joined(key, dtype):
        return np.concatenate(parts[key]) if parts[key] else np.zeros(0, dtype=dtype)

    return Candidates(configs, joined("config", np.int64), joined("pp", np.int64),
                      joined("dp", np.int64), joined("distopt", bool))


def _check_tp(model: ModelSpec, cluster: ClusterSpec, tp: int) -> None:
    if tp < 1 or model.num_heads % tp or model.num_kv_heads % tp or model.ffn_hidden % tp:
        raise SpecError(f"tp = {tp}: must divide num_heads ({model.num_heads}), num_kv_heads "
                        f"({model.num_kv_heads}) and ffn_hidden ({model.ffn_hidden})")
    if cluster.num_devices % tp and tp > cluster.num_devices:
        raise SpecError(f"tp = {tp}: exceeds the cluster's {cluster.num_devices} devices")
