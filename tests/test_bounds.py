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
