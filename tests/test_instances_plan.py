"""Every NEST artifact instance: it loads, nest plans it, and the plan is never slower
than any of the file's baselines costed the same way (same measured layers, network,
memory model and job). Every fourth instance in the default run, all of them with -m slow."""

from pathlib import Path

import pytest

import nest
from nest.inputs.measured import instance_setup

ARTIFACT = Path(__file__).resolve().parents[2] / "shared" / "data" / "nest-artifact"
FILES = sorted(ARTIFACT.glob("*.json")) if ARTIFACT.is_dir() else []


@pytest.mark.skipif(not FILES, reason="the NEST artifact instances are not beside the repo")
@pytest.mark.parametrize("path", [pytest.param(p, marks=[pytest.mark.slow] if i % 4 else []) for i, p in enumerate(FILES)],
                         ids=[p.stem for p in FILES])
def test_plan_never_slower_than_the_baselines(path):
    setup = instance_setup(str(path))
    plan = nest.plan(setup.model, setup.cluster, setup.job, limits=setup.limits, source=setup.source)
    assert plan.devices_used <= setup.instance.max_devices
    assert plan.memory_max_bytes <= setup.cluster.device.memory_bytes
    costed = 0
    for name, baseline in setup.instance.baselines.items():
        if not setup.instance.fits(baseline):
            continue  # the artifact's own solver reports these as failed
        try:
            base = nest.evaluate(setup.model, setup.cluster, setup.job, source=setup.source,
                                 **setup.baseline_config(name))
        except nest.InfeasibleError:
            continue  # does not fit nest's memory model
        costed += 1
        assert plan.step_time_s <= base.step_time_s, name
    assert costed >= 1 or not setup.instance.baselines
