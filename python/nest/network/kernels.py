"""The door of :mod:`nest.network` to the compiled core ``nest._core``: the routing kernels.

Two engines compute exactly the same floats (every sum in the same order):

* ``"cpp"`` (default): the loops of ``cpp/routing.cpp``, one pass over the entries
  instead of numpy's sorts, gathers and scatters;
* ``"numpy"``: the reference, :mod:`nest.network.paths`' own numpy code (also what
  routes whose links move by relabeling use for their loads).

``tests/test_kernels.py`` checks that both give identical DAGs and loads.
"""

from __future__ import annotations

import os

import numpy as np

ENGINES = ("cpp", "numpy")
"""Names accepted by :class:`nest.network.paths.Routes`."""

DEFAULT_ENGINE = "cpp"

_loaded = None  # nest._core once load_core() has loaded it


def load_core(what: str, fallback: str):
    """The compiled module ``nest._core``, loaded once for both its users (this module's
    routing kernels and :mod:`nest.dp.engine`'s stage DP and schedule), with a clear
    error naming ``what`` needed it and the ``fallback`` engine if the package was not
    built. Its OpenMP threads wait passively (``OMP_WAIT_POLICY=PASSIVE`` unless the user
    set a policy): libgomp reads the variable when the core loads it, and spinning threads
    at a barrier take cores from the thread they wait for, and from other processes,
    whenever the machine is busy."""
    global _loaded
    if _loaded is None:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        try:
            from .. import _core
        except ImportError as error:  # pragma: no cover - only without a build
            raise ImportError(f"nest._core ({what}) is not available; install the package with `pip install .` "
                              f"or use {fallback}") from error
        _loaded = _core
    return _loaded


def _core():
    """The compiled module, for the routing kernels (:func:`load_core`)."""
    return load_core("the compiled routing kernels", "engine='numpy'")


def check_engine(engine: str) -> str:
    """``engine`` if it is one of :data:`ENGINES` (ValueError otherwise)."""
    if engine not in ENGINES:
        raise ValueError(f"unknown routing engine {engine!r}; expected one of {', '.join(ENGINES)}")
    return engine


def _links_of(comp) -> tuple:
    """The link arrays of ``comp`` in the dtypes the kernels take (made once per graph)."""
    arrays = comp.cache.get("kernel-links")
    if arrays is None:
        as_f64 = lambda a: np.ascontiguousarray(a, dtype=np.float64)  # noqa: E731
        arrays = (np.ascontiguousarray(comp.eu, dtype=np.int64), np.ascontiguousarray(comp.ev, dtype=np.int64),
                  as_f64(comp.ecost), as_f64(comp.elat), as_f64(comp.mul_tail), as_f64(comp.mul_head))
        comp.cache["kernel-links"] = arrays
    return arrays


def shortest_path_dags(comp, dist: np.ndarray, row: np.ndarray, s: np.ndarray, t: np.ndarray,
                       in_ptr: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`nest.network.paths.compute_dags` compiled: ``(counts, links, fracs, lats)`` of
    the router pairs ``s[i] -> t[i]`` whose sources' distances are ``dist[row[i]]``."""
    eu, ev, ecost, elat, mul_tail, mul_head = _links_of(comp)
    i64 = lambda a: np.ascontiguousarray(a, dtype=np.int64)  # noqa: E731
    return _core().shortest_path_dags(np.ascontiguousarray(dist, dtype=np.float32), i64(row), i64(s), i64(t),
                                      i64(in_ptr), eu, ev, ecost, elat, mul_tail, mul_head)


def label_ratios(ptr: np.ndarray, edge: np.ndarray, frac: np.ndarray, ids: np.ndarray, amount: np.ndarray,
                 label: np.ndarray, nlabels: int, capacity: np.ndarray, translation=None) -> np.ndarray:
    """Per label, the largest ``load / capacity`` of a link: flow ``f`` (labels ascending)
    adds ``frac * amount[f]`` to every entry of its stored DAG ``ids[f]`` (``ptr``, ``edge``,
    ``frac``: :class:`~nest.network.paths.DagStore`), entry after entry in flow order.
    ``translation``: ``(cell, shift, cell_link)`` of a torus
    (:class:`~nest.network.symmetry.TranslationGrid`): entry ``e`` of flow ``f`` loads link
    ``cell_link[cell[e] + shift[f]]``, its canonical DAG's link moved onto the flow's."""
    i64 = lambda a: np.ascontiguousarray(a, dtype=np.int64)  # noqa: E731
    extra = ()
    if translation is not None:
        cell, shift, cell_link = translation
        extra = (np.ascontiguousarray(cell, dtype=np.int32), i64(shift), np.ascontiguousarray(cell_link, dtype=np.int32))
    return _core().label_ratios(i64(ptr), np.ascontiguousarray(edge, dtype=np.int32),
                                np.ascontiguousarray(frac, dtype=np.float64), i64(ids),
                                np.ascontiguousarray(amount, dtype=np.float64), i64(label), int(nlabels),
                                np.ascontiguousarray(capacity, dtype=np.float64), *extra)


_MODES = {"all": 0, "none": 1, "some": 2}


def _access_of(comp) -> tuple:
    """The access-link arrays of ``comp`` in the dtypes :func:`route_pairs` takes (made once
    per graph)."""
    arrays = comp.cache.get("kernel-access")
    if arrays is None:
        as_f64 = lambda a: np.ascontiguousarray(a, dtype=np.float64)  # noqa: E731
        arrays = (np.ascontiguousarray(comp.leaf, dtype=np.uint8), as_f64(comp.up_cap), as_f64(comp.down_cap),
                  as_f64(comp.up_lat), as_f64(comp.down_lat), np.ascontiguousarray(comp.router_of, dtype=np.int64))
        comp.cache["kernel-access"] = arrays
    return arrays


def route_pairs(comp, src: np.ndarray, dst: np.ndarray, amount: np.ndarray, label: np.ndarray | None,
                nlabels: int, leaves: str) -> tuple:
    """The first half of :func:`nest.network.routing.route` compiled, the same floats:
    ``(ratio, access_lat, inverse, s, t, amounts, pair_label)``: per label the largest load
    over capacity of an access link; per flow its access links' latency and its router
    pair (``-1``: its ends share a router, ``-2``: it moves nothing); per distinct (label,
    source router, target router), ascending, the routers and the sum of its flows'
    amounts (in flow order). ``leaves``: ``"all"``, ``"none"`` or ``"some"`` devices hang
    off a switch."""
    i64 = lambda a: np.ascontiguousarray(a, dtype=np.int64)  # noqa: E731
    return _core().route_pairs(i64(src), i64(dst), np.ascontiguousarray(amount, dtype=np.float64),
                               None if label is None else i64(label), int(nlabels), *_access_of(comp),
                               len(comp.routers), _MODES[leaves])


def route_latency(label: np.ndarray | None, access_lat: np.ndarray, inverse: np.ndarray, pair_lat: np.ndarray,
                  nlabels: int) -> np.ndarray:
    """Per label, the longest latency of its flows (:func:`route_pairs`' ``access_lat`` plus
    the pair's ``pair_lat`` where ``inverse >= 0``; 0 when none moves)."""
    i64 = lambda a: np.ascontiguousarray(a, dtype=np.int64)  # noqa: E731
    return _core().route_latency(None if label is None else i64(label), access_lat, i64(inverse),
                                 np.ascontiguousarray(pair_lat, dtype=np.float64), int(nlabels))


def dijkstra(matrix, indices) -> np.ndarray:
    """``scipy.sparse.csgraph.dijkstra(matrix, indices=indices)`` compiled (the same floats:
    a distance is the unique least fixed point of ``d(v) = min d(u) + w``, each sum rounded
    once, whatever order the vertices settle in), ``[len(indices), n]``, its rows computed
    in parallel. ``matrix``: a ``scipy.sparse.csr_matrix`` or
    :class:`~nest.network.compiled.CsrMatrix` of positive finite weights (each stored entry
    a link, as scipy reads it; other weights go to scipy)."""
    sources = np.ascontiguousarray(np.atleast_1d(indices), dtype=np.int64)
    if not (np.isfinite(matrix.data) & (matrix.data > 0)).all():  # what the kernel's proof needs
        from scipy.sparse.csgraph import dijkstra as scipy_dijkstra

        return np.atleast_2d(scipy_dijkstra(getattr(matrix, "to_scipy", lambda: matrix)(), indices=sources))
    i32 = lambda a: np.ascontiguousarray(a, dtype=np.int32)  # noqa: E731
    return _core().dijkstra_rows(i32(matrix.indptr), i32(matrix.indices),
                                 np.ascontiguousarray(matrix.data, dtype=np.float64), sources)


def nn_chain_codes(rows: np.ndarray) -> np.ndarray:
    """The merges ``[(x, y, code)]`` of :func:`nest.network.linkage.nn_chain_complete`'s chain
    on the ``n x n`` ``uint8`` codes ``rows`` (overwritten), in the order it makes them."""
    if rows.dtype != np.uint8 or not rows.flags.c_contiguous or not rows.flags.writeable:
        raise ValueError("rows: must be a writeable C-contiguous uint8 array")
    return _core().nn_chain_codes(rows)
