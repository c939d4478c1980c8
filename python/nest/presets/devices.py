"""Device presets from public datasheets (dense tensor-core peaks, no sparsity).

Memory sizes are the totals the driver reports, which is what a training job can
allocate from (before the device's ``reserved_bytes``): ``nvidia-smi`` shows 40960 MiB
(A100 40GB), 81920 MiB (A100 80GB), 81559 MiB (H100 SXM; all three listed in
https://github.com/modal-labs/modal-client/pull/2797), 143771 MiB (H200) and 183359 MiB
(B200); ``rocm-smi`` shows 206141652992 B = 196592 MiB (MI300X). Datasheets round these
(an "80 GB" H100 has 85.5 GB). TPUs, the GH200 (96 GiB) and the V100 (32 GiB) keep the
documented HBM size (the GB200 too, 186 GB), for want of a published runtime figure (the driver reports a little
less, as on H100: 81559 of 81920 MiB).

Each NVIDIA preset carries the host of its reference server (:mod:`nest.presets.hosts`):
DGX A100, DGX H100 (also for H200), DGX B200, DGX-2 (V100), and the Grace CPU of a
GH200 superchip; a device file can replace it (``host:``).

The efficiency fields are measurements, not datasheet numbers (the curves that use them
are in :mod:`nest.cost.efficiency`):

* ``gemm_efficiency``: the maximum achievable BF16 matmul FLOPS as a fraction of the
  datasheet peak (MAMF, brute-force shape search; S. Bekman, *Machine Learning
  Engineering*, https://github.com/stas00/ml-engineering/blob/master/compute/accelerator/README.md#maximum-achievable-matmul-flops-comparison-table):
  A100 SXM 271.2/312 = 86.9%, H100 SXM 794.5/989 = 80.3% (H200 the same), B200
  1745/2250 = 77.6%, MI300X 668.4/1300 = 51.4% (ROCm 6.3, TunableOp). TPUs keep the
  generic 0.75 (no public matmul sweep).
* ``attention_efficiency``: fused attention forward, fraction of the 16-bit peak.
  A100: FlashAttention-2 reaches 50-73% (Dao 2023, arXiv:2307.08691), 0.62 at the
  causal head-dim-128 shapes of LLM training; H100/H200: FlashAttention-3 / cuDNN reach
  ~600 TFLOP/s at head dim 128 and 2k-8k tokens (Shah et al. 2024, arXiv:2407.08608,
  Fig. 5), 0.60. Others keep the generic 0.55.
* ``hbm_efficiency`` (0.85) and ``kernel_overhead_s`` (4 us) stay at the ``DeviceSpec``
  defaults: streaming kernels reach 80-90% of HBM peak, and a kernel launch plus the
  drain and fill between dependent kernels costs a few microseconds.
"""

from __future__ import annotations

from ..specs import DeviceSpec
from ..units import GB, GiB, MiB
from .hosts import HOSTS

TFLOPS = 1e12

# Measured fractions of the datasheet peak (see the module docstring for the sources).
MAMF_A100 = 271.2 / 312
MAMF_H100 = 794.5 / 989
MAMF_B200 = 1745.0 / 2250
MAMF_MI300X = 668.4 / 1300
FLASH_A100 = 0.62
FLASH_HOPPER = 0.60

_PRESETS = [
    DeviceSpec(name="a100-40gb", host=HOSTS["dgx-a100"], memory_bytes=40960 * MiB, hbm_bandwidth=1555 * GB,
               peak_flops_bf16=312 * TFLOPS, peak_flops_fp32=156 * TFLOPS,
               gemm_efficiency=MAMF_A100, attention_efficiency=FLASH_A100,
               source="NVIDIA A100 Tensor Core GPU datasheet (SXM 40GB): 312 TFLOPS BF16, 1,555 GB/s HBM2"),
    DeviceSpec(name="a100-80gb", host=HOSTS["dgx-a100"], memory_bytes=81920 * MiB, hbm_bandwidth=2039 * GB,
               peak_flops_bf16=312 * TFLOPS, peak_flops_fp32=156 * TFLOPS,
               gemm_efficiency=MAMF_A100, attention_efficiency=FLASH_A100,
               source="NVIDIA A100 Tensor Core GPU datasheet (SXM 80GB): 312 TFLOPS BF16, 2,039 GB/s HBM2e"),
    DeviceSpec(name="h100-sxm", host=HOSTS["dgx-h100"], memory_bytes=81559 * MiB, hbm_bandwidth=3350 * GB,
               peak_flops_bf16=989 * TFLOPS, peak_flops_fp8=1979 * TFLOPS,
               peak_flops_fp32=494.5 * TFLOPS,
               gemm_efficiency=MAMF_H100, attention_efficiency=FLASH_HOPPER,
               source="NVIDIA H100 Tensor Core GPU datasheet (SXM5): 989 TFLOPS BF16 dense, "
                      "1,979 FP8, 80 GB HBM3 at 3.35 TB/s"),
    DeviceSpec(name="h200", host=HOSTS["dgx-h100"], memory_bytes=143771 * MiB, hbm_bandwidth=4800 * GB,
               peak_flops_bf16=989 * TFLOPS, peak_flops_fp8=1979 * TFLOPS,
               peak_flops_fp32=494.5 * TFLOPS,
               gemm_efficiency=MAMF_H100, attention_efficiency=FLASH_HOPPER,
               source="NVIDIA H200 Tensor Core GPU datasheet (SXM): 141 GB HBM3e at 4.8 TB/s"),
    DeviceSpec(name="b200", host=HOSTS["dgx-b200"], memory_bytes=183359 * MiB, hbm_bandwidth=8000 * GB,
               peak_flops_bf16=2250 * TFLOPS, peak_flops_fp8=4500 * TFLOPS,
               peak_flops_fp32=1100 * TFLOPS, gemm_efficiency=MAMF_B200,
               source="NVIDIA DGX B200 datasheet (per GPU: 180 GB HBM3e usable, 8 TB/s, "
                      "2.25 PFLOPS dense BF16, 4.5 PFLOPS dense FP8)"),
    DeviceSpec(name="gb200", host=HOSTS["grace-gb200"], memory_bytes=186 * GB, hbm_bandwidth=8000 * GB,
               peak_flops_bf16=2500 * TFLOPS, peak_flops_fp8=5000 * TFLOPS, peak_flops_fp32=1250 * TFLOPS,
               gemm_efficiency=MAMF_B200,
               source="NVIDIA GB200 NVL72 datasheet, per GPU of 72: 13.4 TB HBM3e (186 GB), 576 TB/s (8 TB/s), "
                      "360 PFLOPS BF16 and 720 FP8 with sparsity (2.5 and 5 PFLOPS dense); Grace host memory "
                      "over NVLink-C2C"),
    DeviceSpec(name="gh200", host=HOSTS["grace-gh200"], memory_bytes=96 * GiB, hbm_bandwidth=4000 * GB,
               peak_flops_bf16=989 * TFLOPS, peak_flops_fp8=1979 * TFLOPS,
               peak_flops_fp32=494.5 * TFLOPS,
               gemm_efficiency=MAMF_H100, attention_efficiency=FLASH_HOPPER,
               source="NVIDIA GH200 Grace Hopper Superchip datasheet: H100 with 96 GB HBM3 at 4 TB/s "
                      "(989 TFLOPS BF16 dense), Grace host memory over NVLink-C2C"),
    DeviceSpec(name="v100-32gb", host=HOSTS["dgx-2"], memory_bytes=32 * GiB, hbm_bandwidth=900 * GB,
               peak_flops_bf16=0.0, peak_flops_fp16=125 * TFLOPS, peak_flops_fp32=15.7 * TFLOPS,
               source="NVIDIA V100 Tensor Core GPU datasheet (SXM2 32GB): 125 TFLOPS FP16 tensor, "
                      "15.7 TFLOPS FP32, 900 GB/s HBM2; no BF16"),
    DeviceSpec(name="mi300x", memory_bytes=196592 * MiB, hbm_bandwidth=5300 * GB,
               peak_flops_bf16=1307.4 * TFLOPS, peak_flops_fp8=2614.9 * TFLOPS,
               peak_flops_fp32=653.7 * TFLOPS, gemm_efficiency=MAMF_MI300X,
               source="AMD Instinct MI300X datasheet: 192 GB HBM3 at 5.3 TB/s, "
                      "1,307.4 TFLOPS BF16 dense"),
    DeviceSpec(name="tpuv4", memory_bytes=32 * GiB, hbm_bandwidth=1200 * GB,
               peak_flops_bf16=275 * TFLOPS,
               source="Google Cloud TPU v4 documentation: 275 TFLOPS BF16, 32 GiB HBM2 at 1,200 GB/s"),
    DeviceSpec(name="tpuv5p", memory_bytes=95 * GB, hbm_bandwidth=2765 * GB,
               peak_flops_bf16=459 * TFLOPS, peak_flops_fp8=918 * TFLOPS,
               source="Google Cloud TPU v5p documentation: 459 TFLOPS BF16, 918 TOPS INT8 "
                      "(used as the 8-bit peak), 95 GB HBM2e at 2,765 GB/s"),
]

DEVICES: dict[str, DeviceSpec] = {d.name: d for d in _PRESETS}
"""Preset devices by name."""
