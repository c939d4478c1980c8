"""``nest sweep`` under faults: kill -9 at random points, two sweeps on one output,
Ctrl-C (also of a resume), a full disk, damaged journals and files nest did not write.
After every fault, resuming gives every scenario exactly once, and no file nest did not
write is changed. The grid (tests/data/sweeps/tiny.yaml) runs in about a second."""

import csv
import errno
import io
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import nest
import nest.cli
from nest.studies import sweep
from nest.studies.journal import Journal, SweepLock, journal_path
from nest.studies.sweep import SweepInterrupted, expand_grid, run_sweep

DATA = Path(__file__).parent / "data" / "sweeps"
GRID = DATA / "tiny.yaml"
IDS = {s.id for s in expand_grid(GRID)}
# the Ctrl-C tests need the sweep still running when their SIGINT lands: a longer grid
INTERRUPT_GRID = DATA / "interrupt.yaml"
INTERRUPT_IDS = {s.id for s in expand_grid(INTERRUPT_GRID)}
NEST = [sys.executable, "-m", "nest"]
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
# what cli.main does with a Ctrl-C (the one-line report, exit 130), for the sweep alone
INTERRUPTIBLE = """
import sys
from nest.studies.sweep import run_sweep
try:
    run_sweep(sys.argv[1], sys.argv[2], workers=int(sys.argv[3]), quiet=True)
except KeyboardInterrupt as error:
    print(f"nest: {error}", file=sys.stderr)
    sys.exit(130)
"""


def _sweep(out, *extra, workers=1, grid=GRID):
    return NEST + ["sweep", str(grid), "--out", str(out), "--quiet", "--workers", str(workers), *extra]


def _start(command):
    return subprocess.Popen(command, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _session(sid: int) -> list[str]:
    """Live (not zombie) processes of session ``sid``: the sweep and everything it started."""
    alive = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            alive.append(pid)
    return alive


def _assert_no_process_left(sid: int, within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while _session(sid):
        assert time.monotonic() < deadline, f"processes of the killed sweep still run: {_session(sid)}"
        time.sleep(0.05)


def _journal_ids(journal: Path) -> list[str]:
    header, *lines = journal.read_bytes().split(b"\n")
    assert json.loads(header)["nest_sweep_journal"] == 1
    assert lines[-1] == b""
    return [json.loads(line)["id"] for line in lines[:-1]]


def _rows_saved(journal: Path) -> int:
    return max(0, journal.read_bytes().count(b"\n") - 1) if journal.exists() else 0


def _wait_rows(journal: Path, process, at_least: int) -> None:
    deadline = time.monotonic() + 60
    while _rows_saved(journal) < at_least:
        assert process.poll() is None, f"the sweep ended first: {process.communicate()}"
        assert time.monotonic() < deadline, "the sweep wrote no rows in 60 s"
        time.sleep(0.01)


def _assert_exactly_once(out: Path, expected: set = IDS) -> None:
    journal = journal_path(out)
    ids = _journal_ids(journal)
    assert len(ids) == len(set(ids)) and set(ids) == expected
    if out.suffix == ".csv":
        with open(out, newline="") as f:
            header, *table = csv.reader(f)
        assert header[:4] == ["id", "model", "cluster", "devices"]
        assert sorted(row[0] for row in table) == sorted(expected)
    leftovers = [p.name for p in out.parent.iterdir() if ".tmp" in p.name or p.name.endswith(".lock")]
    assert not leftovers


def _snapshot(directory: Path) -> dict:
    return {p.name: (p.read_bytes() if p.is_file() else None, p.stat().st_mtime_ns)
            for p in directory.iterdir()}


# -- kill -9 ---------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.slow),
                                  pytest.param(3, marks=pytest.mark.slow)])
def test_kill_9_at_random_points_then_resume_gives_every_scenario_once(tmp_path, seed):
    """The sweep (only its own process: its workers must die with it) is killed twice,
    each time at a random moment (a random time after its start: while it starts,
    takes the lock, creates the journal; or just after a random number of new rows:
    between rows, while it writes the table), each run resuming the last; the final
    resume completes every scenario exactly once."""
    out = tmp_path / "r.csv"
    journal = journal_path(out)
    rng = random.Random(seed)
    for _ in range(2):
        saved = _rows_saved(journal)
        process = _start(_sweep(out, workers=2))
        if rng.random() < 0.4:
            time.sleep(rng.uniform(0.0, 0.8))
        elif saved < len(IDS) - 1:
            _wait_rows(journal, process, rng.randint(saved, len(IDS) - 1))
            time.sleep(rng.uniform(0.0, 0.05))
        os.kill(process.pid, signal.SIGKILL)
        process.communicate()
        _assert_no_process_left(process.pid)
    saved = len(_journal_ids(journal)) if journal.exists() else 0
    done = subprocess.run(_sweep(out), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["resumed"], summary["ran"]) == (saved, len(IDS) - saved)
    _assert_exactly_once(out)


# -- two sweeps on one output --------------------------------------------------------------


def test_a_sweep_refuses_an_output_another_sweep_holds(tmp_path):
    out = tmp_path / "r.jsonl"
    with SweepLock(journal_path(out), out):
        refused = subprocess.run(_sweep(out), capture_output=True, text=True, timeout=120)
        assert refused.returncode == 2
        assert refused.stderr == (f"nest: error: out = {str(out)!r}: another nest sweep (pid {os.getpid()}) holds "
                                  "it (lock r.jsonl.lock); wait for it to end or choose another --out\n")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl.lock"]
    assert not list(tmp_path.iterdir())  # released: the lock file is gone


def test_two_sweeps_started_together_run_each_scenario_once(tmp_path):
    out = tmp_path / "r.csv"
    first, second = _start(_sweep(out)), _start(_sweep(out))
    results = [(p.wait(timeout=120), *p.communicate()) for p in (first, second)]
    codes = sorted(code for code, *_ in results)
    if codes == [0, 2]:  # the usual race: one holds the lock, the other refuses at once
        (loser,) = [err for code, _, err in results if code == 2]
        assert "another nest sweep" in loser and loser.count("\n") == 1
    else:  # one started after the other had finished: it resumed every row
        assert codes == [0, 0]
        assert sorted(json.loads(o)["ran"] for _, o, _ in results) == [0, len(IDS)]
    _assert_exactly_once(out)


# -- Ctrl-C ----------------------------------------------------------------------------------


def _interrupt(out: Path, after_rows: int, workers: int = 1):
    """Start the sweep, SIGINT its process group (a terminal's Ctrl-C) once it saved
    ``after_rows`` rows; return (exit code, stderr)."""
    process = _start([sys.executable, "-c", INTERRUPTIBLE, str(INTERRUPT_GRID), str(out), str(workers)])
    _wait_rows(journal_path(out), process, after_rows)
    os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=30)
    _assert_no_process_left(process.pid)
    return process.returncode, err


@pytest.mark.skipif("KeyboardInterrupt" not in Path(nest.cli.__file__).read_text(),
                    reason="cli.main does not catch KeyboardInterrupt yet (one line, exit 130)")
def test_ctrl_c_through_the_cli_is_one_line_and_exit_130(tmp_path):
    out = tmp_path / "r.jsonl"
    process = _start(_sweep(out, grid=INTERRUPT_GRID))
    _wait_rows(out, process, 1)
    os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=30)
    _assert_no_process_left(process.pid)
    assert process.returncode == 130
    assert err.startswith("nest: sweep interrupted: ") and err.count("\n") == 1 and "resume with: nest sweep" in err


def test_ctrl_c_then_ctrl_c_of_the_resume_then_the_printed_command_finishes(tmp_path, monkeypatch):
    """In process, Ctrl-C is a SweepInterrupted (a KeyboardInterrupt) with the report;
    a resume interrupted by a terminal's Ctrl-C (SIGINT to the process group: the
    workers ignore it) exits 130 with one line and leaves no process; the command it
    prints finishes the sweep, every scenario exactly once."""
    out = tmp_path / "r.jsonl"
    out.write_bytes(b"".join(json.dumps(row).encode() + b"\n" for row in [{"nest_sweep_journal": 1}] + [
        {"id": s.id, "status": "ok", "slot": s.slot, "inputs": s.inputs} for s in expand_grid(INTERRUPT_GRID)[:2]]))

    def interrupted(*args):
        raise KeyboardInterrupt
        yield

    monkeypatch.setattr(sweep, "iter_local", interrupted)
    with pytest.raises(SweepInterrupted) as info:
        run_sweep(INTERRUPT_GRID, out, quiet=True, workers=1)
    assert isinstance(info.value, KeyboardInterrupt) and info.value.saved == 2
    assert str(info.value) == (f"sweep interrupted: 2 of {len(INTERRUPT_IDS)} scenarios saved in {out}; "
                               f"resume with: nest sweep {INTERRUPT_GRID} --out {out} --workers 1 --quiet")
    assert len(_journal_ids(out)) == 2 and not (tmp_path / "r.jsonl.lock").exists()

    code, err = _interrupt(out, 3)
    saved = len(_journal_ids(out))
    assert code == 130, err
    assert err == (f"nest: sweep interrupted: {saved} of {len(INTERRUPT_IDS)} scenarios saved in {out}; resume with: "
                   f"nest sweep {INTERRUPT_GRID} --out {out} --workers 1 --quiet\n")
    assert 3 <= saved < len(INTERRUPT_IDS)
    resume = shlex.split(err.split("resume with: ")[1])
    assert resume[0] == "nest"
    done = subprocess.run(NEST + resume[1:], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and json.loads(done.stdout)["resumed"] == saved
    _assert_exactly_once(out, INTERRUPT_IDS)


# -- a full disk ------------------------------------------------------------------------------


def test_a_full_disk_is_one_error_and_the_resume_completes(tmp_path, monkeypatch):
    out = tmp_path / "r.csv"
    append = Journal.append

    def full(self, row):
        if len(_journal_ids(self.path)) == 4:  # half a line reaches the disk, then ENOSPC
            text = json.dumps(row).encode()
            self._f.write(text[: len(text) // 2])
            self._f.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        append(self, row)

    monkeypatch.setattr(Journal, "append", full)
    with pytest.raises(nest.SpecError) as info:
        run_sweep(GRID, out, quiet=True, workers=1)
    assert str(info.value) == (f"out = {str(out)!r}: cannot write {out}.jsonl: No space left on device; 4 of "
                               f"{len(IDS)} scenarios saved (rerun the same sweep to resume)")
    monkeypatch.setattr(Journal, "append", append)
    notes = io.StringIO()
    summary = run_sweep(GRID, out, quiet=True, workers=1, stream=notes)
    assert summary["resumed"] == 4 and "dropped a torn last line (line 6," in notes.getvalue()
    _assert_exactly_once(out)


# -- damaged journals --------------------------------------------------------------------------


def test_a_damaged_middle_line_is_refused_untouched_and_a_torn_last_line_is_dropped(tmp_path):
    out = tmp_path / "r.jsonl"
    header = b'{"nest_sweep_journal": 1}'
    lines = [header] + [json.dumps({"id": s.id, "status": "ok", "slot": s.slot}).encode()
                        for s in expand_grid(GRID)[:4]]
    damaged = b"\n".join(lines[:3] + [b"\xff\xfe\x00garbage"] + lines[3:]) + b"\n"
    out.write_bytes(damaged)
    with pytest.raises(nest.SpecError) as info:
        run_sweep(GRID, out, quiet=True, workers=1)
    assert str(info.value).startswith(f"out = {str(out)!r}: line 4 is damaged (not UTF-8); nest will not guess")
    assert out.read_bytes() == damaged and sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl"]
    torn = b'{"id": "\xe2\x82'  # cut in the middle of a UTF-8 character
    out.write_bytes(b"\n".join(lines) + b"\n" + torn)
    notes = io.StringIO()
    assert run_sweep(GRID, out, quiet=True, workers=1, stream=notes)["resumed"] == 4
    assert notes.getvalue() == (f"nest: note: {out}: dropped a torn last line (line 6, {len(torn)} bytes: a write "
                                "cut off by a kill or a full disk); its scenario reruns\n")
    _assert_exactly_once(out)


# -- files nest did not write -----------------------------------------------------------------

LEGACY = b'{"id": "0123456789abcdef", "model": "llama3-8b", "status": "ok"}\n'
USER_CSV = b"name,score\nalice,3\n"
LOOKALIKE = b"id,model,cluster,devices,status,my_notes\nx,y,z,8,ok,mine\n"


@pytest.mark.parametrize("out, name, content, reason", [
    ("r.jsonl", "r.jsonl", PNG, "is not a nest sweep journal (its first line is not JSON)"),
    ("r.jsonl", "r.jsonl", b"", "is empty, so it is not a nest sweep journal"),
    ("r.jsonl", "r.jsonl", b"notes without a newline", "does not start with a nest journal header line"),
    ("r.jsonl", "r.jsonl", b'{"results": []}\n', "is not a nest sweep journal (no nest header line)"),
    ("r.jsonl", "r.jsonl", LEGACY, "is a journal of an earlier nest"),
    ("r.csv", "r.csv", USER_CSV, "is not a table nest wrote"),
    ("r.csv", "r.csv", LOOKALIKE, "is not a table nest wrote"),
    ("r.csv", "r.csv", PNG, "is not a table nest wrote"),
    ("r.csv", "r.csv.jsonl", PNG, "is not a nest sweep journal"),
    ("r.parquet", "r.parquet", PNG, "is not a Parquet table nest wrote"),
    ("r.jsonl", "r.jsonl.lock", b"my lock\n", "exists and is not a nest sweep lock file"),
])
def test_a_file_nest_did_not_write_is_refused_and_left_untouched(tmp_path, out, name, content, reason):
    if out.endswith(".parquet"):
        pytest.importorskip("pyarrow")
    (tmp_path / name).write_bytes(content)
    os.utime(tmp_path / name, ns=(10**18, 10**18))
    before = _snapshot(tmp_path)
    with pytest.raises(nest.SpecError) as info:
        run_sweep(GRID, tmp_path / out, quiet=True, workers=2)
    message = str(info.value)
    assert f"= {str(tmp_path / name)!r}: {reason}" in message and "\n" not in message
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("kind", ["fifo", "directory", "dangling link"])
def test_an_output_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path, kind):
    path = tmp_path / "r.jsonl"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to(tmp_path / "nowhere.jsonl")
    with pytest.raises(nest.SpecError, match=r"^out = .*r\.jsonl'?: (not a regular file|a dangling)"):
        run_sweep(GRID, path, quiet=True, workers=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl"]


def test_the_cli_refuses_a_foreign_output_with_exit_2_and_one_line(tmp_path):
    out = tmp_path / "plot.csv"
    out.write_bytes(USER_CSV)
    done = subprocess.run(_sweep(out), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"nest: error: out = {str(out)!r}: is not a table nest wrote")
    assert done.stderr.count("\n") == 1
    assert out.read_bytes() == USER_CSV and sorted(p.name for p in tmp_path.iterdir()) == ["plot.csv"]
