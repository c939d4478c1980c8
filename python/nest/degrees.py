"""The names of the parallel degrees and the search's limits on them, without numpy: what
the command line validates its arguments against before a command needs the cost model
(``nest --help``, ``--version``, ``models`` and ``clusters`` then start without numpy).
This module is their home; :mod:`nest.parallel` re-exports every name beside the
configuration and candidate types that use them.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import SpecError

RECOMPUTE_MODES = ("none", "selective", "full", "mlp", "moe_act", "layernorm,moe_act", "moe", "mla_up_proj",
                   "mla_up_proj,moe_act", "mla_up_proj,mlp")
"""Activation recomputation: none; selective, Megatron-LM's ``--recompute-granularity
selective`` with its default module ``core_attn`` (the attention core); full (every block
keeps only its input); and ``--recompute-modules`` sets (Megatron-Core core_v0.14.0,
megatron/core/transformer/transformer_config.py ``recompute_modules``): ``mlp`` the dense
MLPs, ``moe_act`` the experts' activation, ``layernorm`` the separate norms (MoE's pre-MLP
norm, MLA's input norm), ``moe`` whole MoE layers, ``mla_up_proj`` MLA's up projections.
The first three are the classic modes; :func:`recompute_modes` lists those a model has."""

CLASSIC_RECOMPUTE = RECOMPUTE_MODES[:3]
"""none, selective and full: the modes of every model (and of measured layer profiles)."""

RECOMPUTE_LADDER = ("none", "selective", "moe_act", "mla_up_proj", "mla_up_proj,moe_act", "layernorm,moe_act",
                    "mlp", "mla_up_proj,mlp", "moe", "full")
"""The modes from least to most memory saved on the layers they apply to (what a
diagnosis tries in turn)."""


def recompute_modules(mode: str) -> frozenset[str]:
    """The Megatron modules a mode recomputes (``selective``: ``core_attn``; ``full``:
    every module, marked ``full``)."""
    if mode == "none":
        return frozenset()
    if mode == "selective":
        return frozenset({"core_attn"})
    return frozenset(mode.split(","))


def recompute_modes(dense: bool, moe: bool, latent: bool) -> tuple[str, ...]:
    """The modes that change something for a model with dense MLP blocks, MoE blocks and
    latent attention (the search's default): a module the model lacks recomputes nothing."""
    def applies(mode: str) -> bool:
        modules = recompute_modules(mode) - {"core_attn", "full"}
        need = {"mlp": dense, "moe_act": moe, "moe": moe, "layernorm": moe or latent, "mla_up_proj": latent}
        return all(need[m] for m in modules)
    return tuple(m for m in RECOMPUTE_MODES if applies(m))


ZERO_STAGES = (0, 1, 2, 3)
"""ZeRO stages: 0 replicated, 1 optimizer state sharded (Megatron's distributed optimizer),
2 also gradients, 3 also parameters."""

DIMENSIONS = ("tp", "cp", "ep", "dp", "pp")
"""The dimensions a rank order names."""

DEFAULT_ORDER = "tp-cp-ep-dp-pp"
"""Megatron-LM's default rank order, innermost first."""

RANK_ORDERS = (DEFAULT_ORDER, "tp-cp-ep-pp-dp")
"""The rank orders the search tries by default."""


def parse_order(order: str) -> tuple[str, ...]:
    """The dimensions of a rank-order string such as ``tp-cp-ep-dp-pp``, innermost first;
    SpecError unless it names each of :data:`DIMENSIONS` once."""
    dims = _VALID_ORDERS.get(order) if isinstance(order, str) else None
    if dims is None:
        dims = tuple(order.split("-")) if isinstance(order, str) else ()
        if sorted(dims) != sorted(DIMENSIONS):
            raise SpecError(f"rank_order = {order!r}: must name each of {', '.join(DIMENSIONS)} once, "
                            "innermost first, separated by '-'")
        _VALID_ORDERS[order] = dims
    return dims


_VALID_ORDERS: dict[str, tuple[str, ...]] = {}
"""The orders :func:`parse_order` has accepted (at most the 120 permutations): a search
parses its few orders for every layout it prices."""


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
    offload: tuple[float, ...] | None = None
    # transformer layers whose activations offload (configurations without recomputation
    # on one pipeline stage; None: none)
    act_offload: tuple[int, ...] | None = None
    # expert tensor-parallel degrees (None: the search's default, nest.search.space)
    etp: tuple[int, ...] | None = None

    def orders(self) -> tuple[str, ...]:
        """The rank orders to search (validated): the limit, else :data:`RANK_ORDERS`."""
        orders = tuple(self.rank_order or RANK_ORDERS)
        for order in orders:
            parse_order(order)
        return orders
