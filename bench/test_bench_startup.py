"""Process start-up of ``nest`` (issue 19: ``nest plan`` before the search begins <= 0.15 s;
gpt3-175b on 1024 dgx-a100 as a whole process <= 0.3 s with a competing busy process).

Each round spawns a fresh interpreter. ``load=busy-1`` runs one busy-loop process beside it
for the whole benchmark (the issue's competing process), ``load=busy`` one per core, as on
a shared machine. ``bytecode`` in extra_info says
whether the interpreter may write ``__pycache__`` (some machines set
``PYTHONDONTWRITEBYTECODE``, which makes every process compile nest's sources again).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PLAN = ["plan", "--model", "gpt3-175b", "--cluster", "dgx-a100", "--devices", "1024"]

# Stops the process where the search would begin: importing, reading the inputs and
# building the scenario are start-up, the search is not.
BEFORE_SEARCH = """
import sys
import nest.planner
def stop(*args, **kwargs):
    raise SystemExit(0)
nest.planner.search = stop
import nest.cli
nest.cli.main(sys.argv[1:])
"""

COMMANDS = {
    "version": ["-m", "nest", "--version"],
    "before-search": ["-c", BEFORE_SEARCH, *PLAN],
    "whole": ["-m", "nest", *PLAN],
    "whole-1-thread": ["-m", "nest", *PLAN, "--threads", "1"],
}


@pytest.fixture(params=["idle", "busy-1", "busy"])
def load(request):
    """``busy-1``: one spinning process, ``busy``: one per core, for the duration of the
    benchmark."""
    count = {"idle": 0, "busy-1": 1, "busy": os.cpu_count() or 1}[request.param]
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    yield request.param
    for spinner in spinners:
        spinner.kill()
        spinner.wait()


@pytest.mark.parametrize("command", list(COMMANDS))
def test_process_start(benchmark, command, load):
    benchmark.group = f"nest process start: {command}"
    benchmark.extra_info["load"] = load
    benchmark.extra_info["bytecode"] = "not written" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "cached"

    def run():
        done = subprocess.run([sys.executable, *COMMANDS[command]], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr

    benchmark.pedantic(run, rounds=5, iterations=1, warmup_rounds=1)
