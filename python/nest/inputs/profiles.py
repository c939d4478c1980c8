"""Measured layer profiles: per-node times and sizes that replace the analytic compute model.

A profile lists, for each tensor-parallel degree it was measured at (and optionally for
several micro-batch sizes), every node of the layer graph in execution order with:

==========================  ======================================================
``name``                    node name, e.g. ``embedding``, ``block.0``, ``head``
``forward_s``               forward time of one micro-batch on one device, seconds
``backward_s``              backward time (without recomputation), seconds
``param_bytes``             parameter bytes held by one device (its TP slice)
``activation_bytes``        activation bytes kept from forward to backward, per micro-batch
``output_bytes``            bytes of the node's output (sent to the next stage), per micro-batch
``flops`` (optional)        forward + backward model FLOPs on one device (MFU only; default 0)
``selective_recompute_s``   (optional) time of the part selective recomputation redoes
``selective_activation_bytes``  (optional) activation bytes kept with selective recomputation
==========================  ======================================================

Times are measured with tensor parallelism running, so they include the TP
collectives (``tp_comm_s`` is 0). Every measurement must list the same nodes in the
same order. Units are SI (seconds, bytes); values must be finite and >= 0, and below
:data:`LIMITS` (an hour per node, a pebibyte, 10^24 FLOPs, TP and micro-batch 2^20,
:data:`MAX_NODES` nodes): far beyond any real layer, and low enough that the stage DP's
integer picoseconds and bytes cannot overflow.

JSON::

    {
      "name": "llama2-7b-a100",                 (optional; default: the file stem)
      "source": "measured with ... on ...",     (optional)
      "measurements": [
        {"tp": 1, "micro_batch": 1,             (micro_batch optional, default 1)
         "nodes": [
           {"name": "embedding", "forward_s": 1.2e-4, "backward_s": 2.0e-4,
            "param_bytes": 262144000, "activation_bytes": 0, "output_bytes": 33554432},
           {"name": "block.0", ...},
           ...]},
        {"tp": 2, "nodes": [...]}
      ]
    }

CSV: one row per node and measurement, rows of one measurement in node order, with a
header naming the columns ``tp, micro_batch, name, forward_s, backward_s, param_bytes,
activation_bytes, output_bytes`` and optionally ``flops``, ``selective_recompute_s``,
``selective_activation_bytes``. ``micro_batch`` may be omitted (1). Blank lines and
lines starting with ``#`` are ignored.

Micro-batch sizes that were not measured are derived from the nearest measured one at
the same TP degree (the largest one below, else the smallest one above): times,
activation, output and FLOPs scale linearly with the micro-batch, parameters do not.

Recomputation (:meth:`MeasuredProfile.node_costs`): ``none`` computes forward +
backward and keeps ``activation_bytes``; ``full`` adds the forward again, keeps only
the node's input (the previous node's output) and needs its full activations while its
backward runs; ``selective`` uses the two optional columns when measured and
otherwise prices like ``none``.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecError, mappings, non_empty_list, reject_unknown_keys, short_repr
from ..parallel import CLASSIC_RECOMPUTE
from .files import parse_json, read_text

REQUIRED = ("name", "forward_s", "backward_s", "param_bytes", "activation_bytes", "output_bytes")
OPTIONAL = ("flops", "selective_recompute_s", "selective_activation_bytes")
_NUMBERS = REQUIRED[1:] + OPTIONAL

MAX_SECONDS = 3600.0
"""Largest time of one node and micro-batch (an hour; real layers take milliseconds).
Bounding it keeps every stage time, times the micro-batch count, inside int64 picoseconds."""

MAX_BYTES = float(2**50)
"""Largest byte count of one node (a pebibyte): int64 sums over nodes cannot overflow."""

MAX_FLOPS = 1e24
"""Largest FLOP count of one node and micro-batch."""

MAX_DEGREE = 2**20
"""Largest TP degree and micro-batch size a profile may list."""

MAX_NODES = 100_000
"""Most nodes a layer graph may have (real models have hundreds)."""

LIMITS = {"forward_s": MAX_SECONDS, "backward_s": MAX_SECONDS, "selective_recompute_s": MAX_SECONDS,
          "param_bytes": MAX_BYTES, "activation_bytes": MAX_BYTES, "output_bytes": MAX_BYTES,
          "selective_activation_bytes": MAX_BYTES, "flops": MAX_FLOPS}
"""Upper bound of every numeric node field (inclusive)."""


@dataclass(frozen=True)
class NodeMeasurement:
    """One node at one TP degree and micro-batch size (seconds, bytes)."""

    name: str
    forward_s: float
    backward_s: float
    param_bytes: float
    activation_bytes: float
    output_bytes: float
    flops: float = 0.0
    selective_recompute_s: float | None = None
    selective_activation_bytes: float | None = None


@dataclass(frozen=True)
class Measurement:
    """All nodes, in order, measured at tensor-parallel degree ``tp`` and ``micro_batch``."""

    tp: int
    micro_batch: int
    nodes: tuple[NodeMeasurement, ...]


@dataclass(frozen=True)
class MeasuredCost:
    """One node, one micro-batch, one device: the fields of ``nest.cost.nodes``.

    ``compute_s = fwd_s + bwd_s + recompute_s``; ``tp_comm_s`` is 0 because measured
    times include the tensor-parallel collectives.
    """

    compute_s: float
    tp_comm_s: float
    params: int
    act_bytes: int
    out_bytes: int
    transient_bytes: int
    model_flops: float
    fwd_s: float
    bwd_s: float
    recompute_s: float

    @property
    def time_s(self) -> float:
        """Compute plus tensor-parallel communication, seconds."""
        return self.compute_s + self.tp_comm_s


def _label(tp: int, micro_batch: int) -> str:
    return f"profile tp={tp} micro_batch={micro_batch}"


def _positive_int(value, what: str, maximum: int = MAX_DEGREE) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise SpecError(f"{what} = {short_repr(value)}: must be a positive integer")
    if value > maximum:
        raise SpecError(f"{what} = {short_repr(value)}: must be at most {maximum}")
    return value


def _number(value, what: str, from_text: bool = False, maximum: float = math.inf) -> float:
    if isinstance(value, str) and from_text:
        try:
            value = float(value)
        except ValueError:
            raise SpecError(f"{what} = {short_repr(value)}: must be a finite number >= 0") from None
    if (not isinstance(value, (int, float)) or isinstance(value, bool)
            or not math.isfinite(value) or value < 0):
        raise SpecError(f"{what} = {short_repr(value)}: must be a finite number >= 0")
    if value > maximum:
        raise SpecError(f"{what} = {short_repr(value)}: must be at most {maximum:g}")
    return float(value)


def node_measurement(data: dict, where: str, from_text: bool = False) -> NodeMeasurement:
    """A validated :class:`NodeMeasurement` from a mapping (``where`` prefixes errors).

    ``from_text``: the values are strings to parse (CSV); otherwise they must be numbers.
    """
    if not isinstance(data, dict):
        raise SpecError(f"{where} = {short_repr(data)}: must be a mapping")
    unknown = sorted(set(data) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise SpecError(f"{where}.{unknown[0]} = {short_repr(data[unknown[0]])}: unknown field "
                        f"(known: {', '.join(REQUIRED + OPTIONAL)})")
    name = data.get("name")
    # printable: node names end up in reports and launcher arguments (no NUL, no newlines)
    if not isinstance(name, str) or not name or not name.isprintable():
        raise SpecError(f"{where}.name = {short_repr(name)}: must be a non-empty printable string")
    where = f"{where} node {short_repr(name)}"
    values = {}
    for key in _NUMBERS:
        value = data.get(key)
        if value is None or value == "":
            if key in REQUIRED:
                raise SpecError(f"{where}: {key} missing")
            continue
        values[key] = _number(value, f"{where}: {key}", from_text, LIMITS[key])
    return NodeMeasurement(name=name, **values)


@dataclass(frozen=True)
class MeasuredProfile:
    """Measured per-node costs, per TP degree (and micro-batch size), of one layer graph."""

    name: str
    measurements: tuple[Measurement, ...]
    source: str = ""

    def __post_init__(self):
        measurements = tuple(sorted(self.measurements, key=lambda m: (m.tp, m.micro_batch)))
        object.__setattr__(self, "measurements", measurements)
        if not measurements:
            raise SpecError(f"profile {short_repr(self.name)}: no measurements")
        seen = set()
        reference = None
        for m in measurements:
            label = _label(m.tp, m.micro_batch)
            _positive_int(m.tp, f"{label}: tp")
            _positive_int(m.micro_batch, f"{label}: micro_batch")
            if (m.tp, m.micro_batch) in seen:
                raise SpecError(f"{label}: measured twice")
            seen.add((m.tp, m.micro_batch))
            names = [n.name for n in m.nodes]
            if not names:
                raise SpecError(f"{label}: no nodes")
            if len(names) > MAX_NODES:
                raise SpecError(f"{label}: nodes = {len(names)}: at most {MAX_NODES} supported")
            duplicates = sorted({n for n in names if names.count(n) > 1})
            if duplicates:
                raise SpecError(f"{label}: node name {short_repr(duplicates[0])} appears twice")
            if reference is None:
                reference = (label, names)
            elif names != reference[1]:
                raise SpecError(f"{label}: nodes {_diff(names, reference[1])} differ from "
                                f"{reference[0]}'s")

    @property
    def names(self) -> tuple[str, ...]:
        """Node names in execution order."""
        return tuple(n.name for n in self.measurements[0].nodes)

    @property
    def num_nodes(self) -> int:
        """Nodes of the layer graph."""
        return len(self.measurements[0].nodes)

    @property
    def tp_degrees(self) -> tuple[int, ...]:
        """The measured tensor-parallel degrees, ascending."""
        return tuple(sorted({m.tp for m in self.measurements}))

    def micro_batches(self, tp: int) -> tuple[int, ...]:
        """The micro-batch sizes measured at ``tp``, ascending."""
        return tuple(m.micro_batch for m in self.measurements if m.tp == tp)

    def measurement(self, tp: int, micro_batch: int) -> tuple[Measurement, float]:
        """The measurement to use for (``tp``, ``micro_batch``) and its micro-batch scale.

        SpecError if ``tp`` was not measured.
        """
        _positive_int(micro_batch, "micro_batch")
        sizes = self.micro_batches(tp)
        if not sizes:
            raise SpecError(f"tp = {short_repr(tp)}: not measured in profile {short_repr(self.name)} "
                            f"(measured: {', '.join(map(str, self.tp_degrees))})")
        below = [m for m in sizes if m <= micro_batch]
        base = below[-1] if below else sizes[0]
        chosen = next(m for m in self.measurements if m.tp == tp and m.micro_batch == base)
        return chosen, micro_batch / base

    def node_costs(self, tp: int, micro_batch: int, dtype_bytes_param: int,
                   recompute: str) -> list[MeasuredCost]:
        """Per-node costs of one micro-batch on one device, in node order.

        ``dtype_bytes_param`` converts parameter bytes to parameter counts (bytes per
        parameter in the measured run, e.g. 2 for bf16 weights).
        """
        _positive_int(dtype_bytes_param, "dtype_bytes_param")
        if recompute not in CLASSIC_RECOMPUTE:
            raise SpecError(f"recompute = {short_repr(recompute)}: a measured profile has "
                            f"{', '.join(CLASSIC_RECOMPUTE)}")
        measured, scale = self.measurement(tp, micro_batch)
        costs, previous_out = [], 0.0
        for node in measured.nodes:
            fwd, bwd = node.forward_s * scale, node.backward_s * scale
            full_act, out = node.activation_bytes * scale, node.output_bytes * scale
            extra, kept, transient = 0.0, full_act, 0.0
            if recompute == "full":
                extra, kept, transient = fwd, previous_out, full_act
            elif recompute == "selective" and node.selective_activation_bytes is not None:
                extra = (node.selective_recompute_s or 0.0) * scale
                kept, transient = node.selective_activation_bytes * scale, full_act
            costs.append(MeasuredCost(
                compute_s=fwd + bwd + extra, tp_comm_s=0.0,
                params=math.ceil(node.param_bytes / dtype_bytes_param),
                act_bytes=round(kept), out_bytes=round(out), transient_bytes=round(transient),
                model_flops=node.flops * scale, fwd_s=fwd, bwd_s=bwd, recompute_s=extra))
            previous_out = out
        return costs

    def to_dict(self) -> dict:
        """The profile in its JSON format (``load_profile`` reads it back)."""
        measurements = []
        for m in self.measurements:
            nodes = []
            for n in m.nodes:
                entry = {k: getattr(n, k) for k in REQUIRED}
                entry.update({k: getattr(n, k) for k in OPTIONAL
                              if getattr(n, k) is not None and (k != "flops" or n.flops)})
                nodes.append(entry)
            measurements.append({"tp": m.tp, "micro_batch": m.micro_batch, "nodes": nodes})
        return {"name": self.name, "source": self.source, "measurements": measurements}


def _diff(names: list[str], reference: list[str]) -> str:
    for i, (a, b) in enumerate(zip(names, reference)):
        if a != b:
            return f"(#{i} is {short_repr(a)}, expected {short_repr(b)})"
    return f"(count {len(names)}, expected {len(reference)})"


def profile_from_dict(data: dict, name: str = "profile") -> MeasuredProfile:
    """A :class:`MeasuredProfile` from the JSON format's mapping."""
    if not isinstance(data, dict):
        raise SpecError(f"profile = {short_repr(data)}: must be a JSON object")
    reject_unknown_keys(data, {"name", "source", "measurements"}, "profile")
    measurements = []
    for where, entry in mappings(data.get("measurements"), "profile.measurements"):
        reject_unknown_keys(entry, {"tp", "micro_batch", "nodes"}, where)
        tp = _positive_int(entry.get("tp"), f"{where}.tp")
        mb = _positive_int(entry.get("micro_batch", 1), f"{where}.micro_batch")
        nodes = non_empty_list(entry.get("nodes"), f"{where}.nodes")
        label = _label(tp, mb)
        measurements.append(Measurement(tp, mb, tuple(
            node_measurement(node, f"{label} nodes[{j}]") for j, node in enumerate(nodes))))
    profile_name = data.get("name", name)
    if not isinstance(profile_name, str) or not profile_name:
        raise SpecError(f"profile.name = {short_repr(profile_name)}: must be a non-empty string")
    return MeasuredProfile(name=profile_name, measurements=tuple(measurements),
                           source=str(data.get("source", "")))


def _csv_row(line: str, number: int) -> list[str]:
    try:
        return next(csv.reader([line]))
    except csv.Error as error:  # NUL bytes, fields beyond csv.field_size_limit()
        raise SpecError(f"profile CSV line {number}: {error}") from None


def _from_csv(text: str, name: str) -> MeasuredProfile:
    rows = [(number, _csv_row(line, number)) for number, line in enumerate(text.splitlines(), 1)
            if line.strip() and not line.lstrip().startswith("#")]
    if not rows:
        raise SpecError(f"profile {short_repr(name)}: empty CSV")
    header = [h.strip() for h in rows[0][1]]
    known = ("tp", "micro_batch") + REQUIRED + OPTIONAL
    for column in header:
        if column not in known:
            raise SpecError(f"profile CSV column {short_repr(column)}: unknown (known: {', '.join(known)})")
    if len(set(header)) != len(header):
        raise SpecError(f"profile CSV header {short_repr(header)}: a column appears twice")
    for column in ("tp",) + REQUIRED:
        if column not in header:
            raise SpecError(f"profile CSV column {short_repr(column)}: missing")
    groups: dict[tuple[int, int], list[NodeMeasurement]] = {}
    order: list[tuple[int, int]] = []
    for line, row in rows[1:]:
        if len(row) != len(header):
            raise SpecError(f"profile CSV line {line}: {len(row)} fields, header has {len(header)}")
        values = {h: v.strip() for h, v in zip(header, row)}
        tp = _csv_int(values["tp"], f"profile CSV line {line} tp")
        mb = _csv_int(values.get("micro_batch") or "1", f"profile CSV line {line} micro_batch")
        fields = {k: v for k, v in values.items() if k not in ("tp", "micro_batch")}
        key = (tp, mb)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(node_measurement(fields, f"{_label(tp, mb)} line {line}", from_text=True))
    if not order:
        raise SpecError(f"profile {short_repr(name)}: CSV has no rows")
    return MeasuredProfile(name=name, measurements=tuple(
        Measurement(tp, mb, tuple(groups[(tp, mb)])) for tp, mb in order))


def _csv_int(text: str, what: str) -> int:
    try:
        value = float(text)
    except ValueError:
        raise SpecError(f"{what} = {short_repr(text)}: must be a positive integer") from None
    return _positive_int(value, what)


def load_profile(path) -> MeasuredProfile:
    """A measured profile from a ``.json`` or ``.csv`` file (format in the module docstring):
    a regular UTF-8 file of at most :data:`~nest.inputs.files.MAX_SPEC_BYTES`, JSON objects
    without repeated keys (:func:`nest.inputs.files.read_text`)."""
    file = Path(path)
    text = read_text(path, "profile")
    if file.suffix.lower() == ".csv":
        return _from_csv(text, file.stem)
    return profile_from_dict(parse_json(text, "profile", path), file.stem)
