"""The command line's option values and search-limit flags: argparse types that turn text
into checked values (a bad value is argparse's one-line usage error, exit 2), the flags
that narrow the search (:data:`LIMIT_FLAGS`) and the :class:`~nest.parallel.SpaceLimits`
they give."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from .errors import SpecError
from .degrees import RECOMPUTE_MODES, ZERO_STAGES, SpaceLimits


def positive_int(text: str) -> int:
    """An integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


def int_list(text: str) -> list[int]:
    """``4,8``: comma-separated integers."""
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None


def _checked_ints(text: str, ok, rule: str) -> tuple[int, ...]:
    """:func:`int_list` of ``text`` whose every value passes ``ok`` (``rule`` says which
    values do when one does not)."""
    values = tuple(int_list(text))
    if not all(ok(v) for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: {rule}")
    return values


def degree_list(text: str) -> tuple[int, ...]:
    """``8`` or ``4,8``: the degrees a search may use (positive integers)."""
    return _checked_ints(text, lambda v: v >= 1, "degrees must be positive integers")


def zero_list(text: str) -> tuple[int, ...]:
    """``1`` or ``0,1``: ZeRO stages."""
    return _checked_ints(text, lambda v: v in ZERO_STAGES, f"ZeRO stages are {', '.join(map(str, ZERO_STAGES))}")


def _number(text: str, low: float, high: float, what: str) -> float:
    """``text`` as a number from ``low`` to ``high`` (``what`` says the range when not)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"{text!r}: must be {what}")
    return value


def fraction(text: str) -> float:
    """A fraction from 0 to 1 (``0.5``)."""
    return _number(text, 0.0, 1.0, "a fraction from 0 to 1")


def non_negative(text: str) -> float:
    """A finite number of at least 0 (``0.3``)."""
    return _number(text, 0.0, sys.float_info.max, "a finite number >= 0")


def fraction_list(text: str) -> tuple[float, ...]:
    """``1`` or ``0,0.5,1``: optimizer-offload fractions."""
    return tuple(fraction(part) for part in text.split(","))


def layer_count_list(text: str) -> tuple[int, ...]:
    """``0,4,8``: numbers of layers (0 allowed)."""
    return _checked_ints(text, lambda v: v >= 0, "layer counts are 0 or more")


def recompute_list(text: str) -> tuple[str, ...]:
    """``none,selective`` or ``none,layernorm,moe_act``: recompute modes, read left to right
    taking the longest mode at each point (a mode's own modules are joined by commas)."""
    parts, modes, i = text.split(","), [], 0
    while i < len(parts):
        j = next((j for j in range(len(parts), i, -1) if ",".join(parts[i:j]) in RECOMPUTE_MODES), None)
        if j is None:
            raise argparse.ArgumentTypeError(f"{text!r}: {parts[i]!r} starts no recompute mode (modes: "
                                             f"{' | '.join(RECOMPUTE_MODES)})")
        modes.append(",".join(parts[i:j]))
        i = j
    return tuple(modes)


LIMIT_FLAGS = (("--tp", "tp", degree_list, "tensor-parallel degrees"),
               ("--pp", "pp", degree_list, "pipeline-parallel degrees"),
               ("--dp", "dp", degree_list, "data-parallel degrees"),
               ("--cp", "cp", degree_list, "context-parallel degrees"),
               ("--ep", "ep", degree_list, "expert-parallel degrees"),
               ("--etp", "etp", degree_list,
                "expert tensor-parallel degrees (MoE models; all: 1 and each configuration's own tp)"),
               ("--vp", "vp", degree_list, "virtual pipeline stages per device"),
               ("--mbs", "micro_batch", degree_list, "micro-batch sizes"),
               ("--zero", "zero", zero_list, "ZeRO stages"),
               ("--recompute", "recompute", recompute_list, "recompute modes"),
               ("--optimizer-offload", "offload", fraction_list,
                "optimizer-offload fractions (each rank's share of optimizer state on the host; default: offload "
                "only where a configuration fits no other way)"),
               ("--activation-offload", "act_offload", layer_count_list,
                "activation-offload layer counts (the first N layers' activations on the host, for one pipeline "
                "stage without recomputation; default: 0, none)"))
"""The search limits ``plan`` and ``compare`` take (:class:`~nest.parallel.SpaceLimits` fields)."""


def add_limits(parser: argparse.ArgumentParser) -> None:
    """The flags that narrow the search: each takes one value or a comma-separated list."""
    for flag, _, kind, what in LIMIT_FLAGS:
        example = {recompute_list: "none,selective", zero_list: "1,2", fraction_list: "0,0.5,1",
                   layer_count_list: "0,4,8"}.get(kind, "4,8")
        parser.add_argument(flag, dest=limit_dest(flag), type=kind, metavar="LIST",
                            help=f"{what} to search, one or a comma-separated list (e.g. {flag} {example}; "
                                 "default: all)")
    parser.add_argument("--max-pp", type=positive_int, metavar="N", help="search pipeline degrees up to N")
    parser.add_argument("--sp", dest="limit_sp", action=argparse.BooleanOptionalAction, default=None,
                        help="search only with (--sp) or without (--no-sp) sequence parallelism")


def limit_dest(flag: str) -> str:
    """The argparse destination of a limit flag (``--tp``: ``limit_tp``)."""
    return "limit_" + flag[2:].replace("-", "_")


def narrowed_limits(args, limits: SpaceLimits) -> SpaceLimits:
    """``limits`` (what the inputs allow) narrowed by the command line's limit flags."""
    fields = {field: getattr(args, limit_dest(flag)) for flag, field, _, _ in LIMIT_FLAGS}
    fields = {k: v for k, v in fields.items() if v is not None}
    if args.max_pp is not None:
        if "pp" in fields:
            raise SpecError(f"max_pp = {args.max_pp}: give --pp or --max-pp, not both")
        fields["pp"] = tuple(range(1, args.max_pp + 1))
    if args.limit_sp is not None:
        fields["sp"] = (args.limit_sp,)
    for key, values in fields.items():  # within what the inputs already allow (a profile's measured degrees)
        allowed = getattr(limits, key)
        if allowed is not None:
            fields[key] = tuple(v for v in values if v in allowed)
            if not fields[key]:
                raise SpecError(f"{key} = {','.join(map(str, values))}: none of the values the inputs allow "
                                f"({','.join(map(str, allowed))})")
    return replace(limits, **fields)
