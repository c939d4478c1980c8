"""Optimizer offload: a fraction of each rank's optimizer state held and stepped on the host.

nest prices Megatron-Core's hybrid device optimizer (``--optimizer-cpu-offload
--optimizer-offload-fraction F --overlap-cpu-optimizer-d2h-h2d``; core_v0.14.0
``megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py`` ``HybridDeviceOptimizer``),
and DeepSpeed's ZeRO-Offload the same way (``offload_optimizer: {device: cpu}``, the whole
state):

* **What moves.** ``_get_sub_optimizer_param_groups`` walks the rank's (distributed
  optimizer's) shard of parameters and moves them to the host until ``F`` of its
  elements are there. Each moved parameter gets a host fp32 copy (its master weight,
  ``param_update_in_fp32=True``), Adam's two fp32 moments on the host (the CPU optimizer
  is ``torch.optim.AdamW(fused=True)``, ``megatron/core/optimizer/__init__.py``
  ``_get_megatron_optimizer_based_on_param_groups``) and a pinned fp32 gradient buffer
  (``_set_sub_optimizer_grads``): :data:`HOST_BYTES_PER_PARAM` host bytes; the device
  drops its master weight and moments (:attr:`OptimizerSpec.sharded_bytes`). The rest
  stays on the device, stepped by the GPU optimizer on fp32 copies too, so the moments
  are fp32 whatever the job's precision-aware settings (a job with 16- or 8-bit moments
  cannot offload: :func:`offload_ready`).
* **When it runs.** ``step`` queues the gradients' device-to-host copies on their own
  stream, launches the GPU optimizer (which runs while the host works), then steps the
  host parameters one by one as their gradients arrive, each followed by its
  host-to-device copy of the updated weight on a third stream
  (``--overlap-cpu-optimizer-d2h-h2d``, which nest always sets: the three stages
  pipeline over the parameters). One step of the offloaded share therefore takes the
  slowest of its three streams (:func:`host_step_s`): the gradient copies, the host Adam
  (its threads' rate, or :data:`HOST_STEP_BYTES` per parameter at its share of DRAM
  bandwidth) and the weight copies; the step of the rank is the longer of that and the
  GPU optimizer on the rest. Both copies carry fp32 (:data:`COPY_BYTES`): a non-blocking
  copy that changes dtype converts on the GPU (PyTorch ``aten/src/ATen/native/cuda/Copy.cu``
  ``copy_kernel_cuda``, since PR #121341), so the fp32 master goes up whole into a GPU
  temporary before it becomes the bf16 weight, and a bf16 gradient is widened before it
  goes down. The first parameter's fill of the pipeline and that one-tensor temporary
  are left out.
* **What stays.** Parameters kept on the GPU are stepped by Transformer Engine's FusedAdam
  on fp32 clones with fp32 moments (12 bytes, as without offload); with a bf16 gradient
  buffer (``--grad-reduce-in-bf16``) each also keeps an fp32 copy of its gradient from
  one step to the next (``_set_sub_optimizer_grads``): :func:`state_bytes`.
* **The baseline.** Megatron-LM's command line requires ``--use-precision-aware-optimizer``
  with offload (``validate_args``), the launch nest emits; Megatron-Core alone does not,
  and without it the distributed optimizer keeps its fp32 master shard on the GPU too
  (``_build_model_and_main_param_groups``), freeing 8 bytes per offloaded parameter
  instead of 12 (Megatron-Bridge's and NeMo-RL's library launches; see
  bench/fidelity/offload_results.md).
* **Shares.** Every device of a server offloads at once: each gets its share of the
  server's DRAM, its bandwidth and its host link (:meth:`nest.specs.HostSpec.share`).

Offload never shortens a step at the fractions the search tries (the host step of a
quarter of the state is far slower than the GPU step of all of it), and it only moves
bytes off the device, so it only adds feasible plans.
"""

from __future__ import annotations

import numpy as np

from ..errors import SpecError
from ..parallel import check_fraction
from ..specs import DeviceSpec, HostShare, JobSpec, OptimizerSpec

OFFLOAD_FRACTIONS = (0.0, 0.25, 0.5, 0.75, 1.0)
"""The optimizer-offload fractions the search tries on a device with a host."""

HOST_BYTES_PER_PARAM = 16
"""Host bytes per offloaded parameter: fp32 master weight, two fp32 Adam moments and the
pinned fp32 gradient buffer."""

HOST_STEP_BYTES = 28
"""DRAM bytes a fused host AdamW step moves per parameter: it reads the fp32 weight,
gradient and two moments (16) and writes the weight and moments back (12)."""

FP32_BYTES = 4

COPY_BYTES = FP32_BYTES
"""Bytes per parameter of each host-link copy: the gradient into its fp32 host buffer and
the fp32 master back up (converted on the GPU)."""


def offload_ready(job: JobSpec) -> str | None:
    """Why ``job`` cannot offload its optimizer (None: it can): the host step is Adam on
    fp32 state (the hybrid optimizer's, whatever the precision-aware moment dtypes)."""
    opt = job.optimizer
    if opt.name != "adam":
        return f"job.optimizer = {opt.name}: optimizer offload steps Adam (--use-precision-aware-optimizer)"
    if opt.master_bytes != 4 or opt.state_bytes != 8:
        return (f"job.optimizer_state_dtype = {opt.state_dtype or 'custom'}: optimizer offload keeps fp32 master "
                "weights and moments (the hybrid device optimizer's); use --optimizer-state-dtype fp32")
    return None


def offload_fractions(asked, device: DeviceSpec, job: JobSpec) -> tuple[float, ...]:
    """The offload fractions a search tries: ``asked`` (validated; SpecError when it
    needs a host the device has not, or a job that cannot offload), else
    :data:`OFFLOAD_FRACTIONS` where the device has a host and the job can offload, else
    none but 0."""
    if asked is None:
        return OFFLOAD_FRACTIONS if device.host is not None and offload_ready(job) is None else (0.0,)
    fractions = tuple(sorted({check_fraction(f) for f in asked}))
    if any(fractions):
        if device.host is None:
            raise SpecError(f"optimizer_offload = {','.join(map(str, fractions))}: device {device.name} has no "
                            "host memory spec (device.host)")
        reason = offload_ready(job)
        if reason:
            raise SpecError(reason)
    return fractions


def host_step_s(share: HostShare) -> float:
    """Seconds per offloaded parameter of the host's share of the step: the slowest of
    the pipelined gradient copies, the host Adam (its threads' rate, or the DRAM
    bandwidth it streams its state at) and the weight copies."""
    adam = max(1 / share.adam_rate, HOST_STEP_BYTES / share.stream_rate)
    return max(COPY_BYTES / share.copy_rate, adam)


def optimizer_step_s(gpu_s, host_s, fraction) -> np.ndarray:
    """Seconds per parameter of a step that runs ``1 - fraction`` of the state on the GPU
    (``gpu_s`` per parameter) while the host steps the rest (``host_s``)."""
    fraction = np.asarray(fraction, dtype=np.float64)
    return np.where(fraction > 0, np.maximum((1 - fraction) * gpu_s, fraction * host_s), gpu_s)


def host_share_of_step(gpu_s: float, host_s: float, fraction: float) -> float:
    """The part of an optimizer step with ``fraction`` offloaded that the host adds beyond
    the GPU step of the rest (what the time breakdown calls ``offload``), as a share of
    that step."""
    step = float(optimizer_step_s(gpu_s, host_s, fraction))
    return 0.0 if step <= 0 or fraction <= 0 else max(0.0, step - (1 - fraction) * gpu_s) / step


def state_bytes(opt: OptimizerSpec, fraction) -> np.ndarray:
    """Device bytes per (unsharded) parameter of optimizer state left on the device: the
    kept share's master weight and moments, and with offload and a 16-bit gradient buffer
    its fp32 gradient copies."""
    fraction = np.asarray(fraction, dtype=np.float64)
    widened = np.where((fraction > 0) & (opt.grad_bytes < FP32_BYTES), FP32_BYTES, 0.0)
    return (opt.sharded_bytes + widened) * (1 - fraction)


def host_bytes(fraction) -> np.ndarray:
    """Host bytes per (unsharded) parameter of offloaded state."""
    return HOST_BYTES_PER_PARAM * np.asarray(fraction, dtype=np.float64)
