"""The parallel configuration: one home for the degrees and the settings that go with them.

* :class:`LayerConfig` fixes what shapes one node's compute and memory on one device:
  tensor, context, expert and expert tensor parallel degrees, sequence parallelism,
  micro-batch, recomputation, and whether the head stage keeps a copy of tied embeddings.
* :class:`Candidate` adds the pipeline and data-parallel degrees, the virtual stages per
  pipeline rank (interleaving), the ZeRO stage and the rank order: one point of the
  search space. :meth:`Candidate.parallelism` is the ``parallelism`` object of a plan's
  JSON document, and :meth:`Candidate.of_parallelism` reads it back.
* :class:`ConfigArrays` and :class:`CandidateArrays` are the same as columns (one entry
  per configuration or candidate), which is how the cost model prices thousands at once.
* :class:`SpaceLimits` restricts the search to given values of each dimension.

The names that need no numpy (the recomputation modes, ZeRO stages, rank orders and
:class:`SpaceLimits`) live in :mod:`nest.degrees`, which the command line reads before a
command needs numpy; this module re-exports them.

Rank orders name the parallel dimensions innermost first (Megatron-LM's default
``tp-cp-ep-dp-pp``: tensor-parallel peers are adjacent ranks, pipeline stages farthest
apart); :mod:`nest.network.layout` turns one into device positions. Experts fold into
the ranks of a pipeline stage as Megatron-Core's expert grid does (core_v0.14.0
``megatron/core/parallel_state.py initialize_model_parallel``: the expert
``RankGenerator`` takes the same order string with ``tp`` the expert tensor-parallel
degree and ``dp`` the expert data-parallel one): a stage's ``tp x cp x dp`` ranks in
ascending order are ``etp x ep x expert_dp``, expert TP innermost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .degrees import (CLASSIC_RECOMPUTE, DEFAULT_ORDER, DIMENSIONS, RANK_ORDERS, RECOMPUTE_LADDER,  # noqa: F401
                      RECOMPUTE_MODES, ZERO_STAGES, SpaceLimits, parse_order, recompute_modes, recompute_modules)
from .errors import SpecError, short_repr


def warmup(device, pp, vp, micro_batches, extra=0):
    """Warm-up forwards of pipeline rank ``device`` in Megatron-Core's order
    (core_v0.14.0 schedules.py ``get_pp_rank_microbatches``), with ``extra`` more under
    the combined 1F1B of EP overlap (:mod:`nest.schedule.order`); elementwise over arrays,
    an int for scalars."""
    interleaved = np.minimum(2 * (np.asarray(pp) - device - 1) + (np.asarray(vp) - 1) * pp + extra,
                             np.asarray(micro_batches) * vp)
    w = np.where(np.asarray(vp) == 1, np.minimum(np.asarray(pp) - device - 1 + extra, micro_batches), interleaved)
    return int(w) if w.ndim == 0 else w


_EP_OVERLAP_RECOMPUTE = np.array([m != "full" and "moe" not in recompute_modules(m) for m in RECOMPUTE_MODES])
"""Per recompute mode index: whether Megatron's combined 1F1B accepts it."""


def ep_overlap_allowed(ep, pp, vp, recompute):
    """Whether Megatron-Core runs its combined 1F1B (``--overlap-moe-expert-parallel-comm``)
    for these degrees and recompute mode indices (scalars or arrays): ``ep > 1``, virtual
    stages when ``pp > 1`` (``"If enabling EP A2A overlap,
    virtual_pipeline_model_parallel_size must be specified when
    pipeline_model_parallel_size > 1"``) and no full or ``moe`` recomputation (core_v0.14.0
    transformer_config.py ``TransformerConfig.__post_init__``)."""
    return (np.asarray(ep) > 1) & ((np.asarray(pp) == 1) | (np.asarray(vp) > 1)) & _EP_OVERLAP_RECOMPUTE[recompute]


def check_fraction(value, what: str = "optimizer_offload") -> float:
    """``value`` as a fraction in [0, 1]; SpecError naming ``what`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not 0 <= float(value) <= 1:
        raise SpecError(f"{what} = {short_repr(value)}: must be a fraction from 0 to 1")
    return float(value)



@dataclass(frozen=True)
class LayerConfig:
    """Everything that shapes one node's per-micro-batch compute and memory on one device."""

    tp: int
    sp: bool
    micro_batch: int
    recompute: str
    tied_copy: bool = False  # the head stage keeps its own copy of the embedding (tied, or MTP)
    cp: int = 1
    ep: int = 1
    # the transformer layers, first ones first, whose activations Transformer Engine
    # offloads to the host between their forward and backward (nest.cost.activation_offload)
    act_offload: int = 0
    # expert tensor parallelism: each routed expert's MLP split over etp ranks
    # (Megatron's --expert-tensor-parallel-size; 1 for dense models)
    etp: int = 1


@dataclass(frozen=True)
class Candidate:
    """One configuration: layer config, pipeline/data degrees, interleaving, ZeRO, order."""

    cfg: LayerConfig
    pp: int
    dp: int
    vp: int = 1
    zero: int = 0
    order: str = DEFAULT_ORDER
    # the fraction of the rank's optimizer state (master weights and moments) held and
    # stepped on the host (nest.cost.offload)
    offload: float = 0.0

    @property
    def devices(self) -> int:
        return self.cfg.tp * self.cfg.cp * self.dp * self.pp

    @property
    def virtual_stages(self) -> int:
        return self.pp * self.vp

    @property
    def expert_dp(self) -> int:
        """Ranks holding the same expert shards: a stage's ``tp x cp x dp`` ranks over
        ``ep x etp`` (MoE parallel folding)."""
        return self.cfg.tp * self.cfg.cp * self.dp // (self.cfg.ep * self.cfg.etp)

    def degrees(self) -> dict[str, int]:
        """The degrees a rank order lays out (expert ranks fold into the stage's ranks)."""
        return {"tp": self.cfg.tp, "cp": self.cfg.cp, "dp": self.dp, "pp": self.pp}

    def parallelism(self, micro_batches: int) -> dict:
        """The ``parallelism`` object of a plan's JSON document."""
        cfg = self.cfg
        return {"tp": cfg.tp, "pp": self.pp, "dp": self.dp, "cp": cfg.cp, "ep": cfg.ep, "sp": cfg.sp,
                "vp": self.vp, "zero": self.zero, "distributed_optimizer": self.zero >= 1,
                "recompute": cfg.recompute, "micro_batch": cfg.micro_batch,
                "num_microbatches": micro_batches, "rank_order": self.order,
                "expert_tp": cfg.etp, "expert_dp": self.expert_dp, "optimizer_offload_fraction": self.offload,
                "activation_offload_layers": cfg.act_offload}

    @staticmethod
    def of_parallelism(parallelism: dict, head_needs_embedding: bool) -> "Candidate":
        """The candidate of a plan's ``parallelism`` object (``head_needs_embedding``: the
        model's :attr:`~nest.specs.ModelSpec.head_needs_embedding`, which decides the head
        stage's copy of the embedding; a document without ``expert_tp`` has 1)."""
        p = parallelism
        cfg = LayerConfig(p["tp"], bool(p["sp"]), p["micro_batch"], p["recompute"],
                          head_needs_embedding and p["pp"] > 1, p.get("cp", 1), p.get("ep", 1),
                          p.get("activation_offload_layers", 0), p.get("expert_tp", 1))
        return Candidate(cfg, p["pp"], p["dp"], p.get("vp", 1), p.get("zero", 0),
                         p.get("rank_order", DEFAULT_ORDER), p.get("optimizer_offload_fraction", 0.0))


@dataclass(frozen=True)
class ConfigArrays:
    """Many layer configurations as columns (``recompute`` holds indices into
    ``RECOMPUTE_MODES``), for pricing them all with numpy at once."""

    tp: np.ndarray
    sp: np.ndarray
    micro_batch: np.ndarray
    recompute: np.ndarray
    tied_copy: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    act_offload: np.ndarray | None = None  # None: no layer offloads
    etp: np.ndarray | None = None  # None: expert TP 1 everywhere

    def __post_init__(self):
        if self.act_offload is None:
            object.__setattr__(self, "act_offload", np.zeros(len(self.tp), dtype=np.int64))
        if self.etp is None:
            object.__setattr__(self, "etp", np.ones(len(self.tp), dtype=np.int64))

    def __len__(self) -> int:
        return len(self.tp)

    @staticmethod
    def of(configs: Sequence[LayerConfig]) -> "ConfigArrays":
        mode = {name: i for i, name in enumerate(RECOMPUTE_MODES)}
        col = lambda get, dtype=np.int64: np.array([get(c) for c in configs], dtype=dtype)  # noqa: E731
        return ConfigArrays(col(lambda c: c.tp), col(lambda c: c.sp, bool), col(lambda c: c.micro_batch),
                            col(lambda c: mode[c.recompute]), col(lambda c: c.tied_copy, bool),
                            col(lambda c: c.cp), col(lambda c: c.ep), col(lambda c: c.act_offload),
                            col(lambda c: c.etp))

    def take(self, index: np.ndarray) -> "ConfigArrays":
        return ConfigArrays(*(getattr(self, f)[index] for f in
                              ("tp", "sp", "micro_batch", "recompute", "tied_copy", "cp", "ep", "act_offload",
                               "etp")))

    def config(self, i: int) -> LayerConfig:
        return LayerConfig(int(self.tp[i]), bool(self.sp[i]), int(self.micro_batch[i]),
                           RECOMPUTE_MODES[int(self.recompute[i])], bool(self.tied_copy[i]),
                           int(self.cp[i]), int(self.ep[i]), int(self.act_offload[i]), int(self.etp[i]))


class ConfigList(Sequence):
    """The :class:`LayerConfig` of every row of a :class:`ConfigArrays`, built when read."""

    def __init__(self, arrays: ConfigArrays):
        self.arrays = arrays
        self._built: dict[int, LayerConfig] = {}

    def __len__(self) -> int:
        return len(self.arrays)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = int(i)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        if i not in self._built:
            self._built[i] = self.arrays.config(i)
        return self._built[i]

    def __eq__(self, other) -> bool:
        return list(self) == list(other)


@dataclass
class CandidateArrays:
    """Candidates as columns: ``config`` indexes a sequence of layer configurations (and
    their :class:`ConfigArrays`), ``order`` indexes ``orders``; ``offload`` is the
    optimizer-offload fraction (None: 0 for all)."""

    config: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    vp: np.ndarray
    zero: np.ndarray
    order: np.ndarray
    orders: tuple[str, ...]
    offload: np.ndarray | None = None

    def __post_init__(self):
        if self.offload is None:
            self.offload = np.zeros(len(self.config))

    def __len__(self) -> int:
        return len(self.config)

    def take(self, index) -> "CandidateArrays":
        return CandidateArrays(self.config[index], self.pp[index], self.dp[index], self.vp[index],
                               self.zero[index], self.order[index], self.orders, self.offload[index])

    def candidate(self, configs: Sequence[LayerConfig], i: int) -> Candidate:
        """Candidate ``i`` with its layer configuration from ``configs``."""
        return Candidate(configs[int(self.config[i])], int(self.pp[i]), int(self.dp[i]),
                         int(self.vp[i]), int(self.zero[i]), self.orders[int(self.order[i])],
                         float(self.offload[i]))

    def degrees(self, arrays: ConfigArrays) -> "DegreeColumns":
        """The candidates' degrees and rank orders, their layer configurations' from
        ``arrays`` (the columns ``config`` indexes)."""
        return DegreeColumns(arrays.tp[self.config], arrays.cp[self.config], arrays.ep[self.config], self.dp,
                             self.pp, self.order, self.orders, arrays.etp[self.config])

    @staticmethod
    def of(cands: Sequence[Candidate]) -> tuple[list[LayerConfig], "CandidateArrays"]:
        """The distinct layer configurations of ``cands`` (first use first) and the
        candidates as columns indexing them."""
        configs = list(dict.fromkeys(c.cfg for c in cands))
        where = {cfg: i for i, cfg in enumerate(configs)}
        orders = tuple(dict.fromkeys(c.order for c in cands)) or (DEFAULT_ORDER,)
        column = lambda get: np.array([get(c) for c in cands], dtype=np.int64)  # noqa: E731
        return configs, CandidateArrays(column(lambda c: where[c.cfg]), column(lambda c: c.pp),
                                        column(lambda c: c.dp), column(lambda c: c.vp),
                                        column(lambda c: c.zero), column(lambda c: orders.index(c.order)),
                                        orders, np.array([c.offload for c in cands], dtype=np.float64))


@dataclass(frozen=True)
class DegreeColumns:
    """What places a candidate's ranks, one entry per candidate: the degrees and the rank
    order (``order`` indexes ``orders``)."""

    tp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    dp: np.ndarray
    pp: np.ndarray
    order: np.ndarray
    orders: tuple[str, ...]
    etp: np.ndarray | None = None  # None: expert TP 1 everywhere

    def __post_init__(self):
        if self.etp is None:
            object.__setattr__(self, "etp", np.ones(len(self.tp), dtype=np.int64))

    def __len__(self) -> int:
        return len(self.tp)

    def keys(self):
        """``(tp, cp, dp, pp, ep, order name, etp)`` of every candidate: what its
        placement depends on."""
        return zip(self.tp.tolist(), self.cp.tolist(), self.dp.tolist(), self.pp.tolist(), self.ep.tolist(),
                   (self.orders[o] for o in self.order.tolist()), self.etp.tolist())
