"""Shortest-path DAGs of router pairs with their ECMP shares, computed on demand and kept,
and the link loads of a set of concurrent flows (:func:`routes_of`, used by
:func:`nest.network.routing.route`).

The DAG of a pair ``s -> t`` is the set of links ``u -> v`` with ``d(s, u) + cost +
d(v, t) = d(s, t)``. It is found from ``t`` backwards: a link into a DAG router ``v`` is in
the DAG exactly when ``d(s, u) + cost = d(s, v)`` (a shortest path to ``v`` continues to
``t``), so only the distances from ``s`` (one Dijkstra row per source) and the links into
the DAG's routers are read, never a row per destination or a pass over every router.
Each DAG link carries ``sigma(s, u) tau(v) / sigma(s, t)`` of the pair's traffic under an
even split over all min-cost paths (``sigma``: path counts from ``s``, ``tau``: to ``t``,
both inside the DAG, as in Brandes' betweenness algorithm), times the twin multiplicities
of its ends; the pair's latency is the longest of its shortest paths.

With a generator's symmetry (:mod:`nest.network.symmetry`) only canonical pairs ``(s0,
t')`` are routed and kept; a flow's links are its canonical DAG's moved by the
automorphism of its source (relabelings: rail-optimized clusters, hierarchies;
translations: tori, through an unwrapped grid), its shares and latency the canonical
ones.

The DAG searches and the load sums run in compiled loops by default
(:mod:`nest.network.kernels`, engine ``"cpp"``); the numpy code here is the ``"numpy"``
engine, the reference they match float for float.
"""

from __future__ import annotations

import numpy as np

from . import kernels
from .compiled import CompiledGraph
from .kernels import DEFAULT_ENGINE
from .symmetry import RouterSymmetry, TranslationGrid, router_symmetry

_ENTRIES = 1 << 21
"""DAG links (about) per batch of pairs routed at once (bounds the temporary arrays)."""

_TABLE_CODES = 1 << 26
"""Pair keys (sources routed from x routers) up to which a :class:`DagStore` finds pairs in
a table (4 bytes per key, of address space: only the pages of stored keys are touched;
16384 dragonfly devices: 4096 x 4096 keys, 64 MiB; a torus routes from one source) rather
than in sorted runs."""

_ROW_ELEMENTS = 1 << 22
"""Distance-row elements per Dijkstra call."""


class _Growing:
    """An append-only numpy array (capacity doubling)."""

    def __init__(self, dtype):
        self.data = np.zeros(1024, dtype=dtype)
        self.size = 0

    def extend(self, values: np.ndarray) -> None:
        need = self.size + len(values)
        if need > len(self.data):
            grown = np.zeros(max(need, 2 * len(self.data)), dtype=self.data.dtype)
            grown[:self.size] = self.data[:self.size]
            self.data = grown
        self.data[self.size:need] = values
        self.size = need

    @property
    def view(self) -> np.ndarray:
        return self.data[:self.size]


def _ranges(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The concatenated ranges ``starts[i] .. starts[i] + lens[i]``."""
    offsets = np.cumsum(lens) - lens
    return np.repeat(starts - offsets, lens) + np.arange(int(lens.sum()), dtype=np.int64)


class DagStore:
    """DAGs of router pairs keyed by an integer code (:class:`Routes`: the source's slot
    times ``nr`` plus the target): per pair its links and their shares
    (``ptr`` delimits a pair's entries) and its latency, appended as computed. The keys are
    kept in sorted runs, each at most half as long as the one before (merged like the
    digits of a binary counter): appending costs ``O(log n)`` per key, not a copy of every
    key stored, and a lookup searches ``O(log n)`` runs. With ``codes`` (the number of
    possible keys) at most :data:`_TABLE_CODES`, a table from key to id replaces the runs:
    one gather per lookup (zero-filled on demand, so only the pages of keys stored take
    memory)."""

    def __init__(self, codes: int | None = None):
        self.runs: list[tuple[np.ndarray, np.ndarray]] = []  # (sorted pair codes, their ids)
        # id + 1 per key (0: not stored); np.zeros maps untouched pages lazily
        self.table = np.zeros(codes, dtype=np.int32) if codes is not None and codes <= _TABLE_CODES else None
        self.ptr = _Growing(np.int64)
        self.ptr.extend(np.zeros(1, dtype=np.int64))
        self.edge = _Growing(np.int32)
        self.frac = _Growing(np.float64)
        self.lat = _Growing(np.float64)

    @property
    def size(self) -> int:
        """Pairs stored (the next pair's id)."""
        return self.lat.size

    def find(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, found)`` of pair codes (ids meaningless where not found)."""
        if self.table is not None:
            ids = self.table[codes].astype(np.int64) - 1
            return ids, ids >= 0
        ids = np.zeros(len(codes), dtype=np.int64)
        found = np.zeros(len(codes), dtype=bool)
        for keys, key_ids in self.runs:
            pos = np.minimum(np.searchsorted(keys, codes), len(keys) - 1)
            hit = keys[pos] == codes
            ids[hit] = key_ids[pos[hit]]
            found |= hit
        return ids, found

    def append(self, codes: np.ndarray, counts: np.ndarray, edge: np.ndarray, frac: np.ndarray,
               lat: np.ndarray) -> None:
        """New pairs ``codes`` (distinct, not stored yet) with ``counts[i]`` entries each; they
        get the ids ``size, size + 1, ...`` in order."""
        first = self.size
        self.ptr.extend(self.ptr.view[-1] + np.cumsum(counts))
        self.edge.extend(edge.astype(np.int32))
        self.frac.extend(frac)
        self.lat.extend(lat)
        if self.table is not None:
            self.table[codes] = np.arange(first + 1, first + len(codes) + 1, dtype=np.int32)
            return
        order = np.argsort(codes, kind="stable")
        self.runs.append((codes[order], np.arange(first, first + len(codes), dtype=np.int64)[order]))
        while len(self.runs) > 1 and 2 * len(self.runs[-1][0]) >= len(self.runs[-2][0]):
            (k2, i2), (k1, i1) = self.runs.pop(), self.runs.pop()
            keys, ids = np.concatenate((k1, k2)), np.concatenate((i1, i2))
            order = np.argsort(keys, kind="stable")
            self.runs.append((keys[order], ids[order]))

    def entries(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(lens, index)``: positions of the entries of pairs ``ids``, pair after pair."""
        ptr = self.ptr.view
        starts = ptr[ids]
        lens = ptr[ids + 1] - starts
        return lens, _ranges(starts, lens)

    def gather(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(lens, links, fracs)``: the entries of pairs ``ids``, pair after pair."""
        lens, idx = self.entries(ids)
        return lens, self.edge.view[idx], self.frac.view[idx]


class DistanceRows:
    """Min-cost distances from source routers (rows computed on demand, kept in a buffer
    that doubles when full). Routing costs are integers: float32 holds them exactly (up to
    2**24) and halves the memory."""

    def __init__(self, comp: CompiledGraph):
        self.comp = comp
        self.matrix = comp.cost_matrix
        self.index: dict[int, int] = {}
        self.row_of = np.full(comp.cost_matrix.shape[0], -1, dtype=np.int64)  # self.index as a table
        self.buffer = np.zeros((16, comp.cost_matrix.shape[0]), dtype=np.float32)
        self._tight: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._tight_size = 0

    @property
    def dist(self) -> np.ndarray:
        """The rows computed so far (row ``i``: the ``i``-th source asked for)."""
        return self.buffer[:len(self.index)]

    def rows(self, sources: np.ndarray) -> np.ndarray:
        """Row of each source (computed if new)."""
        missing = sources[self.row_of[sources] < 0]
        _, first = np.unique(missing, return_index=True)
        new = missing[np.sort(first)].tolist()  # in the order they first come
        step = max(1, _ROW_ELEMENTS // self.buffer.shape[1])
        for at in range(0, len(new), step):
            part = new[at:at + step]
            dist = kernels.dijkstra(self.matrix, np.array(part, dtype=np.int64))
            used = len(self.index)
            if used + len(part) > len(self.buffer):
                grown = np.zeros((max(used + len(part), 2 * len(self.buffer)), self.buffer.shape[1]),
                                 dtype=np.float32)
                grown[:used] = self.buffer[:used]
                self.buffer = grown
            self.buffer[used:used + len(part)] = dist
            for s in part:
                self.index[s] = len(self.index)
            self.row_of[part] = np.arange(used, used + len(part))
        return self.row_of[sources]

    def tight(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The links on a shortest path from each row's source (``d(u) + cost = d(v)``),
        by head: ``(ptr[len(rows), nr + 1], links)``, row ``i``'s links into ``v`` being
        ``links[ptr[i, v]:ptr[i, v + 1]]`` (kept per row, within a memory bound)."""
        comp = self.comp
        new = [r for r in rows.tolist() if r not in self._tight]
        if self._tight_size + len(new) * len(comp.eu) > _ROW_ELEMENTS * 4:
            self._tight, self._tight_size = {}, 0
            new = rows.tolist()
        step = max(1, _ROW_ELEMENTS // max(1, len(comp.eu)))
        ecost = comp.ecost.astype(np.float32)
        heads = np.arange(len(self.buffer[0]) + 1)
        for at in range(0, len(new), step):
            part = np.array(new[at:at + step], dtype=np.int64)
            tail = self.buffer[part][:, comp.eu]
            on = (tail + ecost == self.buffer[part][:, comp.ev]) & np.isfinite(tail)
            for r, mask in zip(part.tolist(), on):
                links = np.flatnonzero(mask)  # ascending: links are sorted by head
                self._tight[r] = (np.searchsorted(comp.ev[links], heads), links)
                self._tight_size += len(comp.eu)
        parts = [self._tight[r] for r in rows.tolist()]
        offsets = np.cumsum([0] + [len(links) for _, links in parts[:-1]])
        ptr = np.stack([p + o for (p, _), o in zip(parts, offsets.tolist())])
        return ptr, np.concatenate([links for _, links in parts])


def _dag_links(comp: CompiledGraph, dist: np.ndarray, row: np.ndarray, t: np.ndarray, into
               ) -> tuple[np.ndarray, np.ndarray]:
    """``(pair, link)`` of every DAG link of the pairs ``row[i] -> t[i]`` (``row``: the
    source's distance row), found backwards from ``t`` level by level (distance from the
    source, descending), each router once per pair; ``into(p, v)``: the ranges of links
    into router ``v`` to try for pair ``p`` (all of them, or only the tight ones)."""
    nr = len(comp.routers)
    eu, ecost = comp.eu, comp.ecost.astype(np.float32)
    pending: dict[float, list] = {}

    def push(p, v, level):
        for value in np.unique(level).tolist():
            if value > 0:  # the source (level 0) has no links into it on a shortest path
                at = level == value
                pending.setdefault(value, []).append((p[at], v[at]))

    n = len(t)
    push(np.arange(n, dtype=np.int64), t, dist[row, t])
    found_p, found_link = [], []
    while pending:
        level = max(pending)
        parts = pending.pop(level)
        codes = np.unique(np.concatenate([p * nr + v for p, v in parts]))
        p, v = codes // nr, codes % nr
        starts, stops, links = into(p, v)
        lens = stops - starts
        link = links[_ranges(starts, lens)]
        p = np.repeat(p, lens)
        u = eu[link]
        du = dist[row[p], u]
        tight = du + ecost[link] == np.float32(level)
        p, link, u, du = p[tight], link[tight], u[tight], du[tight]
        found_p.append(p)
        found_link.append(link)
        push(p, u, du)
    return np.concatenate(found_p), np.concatenate(found_link)


def compute_dags(comp: CompiledGraph, rows: DistanceRows, s: np.ndarray, t: np.ndarray, in_ptr: np.ndarray,
                 engine: str = DEFAULT_ENGINE) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(counts, links, fracs, lats)`` of the router pairs ``s[i] -> t[i]`` (distinct,
    ``s != t``): each pair's DAG links (ascending) and shares, pair after pair, and its
    longest shortest-path latency (``engine``: :mod:`nest.network.kernels`, the same
    floats)."""
    nr, n = len(comp.routers), len(s)
    row = rows.rows(s)  # before reading .dist: it may grow
    dist = rows.dist
    if engine == "cpp":
        return kernels.shortest_path_dags(comp, dist, row, s, t, in_ptr)
    sources, slot = np.unique(row, return_inverse=True)
    if n >= 8 * len(sources) and len(sources) * len(comp.eu) <= _ROW_ELEMENTS:
        # many pairs per source: its tight links, found once, spare scanning every link
        # into a busy switch for every pair
        ptr, tight = rows.tight(sources)
        slot = slot.ravel()
        into = lambda p, v: (ptr[slot[p], v], ptr[slot[p], v + 1], tight)  # noqa: E731
    else:
        every = np.arange(len(comp.eu))
        into = lambda p, v: (in_ptr[v], in_ptr[v + 1], every)  # noqa: E731
    p, link = _dag_links(comp, dist, row, t, into)
    eu, ev = comp.eu, comp.ev
    codes = np.unique(np.concatenate((p * nr + eu[link], p * nr + ev[link])))  # DAG routers: compact ids
    tail = np.searchsorted(codes, p * nr + eu[link])
    head = np.searchsorted(codes, p * nr + ev[link])
    level = dist[row[p], eu[link]]
    order = np.lexsort((link, level))
    p, link, tail, head, level = p[order], link[order], tail[order], head[order], level[order]
    cuts = np.flatnonzero(np.diff(level)) + 1
    segments = list(zip(np.r_[0, cuts].tolist(), np.r_[cuts, len(p)].tolist()))
    m = len(codes)
    pairs = np.arange(n, dtype=np.int64)
    source = np.searchsorted(codes, pairs * nr + s)
    sink = np.searchsorted(codes, pairs * nr + t)
    sigma = np.zeros(m)  # shortest paths from s, inside the DAG
    sigma[source] = 1.0
    lat = np.full(m, -np.inf)  # longest latency of a shortest path from s
    lat[source] = 0.0
    elat = comp.elat[link]
    # per member of a twin class: a head is reached from every member of its tail's class
    m_tail, m_head = comp.mul_tail[link], comp.mul_head[link]
    for a, z in segments:  # tails by distance from s: each is final when reached
        sigma += np.bincount(head[a:z], weights=m_tail[a:z] * sigma[tail[a:z]], minlength=m)
        np.maximum.at(lat, head[a:z], lat[tail[a:z]] + elat[a:z])
    tau = np.zeros(m)  # shortest paths to t
    tau[sink] = 1.0
    for a, z in reversed(segments):  # heads of a segment are one level further
        tau += np.bincount(tail[a:z], weights=m_head[a:z] * tau[head[a:z]], minlength=m)
    # share of all the parallel links a router-level link stands for
    frac = (m_tail * m_head) * sigma[tail] * tau[head] / sigma[sink[p]]
    order = np.lexsort((link, p))
    return np.bincount(p, minlength=n), link[order], frac[order], lat[sink]


def _weights(fracs: np.ndarray, amount: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Bytes per DAG entry: its share of its flow's amount (``lens[i]`` entries of flow ``i``)."""
    if len(amount) and amount.min() == amount.max():  # one amount for all (rings): no repeat
        return fracs if amount[0] == 1.0 else fracs * amount[0]  # x * 1.0 is x, bit for bit
    return fracs * np.repeat(amount, lens)


_CHUNK = 1 << 16
"""DAG entries (about) per chunk of flows whose loads are added at once: a chunk's
temporaries (entry positions, links, weights) stay in cache."""


def _flow_chunks(label: np.ndarray, lens: np.ndarray) -> list[tuple[int, int]]:
    """Consecutive flow ranges ``(a, z)`` covering every flow in order, each inside one label
    and starting a new one where a flow's first entry enters the next ``_CHUNK`` entries."""
    n = len(lens)
    if n == 0:
        return []
    first = np.cumsum(lens) - lens
    cut = np.ones(n, dtype=bool)
    cut[1:] = (label[1:] != label[:-1]) | (first[1:] // _CHUNK != first[:-1] // _CHUNK)
    starts = np.flatnonzero(cut)
    return list(zip(starts.tolist(), np.r_[starts[1:], n].tolist()))


def _ratios(label: np.ndarray, lens: np.ndarray, nlabels: int, capacity: np.ndarray, entries,
            key=None, known: dict | None = None) -> np.ndarray:
    """Per label, the largest ``load / capacity`` over links, a link's load the sum of its
    entries' weights (``label`` per flow, ascending: route() sorts the flows by label;
    ``lens[i]`` entries of flow ``i``; ``entries(a, z)``: ``(links, weights)`` of flows ``a``
    to ``z - 1``, flow after flow). Loads are added entry by entry in flow order
    (``np.add.at``, as the one ``bincount`` over every entry did: the same sums, bit for
    bit), a chunk of flows at a time (:func:`_flow_chunks`: no array as long as all the
    entries), into one array of links whose links a label touched are read and cleared
    when the label ends (no label x link table, no sort of (label, link) keys). With
    ``key(a, z)`` (a name of the flows ``a`` to ``z - 1`` of one label) a label's ratio is
    kept in ``known`` and read from there when the same flows come again."""
    if nlabels > 1 and len(label) > 1 and (label[1:] < label[:-1]).any():
        raise ValueError("flows must come label after label")
    total = int(lens.sum())
    if total <= _CHUNK if nlabels == 1 else total < _LABEL_ENTRIES * len(np.unique(label)):
        return _one_pass_ratios(label, lens, nlabels, capacity, *entries(0, len(lens)))
    load = np.zeros(len(capacity))
    ratio = np.zeros(nlabels)
    chunks = _flow_chunks(label, lens)
    i = 0
    with np.errstate(divide="ignore", invalid="ignore"):
        while i < len(chunks):
            first = chunks[i][0]
            j = i + 1
            while j < len(chunks) and label[chunks[j][0]] == label[first]:
                j += 1
            name = key(first, chunks[j - 1][1]) if key is not None else None
            if name is not None and name in known:
                ratio[label[first]] = known[name]
                i = j
                continue
            touched = []
            for a, z in chunks[i:j]:
                links, weight = entries(a, z)
                if nlabels == 1 and a == 0:  # the first chunk of the one label: a bincount from zero
                    load = np.bincount(links, weights=weight, minlength=len(capacity))
                    continue
                np.add.at(load, links, weight)
                if nlabels > 1:
                    touched.append(links)
            if nlabels == 1:
                value = float((load / capacity).max())
            else:
                used = np.concatenate(touched) if touched else np.zeros(0, dtype=np.int64)
                if not len(used):
                    value = 0.0
                elif 4 * len(used) > len(load):  # most links touched: read and clear them all
                    value = float((load / capacity).max())
                    load[:] = 0.0
                else:  # capacities are positive: untouched links (load 0) are not the largest
                    value = max(0.0, float((load[used] / capacity[used]).max()))
                    load[used] = 0.0
            ratio[label[first]] = value
            if name is not None:
                known[name] = value
            i = j
    return ratio


def _flow_key(s: np.ndarray, t: np.ndarray, amount: np.ndarray):
    """``key(a, z)`` for :func:`_ratios`: a digest of the pairs and amounts of flows ``a`` to
    ``z - 1`` (what a label's loads depend on): SHA-256 (hardware-assisted where the CPU
    has it) of a tag naming the routers' width, the rows ``(s, t)`` (4-byte integers when
    every router index fits, which name them exactly) and the amounts, read from one
    array per call (no copies per label)."""
    import hashlib

    views = []  # (width, rows, amounts), made on the first key

    def key(a, z):
        if not views:
            narrow = not len(s) or max(int(s.max()), int(t.max())) < 1 << 31
            ends = np.stack((s, t), axis=1).astype(np.int32 if narrow else np.int64)
            views.extend((2 * ends.itemsize, memoryview(ends).cast("B"),
                          memoryview(np.ascontiguousarray(amount, dtype=np.float64)).cast("B")))
        width, rows, amounts = views
        digest = hashlib.sha256(bytes([width]))
        digest.update(rows[a * width:z * width])
        digest.update(amounts[a * 8:z * 8])
        return digest.digest()
    return key


_LABEL_ENTRIES = 2048
"""Entries per label (on average) below which the labels' loads are summed at once
(:func:`_one_pass_ratios`): a label of a few flows costs less in one array with the
others than in a pass of its own."""


def _one_pass_ratios(label: np.ndarray, lens: np.ndarray, nlabels: int, capacity: np.ndarray,
                     links: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """:func:`_ratios` of a few entries, or of many small labels, in one pass: loads per
    (label, link), summed entry by entry in flow order (``bincount``) over the links (one
    label), a dense label x link table when it is small next to the entries, else over
    the pairs used."""
    n_links = len(capacity)
    with np.errstate(divide="ignore", invalid="ignore"):
        if nlabels == 1:
            load = np.bincount(links, weights=weight, minlength=n_links)
            return np.array([(load / capacity).max()]) if len(load) else np.zeros(1)
        key = np.repeat(label, lens) * n_links + links
        if nlabels * n_links <= max(4 * len(links), 1 << 16):  # dense is cheaper than sorting
            load = np.bincount(key, weights=weight, minlength=nlabels * n_links).reshape(nlabels, n_links)
            return (load / capacity).max(axis=1)
        used, which = np.unique(key, return_inverse=True)
        load = np.bincount(which.ravel(), weights=weight, minlength=len(used))
        ratio = np.zeros(nlabels)
        np.maximum.at(ratio, used // n_links, load / capacity[used % n_links])
        return ratio


class Routes:
    """Min-cost routing between routers, computed on demand and kept: a DAG per router pair
    (:func:`compute_dags`), a set of concurrent flows loading every link with the sum of
    its pairs' shares (a gather and a ``bincount`` over the DAGs the flows use)."""

    def __init__(self, comp: CompiledGraph, engine: str = DEFAULT_ENGINE, sources: np.ndarray | None = None):
        self.comp = comp
        self.engine = kernels.check_engine(engine)
        self.nr = len(comp.routers)
        self.rows = DistanceRows(comp)
        self.in_ptr = np.searchsorted(comp.ev, np.arange(self.nr + 1))  # links are sorted by head
        # a pair's key: its source's slot among the sources routed from (every router, or a
        # symmetry's canonical ones, ascending) times nr plus its target: the store's key
        # table then holds only the rows of those sources
        self.sources = np.arange(self.nr, dtype=np.int64) if sources is None else np.asarray(sources, np.int64)
        self.slot = np.full(self.nr, -1, dtype=np.int64)
        self.slot[self.sources] = np.arange(len(self.sources))
        self.store = DagStore(len(self.sources) * self.nr)
        self.batch = 1024  # pairs per DAG batch, adapted to the DAG sizes seen
        self.known: dict[bytes, float] = {}  # a label's ratio by the digest of its flows (_flow_key)

    @property
    def pairs_routed(self) -> int:
        """Router pairs whose DAG was computed."""
        return self.store.size

    def _ids(self, store: DagStore, s: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Ids in ``store`` of the pairs ``s -> t``, their DAGs computed if new."""
        codes = self.slot[s] * self.nr + t
        ids, found = store.find(codes)
        if not found.all():
            missing, where = np.unique(codes[~found], return_inverse=True)
            first, at = store.size, 0
            while at < len(missing):
                part = missing[at:at + self.batch]
                counts, links, fracs, lats = compute_dags(self.comp, self.rows, self.sources[part // self.nr],
                                                          part % self.nr, self.in_ptr, self.engine)
                store.append(part, counts, links, fracs, lats)
                at += len(part)
                self.batch = int(np.clip(_ENTRIES // max(1.0, len(links) / len(part)), 64, 1 << 16))
            ids[~found] = first + where.ravel()
        return ids

    def _price(self, store: DagStore, ids: np.ndarray, s, t, amount, label, nlabels) -> tuple[np.ndarray, np.ndarray]:
        lens = store.ptr.view[ids + 1] - store.ptr.view[ids]
        if self.engine == "cpp":
            def compiled(keep):
                return kernels.label_ratios(store.ptr.view, store.edge.view, store.frac.view, ids[keep],
                                            amount[keep], label[keep], nlabels, self.comp.ecap)
            return _known_ratios(label, lens, nlabels, _flow_key(s, t, amount), self.known, compiled), \
                store.lat.view[ids]

        def entries(a, z):
            part, links, fracs = store.gather(ids[a:z])
            return links, _weights(fracs, amount[a:z], part)
        return _ratios(label, lens, nlabels, self.comp.ecap, entries, _flow_key(s, t, amount), self.known), \
            store.lat.view[ids]

    def flows(self, s: np.ndarray, t: np.ndarray, amount: np.ndarray, label: np.ndarray, nlabels: int
              ) -> tuple[np.ndarray, np.ndarray]:
        """``(ratio[label], latency per flow)`` of flows ``s -> t`` (router pairs, ``s !=
        t``) carrying ``amount`` each: per label, the largest load over capacity of a link
        (loads summed over the label's flows)."""
        return self._price(self.store, self._ids(self.store, s, t), s, t, amount, label, nlabels)


class RelabeledRoutes(Routes):
    """Routes on a graph whose symmetry relabels routers (transpositions): canonical DAGs
    routed once; a flow's links are its canonical DAG's moved by ``g_s`` (a few table
    lookups per link: cheaper than finding the pair among millions kept, and no memory
    per pair), with the same shares."""

    def __init__(self, comp: CompiledGraph, sym: RouterSymmetry, engine: str = DEFAULT_ENGINE):
        super().__init__(comp, engine, np.unique(sym.canonical_of))
        self.sym = sym

    def flows(self, s, t, amount, label, nlabels):
        element = self.sym.element(s)  # g_s, once: canonical() would find it again
        ids = self._ids(self.store, self.sym.canonical_of[s], self.sym.invert(element, t))
        store = self.store
        lens = store.ptr.view[ids + 1] - store.ptr.view[ids]

        def entries(a, z):
            part, links, fracs = store.gather(ids[a:z])
            links = self.sym.map_links(np.repeat(element[a:z], part, axis=0), links)
            return links, _weights(fracs, amount[a:z], part)
        return _ratios(label, lens, nlabels, self.comp.ecap, entries, _flow_key(s, t, amount), self.known), \
            store.lat.view[ids]


class TranslatedRoutes(Routes):
    """Routes on a torus-like graph (translations): canonical DAGs routed once; a flow's
    links are those of its canonical DAG translated by its source
    (:class:`~nest.network.symmetry.TranslationGrid`), with the same shares."""

    def __init__(self, comp: CompiledGraph, sym: RouterSymmetry, grid: TranslationGrid,
                 engine: str = DEFAULT_ENGINE):
        super().__init__(comp, engine, np.unique(sym.canonical_of))
        self.sym, self.grid = sym, grid
        self.cells = _Growing(np.int32)  # per stored entry: its link's grid cell (< 2**24: TranslationGrid)
        self.pos = self.wrap = None  # grid.translations(), made on the compiled engine's first use

    def flows(self, s, t, amount, label, nlabels):
        if self.engine == "cpp":  # g_s^-1(t) and the shifts by table lookups (the same routers and cells)
            if self.pos is None:
                self.pos, self.wrap, self.base = self.grid.translations(self.sym)
            at = self.pos[s]
            ids = self._ids(self.store, self.sym.canonical_of[s], self.wrap[self.pos[t] - at + self.base])
            shift = at * self.grid.ports
        else:
            element = self.sym.element(s)  # g_s, once: canonical() would find it again
            ids = self._ids(self.store, self.sym.canonical_of[s], self.sym.invert(element, t))
            shift = self.grid.shift(element)
        store = self.store
        self.cells.extend(self.grid.link_cell[store.edge.view[self.cells.size:]])
        cells, fracs, cell_link = self.cells.view, store.frac.view, self.grid.cell_link
        starts = store.ptr.view[ids]
        lens = store.ptr.view[ids + 1] - starts
        if self.engine == "cpp":  # the kernel moves each entry's link itself
            def compiled(keep):
                return kernels.label_ratios(store.ptr.view, store.edge.view, fracs, ids[keep], amount[keep],
                                            label[keep], nlabels, self.comp.ecap, (cells, shift[keep], cell_link))
            return _known_ratios(label, lens, nlabels, _flow_key(s, t, amount), self.known, compiled), \
                store.lat.view[ids]

        def entries(a, z):
            part = lens[a:z]
            idx = _ranges(starts[a:z], part)
            return cell_link[cells[idx] + np.repeat(shift[a:z], part)], _weights(fracs[idx], amount[a:z], part)
        return _ratios(label, lens, nlabels, self.comp.ecap, entries, _flow_key(s, t, amount), self.known), \
            store.lat.view[ids]


def _known_ratios(label: np.ndarray, lens: np.ndarray, nlabels: int, key, known: dict, compute) -> np.ndarray:
    """:func:`_ratios` with the loads summed by ``compute(keep)`` (the ratios of the flows
    ``keep``, a slice or a mask, per label: the compiled kernel): a label whose flows were
    priced before (the digest ``key(a, z)`` of its flows in ``known``) is read back, as
    :func:`_ratios` does once the entries outgrow one chunk."""
    if nlabels > 1 and len(label) > 1 and (label[1:] < label[:-1]).any():
        raise ValueError("flows must come label after label")
    if int(lens.sum()) <= _CHUNK:
        return compute(slice(None))
    starts = np.flatnonzero(np.r_[True, label[1:] != label[:-1]])
    stops = np.r_[starts[1:], len(label)]
    ratio = np.zeros(nlabels)
    keep = np.ones(len(label), dtype=bool)
    names = {}
    for a, z in zip(starts.tolist(), stops.tolist()):
        name = key(a, z)
        if name in known:
            ratio[label[a]] = known[name]
            keep[a:z] = False
        else:
            names[int(label[a])] = name
    if names:
        fresh = compute(keep)
        for which, name in names.items():
            ratio[which] = known[name] = float(fresh[which])
    return ratio


def make_routes(comp: CompiledGraph, engine: str = DEFAULT_ENGINE) -> Routes:
    """A new routing store of ``comp`` that fits its symmetry (none, translations or
    relabelings), its loops run by ``engine`` (:mod:`nest.network.kernels`)."""
    sym = router_symmetry(comp)
    if sym is None:
        return Routes(comp, engine)
    if sym.shift and TranslationGrid.fits(sym):
        return TranslatedRoutes(comp, sym, TranslationGrid(sym), engine)
    return RelabeledRoutes(comp, sym, engine)


def routes_of(comp: CompiledGraph) -> Routes:
    """The routing store of ``comp`` (made on first use)."""
    with comp.lock:
        if comp.routes is None:
            comp.routes = make_routes(comp)
        return comp.routes
