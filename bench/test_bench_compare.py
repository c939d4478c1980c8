"""``nest compare`` of issue 19 (goal: <= 10 s): gpt3-175b on h100-spineleaf at 64, 128, 256,
512 and 1024 devices with the default strategies (manual, topology-blind, MCMC, nest), in
process and as the command. Reported, never asserted; ``wall_s`` per row in extra_info."""

from __future__ import annotations

import subprocess
import sys

from nest.planner import clear_shared_scenarios
from nest.studies.compare import compare

DEVICES = [64, 128, 256, 512, 1024]
COMMAND = ["compare", "--model", "gpt3-175b", "--cluster", "h100-spineleaf", "--devices",
           ",".join(map(str, DEVICES)), "--quiet"]


def _cold():
    """Each round from scratch (no Scenario kept from an earlier round)."""
    clear_shared_scenarios()
    return ("gpt3-175b", "h100-spineleaf", DEVICES), {}


def test_compare_gpt3_h100_spineleaf(benchmark):
    benchmark.group = "compare gpt3-175b h100-spineleaf 64-1024"
    rows = benchmark.pedantic(compare, setup=_cold, rounds=1, iterations=1)
    for row in rows:
        benchmark.extra_info[f"{row.devices} {row.strategy} wall_s"] = row.wall_s


def test_compare_command(benchmark):
    benchmark.group = "compare gpt3-175b h100-spineleaf 64-1024"

    def run():
        done = subprocess.run([sys.executable, "-m", "nest", *COMMAND], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr

    benchmark.pedantic(run, rounds=1, iterations=1)
