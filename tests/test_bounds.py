"""The search prunes with lower bounds: each must be a true lower bound of the exact
objective, on realistic and on adversarial networks (an outer tier faster than an inner
one spreads groups profitably, which once made a bound overshoot)."""

import pytest

import nest
from nest.presets.models import MODELS
from nest.specs import JobSpec, Tier
from planning_checks import assert_bounds_below_objective


def _fast_outer_cluster():
    device = nest.load_device("h100-sxm")
    return nest.ClusterSpec("fast-outer", device, (
        Tier("node", 8, 100e9, 3e-6), Tier("pod", 4, 20e9, 5e-6), Tier("core", 4, 60e9, 4e-6)))


CASES = [
    ("qwen3-30b-a3b", lambda: nest.load_cluster("dgx-h100", devices=128), JobSpec(global_batch=256, seq_len=4096)),
    ("mixtral-8x7b", _fast_outer_cluster, JobSpec(global_batch=128, seq_len=4096)),
    ("llama2-13b", _fast_outer_cluster, JobSpec(global_batch=96, seq_len=8192)),
]


@pytest.mark.parametrize("name,cluster_of,job", CASES, ids=[c[0] for c in CASES])
def test_bounds_never_exceed_the_exact_objective(name, cluster_of, job):
    assert_bounds_below_objective(MODELS[name], cluster_of(), job, seed=7, sample=60)


def _shape_floor_by_enumeration(cluster, size, spacing, dispatch=None):
    """ShapeFloor's definition enumerated directly: every factor tuple within the fanouts
    whose product is ``size`` and whose members per tier-t group fit ``ceil(devices per
    tier-t group / spacing)``, plus the flat ring of every tier that holds the span."""
    import itertools
    import math

    from nest.network.tiers import GroupShape

    sizes, fanouts = cluster.group_sizes(), [t.fanout for t in cluster.tiers]
    shapes = [f for f in itertools.product(*(range(1, n + 1) for n in fanouts))
              if math.prod(f) == size
              and all(math.prod(f[:t + 1]) <= -(-sizes[t] // spacing) for t in range(len(f)))]
    shapes += [tuple(size if u == t else 1 for u in range(len(fanouts))) for t in range(len(fanouts))
               if (size - 1) * spacing + 1 <= sizes[t]]
    if not shapes:
        return (0.0, 0.0, 0.0, 0.0)
    bandwidth = tuple(t.effective_bandwidth for t in cluster.tiers)
    latency = tuple(t.latency for t in cluster.tiers)
    terms = [GroupShape(f, bandwidth, latency, dispatch) for f in shapes]
    terms = [g.reduce_scatter_terms() + g.all_to_all_terms() for g in terms]
    return tuple(min(term[i] for term in terms) for i in range(4))


def test_shape_floors_are_their_definition_with_and_without_a_shared_memo():
    """``shape_floor`` keeps each size's decompositions and each shape's terms in a memo
    shared by every (size, spacing) of a search; its floors must be the definition's
    minimum exactly, whatever the memo already holds."""
    from nest.network.tiers import TokenDispatch, shape_floor

    clusters = [_fast_outer_cluster(), nest.load_cluster("h100-spineleaf", devices=512)]
    dispatch = TokenDispatch(64, 8)
    for cluster in clusters:
        memo: dict = {}
        for size in (1, 2, 3, 4, 6, 8, 12, 16, 17, 24, 32, 48, 64, 97, 128):
            for spacing in (1, 2, 3, 5, 8, 9, 16, 32, 40, 128):
                for d in (None, dispatch):
                    expected = _shape_floor_by_enumeration(cluster, size, spacing, d)
                    shared = shape_floor(cluster, size, spacing, d, memo)
                    alone = shape_floor(cluster, size, spacing, d)
                    got = (shared.rs_alpha, shared.rs_beta, shared.a2a_alpha, shared.a2a_beta)
                    assert got == expected, (cluster.name, size, spacing, d)
                    assert alone == shared



@pytest.mark.parametrize("limit", [None, 0])
def test_shape_floors_in_one_batch_are_shape_floor_bit_for_bit(monkeypatch, limit):
    """``shape_floors`` tabulates every pair's shapes and terms with numpy; each floor must be
    ``shape_floor``'s exactly (same shapes, same arithmetic), flex dispatches and pairs no
    shape fits included; past ``SHAPE_COMBOS_LIMIT`` it falls back to ``shape_floor``."""
    import numpy as np

    from nest.network import tiers
    from nest.network.tiers import TokenDispatch, shape_floor, shape_floors

    if limit is not None:
        monkeypatch.setattr(tiers, "SHAPE_COMBOS_LIMIT", limit)
    sizes = np.array(list(range(1, 66)) + [96, 100, 128, 192, 256, 384, 512, 768, 1024, 2048, 4096], dtype=np.int64)
    spacings = np.array([1, 2, 3, 8, 9, 24, 40, 1000], dtype=np.int64)
    sizes, spacings = (a.ravel() for a in np.meshgrid(sizes, spacings))
    names = ("rs_alpha", "rs_beta", "a2a_alpha", "a2a_beta")
    for cluster in (_fast_outer_cluster(), nest.load_cluster("h100-spineleaf", devices=512),
                    nest.load_cluster("dgx-h100", devices=1024)):
        for dispatch in (None, TokenDispatch(64, 8), TokenDispatch(128, 8, 2)):
            got = shape_floors(cluster, sizes, spacings, dispatch)
            want = np.array([[getattr(shape_floor(cluster, int(a), int(b), dispatch), n) for n in names]
                             for a, b in zip(sizes.tolist(), spacings.tolist())])
            assert got.shape == want.shape and (got == want).all(), (cluster.name, dispatch)
            assert (got[sizes > cluster.num_devices] == 0.0).all()

def test_distinct_rows_are_numpys_unique_rows():
    """``distinct_rows`` (nest.arrays, no ``np.unique``) finds the same distinct rows as
    ``np.unique(axis=0)``, each at its first occurrence, and maps every row back."""
    import numpy as np

    from nest.arrays import distinct_rows

    rng = np.random.default_rng(3)
    for n, width, high in ((0, 2, 3), (1, 1, 5), (50, 3, 3), (400, 5, 4), (300, 2, 2**62)):
        columns = rng.integers(-high, high, size=(width, n), dtype=np.int64)
        first, inverse = distinct_rows(*columns)
        rows = columns.T
        expected = np.unique(rows, axis=0) if n else rows
        assert len(first) == len(expected)
        assert (rows[first][inverse] == rows).all()
        assert sorted(map(tuple, rows[first].tolist())) == sorted(map(tuple, expected.tolist()))
        for k, i in enumerate(first.tolist()):  # each the first occurrence of its row
            assert not (rows[:i] == rows[i]).all(axis=1).any()
            assert (inverse == k).sum() == (rows == rows[i]).all(axis=1).sum()


def _candidate_bound_row_by_row(scn, table, cands, ranking=None):
    """lb2 as its definition prices it: every candidate's floors and kind times on its
    own, nothing shared between candidates (the reference for :func:`candidate_bound`)."""
    from nest.cost.pricing import kind_times, sync_columns, sync_weights
    from nest.schedule import pipeline
    from nest.search.floors import config_sums, send_floors, stage_floors, sync_floor
    from nest.units import PS, to_ps

    degrees = cands.degrees(table.arrays)
    terms = scn.placer.floor_terms(degrees)
    kinds = to_ps(kind_times(scn, table, cands, terms).total)
    positions = cands.pp * cands.vp
    send = send_floors(scn, table)[cands.config, scn.placer.boundary_floor(degrees)]
    micro = scn.job.micro_batches(cands.dp, table.arrays.micro_batch[cands.config])
    sync = sync_columns(scn, cands, terms)
    weights = to_ps(sync_weights(scn, table, cands, sync))
    vp = cands.vp.astype(float)
    g = sync_floor(sync["fixed_s"] * PS, vp, config_sums(scn, weights), weights.max(axis=1), positions)
    t_sum = config_sums(scn, kinds)
    floors = stage_floors(t_sum, kinds.max(axis=1), positions, send)
    closed_form = pipeline.time_bound(micro, cands.vp, cands.pp, t_sum, *floors, send) + g
    if ranking is None:
        return closed_form
    mean = sync_floor(sync["fixed_s"] * PS, vp, config_sums(scn, weights), 0, positions)
    rounding = pipeline.rounding_ps(micro, cands.vp, scn.num_nodes, positions)
    return ranking.bound(cands.vp, closed_form, pipeline.schedule_floor(micro, cands.pp, *floors, mean, rounding))


@pytest.mark.parametrize("case", ["moe-ep-overlap", "measured-instance", "offload"])
def test_candidate_bound_shares_prices_exactly(case):
    """``candidate_bound`` prices each distinct (placement floors, configuration, ZeRO
    stage, offload) row once and spreads it back; every bound must equal the
    row-by-row definition's to the last bit, with either ranking. The EP-overlap case
    depends on the schedule's shape too (its unpaired passes), the measured instance has
    an uneven batch (one data-parallel degree per device count), the offload case
    fractional optimizer offload."""
    from pathlib import Path

    import numpy as np

    from nest.cost.scenario import Scenario
    from nest.inputs.measured import instance_setup
    from nest.parallel import RANK_ORDERS, CandidateArrays
    from nest.search.floors import Ranking, candidate_bound
    from nest.search.space import enumerate_partials

    limits = nest.SpaceLimits()
    if case == "moe-ep-overlap":
        model, cluster = MODELS["qwen3-30b-a3b"], nest.load_cluster("dgx-h100", devices=128)
        job = JobSpec(global_batch=256, seq_len=4096, moe_dispatcher="flex", overlap_moe_expert_parallel_comm=True)
        scn = Scenario(model, cluster, job)
    elif case == "measured-instance":
        data = Path(__file__).resolve().parents[2] / "shared" / "data" / "nest-artifact"
        path = data / "h100_spineLeaf_llama2_mbs1_n128.json"
        if not path.exists():
            pytest.skip("the NEST artifact's instances are not here")
        setup = instance_setup(path)
        model, cluster, job, limits = setup.model, setup.cluster, setup.job, setup.limits
        scn = Scenario(model, cluster, job, source=setup.source)
    else:
        model, cluster = MODELS["llama2-13b"], _fast_outer_cluster()
        job = JobSpec(global_batch=96, seq_len=4096)
        scn = Scenario(model, cluster, job)
    partials = enumerate_partials(model, cluster, job, scn.num_nodes, limits)
    table = scn.config_table(partials.configs, partials.config_arrays)
    rng = np.random.default_rng(11)
    pick = rng.choice(len(partials), size=min(200, len(partials)), replace=False)
    # siblings that differ only in the interleaving too: the prices they share, and under
    # EP overlap the unpaired passes they do not
    rows = [(partials.config[n], partials.pp[n], partials.dp[n], vp, zero, order)
            for n in pick for vp in sorted({int(partials.vp[n]), 1, 2, 4})
            for zero in range(4) for order in range(len(RANK_ORDERS))]
    cols = np.array(rows, dtype=np.int64).T
    offload = rng.choice([0.0, 0.25, 1.0], size=cols.shape[1]) if case == "offload" else None
    cands = CandidateArrays(*cols, RANK_ORDERS, offload)
    for ranking in (None, Ranking(), Ranking(margin=None)):
        got = candidate_bound(scn, table, cands, ranking)
        assert got.dtype == np.int64
        assert (got == _candidate_bound_row_by_row(scn, table, cands, ranking)).all(), ranking


def test_pair_tier_floors_are_pair_tier_floor_elementwise():
    """The pipeline boundaries' tier floors of a batch (one searchsorted over the group
    sizes) equal the scalar count of the tiers whose groups a distance leaves."""
    import numpy as np

    from nest.network.tiers import pair_tier_floor, pair_tier_floors

    distances = np.arange(0, 5000, dtype=np.int64)
    for cluster in (_fast_outer_cluster(), nest.load_cluster("h100-spineleaf", devices=512),
                    nest.load_cluster("dgx-h100", devices=1024), nest.load_cluster("tpuv4-fattree", devices=4096)):
        got = pair_tier_floors(cluster, distances)
        assert got.dtype == np.int64
        assert got.tolist() == [pair_tier_floor(cluster, int(d)) for d in distances], cluster.name
