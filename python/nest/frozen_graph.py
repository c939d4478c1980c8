"""A cluster's graph as a read-only copy: what :class:`nest.specs.ClusterSpec` holds, so that
the prices cached on it cannot go stale (networkx only when there is a graph)."""

from __future__ import annotations

import threading
import weakref

from .errors import SpecError

_FROZEN = ("Frozen graph can't be modified: a ClusterSpec holds a read-only copy of its graph "
           "(its prices are cached); change a copy (cluster.graph.copy()) or your own graph and "
           "build a new cluster from it (nest.network.graph.graph_cluster)")


def _refuse_structure(*args, **kwargs):
    import networkx as nx

    raise nx.NetworkXError(_FROZEN)


class ReadOnlyAttrs(dict):
    """The attribute dict of a read-only graph's node, link or graph: changes raise
    TypeError; ``dict(attrs)`` and ``attrs.copy()`` are plain copies."""

    def _refuse(self, *args, **kwargs):
        raise TypeError(_FROZEN)

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self):  # pickle and deepcopy rebuild it whole, not item by item
        return ReadOnlyAttrs, (dict(self),)


_GRAPH_MUTATORS = ("add_node", "add_nodes_from", "remove_node", "remove_nodes_from", "add_edge",
                   "add_edges_from", "add_weighted_edges_from", "remove_edge", "remove_edges_from",
                   "clear", "clear_edges", "update")
_READ_ONLY = "_nest_read_only"  # marks the copies read_only_graph makes (pickle keeps it)


def is_read_only_graph(graph) -> bool:
    """Whether ``graph`` is a copy made by :func:`read_only_graph` (or a pickle of one)."""
    return getattr(graph, "__dict__", {}).get(_READ_ONLY) is True


def _read_only_copy(graph, nx):
    """A copy of ``graph`` (same class, nodes, links, orders and attribute values) with
    :class:`ReadOnlyAttrs` and a frozen structure, built in one pass over networkx's
    adjacency dicts (as :meth:`networkx.Graph.copy` reads them), one dict per link shared
    by both directions as networkx shares it."""
    out = graph.__class__()
    out.graph = ReadOnlyAttrs(graph.graph)
    node = {n: ReadOnlyAttrs(d) for n, d in graph._node.items()}
    if graph.is_directed():
        succ = {u: {v: ReadOnlyAttrs(d) for v, d in nbrs.items()} for u, nbrs in graph._adj.items()}
        pred = {v: {u: succ[u][v] for u in nbrs} for v, nbrs in graph._pred.items()}
        out._node, out._adj, out._pred = node, succ, pred  # a DiGraph's _adj is its _succ
    else:
        adj: dict = {}
        for u, nbrs in graph._adj.items():
            own = adj[u] = {}
            for v, d in nbrs.items():
                other = adj.get(v)  # filled already when v came first: the link's dict
                own[v] = other[u] if other is not None and u in other else ReadOnlyAttrs(d)
        out._node, out._adj = node, adj
    nx.freeze(out)
    for name in _GRAPH_MUTATORS:
        setattr(out, name, _refuse_structure)
    setattr(out, _READ_ONLY, True)
    return out


def _same_contents(graph, copy) -> bool:
    """Whether ``copy`` still equals ``graph``: class, graph attributes, nodes in order
    with their attributes, links with theirs."""
    return (type(graph) is type(copy) and graph.graph == copy.graph
            and len(graph._node) == len(copy._node) and list(graph._node) == list(copy._node)
            and graph._node == copy._node and graph._adj == copy._adj)


# a graph the caller may change -> the read-only copy of its contents when last asked;
# weak keys: an entry dies with its graph (a new graph never inherits a dead one's copy)
_COPIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_COPIES_LOCK = threading.Lock()


def read_only_graph(graph):
    """A read-only copy of the networkx graph ``graph``, which is left as it is: the same
    class, nodes, links, orders and attribute values, its structure frozen
    (:func:`networkx.freeze`: ``add_edge`` and the other mutators raise
    ``networkx.NetworkXError``) and its graph, node and link attribute dicts
    :class:`ReadOnlyAttrs`. A read-only graph is returned as is. The copy is kept while
    ``graph``'s contents stay the same (repeated calls share it and the prices cached on
    it); after a change, the next call copies the new contents."""
    if is_read_only_graph(graph):
        return graph
    import networkx as nx

    if not isinstance(graph, nx.Graph):
        raise SpecError(f"topology = {type(graph).__name__}: must be a networkx graph")
    if graph.is_multigraph():
        raise SpecError("topology = multigraph: merge parallel links into one (add bandwidths)")
    with _COPIES_LOCK:
        copy = _COPIES.get(graph)
        if copy is None or not _same_contents(graph, copy):
            copy = _COPIES[graph] = _read_only_copy(graph, nx)
    return copy
