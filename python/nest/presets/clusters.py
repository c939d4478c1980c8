"""Cluster presets: hierarchical networks (tiers innermost first) sized to N devices.

* ``dgx-a100``: DGX A100 nodes (8 x A100-80GB, NVLink 3 / NVSwitch: 600 GB/s
  bidirectional, 300 GB/s per direction per GPU), 8 x HDR InfiniBand 200 Gb/s per node
  (25 GB/s per GPU), non-blocking fat tree in 32-node scalable units (DGX SuperPOD
  reference architecture).
* ``dgx-h100``: DGX H100 nodes (8 x H100 SXM, NVLink 4: 900 GB/s bidirectional, 450 GB/s
  per direction), 8 x NDR 400 Gb/s per node (50 GB/s per GPU), 32-node scalable units.
* ``gb200-nvl72``: GB200 NVL72 racks (72 Blackwell GPUs in one NVLink 5 domain: 1.8 TB/s
  bidirectional, 900 GB/s per direction per GPU, through the rack's NVLink switch trays),
  one ConnectX-7 400 Gb/s NIC per GPU on the compute fabric (50 GB/s), 8 racks (576 GPUs)
  per scalable unit under a non-blocking spine (DGX SuperPOD with DGX GB200 reference
  architecture); each GPU's host is its Grace (``grace-gb200``, shared by two).
* ``tpuv4-fattree`` and ``h100-spineleaf``: the two setups of the NEST paper
  (arXiv 2603.06798) exactly as its artifact's instances encode them (binary units:
  900/100/400 and 900/12.5/50 GiB/s; 100/200/300 us per level; devices per level
  8, 4, N/32; 64 GiB and 90 GiB per device).

Latencies of the DGX presets are per-hop software+switch latencies typical of NCCL
(a few microseconds); they are assumptions, not datasheet values.

Graph presets (networkx graphs from :mod:`nest.network.generators`, priced link by link):

* ``h100-fattree``: H100 SXM GPUs, one NDR 400 Gb/s NIC each (50 GB/s per direction),
  in a k-ary fat tree (Al-Fares et al. 2008), non-blocking, 1 us per link; ``N`` devices
  need ``N = pods x (k/2)^2`` with ``pods <= k`` (the smallest even ``k`` is taken:
  1024 = 16 pods of k=16, 4096 = 16 pods of k=32, 16384 = 16 pods of k=64).
* ``dgx-h100-rail``: rail-optimized DGX H100 SuperPOD style: 8 GPUs per node on NVLink 4
  (450 GB/s per direction), GPU ``i`` of every node on rail leaf ``i`` (NDR, 50 GB/s), rail
  leaves joined by non-blocking spines; multiples of 8 devices.
* ``tpuv4-torus``: TPU v4 chips in a 3-D torus (Jouppi et al., ISCA 2023: six inter-chip
  links per chip); 50 GB/s per link and direction and 1 us per hop are approximations.
  ``N`` is factored into the most cubic ``a x b x c``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import SpecError
from ..specs import ClusterSpec, DeviceSpec, Tier
from ..units import GB, GiB
from .devices import DEVICES


@dataclass(frozen=True)
class ClusterTemplate:
    """A cluster family: fixed inner tiers; the outermost tier grows with the size."""

    name: str
    device: DeviceSpec
    tiers: tuple[Tier, ...]  # the outermost tier's fanout is replaced when sizing
    default_devices: int
    source: str

    def sized(self, devices: int | None = None) -> ClusterSpec:
        """The cluster with exactly ``devices`` devices (SpecError if it cannot be).

        Part of one innermost group (GPUs of one node) is that group, smaller; beyond it
        the devices come in whole innermost groups. A partly filled outer group is normal
        (35 DGX nodes: one leaf of 32 and one of 3): the tiers from the first one the
        devices do not fill evenly outwards become one tier over all their groups, at
        the slowest bandwidth, the highest latency and oversubscription among them
        (``leaf+spine``), exact in bandwidth on the non-blocking presets and a few
        microseconds conservative in latency for the groups that share a leaf."""
        n = self.default_devices if devices is None else devices
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise SpecError(f"devices = {n!r}: must be a positive integer")
        inner = self.tiers[0]
        if n > inner.fanout and n % inner.fanout:
            raise SpecError(f"devices = {n}: {self.name} needs whole '{inner.name}' groups above one: a multiple "
                            f"of {inner.fanout} devices")
        tiers, remaining = [], n
        for i, tier in enumerate(self.tiers):
            last = i == len(self.tiers) - 1
            if remaining <= tier.fanout or last:
                if remaining > 1 or not tiers:
                    tiers.append(replace(tier, fanout=remaining))
                break
            if remaining % tier.fanout:  # a partly filled group from here outwards
                outer = self.tiers[i:]
                tiers.append(Tier("+".join(t.name for t in outer), remaining, min(t.bandwidth for t in outer),
                                  max(t.latency for t in outer), max(t.oversubscription for t in outer)))
                break
            tiers.append(tier)
            remaining //= tier.fanout
        return ClusterSpec(name=self.name, device=self.device, tiers=tuple(tiers), source=self.source)


_DGX_SOURCE = "NVIDIA DGX SuperPOD reference architecture; NVLink/InfiniBand datasheets"
_NEST_SOURCE = "NEST paper (arXiv 2603.06798) artifact instances, ../shared/data/nest-artifact"

_TEMPLATES = [
    ClusterTemplate(
        "dgx-a100", DEVICES["a100-80gb"],
        (Tier("nvlink", 8, 300 * GB, 3e-6), Tier("leaf", 32, 25 * GB, 5e-6),
         Tier("spine", 1, 25 * GB, 7e-6)),
        1024, _DGX_SOURCE),
    ClusterTemplate(
        "dgx-h100", DEVICES["h100-sxm"],
        (Tier("nvlink", 8, 450 * GB, 3e-6), Tier("leaf", 32, 50 * GB, 5e-6),
         Tier("spine", 1, 50 * GB, 7e-6)),
        1024, _DGX_SOURCE),
    ClusterTemplate(
        "gb200-nvl72", DEVICES["gb200"],
        (Tier("nvlink", 72, 900 * GB, 3e-6), Tier("leaf", 8, 50 * GB, 5e-6),
         Tier("spine", 1, 50 * GB, 7e-6)),
        576, "NVIDIA GB200 NVL72 datasheet; DGX SuperPOD with DGX GB200 reference architecture"),
    ClusterTemplate(
        "tpuv4-fattree", replace(DEVICES["tpuv4"], name="tpuv4-64gib", memory_bytes=64 * GiB),
        (Tier("board", 8, 900 * GiB, 1e-4), Tier("rack", 4, 100 * GiB, 2e-4),
         Tier("fabric", 1, 400 * GiB, 3e-4)),
        1024, _NEST_SOURCE),
    ClusterTemplate(
        "h100-spineleaf", replace(DEVICES["h100-sxm"], name="h100-90gib", memory_bytes=90 * GiB),
        (Tier("node", 8, 900 * GiB, 1e-4), Tier("leaf", 4, 12.5 * GiB, 2e-4),
         Tier("spine", 1, 50 * GiB, 3e-4)),
        1024, _NEST_SOURCE),
]

CLUSTERS: dict[str, ClusterTemplate] = {t.name: t for t in _TEMPLATES}
"""Preset cluster families by name."""


MAX_GRAPH_LINKS = 1 << 20
"""Links a graph preset may have. A generated graph is built in memory: the networkx graph,
the cluster's read-only copy of it and its compiled routing form take about 2 KiB per
link (1.4-2.1 KiB measured on the 16384-device presets), so 2^20 links is about 2 GiB
before any routing: some 350k devices on fat trees and tori, 260k on the graph forms of
hierarchies, 520k on rail-optimized clusters, 840k on leaf-spine, 44k on dragonflies
(whose global links grow with the square of the groups). A larger size is refused before
anything is built."""

_KIB_PER_LINK = 2


@dataclass(frozen=True)
class GraphTemplate:
    """A cluster family on a generated graph: ``build(devices)`` returns the graph and
    ``links(devices)`` bounds how many links it has (checked against
    :data:`MAX_GRAPH_LINKS` first)."""

    name: str
    device: DeviceSpec
    build: object  # devices -> networkx graph (nest.network.generators)
    default_devices: int
    source: str
    description: str
    links: object  # devices -> links of the graph build(devices) (an upper bound)

    def max_devices(self) -> int:
        """The most devices whose graph stays within :data:`MAX_GRAPH_LINKS` links."""
        low, high = 1, 2
        while self.links(high) <= MAX_GRAPH_LINKS:
            low, high = high, 2 * high
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (mid, high) if self.links(mid) <= MAX_GRAPH_LINKS else (low, mid)
        return low

    def sized(self, devices: int | None = None) -> ClusterSpec:
        """The cluster on a graph of exactly ``devices`` devices (SpecError if none, or if
        the graph would exceed :data:`MAX_GRAPH_LINKS` links)."""
        from ..network.graph import graph_cluster

        n = self.default_devices if devices is None else devices
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise SpecError(f"devices = {n!r}: must be a positive integer")
        links = self.links(n)
        if links > MAX_GRAPH_LINKS:
            raise SpecError(f"devices = {n}: {self.name} would have {links} links (about "
                            f"{links * _KIB_PER_LINK / 2**20:.0f} GiB to build); graph presets go up to "
                            f"{MAX_GRAPH_LINKS} links, {self.max_devices()} devices on {self.name}")
        return graph_cluster(self.build(n), self.device, name=self.name, source=self.source)


def fat_tree_shape(devices: int) -> tuple[int, int]:
    """``(k, pods)`` of the smallest even ``k`` whose fat tree holds ``devices`` devices
    in whole pods (``pods x (k/2)^2``, ``pods <= k``); SpecError if there is none."""
    k = 2
    while (k // 2) ** 2 <= devices:
        half = k // 2
        if devices % (half * half) == 0 and devices // (half * half) <= k:
            return k, devices // (half * half)
        k += 2
    raise SpecError(f"devices = {devices}: a k-ary fat tree holds pods x (k/2)^2 devices "
                    "with pods <= k (e.g. 16, 64, 128, 1024, 4096, 16384)")


def torus_dims(devices: int) -> tuple[int, int, int]:
    """The most cubic ``a <= b <= c`` with ``a b c = devices``."""
    best = (1, 1, devices)
    for a in range(1, int(round(devices ** (1 / 3))) + 2):
        if devices % a:
            continue
        rest = devices // a
        for b in range(a, int(rest ** 0.5) + 1):
            if rest % b == 0 and rest // b >= b and rest // b - a < best[2] - best[0]:
                best = (a, b, rest // b)
    return best


def _fat_tree(devices: int):
    from ..network.generators import fat_tree

    k, pods = fat_tree_shape(devices)
    return fat_tree(k, bandwidth=50 * GB, latency=1e-6, pods=pods)


def _rail(devices: int):
    from ..network.generators import rail_optimized

    if devices % 8:
        raise SpecError(f"devices = {devices}: dgx-h100-rail needs a multiple of 8 (GPUs per node)")
    return rail_optimized(devices // 8, 8, spines=4, nvlink_bandwidth=450 * GB, nic_bandwidth=50 * GB,
                          nvlink_latency=3e-6, nic_latency=2.5e-6)


def _torus(devices: int):
    from ..network.generators import torus

    return torus(torus_dims(devices), bandwidth=50 * GB, latency=1e-6)


def _leaf_spine(devices: int):
    from ..network.generators import spine_leaf

    if devices % 32:
        raise SpecError(f"devices = {devices}: h100-leafspine needs a multiple of 32 (devices per leaf)")
    return spine_leaf(devices // 32, 32, spines=8, bandwidth=50 * GB, latency=1e-6)


def _dragonfly(devices: int):
    from ..network.generators import dragonfly

    per_group = 8 * 4  # 8 routers x 4 hosts
    if devices % per_group or devices // per_group < 2:
        raise SpecError(f"devices = {devices}: h100-dragonfly needs a multiple of 32 devices "
                        "(8 routers x 4 GPUs per group), at least 2 groups")
    return dragonfly(devices // per_group, 8, 4, global_links=4, bandwidth=50 * GB, latency=1e-6)


def _hierarchy(name: str):
    def build(devices: int):
        from ..network.generators import from_hierarchy

        return from_hierarchy(CLUSTERS[name].sized(devices))
    return build


# links of each preset's graph (upper bounds, for MAX_GRAPH_LINKS): device links plus the
# switch links above them
def _fat_tree_links(n: int) -> int:
    return 3 * n  # device-edge, edge-aggregation and aggregation-core: n each


def _rail_links(n: int) -> int:
    return 2 * n + 8 * 4  # NVSwitch and rail per GPU; rails to spines


def _torus_links(n: int) -> int:
    return 3 * n  # two neighbours per dimension, each link shared by two chips


def _leaf_spine_links(n: int) -> int:
    return n + (n // 32) * 8


def _dragonfly_links(n: int) -> int:
    groups = n // 32
    return n + groups * 28 + groups * (groups - 1) // 2  # hosts, local cliques, one link per group pair


def _hierarchy_links(name: str):
    return lambda n: (len(CLUSTERS[name].tiers) + 1) * n  # per plane: device links (n) and uplinks (< n)


GRAPH_CLUSTERS: dict[str, GraphTemplate] = {t.name: t for t in [
    GraphTemplate("h100-fattree", DEVICES["h100-sxm"], _fat_tree, 1024,
                  "k-ary fat tree (Al-Fares et al. 2008); NDR 400 Gb/s NICs",
                  "k-ary fat tree, 1 x 50 GB/s NIC per GPU, non-blocking", _fat_tree_links),
    GraphTemplate("dgx-h100-rail", DEVICES["h100-sxm"], _rail, 1024, _DGX_SOURCE,
                  "rail-optimized: NVLink 8 x 450 GB/s, 8 rails x 50 GB/s, spines", _rail_links),
    GraphTemplate("tpuv4-torus", DEVICES["tpuv4"], _torus, 512,
                  "TPU v4 (Jouppi et al., ISCA 2023): 3-D torus, six ICI links per chip",
                  "3-D torus, 50 GB/s per link and direction", _torus_links),
    GraphTemplate("h100-leafspine", DEVICES["h100-sxm"], _leaf_spine, 1024,
                  "two-tier Clos (leaf-spine), 32 GPUs per leaf, 8 spines",
                  "two-tier leaf-spine, 32 x 50 GB/s per leaf, 8 spines, non-blocking", _leaf_spine_links),
    GraphTemplate("h100-dragonfly", DEVICES["h100-sxm"], _dragonfly, 1024,
                  "dragonfly (Kim et al., ISCA 2008), minimal routing",
                  "dragonfly: groups of 8 routers x 4 GPUs, 4 global links per router, 50 GB/s", _dragonfly_links),
    *(GraphTemplate(f"{t.name}-graph", t.device, _hierarchy(t.name), t.default_devices, t.source,
                    f"graph form of {t.name} (one plane per tier; prices equal the tiers)", _hierarchy_links(t.name))
      for t in _TEMPLATES),
]}
"""Preset cluster families on generated graphs, by name."""
