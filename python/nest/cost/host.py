"""Host (CPU) submission time of a layer pass: when the host, not the GPU, sets the pace.

In eager PyTorch every kernel a layer runs is first dispatched by the host: Python, the
pybind11 boundary, autograd's recording of the op, the ATen dispatcher, the backend's
choice of algorithm and ``cudaLaunchKernel``, about 5 to 25 us per op whatever the
kernel's size. The host normally runs ahead of the GPU and this work hides behind the
kernels queued before it; a pass whose kernels are shorter than their dispatch (small
micro-batches, narrow tensor-parallel slices, fine-grained experts: TE's ``GroupedLinear``
issues one cuBLASLt GEMM per local expert) runs at the host's pace instead, and the GPU
idles between kernels.

The model: a node's pass (forward, backward, recomputation) takes

    max(gpu_s + syncs x SYNC_GAP_OPS x HOST_OP_S, host_ops x HOST_OP_S)

``host_ops`` are the calls into PyTorch (or Transformer Engine's and DeepEP's C++
entry points, and each cuBLASLt launch of a grouped GEMM) that Megatron-Core
``core_v0.14.0`` with Transformer Engine v2.7 makes in one pass of the node, counted from
their source (:func:`block_host_ops`; views, allocations and collectives count, pure
Python does not): ~77 per dense layer forward and ~95 backward, a MoE layer's router,
token dispatcher and grouped experts ~120 + 2E forward and ~80 + 10E backward for E
local experts (GroupedLinear launches one cuBLASLt GEMM per expert and allocates and
clears a gradient per expert in its backward). Recomputed modules repeat their share of
the forward's calls (the share of its kernels, counted by :class:`LaunchCounter`: the
same node code with every kernel worth one launch). Nodes without such a count
(embedding, output layer) count one call per kernel.

Taking the maximum per node rather than over a whole pass is exact for identical
transformer blocks (the sums of equal terms) and is what a host synchronisation makes of
every MoE layer: Megatron-Core's alltoall dispatcher waits on the GPU once per dropless
MoE forward for the token counts that size its all-to-all (``token_dispatcher.py``
``MoEAlltoAllTokenDispatcher.token_dispatch``, ``d2h_event.synchronize()``), DeepEP's
dispatch (the flex dispatcher) busy-waits on the host for its receive counts
(``deep_ep.cpp`` ``Buffer::intranode_dispatch``), so the host never starts a MoE layer
ahead of the GPU, and after the wait the GPU idles while the host issues the calls up to
the first expert GEMM (:data:`SYNC_GAP_OPS`). Drop-and-pad (a capacity factor under the
alltoall dispatcher) has static shapes and does not wait (``MoEAlltoAllTokenDispatcher.
preprocess``). Backward passes reuse the counts; a recomputed MoE forward waits again.

The host time is a floor: it only ever lengthens a pass, and the part of a pass it adds is
reported as ``host`` in the time breakdown (``host_s``, a part of ``compute_s``). Each call
takes :data:`HOST_OP_S` on the x86 servers it was measured on, times the host's
``dispatch_slowdown`` (:func:`dispatch_s`): Grace superchips (GH200, GB200) dispatch the
same call 2.5-2.75x slower (TransformerEngine issue #2053, :mod:`nest.presets.hosts`), so
their fast GPUs wait on the host at larger layer slices than a DGX's. Not modelled: CUDA
graphs (which replace a captured module's calls by one launch), the combined 1F1B's other
micro-batch filling the GPU during a wait.
"""

from __future__ import annotations

import numpy as np

from ..specs import DeviceSpec
from .compute import KernelModel

HOST_OP_S = 12e-6
"""Host seconds per counted call, the Python around it included: Transformer Engine's
column-parallel linear forward takes 115 us of CPU in Megatron-Core (TransformerEngine
PR #1191, after its optimisations; 140 us before), ``te.Linear``'s 90-100 us on Grace
hosts (issue #2053), for the ~8-10 calls counted in it; one bare PyTorch op's dispatch
path is 5-25 us (J. Lin, "From PyTorch op to kernel launch",
https://jiahuanglin.xyz/all_lessons/gpu_kernel_serving/18_pytorch_to_kernel.html)."""

SYNC_GAP_OPS = 26
"""Calls the host makes after a MoE forward's wait before the GPU has an expert GEMM to
run: the all-to-all (9), the chunk sort by local expert (7), the experts' entry (2) and
the first GroupedLinear up to its GEMMs (~8) (core_v0.14.0 ``token_dispatch``,
``dispatch_postprocess``, ``TEGroupedMLP.forward``)."""

DENSE_OPS = {"fwd": 77, "bwd": 95}
"""Calls of one dense layer pass (bf16, TP with sequence parallelism): fused norm and QKV
(10 / 15), the QKV split and query reshape (3 / 3), q and k norms (12 / 16), RoPE (6 / 4),
fused attention (12 / 8), output projection (8 / 8), residual (2 / 1), fused norm and fc1
(10 / 15), SwiGLU (2 / 2), fc2 (8 / 8), residual (4 / 1), backward node bookkeeping (- / 15)
(core_v0.14.0 ``transformer_layer.py``, TE v2.7 ``layernorm_linear.py``, ``linear.py``)."""

DENSE_FP8_OPS = {"fwd": 8, "bwd": 15}
"""What FP8 (delayed scaling) adds to them: the activation and gradient quantizers."""

ATTENTION_OPS = {"fwd": 50, "bwd": 60}
"""The attention half of a layer and the MLP's norm (of :data:`DENSE_OPS`)."""

MOE_OPS = {"fwd": 120, "bwd": 80}
"""Calls of a MoE layer's router (softmax top-k with its auxiliary loss: 30 / 25),
token dispatcher (alltoall: 70 / 35) and grouped experts' fixed part (20 / 20)
(``router.py`` ``TopKRouter``, ``token_dispatcher.py``, ``experts.py`` ``TEGroupedMLP``)."""

MOE_OPS_PER_EXPERT = {"fwd": 2, "bwd": 10}
"""And per local expert: a cuBLASLt GEMM per GroupedLinear forward; backward two GEMMs,
a dummy weight gradient, a cleared tensor and a gradient hook per GroupedLinear (TE v2.7
``grouped_linear.py``, ``gemm.cpp`` ``te_general_grouped_gemm``)."""

SHARED_EXPERT_OPS = {"fwd": 21, "bwd": 20}
"""A shared expert (a dense MLP without its norm) and its sum with the routed output."""

MOE_FP8_OPS = {"fwd": 10, "bwd": 14}
"""What FP8 adds to a MoE layer: the attention half's quantizers and the experts'."""


class LaunchCounter:
    """A :class:`~nest.cost.compute.KernelModel` look-alike whose every method returns the
    number of kernels the priced call launches (scalars or arrays alike), instead of
    their seconds."""

    def __init__(self, kernels: KernelModel):
        self.cast_launches = kernels.cast_launches if kernels.cast_bytes else 0

    @staticmethod
    def _one(*shape):
        return np.ones_like(np.asarray(sum(np.asarray(x, dtype=np.float64) for x in shape)))

    def gemm(self, m, n, k):
        """One GEMM, plus the FP8 quantization of its input when FP8."""
        return self._one(m, n, k) * (1 + self.cast_launches)

    def bmm(self, m, n, k, batch):
        """One strided-batched launch."""
        return self._one(m, n, k, batch)

    def stream(self, nbytes, kernels=1):
        """``kernels`` bandwidth-bound kernels."""
        return self._one(nbytes) * kernels

    def attention(self, flops):
        """One fused attention forward."""
        return self._one(flops)

    def attention_backward(self, flops):
        """One fused attention backward."""
        return self._one(flops)


def block_host_ops(moe: bool, fp8: bool, experts_here=0, shared_experts: int = 0) -> dict:
    """``{"fwd": calls, "bwd": calls}`` of one transformer layer's passes (scalars, or
    arrays over ``experts_here``, the local experts of a MoE layer)."""
    if not moe:
        return {p: DENSE_OPS[p] + (DENSE_FP8_OPS[p] if fp8 else 0) for p in ("fwd", "bwd")}
    return {p: ATTENTION_OPS[p] + MOE_OPS[p] + MOE_OPS_PER_EXPERT[p] * np.asarray(experts_here)
            + (SHARED_EXPERT_OPS[p] if shared_experts else 0) + (MOE_FP8_OPS[p] if fp8 else 0)
            for p in ("fwd", "bwd")}


def dispatch_s(device: DeviceSpec) -> float:
    """Host seconds per counted call on ``device``'s host (an x86 server's when it has none
    on record)."""
    return HOST_OP_S * (device.host.dispatch_slowdown if device.host is not None else 1.0)


def host_bound(gpu_s, host_ops, syncs=0, op_s: float = HOST_OP_S):
    """``(seconds, host part)`` of a pass of ``gpu_s`` GPU seconds whose host makes
    ``host_ops`` calls of ``op_s`` seconds each and waits on the GPU ``syncs`` times (see
    the module docstring)."""
    gap = SYNC_GAP_OPS * op_s * np.asarray(syncs, dtype=np.float64)
    seconds = np.maximum(gpu_s + gap, np.asarray(host_ops, dtype=np.float64) * op_s)
    return seconds, seconds - gpu_s
