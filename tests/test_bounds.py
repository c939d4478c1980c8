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
