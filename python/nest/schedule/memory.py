"""Activations a pipeline rank holds over its schedule: the exact peak.

A forward of chunk ``c`` adds one micro-batch of that chunk's activations, its backward
frees it; replaying the rank's order (:mod:`nest.schedule.order`) gives, after every
operation, how many micro-batches each of its chunks holds. The rank's activation peak is
the largest ``sum_c n_c(t) A_c`` over the replay (``A_c`` a micro-batch of chunk ``c``),
reached right after a forward. With interleaving the counts differ by chunk: Megatron's
order keeps at most one micro-batch of the last rank's last chunk (the output layer
and loss) alive, and the first rank's first chunk the most.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..parallel import warmup
from .order import device_ops


def live_counts(device: int, pp: int, vp: int, micro_batches: int, extra: int = 0) -> np.ndarray:
    """``[operations, vp]``: micro-batches each chunk of ``device`` holds after each of
    its operations, in order (read-only; cached with every rank of its schedule).

    ``extra = 1`` is Megatron's combined 1F1B (:func:`~nest.parallel.warmup`): one more
    warm-up forward, then every steady forward runs *together* with a backward, layer by
    layer (the forward's layer ``i`` with the backward's layer ``L - 1 - i``), so what the
    forward adds the backward frees as it goes. Such a pair counts as one operation: no
    row after its forward alone (the one layer both hold at once is
    :attr:`~nest.cost.pricing.Priced.pair_transient`)."""
    return _schedule_counts(pp, vp, micro_batches, extra)[device]


@lru_cache(maxsize=32)
def _schedule_counts(pp: int, vp: int, micro_batches: int, extra: int) -> tuple[np.ndarray, ...]:
    """:func:`live_counts` of every rank of one schedule shape (cached by shape: a peak
    needs all ranks, and the search checks the plans it keeps on a few shapes)."""
    ranks = []
    for device in range(pp):
        forward, chunk, _ = device_ops(device, pp, vp, micro_batches, extra)
        onehot = np.zeros((len(chunk), vp), dtype=np.int32)
        onehot[np.arange(len(chunk)), chunk] = np.where(forward, 1, -1)
        counts = np.cumsum(onehot, axis=0, dtype=np.int32)
        if extra:
            w = warmup(device, pp, vp, micro_batches, extra)
            paired_forward = np.arange(w, len(chunk) - w, 2)
            counts = np.delete(counts, paired_forward, axis=0)
        counts.flags.writeable = False
        ranks.append(counts)
    return tuple(ranks)


@dataclass(frozen=True)
class LiveSummary:
    """Per rank of a ``(pp, vp, m)`` schedule: the most micro-batch-chunks it holds at
    once (``total``) and, per chunk, the most micro-batches that chunk holds
    (``per_chunk[d, c]``, not all at the same time)."""

    total: np.ndarray  # [pp]
    per_chunk: np.ndarray  # [pp, vp]


@lru_cache(maxsize=1024)
def live_summary(pp: int, vp: int, micro_batches: int, extra: int = 0) -> LiveSummary:
    """:class:`LiveSummary` of the schedule (cached: it depends on nothing else)."""
    total, per_chunk = np.zeros(pp, dtype=np.int64), np.zeros((pp, vp), dtype=np.int64)
    for d in range(pp):
        counts = live_counts(d, pp, vp, micro_batches, extra)
        total[d] = counts.sum(axis=1).max()
        per_chunk[d] = counts.max(axis=0)
    return LiveSummary(total, per_chunk)


def peak_activations(pp: int, vp: int, micro_batches: int, chunk_bytes, extra: int = 0
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Per rank, the peak of live activation bytes and the micro-batches each of its
    chunks holds at that peak (``[pp]``, ``[pp, vp]``). ``chunk_bytes[q]`` is one
    micro-batch of virtual stage ``q`` (chunk ``q // pp`` of rank ``q % pp``); ``extra``
    warm-up forwards as :func:`live_counts`."""
    per = np.asarray(chunk_bytes, dtype=np.float64).reshape(vp, pp).T  # [rank, chunk]
    peaks, at_peak = np.zeros(pp), np.zeros((pp, vp), dtype=np.int64)
    for d in range(pp):
        counts = live_counts(d, pp, vp, micro_batches, extra)
        live = counts @ per[d]
        t = int(np.argmax(live))
        peaks[d], at_peak[d] = live[t], counts[t]
    return peaks, at_peak


@dataclass(frozen=True)
class DeviceMemory:
    """One pipeline rank's memory at its activation peak, in bytes: its share of the
    weights, gradients and optimizer state (ZeRO-sharded; with FP8 weights' cached copies
    in ``weights``), its live activations (``live``: the micro-batches each of its chunks
    holds then), the largest transient buffer (a recomputing block's working set, the
    output layer's logits on the last rank) and the device's reserve; ``host``: the host
    memory its offloaded optimizer state and activation copies fill (of ``host_capacity``,
    :mod:`nest.cost.offload`)."""

    rank: int
    weights: float
    gradients: float
    optimizer: float
    activations: float
    live: tuple[int, ...]
    transient: float
    reserve: float
    capacity: float
    host: float = 0.0
    host_capacity: float = 0.0

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations + self.transient + self.reserve

    def to_dict(self) -> dict:
        """The ``memory.ranks[]`` entry of a plan's JSON document."""
        return {"rank": self.rank, "total_bytes": self.total, "weights_bytes": self.weights,
                "gradients_bytes": self.gradients, "optimizer_bytes": self.optimizer,
                "activations_bytes": self.activations, "live_micro_batches": list(self.live),
                "transient_bytes": self.transient, "reserve_bytes": self.reserve, "capacity_bytes": self.capacity,
                "host_bytes": self.host, "host_capacity_bytes": self.host_capacity}


class CandidateMemory:
    """The memory of candidate ``n`` of a priced batch (:class:`~nest.cost.pricing.Priced`)
    under any split: its per-node parts are computed once, for checking many splits
    (polishing tries dozens)."""

    def __init__(self, priced, n: int):
        scn, table, cands = priced.scn, priced.table, priced.cands
        config, self.pp, self.vp = int(cands.config[n]), int(cands.pp[n]), int(cands.vp[n])
        kinds = scn.kind_index
        col = lambda name: table.cols[name][config][kinds].astype(np.float64)  # noqa: E731
        dense, expert, acts = col("params_dense"), col("params_expert"), col("act_bytes")
        sync = {k: float(v[n]) for k, v in priced.sync.items()}
        cache = float(scn.fp8_weight_cache(int(cands.zero[n])))
        self.parts = {"weights": dense * sync["dense_weight_bytes"] + expert * sync["expert_weight_bytes"]
                      + cache * (dense + expert) * scn.gemm_kinds[kinds],
                      "gradients": dense * sync["dense_grad_bytes"] + expert * sync["expert_grad_bytes"],
                      "optimizer": dense * sync["dense_state_bytes"] + expert * sync["expert_state_bytes"],
                      "host": dense * sync["dense_host_bytes"] + expert * sync["expert_host_bytes"],
                      "acts": acts}
        self.micro, self.extra = int(priced.micro_batches()[n]), int(priced.extra_warmup[n])
        self.pair = float(priced.pair_transient[n])
        self.host_capacity = 0.0 if scn.host_share is None else float(scn.host_share.usable_bytes)
        self.fixed, self.last = float(table.transient[config]), float(table.last_transient[config])
        self.offloaded = float(table.offload_host[config])
        self.reserve, self.capacity = float(scn.reserve_bytes), float(scn.cluster.device.memory_bytes)

    def ranks(self, layers_per_stage) -> list[DeviceMemory]:
        """Per pipeline rank, its memory with ``layers_per_stage`` nodes per virtual stage,
        at the rank's exact activation peak (:func:`peak_activations`)."""
        pp, vp = self.pp, self.vp
        ends = np.cumsum(np.asarray(layers_per_stage, dtype=np.int64))
        starts = np.concatenate(([0], ends[:-1]))
        per_stage = {k: np.add.reduceat(v, starts) for k, v in self.parts.items()}
        peaks, at_peak = peak_activations(pp, vp, self.micro, per_stage["acts"], self.extra)
        # per rank, the sum over its chunks (virtual stages d, d + pp, ...): each row of the
        # contiguous [rank, chunk] table reduces as the rank's own 1-D array would, bit for bit
        per_rank = {k: np.ascontiguousarray(per_stage[k].reshape(vp, pp).T).sum(axis=1).tolist()
                    for k in ("weights", "gradients", "optimizer", "host")}
        return [DeviceMemory(d, per_rank["weights"][d], per_rank["gradients"][d], per_rank["optimizer"][d],
                             float(peaks[d]), tuple(at_peak[d].tolist()),
                             self.pair + self.fixed + (self.last if d == pp - 1 else 0.0), self.reserve,
                             self.capacity, per_rank["host"][d] + self.offloaded, self.host_capacity)
                for d in range(pp)]

    def fits(self, layers_per_stage) -> bool:
        """Whether every rank fits its device at its exact peak, and its offloaded state
        its host (the stage DP's check is exact for alike chunks; this settles the others)."""
        return all(d.total <= self.capacity and d.host <= d.host_capacity for d in self.ranks(layers_per_stage))


def device_memory(priced, n: int, layers_per_stage) -> list[DeviceMemory]:
    """Per pipeline rank, the memory of candidate ``n`` of a priced batch
    (:class:`~nest.cost.pricing.Priced`) split into ``layers_per_stage`` nodes per
    virtual stage, at the rank's exact activation peak (:func:`peak_activations`)."""
    return CandidateMemory(priced, n).ranks(layers_per_stage)


def fits(priced, n: int, layers_per_stage) -> bool:
    """Whether every rank of candidate ``n`` split so fits its device at its exact peak,
    and its offloaded state its host (:meth:`CandidateMemory.fits`)."""
    return CandidateMemory(priced, n).fits(layers_per_stage)
