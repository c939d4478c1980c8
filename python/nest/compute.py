"""Kernel times on one device: a roofline per kernel with documented efficiencies.

A GEMM takes ``max(flops / (peak * gemm_efficiency), bytes / (hbm * hbm_efficiency))``
plus a launch overhead: large GEMMs are compute-bound at the device's achievable
fraction of peak, thin ones (small token counts, narrow tensor-parallel slices) fall
to the memory roofline. Element-wise kernels (norms, activations, dropout, residuals,
softmax) are bandwidth-bound. Fused attention runs at ``attention_efficiency`` of peak.
"""

from __future__ import annotations

import numpy as np

from .specs import DeviceSpec


class KernelModel:
    """Prices kernels for one device and dtype."""

    def __init__(self, device: DeviceSpec, dtype_bytes: int, peak_flops: float):
        self.device = device
        self.dtype_bytes = dtype_bytes
        self.compute_rate = peak_flops * device.gemm_efficiency
        self.attention_rate = peak_flops * device.attention_efficiency
        self.memory_rate = device.hbm_bandwidth * device.hbm_efficiency
        self.overhead = device.kernel_overhead_s

    def gemm(self, m: float, n: float, k: float) -> float:
        """``[m, k] x [k, n]`` in the training dtype."""
        flops = 2.0 * m * n * k
        traffic = (m * k + k * n + m * n) * self.dtype_bytes
        return max(flops / self.compute_rate, traffic / self.memory_rate) + self.overhead

    def gemms(self, m, n, k) -> np.ndarray:
        """:meth:`gemm` elementwise over numpy arrays (the same operations in the same
        order, so every element equals the scalar result bit for bit)."""
        flops = 2.0 * m * n * k
        traffic = (m * k + k * n + m * n) * self.dtype_bytes
        return np.maximum(flops / self.compute_rate, traffic / self.memory_rate) + self.overhead

    def stream(self, nbytes: float, kernels: int = 1) -> float:
        """Bandwidth-bound kernels moving ``nbytes`` in total."""
        return nbytes / self.memory_rate + kernels * self.overhead

    def attention(self, flops: float) -> float:
        """A fused (flash) attention kernel performing ``flops``."""
        return flops / self.attention_rate + self.overhead
