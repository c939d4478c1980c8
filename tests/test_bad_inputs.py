"""Bad inputs and infeasible jobs through the real command line.

The bad-input corpus (tests/data/bad/): every malformed or hostile input, run through
the real command line as a user runs it, is rejected cleanly.

For each case of ``tests/data/bad/index.yaml`` the test runs the command line ``nest ...``
in a process of its own (forked from one that imported nest and the modules its commands
load lazily once, :mod:`cli_runner`) under
a 1 GiB address-space limit (``RLIMIT_AS``) and a hang guard (a kill after ``TIMEOUT_S``; no
wall-clock assertion otherwise) and asserts exit code 2, exactly
one line on stderr of the form ``nest: error: ...`` containing every ``expect``
substring (the field, usually the value), no traceback and nothing on stdout. Cases
marked ``may_plan`` are valid but huge inputs: a successful plan within the same limits
is correct too. Cases marked ``xfail`` need a fix in a file outside this corpus's
ownership; the reason names the file and the change (strict: a fix makes them fail
until the mark is removed).

The processes of all selected cases run concurrently (one per core) in a module fixture;
each test then checks its own result.

Infeasible jobs (exit 3) name the binding constraint (memory, and what fills it) and the
smallest changes that fit; the tests apply every suggested change and check that it
really fits.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import yaml

import nest
from cli_runner import CLI_MODULES, run_commands
from nest.specs import JobSpec

BAD = Path(__file__).resolve().parent / "data" / "bad"
INDEX = yaml.safe_load((BAD / "index.yaml").read_text())
CASES = INDEX["cases"]
FORMATS = ("model", "cluster", "graph", "profile", "instance", "sweep", "hf")

TIMEOUT_S = 180  # hang guard only: the 10^7-device cases take 5-8 s alone, minutes at load 8
MEMORY_BYTES = 2**30


def case_id(case: dict) -> str:
    return case.get("file") or case["name"]


def command(case: dict, tmp: str) -> list[str]:
    """The CLI arguments of a case: its own ``args`` or its folder's default."""
    args = case.get("args") or INDEX["defaults"][case["file"].split("/")[0]]
    file = str(BAD / case["file"]) if "file" in case else ""
    return [a.replace("{file}", file).replace("{tmp}", tmp) for a in args]


@dataclass
class Outcome:
    returncode: int | None  # None: killed by the hang guard
    stdout: str
    stderr: str


@pytest.fixture(scope="module")
def outcomes(request) -> dict[str, Outcome]:
    """The outcome of every selected case, run concurrently."""
    selected = [item.callspec.params["case"] for item in request.session.items
                if getattr(item, "originalname", None) == "test_bad_input" and hasattr(item, "callspec")]
    with tempfile.TemporaryDirectory() as scratch:
        commands = []
        for i, case in enumerate(selected):
            tmp = os.path.join(scratch, str(i))
            os.mkdir(tmp)
            commands.append({"argv": command(case, tmp), "cwd": str(BAD)})
        env = dict(os.environ, OMP_NUM_THREADS="1")  # cases run side by side
        results = run_commands(commands, timeout_s=TIMEOUT_S, memory_bytes=MEMORY_BYTES, env=env,
                               preload=CLI_MODULES)
    return {case_id(c): Outcome(**r) for c, r in zip(selected, results)}


def _param(case: dict):
    marks = [pytest.mark.xfail(strict=True, reason=case["xfail"])] if "xfail" in case else []
    return pytest.param(case, id=case_id(case), marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_bad_input(case, outcomes):
    got = outcomes[case_id(case)]
    assert got.returncode is not None, f"no answer within {TIMEOUT_S} s (hang guard)"
    assert "Traceback" not in got.stderr, got.stderr[-2000:]
    if case.get("may_plan") and got.returncode == 0:
        return  # a valid, huge input planned within the limits
    lines = got.stderr.strip().splitlines()
    assert got.returncode == 2, f"exit {got.returncode}: {got.stderr[-2000:]}"
    assert len(lines) == 1, got.stderr[-2000:]
    assert lines[0].startswith("nest: error: "), lines[0]
    missing = [s for s in case["expect"] if s not in lines[0]]
    assert not missing, f"{missing} not in {lines[0]!r}"
    if "--json" in command(case, ""):  # the error document, and nothing else
        assert json.loads(got.stdout) == {"error": {"kind": "bad_input", "exit_code": 2,
                                                    "message": lines[0].removeprefix("nest: error: ")}}
    else:
        assert got.stdout == ""


def test_index_lists_every_corpus_file():
    """Every file of the corpus has a case (and every case's file exists, unless the case
    is about a missing file)."""
    listed = {c["file"] for c in CASES if "file" in c}
    present = {str(p.relative_to(BAD)) for p in BAD.rglob("*") if p.is_file() and p.name != "index.yaml"}
    assert present - listed == set()
    absent = {f for f in listed - present if "missing" not in f}
    assert absent == set()


def test_every_format_is_covered():
    """Each input format nest reads has malformed and hostile cases, with a default
    command; cases are unique and name what the message must contain."""
    per_format = {f: sum(c.get("file", "").startswith(f + "/") for c in CASES) for f in FORMATS}
    assert min(per_format.values()) >= 10, per_format
    assert set(INDEX["defaults"]) == set(FORMATS)
    ids = [case_id(c) for c in CASES]
    assert len(ids) == len(set(ids))
    assert all(c["expect"] and all(isinstance(s, str) and s for s in c["expect"]) for c in CASES)
    assert all("xfail" not in c or c["xfail"].startswith("needs fix in ") for c in CASES)


# ---------------------------------------------------------------------------------------
# Infeasible jobs (exit 3): the binding constraint and changes that really fit
# ---------------------------------------------------------------------------------------

GiB = 2**30


def _changes(message: str) -> list[str]:
    """The suggestions of an infeasible message, in order."""
    assert "smallest changes that fit: " in message, message
    return message.split("smallest changes that fit: ", 1)[1].split("; or ")


def _with_memory(cluster, gib: float):
    return replace(cluster, device=replace(cluster.device, memory_bytes=gib * GiB))


def _at_least(change: str) -> float:
    """GiB of a 'devices with at least X GiB' suggestion, rounded up past its 2 decimals."""
    return float(re.fullmatch(r"devices with at least (\d+\.\d\d) GiB", change).group(1)) + 0.01


@pytest.mark.parametrize("args", [
    ["plan", "--model", "gpt3-175b", "--cluster", "dgx-a100", "--devices", "8"],
    ["evaluate", "--model", "gpt3-175b", "--cluster", "dgx-a100", "--devices", "64", "--tp", "8", "--pp", "2",
     "--dp", "4", "--mbs", "1", "--layers-per-stage", "49,49"],
])
def test_infeasible_cli_is_one_line_with_exit_3(args):
    proc = subprocess.run([sys.executable, "-m", "nest", *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nest: infeasible: ") and "Traceback" not in proc.stderr
    assert "GiB per device" in lines[0] and "smallest changes that fit: " in lines[0]
    assert proc.stdout == ""


def test_plan_message_names_memory_and_changes_that_fit():
    """gpt3-175b on 8 A100s: memory binds (parameter state dominates); the suggested
    device count plans, half of it does not; the suggested memory plans."""
    cluster = nest.load_cluster("dgx-a100", devices=8)
    with pytest.raises(nest.InfeasibleError) as info:
        nest.plan("gpt3-175b", cluster)
    message = str(info.value)
    assert re.search(r"most memory-frugal plan needs \d+\.\d\d GiB per device, a100-80gb has 80\.00 GiB", message)
    weights, acts = map(float, re.search(r"holds (\d+\.\d\d) GiB of weights, gradients and optimizer state, "
                                         r"(\d+\.\d\d) GiB of activations", message).groups())
    assert weights > acts  # the binding part of the memory is named
    assert "every micro-batch, recomputation and ZeRO stage was searched" in message
    changes = _changes(message)
    devices = int(re.fullmatch(r"(\d+) devices \(the cluster has 8\)", changes[0]).group(1))
    assert nest.plan("gpt3-175b", nest.load_cluster("dgx-a100", devices=devices)).devices_used <= devices
    with pytest.raises(nest.InfeasibleError):
        nest.plan("gpt3-175b", nest.load_cluster("dgx-a100", devices=devices // 2 // 8 * 8))  # whole nodes
    roomy = nest.plan("gpt3-175b", _with_memory(cluster, _at_least(changes[-1])))
    assert roomy.memory_max_bytes <= roomy.memory_capacity_bytes


def test_plan_message_lifts_the_limits_that_bind():
    """With TP, CP, recomputation and optimizer offload excluded, a 32k-token job does not
    fit 8 A100s: each suggested restriction to lift, lifted alone, gives a plan."""
    cluster = nest.load_cluster("dgx-a100", devices=8)
    job = JobSpec(global_batch=8, seq_len=32768)
    limits = nest.SpaceLimits(tp=(1,), cp=(1,), recompute=("none",), offload=(0.0,))
    with pytest.raises(nest.InfeasibleError) as info:
        nest.plan("gpt-7.5b", cluster, job, limits=limits)
    changes = _changes(str(info.value))
    lifted = {"recomputation": "recompute", "tensor parallelism": "tp", "context parallelism": "cp",
              "optimizer offload": "offload"}
    found = [c for c in changes if c.startswith("allow any ")]
    assert ({lifted[re.match(r"allow any (.+) \(limited", c).group(1)] for c in found}
            == {"recompute", "tp", "cp", "offload"})
    assert changes.index(found[0]) == 0  # the same devices before more devices
    for field in ("recompute", "tp", "cp", "offload"):
        plan = nest.plan("gpt-7.5b", cluster, job, limits=replace(limits, **{field: None}))
        assert plan.memory_max_bytes <= plan.memory_capacity_bytes


EVALUATE_CASES = {
    "zero-3 alone fixes a fixed split": dict(model="gpt3-175b", devices=64, job=None, tp=8, pp=2, dp=4,
                                             micro_batch=1, layers_per_stage=[49, 49]),
    "another split": dict(model="gpt3-175b", devices=64, job=None, tp=8, pp=2, dp=4, micro_batch=1, zero=3,
                          layers_per_stage=[97, 1]),
    "two knobs together, or more stages on more devices": dict(
        model="gpt-7.5b", devices=64, job=JobSpec(global_batch=512, seq_len=2048), tp=1, pp=1, dp=64,
        micro_batch=8),
}


@pytest.mark.parametrize("name", sorted(EVALUATE_CASES))
def test_evaluate_message_changes_really_fit(name):
    """Every change an infeasible evaluate suggests, applied, gives a configuration that
    fits, and needs the memory the message says."""
    case = dict(EVALUATE_CASES[name])
    model, devices, job = case.pop("model"), case.pop("devices"), case.pop("job")
    cluster = nest.load_cluster("dgx-a100", devices=devices)
    with pytest.raises(nest.InfeasibleError) as info:
        nest.evaluate(model, cluster, job, **case)
    changes = _changes(str(info.value))
    assert len(changes) >= 2
    for change in changes:
        kwargs, target = dict(case), cluster
        if change.startswith("devices with at least"):
            target = _with_memory(cluster, _at_least(change))
            need = None
        elif change.startswith("another split"):
            kwargs.pop("layers_per_stage")
            need = float(re.search(r"needs (\d+\.\d\d) GiB", change).group(1))
        else:
            settings, need = re.fullmatch(r"(.+) \((\d+\.\d\d) GiB\)", change).groups()
            need = float(need)
            more = re.search(r" on (\d+) devices", settings)
            if more:
                target = nest.load_cluster("dgx-a100", devices=int(more.group(1)))
                settings = settings[:more.start()]
            for setting in settings.split(" with "):
                key, value = setting.split("=")
                kwargs[key] = value if key == "recompute" else int(value)
            if "pp" in kwargs and kwargs["pp"] != case["pp"]:
                kwargs.pop("layers_per_stage", None)
        plan = nest.evaluate(model, target, job, **kwargs)
        assert plan.memory_max_bytes <= target.device.memory_bytes, change
        if need is None:
            continue
        assert need <= target.device.memory_bytes / GiB
        if "layers_per_stage" in kwargs:  # that split's memory
            assert plan.memory_max_bytes / GiB == pytest.approx(need, abs=0.006), change
        else:  # the most frugal split's; evaluate picks the fastest one that fits
            assert plan.memory_max_bytes / GiB >= need - 0.006, change


def test_empty_space_names_the_limits():
    """Limits that leave no configuration at all: InfeasibleError naming them."""
    cluster = nest.load_cluster("dgx-a100", devices=8)
    with pytest.raises(nest.InfeasibleError, match=r"no configuration of gpt-1.7b fits 8 devices .* pp=1000"):
        nest.plan("gpt-1.7b", cluster, JobSpec(global_batch=8, seq_len=2048), limits=nest.SpaceLimits(pp=(1000,)))


def test_sizes_within_the_spec_limits_that_overflow_the_tables_are_spec_errors():
    """Every size at its limit still multiplies past int64 bytes / picoseconds: the
    planner reports the job (exit 2), not an OverflowError or the DP's range check."""
    model = nest.ModelSpec(name="wide", num_layers=10_000, hidden=2**20, num_heads=2**10,
                           ffn_hidden=2**20, vocab_size=2**20, seq_len=2**20)
    job = JobSpec(global_batch=2**20, seq_len=2**20)
    with pytest.raises(nest.SpecError, match=r"job = 1048576 x 1048576 tokens of wide: too large"):
        nest.plan(model, nest.load_cluster("dgx-a100", devices=8), job)
