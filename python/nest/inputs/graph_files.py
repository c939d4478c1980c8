"""Network graph files: node-link JSON, GraphML and YAML edge lists -> validated graphs."""

from __future__ import annotations

from pathlib import Path

import networkx as nx

from ..errors import SpecError, short_repr
from ..network.routing import EDGE_KEYS, NODE_KEYS, validate
from .files import MAX_GRAPH_BYTES, parse_json, parse_yaml, read_text

KINDS = ("device", "switch")
"""The node kinds of a graph file, spelled exactly so (a node without ``kind`` is a switch).
Routing tells devices by ``kind == "device"``; any other spelling (``Device``, ``gpu``)
would silently become a switch, so a file may give only these two."""


def load_graph(path) -> nx.Graph:
    """A topology from node-link JSON (``.json``), GraphML (``.graphml``) or a YAML edge
    list (``.yaml``/``.yml``: ``nodes: [{id, kind, index?, host?}]``, ``links: [{a, b,
    bandwidth_GBps, latency_us, reverse_bandwidth_GBps?, cost?}]``, optional ``name`` and
    ``device``), validated (:func:`validate`).

    The file is read by :func:`nest.inputs.files.read_text` (a regular UTF-8 file of at
    most :data:`~nest.inputs.files.MAX_GRAPH_BYTES`); JSON and YAML mappings must not
    repeat a key. A node's ``kind`` is one of :data:`KINDS`, exactly (or absent: a
    switch); a link is given once (a YAML link stands for both directions, so ``a: x, b:
    y`` and ``a: y, b: x`` repeat each other; in node-link JSON and GraphML, the two
    directions of a directed graph are two links)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".json", ".graphml", ".yaml", ".yml"):
        raise SpecError(f"topology = {str(path)!r}: unknown format (use .json, .graphml or .yaml)")
    text = read_text(path, "topology", MAX_GRAPH_BYTES)
    if suffix == ".json":
        data = parse_json(text, "topology", path)
        if not isinstance(data, dict):
            raise SpecError(f"topology = {str(path)!r}: must hold a node-link JSON object")
        _check_records(data.get("nodes", []), "nodes", "id")
        _check_unique([n.get("id") for n in data.get("nodes", [])], "nodes.id")
        edges_key = "links" if "links" in data else "edges"
        if not data.get("multigraph"):  # a multigraph is refused as one (validate)
            _check_links(data.get(edges_key), "source", "target", bool(data.get("directed")), edges_key)
        try:
            graph = nx.node_link_graph(data, edges=edges_key)
        except (KeyError, TypeError, ValueError, nx.NetworkXError) as exc:
            raise SpecError(f"topology = {str(path)!r}: not node-link JSON: {type(exc).__name__} {exc}") from None
    elif suffix == ".graphml":
        from xml.etree.ElementTree import ParseError

        try:
            root = _graphml_root(text)
        except ParseError as exc:
            raise SpecError(f"topology = {str(path)!r}: not GraphML: {exc}") from None
        _check_unique([el.get("id") for el in _graphml_elements(root, "node")], "node id")
        _check_graphml_edges(root)
        del root
        try:
            graph = nx.parse_graphml(text)
        except Exception as exc:  # noqa: BLE001 - networkx raises several types
            raise SpecError(f"topology = {str(path)!r}: not GraphML: {str(exc).splitlines()[0]}") from None
    else:
        data = parse_yaml(text, "topology", path) or {}
        if not isinstance(data, dict):
            raise SpecError(f"topology = {str(path)!r}: must hold a mapping with nodes and links")
        graph = _from_edge_list(data)
    _check_kinds(graph)
    validate(graph)
    return graph


def _check_kinds(graph: nx.Graph) -> None:
    for node, attrs in graph.nodes(data=True):
        kind = attrs.get("kind")
        if kind is not None and kind not in KINDS:
            raise SpecError(f"node {short_repr(node)}.kind = {short_repr(kind)}: unknown kind (kinds: "
                            f"{', '.join(KINDS)}, exactly so; a node without kind is a switch)")


def _link_key(a, b, directed: bool):
    return (a, b) if directed else frozenset((a, b))


def _check_links(links, a: str, b: str, directed: bool, what: str) -> None:
    """No link of ``links`` (mappings with endpoints ``a`` and ``b``) is given twice; malformed
    entries are left to the parser that reports them."""
    if not isinstance(links, list):
        return
    seen: dict = {}
    for i, link in enumerate(links):
        if not isinstance(link, dict) or a not in link or b not in link:
            continue
        try:
            key = _link_key(link[a], link[b], directed)
            first = seen.setdefault(key, i)
        except TypeError:  # unhashable endpoints
            continue
        if first != i:
            raise SpecError(f"{what}[{i}] = {short_repr(link[a])} -- {short_repr(link[b])}: repeated link "
                            f"(also {what}[{first}]); give each link once")


def _graphml_root(text: str):
    import xml.etree.ElementTree as ET

    return ET.fromstring(text)


def _graphml_elements(root, tag: str):
    return [el for el in root.iter() if el.tag.endswith("}" + tag) or el.tag == tag]


def _check_graphml_edges(root) -> None:
    """No GraphML edge is given twice (networkx would make a multigraph of it); edges are
    directed when the graph's ``edgedefault`` is ``directed``, as networkx reads them."""
    for graph in _graphml_elements(root, "graph"):
        directed = graph.get("edgedefault") == "directed"
        seen: dict = {}
        for i, edge in enumerate(el for el in graph if el.tag.endswith("}edge") or el.tag == "edge"):
            first = seen.setdefault(_link_key(edge.get("source"), edge.get("target"), directed), i)
            if first != i:
                raise SpecError(f"edge {short_repr(edge.get('source'))} -- {short_repr(edge.get('target'))}: "
                                f"repeated link (edges #{first} and #{i} of graph {short_repr(graph.get('id'))}); "
                                "give each link once")


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
        try:
            duplicate = i in seen
        except TypeError:  # a list or mapping as an id
            raise SpecError(f"{what} = {short_repr(i)}: must be a string or a number") from None
        if duplicate:
            raise SpecError(f"{what} = {short_repr(i)}: duplicate id")
        seen.add(i)


def _from_edge_list(data: dict) -> nx.Graph:
    unknown = set(data) - {"nodes", "links", "name", "device"}
    if unknown:
        raise SpecError(f"topology key = {short_repr(sorted(unknown)[0])}: unknown "
                        "(expected nodes, links, name, device)")
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
            raise SpecError(f"nodes[{short_repr(n.get('id'))}].{sorted(extra)[0]} = "
                            f"{short_repr(n[sorted(extra)[0]])}: unknown key")
        graph.add_node(n["id"], **{k: v for k, v in n.items() if k != "id"})
    seen: dict = {}
    for i, e in enumerate(links):
        extra = set(e) - EDGE_KEYS - {"a", "b", "reverse_bandwidth", "reverse_bandwidth_GBps"}
        if extra:
            raise SpecError(f"links[{i}].{sorted(extra)[0]} = {short_repr(e[sorted(extra)[0]])}: unknown key")
        if "a" not in e or "b" not in e:
            raise SpecError(f"links[{i}] = {short_repr(e)}: needs 'a' and 'b'")
        for end in (e["a"], e["b"]):
            if end not in graph:
                raise SpecError(f"links[{i}] endpoint = {short_repr(end)}: not a declared node")
        first = seen.setdefault(frozenset((e["a"], e["b"])), i)  # a link stands for both directions
        if first != i:
            raise SpecError(f"links[{i}] = {short_repr(e['a'])} -- {short_repr(e['b'])}: repeated link "
                            f"(also links[{first}]); give each link once")
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
