"""Seconds of candidates: node costs (:mod:`nest.cost.nodes`) on the prices of their groups.

Everything here is columnar: ``[candidate, kind]`` arrays for a batch of candidates
(:class:`~nest.parallel.CandidateArrays` into a :class:`~nest.cost.scenario.ConfigTable`)
and their group terms (:class:`~nest.network.placement.GroupTerms`). With exact terms
(the candidates' own placements, :func:`price`) the results are what a plan reports; with
lower-bound terms (:meth:`~nest.network.placement.Placer.floor_terms`) they are lower
bounds, because every operation is monotone in the terms: additions, multiplications by
non-negative numbers and ``max(0, .)``.

Overlap assumptions (:func:`kind_times`): ring-attention transfers hide behind the
attention core of the same pass; ZeRO-2 reduce-scatters a node's gradients during its
backward and ZeRO-3 gathers its weights during the previous node's compute (prefetch), so
only the excess over the node's own compute is exposed. A hidden collective is not free:
its kernels hold SMs the compute then lacks (:data:`NCCL_COMM_SMS`, Transformer Engine's
:data:`TE_OVERLAP_SMS`), so the compute loses that share of the time it overlaps
(:func:`hidden_cost`). TP and EP collectives are on the
critical path (Megatron's defaults); with ``job.tp_comm_overlap`` the TP ones of groups
inside one NVLink domain (the innermost tier) are exposed as :func:`tp_exposed`, and with
``job.overlap_moe_expert_parallel_comm`` the EP ones where Megatron overlaps them
(:func:`ep_overlapped`) as :func:`ep_pair_exposed`. The expert-tensor-parallel all-gathers
and reduce-scatters of a MoE layer (the ``etp_*`` columns) count with its EP
communication (the ``ep`` cause, ``ep_comm`` of a plan's breakdown) and are always
exposed: Megatron runs them inside the expert computation on the compute stream, also
under its combined 1F1B (core_v0.14.0 ``moe_layer.py MoELayer.experts_compute``:
``dispatch_postprocess`` and ``combine_preprocess``), where they lengthen the compute
the all-to-alls hide behind. The end-of-step sync (:func:`sync_columns`): ZeRO-0 all-reduces
fp32 gradients; 1 reduce-scatters gradients and all-gathers the updated weights
(Megatron's distributed optimizer); 2 has reduced gradients per micro-batch and
all-gathers the weights; 3 does nothing (weights stay sharded). Dense weights sync over
the data x context ranks, experts over their expert-data-parallel group.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..arrays import isin
from ..network.placement import GroupTerms, Placement, reduce_scatter_s
from ..parallel import RECOMPUTE_MODES, Candidate, CandidateArrays, ep_overlap_allowed, warmup
from ..specs import JobSpec
from . import offload
from .model import BLOCK, MOE
from .scenario import ConfigTable, Scenario

OPTIMIZER_KERNELS = 4
"""Launches of a fused multi-tensor optimizer step (its fixed cost)."""


NCCL_COMM_SMS = 16
"""SMs one NCCL collective between nodes holds while it runs: NCCL runs one CTA per
channel, and a ring's channels are its search channels (one per NIC of an 8-NIC server)
doubled (NCCL master 5067397 src/graph/connect.cc ``ncclTopoPostset``: "Duplication should
be complete now", ``nChannels * 2``), on sm90 at least 16 ("Use 4 compute channels per
search channel")."""

TE_OVERLAP_SMS = 16
"""SMs Transformer Engine's userbuffers give the communication of a ``pipeline`` or
``bulk`` TP overlap, taken from the GEMM it overlaps (TE v2.7
transformer_engine/pytorch/module/base.py ``initialize_ub.get_default_config``:
``num_sm`` 16, ``set_sm_margin``; ``ring_exchange`` uses 1)."""

TE_PIPELINE_SPLITS = 4
"""Chunks of a ``pipeline`` TP overlap (``num_splits`` 4; ``ring_exchange`` splits into
``tp`` chunks; same source)."""


def sm_share(scn: Scenario, sms: int) -> float:
    """The share of the device's SMs ``sms`` communication kernels take (0 on devices
    without an SM count)."""
    total = scn.kernels.curve.sms
    return sms / total if total > sms else 0.0


def hidden_cost(comm_s, exposed_s, share: float):
    """Seconds an overlapped collective adds: its exposed part plus the ``share`` of SMs
    it holds over the time it hides (``comm_s - exposed_s``), which the compute it
    overlaps loses. Non-decreasing in ``comm_s`` whenever ``exposed_s`` is."""
    return exposed_s + share * (comm_s - exposed_s)


def tp_exposed(tp_s, degree, compute_s, share: float = 0.0):
    """Exposed tensor-parallel communication under ``job.tp_comm_overlap``, as Transformer
    Engine's userbuffers run it (TE v2.7 module/base.py ``initialize_ub``): half of a
    layer's collectives (the all-gathers before the QKV and FC1 GEMMs, the data-gradient
    ones of the output projections) are ``ring_exchange`` overlaps split into ``degree``
    chunks on the copy engines, the other half (the reduce-scatters after the output
    projections, the bulk overlaps of the backward) ``pipeline`` or ``bulk`` overlaps in
    :data:`TE_PIPELINE_SPLITS` chunks whose communication holds ``share`` of the SMs.
    Each half overlaps half of the node's compute; one chunk of each stays exposed and
    no more hides than that compute lasts."""
    half, compute = tp_s / 2, compute_s / 2
    ring = np.maximum(half / degree, half - compute)
    pipeline = np.maximum(half / TE_PIPELINE_SPLITS, half - compute)
    return ring + hidden_cost(half, pipeline, share)


EP_COMM_SMS = 20
"""SMs the dispatch and combine kernels hold while they overlap compute, which then runs
on the others: Megatron-Core's DeepEP default (core_v0.14.0 transformer_config.py
``moe_deepep_num_sms = 20``; HybridEP's is 16). NCCL's all-to-all runs one CTA per
point-to-point channel, of the same order on 8-GPU nodes (NCCL src/graph/paths.cc
``ncclTopoComputeP2pChannels``)."""


def ep_overlapped(scn: Scenario, table: ConfigTable, cands: CandidateArrays) -> np.ndarray:
    """Per candidate: whether ``job.overlap_moe_expert_parallel_comm`` overlaps its
    expert-parallel all-to-alls (where Megatron runs it: :func:`~nest.parallel.ep_overlap_allowed`;
    elsewhere the flag is not given and the all-to-alls stay exposed)."""
    if not (scn.job.overlap_moe_expert_parallel_comm and scn.model.is_moe):
        return np.zeros(len(cands), dtype=bool)
    arrays = table.arrays
    return ep_overlap_allowed(arrays.ep[cands.config], cands.pp, cands.vp, arrays.recompute[cands.config])


def ep_pair_exposed(a2a_s, attn_fwd_s, mlp_fwd_s, mlp_bwd_s, attn_bwd_s):
    """Exposed all-to-all seconds of one MoE layer's forward run together with another
    micro-batch's backward of it, each dispatch and combine taking ``a2a_s``.

    Megatron's combined 1F1B (core_v0.14.0 models/common/model_chunk_schedule_plan.py
    ``TransformerLayerSchedulePlan.run``) issues, on a communication and a computation
    stream::

        comm: combine_bwd  | dispatch_fwd -> dispatch_bwd     | combine_fwd
        comp: attn_fwd     | mlp_bwd (dgrad, wgrad) -> mlp_fwd | attn_bwd

    where the expert backward waits for its combine gradient, the expert forward for its
    dispatch, the dispatch gradient for the expert data gradient, the attention backward
    for the dispatch gradient and the forward's combine for its experts. The pair ends
    when both streams are done; what exceeds the compute of both passes is exposed (0
    when every all-to-all fits under the compute it meets)."""
    dgrad = wgrad = mlp_bwd_s / 2
    combine_b = a2a_s
    dgrad_end = np.maximum(attn_fwd_s, combine_b) + dgrad
    dispatch_f_end = np.maximum(combine_b, attn_fwd_s) + a2a_s
    dispatch_b_end = np.maximum(dispatch_f_end, dgrad_end) + a2a_s
    mlp_f_end = np.maximum(dgrad_end + wgrad, dispatch_f_end) + mlp_fwd_s
    end = np.maximum(np.maximum(dispatch_b_end, mlp_f_end) + a2a_s, np.maximum(mlp_f_end, dispatch_b_end) + attn_bwd_s)
    return end - (attn_fwd_s + mlp_fwd_s + mlp_bwd_s + attn_bwd_s)


def unpaired_share(scn: Scenario, table: ConfigTable, cands: CandidateArrays) -> np.ndarray:
    """Per candidate under EP overlap: the share of the first rank's passes that run
    alone (its warm-up forwards and as many cool-down backwards, over all ``m v`` of each;
    those expose their all-to-alls in full). The first rank holds the most; charging its
    share on every rank keeps each rank's total at least its own."""
    micro = scn.job.micro_batches(cands.dp, table.arrays.micro_batch[cands.config])
    return warmup(0, cands.pp, cands.vp, micro, 1) / (micro * cands.vp)


def behind(comm_s, compute_s, share: float):
    """A collective overlapped with ``compute_s``: the excess exposed, the rest costing
    its ``share`` of the SMs (:func:`hidden_cost`)."""
    return hidden_cost(comm_s, np.maximum(0.0, comm_s - compute_s), share)


def reduce_exposed(reduce_s, bwd_s, job: JobSpec, share: float = 0.0):
    """A node's gradient reduction beyond its backward under ``job.overlap_grad_reduce``
    (and the SMs it holds while hidden: ``share``), else all of it."""
    return behind(reduce_s, bwd_s, share) if job.overlap_grad_reduce else reduce_s


def gather_exposed(gather_s, fwd_s, job: JobSpec, share: float = 0.0):
    """A node's weight all-gather beyond its forward under ``job.overlap_param_gather``
    (and the SMs it holds while hidden: ``share``), else all of it."""
    return behind(gather_s, fwd_s, share) if job.overlap_param_gather else gather_s


def sync_exposed(reduce_s, gather_s, fwd_s, bwd_s, job: JobSpec, share: float = 0.0):
    """Exposed end-of-step data-parallel collectives of one node: :func:`reduce_exposed`
    plus :func:`gather_exposed`."""
    return reduce_exposed(reduce_s, bwd_s, job, share) + gather_exposed(gather_s, fwd_s, job, share)


@dataclass(frozen=True)
class KindTimes:
    """Seconds per micro-batch of every node kind under every candidate (``[candidate,
    kind]``), by cause. ``cp_forward`` is the forward part of ``cp``; ``dp_forward`` and
    ``dp_recompute`` the parts of ``dp`` (ZeRO-2/3 traffic) exposed in the forward and in
    a full recomputation (ZeRO-3's weight gathers); ``host`` the part of ``compute`` the
    GPU waits for the host's kernel dispatch (:mod:`nest.cost.host`)."""

    compute: np.ndarray
    tp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    dp: np.ndarray
    total: np.ndarray
    cp_forward: np.ndarray
    dp_forward: np.ndarray
    dp_recompute: np.ndarray
    offload: np.ndarray | None = None  # the activation offload's stalls (None: none)
    offload_forward: np.ndarray | None = None  # their forward part
    host: np.ndarray | None = None  # the host-bound part of compute (None: none)


def _slots_sum(ops: np.ndarray) -> np.ndarray:
    """``ops[:, :, 0] + ops[:, :, 1] + ...`` in slot order."""
    out = ops[:, :, 0]
    for i in range(1, ops.shape[2]):
        out = out + ops[:, :, i]
    return out


def kind_times(scn: Scenario, table: ConfigTable, cands: CandidateArrays, terms: GroupTerms,
               zero_comm: bool = True) -> KindTimes:
    """Per candidate and node kind: seconds of one micro-batch on one device, by cause
    (the overlap rules of the module docstring). ``zero_comm=False`` leaves ZeRO-2/3
    traffic out (its floors are not known before the ZeRO stage is)."""
    col = lambda name: table.cols[name][cands.config]  # noqa: E731
    one = lambda x: np.asarray(x)[:, None]  # noqa: E731
    slot = lambda x: np.asarray(x)[:, None, None]  # noqa: E731
    job, opt, wb = scn.job, scn.job.optimizer, scn.gather_bytes
    # a table without operations of a kind (measured layers: their times hold their TP;
    # dense models: no all-to-alls) prices them as the zeros the sums below would give
    def has(name: str) -> bool:
        return table.cached(f"has {name}", lambda: bool(table.cols[name].any()))

    zeros = lambda: np.zeros((len(cands), table.cols["compute_s"].shape[1]))  # noqa: E731
    # sum(count * all_reduce(bytes)) over the operations, in order (count 0: none)
    tp = (_slots_sum(col("tp_count") * (2 * reduce_scatter_s(slot(terms.tp[0]), slot(terms.tp[1]),
                                                             col("tp_bytes"))))
          if has("tp_count") else zeros())
    if job.tp_comm_overlap:
        # Transformer Engine's userbuffers overlap only a TP group inside one NVLink
        # domain (CUDA IPC / multicast handles; TransformerEngine issue #1071): the
        # collectives of a group that leaves it stay exposed
        degree = one(table.arrays.tp[cands.config])
        hidden = (degree > 1) & (one(terms.tp_inner) > 0)
        tp = np.where(hidden, tp_exposed(tp, degree, col("compute_s"), sm_share(scn, TE_OVERLAP_SMS)), tp)
    cp_degree = one(table.arrays.cp[cands.config])
    ring = cp_degree > 1
    cp, cp_forward = zeros(), zeros()  # no candidate with a ring: what the masks below leave
    if ring.any():
        lat, per_byte = one(terms.cp_ring[0]), one(terms.cp_ring[1])
        steps_fwd, steps_bwd = col("cp_steps_fwd"), col("cp_steps_bwd")
        passes = steps_fwd / np.maximum(cp_degree - 1, 1)
        cp_forward = np.maximum(0.0, steps_fwd * (lat + per_byte * col("cp_fwd_bytes")) - passes * col("core_fwd_s"))
        cp = cp_forward + np.maximum(0.0, steps_bwd * (lat + per_byte * col("cp_bwd_bytes")) - col("core_bwd_s"))
        cp, cp_forward = np.where(ring, cp, 0.0), np.where(ring, cp_forward, 0.0)
    ep = (_slots_sum(col("ep_count") * (slot(terms.ep[0]) + slot(terms.ep[1]) * col("ep_bytes")))
          if has("ep_count") else zeros())
    etp = 0.0  # a table without expert TP (dense models, etp 1) has no gathers to price
    if has("etp_count"):
        etp = _slots_sum(col("etp_count") * reduce_scatter_s(slot(terms.expert_tp[0]), slot(terms.expert_tp[1]),
                                                             col("etp_bytes")))
    compute = col("compute_s")
    overlapped = ep_overlapped(scn, table, cands)
    if overlapped.any():
        # one dispatch or combine (the layer's four all-to-alls alike: no moe recompute);
        # the expert-TP gathers run with the experts, half in each pass
        a2a = one(terms.ep[0]) + one(terms.ep[1]) * col("ep_bytes")[:, :, 0]
        mlp_f, mlp_b = col("mlp_fwd_s"), col("mlp_bwd_s")
        attn_f, attn_b = col("fwd_s") - mlp_f, col("bwd_s") - mlp_b + col("recompute_s")
        pair = ep_pair_exposed(a2a, attn_f, mlp_f + etp / 2, mlp_b + etp / 2, attn_b)
        alone = one(unpaired_share(scn, table, cands))
        # while a hidden all-to-all runs, compute has EP_COMM_SMS fewer SMs: it loses
        # that share of the hidden time (devices without an SM count: none)
        contention = sm_share(scn, EP_COMM_SMS)
        exposed = pair + alone * (ep - pair) + (1 - alone) * (ep - pair) * contention
        ep = np.where(one(overlapped) & (ep > 0), exposed, ep)
    ep = ep + etp
    # the compute stream's waits for activation-offload copies (nest.cost.activation_offload)
    offload_forward = col("offload_fwd_s")
    offload = offload_forward + col("offload_bwd_s")
    total = compute + tp + cp + ep + offload
    zero = one(cands.zero)
    dp = dp_forward = dp_recompute = np.zeros_like(total)
    if zero_comm and (zero >= 2).any():
        dense, expert = col("params_dense"), col("params_expert")
        da, db = one(terms.dense_dp[0]), one(terms.dense_dp[1])
        ea, eb = one(terms.expert_dp[0]), one(terms.expert_dp[1])
        reduce = reduce_scatter_s(da, db, opt.grad_bytes * dense) + reduce_scatter_s(ea, eb, opt.grad_bytes * expert)
        three = zero == 3
        gather = np.where(three, reduce_scatter_s(da, db, wb * dense) + reduce_scatter_s(ea, eb, wb * expert), 0.0)
        full = one(table.arrays.recompute[cands.config] == RECOMPUTE_MODES.index("full"))
        # ZeRO-3 prefetches a node's weights during the previous node's pass and
        # reduce-scatters its gradients during its backward: NCCL collectives between
        # the data-parallel ranks, holding their SMs while they hide
        share = sm_share(scn, NCCL_COMM_SMS)
        forward, recompute, backward = pass_windows(col, tp, cp, cp_forward, ep)
        dp_forward = np.where(three, behind(gather, forward, share), 0.0)
        regather = three & full & regathers_for_recompute(job)
        dp_recompute = np.where(regather, behind(gather, recompute, share), 0.0)
        dp = 0.0 + dp_forward
        dp = dp + dp_recompute
        # the backward's gather (prefetched by the node after it) and reduce-scatter hide
        # behind that node's whole backward pass, its full recomputation included, unless
        # the recomputation gathers again and hides that gather itself (above)
        backward = backward + np.where(full & ~regather, recompute, 0.0)
        dp = dp + behind(gather + reduce, backward, share)
        dp = np.where(zero >= 2, dp, 0.0)
        total = total + dp
    return KindTimes(compute, tp, cp, ep, dp, total, cp_forward, dp_forward, dp_recompute, offload, offload_forward,
                     col("host_s"))


def pass_windows(col, tp, cp, cp_forward, ep) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(forward, recomputation, backward)`` seconds of a node's passes on its compute
    stream, the window a ZeRO-3 weight gather or gradient reduce-scatter hides in: the
    kernels and the exposed tensor-, context- and expert-parallel communication they wait
    for. The data-parallel collectives run on their own communicator's stream (Megatron-
    FSDP's prefetch is issued in the previous layer's pre-forward hook, core_v0.14.0
    ``megatron_fsdp.py`` ``_pre_forward_param_unshard``; FSDP2's likewise), so they keep
    moving while the layer waits on an all-to-all or a TP collective, over other links
    (the data-parallel group's, against NVLink for a node's TP and EP). The forward and
    the backward each have half of the TP and EP operations beyond the recomputation's
    share (``recompute_*_share``); the CP ring's forward part is ``cp_forward``."""
    r_tp, r_ep = col("recompute_tp_share"), col("recompute_ep_share")
    forward = col("fwd_s") + (1 - r_tp) / 2 * tp + cp_forward + (1 - r_ep) / 2 * ep
    backward = col("bwd_s") + (1 - r_tp) / 2 * tp + (cp - cp_forward) + (1 - r_ep) / 2 * ep
    return forward, col("recompute_s") + r_tp * tp + r_ep * ep, backward


def regathers_for_recompute(job: JobSpec) -> bool:
    """Whether a fully recomputed node's ZeRO-3 weights are gathered once more for its
    recomputation (three gathers per micro-batch) rather than once for both the
    recomputation and the backward (two). Megatron-FSDP gathers once: its pre-backward
    hook unshards the layer and marks it ``PRE_BACKWARD``, and the recomputed forward's
    pre-forward hook then neither gathers nor prefetches ("When recomputing a whole
    Transformer layer, gather parameters once for both the recomputation and backward
    computation", core_v0.14.0 ``megatron_fsdp.py`` ``MegatronFSDP`` docstring,
    ``_pre_backward``, ``_pre_forward_param_unshard``); torchtitan's FSDP2 does the same
    (torch ``_fully_shard/_fsdp_state.py`` ``FSDPState._pre_forward`` returns early in
    ``PRE_BACKWARD``: "the pre-backward hook is responsible for the unshard").
    DeepSpeed's ZeRO-3 fetches a module's weights in every forward hook, the recomputed
    one included, and so does nest's framework-free price (``any``)."""
    return job.framework not in ("megatron", "torchtitan")


def sync_columns(scn: Scenario, cands: CandidateArrays, terms: GroupTerms) -> dict[str, np.ndarray]:
    """Per candidate: ``fixed_s`` (latency terms and optimizer launches), and per dense
    and per expert parameter the seconds of its sync + optimizer step (``dense``,
    ``expert``), their gradient-reduction, weight-gather and optimizer parts
    (``*_reduce``, ``*_gather``, ``*_optimizer``) and the bytes it keeps (``*_bytes``: its
    weight, gradient and optimizer-state parts ``*_weight_bytes``, ``*_grad_bytes``,
    ``*_state_bytes``; ``*_host_bytes``: the host bytes of its offloaded optimizer state,
    :mod:`nest.cost.offload`)."""
    opt, wb, gb, zero = scn.job.optimizer, scn.weight_bytes, scn.gather_bytes, cands.zero
    fixed = np.full(len(cands), optimizer_launch_s(scn))
    out = {}
    for name, (alpha, beta), shards in (("dense", terms.dense_dp, terms.dense_shards),
                                        ("expert", terms.expert_dp, terms.expert_shards)):
        if name == "expert" and not scn.model.is_moe:
            alpha = np.zeros_like(alpha)  # no expert parameters: no expert collective
        per = np.where(zero == 0, 2 * beta * opt.grad_bytes,
                       np.where(zero == 1, beta * (opt.grad_bytes + gb), np.where(zero == 2, beta * gb, 0.0)))
        out[name + "_reduce"] = np.where(zero == 0, 2 * beta * opt.grad_bytes,
                                         np.where(zero == 1, beta * opt.grad_bytes, 0.0))
        out[name + "_gather"] = np.where((zero == 1) | (zero == 2), beta * gb, 0.0)
        fixed = fixed + np.where(zero <= 1, 2 * alpha, np.where(zero == 2, alpha, 0.0))
        state_shards = np.where(zero >= 1, shards, 1)
        optimizer = offload.optimizer_step_s(gpu_optimizer_s(scn), scn.host_step_s, cands.offload) / state_shards
        out[name] = per + optimizer
        out[name + "_optimizer"] = optimizer
        out[name + "_weight_bytes"] = wb / np.where(zero >= 3, shards, 1)
        out[name + "_grad_bytes"] = opt.grad_bytes / np.where(zero >= 2, shards, 1)
        out[name + "_state_bytes"] = offload.state_bytes(opt, cands.offload) / state_shards
        out[name + "_host_bytes"] = offload.host_bytes(cands.offload) / state_shards
        out[name + "_bytes"] = out[name + "_weight_bytes"] + out[name + "_grad_bytes"] + out[name + "_state_bytes"]
    out["fixed_s"] = fixed
    return out


def optimizer_launch_s(scn: Scenario) -> float:
    """Seconds of the optimizer step's launches (its fixed cost on every rank)."""
    return OPTIMIZER_KERNELS * scn.kernels.overhead


def gpu_optimizer_s(scn: Scenario) -> float:
    """Seconds per parameter of the device's fused optimizer step: it streams the
    gradient, reads and writes the master weight and the moments, and writes the weight."""
    opt = scn.job.optimizer
    return (opt.grad_bytes + 2 * opt.master_bytes + 2 * opt.state_bytes + scn.gather_bytes) / scn.kernels.memory_rate


def _params(table: ConfigTable, cands: CandidateArrays) -> tuple[np.ndarray, np.ndarray]:
    """``[candidate, kind]`` dense and expert parameters of every node kind."""
    return (table.cols["params_dense"][cands.config].astype(np.float64),
            table.cols["params_expert"][cands.config].astype(np.float64))


def _per_node(params: tuple[np.ndarray, np.ndarray], sync: dict, part: str) -> np.ndarray:
    """``[candidate, kind]``: a per-parameter sync column times the node's parameters."""
    dense, expert = params
    return sync["dense" + part][:, None] * dense + sync["expert" + part][:, None] * expert


def sync_weights(scn: Scenario, table: ConfigTable, cands: CandidateArrays, sync: dict) -> np.ndarray:
    """``[candidate, kind]`` seconds of one node's end-of-step sync and optimizer step
    (the DP's ``params`` weights before rounding) from :func:`sync_columns` ``sync``: only
    the exposed part of overlapped collectives (:func:`sync_exposed`). Monotone in the
    terms, so floor terms give floors."""
    params = _params(table, cands)
    if not scn.job.overlaps_sync:
        return _per_node(params, sync, "")
    col = lambda name: table.cols[name][cands.config]  # noqa: E731
    exposed = sync_exposed(_per_node(params, sync, "_reduce"), _per_node(params, sync, "_gather"),
                           col("fwd_s"), col("bwd_s"), scn.job, sm_share(scn, NCCL_COMM_SMS))
    return _per_node(params, sync, "_optimizer") + exposed


def sync_parts(scn: Scenario, table: ConfigTable, cands: CandidateArrays, sync: dict) -> np.ndarray:
    """``[candidate, kind, 3]``: one node's gradient reduction and weight gather, each by
    its exposed part (:func:`reduce_exposed`, :func:`gather_exposed`), and its optimizer
    step, in seconds (latency terms, ``fixed_s``, left out)."""
    params = _params(table, cands)
    col = lambda name: table.cols[name][cands.config]  # noqa: E731
    share = sm_share(scn, NCCL_COMM_SMS)
    reduce = reduce_exposed(_per_node(params, sync, "_reduce"), col("bwd_s"), scn.job, share)
    gather = gather_exposed(_per_node(params, sync, "_gather"), col("fwd_s"), scn.job, share)
    return np.stack(np.broadcast_arrays(reduce, gather, _per_node(params, sync, "_optimizer")), axis=2)


@dataclass
class Priced:
    """A batch of candidates priced on their own placements: what the stage DP's tables,
    the exact schedule and the reports are built from."""

    scn: Scenario
    table: ConfigTable
    cands: CandidateArrays
    terms: GroupTerms
    places: list[Placement]
    times: KindTimes
    sync: dict

    def __len__(self) -> int:
        return len(self.cands)

    def col(self, name: str) -> np.ndarray:
        """``[candidate, kind]`` of a cost column of the candidates' configurations."""
        return self.table.cols[name][self.cands.config]

    def micro_batches(self) -> np.ndarray:
        """Micro-batches per replica and step of every candidate."""
        return self.scn.job.micro_batches(self.cands.dp, self.table.arrays.micro_batch[self.cands.config])

    @cached_property
    def extra_warmup(self) -> np.ndarray:
        """Per candidate, the warm-up forwards its schedule adds (1 where EP overlap runs
        Megatron's combined 1F1B: :func:`ep_overlapped`)."""
        return ep_overlapped(self.scn, self.table, self.cands).astype(np.int64)

    @cached_property
    def pair_transient(self) -> np.ndarray:
        """Per candidate, the bytes a combined 1F1B holds beyond its live micro-batches:
        one transformer layer's activations, the forward's layer allocated before the
        backward's layer is freed (:func:`nest.schedule.memory.live_counts`); 0 without
        EP overlap."""
        paired = self.extra_warmup > 0
        blocks = isin(np.asarray(self.scn.kind_list), (BLOCK, MOE))
        if not (paired.any() and blocks.any()):
            return np.zeros(len(self), dtype=np.int64)
        return np.where(paired, self.col("act_bytes")[:, blocks].max(axis=1), 0).astype(np.int64)


def price(scn: Scenario, table: ConfigTable, cands: CandidateArrays) -> Priced:
    """``cands`` priced exactly: their placements' group terms, node times, sync prices."""
    terms, places = scn.placer.exact_terms(cands.degrees(table.arrays))
    return Priced(scn, table, cands, terms, places, kind_times(scn, table, cands, terms),
                  sync_columns(scn, cands, terms))


def price_candidate(scn: Scenario, cand: Candidate) -> Priced:
    """One candidate priced exactly (row 0 of a one-row batch)."""
    return price(scn, *scn.batch([cand]))
