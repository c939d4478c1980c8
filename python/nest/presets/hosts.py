"""Host presets: the server memory behind each device preset, from public datasheets.

Each entry is one server model (or superchip): its DRAM capacity and bandwidth, the
accelerators that share them, and the link each accelerator reaches host memory over.
DRAM bandwidth is the theoretical peak of the populated channels (channels x transfer
rate x 8 bytes, summed over sockets); link bandwidth is one direction of one link
(PCIe Gen3 / Gen4 / Gen5 x16: 15.75 / 31.5 / 63 GB/s after 128b/130b encoding;
NVLink-C2C: 900 GB/s total, 450 GB/s each way).

The measured fields:

* ``adam_rate_per_thread``: parameters per second one CPU thread steps with PyTorch's
  fused fp32 AdamW, the host optimizer of Megatron-Core's offload. :data:`ADAM_RATE_SPR`
  comes from one published measurement (Megatron-Bridge, see its docstring) on
  Sapphire Rapids hosts; the other x86 hosts keep it (no published per-core rate),
  and Grace keeps it too (an Arm Neoverse V2 core has a comparable vector width).
* ``link_efficiency`` 0.8: large pinned copies reach about 80% of the PCIe payload rate
  (measured ~12 GB/s on Gen3, 24-27 GB/s on Gen4, 50-53 GB/s on Gen5).
* ``memory_efficiency`` 0.7: streaming kernels reach about 70% of the DRAM peak
  (STREAM on two-socket servers). Rarely binding: a rank's host Adam runs on few threads.
* ``dispatch_slowdown``: host time per eager PyTorch call relative to the x86 servers the
  per-call cost of :mod:`nest.cost.host` comes from (1 for the DGX hosts). Grace's is
  :data:`GRACE_GB200_DISPATCH` and :data:`GRACE_GH200_DISPATCH`, from one published
  measurement of the same call on both kinds of host.
"""

from __future__ import annotations

from ..specs import HostSpec
from ..units import GB, GiB

PCIE_GEN3_X16 = 15.75 * GB
PCIE_GEN4_X16 = 31.5 * GB
PCIE_GEN5_X16 = 63.0 * GB
NVLINK_C2C = 450 * GB


def _dram(sockets: int, channels: int, mega_transfers: float) -> float:
    """Peak DRAM bandwidth: sockets x channels x MT/s x 8 bytes."""
    return sockets * channels * mega_transfers * 1e6 * 8


ADAM_RATE_SPR = 0.66e9
"""Parameters/s of one rank's host AdamW on one thread (torchrun's OMP_NUM_THREADS=1) of
a Sapphire Rapids server, from Megatron-Bridge's optimizer-offload measurement
(docs/training/cpu-offloading.md, commit 067f987: Qwen3-30B-A3B, TP2 PP2 EP4 on two H100
nodes, 996 ms per step without offload, 3877 ms with 100% offload and
--overlap-cpu-optimizer-d2h-h2d): the 2.88 s added over the ~1.9e9 optimizer parameters
each rank holds. bench/fidelity/offload.py checks it against other published runs."""

GRACE_DISPATCH_SOURCE = ("TransformerEngine issue #2053 'High CPU overhead on Grace systems' (2025-08-11): "
                         "CPU time of one torch.nn.Linear forward (BF16, hidden 2048, 8192 tokens), "
                         "13.48 us on DGX H100 (Xeon Platinum 8480C), 33.17 us on GH200, 37.08 us on GB200")

GRACE_GB200_DISPATCH = 37.08 / 13.48
"""Host time per dispatched call on a GB200 superchip's Grace CPU relative to a DGX H100's
Xeon: the CPU time of the same ``torch.nn.Linear`` forward on both (GRACE_DISPATCH_SOURCE;
one call through PyTorch's dispatcher to a cuBLAS launch: the whole call path the
per-call cost stands for, not a CPU benchmark's)."""

GRACE_GH200_DISPATCH = 33.17 / 13.48
"""The same on a GH200's Grace (GRACE_DISPATCH_SOURCE)."""

_PRESETS = [
    HostSpec(name="dgx-2", memory_bytes=1.5 * 1024 * GiB, memory_bandwidth=_dram(2, 6, 2666),
             link_bandwidth=PCIE_GEN3_X16, devices=16, cores=48, link_shared_by=2,
             adam_rate_per_thread=ADAM_RATE_SPR,
             source="NVIDIA DGX-2 user guide: 2x Xeon Platinum 8168 (24 cores, 6 DDR4-2666 channels "
                    "each), 1.5 TB system memory, 16 V100 behind PCIe Gen3 switches (two per uplink, "
                    "unconfirmed)"),
    HostSpec(name="dgx-a100", memory_bytes=1024 * GiB, memory_bandwidth=_dram(2, 8, 3200),
             link_bandwidth=PCIE_GEN4_X16, devices=8, cores=128, link_shared_by=2,
             adam_rate_per_thread=ADAM_RATE_SPR,
             source="NVIDIA DGX A100 user guide: 2x AMD EPYC 7742 (64 cores, 8 DDR4-3200 channels each), "
                    "1 TB system memory (2 TB on the 640 GB model), two GPUs per PCIe Gen4 switch"),
    HostSpec(name="dgx-h100", memory_bytes=2048 * GiB, memory_bandwidth=_dram(2, 8, 4800),
             link_bandwidth=PCIE_GEN5_X16, devices=8, cores=112, link_shared_by=1,
             adam_rate_per_thread=ADAM_RATE_SPR,
             source="NVIDIA DGX H100/H200 user guide and MLPerf system description: 2x Xeon Platinum "
                    "8480C (56 cores, 8 DDR5-4800 channels each), 2 TB system memory, PCIe Gen5 x16 per GPU"),
    HostSpec(name="dgx-b200", memory_bytes=2048 * GiB, memory_bandwidth=_dram(2, 8, 5600),
             link_bandwidth=PCIE_GEN5_X16, devices=8, cores=112, link_shared_by=1,
             adam_rate_per_thread=ADAM_RATE_SPR,
             source="NVIDIA DGX B200 user guide: 2x Xeon Platinum 8570 (56 cores, 8 DDR5-5600 channels "
                    "each), 2 TB system memory (up to 4 TB), PCIe Gen5 x16 per GPU"),
    HostSpec(name="grace-gh200", memory_bytes=480 * GB, memory_bandwidth=512 * GB,
             link_bandwidth=NVLINK_C2C, devices=1, cores=72, link_shared_by=1,
             adam_rate_per_thread=ADAM_RATE_SPR, dispatch_slowdown=GRACE_GH200_DISPATCH,
             source="NVIDIA GH200 Grace Hopper Superchip datasheet: 72 Neoverse V2 cores, 480 GB LPDDR5X "
                    "at up to 512 GB/s, NVLink-C2C 900 GB/s total (450 GB/s each way)"),
    HostSpec(name="grace-gb200", memory_bytes=480 * GB, memory_bandwidth=512 * GB,
             link_bandwidth=NVLINK_C2C, devices=2, cores=72, link_shared_by=2,
             adam_rate_per_thread=ADAM_RATE_SPR, dispatch_slowdown=GRACE_GB200_DISPATCH,
             source="NVIDIA GB200 NVL72 datasheet: one Grace CPU (72 cores, 480 GB LPDDR5X at up to "
                    "512 GB/s) per two B200 GPUs, NVLink-C2C 900 GB/s per superchip"),
]

HOSTS: dict[str, HostSpec] = {h.name: h for h in _PRESETS}
"""Preset hosts by name."""
