"""Activation offload: the first ``N`` transformer layers' activations held on the host
between their forward and their backward.

nest prices Megatron-Core's layer offload (``TransformerConfig.cpu_offloading`` with
``cpu_offloading_num_layers = N``; core_v0.14.0 and main ``2a75ac1``
``megatron/core/transformer/transformer_block.py`` pass it, with ``model_layers =
num_layers``, to Transformer Engine's ``get_cpu_offload_context`` and run every layer's
forward inside the context it returns), as one of two Transformer Engine implementations
runs it (``handler``; :data:`nest.cost.activations.OFFLOAD_HANDLERS`):

``v1``: TE 2.7's ``AsyncDoubleBufferGroupOffloadHandler`` (``transformer_engine/pytorch/cpu_offload.py``;
TE >= 2.10 keeps it as ``cpu_offload_v1.py``, run with ``NVTE_CPU_OFFLOAD_V1=1``), what
nest prices by default and what its Megatron launch notes ask for:

* **What moves.** Layers ``0 .. N-1`` ("groups") offload the tensors TE's modules mark
  (:meth:`nest.cost.activations.Activations.offloaded`: what a layer stops holding, and
  what its copies carry). Each copy lands in a new pinned host tensor, so a rank's host
  holds every offloaded layer's copies of one micro-batch at once.
* **When it waits.** The handler's ``layer_window_map`` (:func:`window_map`) spreads the
  groups over the layers: group ``k + 1``'s copies are issued on a device-to-host stream
  when layer ``w_k`` ends, and the compute stream waits for them (and frees them) when
  layer ``w_{k+1}`` ends (group 0's are issued after layer 0). In the backward, group
  ``k``'s reload is issued on a host-to-device stream before layer ``w_k``'s backward
  and waited for before layer ``w_{k-1}``'s (group 0's before layer 0's). A copy that
  outlasts the layers between its issue and its wait stalls the compute stream: the
  step charges that stall (:func:`stall_s`), per micro-batch, and nothing else (the
  copies run on their own streams over the host link, at the rank's share of it when
  every GPU of the server copies). The layers' kernel times bound the windows, which
  leaves out the collectives on the compute stream (a conservative window).
* **Memory.** The handler frees group ``k`` at ``w_k``'s end; the last group, ``N - 1``,
  at the last layer's (``w_{N-1} = L - 1``). The most a rank then holds is every
  layer's activations but the first ``N``'s freed bytes, and one more group while the
  last layer runs: that group counts as a transient buffer beside the output layer's.

``v2``: TE >= 2.10's default, ``DefaultOffloadSynchronizer`` (TE 2.18 ``cpu_offload.py``;
Megatron-Bridge's container runs it since "Switch to new offloading path", #3193, which
commented out its ``NVTE_CPU_OFFLOAD_V1=1``):

* **What moves.** Every tensor layers ``0 .. N-1`` save but parameters, weights and tensors
  under 256Ki elements (:meth:`nest.cost.activations.Activations.offloaded`), each storage
  copied once into a new pinned host tensor (``OffloadableLayerState.start_offload``).
* **When it waits.** Layer ``i``'s copies are queued on one offload stream when layer
  ``i + 1`` begins (each waits for its tensor's event); the compute stream waits for them
  and frees them before layer ``L - N + i`` (``finish_offload_map``). In the backward
  layer ``i``'s reload is queued before layer ``L - 1 - N + i``'s backward, after what
  the compute stream has queued (``start_reload``: ``offload_stream.wait_stream``), and
  each tensor is waited for when its backward pops it, which :func:`stall_s_v2` takes
  as before layer ``i``'s backward.
* **Memory.** At most ``L - N`` layers' activations are on the device at any time
  ("At most (model_layers - num_layers) sets of activations are on GPU", TE 2.18
  ``docs/features/other_optimizations/cpu_offloading``): layer ``N - 1``'s are freed
  before the last layer runs, so no group is in flight beside the output layer, and no
  layer is offloaded but the first ``N``. Only what it keeps under 256Ki elements (its
  norms' statistics at small micro-batches) stays of an offloaded layer.

Which one a plan gets: ``JobSpec`` has no field for it yet, and the scenario calls
:func:`apply` (and :class:`~nest.cost.activations.Activations` reads the job) with the
default, ``v1``; a Bridge recipe on TE >= 2.10 without ``NVTE_CPU_OFFLOAD_V1=1`` runs
``v2``, which holds no group in flight and hides its copies over ``L - N - 1`` layers.

Both:

* **Rules.** Megatron-Core rejects offload with pipeline parallelism and with
  activation recomputation (``TransformerConfig.__post_init__``: "Currently there is no
  support for Pipeline parallelism with CPU offloading", "CPU offloading does not work
  when activation recomputation is enabled") and ``N >= num_layers``; the search applies
  the first two to every framework (it models only these implementations) and the
  frameworks' own rules say which run it at all.

Offload only moves bytes off the device and only adds stalls, so it only adds feasible
plans and never shortens a step.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import SpecError
from ..specs import DeviceSpec, ModelSpec


def offload_layer_counts(asked: Sequence[int], model: ModelSpec, device: DeviceSpec | None) -> tuple[int, ...]:
    """The asked offloaded-layer counts, checked (sorted, distinct): integers from 0 to
    ``num_layers - 1`` (Megatron-Core: "CPU offloading can be done only for layers less
    than num_layers"), and a host to offload to when any is positive."""
    counts = []
    for n in asked:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 0 <= int(n) < model.num_layers:
            raise SpecError(f"activation_offload = {n!r}: must be a whole number of layers from 0 to "
                            f"{model.num_layers - 1} (the model has {model.num_layers})")
        counts.append(int(n))
    if any(counts) and device is not None and device.host is None:
        raise SpecError(f"activation_offload = {max(counts)}: device {device.name} has no host memory to offload to "
                        "(give the device a host)")
    if any(counts) and model.kv_lora_rank:
        raise SpecError(f"activation_offload = {max(counts)}: offload of latent attention (MLA, model = "
                        f"{model.name}) is not modelled")
    return tuple(sorted(set(counts)))


def window_map(layers: int, groups: int) -> np.ndarray:
    """Transformer Engine's ``layer_window_map`` (TE 2.7 ``AsyncDoubleBufferGroupOffloadHandler.__init__``):
    per offloaded group ``k``, the layer at whose end the compute stream waits for (and
    frees) its copies."""
    window, constant = np.zeros(groups, dtype=np.int64), 0
    for i in range(groups):
        window[i] = layers // groups * (i + 1) - 1
        if i < layers % groups:
            window[i] += i + 1
            constant = i + 1
        else:
            window[i] += constant
    return window


def stall_s(groups: int, fwd_s: np.ndarray, bwd_s: np.ndarray, copy_s: np.ndarray, reload_s: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds per micro-batch the compute stream waits for offload
    copies, for configurations offloading ``groups`` layers: ``fwd_s``/``bwd_s``
    ``[config, layer]`` the layers' kernel times, ``copy_s``/``reload_s`` ``[config, layer]``
    their copies' (the schedule of the module docstring, replayed stream by stream)."""
    layers = fwd_s.shape[1]
    window = window_map(layers, groups)
    size = (fwd_s.shape[0],)
    compute, d2h, done = np.zeros(size), np.zeros(size), 0
    for j in range(layers):
        compute = compute + fwd_s[:, j]
        if j == 0:
            d2h = np.maximum(d2h, compute) + copy_s[:, 0]
        if done < groups and window[done] == j:
            compute = np.maximum(compute, d2h)
            if done < groups - 1:
                d2h = compute + copy_s[:, done + 1]
            done += 1
    forward = compute - fwd_s.sum(axis=1)
    compute, h2d, pending = np.zeros(size), np.zeros(size), groups
    for j in range(layers - 1, -1, -1):
        if pending >= 1 and window[pending - 1] == j:
            compute = np.maximum(compute, h2d)
            h2d = compute + reload_s[:, pending - 1]
            pending -= 1
        if j == 0:
            compute = np.maximum(compute, h2d)
        compute = compute + bwd_s[:, j]
    return forward, compute - bwd_s.sum(axis=1)


def stall_s_v2(groups: int, fwd_s: np.ndarray, bwd_s: np.ndarray, copy_s: np.ndarray, reload_s: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`stall_s` under TE v2's ``DefaultOffloadSynchronizer`` (TE 2.18
    ``_init_offload_synchronization_dicts``, ``fwd_step``, ``bwd_step``): layer ``i``'s
    copies start once its forward ends and the offload stream is free, and the compute
    stream waits for them before layer ``L - N + i``; its reload starts when layer
    ``L - 1 - N + i``'s backward begins (and the stream is free) and is waited for before
    layer ``i``'s backward. One stream carries both ways, in that order."""
    layers = fwd_s.shape[1]
    size = (fwd_s.shape[0],)
    compute, stream = np.zeros(size), np.zeros(size)
    done = [None] * groups
    for j in range(layers):
        i = j - (layers - groups)
        if 0 <= i < groups:
            compute = np.maximum(compute, done[i])
        compute = compute + fwd_s[:, j]
        if j < groups:
            stream = np.maximum(stream, compute) + copy_s[:, j]
            done[j] = stream
    forward = compute - fwd_s.sum(axis=1)
    compute, stream = np.zeros(size), np.zeros(size)
    for j in range(layers - 1, -1, -1):
        i = j - (layers - 1 - groups)
        if 0 <= i < groups:
            stream = np.maximum(stream, compute) + reload_s[:, i]
            done[i] = stream
        if j < groups:
            compute = np.maximum(compute, done[j])
        compute = compute + bwd_s[:, j]
    return forward, compute - bwd_s.sum(axis=1)


def apply(columns: dict[str, np.ndarray], counts: np.ndarray, kind_index: np.ndarray, layer_kinds: np.ndarray,
          copy_rate: float, handler: str = "v1") -> tuple[np.ndarray, np.ndarray]:
    """Price activation offload into a configuration table's ``[config, kind]`` columns:
    per configuration offloading ``counts[c]`` layers, its layers' kinds keep their share
    of the freed bytes less (rounded down: the table never undercounts) and carry their
    share of the stalls (``offload_fwd_s``, ``offload_bwd_s``; every layer the same share:
    only their sum matters on one pipeline stage). ``kind_index``: the chain's node kinds;
    ``layer_kinds``: which kinds are transformer layers; ``copy_rate``: bytes/s of the
    rank's share of its host link, each way; ``handler`` the TE implementation (``v1``,
    ``v2``: the module docstring; the columns' freed and copied bytes must be the same
    handler's, :meth:`nest.cost.activations.Activations.offloaded`). Returns per
    configuration the transient bytes of the group in flight while the last layer runs
    (none under ``v2``), and the host bytes the copies fill."""
    if handler not in ("v1", "v2"):
        raise SpecError(f"activation_offload_handler = {handler!r}: must be v1 or v2")
    schedule = stall_s if handler == "v1" else stall_s_v2
    n_configs = len(counts)
    in_flight, host = np.zeros(n_configs, dtype=np.int64), np.zeros(n_configs, dtype=np.int64)
    nodes = np.flatnonzero(layer_kinds[kind_index])  # the layers, in chain order
    chain = kind_index[nodes]
    for groups in np.unique(counts[counts > 0]).tolist():
        rows = np.flatnonzero(counts == groups)
        at = lambda name: columns[name][rows][:, chain]  # noqa: E731  [config, layer]
        freed, copied = at("offload_freed_bytes"), at("offload_copied_bytes")
        copy_s = copied / copy_rate  # both ways at the same rate
        forward, backward = schedule(groups, at("fwd_s"), at("bwd_s"), copy_s, copy_s)
        in_flight[rows] = freed[:, groups - 1] if handler == "v1" else 0
        host[rows] = copied[:, :groups].sum(axis=1)
        moved = np.zeros((len(rows), columns["act_bytes"].shape[1]), dtype=np.int64)
        np.add.at(moved.T, chain[:groups], freed[:, :groups].T)
        count = np.bincount(chain, minlength=moved.shape[1])
        share = moved // np.maximum(count, 1)
        columns["act_bytes"][rows] -= share
        per_layer = 1.0 / len(nodes)
        for name, stall in (("offload_fwd_s", forward), ("offload_bwd_s", backward)):
            columns[name][rows] = np.where(layer_kinds, stall[:, None] * per_layer, 0.0)
    return in_flight, host


__all__ = ["apply", "offload_layer_counts", "stall_s", "stall_s_v2", "window_map"]
