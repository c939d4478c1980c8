"""The C++ stage DP (nest._core) against the pure-Python reference and brute force."""

from __future__ import annotations

import numpy as np
import pytest

from nest import _core as core
from nest.dp import engine as engine
from nest.dp import reference as dp_reference
from nest.dp.problem import CHUNK, INF, INFEASIBLE, PRUNED, SOLVED, DPProblem, DPResult

ARRAY_FIELDS = ("time_ps", "params", "mem_params", "act_bytes", "send_ps", "cand_config", "cand_scale",
                "cand_offset", "cand_head_scale", "cand_mem_fixed", "cand_mem_per_param", "cand_g0", "cand_g1",
                "cand_lower_bound", "pos_offset", "pos_inflight", "pos_mem_fixed", "pos_tier")
HOST_FIELDS = ("host_params", "cand_host_per_param", "host_capacity")
N_RANDOM = 320


# ---------------------------------------------------------------------------------------
# random instances
# ---------------------------------------------------------------------------------------

def _layer_table(rng, kind: str, shape, high: int) -> np.ndarray:
    if kind == "uniform":  # the same value everywhere: many ties
        return np.full(shape, int(rng.integers(0, high + 1)), dtype=np.int64)
    if kind == "few":  # tiny range: ties and zeros
        return rng.integers(0, 3, size=shape).astype(np.int64)
    return rng.integers(0, high + 1, size=shape).astype(np.int64)


def random_arrays(rng: np.random.Generator, max_nodes: int = 9, max_candidates: int = 12) -> dict:
    """One random problem as keyword arrays for DPProblem.build."""
    nodes = int(rng.integers(1, max_nodes + 1))
    configs = int(rng.integers(1, 4))
    tiers = int(rng.integers(1, 4))
    kind = str(rng.choice(["random", "random", "uniform", "few", "big"]))
    if kind == "big":  # magnitudes where int -> double conversion rounds
        time = rng.integers(0, 10**15, size=(configs, nodes), dtype=np.int64)
        params = rng.integers(2**52, 2**55, size=(configs, nodes), dtype=np.int64)
        act = rng.integers(2**50, 2**56, size=(configs, nodes), dtype=np.int64)
        send = rng.integers(0, 10**14, size=(configs, tiers, nodes), dtype=np.int64)
    else:
        time = _layer_table(rng, kind, (configs, nodes), 100)
        params = _layer_table(rng, kind, (configs, nodes), 50)
        act = _layer_table(rng, kind, (configs, nodes), 20)
        send = _layer_table(rng, kind, (configs, tiers, nodes), 30)
    if rng.random() < 0.25:
        send[:] = 0  # free boundaries
    if rng.random() < 0.2:
        params[:] = 0  # G(w) constant
    mem_params = params.copy()
    if rng.random() < 0.4:  # memory weighs parameters differently from the sync (MoE)
        mem_params = rng.permutation(params, axis=1) + params // 3

    n = int(rng.integers(1, max_candidates + 1))
    if rng.random() < 0.1:
        n = int(rng.integers(CHUNK + 1, 3 * CHUNK))  # several pruning chunks
    cand_config = rng.integers(0, configs, size=n).astype(np.int64)
    stages = rng.integers(1, nodes + 1, size=n)
    pos_offset = np.concatenate(([0], np.cumsum(stages))).astype(np.int64)
    total = int(pos_offset[-1])
    pos_tier = rng.integers(0, tiers, size=total).astype(np.int64)
    pos_tier[pos_offset[1:] - 1] = -1
    pos_inflight = rng.choice([0.0, 1.0, 1.5, 2.0, 3.0, 0.1], size=total).astype(np.float64)
    if rng.random() < 0.5:  # 1F1B-like: more stashed micro-batches early
        for c in range(n):
            p = int(stages[c])
            pos_inflight[pos_offset[c]:pos_offset[c + 1]] = np.arange(p, 0, -1) * rng.choice([0.5, 1.0])

    capacity = float(rng.choice([1000.0, 1e3 + 0.1, 1e4, 7e2]))
    w_total = mem_params.sum(axis=1).astype(np.float64)
    a_total = act.sum(axis=1).astype(np.float64)
    # Scale the memory coefficients so that capacity binds somewhere between "whole model
    # fits on one stage" and "nothing fits": some candidates (or all) become infeasible.
    tight = rng.uniform(0.05, 1.5, size=n)
    frac_fixed = rng.uniform(0.0, 0.6, size=n)
    cand_mem_fixed = np.round(frac_fixed * capacity, 1)
    denom_w = np.maximum(w_total[cand_config], 1.0)
    denom_a = np.maximum(a_total[cand_config], 1.0)
    cand_mem_per_param = rng.uniform(0, 1, size=n) * capacity / denom_w / tight
    pos_inflight = pos_inflight * (capacity / denom_a[np.repeat(np.arange(n), stages)] / 3.0)
    # bytes a position holds besides its segment (interleaving's first and last nodes)
    pos_mem_fixed = np.where(rng.random(total) < 0.3, np.round(rng.uniform(0, 0.4, total) * capacity, 1), 0.0)
    if rng.random() < 0.15:
        pos_mem_fixed[:] = 0.0
        cand_mem_per_param[:] = 0.0
        pos_inflight[:] = 0.0
        cand_mem_fixed[:] = 0.0  # memory never binds
    if rng.random() < 0.05:
        cand_mem_fixed[:] = 2 * capacity  # nothing fits anywhere

    cand_scale = rng.integers(0, 5, size=n).astype(np.int64)  # 0: one micro-batch of 1F1B
    cand_offset = np.where(rng.random(n) < 0.5, 0, rng.integers(0, 400, size=n)).astype(np.int64)
    # interleaved schedules price the last virtual stage apart: head_scale > 0
    cand_head_scale = np.where(rng.random(n) < 0.5, 0, rng.integers(1, 12, size=n)).astype(np.int64)
    cand_g0 = np.round(rng.uniform(0, 500, size=n), 2)
    mean_t = max(float(time.mean()), 1.0)
    mean_w = max(float(params.mean()), 1.0)
    cand_g1 = rng.uniform(0, 3, size=n) * mean_t / mean_w  # trades maxT against maxW
    cand_g1[rng.random(n) < 0.2] = 0.0

    # host memory (offloaded optimizer state) binds in some problems
    host_params = np.zeros_like(mem_params)
    cand_host_per_param = np.zeros(n)
    host_capacity = 0.0
    if rng.random() < 0.3:
        host_capacity = float(rng.choice([500.0, 2e3 + 0.1]))
        host_params = rng.integers(0, 41, size=mem_params.shape).astype(np.int64)
        h_total = np.maximum(host_params.sum(axis=1).astype(np.float64), 1.0)
        cand_host_per_param = rng.uniform(0, 1, size=n) * host_capacity / h_total[cand_config] / tight

    lb_kind = rng.choice(["zero", "node", "huge", "mixed"])
    if lb_kind == "zero":
        lower = np.zeros(n, dtype=np.int64)
    elif lb_kind == "node":  # a true lower bound: scale * largest node time
        lower = cand_scale * time.max(axis=1)[cand_config] + cand_offset
    elif lb_kind == "huge":  # prunes everything after the first chunk that solves
        lower = np.full(n, 10**17, dtype=np.int64)
        lower[: min(n, 3)] = 0
    else:
        lower = rng.integers(0, int(max(time.sum(), 1)) * 4 + 1, size=n).astype(np.int64)
    return {"time_ps": time, "params": params, "mem_params": mem_params, "act_bytes": act, "send_ps": send,
            "cand_config": cand_config, "cand_scale": cand_scale, "cand_offset": cand_offset,
            "cand_head_scale": cand_head_scale,
            "cand_mem_fixed": cand_mem_fixed, "cand_mem_per_param": cand_mem_per_param,
            "cand_g0": cand_g0, "cand_g1": cand_g1,
            "cand_lower_bound": np.asarray(lower, dtype=np.int64), "pos_offset": pos_offset,
            "pos_inflight": pos_inflight, "pos_mem_fixed": pos_mem_fixed, "pos_tier": pos_tier,
            "capacity": capacity, "host_params": host_params, "cand_host_per_param": cand_host_per_param,
            "host_capacity": host_capacity}


def random_problem(seed: int, **kw) -> DPProblem:
    return DPProblem.build(**random_arrays(np.random.default_rng(seed), **kw))


def assert_same(a: DPResult, b: DPResult) -> None:
    for field in ("status", "objective", "max_time", "max_params", "ends"):
        x, y = getattr(a, field), getattr(b, field)
        assert x.dtype == np.int64 and y.dtype == np.int64, field
        np.testing.assert_array_equal(x, y, err_msg=field)
    assert a.best == b.best


def without_pruning(problem: DPProblem) -> DPProblem:
    arrays = {f: getattr(problem, f) for f in ARRAY_FIELDS + HOST_FIELDS}
    arrays["cand_lower_bound"] = np.zeros_like(problem.cand_lower_bound)
    return DPProblem.build(capacity=problem.capacity, **arrays)


# ---------------------------------------------------------------------------------------
# C++ == Python reference == brute force
# ---------------------------------------------------------------------------------------

SEEDS = range(N_RANDOM)


def test_generator_covers_every_outcome():
    """The random instances exercise solved, infeasible and pruned candidates alike."""
    counts = np.zeros(3, dtype=np.int64)
    for seed in SEEDS:
        counts += np.bincount(engine.solve(random_problem(seed), "cpp").status, minlength=3)
    assert counts[SOLVED] > 500 and counts[INFEASIBLE] > 50 and counts[PRUNED] > 50, counts


@pytest.mark.parametrize("seed", SEEDS)
def test_cpp_matches_reference(seed):
    problem = random_problem(seed)
    expected = dp_reference.solve(problem)
    got = engine.solve(problem, "cpp", threads=1)
    assert_same(got, expected)


@pytest.mark.parametrize("seed", SEEDS)
def test_cpp_matches_brute_force(seed):
    problem = without_pruning(random_problem(seed))
    got = engine.solve(problem, "cpp", threads=1)
    assert not (got.status == PRUNED).any()
    for n in range(problem.num_candidates):
        expected = dp_reference.brute_force(problem, n)
        if expected is None:
            assert got.status[n] == INFEASIBLE
            continue
        assert got.status[n] == SOLVED
        start, stop = int(problem.pos_offset[n]), int(problem.pos_offset[n + 1])
        assert (int(got.objective[n]), int(got.max_time[n]), int(got.max_params[n]),
                got.ends[start:stop].tolist()) == tuple(expected)


@pytest.mark.parametrize("seed", range(0, N_RANDOM, 4))
def test_thread_count_does_not_change_result(seed):
    problem = random_problem(seed + 10_000, max_candidates=80)
    base = engine.solve(problem, "cpp", threads=1)
    for threads in (2, 4):
        assert_same(engine.solve(problem, "cpp", threads=threads), base)
    assert_same(engine.solve(problem, "cpp"), base)


def test_chunked_pruning_against_reference():
    """Several chunks of candidates: pruning against earlier chunks must agree."""
    n = 4 * CHUNK + 5
    for seed in range(20):
        arrays = random_arrays(np.random.default_rng(70_000 + seed), max_nodes=8, max_candidates=n)
        problem = DPProblem.build(**arrays)
        expected = dp_reference.solve(problem)
        for threads in (1, 2):
            assert_same(engine.solve(problem, "cpp", threads=threads), expected)


def _medium(seed: int) -> DPProblem:
    return random_problem(20_000 + seed, max_nodes=40, max_candidates=6)


MANY_POSITIONS = 500
"""Medium instances with more stage positions than this take the reference seconds (7 s for
seed 0's 1126): they run with the slow checks."""


@pytest.mark.parametrize("seed", [pytest.param(s, marks=pytest.mark.slow if len(_medium(s).pos_tier) > MANY_POSITIONS
                                               else ()) for s in range(40)])
def test_medium_instances_against_reference(seed):
    """Up to 40 nodes (too many for brute force): the full result against the reference."""
    problem = _medium(seed)
    assert_same(engine.solve(problem, "cpp", threads=2), dp_reference.solve(problem))


def test_uniform_chain_ties():
    """A uniform chain: every split with balanced stages ties; the lexicographic rule wins."""
    nodes, p = 9, 4
    ones = np.ones((1, nodes), dtype=np.int64)
    problem = DPProblem.build(
        time_ps=10 * ones, params=ones, act_bytes=ones, send_ps=np.zeros((1, 1, nodes), np.int64),
        cand_config=np.zeros(1, np.int64), cand_scale=np.ones(1, np.int64),
        cand_mem_fixed=np.zeros(1), cand_mem_per_param=np.zeros(1), cand_g0=np.zeros(1),
        cand_g1=np.zeros(1), cand_lower_bound=np.zeros(1, np.int64),
        pos_offset=np.array([0, p], np.int64), pos_inflight=np.zeros(p),
        pos_tier=np.array([0, 0, 0, -1], np.int64), capacity=1.0)
    got = engine.solve(problem, "cpp")
    assert_same(got, dp_reference.solve(problem))
    assert got.ends.tolist() == [1, 3, 6, 9]  # maxT 30, maxW 3: smallest ends first
    assert got.max_time[0] == 30 and got.best == 0


def test_empty_candidate_list():
    arrays = random_arrays(np.random.default_rng(1))
    for name in ("cand_config", "cand_scale", "cand_offset", "cand_head_scale", "cand_lower_bound"):
        arrays[name] = np.zeros(0, np.int64)
    for name in ("cand_mem_fixed", "cand_mem_per_param", "cand_g0", "cand_g1", "pos_inflight", "pos_mem_fixed",
                 "cand_host_per_param"):
        arrays[name] = np.zeros(0)
    arrays["pos_offset"] = np.zeros(1, np.int64)
    arrays["pos_tier"] = np.zeros(0, np.int64)
    problem = DPProblem.build(**arrays)
    got = engine.solve(problem, "cpp")
    assert_same(got, dp_reference.solve(problem))
    assert got.best == -1 and got.status.shape == (0,)


@pytest.mark.slow
def test_larger_instance_against_reference():
    """200 nodes, 100 candidates, p up to 64: C++ whole, the reference on a few candidates."""
    rng = np.random.default_rng(2024)
    nodes, configs, tiers, n = 200, 4, 3, 100
    time = rng.integers(1_000, 100_000, size=(configs, nodes)).astype(np.int64)
    params = rng.integers(0, 10**8, size=(configs, nodes)).astype(np.int64)
    act = rng.integers(0, 10**7, size=(configs, nodes)).astype(np.int64)
    send = rng.integers(0, 20_000, size=(configs, tiers, nodes)).astype(np.int64)
    stages = rng.integers(1, 65, size=n)
    stages[:4] = [1, 3, 16, 64]
    pos_offset = np.concatenate(([0], np.cumsum(stages))).astype(np.int64)
    total = int(pos_offset[-1])
    pos_tier = rng.integers(0, tiers, size=total).astype(np.int64)
    pos_tier[pos_offset[1:] - 1] = -1
    inflight = np.concatenate([np.arange(p, 0, -1, dtype=np.float64) for p in stages])
    capacity = 2e10
    problem = DPProblem.build(
        time_ps=time, params=params, act_bytes=act, send_ps=send,
        cand_config=rng.integers(0, configs, size=n).astype(np.int64),
        cand_scale=rng.integers(1, 9, size=n).astype(np.int64),
        cand_mem_fixed=rng.uniform(0, 1e10, size=n), cand_mem_per_param=rng.uniform(0, 16, size=n),
        cand_g0=rng.uniform(0, 1e6, size=n), cand_g1=rng.uniform(0, 1e-2, size=n),
        cand_lower_bound=np.zeros(n, np.int64), pos_offset=pos_offset, pos_inflight=inflight,
        pos_tier=pos_tier, capacity=capacity)
    got = engine.solve(problem, "cpp", threads=2)
    assert_same(engine.solve(problem, "cpp", threads=1), got)
    assert (got.status == SOLVED).sum() > 20 and (got.status == INFEASIBLE).sum() > 5
    for n_check in range(6):
        expected = dp_reference.solve_candidate(problem, n_check)
        if expected is None:
            assert got.status[n_check] == INFEASIBLE
            continue
        start, stop = int(pos_offset[n_check]), int(pos_offset[n_check + 1])
        assert (int(got.objective[n_check]), int(got.max_time[n_check]),
                int(got.max_params[n_check]), got.ends[start:stop].tolist()) == tuple(expected)


# ---------------------------------------------------------------------------------------
# input validation in the C++ core
# ---------------------------------------------------------------------------------------

def _base_args() -> dict:
    problem = random_problem(3)
    args = {f: getattr(problem, f).copy() for f in ARRAY_FIELDS}
    args["capacity"] = problem.capacity
    return args


def _call(args: dict, threads: int = 1):
    return core.solve(*[args[f] for f in ARRAY_FIELDS], args["capacity"], threads)


def test_base_args_are_valid():
    _call(_base_args())


def _stage_overflow(a):
    a["pos_offset"] = a["pos_offset"].copy()
    a["pos_offset"][1:] += a["time_ps"].shape[1]  # first candidate gets > nodes stages
    a["pos_inflight"] = np.zeros(int(a["pos_offset"][-1]))
    a["pos_mem_fixed"] = np.zeros(int(a["pos_offset"][-1]))
    a["pos_tier"] = np.zeros(int(a["pos_offset"][-1]), np.int64)


BAD_INPUTS = {
    "float_as_int": lambda a: a.update(time_ps=a["time_ps"].astype(np.float64)),
    "int32_as_int64": lambda a: a.update(params=a["params"].astype(np.int32)),
    "int_as_float": lambda a: a.update(cand_g0=a["cand_g0"].astype(np.int64)),
    "float32": lambda a: a.update(pos_inflight=a["pos_inflight"].astype(np.float32)),
    "big_endian": lambda a: a.update(cand_scale=a["cand_scale"].astype(">i8")),
    "list": lambda a: a.update(cand_config=a["cand_config"].tolist()),
    "ndim": lambda a: a.update(send_ps=a["send_ps"][:, 0, :].copy()),
    "non_contiguous": lambda a: a.update(time_ps=np.asfortranarray(
        np.concatenate([a["time_ps"]] * 2, axis=0))[: a["time_ps"].shape[0]]),
    "shape_params": lambda a: a.update(params=a["params"][:, :-1].copy() if a["params"].shape[1] > 1
                                       else np.zeros((a["params"].shape[0], 2), np.int64)),
    "shape_cand": lambda a: a.update(cand_g1=np.append(a["cand_g1"], 1.0)),
    "nan": lambda a: a["cand_mem_fixed"].__setitem__(0, np.nan),
    "inf": lambda a: a["cand_g1"].__setitem__(0, np.inf),
    "nan_capacity": lambda a: a.update(capacity=float("nan")),
    "negative_time": lambda a: a["time_ps"].__setitem__((0, 0), -1),
    "negative_send": lambda a: a["send_ps"].__setitem__((0, 0, 0), -5),
    "negative_inflight": lambda a: a["pos_inflight"].__setitem__(0, -1.0),
    "negative_pos_mem_fixed": lambda a: a["pos_mem_fixed"].__setitem__(0, -1.0),
    "nan_pos_mem_fixed": lambda a: a["pos_mem_fixed"].__setitem__(0, np.nan),
    "shape_pos_mem_fixed": lambda a: a.update(pos_mem_fixed=np.append(a["pos_mem_fixed"], 0.0)),
    "negative_lower_bound": lambda a: a["cand_lower_bound"].__setitem__(0, -1),
    "negative_scale": lambda a: a["cand_scale"].__setitem__(0, -1),
    "negative_offset": lambda a: a["cand_offset"].__setitem__(0, -1),
    "float_offset": lambda a: a.update(cand_offset=a["cand_offset"].astype(np.float64)),
    "shape_offset": lambda a: a.update(cand_offset=np.append(a["cand_offset"], 0)),
    "negative_head_scale": lambda a: a["cand_head_scale"].__setitem__(0, -1),
    "shape_head_scale": lambda a: a.update(cand_head_scale=np.append(a["cand_head_scale"], 0)),
    "head_scale_overflow": lambda a: a.update(cand_head_scale=np.full_like(a["cand_head_scale"], 2**62),
                                              cand_scale=np.full_like(a["cand_scale"], 2**62)),
    "offset_overflow": lambda a: a.update(cand_offset=np.full_like(a["cand_offset"], 2**63 - 2),
                                          cand_scale=np.ones_like(a["cand_scale"])),
    "config_range": lambda a: a["cand_config"].__setitem__(0, a["time_ps"].shape[0]),
    "offset_start": lambda a: a["pos_offset"].__setitem__(0, 1),
    "stages_gt_nodes": _stage_overflow,
    "tier_range": lambda a: a.update(pos_offset=np.array([0, 2], np.int64),
                                     cand_config=a["cand_config"][:1].copy(),
                                     cand_scale=a["cand_scale"][:1].copy(),
                                     cand_offset=a["cand_offset"][:1].copy(),
                                     cand_head_scale=a["cand_head_scale"][:1].copy(),
                                     cand_mem_fixed=a["cand_mem_fixed"][:1].copy(),
                                     cand_mem_per_param=a["cand_mem_per_param"][:1].copy(),
                                     cand_g0=a["cand_g0"][:1].copy(), cand_g1=a["cand_g1"][:1].copy(),
                                     cand_lower_bound=a["cand_lower_bound"][:1].copy(),
                                     pos_inflight=np.zeros(2), pos_mem_fixed=np.zeros(2),
                                     pos_tier=np.array([a["send_ps"].shape[1], -1], np.int64),
                                     time_ps=np.ones((a["time_ps"].shape[0], 3), np.int64),
                                     params=np.ones((a["time_ps"].shape[0], 3), np.int64),
                                     act_bytes=np.ones((a["time_ps"].shape[0], 3), np.int64),
                                     send_ps=np.ones((a["time_ps"].shape[0], a["send_ps"].shape[1], 3),
                                                     np.int64)),
    "negative_tier": lambda a: (a.update(pos_offset=np.array([0, 2], np.int64),
                                         pos_inflight=np.zeros(2), pos_mem_fixed=np.zeros(2),
                                         pos_tier=np.array([-1, -1], np.int64),
                                         **{k: a[k][:1].copy() for k in (
                                             "cand_config", "cand_scale", "cand_offset", "cand_head_scale",
                                             "cand_mem_fixed",
                                             "cand_mem_per_param", "cand_g0", "cand_g1",
                                             "cand_lower_bound")},
                                         time_ps=np.ones((a["time_ps"].shape[0], 3), np.int64),
                                         params=np.ones((a["time_ps"].shape[0], 3), np.int64),
                                         act_bytes=np.ones((a["time_ps"].shape[0], 3), np.int64),
                                         send_ps=np.ones((a["time_ps"].shape[0], 1, 3), np.int64))),
    "empty_chain": lambda a: a.update(**{k: np.zeros(a[k].shape[:-1] + (0,), np.int64)
                                         for k in ("time_ps", "params", "act_bytes", "send_ps")}),
    "time_overflow": lambda a: a["time_ps"].__setitem__((0, 0), 2**62),
    "objective_overflow": lambda a: a.update(cand_scale=np.full_like(a["cand_scale"], 2**40),
                                             time_ps=a["time_ps"] + 2**30),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_input_raises_value_error(name):
    args = _base_args()
    BAD_INPUTS[name](args)
    with pytest.raises(ValueError):
        _call(args)


def test_unknown_engine():
    with pytest.raises(ValueError, match="gpu"):
        engine.solve(random_problem(0), "gpu")


def test_bad_thread_count():
    with pytest.raises(ValueError):
        engine.solve(random_problem(0), "cpp", threads=0)
    problem = random_problem(5)
    many = engine.solve(problem, "cpp", threads=64)  # more threads than candidates
    assert_same(many, engine.solve(problem, "python", threads=3))


def test_engine_helpers():
    assert isinstance(engine.has_openmp(), bool)
    assert engine.available_threads() >= 1
    assert engine.has_openmp() == core.has_openmp()
    problem = random_problem(7)
    assert_same(engine.solve(problem, "python"), dp_reference.solve(problem))


def test_result_contract():
    """Unsolved entries hold INF / -1 and best is the first minimum."""
    for seed in range(40):
        problem = random_problem(seed)
        got = engine.solve(problem, "cpp")
        unsolved = got.status != SOLVED
        assert (got.objective[unsolved] == INF).all() and (got.max_time[unsolved] == INF).all()
        for n in np.flatnonzero(unsolved):
            assert (got.ends[problem.pos_offset[n]:problem.pos_offset[n + 1]] == -1).all()
        solved = np.flatnonzero(~unsolved)
        if len(solved):
            assert got.best == solved[np.argmin(got.objective[solved])]
        else:
            assert got.best == -1


def test_small_batches_run_on_one_thread_by_default():
    """Below 32 million DP cells (a search's batch) the default is one thread (what a
    parallel team costs on a busy machine exceeds what it saves); above, every available
    thread. Either way the result is the same as with any explicit thread count."""
    assert core.default_threads(31_999_999.0) == 1
    assert core.default_threads(32_000_000.0) == core.max_threads()
    small = random_problem(3, max_candidates=64)
    assert len(small.pos_inflight) * small.time_ps.shape[1] ** 2 < 32_000_000
    assert engine.default_threads(small) == 1
    assert_same(engine.solve(small, "cpp"), engine.solve(small, "cpp", threads=2))
