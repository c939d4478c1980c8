"""The search: bound every candidate, solve the promising ones with the stage DP.

The stage DP splits every candidate it solves by the closed form of its schedule
(:mod:`nest.schedule.pipeline`). Candidates are ranked by their *score*:

* ``ranking="closed-form"``: the closed form itself (the DP's objective). The result is
  the candidate with the smallest objective and, among equal objectives, the first in
  the order ``(cheap bound, partial index, expansion position)`` -- the order in which
  earlier versions of nest solved candidates, so ties resolve as they did.
* ``ranking="schedule"`` (the default): the exact time of the schedule of that split
  (:mod:`nest.schedule.step`), the step time the plan reports; ties by the closed form, then
  the same order. The closed form over-prices interleaved schedules whose chunks differ
  (a rank's load is the sum of its own chunks, not ``v`` times the slowest), by 20-60%
  on some candidates, so it cannot rank them.

Everything else only decides how fast that candidate is found: candidates are discarded
only by lower bounds, compared non-strictly (a candidate whose bound equals the
incumbent is still solved, so ties are seen). With ``"closed-form"`` the bounds below
bound the objective. With ``"schedule"`` an interleaved candidate is bounded by
:func:`nest.schedule.pipeline.schedule_floor` of the same sums (the busiest rank's work and the
ranks' mean sync, the slowest stage run ``m`` times, one micro-batch's round trip),
which bounds its schedule, and its solved split is timed unless its busiest rank's work
alone exceeds the incumbent; a 1F1B candidate is bounded by the closed form's bound and
solved while that is within :data:`ONE_F_ONE_B_MARGIN` of the best score (the closed
form is at most that much above a 1F1B schedule on the candidates that matter; with the
margin set to ``None`` every candidate is bounded by the schedule floor, which is exact
but solves 3-8x more candidates).

1. **Partials** (everything but the ZeRO stage and the rank order) are enumerated in
   chunks (:class:`~nest.search.space.PartialSpace`). The memory filter is the historical one
   (the most frugal sharding). ``lb1`` bounds every candidate of a partial:
   :func:`nest.schedule.pipeline.stage_floor` of a stage sum ``sum t + 2 (P - 1) s`` and a slowest
   stage ``max t + s`` (for 1F1B ``scale x max(ceil(stage sum / P), max t + s)``), plus
   ``fill``, with ``P = p v`` and the closed form's scales (:mod:`nest.schedule.pipeline`; for
   1F1B ``fill = sum t + 2 (P - 1) s`` bounds its split-independent sum of stage times,
   else 0),
   node times ``t`` whose communication terms are floors (below), ZeRO-2/3 traffic and the
   end-of-step sync left out (both >= 0), and ``s`` the cheapest send of any node's output
   on any tier. One pass keeps at least ``KEEP`` partials with the smallest ``lb1``;
   another pass collects the rest only if the best objective exceeds the largest kept.
2. **Blocks** of the smallest ``lb1`` (every partial up to a threshold) are expanded while
   ``lb1`` does not exceed the incumbent; each full candidate gets ``lb2``: the same time
   bound with its own ZeRO-2/3 traffic, rank-order strides and pipeline tiers, plus
   ``G(w_floor)``, the sync and optimizer step of the heaviest stage at floor prices.
3. **Pricing**: candidates are priced exactly in ``lb2`` order, ``SUB_BATCH`` at a time;
   those whose exact-table bound (exact node times, the cheapest send on each boundary's
   real tier, exact sync prices) does not exceed the incumbent go to the stage DP.

The bounds and why they are valid: :mod:`nest.search.floors`.

Batches are formed from the data and the incumbent only, never from thread timing, and
the DP's result does not depend on the thread count: the search is deterministic.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from ..arrays import isin, setdiff, unique
from ..cost.pricing import price
from ..cost.scenario import ConfigTable, Scenario
from ..dp import engine as engines
from ..dp.problem import INF, INFEASIBLE, SOLVED, DPProblem, DPResult
from ..dp.reference import split_fits, stage_details, stage_times
from ..errors import InfeasibleError, SpecError
from ..frameworks import framework
from ..parallel import Candidate, CandidateArrays, SpaceLimits
from ..schedule.memory import CandidateMemory, fits
from ..schedule.step import batch_step_s
from ..schedule.tasks import BatchTasks
from ..units import PS
from .floors import (
    Ranking,
    candidate_bound,
    candidate_memory_floor,
    cheap_bound,
    chunk_memory,
    memory_bound,
    partial_bound_of,
    table_bound,
)
from .problems import build_problem, dp_rows, ends_of, select, split_closed_form_ps
from .space import Partials, PartialSpace, enumerate_partials, expand_arrays

BLOCK = 2048
"""Partial candidates (at least) whose full candidates are bounded together."""

SUB_BATCH = 64
"""Candidates priced exactly and handed to the stage DP per call."""

RANKINGS = ("schedule", "closed-form")
"""What :func:`plan` ranks candidates by: the exact schedule of their DP split, or the
closed form the DP minimises."""




@dataclass
class SearchOutcome:
    """The winning candidate with its batch problem and result, and search statistics.

    ``evaluated``: candidates the stage DP solved; ``total``: candidates priced exactly
    (tables built); ``bounded``: full candidates given a lower bound; ``partials``:
    partial candidates enumerated; ``runners_up``: with the schedule ranking, the best
    other timed pipelines (at most :data:`FINALISTS` - 1, best first), which polishing
    may still lift above the winner.
    """

    candidate: Candidate
    problem: DPProblem
    result: DPResult
    local: int
    evaluated: int
    total: int
    bounded: int = 0
    partials: int = 0
    ends: list[int] | None = None  # the split, when the framework's splits replace the DP's
    runners_up: list[SearchOutcome] = field(default_factory=list)

    def split(self) -> list[int]:
        """The winning split's stage ends."""
        return self.ends if self.ends is not None else ends_of(self.problem, self.result, self.local)


def framework_split(problem: DPProblem, n: int, options, schedule_ps=None, exact_fit=None
                    ) -> tuple[int, int, list[int]] | None:
    """The best of a framework's splits (``options``: ``(nodes per stage, launch options)``)
    for candidate ``n`` of ``problem``: ``(score, closed form, stage ends)`` of the fitting
    split with the smallest score (the exact schedule ``schedule_ps(nodes)``, or without it
    the closed form), then closed form, then ends; None when none fits (the DP's check,
    and ``exact_fit(nodes)`` when given)."""
    best = None
    for nodes, _ in options:
        ends = np.cumsum(nodes).tolist()
        details = stage_details(problem, n, ends)
        if not all(d["fits"] for d in details) or (exact_fit is not None and not exact_fit(nodes)):
            continue
        closed = split_closed_form_ps(problem, n, details)
        score = closed if schedule_ps is None else schedule_ps(nodes)
        if best is None or (score, closed, ends) < best:
            best = (score, closed, ends)
    return best


class _Search:
    """State of one search: the incumbent, its score and tie-breaking key, and counters.

    A candidate's score is its closed form (``ranking`` None) or the exact time of its
    DP split's schedule, in picoseconds; a candidate is solved while its bound
    (:class:`~nest.search.floors.Ranking`) does not exceed :meth:`limit`."""

    def __init__(self, scn: Scenario, table: ConfigTable, partials: Partials, numbers: np.ndarray,
                 limits: SpaceLimits, engine: str, threads: int | None, ranking: Ranking | None = None):
        self.scn, self.table, self.partials, self.limits = scn, table, partials, limits
        self.numbers = numbers  # each partial's index in the whole enumeration
        self.engine, self.threads = engine, threads
        self.orders = limits.orders()
        self.score = INF
        self.key: tuple | None = None
        self.best: SearchOutcome | None = None
        # the best FINALISTS - 1 pipelined candidates, by (score, closed form, key)
        self.finalists: list[tuple[tuple, SearchOutcome]] = []
        self.evaluated = self.priced = self.bounded = 0
        self.ranking = ranking  # None: by the closed form
        self.closed_form = INF  # the incumbent's
        self.framework = framework(scn.job.framework)
        # default offload: a candidate's offloading variants are tried only where it
        # cannot fit without them (block); asked-for fractions are searched fully
        self.offload_when_needed = False
        self.infeasible: set | None = None  # sibling keys the DP found no split for, while collected

    def limit(self, vp) -> np.ndarray:
        """Per candidate (by its ``vp``): the largest closed form, or bound on it, that can
        still beat the incumbent."""
        vp = np.asarray(vp)
        if self.score >= INF:
            return np.full(vp.shape, INF, dtype=np.int64)
        if self.ranking is None:
            return np.full(vp.shape, self.score, dtype=np.int64)
        return self.score + (self.score * self.ranking.slack(vp)).astype(np.int64)

    @property
    def widest_limit(self) -> int:
        """:meth:`limit` of the schedule with the widest margin."""
        return int(self.limit(np.array([1, 2])).max())

    def extend(self, partials: Partials, numbers: np.ndarray) -> None:
        """Add partials (found by a later pass) to the ones blocks index into."""
        old = self.partials
        self.partials = Partials(old.configs, *(np.concatenate((getattr(old, f), getattr(partials, f)))
                                                for f in ("config", "pp", "dp", "vp")), old.config_arrays,
                                 old.admission)
        self.numbers = np.concatenate((self.numbers, numbers))

    def block(self, index: np.ndarray) -> None:
        """Bound the full candidates of the partials at ``index``; price and solve the
        promising ones, best bound first."""
        cands, source, position = expand_arrays(self.partials, index, self.limits)
        if not (cands.offload > 0).any():
            self._run(cands, source, position)
            return
        # a candidate whose memory floor exceeds the device cannot fit
        capacity = self.scn.cluster.device.memory_bytes
        if not self.offload_when_needed:
            fits = candidate_memory_floor(self.scn, self.table, cands) <= capacity
            self._run(cands.take(fits), source[fits], position[fits])
            return
        # By default a candidate offloads only to fit: offloading a larger fraction adds
        # optimizer time to every split and only relaxes memory, so each fraction (in
        # increasing order, nothing offloaded first) is tried only where the previous one
        # left the candidate without a split (memory floor, or the DP found none). This
        # misses a larger fraction that would free a better split of a candidate that
        # already fits; asked-for fractions are searched everywhere.
        keys = self._sibling_keys(cands, source)
        cannot = None  # keys of the candidates that did not fit at the previous fraction
        for fraction in unique(cands.offload):
            step = cands.offload == fraction
            if cannot is not None:
                step &= isin(keys, cannot)
            # the floor of this step's candidates only (it is elementwise): most candidates
            # fit without offloading and never reach a larger fraction
            tried = np.flatnonzero(step)
            fits = np.zeros(len(cands), dtype=bool)
            fits[tried] = candidate_memory_floor(self.scn, self.table, cands.take(tried)) <= capacity
            self.infeasible = set()
            run = step & fits
            self._run(cands.take(run), source[run], position[run])
            # a candidate the framework does not run at this fraction waits for the next
            absent = np.zeros(0, dtype=np.int64) if cannot is None else setdiff(cannot, keys[step])
            cannot = np.concatenate((keys[step & ~fits], np.fromiter(self.infeasible, dtype=np.int64), absent))
            if not len(cannot):
                break
        self.infeasible = None

    def _sibling_keys(self, cands: CandidateArrays, source: np.ndarray) -> np.ndarray:
        """What a candidate and its offloading variants share, as one integer: its
        partial, rank order and ZeRO stage (a single replica's distributed optimizer is its
        ZeRO-0)."""
        sharded = cands.dp * self.table.arrays.cp[cands.config] > 1
        zero = np.where(sharded, cands.zero, 0)
        return (source.astype(np.int64) * len(self.orders) + cands.order) * 4 + zero

    def _run(self, cands: CandidateArrays, source: np.ndarray, position: np.ndarray) -> None:
        """Bound ``cands``; price and solve those that can still win, best bound first."""
        self.bounded += len(cands)
        bound = candidate_bound(self.scn, self.table, cands, self.ranking)
        order = np.flatnonzero(bound <= self.limit(cands.vp))
        order = order[np.argsort(bound[order], kind="stable")]
        for start in range(0, len(order), SUB_BATCH):
            sub = order[start:start + SUB_BATCH]
            sub = sub[bound[sub] <= self.limit(cands.vp[sub])]
            if not len(sub):
                if bound[order[start]] > self.widest_limit:
                    break  # sorted: every later candidate is bounded out too
                continue
            self._solve(cands.take(sub), source[sub], position[sub])

    def _solve(self, cands: CandidateArrays, source: np.ndarray, position: np.ndarray) -> None:
        priced = price(self.scn, self.table, cands)
        rows = dp_rows(priced)
        micro = rows["micro_batches"]
        self.priced += len(cands)
        bound = table_bound(rows, self.ranking)
        keep = bound <= self.limit(cands.vp)
        if not keep.any():
            return
        rows = select(rows, keep)
        kept = np.flatnonzero(keep)  # the priced row of each kept candidate
        cands, source, position, micro = cands.take(keep), source[keep], position[keep], micro[keep]
        bound = bound[keep]
        if self.ranking is not None:
            # the DP drops a candidate whose bound exceeds the best closed form it has
            # seen, which is at least the schedule of that candidate
            bound = (bound / (1.0 + self.ranking.slack(cands.vp))).astype(np.int64)
        problem = build_problem(self.scn, rows, lower_bound=bound)
        result = engines.solve(problem, self.engine, self.threads)
        self.evaluated += result.evaluated
        if self.infeasible is not None:
            failed = result.status == INFEASIBLE
            self.infeasible.update(self._sibling_keys(cands, source)[failed].tolist())
        solved = np.flatnonzero((result.status == SOLVED) & self._may_win(result.objective, cands.vp))
        if not len(solved):
            return
        cheap = cheap_bound(self.scn, self.table, self.partials, source[solved], self.orders)
        keys = [(int(b), int(s), int(p)) for b, s, p in zip(cheap, self.numbers[source[solved]], position[solved])]
        tasks = None
        for n, key in sorted(zip(solved.tolist(), keys), key=lambda e: (int(result.objective[e[0]]), e[1])):
            closed_form = int(result.objective[n])
            if not self._may_win(closed_form, cands.vp[n]):
                continue  # the incumbent improved since the batch was filtered
            options = self.framework.splits(problem.num_nodes, int(cands.pp[n]), int(cands.vp[n]))
            ends = None
            if options is not None:  # the framework's own splits: the DP's optimum bounds them
                if self.ranking is not None:
                    tasks = tasks or BatchTasks.of(priced)
                row = int(kept[n])
                found = framework_split(problem, n, options, None if self.ranking is None else
                                        lambda nodes: self._layers_ps(tasks, row, nodes),
                                        lambda nodes: fits(priced, row, nodes))
                if found is None:
                    continue
                score, closed_form, ends = found
                split = ends  # its exact peak fits (framework_split checked it)
            else:
                split = ends_of(problem, result, n)
                if self.ranking is None:
                    score = closed_form
                elif work_floor_ps(problem, result, n, int(cands.pp[n]), int(micro[n]), split) > self.score:
                    continue  # its busiest rank alone takes longer than the incumbent's step
                else:
                    tasks = tasks or BatchTasks.of(priced)
                    score = self._layers_ps(tasks, int(kept[n]), np.diff([0] + split).tolist())
            rank = (score, closed_form, key)
            wins = rank < (self.score, self.closed_form, self.key or ())
            # a runner-up is a split polishing may move: a pipeline the DP split
            polishable = self.ranking is not None and ends is None and cands.pp[n] > 1
            if not wins and not (polishable and (len(self.finalists) < FINALISTS - 1
                                                 or rank < self.finalists[-1][0])):
                continue
            if ends is None and not fits(priced, int(kept[n]), np.diff([0] + split).tolist()):
                continue  # the DP's check passed, the exact peak of its split does not fit
            outcome = SearchOutcome(cands.candidate(self.table.configs, n), problem, result, n, 0, 0, ends=ends)
            if polishable:
                bisect.insort(self.finalists, (rank, outcome), key=lambda entry: entry[0])
                del self.finalists[FINALISTS - 1:]
            if wins:
                self.score, self.closed_form, self.key = rank
                self.best = outcome

    def _may_win(self, closed_form, vp) -> np.ndarray:
        """Whether a split with this closed form may still beat the incumbent: its closed
        form is within the limit, except for candidates bounded by the schedule floor,
        whose closed form says nothing about their schedule's lower end."""
        within = np.asarray(closed_form) <= self.limit(vp)
        if self.ranking is None:
            return within
        return within | self.ranking.uses_floor(vp)

    def _layers_ps(self, tasks: BatchTasks, row: int, layers) -> int:
        """The exact schedule of priced row ``row`` split into ``layers`` nodes per stage,
        in picoseconds."""
        return int(round(batch_step_s(tasks, row, layers, self.engine) * PS))


FINALISTS = 4
"""With the schedule ranking, the planner polishes the winner and the best timed
pipelines up to this many in all: polishing moves a split by a few percent, so the
fastest polished plan is not always the fastest before polishing."""

KEEP = 1 << 16
"""Partials kept from the first pass (at least; those with the smallest lb1)."""


class _Pass:
    """One pass over the enumeration: the memory-feasible partials whose lb1 is in
    ``(low, high]``, at most about ``KEEP`` of them (the smallest lb1; ``high`` drops to
    the largest lb1 kept when the pass had to leave some out)."""

    def __init__(self, scn: Scenario, table: ConfigTable, space: PartialSpace, orders, low: int, high: int,
                 ranking: Ranking | None = None):
        self.high = high
        parts, kept = [], 0
        combos = 0
        pp, dp, vp = [], [], []
        self.count = 0
        for chunk in space.chunks():
            self.count += len(chunk)
            pp.append(chunk.pp), dp.append(chunk.dp), vp.append(chunk.vp)
            fits = np.flatnonzero(chunk_memory(scn, table, chunk) <= scn.cluster.device.memory_bytes)
            owner, config = chunk.owner[fits], chunk.config[fits]
            bound = partial_bound_of(scn, table, config, chunk.pp[owner], chunk.dp[owner], chunk.vp[owner], orders,
                                      ranking)
            keep = (bound > low) & (bound <= self.high)
            parts.append((bound[keep], owner[keep] + combos, config[keep], chunk.first + fits[keep]))
            combos += len(chunk.pp)
            kept += int(keep.sum())
            if kept > 2 * KEEP:
                bounds = np.concatenate([p[0] for p in parts])
                self.high = int(np.partition(bounds, KEEP - 1)[KEEP - 1])
                parts = [tuple(a[p[0] <= self.high] for a in p) for p in parts]
                kept = sum(len(p[0]) for p in parts)
        cat = lambda i, dtype=np.int64: (np.concatenate([p[i] for p in parts]) if parts  # noqa: E731
                                         else np.zeros(0, dtype=dtype))
        self.bound, owner, config, self.numbers = cat(0), cat(1), cat(2), cat(3)
        combo = lambda values: np.concatenate(values)[owner] if values else np.zeros(0, dtype=np.int64)  # noqa: E731
        self.partials = Partials(space.configs, config, combo(pp), combo(dp), combo(vp), space.config_arrays,
                                 space.admission)


def check_ranking(ranking: str) -> None:
    """SpecError unless ``ranking`` is one of :data:`RANKINGS`."""
    if ranking not in RANKINGS:
        raise SpecError(f"ranking = {ranking!r}: must be one of {', '.join(RANKINGS)}")


class NoFullUse(InfeasibleError):
    """``search(every_device=True)`` found no configuration at all that uses every device."""


EVERY_DEVICE_NONE = "no configuration uses every device"
EVERY_DEVICE_UNFIT = "no configuration that uses every device fits in memory"


def search(scn: Scenario, limits: SpaceLimits = SpaceLimits(), engine: str = "cpp",
           threads: int | None = None, ranking: str = "schedule", every_device: bool = False) -> SearchOutcome:
    """Find the best candidate; InfeasibleError if nothing fits in memory.

    ``ranking="closed-form"``: the candidate (and split) with the smallest closed form;
    ``"schedule"``: the candidate whose DP split has the fastest exact schedule
    (:class:`~nest.search.floors.Ranking` says which candidates are bounded how).
    ``every_device``: only candidates that use every device; their InfeasibleError says
    so in one clause, without the diagnosis of what would fit."""
    check_ranking(ranking)
    by = Ranking() if ranking == "schedule" else None
    offload_asked = limits.offload
    asked = limits
    space = PartialSpace(scn.model, scn.cluster, scn.job, scn.num_nodes, limits, every_device)
    limits = space.limits  # what the target framework has of the user's limits

    def empty() -> InfeasibleError:
        if every_device:
            return NoFullUse(EVERY_DEVICE_NONE)
        from .diagnose import empty_space_message  # failure paths only: kept out of start-up

        return InfeasibleError(empty_space_message(scn, asked))

    if not len(space.configs):
        raise empty()
    table = scn.config_table(space.configs, space.config_arrays)
    orders = limits.orders()
    state = None
    low = -1
    while True:
        # Every pass after the first collects the partials the previous ones left out
        # whose lb1 does not exceed the best score (widened by its margin).
        found = _Pass(scn, table, space, orders, low, INF if state is None else state.widest_limit, by)
        if found.count == 0:
            raise empty()
        if state is None:
            state = _Search(scn, table, found.partials, found.numbers, limits, engine, threads, by)
            state.offload_when_needed = offload_asked is None
        else:
            state.extend(found.partials, found.numbers)
        offset = len(state.partials) - len(found.partials)
        remaining, bound = np.arange(len(found.partials)) + offset, found.bound
        while len(remaining):
            keep = bound <= state.limit(state.partials.vp[remaining])
            remaining, bound = remaining[keep], bound[keep]
            if not len(remaining):
                break
            take = bound <= (np.partition(bound, BLOCK - 1)[BLOCK - 1] if len(bound) > BLOCK else bound.max())
            state.block(remaining[take])
            remaining, bound = remaining[~take], bound[~take]
        if found.high >= state.widest_limit:
            break  # every partial whose lb1 could beat the best score was seen
        low = found.high
    if state.best is None:
        if every_device:
            raise InfeasibleError(EVERY_DEVICE_UNFIT)
        partials = enumerate_partials(scn.model, scn.cluster, scn.job, scn.num_nodes, limits)
        memory = memory_bound(scn, table, partials)
        from .diagnose import memory_message

        raise InfeasibleError(memory_message(scn, partials, memory, limits, engine, threads))
    best = state.best
    best.evaluated, best.total, best.bounded, best.partials = (state.evaluated, state.priced, state.bounded,
                                                               found.count)
    best.runners_up = [outcome for _, outcome in state.finalists if outcome is not best]
    return best


POLISH_EVALUATIONS = 256
"""At most this many schedules are timed while polishing a split."""


def polish_split(scn: Scenario, cand: Candidate, problem: DPProblem, local: int, ends: list[int],
                 engine: str = "cpp") -> list[int]:
    """The split of :func:`polish`."""
    return polish(scn, cand, problem, local, ends, engine)[0]


def polish(scn: Scenario, cand: Candidate, problem: DPProblem, local: int, ends: list[int],
           engine: str = "cpp") -> tuple[list[int], float]:
    """``(ends, its step in seconds)``: ``ends`` with stage boundaries moved one node at a
    time while the exact schedule of the split gets faster and every stage still fits
    (first improvement, boundaries in order, at most :data:`POLISH_EVALUATIONS`
    schedules timed).

    The DP's split minimises the closed form, whose optimum is not always the
    schedule's: the end-of-step sync of each rank starts when that rank is done, so
    stages holding the embedding or the output layer gain from fewer blocks, and with
    fewer micro-batches than stages the fill and drain matter more than the slowest
    stage.
    """
    tasks = BatchTasks.of_candidate(scn, cand)
    dp_fits, memory = split_fits(problem, local), CandidateMemory(tasks.priced, 0)
    # trials by outcome (a pass without improvement re-tries the splits next to the final
    # one that the pass before tried): those that passed both checks, timed, and the others
    timed: dict[tuple, float] = {}
    unfit: set[tuple] = set()

    def step(trial: list[int]) -> float:
        return batch_step_s(tasks, 0, np.diff([0] + trial).tolist(), engine)

    ends = list(ends)
    best, budget, improved = step(ends), POLISH_EVALUATIONS, True
    while improved and budget > 0:
        improved = False
        for k in range(len(ends) - 1):
            for delta in (-1, 1):
                trial = ends[:k] + [ends[k] + delta] + ends[k + 1:]
                if not (trial[k - 1] if k else 0) < trial[k] < trial[k + 1] or budget <= 0:
                    continue
                key = tuple(trial)
                if key in unfit:
                    continue
                if key not in timed:
                    if not dp_fits(trial) or not memory.fits(np.diff([0] + trial).tolist()):
                        unfit.add(key)
                        continue
                    timed[key] = step(trial)
                budget -= 1
                seconds = timed[key]
                if seconds < best:
                    best, ends, improved = seconds, trial, True
    return ends, best


def work_floor_ps(problem: DPProblem, result: DPResult, n: int, pp: int, micro_batches: int,
                  ends: list[int] | None = None) -> int:
    """A lower bound on the exact schedule of candidate ``n``'s split (``ends``, default
    the DP's): every pipeline rank runs its chunks (the DP's stage times, sends included)
    once per micro-batch, less two picoseconds of rounding per node and micro-batch."""
    work = [0] * pp
    for k, t in enumerate(stage_times(problem, n, ends if ends is not None else ends_of(problem, result, n))):
        work[k % pp] += t
    return micro_batches * (max(work) - 2 * (problem.num_nodes + 1))
