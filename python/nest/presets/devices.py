"""Device presets from public datasheets (dense tensor-core peaks, no sparsity).

Memory sizes are what the datasheet states, converted with the unit the vendor uses
for that part (A100 and TPU HBM are binary GiB; H100/H200/B200/MI300X are quoted in
GB = 1e9 bytes). The efficiency fields are modelling assumptions shared by all
presets until calibrated (see ``DeviceSpec``); they are not datasheet numbers.
"""

from __future__ import annotations

from ..specs import DeviceSpec

GB = 1e9
GiB = 2**30
TFLOPS = 1e12

_PRESETS = [
    DeviceSpec(name="a100-40gb", memory_bytes=40 * GiB, hbm_bandwidth=1555 * GB,
               peak_flops_bf16=312 * TFLOPS, peak_flops_fp32=156 * TFLOPS,
               source="NVIDIA A100 Tensor Core GPU datasheet (SXM 40GB): 312 TFLOPS BF16, 1,555 GB/s HBM2"),
    DeviceSpec(name="a100-80gb", memory_bytes=80 * GiB, hbm_bandwidth=2039 * GB,
               peak_flops_bf16=312 * TFLOPS, peak_flops_fp32=156 * TFLOPS,
               source="NVIDIA A100 Tensor Core GPU datasheet (SXM 80GB): 312 TFLOPS BF16, 2,039 GB/s HBM2e"),
    DeviceSpec(name="h100-sxm", memory_bytes=80 * GB, hbm_bandwidth=3350 * GB,
               peak_flops_bf16=989 * TFLOPS, peak_flops_fp8=1979 * TFLOPS,
               peak_flops_fp32=494.5 * TFLOPS,
               source="NVIDIA H100 Tensor Core GPU datasheet (SXM5): 989 TFLOPS BF16 dense, "
                      "1,979 FP8, 80 GB HBM3 at 3.35 TB/s"),
    DeviceSpec(name="h200", memory_bytes=141 * GB, hbm_bandwidth=4800 * GB,
               peak_flops_bf16=989 * TFLOPS, peak_flops_fp8=1979 * TFLOPS,
               peak_flops_fp32=494.5 * TFLOPS,
               source="NVIDIA H200 Tensor Core GPU datasheet (SXM): 141 GB HBM3e at 4.8 TB/s"),
    DeviceSpec(name="b200", memory_bytes=180 * GB, hbm_bandwidth=8000 * GB,
               peak_flops_bf16=2250 * TFLOPS, peak_flops_fp8=4500 * TFLOPS,
               peak_flops_fp32=1100 * TFLOPS,
               source="NVIDIA DGX B200 datasheet (per GPU: 180 GB HBM3e usable, 8 TB/s, "
                      "2.25 PFLOPS dense BF16, 4.5 PFLOPS dense FP8)"),
    DeviceSpec(name="mi300x", memory_bytes=192 * GB, hbm_bandwidth=5300 * GB,
               peak_flops_bf16=1307.4 * TFLOPS, peak_flops_fp8=2614.9 * TFLOPS,
               peak_flops_fp32=653.7 * TFLOPS,
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
