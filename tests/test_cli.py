"""The command line as a user runs it: exit codes, one-line errors, JSON output."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nest.cli import main


def run(*args):
    proc = subprocess.run([sys.executable, "-m", "nest", *args], capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def test_plan_json_and_evaluate_round_trip(capsys):
    assert main(["plan", "--model", "gpt-1.7b", "--cluster", "dgx-h100", "--devices", "64", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    p = plan["parallelism"]
    layers = ",".join(str(len(s["layers"])) for s in plan["stages"])
    args = ["evaluate", "--model", "gpt-1.7b", "--cluster", "dgx-h100", "--devices", "64", "--json",
            "--tp", str(p["tp"]), "--pp", str(p["pp"]), "--dp", str(p["dp"]), "--mbs", str(p["micro_batch"]),
            "--recompute", p["recompute"], "--sp" if p["sp"] else "--no-sp",
            "--zero", str(p["zero"]), "--cp", str(p["cp"]), "--ep", str(p["ep"]), "--vp", str(p["vp"]),
            "--rank-order", p["rank_order"], "--layers-per-stage", layers]
    assert main(args) == 0
    evaluated = json.loads(capsys.readouterr().out)
    assert evaluated["step_time_s"] == plan["step_time_s"]
    assert evaluated["parallelism"] == plan["parallelism"]


def test_python_dash_m_and_text_report():
    code, out, err = run("plan", "--model", "bert-large", "--cluster", "dgx-a100", "--devices", "16")
    assert code == 0, err
    assert "step time" in out and "MFU" in out and "stage" in out


@pytest.mark.parametrize("args,code,message", [
    (["plan", "--model", "gpt5", "--cluster", "dgx-a100"], 2, "nest: error: model = 'gpt5': unknown preset"),
    (["plan", "--model", "gpt3-175b", "--cluster", "dgx-a100", "--devices", "100"], 2,
     "nest: error: devices = 100: dgx-a100 needs whole 'nvlink' groups above one: a multiple of 8 devices"),
    (["plan", "--model", "gpt3-175b", "--cluster", "dgx-a100", "--devices", "-4"], 2,
     "nest: error: argument --devices: -4 must be >= 1"),
    (["plan", "--model", "missing.yaml", "--cluster", "dgx-a100"], 2,
     "nest: error: model = 'missing.yaml': no such file"),
    (["evaluate", "--model", "gpt-1.7b", "--cluster", "dgx-a100", "--devices", "64", "--tp", "1", "--pp", "1",
      "--dp", "3", "--mbs", "1"], 2,
     "nest: error: global_batch = 512: must be divisible by dp * micro_batch = 3"),
    (["plan", "--model", "gpt3-175b", "--cluster", "dgx-a100", "--devices", "8"], 3,
     "nest: infeasible: no plan fits in memory: the most memory-frugal plan needs"),
])
def test_errors_are_one_line_with_exit_codes(args, code, message):
    got, out, err = run(*args)
    assert got == code
    assert err.startswith(message), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert out == ""


def test_model_and_cluster_files(tmp_path, capsys):
    model = tmp_path / "model.yaml"
    model.write_text("base: gpt-1.7b\nname: gpt-1.7b-short\nseq_len: 1024\n")
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({
        "name": "lab", "device": {"base": "a100-40gb", "memory_GiB": 24},
        "tiers": [{"name": "nvlink", "fanout": 4, "bandwidth_GBps": 300, "latency_us": 3},
                  {"name": "eth", "fanout": 4, "bandwidth_GBps": 12.5, "latency_us": 20, "oversubscription": 2}]}))
    assert main(["plan", "--model", str(model), "--cluster", str(cluster), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["model"]["name"] == "gpt-1.7b-short" and doc["job"]["seq_len"] == 1024
    assert doc["cluster"]["devices"] == 16 and doc["memory_per_device_bytes"]["capacity"] == 24 * 2**30
    assert doc["memory_per_device_bytes"]["max"] <= 24 * 2**30


@pytest.mark.parametrize("content,message", [
    ("name: x\ndevice: a100-80gb\ntiers: [{fanout: 0, bandwidth_GBps: 1, latency_us: 1}]\n",
     "tier tier0.fanout = 0: must be a positive integer"),
    ("name: x\ndevice: a100-80gb\ntiers: [{fanout: 8, bandwidth_GBps: -1, latency_us: 1}]\n",
     "tier tier0.bandwidth = -1000000000.0: must be a positive finite number"),
    ("name: x\ndevice: a100-80gb\ntiers: [{fanout: 8, bandwidth_GBps: 1, latency_us: 1, color: red}]\n",
     "cluster.tiers[0].color = 'red': unknown key"),
    ("name: x\ndevice: tpu9\ntiers: [{fanout: 8, bandwidth_GBps: 1, latency_us: 1}]\n",
     "device = 'tpu9': unknown preset"),
    ("name: [unclosed\n", "cluster = "),
])
def test_bad_cluster_files(tmp_path, content, message, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(content)
    assert main(["plan", "--model", "gpt-1.7b", "--cluster", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_file_cluster_device_count_mismatch(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("name: x\ndevice: a100-80gb\ntiers: [{fanout: 8, bandwidth_GBps: 300, latency_us: 1}]\n")
    assert main(["plan", "--model", "gpt-1.7b", "--cluster", str(path), "--devices", "16"]) == 2
    assert "devices = 16: cluster x's tiers multiply to 8 devices" in capsys.readouterr().err


def test_bad_model_file_value(tmp_path, capsys):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"base": "llama2-7b", "num_heads": 0}))
    assert main(["plan", "--model", str(path), "--cluster", "dgx-a100"]) == 2
    assert "model.num_heads = 0: must be a positive integer" in capsys.readouterr().err


def test_listings(capsys):
    assert main(["models", "--json"]) == 0
    names = {m["name"] for m in json.loads(capsys.readouterr().out)}
    assert {"gpt3-175b", "llama3.1-405b", "bert-large"} <= names
    assert main(["clusters", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {"dgx-a100", "dgx-h100", "tpuv4-fattree", "h100-spineleaf"} <= {c["name"] for c in doc["clusters"]}


def test_report_summarises_long_rank_lists():
    from nest.report.text import _ranges

    assert _ranges((0, 1, 2, 3, 8, 9)) == "0-3,8-9"
    assert _ranges(tuple(range(0, 64, 8))) == "0,8,... (8 in 8 runs)"



def test_network_nccl_prices_on_the_calibrated_tiers(capsys):
    """--network nccl is the plan of nest.network.calibrated_cluster: slower collectives
    than the nominal tiers, exactly the API's numbers; graphs and instances refuse it."""
    import nest
    from nest.network.tiers import calibrated_cluster

    base = ["evaluate", "--model", "gpt-1.7b", "--cluster", "dgx-a100", "--devices", "64", "--tp", "1",
            "--pp", "1", "--dp", "64", "--mbs", "1", "--zero", "1", "--json"]
    assert main(base) == 0
    nominal = json.loads(capsys.readouterr().out)["step_time_s"]
    assert main(base + ["--network", "nccl"]) == 0
    nccl = json.loads(capsys.readouterr().out)["step_time_s"]
    api = nest.evaluate("gpt-1.7b", calibrated_cluster(nest.load_cluster("dgx-a100", devices=64)),
                        nest.JobSpec(global_batch=512, seq_len=2048), tp=1, pp=1, dp=64, micro_batch=1,
                        zero=1)
    assert nccl > nominal and nccl == api.step_time_s
    assert main(["plan", "--model", "gpt-1.7b", "--cluster", "h100-fattree", "--devices", "64",
                 "--network", "nccl"]) == 2
    assert "network = nccl" in capsys.readouterr().err


def test_options_are_never_abbreviated(capsys):
    """``--tp`` on ``plan`` once read as ``--tp-comm-overlap`` (argparse's prefix
    matching; ``--tp`` is now a search limit of its own); every option must be spelled
    out, on every subcommand."""
    for prefix in ("--tp-comm", "--overlap-moe"):
        assert main(["plan", "--model", "gpt-1.7b", "--cluster", "dgx-a100", "--devices", "64", prefix]) == 2
        assert capsys.readouterr().err == f"nest: error: unrecognized arguments: {prefix}\n"
    assert main(["evaluate", "--model", "gpt-1.7b", "--cluster", "dgx-a100", "--devices", "64", "--tp", "1",
                 "--pp", "1", "--dp", "64", "--mbs", "1", "--simul"]) == 2
    assert capsys.readouterr().err == "nest: error: unrecognized arguments: --simul\n"


def test_version():
    import nest

    code, out, err = run("--version")
    assert (code, out, err) == (0, f"nest {nest.__version__}\n", "")


def _plan_doc(capsys, *flags):
    assert main(["plan", "--model", "gpt3-175b", "--cluster", "dgx-a100", "--devices", "1024", "--json",
                 *flags]) == 0
    return json.loads(capsys.readouterr().out)


def test_plan_takes_the_search_limits_as_flags(capsys):
    """Each flag narrows its dimension to a value or a list, exactly as the same
    SpaceLimits through the Python API (two paths to one search)."""
    import nest
    from nest.parallel import SpaceLimits

    doc = _plan_doc(capsys, "--tp", "4,8", "--pp", "8,16", "--zero", "1", "--mbs", "1",
                    "--recompute", "none,selective")
    p = doc["parallelism"]
    assert p["tp"] in (4, 8) and p["pp"] in (8, 16) and p["zero"] == 1 and p["micro_batch"] == 1
    assert p["recompute"] in ("none", "selective")
    api = nest.plan("gpt3-175b", nest.load_cluster("dgx-a100", devices=1024), limits=SpaceLimits(
        tp=(4, 8), pp=(8, 16), zero=(1,), micro_batch=(1,), recompute=("none", "selective")))
    assert api.step_time_s == doc["step_time_s"] and api.parallelism == p
    capped = _plan_doc(capsys, "--max-pp", "4", "--no-sp")["parallelism"]
    assert capped["pp"] <= 4 and capped["sp"] is False


def test_recompute_lists_read_modes_with_commas():
    from nest.cli_args import recompute_list as _recompute_list

    assert _recompute_list("none,layernorm,moe_act,full") == ("none", "layernorm,moe_act", "full")
    assert _recompute_list("mla_up_proj,mlp") == ("mla_up_proj,mlp",)
    assert _recompute_list("moe_act,none") == ("moe_act", "none")


@pytest.mark.parametrize("flags,message", [
    (["--zero", "4"], "argument --zero: '4': ZeRO stages are 0, 1, 2, 3"),
    (["--tp", "0,8"], "argument --tp: '0,8': degrees must be positive integers"),
    (["--recompute", "none,bogus"], "argument --recompute: 'none,bogus': 'bogus' starts no recompute mode"),
    (["--pp", "4", "--max-pp", "8"], "max_pp = 8: give --pp or --max-pp, not both"),
])
def test_bad_limit_flags_are_one_line_errors(capsys, flags, message):
    try:
        code = main(["plan", "--model", "gpt3-175b", "--cluster", "dgx-a100", "--devices", "64", *flags])
    except SystemExit as exit:  # argparse's own errors
        code = exit.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) <= 2 and message in err[-1]


@pytest.mark.parametrize("args,code,kind", [
    (["plan", "--model", "nope", "--cluster", "dgx-h100"], 2, "bad_input"),
    (["evaluate", "--model", "gpt3-175b", "--cluster", "dgx-a100", "--devices", "16", "--tp", "8", "--pp", "1",
      "--dp", "2", "--mbs", "1"], 3, "infeasible"),
    (["plan", "--model", "gpt3-175b", "--devices", "-4"], 2, "bad_input"),  # argparse's own refusal
    (["plan", "--model", "gpt3-175b", "--tp"], 2, "bad_input"),
])
def test_json_failures_print_a_json_error_document(capsys, args, code, kind):
    assert main([*args, "--json"]) == code
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["error"]["kind"] == kind and doc["error"]["exit_code"] == code
    assert err.strip() == f"nest: {'error' if code == 2 else 'infeasible'}: {doc['error']['message']}"
    assert main(args) == code
    assert capsys.readouterr().out == ""  # without --json, stdout stays empty


def test_report_header_mfu_and_zeros_read_as_they_are(capsys):
    from dataclasses import replace

    import nest
    from nest.report.text import render

    cluster = nest.load_cluster("dgx-h100", devices=16)
    plan = nest.evaluate("llama2-7b", cluster, tp=2, pp=2, dp=4, micro_batch=1, sp=True)
    assert render(plan, "evaluate").startswith("nest evaluate: llama2-7b")
    assert main(["evaluate", "--model", "llama2-7b", "--cluster", "dgx-h100", "--devices", "16", "--tp", "2",
                 "--pp", "2", "--dp", "4", "--mbs", "1", "--sp"]) == 0
    assert capsys.readouterr().out.startswith("nest evaluate: ")
    measured = replace(plan, mfu=0.0, model_tflops_per_device=0.0, breakdown_s={**plan.breakdown_s, "bubble": -0.0})
    text = render(measured)
    assert "MFU                  n/a" in text and "-0.0000" not in text and "bubble 0.0000" in text


def test_limit_flags_stay_within_a_profiles_measured_degrees(capsys):
    profile = str(Path(__file__).parent / "data" / "profiles" / "tiny.json")
    base = ["plan", "--profile", profile, "--cluster", "dgx-a100", "--devices", "8", "--global-batch", "8"]
    assert main([*base, "--tp", "16"]) == 2
    assert capsys.readouterr().err.strip() == "nest: error: tp = 16: none of the values the inputs allow (1,2)"
    assert main([*base, "--tp", "2,16", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["parallelism"]["tp"] == 2


def _cli_changes(stderr: str) -> list[str]:
    return stderr.strip().split("smallest changes that fit: ", 1)[1].split("; or ")


def _with_flags(argv: list[str], flags: list[str]) -> list[str]:
    """``argv`` with each ``--flag value`` of ``flags`` set (replaced or added)."""
    argv = list(argv)
    for flag, value in zip(flags[::2], flags[1::2]):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    return argv


def test_infeasible_suggestions_are_command_lines_that_fit(capsys):
    """The CLI names every suggested setting by its flag; each suggestion applied to the
    command line (its flags set, 'with' joining them) gives exit 0, in JSON as in text."""
    argv = ["evaluate", "--model", "gpt-7.5b", "--cluster", "dgx-a100", "--devices", "64", "--global-batch", "512",
            "--seq-len", "2048", "--tp", "1", "--pp", "1", "--dp", "64", "--mbs", "8"]
    assert main(argv) == 3
    changes = _cli_changes(capsys.readouterr().err)
    assert changes[:2] == ["--zero 3 with --recompute full (14.02 GiB)", "--pp 4 with --devices 256 (57.03 GiB)"]
    for change in changes[:-1]:
        flags = change.rsplit(" (", 1)[0].replace(" with ", " ").split()
        assert main(_with_flags(argv, flags) + ["--json"]) == 0, change
        assert json.loads(capsys.readouterr().out)["memory_per_device_bytes"]["max"] <= 80 * 2**30
    assert changes[-1].startswith("devices with at least ")
    assert main(argv + ["--json"]) == 3
    assert "--zero 3 with --recompute full" in json.loads(capsys.readouterr().out)["error"]["message"]


def test_infeasible_plan_names_limit_flags_to_lift(capsys):
    argv = ["plan", "--model", "gpt-7.5b", "--cluster", "dgx-a100", "--devices", "8", "--global-batch", "8",
            "--seq-len", "32768", "--tp", "1", "--cp", "1", "--recompute", "none", "--optimizer-offload", "0", "--no-sp"]
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert "(most frugal configuration: --tp 1 --cp " in err
    changes = _cli_changes(err)
    assert "allow any recomputation (limited to --recompute none)" in changes
    assert "--devices 16 (the cluster has 8)" in changes
    assert main(_with_flags(argv, ["--devices", "16"])) == 0


def test_out_of_memory_is_one_error_line_with_exit_2(monkeypatch, capsys):
    import nest.cli

    def exhausted(args):
        raise MemoryError

    monkeypatch.setattr(nest.cli, "_run", exhausted)
    assert main(["plan", "--model", "gpt-1.7b", "--cluster", "dgx-a100", "--devices", "8", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.err == ("nest: error: plan: out of memory: these inputs need more memory than this process may "
                            "allocate (fewer devices, a smaller graph or job, or a machine with more memory)\n")
    assert json.loads(captured.out)["error"]["kind"] == "bad_input"
