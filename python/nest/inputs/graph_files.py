"""Network graph files: node-link JSON, GraphML and YAML edge lists -> validated graphs."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx

from ..errors import SpecError, short_repr
from ..network.routing import EDGE_KEYS, NODE_KEYS, validate


def load_graph(path) -> nx.Graph:
    """A topology from node-link JSON (``.json``), GraphML (``.graphml``) or a YAML edge
    list (``.yaml``/``.yml``: ``nodes: [{id, kind, index?, host?}]``, ``links: [{a, b,
    bandwidth_GBps, latency_us, reverse_bandwidth_GBps?, cost?}]``, optional ``name`` and
    ``device``), validated (:func:`validate`)."""
    path = Path(path)
    suffix = path.suffix.lower()
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError(f"topology = {str(path)!r}: {exc.strerror}") from None
    if suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecError(f"topology = {str(path)!r}: not JSON: {exc.msg}") from None
        if not isinstance(data, dict):
            raise SpecError(f"topology = {str(path)!r}: must hold a node-link JSON object")
        _check_records(data.get("nodes", []), "nodes", "id")
        _check_unique([n.get("id") for n in data.get("nodes", [])], "nodes.id")
        edges_key = "links" if "links" in data else "edges"
        try:
            graph = nx.node_link_graph(data, edges=edges_key)
        except (KeyError, TypeError, ValueError, nx.NetworkXError) as exc:
            raise SpecError(f"topology = {str(path)!r}: not node-link JSON: {type(exc).__name__} {exc}") from None
    elif suffix == ".graphml":
        from xml.etree.ElementTree import ParseError

        try:
            ids = [el.get("id") for el in _graphml_nodes(text)]
        except ParseError as exc:
            raise SpecError(f"topology = {str(path)!r}: not GraphML: {exc}") from None
        _check_unique(ids, "node id")
        try:
            graph = nx.parse_graphml(text)
        except Exception as exc:  # noqa: BLE001 - networkx raises several types
            raise SpecError(f"topology = {str(path)!r}: not GraphML: {str(exc).splitlines()[0]}") from None
    elif suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise SpecError(f"topology = {str(path)!r}: not YAML: {str(exc).splitlines()[0]}") from None
        if not isinstance(data, dict):
            raise SpecError(f"topology = {str(path)!r}: must hold a mapping with nodes and links")
        graph = _from_edge_list(data)
    else:
        raise SpecError(f"topology = {str(path)!r}: unknown format (use .json, .graphml or .yaml)")
    validate(graph)
    return graph


def _graphml_nodes(text: str):
    import xml.etree.ElementTree as ET

    root = ET.fromstring(text)
    return [el for el in root.iter() if el.tag.endswith("}node") or el.tag == "node"]


def _check_records(records, what: str, key: str | None = None) -> None:
    """``records`` must be a list of mappings, each with ``key`` when one is given."""
    if not isinstance(records, list):
        raise SpecError(f"{what} = {short_repr(records)}: must be a list")
    for i, record in enumerate(records):
        if not isinstance(record, dict):
            raise SpecError(f"{what}[{i}] = {short_repr(record)}: must be a mapping")
        if key is not None and key not in record:
            raise SpecError(f"{what}[{i}].{key}: missing")


def _check_unique(ids, what: str) -> None:
    seen = set()
    for i in ids:
        if i in seen:
            raise SpecError(f"{what} = {i!r}: duplicate id")
        seen.add(i)


def _from_edge_list(data: dict) -> nx.Graph:
    unknown = set(data) - {"nodes", "links", "name", "device"}
    if unknown:
        raise SpecError(f"topology key = {sorted(unknown)[0]!r}: unknown (expected nodes, links, name, device)")
    nodes = data.get("nodes") or []
    _check_records(nodes, "nodes", "id")
    _check_unique([n.get("id") for n in nodes], "nodes.id")
    links = data.get("links") or []
    _check_records(links, "links")
    directed = any("reverse_bandwidth_GBps" in e or "reverse_bandwidth" in e for e in links)
    graph = nx.DiGraph() if directed else nx.Graph()
    graph.graph.update({k: data[k] for k in ("name", "device") if k in data})
    for n in nodes:
        extra = set(n) - NODE_KEYS - {"id"}
        if extra:
            raise SpecError(f"nodes[{n.get('id')!r}].{sorted(extra)[0]} = "
                            f"{n[sorted(extra)[0]]!r}: unknown key")
        graph.add_node(n["id"], **{k: v for k, v in n.items() if k != "id"})
    for i, e in enumerate(links):
        extra = set(e) - EDGE_KEYS - {"a", "b", "reverse_bandwidth", "reverse_bandwidth_GBps"}
        if extra:
            raise SpecError(f"links[{i}].{sorted(extra)[0]} = {e[sorted(extra)[0]]!r}: unknown key")
        if "a" not in e or "b" not in e:
            raise SpecError(f"links[{i}] = {e!r}: needs 'a' and 'b'")
        for end in (e["a"], e["b"]):
            if end not in graph:
                raise SpecError(f"links[{i}] endpoint = {end!r}: not a declared node")
        attrs = {k: v for k, v in e.items() if k in EDGE_KEYS}
        graph.add_edge(e["a"], e["b"], **attrs)
        if directed:
            back = dict(attrs)
            if "reverse_bandwidth_GBps" in e:
                back.pop("bandwidth", None)
                back["bandwidth_GBps"] = e["reverse_bandwidth_GBps"]
            elif "reverse_bandwidth" in e:
                back.pop("bandwidth_GBps", None)
                back["bandwidth"] = e["reverse_bandwidth"]
            graph.add_edge(e["b"], e["a"], **back)
    return graph
