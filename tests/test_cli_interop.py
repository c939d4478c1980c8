"""The interop paths as a user runs them: HF configs, profiles, NEST instances, --emit."""

import json
from pathlib import Path

import pytest

from launch_readers import assert_round_trip
from nest.cli import main
from nest.report.export import emit

DATA = Path(__file__).parent / "data"
ARTIFACT = Path(__file__).resolve().parents[2] / "shared" / "data" / "nest-artifact"


def _json(capsys, args):
    assert main(args + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_hf_config_plans_like_the_preset(capsys):
    from_hf = _json(capsys, ["plan", "--model", str(DATA / "hf" / "llama-2-7b.json"), "--cluster",
                             "dgx-a100", "--devices", "64", "--global-batch", "1024", "--seq-len", "4096"])
    preset = _json(capsys, ["plan", "--model", "llama2-7b", "--cluster", "dgx-a100", "--devices", "64"])
    assert from_hf["model"]["parameters"] == preset["model"]["parameters"] == 6_738_415_616
    assert from_hf["step_time_s"] == preset["step_time_s"]
    assert from_hf["parallelism"] == preset["parallelism"]


def test_bad_hf_config_exits_2(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "mamba", "hidden_size": 4}))
    assert main(["plan", "--model", str(path), "--cluster", "dgx-a100", "--global-batch", "8"]) == 2
    err = capsys.readouterr().err
    assert "hf config model_type = 'mamba': unsupported" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("fmt", ["megatron", "deepspeed", "torchtitan"])
def test_emit_matches_the_plan(capsys, fmt):
    # --emit makes the plan for its framework: the same plan as --framework, launched as priced
    args = ["plan", "--model", "llama3-70b", "--cluster", "dgx-h100", "--devices", "128"]
    plan = _json(capsys, args + ["--framework", fmt])
    assert main(args + ["--emit", fmt]) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith("nest: note: launch configuration for ")
    assert captured.out == emit(plan, fmt) + "\n"
    assert_round_trip(plan, fmt)


def test_profile_plan_and_evaluate(capsys):
    profile = str(DATA / "profiles" / "tiny.csv")
    args = ["--profile", profile, "--cluster", "dgx-a100", "--devices", "8", "--global-batch", "16",
            "--seq-len", "1024"]
    plan = _json(capsys, ["plan"] + args)
    p = plan["parallelism"]
    layers = ",".join(str(len(s["layers"])) for s in plan["stages"])
    again = _json(capsys, ["evaluate"] + args + [
        "--tp", str(p["tp"]), "--pp", str(p["pp"]), "--dp", str(p["dp"]), "--mbs", str(p["micro_batch"]),
        "--recompute", p["recompute"], "--zero", str(p["zero"]), "--vp", str(p["vp"]),
        "--rank-order", p["rank_order"], "--no-sp", "--layers-per-stage", layers])
    assert again["step_time_s"] == plan["step_time_s"]


@pytest.mark.skipif(not ARTIFACT.is_dir(), reason="the NEST artifact instances are not beside the repo")
def test_nest_instance_plan_beats_its_baselines_cli(capsys):
    path = str(ARTIFACT / "tpuv4_fatTree_bert_mbs1_n1024.json")
    plan = _json(capsys, ["plan", "--nest-instance", path])
    assert plan["devices_used"] <= 1024 and plan["job"]["global_batch"] == 4096
    for name in ("Manual", "Phaze"):
        base = _json(capsys, ["evaluate", "--nest-instance", path, "--baseline", name])
        assert plan["step_time_s"] <= base["step_time_s"]


def test_instance_conflicting_flags(capsys):
    assert main(["plan", "--nest-instance", "x.json", "--model", "gpt3-175b"]) == 2
    assert "nest_instance: the instance brings its own model" in capsys.readouterr().err
    assert main(["plan", "--nest-instance", "x.json", "--seq-len", "512", "--dtype", "fp8", "--host-threads", "4"]) == 2
    assert capsys.readouterr().err == ("nest: error: nest_instance: the instance sets its cluster size and job; "
                                       "drop --seq-len, --dtype, --host-threads\n")
    assert main(["evaluate", "--model", "gpt3-175b", "--cluster", "dgx-a100", "--baseline", "Manual"]) == 2
    assert "baseline = 'Manual': needs --nest-instance" in capsys.readouterr().err
    assert main(["evaluate", "--model", "gpt3-175b", "--cluster", "dgx-a100", "--tp", "8"]) == 2
    assert "evaluate: missing --pp, --dp, --mbs" in capsys.readouterr().err


def test_sweep_command_writes_every_scenario_once(tmp_path, capsys):
    out = tmp_path / "rows.jsonl"
    grid = str(DATA / "sweeps" / "small.yaml")
    assert main(["sweep", grid, "--out", str(out), "--quiet", "--workers", "1"]) == 0
    summary = json.loads(capsys.readouterr().out)
    header, *lines = out.read_text().splitlines()  # the journal's header line, then one row per scenario
    rows = [json.loads(line) for line in lines]
    assert "nest_sweep_journal" in json.loads(header)
    assert summary["total"] == len(rows) == len({r["id"] for r in rows})
    assert main(["sweep", grid, "--out", str(out), "--quiet", "--workers", "1"]) == 0  # resumes
    again = json.loads(capsys.readouterr().out)
    assert again["resumed"] == summary["total"] and again["ran"] == 0
    assert len(out.read_text().splitlines()) == len(rows) + 1


def test_sweep_bad_grid_exits_2(capsys):
    assert main(["sweep", str(DATA / "sweeps" / "bad_tier.yaml"), "--out", "x.jsonl", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "grid.bandwidth_multipliers.infiniband" in err and len(err.strip().splitlines()) == 1
