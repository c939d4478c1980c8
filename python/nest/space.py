"""The joint search space.

A *layer configuration* fixes what shapes a node's compute and memory: tensor, context
and expert parallel degrees, sequence parallelism, micro-batch, recomputation, and
whether the head stage keeps a copy of tied embeddings. A *partial candidate* adds the
pipeline and data-parallel degrees and the virtual stages (everything its lower bound
needs); it expands into full candidates over ZeRO stages and rank orders.

Dominated options are not enumerated (each is never faster and never uses less memory
in the cost model): sequence parallelism is always on when ``tp > 1`` (same
communication volume, less activation memory and element-wise time, smaller pipeline
transfers), and ZeRO-0 is replaced by ZeRO-1 whenever there is data or context
parallelism (less memory; a reduce-scatter plus an all-gather of 16-bit weights moves
no more than an all-reduce of fp32 gradients; a sharded optimizer step). ``nest
evaluate`` still accepts both.

Context parallelism takes powers of two that keep at least ``MIN_CP_CHUNK`` tokens per
rank and divide the sequence into ``2 cp`` load-balanced chunks. Expert parallelism
takes divisors of the expert count that divide ``tp x cp x dp`` (MoE parallel folding
with expert TP = 1). Interleaving takes ``vp`` in ``VIRTUAL_STAGES`` when
``pp > 1``, ``pp x vp`` does not exceed the layer-graph nodes and the micro-batch count
is a multiple of ``pp`` (Megatron-LM's requirement).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .costs import RECOMPUTE_MODES, LayerConfig
from .errors import SpecError
from .layout import DEFAULT_ORDER, parse_order
from .specs import ClusterSpec, JobSpec, ModelSpec
from .tables import Candidate

MIN_CP_CHUNK = 512
VIRTUAL_STAGES = (1, 2, 4, 8)
RANK_ORDERS = (DEFAULT_ORDER, "tp-cp-ep-pp-dp")


def divisors(n: int) -> list[int]:
    """Positive divisors of ``n`` in ascending order."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


@dataclass(frozen=True)
class SpaceLimits:
    """Optional restrictions of the search space (None: search that dimension).

    Each field fixes a dimension to the given values (``tp=(8,)``) or leaves it free.
    """

    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    dp: tuple[int, ...] | None = None
    cp: tuple[int, ...] | None = None
    ep: tuple[int, ...] | None = None
    vp: tuple[int, ...] | None = None
    micro_batch: tuple[int, ...] | None = None
    recompute: tuple[str, ...] | None = None
    sp: tuple[bool, ...] | None = None
    zero: tuple[int, ...] | None = None
    rank_order: tuple[str, ...] | None = None


@dataclass
class Partials:
    """Column-wise partial candidates; ``config`` indexes ``configs``."""

    configs: list[LayerConfig]
    config: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    vp: np.ndarray

    def __len__(self) -> int:
        return len(self.config)


def tensor_parallel_degrees(model: ModelSpec, cluster: ClusterSpec) -> list[int]:
    """Powers of two up to the innermost tier's size that divide the head counts."""
    limit = cluster.tiers[0].fanout
    degrees, tp = [], 1
    while tp <= limit:
        if _tp_divides(model, tp):
            degrees.append(tp)
        tp *= 2
    return degrees


def _tp_divides(model: ModelSpec, tp: int) -> bool:
    return (model.num_heads % tp == 0 and model.num_kv_heads % tp == 0 and model.ffn_hidden % tp == 0
            and (not model.is_moe or model.moe_ffn_hidden % tp == 0))


def context_parallel_degrees(job: JobSpec, limit: int) -> list[int]:
    """Powers of two with at least MIN_CP_CHUNK tokens per rank and 2 cp equal chunks."""
    degrees, cp = [1], 2
    while cp <= limit and job.seq_len % (2 * cp) == 0 and job.seq_len // cp >= MIN_CP_CHUNK:
        degrees.append(cp)
        cp *= 2
    return degrees


def expert_parallel_degrees(model: ModelSpec) -> list[int]:
    """Divisors of the number of routed experts (1 for dense models)."""
    return divisors(model.num_experts) if model.is_moe else [1]


def _allowed(values, limit):
    return [v for v in values if limit is None or v in limit]


def enumerate_partials(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, num_nodes: int,
                       limits: SpaceLimits = SpaceLimits()) -> Partials:
    """Every partial candidate that fits the device count and divides the batch.

    Layer configurations form a dense grid ``[tp, sp, cp, ep, tied, micro-batch,
    recompute]`` so that a candidate's configuration index is computed, not looked up;
    only the configurations some candidate uses are kept.
    """
    devices = cluster.num_devices
    tps = list(limits.tp) if limits.tp is not None else tensor_parallel_degrees(model, cluster)
    for tp in tps:
        check_tp(model, cluster, tp)
    cps = list(limits.cp) if limits.cp is not None else context_parallel_degrees(job, devices)
    eps = list(limits.ep) if limits.ep is not None else expert_parallel_degrees(model)
    recomputes = tuple(limits.recompute or RECOMPUTE_MODES)
    batches = _allowed(divisors(job.global_batch), limits.micro_batch)
    sps = (False, True)
    ties = (False, True)
    grid = [LayerConfig(tp, sp, mbs, rc, tied, cp, ep) for tp in tps for sp in sps for cp in cps
            for ep in eps for tied in ties for mbs in batches for rc in recomputes]
    stride_mbs = len(recomputes)
    stride_tie = stride_mbs * len(batches)
    stride_ep = stride_tie * len(ties)
    stride_cp = stride_ep * len(eps)
    stride_sp = stride_cp * len(cps)
    stride_tp = stride_sp * len(sps)
    batch_pos = {b: i for i, b in enumerate(batches)}
    rc_pos = np.arange(len(recomputes), dtype=np.int64)

    chunks: list[np.ndarray] = []
    meta: list[tuple[int, int, int, int]] = []  # (pp, dp, vp, count) per chunk
    pps = limits.pp or tuple(range(1, num_nodes + 1))
    dps = _allowed(divisors(job.global_batch), limits.dp)
    per_dp = {}
    for dp in dps:
        positions = np.array([batch_pos[b] for b in divisors(job.global_batch // dp) if b in batch_pos],
                             dtype=np.int64)
        micro = np.repeat(job.global_batch // (dp * np.array(batches, dtype=np.int64)[positions]),
                          len(recomputes))
        per_dp[dp] = (positions[:, None] * stride_mbs + rc_pos[None, :]).ravel(), micro
    for ti, tp in enumerate(tps):
        tp_sps = [s for s in (limits.sp or (tp > 1,)) if tp > 1 or not s]
        if model.is_moe and tp > 1:
            tp_sps = [s for s in tp_sps if s]  # Megatron-Core: MoE with TP needs SP
        for sp in tp_sps:
            for ci, cp in enumerate(cps):
                for pp in pps:
                    if pp > num_nodes or tp * cp * pp > devices:
                        continue
                    tied = int(model.tied_embeddings and pp > 1)
                    room = devices // (tp * cp * pp)
                    for dp in dps:
                        if dp > room:
                            continue
                        offsets, micro = per_dp[dp]
                        if not len(offsets):
                            continue
                        for ei, ep in enumerate(eps):
                            if (tp * cp * dp) % ep:
                                continue
                            base = (ti * stride_tp + int(sp) * stride_sp + ci * stride_cp
                                    + ei * stride_ep + tied * stride_tie)
                            ids = base + offsets
                            for vp in _allowed(VIRTUAL_STAGES, limits.vp):
                                if vp > 1:
                                    if pp == 1 or pp * vp > num_nodes:
                                        continue
                                    chosen = ids[micro % pp == 0]
                                else:
                                    chosen = ids
                                if len(chosen):
                                    chunks.append(chosen)
                                    meta.append((pp, dp, vp, len(chosen)))

    if not chunks:
        return Partials([], *(np.zeros(0, dtype=np.int64) for _ in range(4)))
    used, config = np.unique(np.concatenate(chunks), return_inverse=True)
    info = np.array(meta, dtype=np.int64)
    pp, dp, vp = (np.repeat(info[:, i], info[:, 3]) for i in range(3))
    return Partials([grid[i] for i in used], config.astype(np.int64), pp, dp, vp)


def expand(partials: Partials, index: np.ndarray, limits: SpaceLimits = SpaceLimits()) -> list[Candidate]:
    """Full candidates of the partial candidates at ``index``: ZeRO stages x rank orders."""
    orders = limits.rank_order or RANK_ORDERS
    for order in orders:
        parse_order(order)
    out = []
    for i in index:
        cfg = partials.configs[partials.config[i]]
        pp, dp, vp = int(partials.pp[i]), int(partials.dp[i]), int(partials.vp[i])
        sharded = dp * cfg.cp > 1
        zeros = limits.zero if limits.zero is not None else ((1, 2, 3) if sharded else (0,))
        for zero in zeros:
            if zero and not sharded:
                continue
            # Orders that only permute dimensions of degree 1 give the same layout.
            distinct = limits.rank_order is not None or (pp > 1 and dp > 1)
            for order in (orders if distinct else orders[:1]):
                out.append(Candidate(cfg, pp, dp, vp, zero, order))
    return out


def check_tp(model: ModelSpec, cluster: ClusterSpec, tp: int) -> None:
    """SpecError unless ``tp`` divides the model's heads and widths and fits a node."""
    if not isinstance(tp, int) or tp < 1 or not _tp_divides(model, tp):
        raise SpecError(f"tp = {tp}: must divide num_heads ({model.num_heads}), num_kv_heads "
                        f"({model.num_kv_heads}) and the MLP widths")
    if tp > cluster.tiers[0].fanout:
        raise SpecError(f"tp = {tp}: tensor parallelism must stay within one '{cluster.tiers[0].name}' "
                        f"group of {cluster.tiers[0].fanout} devices")
