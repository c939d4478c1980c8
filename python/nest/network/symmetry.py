"""A generator's symmetry (:class:`~nest.network.structure.Symmetry`) on the routers and
links of a compiled graph: which router is the canonical one of a source's orbit, which
automorphism maps it there, and where that automorphism takes routers and links.

Routing from a source ``s`` is routing from its canonical router ``s0`` (coordinates 0 on
every axis it has) moved by the automorphism ``g_s`` (translation by ``s``'s coordinates,
or the transposition of 0 and ``s``'s value on each axis), which maps ``s0`` to ``s``: the
shortest-path DAG of ``s -> t`` is ``g_s`` applied to that of ``s0 -> g_s^-1(t)``, with the
same ECMP shares and latencies (an automorphism keeps every link's capacity, latency and
cost). So one Dijkstra search per orbit of sources serves every source.
"""

from __future__ import annotations

import numpy as np

from .compiled import CompiledGraph
from .structure import Symmetry


class RouterSymmetry:
    """The automorphisms of a :class:`Symmetry` as maps of router and link indices.

    A group element is given as the source router it is built for (``g_s``). Checked on
    construction: every router has coordinates, coordinates name one router, and one
    generator of every axis maps each link to a link of equal capacity, latency, cost and
    twin multiplicities (:func:`router_symmetry` returns None otherwise)."""

    def __init__(self, comp: CompiledGraph, sym: Symmetry):
        nr = len(comp.routers)
        self.nr, self.shift = nr, sym.shift
        self.sizes = np.array(sym.sizes, dtype=np.int64)
        rows = np.array([sym.coords[r] for r in comp.routers], dtype=np.int64).reshape(nr, 1 + len(sym.sizes))
        self.kind, self.coords = rows[:, 0], rows[:, 1:]
        self.radix = np.cumprod(np.r_[1, self.sizes[::-1] + 1])[::-1]  # [kind, axis 0, ...] weights
        live = comp.mult > 0  # merged twins are not routed through: their representative is
        keys = np.where(live, self._encode(self.kind, self.coords), -1)
        order = np.argsort(keys, kind="stable")
        self.keys, self.router = keys[order], order
        span = int(self.radix[0]) * (int(self.kind.max()) + 1)
        self.table = None  # key -> router, when the key space is small enough to index
        if span <= 1 << 24:
            self.table = np.full(span, -1, dtype=np.int64)
            self.table[keys[live]] = np.flatnonzero(live)
        self._tables: dict[tuple[int, int], np.ndarray] = {}
        self.link_codes = comp.ev * nr + comp.eu  # ascending: links are sorted by (head, tail)
        self.comp = comp
        self.link_table = self._link_keys()
        zero = np.where(self.coords >= 0, 0, -1)
        self.canonical_of = self._decode(self.kind, zero)

    def _encode(self, kind, coords):
        key = kind * self.radix[0]
        for axis in range(coords.shape[-1]):  # column by column: a sum over a short last axis is slow
            key = key + (coords[..., axis] + 1) * self.radix[1 + axis]
        return key

    def _decode(self, kind, coords) -> np.ndarray:
        """Router of each (kind, coordinates); -1 where there is none."""
        return self._lookup(self._encode(kind, coords))

    def _lookup(self, keys) -> np.ndarray:
        if self.table is not None:
            return self.table[keys]
        at = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        return np.where(self.keys[at] == keys, self.router[at], -1)

    def element(self, s: np.ndarray) -> np.ndarray:
        """``g_s`` per source: its coordinates (0 on axes it lacks: identity there)."""
        return np.maximum(self.coords[s], 0)

    _TABLE = 4096  # axes up to this many values move by table lookup

    def _axis_key(self, axis: int, sign: int, g, c):
        """Axis ``axis``'s part of the key of ``g^sign`` applied to coordinate ``c`` (``g``
        and ``c`` broadcast): ``(moved + 1) * radix``, 0 where the router lacks the axis."""
        size = int(self.sizes[axis])
        if size <= self._TABLE:
            table = self._tables.get((axis, sign))
            if table is None:
                table = self._tables[(axis, sign)] = self._axis_key_direct(
                    axis, sign, np.arange(size)[:, None], np.arange(-1, size)[None, :])
            return table[g, c + 1]
        return self._axis_key_direct(axis, sign, g, c)

    def _axis_key_direct(self, axis: int, sign: int, g, c):
        size = int(self.sizes[axis])
        if self.shift:
            moved = (c + sign * g) % size
        else:
            moved = np.where(c == 0, g, np.where(c == g, 0, c))
        return (np.where(c >= 0, moved, -1) + 1) * self.radix[1 + axis]

    def _move(self, g: np.ndarray, u: np.ndarray, sign: int) -> np.ndarray:
        key = self.kind[u] * self.radix[0]
        for axis in range(len(self.sizes)):
            key = key + self._axis_key(axis, sign, g[:, axis], self.coords[u, axis])
        return self._lookup(key)

    def apply(self, g: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Routers ``g(u)`` (``g`` one element per router of ``u``)."""
        return self._move(g, u, 1)

    def invert(self, g: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Routers ``g^-1(u)``."""
        return self._move(g, u, -1)

    def relative(self, h: np.ndarray, x: np.ndarray) -> np.ndarray:
        """``[i, j]``: router ``g_h[i]^-1(x[j])`` (broadcast: a distance row of ``h[i]``'s
        canonical router read at these routers is ``h[i]``'s row at ``x``)."""
        key = (self.kind[x] * self.radix[0])[None, :]
        for axis in range(len(self.sizes)):
            g = np.maximum(self.coords[h, axis], 0)[:, None]
            key = key + self._axis_key(axis, -1, g, self.coords[x, axis][None, :])
        return self._lookup(key)

    def canonical(self, s: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(s0, g_s^-1(t))``: the canonical pair whose DAG ``g_s`` maps to that of ``s -> t``."""
        return self.canonical_of[s], self.invert(self.element(s), t)

    def _link_keys(self):
        """A link's key: the kinds of its ends and, per axis, the coordinate of whichever end
        has it, when its ends agree on every axis both have (rails, hierarchies: a link
        joins a device to a switch of its own group) and keys name one link each; the
        table from key to link then moves a link in one lookup. None otherwise (tori)."""
        comp = self.comp
        tail, head = self.coords[comp.eu], self.coords[comp.ev]
        if ((tail >= 0) & (head >= 0) & (tail != head)).any():
            return None
        kinds = int(self.kind.max()) + 1
        self.link_kind = self.kind[comp.eu] * kinds + self.kind[comp.ev]
        self.link_coords = np.where(tail >= 0, tail, head)
        span = int(self.radix[0]) * kinds * kinds
        if span > 1 << 24:
            return None
        keys = self.link_kind * self.radix[0]
        for axis in range(len(self.sizes)):
            keys = keys + (self.link_coords[:, axis] + 1) * self.radix[1 + axis]
        if len(np.unique(keys)) != len(keys):
            return None
        table = np.full(span, -1, dtype=np.int64)
        table[keys] = np.arange(len(keys))
        return table

    def map_links(self, g: np.ndarray, links: np.ndarray) -> np.ndarray:
        """Links ``g(link)`` (-1 where ``g`` maps a link to no link)."""
        if self.link_table is not None:
            key = self.link_kind[links] * self.radix[0]
            for axis in range(len(self.sizes)):
                key = key + self._axis_key(axis, 1, g[:, axis], self.link_coords[links, axis])
            return self.link_table[key]
        comp = self.comp
        codes = self.apply(g, comp.ev[links]) * self.nr + self.apply(g, comp.eu[links])
        at = np.minimum(np.searchsorted(self.link_codes, codes), len(self.link_codes) - 1)
        return np.where(self.link_codes[at] == codes, at, -1)

    def check(self) -> bool:
        """Every router named once, and each axis' generator (shift by 1, or swapping 0
        and 1) an automorphism of the router-level links."""
        comp = self.comp
        if (self.canonical_of < 0).any():
            return False
        live = self.keys[self.keys >= 0]
        if len(np.unique(live)) != len(live):
            return False
        links = np.arange(len(comp.eu))
        attrs = np.stack((comp.link_cap, comp.elat, comp.ecost, comp.mul_tail, comp.mul_head), axis=1)
        for axis, size in enumerate(self.sizes.tolist()):
            if size < 2:
                continue
            g = np.zeros((len(links), len(self.sizes)), dtype=np.int64)
            g[:, axis] = 1
            image = self.map_links(g, links)
            if (image < 0).any() or not np.array_equal(attrs[image], attrs):
                return False
        return True


def router_symmetry(comp: CompiledGraph) -> RouterSymmetry | None:
    """The router symmetry of ``comp``'s generator, if it has one that checks out."""
    if "symmetry" not in comp.cache:
        sym = comp.structure.symmetry if comp.structure is not None else None
        out = None
        if sym is not None and all(r in sym.coords for r in comp.routers):
            out = RouterSymmetry(comp, sym)
            if not out.check():
                out = None
        comp.cache["symmetry"] = out
    return comp.cache["symmetry"]


class TranslationGrid:
    """Translated DAG links on a torus-like graph (one kind of router, every router on every
    axis, translations as automorphisms), without a modulo per link.

    A link is its tail's coordinates and its port (its head's offset, the same for every
    translate). In an unwrapped grid of side ``2 n`` per axis, translating by ``g`` adds a
    constant to a cell index (``c + g <= 2 n - 2``: no wrap), so the links of a flow are
    its canonical DAG's cells plus one offset, looked up in a table from cell to link."""

    _MAX_CELLS = 1 << 24

    @staticmethod
    def fits(sym: RouterSymmetry) -> bool:
        """Whether ``sym`` is a pure translation group on every router, with a grid of
        manageable size."""
        live = sym.comp.mult > 0
        return (sym.shift and len(np.unique(sym.kind[live])) == 1 and bool((sym.coords[live] >= 0).all())
                and int(np.prod(2 * sym.sizes)) * 2 * len(sym.sizes) <= TranslationGrid._MAX_CELLS)

    def __init__(self, sym: RouterSymmetry):
        comp = sym.comp
        n = sym.sizes
        sides = 2 * n
        self.stride = np.r_[np.cumprod(sides[::-1])[::-1][1:], 1].astype(np.int64)
        tail, head = sym.coords[comp.eu], sym.coords[comp.ev]
        _, port = np.unique((head - tail) % n, axis=0, return_inverse=True)
        port = port.ravel()
        self.ports = int(port.max()) + 1 if len(port) else 1
        self.link_cell = (tail * self.stride).sum(axis=1) * self.ports + port
        # every alias (c + k n per axis) of a link's cell names that link
        self.cell_link = np.full(int(np.prod(sides)) * self.ports, -1, dtype=np.int32)
        for alias in np.ndindex(*([2] * len(n))):
            shift = ((np.array(alias) * n) * self.stride).sum() * self.ports
            self.cell_link[self.link_cell + shift] = np.arange(len(comp.eu))

    def translations(self, sym: RouterSymmetry) -> tuple[np.ndarray, np.ndarray, int]:
        """``(pos, wrap, base)``: per router its cell in the unwrapped grid without the port
        (``pos[s] * ports`` is :meth:`shift` of ``g_s``), and a table over the unwrapped
        grid such that ``wrap[pos[t] - pos[s] + base]`` is ``g_s^-1(t)``, the router at
        ``(c_t - c_s) mod n`` (what :meth:`RouterSymmetry.invert` finds, in one lookup:
        each axis' ``c_t - c_s + n`` lies in ``1 .. 2 n - 1``). ``pos`` is -1 for the
        routers off the grid (merged twins, never a flow's end)."""
        live = sym.comp.mult > 0
        pos = np.where(live, (np.maximum(sym.coords, 0) * self.stride).sum(axis=1), -1)
        sides = 2 * sym.sizes
        grid = np.stack(np.unravel_index(np.arange(int(np.prod(sides))), tuple(sides.tolist())), axis=1)
        kind = np.full(len(grid), int(sym.kind[live][0]), dtype=np.int64)
        wrap = sym._decode(kind, grid % sym.sizes)
        return pos.astype(np.int64), wrap.astype(np.int64), int((sym.sizes * self.stride).sum())

    def shift(self, g: np.ndarray) -> np.ndarray:
        """Per flow, what translating by ``g`` (one row per flow) adds to a cell of
        :attr:`link_cell`: ``cell_link[cell + shift]`` is the moved link."""
        offset = np.zeros(len(g), dtype=np.int64)
        for axis in range(g.shape[1]):  # column by column: a sum over a short last axis is slow
            offset += g[:, axis] * self.stride[axis]
        return offset * self.ports


def circulant(sym: RouterSymmetry, row: np.ndarray):
    """For a translation group whose routers are its grid in row-major order (tori): a
    function ``i -> (d(i, x), d(x, i))`` over all routers ``x`` given router 0's distance
    ``row``, each a slice of a doubled grid (``d(i, x) = row[x - i]``, ``d(x, i) = row[i -
    x]``, coordinates modulo the sizes); None for any other symmetry."""
    nr = len(sym.kind)
    n = sym.sizes
    grid = np.stack(np.unravel_index(np.arange(nr), tuple(n.tolist())), axis=1) if nr == int(np.prod(n)) else None
    if not sym.shift or grid is None or not np.array_equal(grid, sym.coords) or len(np.unique(sym.kind)) > 1:
        return None
    forward = np.tile(row.reshape(tuple(n.tolist())), (2,) * len(n))
    flipped = row.reshape(tuple(n.tolist()))[tuple(np.ix_(*[(-np.arange(k)) % k for k in n.tolist()]))]
    backward = np.tile(flipped, (2,) * len(n))

    def rows(i: int) -> tuple[np.ndarray, np.ndarray]:
        cut = tuple(slice(k - c, 2 * k - c) for k, c in zip(n.tolist(), grid[i].tolist()))
        return forward[cut].ravel(), backward[cut].ravel()
    return rows
