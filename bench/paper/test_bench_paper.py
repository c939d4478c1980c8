"""Benchmarks of the comparison machinery (``python -m pytest bench/paper --benchmark-only``).

Times one strategy sweep (manual, topology-blind, MCMC with the paper budget, nest) of one
model and one paper network at two device counts, one simulated step of nest's plan, and
library calls on NEST artifact instances beside the artifact solver's recorded times; the
full experiments are ``python bench/paper/run_paper.py`` and ``bench/paper/artifact_speed.py``.
"""

import json
from pathlib import Path

import pytest

import nest
from nest.inputs.measured import instance_setup
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


ARTIFACT = Path(__file__).resolve().parents[3] / "shared" / "data" / "nest-artifact"
RECORDED = Path(__file__).resolve().parent / "results" / "artifact_speed.json"
"""The NEST artifact solver's times on the same instances (``artifact_speed.py``, g++ -O2)."""


@pytest.mark.parametrize("name", ["h100_spineLeaf_llama2_mbs1_n64", "h100_spineLeaf_llama2_mbs1_n1024",
                                  "tpuv4_fatTree_gpt3_mbs1_n256", "h100_spineLeaf_mixtral_mbs1_n1024"])
def test_artifact_instance_library_call(benchmark, name):
    """Loading a NEST artifact instance and planning it, as a library call; beside it the
    artifact's own solver's recorded time on the instance and the ratio."""
    path = ARTIFACT / f"{name}.json"
    if not path.is_file():
        pytest.skip("NEST artifact instances not available")

    def solve():
        setup = instance_setup(str(path))
        return nest.plan(setup.model, setup.cluster, setup.job, source=setup.source, limits=setup.limits)

    benchmark.group = "NEST artifact instances, library call"
    result = benchmark.pedantic(solve, rounds=3, iterations=1)
    recorded = {r["instance"]: r["artifact"] for r in json.loads(RECORDED.read_text())} if RECORDED.is_file() else {}
    if recorded.get(name, {}).get("exit") == 0:
        benchmark.extra_info["artifact_s"] = recorded[name]["seconds"]
        benchmark.extra_info["artifact_over_nest"] = recorded[name]["seconds"] / benchmark.stats.stats.min
    assert result.step_time_s > 0
