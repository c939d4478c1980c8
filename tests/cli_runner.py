"""Run many ``nest`` command lines as separate processes without paying nest's start-up
for each: this process imports nest once, then forks one child per command line. Each
child gets its own working directory, a memory limit (``RLIMIT_AS``), captured stdout and
stderr, and runs :func:`nest.cli.main` exactly as ``python -m nest`` does (an uncaught
exception prints its traceback and exits 1); the parent kills a child that outlives the
hang guard (exit code ``null``). The parent can also import, before any fork, the modules
nest loads lazily on the commands' paths (``preload``: graphs load networkx and scipy,
~0.5 s a process), so that the children inherit them instead of each importing them; the
address space they take is added to the children's limit.

usage: python tests/cli_runner.py < commands.json > results.json

``commands.json``: ``{"parallel": N, "timeout_s": T, "memory_bytes": M, "preload":
[MODULE, ...], "commands": [{"argv": [...], "cwd": DIR}, ...]}``; the results are
``[{"returncode", "stdout", "stderr"}, ...]`` in the same order. Imported by the tests
(pytest puts this directory on sys.path) for :func:`run_commands`.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path


CLI_MODULES = ("nest.planner", "nest.inputs.nest_instance", "nest.inputs.profiles", "nest.inputs.graph_files",
               "nest.inputs.hf", "nest.network.graph", "nest.studies.sweep", "nest.studies.compare", "yaml",
               "networkx", "scipy.cluster.hierarchy", "scipy.sparse.csgraph", "scipy.spatial.distance")
"""What nest's commands import lazily on the paths the corpora take (a ``preload``)."""


def _child(argv: list[str], cwd: str, memory: int, out: str, err: str) -> None:
    """Run one command line in this (forked) process and exit with its code."""
    code = 1
    try:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        os.chdir(cwd)
        for fd, path in ((1, out), (2, err)):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
        from nest.cli import main

        sys.argv = ["nest", *argv]
        try:
            code = main(argv)
        except SystemExit as stop:  # argparse and sys.exit, as the interpreter handles them
            if isinstance(stop.code, int) or stop.code is None:
                code = stop.code or 0
            else:
                print(stop.code, file=sys.stderr)
                code = 1
        except BaseException:  # noqa: BLE001 - what `python -m nest` would print
            traceback.print_exc()
            code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001 - a full disk or a closed pipe must not hang the child
            pass
        os._exit(code if isinstance(code, int) else 1)


def _address_space() -> int:
    """This process's virtual memory size in bytes (what ``RLIMIT_AS`` limits)."""
    pages = int(Path("/proc/self/statm").read_text().split()[0])
    return pages * os.sysconf("SC_PAGE_SIZE")


def _serve(spec: dict) -> list[dict]:
    import nest.cli  # noqa: F401 - imported once, before any fork

    # the preloaded modules' address space is the parent's, not the command's: the children
    # get it on top of their limit, so each command may allocate what it could without them
    before = _address_space()
    for module in spec.get("preload", ()):
        importlib.import_module(module)
    preloaded = max(0, _address_space() - before)

    commands, parallel = spec["commands"], max(1, int(spec.get("parallel", 2)))
    timeout, memory = float(spec["timeout_s"]), int(spec["memory_bytes"]) + preloaded
    results: list[dict | None] = [None] * len(commands)
    running: dict[int, tuple[int, float, str, str]] = {}
    pending = list(range(len(commands)))
    with tempfile.TemporaryDirectory() as scratch:
        while pending or running:
            while pending and len(running) < parallel:
                i = pending.pop(0)
                out, err = (os.path.join(scratch, f"{i}.{name}") for name in ("out", "err"))
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    _child(commands[i]["argv"], commands[i]["cwd"], memory, out, err)
                running[pid] = (i, time.monotonic() + timeout, out, err)
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                for child, (i, deadline, _, _) in list(running.items()):
                    if time.monotonic() > deadline:
                        os.kill(child, signal.SIGKILL)
                time.sleep(0.002)
                continue
            i, deadline, out, err = running.pop(pid)
            killed = time.monotonic() > deadline and os.WIFSIGNALED(status)
            code = None if killed else (os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status))
            results[i] = {"returncode": code, "stdout": Path(out).read_text(errors="replace"),
                          "stderr": Path(err).read_text(errors="replace")}
    return results


def run_commands(commands: list[dict], *, timeout_s: float, memory_bytes: int, parallel: int | None = None,
                 env: dict | None = None, preload: tuple[str, ...] = ()) -> list[dict]:
    """Run ``commands`` (``{"argv", "cwd"}`` each) through a fresh runner process that has
    imported ``preload``; the results in the same order (see the module docstring)."""
    spec = {"commands": commands, "timeout_s": timeout_s, "memory_bytes": memory_bytes,
            "parallel": parallel or max(2, os.cpu_count() or 1), "preload": list(preload)}
    done = subprocess.run([sys.executable, __file__], input=json.dumps(spec), capture_output=True, text=True,
                          env=env, timeout=timeout_s * len(commands) + 300)
    if done.returncode != 0:
        raise RuntimeError(f"cli_runner failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout)


if __name__ == "__main__":
    results = _serve(json.load(sys.stdin))
    sys.stdout.write(json.dumps(results))
