"""Why a plan leaves devices idle: the fastest plan that uses every device, or why none."""

import contextlib
import io
import json

import numpy as np
import pytest

import nest
from nest.cli import main
from nest.cost.scenario import Scenario
from nest.dp.reference import brute_force
from nest.parallel import SpaceLimits
from nest.presets.clusters import CLUSTERS
from nest.search.problems import problem
from nest.search.search import search
from nest.search.space import enumerate_partials, expand
from nest.specs import JobSpec
from test_planner import TINY

LIMITS = SpaceLimits(offload=(0.0,))


def _every_device_optimum_ps(cluster, job) -> int:
    """The closed form's optimum over every candidate with tp x cp x pp x dp equal to the
    device count, by brute force over every split (no pruning)."""
    scn = Scenario(TINY, cluster, job)
    partials = enumerate_partials(TINY, cluster, job, scn.num_nodes, LIMITS)
    cands = [c for c in expand(partials, np.arange(len(partials)), LIMITS) if c.devices == cluster.num_devices]
    assert cands
    batch = problem(scn, cands)
    return min(found[0] for n in range(len(cands)) if (found := brute_force(batch, n)) is not None)


def test_every_device_search_is_the_exhaustive_optimum_of_full_use():
    cluster, job = CLUSTERS["dgx-a100"].sized(40), JobSpec(global_batch=16, seq_len=1024)
    scn = Scenario(TINY, cluster, job)
    found = search(scn, LIMITS, ranking="closed-form", every_device=True)
    assert found.candidate.devices == 40
    objective = int(found.result.objective[found.local])
    assert objective == _every_device_optimum_ps(cluster, job)


def test_reason_names_the_slower_full_plan_which_evaluates_to_its_time():
    cluster, job = CLUSTERS["dgx-a100"].sized(40), JobSpec(global_batch=16, seq_len=1024)
    plan = nest.plan(TINY, cluster, job, limits=LIMITS)
    assert plan.devices_used == 32
    reason = plan.devices_idle_reason
    assert reason.startswith("the fastest plan using all 40 (TP ")
    words = reason.split("(")[1].split(")")[0].split()
    degrees = {words[i].lower(): int(words[i + 1]) for i in range(0, len(words), 2)}
    assert degrees["tp"] * degrees["pp"] * degrees["dp"] * degrees["cp"] == 40
    seconds = float(reason.split(" takes ")[1].split(" s,")[0])
    slower = float(reason.split(", ")[-1].split("%")[0])
    assert seconds > plan.step_time_s
    assert slower == pytest.approx(100 * (seconds / plan.step_time_s - 1), abs=0.1)


def test_reason_when_no_degrees_multiply_to_the_device_count():
    # 56 = 7 x 8: dp divides 16, tp and cp are powers of two, pp <= 6 pipeline nodes
    plan = nest.plan(TINY, CLUSTERS["dgx-a100"].sized(56), JobSpec(global_batch=16, seq_len=1024), limits=LIMITS)
    assert plan.devices_idle_reason == (
        "no configuration uses every device (tp x cp x pp x dp = 56, dp dividing the global batch 16, "
        "pp at most the model's 6 pipeline nodes, within the limits)")


def test_no_reason_when_every_device_is_used_or_when_not_asked():
    cluster = CLUSTERS["dgx-a100"].sized(40)
    assert nest.plan(TINY, CLUSTERS["dgx-a100"].sized(24), JobSpec(global_batch=12, seq_len=1024),
                     limits=LIMITS).devices_idle_reason is None
    quiet = nest.plan(TINY, cluster, JobSpec(global_batch=16, seq_len=1024), limits=LIMITS, explain_idle=False)
    assert quiet.devices_used == 32 and quiet.devices_idle_reason is None
    with pytest.raises(nest.SpecError, match="explain_idle"):
        nest.plan(TINY, cluster, JobSpec(global_batch=16, seq_len=1024), explain_idle="no")


def test_evaluate_names_the_degrees_that_leave_devices_idle():
    plan = nest.evaluate(TINY, CLUSTERS["dgx-a100"].sized(40), JobSpec(global_batch=16, seq_len=1024),
                         tp=2, pp=2, dp=8, micro_batch=1)
    assert plan.devices_idle_reason == "the configuration's tp x cp x pp x dp = 2 x 1 x 2 x 8 = 32"


def _cli(*argv) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    return code, out.getvalue()


def test_cli_report_and_json_carry_the_reason(tmp_path):
    model = tmp_path / "tiny.json"
    model.write_text(json.dumps({"name": "tiny", "num_layers": 4, "hidden": 1024, "num_heads": 16,
                                 "ffn_hidden": 4096, "vocab_size": 32000, "seq_len": 1024}))
    args = ("plan", "--model", str(model), "--cluster", "dgx-a100", "--devices", "40", "--global-batch", "16",
            "--seq-len", "1024")
    code, text = _cli(*args)
    assert code == 0
    line = next(line for line in text.splitlines() if "devices used" in line)
    assert "32 of 40 devices used: the fastest plan using all 40 (TP " in line
    code, document = _cli(*args, "--json")
    assert code == 0
    assert json.loads(document)["devices_idle_reason"].startswith("the fastest plan using all 40 (TP ")
