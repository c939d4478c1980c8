"""Benchmarks of the comparison machinery (``python -m pytest bench/paper --benchmark-only``).

Times one strategy sweep (manual, topology-blind, MCMC with the paper budget, nest) of one
model and one paper network at two device counts, and one simulated step of nest's plan;
the full experiment is ``python bench/paper/run_paper.py``.
"""

import pytest

import nest
from nest.planner import simulate
from nest.studies.compare import compare

PAPER_BUDGET = 1000


@pytest.mark.parametrize("cluster", ["tpuv4-fattree", "h100-spineleaf"])
def test_compare_gpt3(benchmark, cluster):
    benchmark.group = "compare gpt3-175b, 64 and 1024 devices, all strategies"
    rows = benchmark.pedantic(compare, args=("gpt3-175b", cluster, [64, 1024]),
                              kwargs={"budget": PAPER_BUDGET}, rounds=1, iterations=1)
    for row in rows:
        benchmark.extra_info[f"{row.devices} {row.strategy} wall_s"] = row.wall_s
        benchmark.extra_info[f"{row.devices} {row.strategy} vs_manual"] = row.vs_manual
    best = {r.devices: r for r in rows if r.strategy == "nest"}
    assert all(r.step_time_s >= best[r.devices].step_time_s * (1 - 1e-12) for r in rows if r.feasible)


def test_simulate_gpt3_step(benchmark):
    cluster = nest.load_cluster("h100-spineleaf", devices=64)
    plan = nest.plan("gpt3-175b", cluster)  # 16 stages, 768 micro-batches
    benchmark.group = "simulate one step"
    result = benchmark.pedantic(simulate, args=(plan, "gpt3-175b", cluster), rounds=3, iterations=1)
    benchmark.extra_info["events"] = len(result.events)
    benchmark.extra_info["relative_difference"] = result.relative_difference
