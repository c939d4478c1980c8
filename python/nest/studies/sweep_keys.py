"""How ``nest sweep`` keys its scenarios: by the content of their resolved inputs.

A scenario's ``id`` hashes its parameters with the model and cluster replaced by
:func:`spec_digest` of the loaded specs (a rerun from another directory, or with a
model file only re-formatted, finds its rows; an edited file gives new ids), and its
``slot`` hashes them with the model and cluster named by :func:`identity`: a journal
row of a scenario's slot but of another id was computed from inputs edited since
(:func:`superseded_rows`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os

from ..inputs.files import is_path


def scenario_id(params: dict) -> str:
    """Stable hash of a scenario's parameters (independent of key order and grid order);
    a scenario's ``id`` hashes them with the model and cluster replaced by their
    :func:`spec_digest`."""
    return hashlib.sha256(_text(params).encode()).hexdigest()[:16]


def identity(name: str) -> str:
    """How a scenario's slot names a model or cluster: a preset by name, a file by its
    real path (the same from any directory)."""
    return os.path.realpath(name) if is_path(name) else name


def _canonical(value):
    """JSON-able canonical form of a loaded spec: dataclass fields (``source``, a note of
    provenance, left out), floats exact, mappings and graphs sorted (a networkx graph as
    its attributes, nodes and edges with their data)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _canonical(getattr(value, f.name)) for f in dataclasses.fields(value)
                if f.name != "source"}
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):
        return sorted(([_canonical(k), _canonical(v)] for k, v in value.items()), key=_text)
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_canonical(v) for v in value), key=_text)
    if all(hasattr(value, a) for a in ("nodes", "edges", "graph", "is_directed")):
        directed = value.is_directed()
        edges = []
        for u, v, data in value.edges(data=True):
            ends = [_canonical(u), _canonical(v)]
            edges.append([ends if directed else sorted(ends, key=_text), _canonical(data)])
        return {"graph": _canonical(dict(value.graph)), "directed": directed,
                "nodes": sorted(([_canonical(n), _canonical(d)] for n, d in value.nodes(data=True)), key=_text),
                "edges": sorted(edges, key=_text)}
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        return _canonical(value.tolist())
    return repr(value)


def _text(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def spec_digest(spec) -> str:
    """Hash of a loaded model or cluster spec's content (not of the file or name it came from)."""
    return hashlib.sha256(_text(_canonical(spec)).encode()).hexdigest()[:16]


def superseded_rows(existing: dict[str, dict], scenarios: list, journal, note):
    """``(superseded, rerun)``: ids of the journal's rows superseded by an edited input (a
    scenario of the grid has the row's slot but another id), and of the scenarios that
    rerun for it; one note per changed model or cluster."""
    current = {s.id for s in scenarios}
    by_slot = {s.slot: s for s in scenarios}
    superseded, rerun, changed = [], set(), {}
    for row in existing.values():
        slot = row.get("slot")
        scenario = by_slot.get(slot) if isinstance(slot, str) else None
        if scenario is None or row["id"] in current:
            continue
        superseded.append(row["id"])
        if scenario.id in existing:  # its new content has a row already
            continue
        rerun.add(scenario.id)
        inputs = row.get("inputs") if isinstance(row.get("inputs"), dict) else {}
        for kind in ("model", "cluster"):
            if inputs.get(kind) != scenario.inputs[kind]:
                changed.setdefault((kind, scenario.params[kind]), set()).add(scenario.id)
    for (kind, name), ids in changed.items():
        count = f"{len(ids)} scenario{'s' if len(ids) != 1 else ''}"
        note(f"{kind} {name} changed since {journal} was written: its {count} rerun, old rows replaced")
    return superseded, rerun
