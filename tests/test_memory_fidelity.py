"""Memory fidelity against public runs (bench/fidelity/memory_runs.py): every run that ran
is feasible in nest, and where a Megatron-Core peak is published nest's fullest rank is
within 10% of it."""

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "fidelity"


@pytest.fixture(scope="module")
def runs():
    spec = importlib.util.spec_from_file_location("nest_bench_memory_runs", BENCH / "memory_runs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_every_run_that_ran_fits(runs):
    results = [runs.evaluate(run) for run in runs.RUNS]
    assert [r.run.id for r in results if not r.fits] == []
    calibrating = [r for r in results if r.error is not None and r.run.calibrates]
    assert len(calibrating) >= 3
    assert max(abs(r.error) for r in calibrating) <= 0.10, [(r.run.id, r.error) for r in calibrating]
    assert any(line.startswith("| mlm-ft-7b-tp1pp4-h100 |") for line in runs.table(results))
