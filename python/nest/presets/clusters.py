"""Cluster presets: hierarchical networks (tiers innermost first) sized to N devices.

* ``dgx-a100``: DGX A100 nodes (8 x A100-80GB, NVLink 3 / NVSwitch: 600 GB/s
  bidirectional, 300 GB/s per direction per GPU), 8 x HDR InfiniBand 200 Gb/s per node
  (25 GB/s per GPU), non-blocking fat tree in 32-node scalable units (DGX SuperPOD
  reference architecture).
* ``dgx-h100``: DGX H100 nodes (8 x H100 SXM, NVLink 4: 900 GB/s bidirectional, 450 GB/s
  per direction), 8 x NDR 400 Gb/s per node (50 GB/s per GPU), 32-node scalable units.
* ``tpuv4-fattree`` and ``h100-spineleaf``: the two setups of the NEST paper
  (arXiv 2603.06798) exactly as its artifact's instances encode them (binary units:
  900/100/400 and 900/12.5/50 GiB/s; 100/200/300 us per level; devices per level
  8, 4, N/32; 64 GiB and 90 GiB per device).

Latencies of the DGX presets are per-hop software+switch latencies typical of NCCL
(a few microseconds); they are assumptions, not datasheet values.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import SpecError
from ..specs import ClusterSpec, DeviceSpec, Tier
from .devices import DEVICES, GB, GiB


@dataclass(frozen=True)
class ClusterTemplate:
    """A cluster family: fixed inner tiers; the outermost tier grows with the size."""

    name: str
    device: DeviceSpec
    tiers: tuple[Tier, ...]  # the outermost tier's fanout is replaced when sizing
    default_devices: int
    source: str

    def sized(self, devices: int | None = None) -> ClusterSpec:
        """The cluster with exactly ``devices`` devices (SpecError if it cannot be)."""
        n = self.default_devices if devices is None else devices
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise SpecError(f"devices = {n!r}: must be a positive integer")
        tiers, remaining = [], n
        for tier in self.tiers[:-1]:
            if remaining <= tier.fanout:
                if tier.fanout % remaining:
                    raise SpecError(f"devices = {n}: {self.name} groups devices by {tier.fanout} "
                                    f"at tier '{tier.name}'; use a divisor or a multiple of it")
                tiers.append(replace(tier, fanout=remaining))
                remaining = 1
                break
            if remaining % tier.fanout:
                group = tier.fanout * (n // remaining)
                raise SpecError(f"devices = {n}: {self.name} needs a multiple of {group} devices "
                                f"(one '{tier.name}' group)")
            tiers.append(tier)
            remaining //= tier.fanout
        if remaining > 1:
            tiers.append(replace(self.tiers[-1], fanout=remaining))
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
