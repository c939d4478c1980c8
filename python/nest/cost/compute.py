"""Kernel times on one device, from the efficiency curves of :mod:`nest.cost.efficiency`.

A GEMM takes ``max(flops / (peak * E * wave) + output / hbm', bytes / hbm')`` plus a
launch overhead (``hbm' = hbm * hbm_efficiency``; writing the output tile follows each
tile's main loop): large GEMMs are compute-bound at the device's achievable fraction ``E``
of the dtype's peak, GEMMs that fill only part of the last wave of tiles lose the idle
SMs, thin ones (small token counts, narrow tensor-parallel slices) fall to the memory
roofline. FP8 GEMMs also quantize their activation operand (a bandwidth-bound cast).
Batched attention matmuls (without fused attention) and fused attention stay in 16 bits
under FP8. Element-wise kernels (norms, activations, dropout, residuals, softmax) are
bandwidth-bound.

Every method takes scalars or numpy arrays alike (elementwise): the cost model prices
many layer configurations at once (:mod:`nest.cost.nodes`).
"""

from __future__ import annotations

import numpy as np

from ..specs import DeviceSpec, JobSpec
from .efficiency import device_efficiency, fp8_quantize, gemm_fraction

FLASH_BACKWARD_FACTOR = 2.5
"""Fused attention backward recomputes the scores: 2.5x the forward FLOPs (FlashAttention-2)."""


class KernelModel:
    """Prices kernels for one device and training dtype (``dtype_bytes`` 1 is FP8 GEMMs
    with 16-bit activations under ``fp8_recipe``, 2 is BF16/FP16, 4 is FP32)."""

    def __init__(self, device: DeviceSpec, dtype_bytes: int, peak_flops: float, fp8_recipe: str = "delayed"):
        curve = device_efficiency(device)
        self.device = device
        self.dtype_bytes = dtype_bytes
        self.curve = curve
        # 16-bit (or FP32) operands of everything that is not a linear layer's GEMM
        act_bytes = 2 if dtype_bytes == 1 else dtype_bytes
        act_peak = device.peak_flops("bf16") if dtype_bytes == 1 else peak_flops
        self.out_bytes = act_bytes  # GEMMs write their output in the activation dtype
        self.compute_rate = peak_flops * gemm_fraction(device, dtype_bytes)
        self.bmm_rate = act_peak * gemm_fraction(device, act_bytes)
        self.wave_elements = curve.wave_elements
        self.wave_tail = curve.wave_tail
        self.cast_bytes, self.cast_launches = (fp8_quantize(curve, fp8_recipe, device.name) if dtype_bytes == 1
                                               else (0.0, 0))
        self.act_bytes = act_bytes
        self.attention_rate = act_peak * device.attention_efficiency
        self.attention_backward_rate = self.attention_rate * curve.attention_backward_ratio
        self.memory_rate = device.hbm_bandwidth * device.hbm_efficiency
        self.overhead = device.kernel_overhead_s

    @classmethod
    def for_job(cls, device: DeviceSpec, job: JobSpec) -> "KernelModel":
        """The kernels ``job`` runs on ``device``: its dtype's peak and its FP8 recipe."""
        return cls(device, job.dtype_bytes, device.peak_flops(job.dtype), job.fp8_recipe)

    # -- GEMMs of the linear layers (training dtype) -----------------------------------

    def _matmul(self, m, n, k, batch, rate, in_bytes, out_bytes):
        """The roofline of ``batch`` ``[m, k] x [k, n]`` products: the main loop at
        ``rate`` (reduced by the wave tail) plus writing the output tile, or the whole HBM
        traffic, whichever is longer, plus one launch."""
        flops = 2.0 * m * n * k * batch
        if self.wave_tail:
            waves = m * n * batch / self.wave_elements
            rate = rate * (waves / (waves + self.wave_tail))
        out = m * n * out_bytes * batch
        traffic = (m * k + k * n) * in_bytes * batch + out
        return np.maximum(flops / rate + out / self.memory_rate, traffic / self.memory_rate) + self.overhead

    def gemm(self, m, n, k):
        """``[m, k] x [k, n]`` in the training dtype (FP8: plus the cast of ``[m, k]``)."""
        time = self._matmul(m, n, k, 1, self.compute_rate, self.dtype_bytes, self.out_bytes)
        if self.cast_bytes:
            time = time + (m * k * self.cast_bytes / self.memory_rate + self.cast_launches * self.overhead)
        return time

    # -- 16-bit matmuls: attention scores and values without fusion (batched), the output
    # layer and MoE routers (batch 1), which FP8 recipes keep in BF16 ----------------------

    def bmm(self, m, n, k, batch):
        """``batch`` independent ``[m, k] x [k, n]`` products in one strided-batched launch,
        in the activation dtype (equal to :meth:`gemm` when the training dtype is 16-bit)."""
        return self._matmul(m, n, k, batch, self.bmm_rate, self.act_bytes, self.act_bytes)

    # -- bandwidth-bound kernels and fused attention (scalars or arrays) --------------

    def stream(self, nbytes, kernels=1):
        """Bandwidth-bound kernels moving ``nbytes`` in total."""
        return nbytes / self.memory_rate + kernels * self.overhead

    def attention(self, flops):
        """A fused (flash) attention forward kernel performing ``flops``."""
        return flops / self.attention_rate + self.overhead

    def attention_backward(self, flops):
        """The backward of a fused attention whose forward performs ``flops``: 2.5x the
        FLOPs at the backward efficiency."""
        return FLASH_BACKWARD_FACTOR * flops / self.attention_backward_rate + self.overhead
