"""The joint search space.

A *layer configuration* fixes what shapes a node's compute and memory: tensor, context,
expert and expert tensor parallel degrees, sequence parallelism, micro-batch, recomputation, and
whether the head stage keeps a copy of tied embeddings. A *partial candidate* adds the
pipeline and data-parallel degrees and the virtual stages (everything its lower bound
needs); it expands into full candidates over ZeRO stages and rank orders.

Dominated options are not enumerated (each is never faster and never uses less memory
in the cost model): sequence parallelism is always on when ``tp > 1`` (same
communication volume, less activation memory and element-wise time, smaller pipeline
transfers), and ZeRO-0 is replaced by ZeRO-1 whenever there is data or context
parallelism (less memory; a reduce-scatter plus an all-gather of 16-bit weights moves
no more than an all-reduce of fp32 gradients; a sharded optimizer step). ``nest
evaluate`` still accepts both.

Context parallelism takes powers of two that keep at least ``MIN_CP_CHUNK`` tokens per
rank and divide the sequence into ``2 cp`` load-balanced chunks. Expert parallelism
takes divisors of the expert count, and expert tensor parallelism ``etp`` 1 or ``tp``
(:func:`expert_tensor_parallel_degrees`), with ``ep x etp`` dividing ``tp x cp x dp`` (MoE
parallel folding, Megatron-Core's expert grid: core_v0.14.0 ``parallel_state.py
initialize_model_parallel`` requires the world to divide into ``etp x ep x pp``): experts
folded whole, or split like the dense layers over the TP group (Megatron's own default,
``etp = tp``), whose ranks the expert grid's innermost ones are, one NVLink domain.
``SpaceLimits.etp`` searches any other values (between 1 and ``tp``, or beyond it; the
former would take DeepSeek-V3's partial candidates on 2048 GPUs from 13.9 M to 18.8 M,
twice the 9.4 M without expert TP).
Interleaving takes
``vp`` in ``VIRTUAL_STAGES`` when ``pp > 1``, ``pp x vp`` does not exceed the layer-graph
nodes and the micro-batch count is a multiple of ``pp`` (Megatron-LM's requirement).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..arrays import unique
from ..cost.activation_offload import offload_layer_counts
from ..cost.offload import offload_fractions
from ..errors import SpecError
from ..frameworks import Columns, Framework, framework
from ..parallel import (
    RECOMPUTE_MODES,
    Candidate,
    CandidateArrays,
    ConfigArrays,
    ConfigList,
    LayerConfig,
    SpaceLimits,
    recompute_modes,
)
from ..specs import ClusterSpec, DeviceSpec, JobSpec, ModelSpec

MIN_CP_CHUNK = 512
"""Fewest tokens per context-parallel rank the search tries."""

VIRTUAL_STAGES = (1, 2, 4, 8)
"""Virtual pipeline stages per rank (interleaving) the search tries."""


def divisors(n: int) -> list[int]:
    """Positive divisors of ``n`` in ascending order."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


@dataclass(frozen=True)
class Admission:
    """The target framework's rules for one job (:mod:`nest.frameworks`): the dimensions'
    values it has (:meth:`limits`) and which full candidates it runs (:meth:`mask`)."""

    framework: Framework
    model: ModelSpec
    job: JobSpec
    device: DeviceSpec | None = None

    @staticmethod
    def of(model: ModelSpec, job: JobSpec, device: DeviceSpec | None = None) -> "Admission":
        """The rules of ``job.framework`` (SpecError when the job itself cannot run there)
        on ``device`` (None: nothing can be offloaded)."""
        fw = framework(job.framework)
        fw.job_errors(model, job)
        return Admission(fw, model, job, device)

    def limits(self, limits: SpaceLimits) -> SpaceLimits:
        """``limits`` narrowed to what the framework has, the optimizer-offload fractions
        resolved (:func:`~nest.cost.offload.offload_fractions`: the asked ones, checked,
        else what the device's host allows)."""
        if self.device is not None:
            limits = replace(limits, offload=offload_fractions(limits.offload, self.device, self.job))
        if limits.act_offload is not None:
            limits = replace(limits, act_offload=offload_layer_counts(limits.act_offload, self.model, self.device))
        return self.framework.limits(limits, self.model, self.job)

    def mask(self, cands: CandidateArrays, arrays: ConfigArrays) -> np.ndarray:
        """Which of ``cands`` (layer configurations in ``arrays``) the framework runs."""
        return self.framework.admit(self.model, self.job, Columns.of(cands, arrays))


@dataclass
class Partials:
    """Column-wise partial candidates; ``config`` indexes ``configs``. ``admission``: the
    framework rules their full candidates are expanded under."""

    configs: list[LayerConfig]
    config: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    vp: np.ndarray
    config_arrays: ConfigArrays | None = None  # ``configs`` as columns
    admission: Admission | None = None

    def __len__(self) -> int:
        return len(self.config)


def tensor_parallel_degrees(model: ModelSpec, cluster: ClusterSpec) -> list[int]:
    """Powers of two up to the innermost tier's size that divide the head counts (the
    search's default; wider degrees only when ``SpaceLimits.tp`` names them)."""
    limit = cluster.tiers[0].fanout
    degrees, tp = [], 1
    while tp <= limit:
        if _tp_divides(model, tp):
            degrees.append(tp)
        tp *= 2
    return degrees


def _tp_divides(model: ModelSpec, tp: int) -> bool:
    return (model.num_heads % tp == 0 and model.num_kv_heads % tp == 0 and model.ffn_hidden % tp == 0
            and (not model.is_moe or model.moe_ffn_hidden % tp == 0))


def model_recompute_modes(model: ModelSpec) -> tuple[str, ...]:
    """The recomputation modes that change something for ``model``
    (:func:`~nest.parallel.recompute_modes`): its search's default."""
    moe_blocks = sum(model.is_moe_block(i) for i in range(model.num_layers))
    return recompute_modes(moe_blocks < model.num_layers, model.is_moe, bool(model.kv_lora_rank))


def context_parallel_degrees(job: JobSpec, limit: int) -> list[int]:
    """Powers of two with at least MIN_CP_CHUNK tokens per rank and 2 cp equal chunks."""
    degrees, cp = [1], 2
    while cp <= limit and job.seq_len % (2 * cp) == 0 and job.seq_len // cp >= MIN_CP_CHUNK:
        degrees.append(cp)
        cp *= 2
    return degrees


def expert_parallel_degrees(model: ModelSpec) -> list[int]:
    """Divisors of the number of routed experts (1 for dense models)."""
    return divisors(model.num_experts) if model.is_moe else [1]


def expert_tensor_parallel_degrees(model: ModelSpec, tps, limit: tuple[int, ...] | None = None) -> list[int]:
    """The expert tensor-parallel degrees to search: ``limit`` (checked), else 1 and the
    tensor-parallel degrees ``tps`` (the search pairs each configuration with etp 1 or its
    own tp); 1 for dense models. Megatron-Core splits fc1's output and fc2's input over the
    expert-TP ranks with ``divide`` (core_v0.14.0 ``extensions/transformer_engine.py
    TEGroupedLinear.__init__``), which every tp of a MoE model meets (:func:`check_tp`)."""
    if limit is not None:
        for etp in limit:
            check_etp(model, etp)
        return list(limit)
    if not model.is_moe:
        return [1]
    return sorted({1, *(tp for tp in tps if model.moe_ffn_hidden % tp == 0)})


def check_etp(model: ModelSpec, etp: int) -> None:
    """SpecError unless ``etp`` is an expert tensor-parallel degree ``model`` can have: 1, or
    with routed experts a positive divisor of their width."""
    if isinstance(etp, bool) or not isinstance(etp, (int, np.integer)) or etp < 1:
        raise SpecError(f"etp = {etp!r}: must be a positive integer")
    if etp > 1 and not model.is_moe:
        raise SpecError(f"etp = {etp}: {model.name} has no experts")
    if etp > 1 and model.moe_ffn_hidden % etp:
        raise SpecError(f"etp = {etp}: must divide the experts' width moe_ffn_hidden ({model.moe_ffn_hidden})")


def _allowed(values, limit):
    return [v for v in values if limit is None or v in limit]


def _batch_pool(job: JobSpec, dps: np.ndarray, batches: np.ndarray, n_rc: int, stride_mbs: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(pool, micro, starts, counts)``: per data-parallel degree (``starts[d]``,
    ``counts[d]`` entries of ``pool``), the grid offsets ``position x stride_mbs + r`` of the
    micro-batch sizes it admits (each one's ``n_rc`` innermost modes ``r``), ascending, and
    each entry's micro-batch count. An even batch admits the sizes dividing its share of
    the global batch, an uneven one every size."""
    gb = job.global_batch
    if job.uneven_batch:
        admits = np.ones((len(dps), len(batches)), dtype=bool)
    else:
        admits = (gb % dps[:, None] == 0) & ((gb // dps[:, None]) % batches[None, :] == 0)
    d, b = np.nonzero(admits)
    pool = (b[:, None] * stride_mbs + np.arange(n_rc, dtype=np.int64)[None, :]).ravel()
    micro = np.repeat(job.micro_batches(dps[d], batches[b]), n_rc).astype(np.int64)
    counts = admits.sum(axis=1).astype(np.int64) * n_rc
    starts = np.cumsum(counts) - counts
    return pool, micro, starts, counts


class PartialSpace:
    """The partial candidates of a search, produced in chunks (see :func:`enumerate_partials`).

    Layer configurations form a dense grid ``[tp, sp, cp, (ep, etp), tied, micro-batch,
    recompute]`` so that a candidate's configuration index is computed, not looked up;
    only the configurations some candidate uses are kept (in grid order, ``configs``).
    Partial candidates come in the order of the loops ``tp, sp, cp, pp, dp, (ep, etp), vp`` with
    the micro-batch (then recomputation) innermost; one :class:`PartialChunk` is one
    ``(tp, sp, cp)``, its loops are numpy broadcasts. Searches consume the chunks one by
    one (a few hundred thousand partials each at most) instead of the whole list.
    """

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, job: JobSpec, num_nodes: int,
                 limits: SpaceLimits = SpaceLimits(), every_device: bool = False):
        self.every_device = every_device  # only partials with tp x cp x pp x dp = the device count
        self.admission = Admission.of(model, job, cluster.device)
        self.limits = limits = self.admission.limits(limits)
        self.num_nodes, self.devices = num_nodes, cluster.num_devices
        self.tied = model.head_needs_embedding
        tps = list(limits.tp) if limits.tp is not None else tensor_parallel_degrees(model, cluster)
        for tp in tps:
            check_tp(model, cluster, tp)
        cps = list(limits.cp) if limits.cp is not None else context_parallel_degrees(job, self.devices)
        eps = list(limits.ep) if limits.ep is not None else expert_parallel_degrees(model)
        etps = expert_tensor_parallel_degrees(model, tps, limits.etp)
        self.etp_of_tp = limits.etp is None  # the default: etp is 1 or the configuration's tp
        # the expert axis: (ep, etp) pairs, expert TP 1 first (its configurations keep the
        # order they have without expert TP)
        experts = [(ep, etp) for etp in sorted(etps, key=lambda x: x != 1) for ep in eps]
        recomputes = tuple(limits.recompute or model_recompute_modes(model))
        # the innermost axis: (recomputation, offloaded layers) pairs; only configurations
        # without recomputation offload activations (Megatron-Core's rule)
        offloads = tuple(limits.act_offload or (0,))
        modes = [(r, n) for r in recomputes for n in (offloads if r == "none" else (0,))]
        batches = _allowed(divisors(job.global_batch), limits.micro_batch)
        n_rc, n_mb = len(modes), len(batches)
        self.stride_mbs = n_rc
        self.stride_tie = self.stride_mbs * n_mb
        self.stride_ep = self.stride_tie * 2
        self.stride_cp = self.stride_ep * len(experts)
        self.stride_sp = self.stride_cp * len(cps)
        self.stride_tp = self.stride_sp * 2
        self.pps = np.array(limits.pp or tuple(range(1, num_nodes + 1)), dtype=np.int64)
        # An uneven batch admits every data-parallel degree the devices allow, up to one
        # sequence per replica (more replicas than sequences would idle).
        dps = (range(1, min(cluster.num_devices, job.global_batch) + 1) if job.uneven_batch
               else divisors(job.global_batch))
        self.dps = np.array(_allowed(dps, limits.dp), dtype=np.int64)
        self.vps = np.array(_allowed(VIRTUAL_STAGES, limits.vp), dtype=np.int64)
        self.cps = np.array(cps, dtype=np.int64)
        self.eps = np.array([ep for ep, _ in experts], dtype=np.int64)
        self.etps = np.array([etp for _, etp in experts], dtype=np.int64)
        # Per data-parallel degree, the (micro-batch, recompute) grid offsets it admits and
        # their micro-batch counts, concatenated (an uneven batch has one dp per device).
        pool, pool_micro, self.starts, self.counts = _batch_pool(job, self.dps, np.array(batches, dtype=np.int64),
                                                                 n_rc, self.stride_mbs)
        # Interleaving keeps the entries whose micro-batch count is a multiple of pp: one
        # filtered pool per pp, segments per dp, appended to the pool.
        keep = pool_micro[None, :] % self.pps[:, None] == 0  # [pp, entry]
        kept = np.concatenate((np.zeros((len(self.pps), 1), dtype=np.int64), np.cumsum(keep, axis=1)), axis=1)
        self.keep_counts = kept[:, self.starts + self.counts] - kept[:, self.starts]  # [pp, dp]
        _, entry = np.nonzero(keep)
        self.filtered_start = len(pool) + np.concatenate(([0], np.cumsum(self.keep_counts.ravel())))[:-1].reshape(
            len(self.pps), len(self.dps))
        self.pool = np.concatenate((pool, pool[entry]))
        pairs = []
        for ti, tp in enumerate(tps):
            tp_sps = [s for s in (limits.sp or (tp > 1,)) if tp > 1 or not s]
            if model.is_moe and tp > 1:
                tp_sps = [s for s in tp_sps if s]  # Megatron-Core: MoE with TP needs SP
            pairs += [(ti, tp, sp) for sp in tp_sps]
        self.pairs = pairs
        self.empty = not pairs or not len(self.pps) or not len(self.dps) or not len(self.vps) or not len(cps) \
            or not len(experts)
        # The configurations some partial uses: the union of the distinct (base, pool
        # segment) pairs of every loop combination.
        used = np.zeros(self.stride_tp * len(tps), dtype=bool)
        if not self.empty:
            segments = []
            vs = [list(self.vps).index(1)] if 1 in self.vps.tolist() else list(range(len(self.vps)))
            for ti, tp, sp in pairs:
                c, p, d, e, v = self._combos(tp, np.arange(len(cps)), self._expert_axis(tp),
                                             np.array(vs, dtype=np.int64))
                ok, length = self._valid(tp, c, p, d, e, v)
                c, p, d, e, v, length = c[ok], p[ok], d[ok], e[ok], v[ok], length[ok]
                start = np.where(self.vps[v] == 1, self.starts[d], self.filtered_start[p, d])
                base = self._base(ti, sp, c, e, p)
                segments.append((base * len(self.pool) + start) * (self.counts.max() + 1) + length)
            keys = unique(np.concatenate(segments))
            length = keys % (self.counts.max() + 1)
            start = keys // (self.counts.max() + 1) % len(self.pool)
            base = keys // (self.counts.max() + 1) // len(self.pool)
            if len(keys):
                owner = np.repeat(np.arange(len(keys)), length)
                within = np.arange(int(length.sum())) - np.repeat(np.cumsum(length) - length, length)
                used[base[owner] + self.pool[start[owner] + within]] = True
        self.index = np.cumsum(used) - 1
        used_ids = np.flatnonzero(used)
        rc_i, rest = used_ids % n_rc, used_ids // n_rc
        mb_i, rest = rest % n_mb, rest // n_mb
        tie_i, rest = rest % 2, rest // 2
        ep_i, rest = rest % len(experts), rest // len(experts)
        cp_i, rest = rest % len(cps), rest // len(cps)
        sp_i, tp_i = rest % 2, rest // 2
        mode = np.array([RECOMPUTE_MODES.index(r) for r, _ in modes], dtype=np.int64)
        offloaded = np.array([n for _, n in modes], dtype=np.int64)
        tp_values, mb_values = np.array(tps, dtype=np.int64), np.array(batches, dtype=np.int64)
        self.config_arrays = ConfigArrays(tp_values[tp_i], sp_i.astype(bool), mb_values[mb_i], mode[rc_i],
                                          tie_i.astype(bool), self.cps[cp_i], self.eps[ep_i], offloaded[rc_i],
                                          self.etps[ep_i])
        self.configs = ConfigList(self.config_arrays)

    def _expert_axis(self, tp: int) -> np.ndarray:
        """The indices of the (ep, etp) pairs a configuration of ``tp`` may take (all, or
        by default those with etp 1 or tp), ascending: the loops skip the others."""
        if not self.etp_of_tp:
            return np.arange(len(self.etps))
        return np.flatnonzero((self.etps == 1) | (self.etps == tp))

    def _combos(self, tp: int, cs: np.ndarray, es: np.ndarray, vs: np.ndarray) -> tuple[np.ndarray, ...]:
        """``(c, p, d, e, v)`` index columns of the loop combinations of ``tp`` over context
        indices ``cs``, every pipeline and data-parallel degree, expert pairs ``es`` and
        virtual-stage indices ``vs``, in row-major order, less those whose ``(cp, pp, dp)``
        alone rule them out (too many devices, no admitted micro-batch): with one
        data-parallel degree per device count, most of the full grid. :meth:`_valid`
        decides the rest."""
        cp, pp, dp = self.cps[cs][:, None, None], self.pps[None, :, None], self.dps[None, None, :]
        stage = tp * cp * pp
        fit = (pp <= self.num_nodes) & (stage <= self.devices) & (dp <= self.devices // stage)
        fit &= self.counts[None, None, :] > 0
        if self.every_device:
            fit &= stage * dp == self.devices
        c, p, d = np.nonzero(fit)
        inner = len(es) * len(vs)
        repeat = lambda x: np.repeat(x, inner)  # noqa: E731
        return (repeat(cs[c]), repeat(p), repeat(d), np.tile(np.repeat(es, len(vs)), len(c)),
                np.tile(vs, len(c) * len(es)))

    def _valid(self, tp, c, p, d, e, v):
        """Which loop combinations make partials, and how many each makes."""
        cp, pp, dp, ep, vp = self.cps[c], self.pps[p], self.dps[d], self.eps[e], self.vps[v]
        etp = self.etps[e]
        ok = (pp <= self.num_nodes) & (tp * cp * pp <= self.devices)
        ok &= dp <= self.devices // (tp * cp * pp)
        if self.every_device:
            ok &= tp * cp * pp * dp == self.devices
        ok &= self.counts[d] > 0
        ok &= (tp * cp * dp) % (ep * etp) == 0  # the expert grid (the loops skip the default's other etp)
        ok &= (vp == 1) | ((pp > 1) & (pp * vp <= self.num_nodes))
        length = np.where(vp == 1, self.counts[d], self.keep_counts[p, d])
        return ok & (length > 0), length

    def _base(self, ti, sp, c, e, p):
        tied = (self.tied & (self.pps[p] > 1)).astype(np.int64)
        return ti * self.stride_tp + int(sp) * self.stride_sp + c * self.stride_cp + e * self.stride_ep \
            + tied * self.stride_tie

    def chunks(self):
        """One :class:`PartialChunk` per ``(tp, sp, cp)`` with partials, in order."""
        if self.empty:
            return
        first = 0
        for ti, tp, sp in self.pairs:
            es, vs = self._expert_axis(tp), np.arange(len(self.vps))
            for c0 in range(len(self.cps)):
                _, p, d, e, v = self._combos(tp, np.array([c0]), es, vs)
                ok, length = self._valid(tp, c0, p, d, e, v)
                chosen = np.flatnonzero(ok)
                if not len(chosen):
                    continue
                p, d, e, v, length = p[chosen], d[chosen], e[chosen], v[chosen], length[chosen]
                base = self._base(ti, sp, c0, e, p)
                start = np.where(self.vps[v] == 1, self.starts[d], self.filtered_start[p, d])
                total = int(length.sum())
                owner = np.repeat(np.arange(len(chosen)), length)
                within = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(length) - length, length)
                config = self.index[base[owner] + self.pool[start[owner] + within]]
                yield PartialChunk(first, self.pps[p], self.dps[d], self.vps[v], owner, config)
                first += total


@dataclass
class PartialChunk:
    """Partial candidates ``first, first + 1, ...`` of the enumeration: loop combinations
    (``pp``, ``dp``, ``vp`` per combination) and, per partial, its combination
    (``owner``) and configuration. Every partial of a combination has the same tensor,
    context and expert degrees and the same tied-embedding copy."""

    first: int
    pp: np.ndarray
    dp: np.ndarray
    vp: np.ndarray
    owner: np.ndarray
    config: np.ndarray

    def __len__(self) -> int:
        return len(self.config)

    def partials(self, space: PartialSpace) -> Partials:
        o = self.owner
        return Partials(space.configs, self.config, self.pp[o], self.dp[o], self.vp[o], space.config_arrays,
                        space.admission)


def enumerate_partials(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, num_nodes: int,
                       limits: SpaceLimits = SpaceLimits()) -> Partials:
    """Every partial candidate that fits the device count and divides the batch (see
    :class:`PartialSpace` for the order)."""
    space = PartialSpace(model, cluster, job, num_nodes, limits)
    parts = [chunk.partials(space) for chunk in space.chunks()]
    if not parts:
        return Partials([], *(np.zeros(0, dtype=np.int64) for _ in range(4)), admission=space.admission)
    cat = lambda name: np.concatenate([getattr(chunk, name) for chunk in parts])  # noqa: E731
    return Partials(space.configs, cat("config"), cat("pp"), cat("dp"), cat("vp"), space.config_arrays,
                    space.admission)


def expand(partials: Partials, index: np.ndarray, limits: SpaceLimits = SpaceLimits()) -> list[Candidate]:
    """Full candidates of the partial candidates at ``index``: ZeRO stages x rank orders
    (:func:`expand_arrays` as :class:`~nest.parallel.Candidate` objects)."""
    cands, _, _ = expand_arrays(partials, index, limits)
    return [cands.candidate(partials.configs, i) for i in range(len(cands))]


def expand_arrays(partials: Partials, index: np.ndarray, limits: SpaceLimits = SpaceLimits()
                  ) -> tuple[CandidateArrays, np.ndarray, np.ndarray]:
    """Full candidates of the partial candidates at ``index``, as columns: (ZeRO stage,
    optimizer-offload fraction) pairs x rank orders that the partials' framework runs
    (limits narrowed to it), in the order of the partials, then ZeRO stage and offload,
    then rank order; the partial each comes from and its position among that partial's
    candidates. Offload needs a sharded optimizer (ZeRO >= 1; the distributed optimizer of
    one replica when nothing else shards it)."""
    if partials.admission is not None:
        limits = partials.admission.limits(limits)
    orders = limits.orders()
    index = np.asarray(index, dtype=np.int64)
    arrays = partials.config_arrays or ConfigArrays.of(partials.configs)
    config = partials.config[index]
    pp, dp = partials.pp[index], partials.dp[index]
    sharded = dp * arrays.cp[config] > 1
    if limits.zero is None:
        zeros_sharded, zeros_single = [1, 2, 3], [0]
    else:
        zeros_sharded, zeros_single = list(limits.zero), [z for z in limits.zero if not z]
    fractions = tuple(limits.offload) if limits.offload is not None else (0.0,)
    moved = [f for f in fractions if f > 0]
    kept = 0.0 in fractions
    pairs_sharded = ([(z, 0.0) for z in zeros_sharded] if kept else []) + [
        (z, f) for z in zeros_sharded if z >= 1 for f in moved]
    pairs_single = ([(z, 0.0) for z in zeros_single] if kept else []) + (
        [(1, f) for f in moved] if limits.zero is None or 1 in limits.zero else [])
    n_zero = np.where(sharded, len(pairs_sharded), len(pairs_single))
    distinct = (limits.rank_order is not None) | ((pp > 1) & (dp > 1))
    n_order = np.where(distinct, len(orders), 1)
    count = n_zero * n_order
    owner = np.repeat(np.arange(len(index)), count)
    within = np.arange(int(count.sum()), dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
    z_pos, o_pos = within // n_order[owner], within % n_order[owner]
    pick = lambda pairs, column, dtype: np.array([p[column] for p in pairs] or [0], dtype=dtype)  # noqa: E731
    on_sharded = np.minimum(z_pos, max(len(pairs_sharded), 1) - 1)
    on_single = np.minimum(z_pos, max(len(pairs_single), 1) - 1)
    zero = np.where(sharded[owner], pick(pairs_sharded, 0, np.int64)[on_sharded],
                    pick(pairs_single, 0, np.int64)[on_single])
    offload = np.where(sharded[owner], pick(pairs_sharded, 1, np.float64)[on_sharded],
                       pick(pairs_single, 1, np.float64)[on_single])
    source = index[owner]
    cands = CandidateArrays(partials.config[source], partials.pp[source], partials.dp[source],
                            partials.vp[source], zero, o_pos, orders, offload)
    # Transformer Engine's layer offload runs on a single pipeline stage (the rule of
    # Megatron-Core, whose schedule nest.cost.activation_offload models, for every framework)
    single = (arrays.act_offload[cands.config] == 0) | (cands.pp == 1)
    if not single.all():
        cands, source, within = cands.take(single), source[single], within[single]
    if partials.admission is not None and partials.admission.framework.rules and len(cands):
        keep = partials.admission.mask(cands, arrays)
        if not keep.all():
            return cands.take(keep), source[keep], within[keep]
    return cands, source, within


def check_tp(model: ModelSpec, cluster: ClusterSpec, tp: int) -> None:
    """SpecError unless ``tp`` divides the model's heads and widths and the cluster. A
    degree wider than the innermost tier (one NVLink domain) is allowed when asked for:
    its collectives are priced hierarchically on every tier the group crosses; the
    default search stays inside the domain (:func:`tensor_parallel_degrees`)."""
    if not isinstance(tp, int) or tp < 1 or not _tp_divides(model, tp):
        raise SpecError(f"tp = {tp}: must divide num_heads ({model.num_heads}), num_kv_heads "
                        f"({model.num_kv_heads}) and the MLP widths")
    if tp > cluster.num_devices:
        raise SpecError(f"tp = {tp}: the cluster has {cluster.num_devices} devices")
