"""Hostile files and environments that a static corpus cannot hold, through the real
command line: FIFOs (a read would wait for a writer forever), symlinks to endless
devices, sparse files beyond the size bounds, output paths that cannot be written, a
full disk and a closed pipe on stdout. Each answer is exit code 2 and one line naming the
argument and the value (a closed pipe: exit 0, silently), never a traceback, a hang or
unbounded memory.

The file-input cases run like the bad-input corpus (:mod:`test_bad_inputs`): forked from
one process that imported nest once (:mod:`cli_runner`), concurrently, under a 1 GiB
address-space limit and a hang guard. The stdout cases need a real process whose stdout
is ``/dev/full`` or a pipe, under the same limits.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cli_runner import CLI_MODULES, run_commands
from nest.errors import SpecError
from nest.inputs.files import MAX_GRAPH_BYTES, MAX_SPEC_BYTES, check_writable, parse_json, parse_yaml, read_bytes

TIMEOUT_S = 180  # hang guard only: the 10^7-device cases take 5-8 s alone, minutes at load 8
MEMORY_BYTES = 2**30
GRAPHS = Path(__file__).resolve().parent / "data" / "graphs"

PLAN = ["plan", "--model", "gpt-1.7b", "--cluster", "dgx-a100", "--devices", "8", "--global-batch", "8"]
EVALUATE = ["evaluate", "--model", "gpt-1.7b", "--cluster", "dgx-a100", "--devices", "8", "--tp", "1", "--pp", "1",
            "--dp", "8", "--mbs", "1"]


def _model(path: str) -> list[str]:
    return ["plan", "--model", path, "--cluster", "dgx-a100", "--devices", "8", "--global-batch", "8"]


def _cluster(path: str) -> list[str]:
    return ["plan", "--model", "gpt-1.7b", "--cluster", path, "--global-batch", "16"]


def _profile(path: str) -> list[str]:
    return ["plan", "--profile", path, "--cluster", "dgx-a100", "--devices", "8", "--global-batch", "8"]


# name -> (argv, every substring the one line must contain); paths are relative to the
# scratch directory the fixture fills
CASES = {
    "model_fifo": (_model("pipe.yaml"), ["model = 'pipe.yaml'", "not a regular file (a FIFO)"]),
    "model_fifo_bare_name": (_model("pipe"), ["model = 'pipe'", "not a regular file (a FIFO)"]),
    "model_symlink_to_dev_zero": (_model("zero.yaml"), ["model = 'zero.yaml'",
                                                        "not a regular file (a character device)"]),
    "model_sparse_beyond_bound": (_model("huge.json"), ["model = 'huge.json'", "too large",
                                                        f"{MAX_SPEC_BYTES + 1} bytes", "at most 64 MiB"]),
    "model_under_a_file": (_model("plain/x.yaml/y.yaml"), ["model = 'plain/x.yaml/y.yaml'", "not a directory"]),
    "cluster_fifo_graphml": (_cluster("pipe.graphml"), ["topology = 'pipe.graphml'", "not a regular file (a FIFO)"]),
    "cluster_fifo_json": (_cluster("pipe.json"), ["cluster = 'pipe.json'", "not a regular file (a FIFO)"]),
    "cluster_graph_is_fifo": (_cluster("on_pipe.yaml"), ["topology = ", "pipe.graphml", "not a regular file (a FIFO)"]),
    "cluster_graph_is_dev_zero": (_cluster("on_zero.yaml"), ["topology = ", "zero.graphml",
                                                            "not a regular file (a character device)"]),
    "graph_sparse_beyond_bound": (_cluster("huge.graphml"), ["topology = 'huge.graphml'", "too large",
                                                             f"{MAX_GRAPH_BYTES + 1} bytes", "at most 256 MiB"]),
    "cluster_sparse_beyond_graph_bound": (_cluster("huge_cluster.yaml"), ["cluster = 'huge_cluster.yaml'",
                                                                         "too large", "at most 256 MiB"]),
    "profile_fifo": (_profile("pipe.csv"), ["profile = 'pipe.csv'", "not a regular file (a FIFO)"]),
    "profile_sparse_beyond_bound": (_profile("huge.csv"), ["profile = 'huge.csv'", "too large"]),
    "nest_instance_fifo": (["plan", "--nest-instance", "pipe_gpt3_mbs1_n8.json"],
                           ["nest instance = 'pipe_gpt3_mbs1_n8.json'", "not a regular file (a FIFO)"]),
    "grid_fifo": (["sweep", "pipe.yaml", "--out", "results.jsonl", "--quiet", "--workers", "1"],
                  ["grid = 'pipe.yaml'", "not a regular file (a FIFO)"]),
    "timeline_fifo": ([*EVALUATE, "--timeline", "pipe.png"],
                      ["timeline = 'pipe.png'", "cannot write: a FIFO, not a regular file"]),
    "timeline_in_missing_directory": ([*EVALUATE, "--timeline", "missing/t.png"],
                                      ["timeline = 'missing/t.png'", "directory 'missing' does not exist"]),
    "plot_under_a_file": (["compare", "--model", "gpt-1.7b", "--cluster", "dgx-a100", "--devices", "8",
                           "--plot", "plain/keep.png/p.png"], ["plot = 'plain/keep.png/p.png'", "not a directory"]),
}


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """A directory of hostile files: FIFOs without writers, symlinks to /dev/zero, sparse
    files one byte beyond each bound (no disk blocks), cluster files naming such graphs."""
    root = tmp_path_factory.mktemp("hostile")
    for name in ("pipe.yaml", "pipe", "pipe.graphml", "pipe.json", "pipe.csv", "pipe_gpt3_mbs1_n8.json", "pipe.png"):
        os.mkfifo(root / name)
    (root / "zero.yaml").symlink_to("/dev/zero")
    (root / "zero.graphml").symlink_to("/dev/zero")
    for name, size in (("huge.json", MAX_SPEC_BYTES + 1), ("huge.csv", MAX_SPEC_BYTES + 1),
                       ("huge.graphml", MAX_GRAPH_BYTES + 1), ("huge_cluster.yaml", MAX_GRAPH_BYTES + 1)):
        with open(root / name, "wb") as f:
            f.truncate(size)
    (root / "plain").mkdir()
    (root / "plain" / "x.yaml").write_text("base: gpt-1.7b\n")
    (root / "plain" / "keep.png").write_bytes(b"\x89PNG keep me")
    (root / "on_pipe.yaml").write_text("name: lab\ndevice: h100-sxm\ngraph: pipe.graphml\n")
    (root / "on_zero.yaml").write_text("name: lab\ndevice: h100-sxm\ngraph: zero.graphml\n")
    return root


@pytest.fixture(scope="module")
def outcomes(scratch) -> dict[str, dict]:
    names = sorted(CASES)
    commands = [{"argv": CASES[name][0], "cwd": str(scratch)} for name in names]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    results = run_commands(commands, timeout_s=TIMEOUT_S, memory_bytes=MEMORY_BYTES, env=env,
                           preload=CLI_MODULES)
    return dict(zip(names, results))


def _one_error_line(result: dict, expect: list[str]) -> str:
    assert result["returncode"] is not None, f"no answer within {TIMEOUT_S} s (hang guard)"
    assert "Traceback" not in result["stderr"], result["stderr"][-2000:]
    assert result["returncode"] == 2, result["stderr"][-2000:]
    lines = result["stderr"].strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nest: error: "), result["stderr"][-2000:]
    missing = [s for s in expect if s not in lines[0]]
    assert not missing, f"{missing} not in {lines[0]!r}"
    assert result["stdout"] == ""
    return lines[0]


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_file(name, outcomes):
    _one_error_line(outcomes[name], CASES[name][1])


def test_refused_files_are_left_alone(outcomes, scratch):
    """The checks create, truncate and fill nothing: no missing directory or output file
    appears, the existing file under a bad --plot keeps its bytes, the FIFOs stay FIFOs."""
    assert set(outcomes) == set(CASES)
    assert not (scratch / "missing").exists()
    assert (scratch / "plain" / "keep.png").read_bytes() == b"\x89PNG keep me"
    assert sorted(p.name for p in scratch.iterdir() if p.is_fifo()) == sorted(
        ["pipe.yaml", "pipe", "pipe.graphml", "pipe.json", "pipe.csv", "pipe_gpt3_mbs1_n8.json", "pipe.png"])


# ---------------------------------------------------------------------------------------
# stdout on a full disk and into a closed pipe: a real process
# ---------------------------------------------------------------------------------------

def _limits():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))


def _nest(args: list[str], **kwargs) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-m", "nest", *args], stderr=subprocess.PIPE, text=True,
                            preexec_fn=_limits, env=env, **kwargs)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("command", [[*PLAN], [*PLAN, "--json"], ["--help"], ["--version"], ["plan", "--help"]],
                         ids=["text", "json", "help", "version", "plan-help"])
def test_stdout_on_a_full_disk_is_one_line_exit_2(command):
    """``nest plan > /dev/full``: one line, exit 2 (not a traceback at interpreter shutdown,
    exit 120; nor a traceback from print, exit 1; nor a silent exit 0 after ``--help``)."""
    with open("/dev/full", "w") as full:
        proc = _nest(command, stdout=full)
        _, stderr = proc.communicate(timeout=120)
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    assert proc.returncode == 2, stderr
    assert stderr.strip().splitlines() == ["nest: error: stdout: cannot write: No space left on device"]


def test_stdout_into_a_closed_pipe_is_silent_exit_0():
    """A reader that left before nest wrote anything (``| head -0``): exit 0, nothing on
    stderr (no BrokenPipeError traceback, no 'Exception ignored')."""
    proc = _nest(PLAN, stdout=subprocess.PIPE)
    proc.stdout.close()
    _, stderr = proc.communicate(timeout=120)
    assert stderr == "" and proc.returncode == 0, stderr


def test_head_reads_one_line_without_a_traceback():
    """``nest plan --json ... | head -1`` as a shell runs it."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    command = f"{sys.executable} -m nest {' '.join(PLAN)} --json | head -1; exit ${{PIPESTATUS[0]}}"
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120, env=env,
                          preexec_fn=_limits)
    assert proc.stdout == "{\n", proc.stdout[:200]
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
    assert proc.returncode == 0


# ---------------------------------------------------------------------------------------
# the helpers themselves
# ---------------------------------------------------------------------------------------

def test_check_writable_touches_nothing(tmp_path):
    """The output check opens and creates nothing: an existing file keeps its bytes and
    times, a new name stays absent; what cannot be written is named."""
    existing = tmp_path / "plot.png"
    existing.write_bytes(b"user data")
    before = existing.stat()
    check_writable(str(existing), "plot")
    check_writable(str(tmp_path / "new.png"), "plot")
    after = existing.stat()
    assert existing.read_bytes() == b"user data" and (after.st_mtime_ns, after.st_size) == (
        before.st_mtime_ns, before.st_size)
    assert not (tmp_path / "new.png").exists()
    for path, reason in ((tmp_path, "a directory, not a regular file"),
                         (tmp_path / "no" / "p.png", "directory"),
                         (existing / "p.png", "not a directory"),
                         (tmp_path / ("c" * 300 + ".png"), "file name too long"),
                         ("nul\0.png", "NUL byte")):
        with pytest.raises(SpecError, match="^plot = .*" + reason):
            check_writable(str(path), "plot")


def test_check_writable_read_only_directory(tmp_path):
    """A directory without write permission (root's permission bits let it through: skipped)."""
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "old.png").write_bytes(b"x")
    (locked / "old.png").chmod(0o444)
    locked.chmod(0o555)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as root: permission bits do not bind")
        with pytest.raises(SpecError, match=r"^timeline = .*: cannot write: directory .* is not writable"):
            check_writable(str(locked / "t.png"), "timeline")
        with pytest.raises(SpecError, match=r"^timeline = .*: cannot write: the file is not writable"):
            check_writable(str(locked / "old.png"), "timeline")
    finally:
        locked.chmod(0o755)


def test_read_bytes_bounds_what_it_reads(tmp_path):
    """A file reporting size 0 (/proc) or growing is still read only up to the bound."""
    if os.path.exists("/proc/self/maps"):
        with pytest.raises(SpecError, match=r"^model = '/proc/self/maps': too large \(more than 16 bytes\)"):
            read_bytes("/proc/self/maps", "model", limit=16)
    small = tmp_path / "ok.yaml"
    small.write_bytes(b"x" * 16)
    assert read_bytes(small, "model", limit=16) == b"x" * 16
    with pytest.raises(SpecError, match=r"too large \(16 bytes; at most 15 bytes\)"):
        read_bytes(small, "model", limit=15)


@pytest.mark.parametrize("text, key", [
    ('{"a": 1, "a": 2}', "'a'"),
    ('{"a": [{"b": {"c": 1, "c": 1}}]}', "'c'"),
    ('{"x": {}, "y": {"1": 0, "1": 0}}', "'1'"),
])
def test_json_duplicate_keys_at_any_depth(text, key):
    with pytest.raises(SpecError, match=f"^f = 'f.json': duplicate key {key}: give each key once$"):
        parse_json(text, "f", "f.json")


@pytest.mark.parametrize("text, key, line", [
    ("a: 1\nb: 2\na: 3\n", "'a'", 3),
    ("top:\n  - {x: 1, x: 2}\n", "'x'", 2),
    ("1: a\n0x1: b\n", "1", 2),  # the same integer key, spelled twice
    ("a: &A {k: 1, k: 2}\nb: *A\n", "'k'", 1),
])
def test_yaml_duplicate_keys_at_any_depth(text, key, line):
    with pytest.raises(SpecError, match=rf"^f = 'f.yaml': duplicate key {key} \(line {line}\): give each key once$"):
        parse_yaml(text, "f", "f.yaml")


def test_yaml_merge_keys_may_override():
    """``<<`` merges are not duplicates: a mapping overrides what it merges, at any nesting,
    even when a merge flattens a mapping before that mapping is itself constructed."""
    text = ("base: &B {x: 1, y: 2}\n"
            "deep:\n  inner:\n    mid: &M {<<: *B, x: 3}\n"
            "top: {<<: *M, y: 4}\n"
            "list: [{<<: [*B, *M], z: 5}]\n")
    data = parse_yaml(text, "f", "f.yaml")
    assert data == yaml.safe_load(text)  # what PyYAML's SafeLoader makes of merges, unchanged
    assert data["deep"]["inner"]["mid"] == {"x": 3, "y": 2}
    assert data["top"]["y"] == 4
    assert data["list"] == [{"x": 1, "y": 2, "z": 5}]


def test_byte_order_mark_and_merges_plan(tmp_path):
    """Files with a UTF-8 byte-order mark plan (exit 0): a model overriding what it merges,
    and a YAML edge list."""
    model = tmp_path / "bom.yaml"
    model.write_bytes(b"\xef\xbb\xbf<<: {base: gpt-1.7b, name: merged}\nname: small\n")
    graph = tmp_path / "g.yaml"
    graph.write_bytes(b"\xef\xbb\xbf" + (GRAPHS / "small.yaml").read_bytes())
    result = run_commands([{"argv": _model(str(model)), "cwd": str(tmp_path)},
                           {"argv": ["plan", "--model", "gpt-1.7b", "--cluster", str(graph), "--global-batch", "16"],
                            "cwd": str(tmp_path)}], timeout_s=60, memory_bytes=MEMORY_BYTES)
    assert [r["returncode"] for r in result] == [0, 0], [r["stderr"][-2000:] for r in result]
    assert "nest plan: small " in result[0]["stdout"]
