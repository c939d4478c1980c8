"""nest against the NEST artifact's own solver, on the artifact's instances: wall time.

Builds the artifact's stage solver (``nest/Solver/device_placement/device_placement.cpp`` of
github.com/scai-tech/Nest, "NEST version 1.0") with ``g++ -O2`` and runs it on every DP
instance of ``../shared/data/nest-artifact`` (or ``--instances``), paired with nest on the
same instance:

* ``artifact``: the solver as a process, ``device_placement IN OUT``, on the instance with
  its ``baselines`` removed (the solver would otherwise also cost the paper's fixed
  configurations, which ``nest plan`` does not do: the removal only makes it faster).
* ``nest process``: ``python -m nest plan --nest-instance FILE --json`` in a fresh process.
* ``nest library``: ``nest.inputs.measured.instance_setup(FILE)`` and ``nest.plan(...)`` in
  this process (imports done; what a scheduler calling nest pays per instance).

The solver embeds CPython and imports the artifact's ``utils.network`` at start. That
package's ``__init__`` imports the artifact's estimators (wham, sunstone, chakra: a GPU
environment); the solver only looks the module up and, on instances where ZeRO relieves
memory, calls ``get_allgather_latency`` / ``get_reduce_scatter_latency``, which return
``None`` because the artifact never calls ``init_network`` in the solver's interpreter. So
the build here gives it ``utils/network.py`` as the artifact ships it with the
``comm_estimator`` import replaced by a function that raises (unreachable for that reason)
and an empty ``utils/__init__.py``: the same answers, and a faster start than the
artifact's own environment would give it.

``--reuse`` takes the artifact's rows of an earlier run (the instances it has; the others
need ``--artifact``) and measures nest again. The results are rewritten after every
instance. Each nest
timing is the minimum of ``--repeat`` runs; the artifact runs once per instance
(it takes seconds to minutes). ``--busy N`` keeps N busy-loop processes running during
every measurement (a shared machine). Writes ``artifact_speed.md`` and
``artifact_speed.json`` into ``--out`` (default ``bench/paper/results``).

    python bench/paper/artifact_speed.py --artifact /path/to/Nest          # a checkout or git dir
    python bench/paper/artifact_speed.py --artifact ~/Nest --instances '*h100*n64*' --busy 1
    python bench/paper/artifact_speed.py --reuse bench/paper/results/artifact_speed.json --busy 1
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
INSTANCES = REPO.parent / "shared" / "data" / "nest-artifact"
SOLVER_FILES = ("nest/Solver/device_placement/device_placement.cpp",
                "nest/Solver/device_placement/nlohmann/json.hpp",
                "nest/Estimator/utils/network.py", "nest/Estimator/configs.py")
ESTIMATOR_IMPORT = "from .comm_estimator import communication_estimator"
ESTIMATOR_STUB = ("def communication_estimator(*args):\n"
                  "    raise RuntimeError('the network simulator is not part of this build')")


def _artifact_file(artifact: Path, name: str) -> bytes:
    """One file of the artifact, from a checkout or from a bare git directory."""
    if (artifact / name).is_file():
        return (artifact / name).read_bytes()
    return subprocess.run(["git", "--git-dir", str(artifact), "show", f"HEAD:{name}"],
                          check=True, capture_output=True).stdout


def _embed_flags() -> list[str]:
    """Compiler and linker flags for a program that embeds this interpreter."""
    include = sysconfig.get_paths()["include"]
    libdir = sysconfig.get_config_var("LIBDIR")
    version = sysconfig.get_config_var("LDVERSION")
    return [f"-I{include}", f"-L{libdir}", f"-Wl,-rpath,{libdir}", f"-lpython{version}", "-ldl", "-lm"]


def build_solver(artifact: Path, build: Path) -> tuple[Path, Path]:
    """Compile the artifact's solver at -O2; returns (executable, PYTHONPATH for it)."""
    for name in SOLVER_FILES:
        target = build / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(_artifact_file(artifact, name))
    pythonpath = build / "py"
    (pythonpath / "utils").mkdir(parents=True, exist_ok=True)
    (pythonpath / "utils" / "__init__.py").write_text("")
    network = (build / "nest/Estimator/utils/network.py").read_text()
    if ESTIMATOR_IMPORT not in network:
        raise SystemExit(f"artifact: {ESTIMATOR_IMPORT!r} not found in utils/network.py; "
                         "this script knows NEST version 1.0")
    (pythonpath / "utils" / "network.py").write_text(network.replace(ESTIMATOR_IMPORT, ESTIMATOR_STUB))
    shutil.copy(build / "nest/Estimator/configs.py", pythonpath / "configs.py")
    executable = build / "device_placement"
    subprocess.run(["g++", "-O2", "-std=c++17", "-o", str(executable),
                    str(build / SOLVER_FILES[0]), *_embed_flags()], check=True)
    return executable, pythonpath


def _busy_loop() -> None:
    while True:
        pass


def _timed(command: list[str], env: dict | None = None, timeout: float | None = None,
           memory_bytes: int | None = None) -> tuple[float, int, str]:
    """Wall seconds, exit code (-1: timed out) and the tail of stderr of ``command``."""
    limit = None
    if memory_bytes:
        limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))  # noqa: E731
    start = time.perf_counter()
    try:
        done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              timeout=timeout, preexec_fn=limit)
        code, err = done.returncode, done.stderr.decode(errors="replace")[-2000:]
    except subprocess.TimeoutExpired:
        code, err = -1, "timed out"
    return time.perf_counter() - start, code, err


def run_artifact(executable: Path, pythonpath: Path, instance: Path, work: Path, timeout: float,
                 memory_bytes: int) -> dict:
    """The artifact's solve of one instance (baselines removed): seconds and its choice.
    Its address space is capped at ``memory_bytes``: its DP tables reach tens of GB on the
    largest instances, and a machine's OOM killer would otherwise pick any process."""
    data = json.loads(instance.read_text())
    data["baselines"] = {}
    given = work / instance.name
    given.write_text(json.dumps(data))
    answer = work / f"{instance.stem}.out.json"
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    seconds, code, err = _timed([str(executable), str(given), str(answer)], env=env, timeout=timeout,
                                memory_bytes=memory_bytes)
    row = {"seconds": seconds, "exit": code}
    if code == 0:
        out = json.loads(answer.read_text())
        row.update(tp=out["tensorParallelDegree"], dp=out["dataParallelDegree"], pp=len(out["stages"]),
                   time_per_batch_s=out["finalTimePerBatch"] / 1000.0)
    elif "bad_alloc" in err:
        row["failure"] = f"out of memory at {memory_bytes / 2**30:.0f} GiB"
    else:
        row["failure"] = "timed out" if code == -1 else f"exit {code}"
    return row


def run_nest_process(instance: Path, repeat: int) -> dict:
    """``nest plan --nest-instance`` in fresh processes: the fastest of ``repeat`` runs."""
    command = [sys.executable, "-m", "nest", "plan", "--nest-instance", str(instance), "--json"]
    runs = [_timed(command) for _ in range(repeat)]
    return {"seconds": min(run[0] for run in runs), "exit": max(run[1] for run in runs)}


def run_nest_library(instance: Path, repeat: int) -> dict:
    """Load the instance and plan it in this process: the fastest of ``repeat`` calls."""
    import nest
    from nest.inputs.measured import instance_setup

    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        setup = instance_setup(str(instance))
        result = nest.plan(setup.model, setup.cluster, setup.job, source=setup.source, limits=setup.limits)
        best = min(best, time.perf_counter() - start)
    p = result.parallelism
    return {"seconds": best, "tp": p["tp"], "pp": p["pp"], "dp": p["dp"], "step_time_s": result.step_time_s}


def markdown(rows: list[dict], busy: int, repeat: int) -> str:
    """The table of times and the medians of the ratios."""
    solved = [r for r in rows if r["artifact"]["exit"] == 0 and r["nest_process"]["exit"] == 0]
    process = [r["artifact"]["seconds"] / r["nest_process"]["seconds"] for r in solved]
    library = [r["artifact"]["seconds"] / r["nest_library"]["seconds"] for r in solved]
    out = ["# nest against the NEST artifact's solver (wall time)", "",
           f"{len(rows)} instances, {len(solved)} solved by both; the artifact's solver at g++ -O2, "
           f"once per instance; nest the fastest of {repeat} runs; {busy} competing busy-loop "
           f"process(es); {os.cpu_count()} cores. Written by `bench/paper/artifact_speed.py`.", ""]
    if solved:
        out += [f"Median speed-up of nest: {statistics.median(process):.1f}x as a process "
                f"(min {min(process):.1f}x), {statistics.median(library):.0f}x as a library call "
                f"(min {min(library):.0f}x).", ""]
    out += ["| instance | artifact s | nest process s | nest library s | x process | x library "
            "| artifact t/p/d | nest t/p/d |", "|---|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        a, np_, nl = r["artifact"], r["nest_process"], r["nest_library"]
        ok = a["exit"] == 0
        choice = f"{a['tp']}/{a['pp']}/{a['dp']}" if ok else a.get("failure", f"exit {a['exit']}")
        ratios = (f"{a['seconds'] / np_['seconds']:.1f} | {a['seconds'] / nl['seconds']:.0f}" if ok else "- | -")
        out.append(f"| {r['instance']} | {a['seconds']:.2f} | {np_['seconds']:.2f} | {nl['seconds']:.3f} | "
                   f"{ratios} | {choice} | {nl['tp']}/{nl['pp']}/{nl['dp']} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--artifact", type=Path,
                        help="the scai-tech/Nest repository: a checkout or a (bare) git directory")
    parser.add_argument("--instances", default="*.json", help="glob inside the instance folder")
    parser.add_argument("--folder", type=Path, default=INSTANCES)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--busy", type=int, default=0, help="competing busy-loop processes")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per artifact solve")
    parser.add_argument("--memory-gib", type=float, default=16.0, help="address-space cap of an artifact solve")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--reuse", type=Path, metavar="JSON",
                        help="take the artifact's rows from this earlier artifact_speed.json (nest is measured "
                             "again; the artifact needs about an hour for all the instances)")
    args = parser.parse_args(argv)
    reused = {row["instance"]: row["artifact"] for row in json.loads(args.reuse.read_text())} if args.reuse else {}
    instances = sorted(args.folder.glob(args.instances))
    if not instances:
        raise SystemExit(f"instances: nothing matches {args.instances!r} in {args.folder}")
    if args.artifact is None:
        instances = [i for i in instances if i.stem in reused]
        if not instances:
            parser.error("give --artifact (to build and run the solver) or --reuse with rows of these instances")
    busy = [multiprocessing.Process(target=_busy_loop, daemon=True) for _ in range(args.busy)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="nest-artifact-") as tmp:
        work = Path(tmp)
        if any(i.stem not in reused for i in instances):
            executable, pythonpath = build_solver(args.artifact.expanduser(), work / "build")
        for process in busy:
            process.start()
        try:
            for instance in instances:
                artifact = reused.get(instance.stem)
                if artifact is None:
                    artifact = run_artifact(executable, pythonpath, instance, work, args.timeout,
                                            int(args.memory_gib * 2**30))
                row = {"instance": instance.stem, "artifact": artifact,
                       "nest_process": run_nest_process(instance, args.repeat),
                       "nest_library": run_nest_library(instance, args.repeat)}
                rows.append(row)
                print(f"{instance.stem}: artifact {artifact['seconds']:.2f} s, nest "
                      f"{row['nest_process']['seconds']:.2f} s / {row['nest_library']['seconds']:.3f} s",
                      flush=True)
                _write(args.out, rows, args.busy, args.repeat)  # after every row: the run takes hours
        finally:
            for process in busy:
                process.terminate()
    print((args.out / "artifact_speed.md").read_text().split("\n\n")[2])
    return 0


def _write(out: Path, rows: list[dict], busy: int, repeat: int) -> None:
    """The results so far, each file replaced whole."""
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (("artifact_speed.json", json.dumps(rows, indent=1) + "\n"),
                       ("artifact_speed.md", markdown(rows, busy, repeat))):
        partial = out / f".{name}.partial"
        partial.write_text(text)
        os.replace(partial, out / name)

if __name__ == "__main__":
    sys.exit(main())
