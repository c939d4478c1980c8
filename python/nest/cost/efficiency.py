"""Achievable throughput of one device: GEMMs by shape and dtype, fused attention,
bandwidth-bound kernels (the curves :class:`nest.cost.compute.KernelModel` prices kernels with).

GEMM. A ``[m, k] x [k, n]`` product runs its tensor-core main loop at

    rate(m, n) = peak(dtype) * E(dtype) * w / (w + tail),    w = m n / (tile_m tile_n SMs)

and takes ``max(2 m n k / rate + C / hbm', (A + B + C) / hbm')`` plus its launch, where
``A``, ``B`` are the inputs in the GEMM dtype, ``C`` the 16-bit output and ``hbm' = HBM
bandwidth x hbm_efficiency``. The terms:

* ``E(dtype)``: the fraction of the datasheet peak a large, well-shaped GEMM reaches on
  the device, the *maximum achievable matmul FLOPS* (MAMF) measured by brute-force
  shape search (S. Bekman, *Machine Learning Engineering*, "Maximum Achievable Matmul
  FLOPS comparison table",
  https://github.com/stas00/ml-engineering/blob/master/compute/accelerator/README.md#maximum-achievable-matmul-flops-comparison-table).
  The 16-bit value is the preset's ``DeviceSpec.gemm_efficiency``; 8-bit GEMMs keep the
  measured FP8/BF16 ratio (:attr:`DeviceEfficiency.fp8_ratio`), so an override of
  ``gemm_efficiency`` scales both.
* ``w / (w + tail)``: wave quantization. cuBLAS computes the output in tiles, one per SM
  at a time; a GEMM whose tile count is not a multiple of the SM count leaves SMs idle in
  its last wave (NVIDIA, *Matrix Multiplication Background User's Guide*, "Wave
  Quantization",
  https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/index.html).
  The exact utilisation ``w / ceil(w)`` is a saw-tooth; over a uniformly distributed
  last wave it averages ``(j + 1/2) / (j + 1)`` between ``j`` and ``j + 1`` waves, which
  ``w / (w + 1/2)`` interpolates smoothly (tail = 1/2). The smooth form is what
  cuBLAS's choice among several tile shapes makes of the saw-tooth, and keeps the
  throughput monotone in every dimension, so a planner never prefers a configuration
  for an artefact of the tile grid. Small GEMMs (thin tensor-parallel slices, experts
  with few tokens) fill a fraction of a wave and fall well below ``E``.
* ``C / hbm'``: each output tile is written after its main loop (the epilogue). Relative
  to the main loop it costs ``k_half / k`` with ``k_half = out_bytes x rate / (2 x hbm')``
  (~150 for BF16 on A100, ~420 for FP8 on H100), so shallow reductions (``k`` of a few
  thousand: the attention output projection under tensor parallelism, 4k-hidden models)
  lose 5-10%, and FP8, whose main loop is twice as fast, loses twice as much. This is
  why the best FP8 shapes of the MAMF search have ``K`` of 14k while the best BF16
  shapes on A100 have 5k.
* Low arithmetic intensity (small ``k`` or token counts) is the HBM roofline.

Throughput ``2 m n k / time`` is therefore non-decreasing in ``m``, ``n`` and ``k``, and
saturates at ``E(dtype) x peak(dtype)`` as all three grow (tests/test_efficiency.py).

What stays 16-bit under FP8: fused attention, the batched score and value matmuls of
unfused attention, the output layer and MoE routers (Megatron builds them outside
Transformer Engine); :meth:`nest.cost.compute.KernelModel.bmm` prices them.

FP8. NeMo and Megatron run the linear layers' GEMMs in FP8 with Transformer Engine and
everything else (attention, norms, activations, communication) in BF16
(``--dtype fp8`` means exactly that here). Each FP8 GEMM first quantizes its activation
operand (:func:`fp8_quantize`, by recipe; TE v2.7 and v2.18
``transformer_engine/pytorch/csrc/quantizer.cpp``): the cast reads the BF16 tensor and
writes an FP8 copy plus, on Hopper, the FP8 transpose its TN-only tensor cores need for
the weight-gradient GEMM, 2 + 1 + 1 = 4 bytes per element; Blackwell runs non-TN FP8
GEMMs (``nvte_is_non_tn_fp8_gemm_supported``) and keeps only the row-wise copy, 3 bytes.
Delayed scaling casts with the stored scale in one fused ``cast_transpose`` (plus the
scale's reciprocal, ``Float8Quantizer::create_tensor``: 2 launches); per-tensor current
scaling (``tensorwise``, ``Float8CurrentScalingQuantizer::quantize_impl``) first reads
the tensor for its amax, then computes the scale, then casts: 2 more bytes per element,
3 launches. Block scaling (``blockwise``, ``Float8BlockQuantizer::quantize``: one
``nvte_quantize_v2``) finds each 1 x 128 block's amax as it casts, writing the row-wise and
the transposed copy with an fp32 scale per block each, 4 + 8/128 bytes per element in one
launch; Transformer Engine runs it on Hopper only (``pytorch/fp8.py``
``check_fp8_block_scaling_support``: "FP8 block scaled GEMM requires Hopper and CUDA >=
12.9"), and its GEMMs are priced at the per-tensor FP8 efficiency (no block-scaled
measurement of the MAMF kind is published). MXFP8 (``mxfp8``, Blackwell's block scaling:
``MXFP8Quantizer::quantize``, one ``nvte_quantize_v2``) scales each 1 x 32 block with an
8-bit power of two and writes a row-wise copy and a column-wise one (scaled along the
other axis: not a transpose, so Blackwell's non-TN GEMMs do not spare it), 4 + 2/32 bytes
per element in one launch; Transformer Engine runs it on compute capability 10.x only
(``pytorch/fp8.py`` ``check_mxfp8_support``: "Device compute capability 10.0 or higher
required for MXFP8 execution", and not on 12.0+), and its GEMMs, Blackwell's native
block-scaled tensor-core path, are priced at the per-tensor FP8 efficiency too. FP8 weight copies are cached across the
micro-batches of a step (``is_first_microbatch``) and are not charged.

Fused attention runs at ``attention_efficiency`` of the 16-bit peak forward (FLOPs of
causal attention counted at half, the FlashAttention convention) and at
``attention_efficiency x attention_backward_ratio`` backward, whose FLOPs are 2.5x the
forward's: FlashAttention-2 reaches 50-73% of the A100 peak forward and less backward
(Dao 2023, arXiv:2307.08691); FlashAttention-3 and cuDNN reach ~600-640 TFLOP/s forward
at head dim 128 and 2k-8k tokens on H100 (Shah et al. 2024, arXiv:2407.08608, Fig. 5)
and ~450-550 backward.

Element-wise kernels stream at ``hbm_efficiency`` of the HBM bandwidth and every kernel
pays ``kernel_overhead_s`` (launch and the drain/fill between dependent kernels).

Devices without an entry in :data:`DEVICE_EFFICIENCY` (user-defined ones) use their
``DeviceSpec`` fractions with no wave term and no FP8 penalty: the curve is then the
plain roofline nest used before.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import SpecError
from ..specs import DeviceSpec

MAMF_SOURCE = ("S. Bekman, Machine Learning Engineering, Maximum Achievable Matmul FLOPS table: "
               "https://github.com/stas00/ml-engineering/blob/master/compute/accelerator/README.md"
               "#maximum-achievable-matmul-flops-comparison-table")

WAVE_SOURCE = ("NVIDIA Matrix Multiplication Background User's Guide, wave quantization: "
               "https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/index.html")

FP8_CAST_BYTES = 4.0
"""Bytes moved per element of the activation operand when an FP8 GEMM quantizes it with
a known scale on Hopper: read BF16 (2), write FP8 (1) and its FP8 transpose (1)."""

BLACKWELL_FP8_CAST_BYTES = 3.0
"""The same on Blackwell, whose FP8 GEMMs take non-transposed operands: no transpose."""

AMAX_PASS_BYTES = 2.0
"""The extra read of the BF16 operand per element that current scaling's amax takes."""

BLOCK_SCALE_BYTES = 2 * 4 / 128
"""The fp32 scales of block scaling per element: one per 128-element block of the row-wise
and of the transposed copy."""

MX_COPY_BYTES = 1.0 + 1 / 32
"""Bytes per element of one MXFP8 copy: the FP8 value and its share of the 8-bit scale of
its 32-element block."""

MX_CAST_BYTES = 2.0 + 2 * MX_COPY_BYTES
"""Bytes per element of an MXFP8 quantization: read BF16, write the row-wise and the
column-wise copies."""

FP8_QUANTIZE_LAUNCHES = {"delayed": 2, "tensorwise": 3, "blockwise": 1, "mxfp8": 1}
"""Kernels one FP8 quantization launches, by recipe (see the module docstring)."""

WAVE_TAIL = 0.5
"""Average idle fraction of the last wave, in waves (see the module docstring)."""


@dataclass(frozen=True)
class DeviceEfficiency:
    """Shape-dependent efficiency terms of one device preset (see the module docstring).

    ``sms`` and ``tile`` size a wave (``sms`` output tiles of ``tile_m x tile_n``);
    ``wave_tail`` 0 disables the wave term. ``fp8_ratio`` is MAMF(FP8) / MAMF(BF16) as
    fractions of their peaks; ``attention_backward_ratio`` the backward fused-attention
    efficiency relative to the forward one.
    """

    sms: int
    tile_m: int
    tile_n: int
    fp8_ratio: float = 1.0
    attention_backward_ratio: float = 1.0
    wave_tail: float = WAVE_TAIL
    fp8_cast_bytes: float = FP8_CAST_BYTES
    block_scaling: bool = False  # FP8 block-scaled GEMMs (Hopper)
    mx_scaling: bool = False  # MXFP8 GEMMs (Blackwell, compute capability 10.x)
    source: str = ""

    @property
    def wave_elements(self) -> float:
        """Output elements computed in one wave (all SMs busy with one tile each)."""
        return float(self.sms * self.tile_m * self.tile_n)


# Per preset. SM counts are from the architecture whitepapers (A100: 108 SMs, H100 SXM5
# and H200: 132, B200: 148 SMs over two dies; MI300X: 304 CUs). Tiles are the large
# cuBLAS/hipBLASLt tiles the MMA guide lists for these parts (256x128 on A100, 128x256
# warp-specialised on Hopper, 256x256 on MI300X). FP8 ratios: MAMF FP8 / MAMF BF16 from
# MAMF_SOURCE (H100 SXM 70.9% / 80.3%, H200 73.4% / 80.3%, B200 76.3% / 77.6%).
# Attention backward ratios: A100 0.52 / 0.62 (FlashAttention-2), Hopper 0.48 / 0.60
# (FlashAttention-3 / cuDNN).
DEVICE_EFFICIENCY: dict[str, DeviceEfficiency] = {
    "a100-40gb": DeviceEfficiency(108, 256, 128, 1.0, 0.52 / 0.62, source=MAMF_SOURCE),
    "a100-80gb": DeviceEfficiency(108, 256, 128, 1.0, 0.52 / 0.62, source=MAMF_SOURCE),
    "h100-sxm": DeviceEfficiency(132, 128, 256, 0.709 / 0.803, 0.48 / 0.60, block_scaling=True, source=MAMF_SOURCE),
    "h200": DeviceEfficiency(132, 128, 256, 0.734 / 0.803, 0.48 / 0.60, block_scaling=True, source=MAMF_SOURCE),
    "b200": DeviceEfficiency(148, 256, 128, 0.763 / 0.776, 0.48 / 0.60, fp8_cast_bytes=BLACKWELL_FP8_CAST_BYTES,
                             mx_scaling=True, source=MAMF_SOURCE),
    "mi300x": DeviceEfficiency(304, 256, 256, 1.0, 1.0, source=MAMF_SOURCE),
}
"""Shape terms by device preset name; the NEST paper's renamed H100 (``h100-90gib``)
is the H100's silicon."""
DEVICE_EFFICIENCY["h100-90gib"] = DEVICE_EFFICIENCY["h100-sxm"]
# GB200's GPU is the B200's silicon (two dies, 148 SMs) at a higher power limit; the MAMF
# table has no GB200 row, so it keeps the B200's curve (before: none, a plain roofline
# without wave or FP8 cast terms)
DEVICE_EFFICIENCY["gb200"] = DEVICE_EFFICIENCY["b200"]
# GH200's GPU is the H100's silicon (132 SMs, the H100's MAMF: its preset's gemm_efficiency)
# with faster HBM; without the H100's curve its FP8 GEMMs ran at the BF16 fraction of the
# FP8 peak (12% faster than the H100's measured FP8) and quantized for free
DEVICE_EFFICIENCY["gh200"] = DEVICE_EFFICIENCY["h100-sxm"]

GENERIC = DeviceEfficiency(1, 1, 1, wave_tail=0.0, fp8_cast_bytes=0.0,
                           source="no device curve: DeviceSpec fractions as a plain roofline")
"""The curve of devices without an entry: no wave term, no FP8 cast traffic."""


def device_efficiency(device: DeviceSpec) -> DeviceEfficiency:
    """The shape terms of ``device`` (by preset name; :data:`GENERIC` otherwise)."""
    return DEVICE_EFFICIENCY.get(device.name, GENERIC)


def fp8_quantize(curve: DeviceEfficiency, recipe: str, device: str = "") -> tuple[float, int]:
    """``(bytes per element, launches)`` of quantizing one BF16 GEMM operand to FP8 under
    ``recipe`` on a device with ``curve`` (``(0, 0)`` on devices without a curve); a
    SpecError for block scaling on a device whose curve has none (``device``: its name)."""
    if not curve.fp8_cast_bytes:
        return 0.0, 0
    if recipe == "blockwise":
        if not curve.block_scaling:
            raise SpecError(f"job.fp8_recipe = 'blockwise': device {device} has no FP8 block-scaled GEMMs "
                            "(Transformer Engine v2.7 pytorch/fp8.py check_fp8_block_scaling_support: Hopper only); "
                            "closest expressible: fp8_recipe tensorwise")
        return curve.fp8_cast_bytes + BLOCK_SCALE_BYTES, FP8_QUANTIZE_LAUNCHES[recipe]
    if recipe == "mxfp8":
        if not curve.mx_scaling:
            raise SpecError(f"job.fp8_recipe = 'mxfp8': device {device} has no MXFP8 GEMMs (Transformer Engine "
                            "v2.7 pytorch/fp8.py check_mxfp8_support: compute capability 10.x, Blackwell); "
                            "closest expressible: fp8_recipe " + ("blockwise" if curve.block_scaling else "tensorwise"))
        return MX_CAST_BYTES, FP8_QUANTIZE_LAUNCHES[recipe]
    amax = AMAX_PASS_BYTES if recipe == "tensorwise" else 0.0
    return curve.fp8_cast_bytes + amax, FP8_QUANTIZE_LAUNCHES[recipe]


def gemm_fraction(device: DeviceSpec, dtype_bytes: int) -> float:
    """Fraction of the dtype's peak a large GEMM reaches (``E`` of the module docstring)."""
    curve = device_efficiency(device)
    return device.gemm_efficiency * (curve.fp8_ratio if dtype_bytes == 1 else 1.0)


def wave_efficiency(device: DeviceSpec, m: float, n: float, batch: float = 1) -> float:
    """``w / (w + tail)`` for ``batch`` independent ``m x n`` outputs (1 without a curve)."""
    curve = device_efficiency(device)
    if curve.wave_tail == 0:
        return 1.0
    waves = m * n * batch / curve.wave_elements
    return waves / (waves + curve.wave_tail)


def gemm_throughput(device: DeviceSpec, dtype: str, m: float, n: float, k: float,
                    hbm_efficiency: float | None = None) -> float:
    """Achieved FLOP/s of one ``[m, k] x [k, n]`` GEMM in ``dtype`` (launch overhead and
    FP8 casts excluded): the curve of the module docstring, for inspection and tests."""
    dtype_bytes = {"fp8": 1, "bf16": 2, "fp16": 2, "fp32": 4}[dtype]
    rate = device.peak_flops(dtype) * gemm_fraction(device, dtype_bytes) * wave_efficiency(device, m, n)
    memory = device.hbm_bandwidth * (device.hbm_efficiency if hbm_efficiency is None else hbm_efficiency)
    out = m * n * (2 if dtype_bytes == 1 else dtype_bytes)
    traffic = (m * k + k * n) * dtype_bytes + out
    flops = 2.0 * m * n * k
    return flops / max(flops / rate + out / memory, traffic / memory)
