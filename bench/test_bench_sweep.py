"""``nest sweep`` throughput (reported, never asserted).

* 1000 scenarios (5 models x 200 network variants: leaf and spine bandwidth
  multipliers of a 512-device DGX H100 cluster), local spawn process pool over all
  cores; goal > 20 scenarios/s on a 2-core machine. Wall time includes starting the
  worker processes, writing and fsync'ing the journal and the CSV.
"""

import os
from pathlib import Path

from nest.studies.sweep import expand_grid, run_sweep

GRID = Path(__file__).resolve().parents[1] / "tests" / "data" / "sweeps" / "bench_1000.yaml"


def test_sweep_1000_scenarios(benchmark, tmp_path):
    assert len(expand_grid(GRID)) == 1000
    runs = iter(range(100))

    def sweep():
        out = tmp_path / f"run{next(runs)}.csv"
        return run_sweep(GRID, out, quiet=True)

    summary = benchmark.pedantic(sweep, rounds=1, iterations=1)
    assert summary["ran"] == 1000 and summary["error"] == 0
    benchmark.group = "sweep"
    benchmark.extra_info.update(
        wall_s=round(summary["wall_s"], 2), scenarios_per_s=round(summary["scenarios_per_s"], 1),
        ok=summary["ok"], infeasible=summary["infeasible"], invalid=summary["invalid"],
        cores=os.cpu_count())
