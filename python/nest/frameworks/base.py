"""What a training framework can run, as rules over candidates, and how a plan is launched.

A :class:`Framework` has rules (:class:`Rule`): each says which candidates the framework
can run, cites the framework's own source it comes from, and names the closest change that
makes a violating candidate expressible. The search keeps only the candidates every rule
admits (:meth:`Framework.admit`, a mask over candidate columns), ``nest evaluate`` rejects a
fixed candidate that breaks one with the rule's name (:meth:`Framework.check`), and
:meth:`Framework.emit` writes the launch configuration of a plan with exactly the plan's
meaning. A framework may also narrow whole dimensions (:meth:`Framework.limits`: the rank
orders it can place ranks in, the ZeRO stages it has, interleaving), which the search
applies before enumerating.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from ..errors import RuleError, SpecError
from ..parallel import (
    DEFAULT_ORDER,
    RECOMPUTE_MODES,
    Candidate,
    CandidateArrays,
    ConfigArrays,
    SpaceLimits,
    parse_order,
)
from ..specs import JobSpec, ModelSpec, OptimizerSpec
from .plan_reader import PlanReader

WHOLE_LAYERS = ("none", "full")
"""The recomputation modes of a framework without selective or module recomputation."""


@dataclass(frozen=True)
class Columns:
    """Candidates as columns, one entry each: what the rules read (``recompute`` is an index
    into :data:`~nest.parallel.RECOMPUTE_MODES`, ``order`` a rank-order string)."""

    tp: np.ndarray
    sp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    dp: np.ndarray
    pp: np.ndarray
    vp: np.ndarray
    zero: np.ndarray
    micro_batch: np.ndarray
    recompute: np.ndarray
    order: np.ndarray
    offload: np.ndarray  # optimizer-offload fraction
    act_offload: np.ndarray  # transformer layers whose activations offload
    etp: np.ndarray  # expert tensor-parallel degree

    def __len__(self) -> int:
        return len(self.tp)

    @staticmethod
    def of(cands: CandidateArrays, arrays: ConfigArrays) -> "Columns":
        """The columns of ``cands`` (their layer configurations in ``arrays``)."""
        c = cands.config
        order = np.array(cands.orders, dtype=object)[cands.order] if len(cands) else np.zeros(0, dtype=object)
        return Columns(arrays.tp[c], arrays.sp[c], arrays.cp[c], arrays.ep[c], cands.dp, cands.pp, cands.vp,
                       cands.zero, arrays.micro_batch[c], arrays.recompute[c], order, cands.offload,
                       arrays.act_offload[c], arrays.etp[c])

    @staticmethod
    def of_candidate(cand: Candidate) -> "Columns":
        """One candidate as one-entry columns."""
        if cand.cfg.recompute not in RECOMPUTE_MODES:
            raise SpecError(f"recompute = {cand.cfg.recompute!r}: must be one of {', '.join(RECOMPUTE_MODES)}")
        configs, cands = CandidateArrays.of([cand])
        return Columns.of(cands, ConfigArrays.of(configs))


@dataclass(frozen=True)
class Rule:
    """One thing a framework cannot run.

    ``admits(model, job, columns)`` is a boolean mask (True: the candidate is fine);
    ``text`` says the rule in words, ``source`` where the framework says it (file,
    function, version), ``fix(model, job, candidate)`` the closest expressible change."""

    name: str
    text: str
    source: str
    admits: Callable[[ModelSpec, JobSpec, Columns], np.ndarray]
    fix: Callable[[ModelSpec, JobSpec, Candidate], str]

    @staticmethod
    def whole_layer_recompute(text: str, source: str) -> "Rule":
        """The ``no-selective-recompute`` rule of a framework that recomputes whole layers
        or nothing (:data:`WHOLE_LAYERS`)."""
        modes = [RECOMPUTE_MODES.index(mode) for mode in WHOLE_LAYERS]
        return Rule("no-selective-recompute", text, source, lambda m, j, c: member(c.recompute, modes),
                    lambda m, j, cand: "recompute=full")

    @staticmethod
    def no_activation_offload(text: str, source: str) -> "Rule":
        """The ``no-activation-offload`` rule of a framework without Megatron-Core's layer
        offload (:mod:`nest.cost.activation_offload`)."""
        return Rule("no-activation-offload", text, source, lambda m, j, c: c.act_offload == 0,
                    lambda m, j, cand: "activation_offload=0")

    @staticmethod
    def no_expert_tensor_parallel(text: str, source: str) -> "Rule":
        """The ``no-expert-tensor-parallel`` rule of a framework that does not split an
        expert's MLP over the expert grid's ranks as Megatron-Core does."""
        return Rule("no-expert-tensor-parallel", text, source, lambda m, j, c: c.etp == 1,
                    lambda m, j, cand: "etp=1")

    @staticmethod
    def fixed_order(text: str, source: str) -> "Rule":
        """The ``rank-order`` rule of a framework whose rank placement is fixed to nest's
        default order."""
        return Rule("rank-order", text, source, lambda m, j, c: same_layout(c, (DEFAULT_ORDER,)),
                    lambda m, j, cand: f"rank_order={DEFAULT_ORDER}")


class Framework:
    """A training framework: its name, the version its rules and launch output target,
    its rules and its launch configuration (subclasses set :attr:`rules` and implement
    :meth:`emit`)."""

    name = "any"
    version = ""
    rules: tuple[Rule, ...] = ()

    def limits(self, limits: SpaceLimits, model: ModelSpec, job: JobSpec) -> SpaceLimits:
        """``limits`` narrowed to the dimensions' values the framework has."""
        return limits

    def splits(self, num_nodes: int, pp: int, vp: int) -> list[tuple[list[int], dict]] | None:
        """The splits of a ``num_nodes`` chain into ``pp x vp`` virtual stages the framework
        can run, as ``(nodes per stage, its launch options)``; None: any split."""
        return None

    def job_defaults(self) -> dict:
        """:class:`~nest.specs.JobSpec` fields the framework fixes unless the user sets
        them (:func:`nest.inputs.coerce.job_spec` applies them)."""
        return {}

    def job_errors(self, model: ModelSpec, job: JobSpec) -> None:
        """SpecError when the job itself cannot run in the framework (its switches, its
        dtype), whatever the configuration."""

    def admit(self, model: ModelSpec, job: JobSpec, columns: Columns) -> np.ndarray:
        """Which candidates every rule admits."""
        ok = np.ones(len(columns), dtype=bool)
        for rule in self.rules:
            ok &= np.asarray(rule.admits(model, job, columns), dtype=bool)
        return ok

    def check(self, model: ModelSpec, job: JobSpec, cand: Candidate) -> None:
        """:class:`~nest.errors.RuleError` naming the first rule ``cand`` breaks, its
        source and the closest expressible change (SpecError when the job itself cannot
        run in the framework)."""
        self.job_errors(model, job)
        columns = Columns.of_candidate(cand)
        for rule in self.rules:
            if not bool(np.asarray(rule.admits(model, job, columns))[0]):
                raise RuleError(f"framework = {self.name}: {rule.name}: {rule.text} ({rule.source}); closest "
                                f"expressible: {rule.fix(model, job, cand)}")

    def emit(self, plan: dict) -> str:
        """The launch configuration of a plan's JSON document: SpecError naming the rule
        when the plan breaks one of the framework's rules (a plan made for another
        framework), else :meth:`launch` of the checked document."""
        reader = PlanReader(plan)
        model = ModelSpec(**reader.architecture())
        self.check(model, reader.job_spec, reader.candidate(model.head_needs_embedding))
        return self.launch(reader)

    def launch(self, plan: PlanReader) -> str:
        """The launch configuration of a checked plan (subclasses)."""
        raise SpecError(f"emit = {self.name}: not a launch target (use megatron, deepspeed or torchtitan)")

    def notes(self, plan: dict) -> list[str]:
        """What the launch needs besides the emitted text (environment variables)."""
        return []


def default_state(name: str, version: str, job: JobSpec) -> None:
    """SpecError unless the job keeps the default optimizer state (fp32 gradients, master
    weights and moments, 16-bit weights): what a framework without Megatron-Core's
    precision options runs."""
    if job.optimizer != OptimizerSpec.named(job.optimizer.name):
        raise SpecError(f"framework = {name}: job.optimizer: {version} keeps fp32 gradients, master weights and "
                        "moments (no bf16 gradients or precision-aware optimizer); closest expressible: "
                        "--grad-dtype fp32 --optimizer-state-dtype fp32")
    if job.fp8_param_gather:
        raise SpecError(f"framework = {name}: job.fp8_param_gather = True: {version} has no FP8 weights; "
                        "closest expressible: fp8_param_gather=False")


def member(values: np.ndarray, options) -> np.ndarray:
    """``np.isin(values, options)`` for a few options, as elementwise comparisons: a rule
    checks one candidate at a time for every fixed configuration, where ``np.isin``'s
    sorting costs more than the rule."""
    out = np.zeros(np.shape(values), dtype=bool)
    for option in options:
        out |= values == option
    return out


_PLACED = ("tp", "cp", "dp", "pp")  # ep folds into tp x cp x dp and places nothing itself


@functools.lru_cache(maxsize=256)
def _discordant(order: str, other: str) -> tuple[tuple[str, str], ...]:
    """The pairs of placed dimensions whose nesting differs between two rank orders
    (cached: a few orders, asked for by every rule check)."""
    a = {d: i for i, d in enumerate(parse_order(order))}
    b = {d: i for i, d in enumerate(parse_order(other))}
    return tuple((x, y) for x, y in itertools.combinations(_PLACED, 2) if (a[x] < a[y]) != (b[x] < b[y]))


def same_layout(c: Columns, orders) -> np.ndarray:
    """Per candidate: whether its rank order places ranks as one of ``orders`` does. Two
    orders differ only where two dimensions of degree > 1 nest differently (``ep`` places
    nothing), so ``cp-tp-ep-dp-pp`` with ``tp = 1`` is Megatron's default order."""
    degree = {"tp": c.tp, "cp": c.cp, "dp": c.dp, "pp": c.pp}
    ok = np.zeros(len(c), dtype=bool)
    for order in set(c.order.tolist()):
        rows = c.order == order
        for other in orders:
            same = rows.copy()
            for x, y in _discordant(order, other):
                same &= (degree[x] == 1) | (degree[y] == 1)
            ok |= same
    return ok


def expressed_order(degrees: dict, order: str, orders) -> str | None:
    """The first of ``orders`` that places ranks as ``order`` does for these degrees (a
    mapping with ``tp``, ``cp``, ``dp``, ``pp``), or None."""
    for other in orders:
        if all(degrees[x] == 1 or degrees[y] == 1 for x, y in _discordant(order, other)):
            return other
    return None


def narrowed(limits: SpaceLimits, rank_orders=None, **allowed) -> SpaceLimits:
    """``limits`` with each named dimension cut to the values ``allowed`` gives it (kept in
    the limit's order; a limit the framework cannot run becomes empty, which the search
    reports as no configuration). ``rank_orders`` replace the default rank orders only:
    orders a user gives stay, for the rule that compares layouts (:func:`same_layout`)
    to keep those that place ranks as the framework does."""
    changes = {}
    for name, values in allowed.items():
        current = getattr(limits, name)
        changes[name] = tuple(values) if current is None else tuple(v for v in current if v in values)
    if rank_orders is not None and limits.rank_order is None:
        changes["rank_order"] = tuple(rank_orders)
    return replace(limits, **changes)
