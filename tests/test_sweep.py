"""``nest sweep``: grid expansion and validation, rows, journal, resume after a kill,
the local and Dask executors, progress and the plot."""

import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import nest
from nest.studies.sweep import Progress, expand_grid, read_journal, run_scenario, run_sweep, scenario_id, sweep_plot

DATA = Path(__file__).parent / "data" / "sweeps"
SMALL = DATA / "small.yaml"
KILL = DATA / "kill.yaml"
VOLATILE = {"solve_time_s"}


def _rows(path):
    """A journal's rows (its first line is the header)."""
    header, *lines = Path(path).read_text().splitlines()
    assert json.loads(header)["nest_sweep_journal"] == 1
    return [json.loads(line) for line in lines]


def _stable(rows):
    return {r["id"]: {k: v for k, v in r.items() if k not in VOLATILE} for r in rows}


# -- grid ----------------------------------------------------------------------------------


def test_grid_is_the_cartesian_product_with_stable_unique_ids():
    scenarios = expand_grid(SMALL)
    assert len(scenarios) == 2 * 2 * 2 * 2
    assert len({s.id for s in scenarios}) == len(scenarios)
    assert [s.id for s in expand_grid(SMALL)] == [s.id for s in scenarios]
    params = dict(scenarios[3].params)
    reordered = dict(reversed(list(params.items())))
    content = {**params, **scenarios[3].inputs}  # the id hashes the specs, not their names
    assert scenario_id(reordered) == scenario_id(params) != scenarios[3].id == scenario_id(content)
    json_grid = expand_grid(DATA / "grid.json")
    assert len(json_grid) == 4
    assert {s.params["oversubscription"]["leaf"] for s in json_grid} == {1, 4}


def test_grid_from_a_dict_and_tiers_a_cluster_lacks_collapse():
    grid = {"models": ["llama3-8b"], "clusters": [{"cluster": "dgx-h100", "devices": [8, 64]}],
            "bandwidth_multipliers": {"leaf": [1, 2]}}
    scenarios = expand_grid(grid)
    # 8 devices: one NVLink node, no leaf tier: both multipliers are the same scenario
    assert sorted((s.params["devices"], s.params["bandwidth"].get("leaf")) for s in scenarios) == \
        [(8, None), (64, 1), (64, 2)]


@pytest.mark.parametrize("grid, field", [
    ({"clusters": ["dgx-h100"]}, "grid.models"),
    ({"models": ["llama3-8b"]}, "grid.clusters"),
    ({"models": ["nope"], "clusters": ["dgx-h100"]}, "grid.models[0]"),
    ({"models": ["llama3-8b"], "clusters": ["dgx-h100"], "colour": 1}, "grid.colour"),
    ({"models": ["llama3-8b"], "clusters": [{"cluster": "dgx-h100", "devices": [12]}]}, "grid.clusters[0]"),
    ({"models": ["llama3-8b"], "clusters": [{"cluster": "dgx-h100", "devices": [0]}]},
     "grid.clusters[0].devices[0]"),
    ({"models": ["llama3-8b"], "clusters": ["dgx-h100"], "bandwidth_multipliers": {"leaf": [1, -2]}},
     "grid.bandwidth_multipliers.leaf[1]"),
    ({"models": ["llama3-8b"], "clusters": ["dgx-h100"], "oversubscription": {"spine": [0.5]}},
     "grid.oversubscription.spine[0]"),
    ({"models": ["llama3-8b"], "clusters": ["dgx-h100"], "memory_GiB": ["big"]}, "grid.memory_GiB[0]"),
    ({"models": ["llama3-8b"], "clusters": ["dgx-h100"], "jobs": [{"global_batch": 8, "seqlen": 9}]},
     "grid.jobs[0].seqlen"),
    ({"models": ["llama3-8b"], "clusters": ["dgx-h100"], "jobs": [{"global_batch": 0}]},
     "grid.jobs[0].global_batch"),
    ({"models": ["llama3-8b"], "clusters": ["dgx-h100"], "jobs": [{"tp_comm_overlap": "yes"}]},
     "grid.jobs[0].tp_comm_overlap"),
    ({"models": ["llama3-8b"], "clusters": ["dgx-h100"], "limits": {"tpp": [8]}}, "grid.limits"),
    ({"models": ["llama3-8b"], "clusters": ["dgx-h100"], "limits": {"tp": ["8"]}}, "grid.limits.tp = '8'"),
    ({"models": ["llama3-8b"], "clusters": ["dgx-h100"], "limits": [8]}, "grid.limits = "),
    (DATA / "bad_tier.yaml", "grid.bandwidth_multipliers.infiniband"),
    (DATA / "missing.yaml", "grid = "),
])
def test_bad_grids_are_one_line_spec_errors_naming_the_field(grid, field):
    with pytest.raises(nest.SpecError) as info:
        expand_grid(grid)
    message = str(info.value)
    assert message.startswith(field), message
    assert "\n" not in message


# -- rows ----------------------------------------------------------------------------------


def test_grid_limits_narrow_every_scenario_and_keep_other_ids():
    base = {"models": ["llama3-8b"], "clusters": [{"cluster": "dgx-h100", "devices": [64, 128]}],
            "jobs": [{"global_batch": 256, "seq_len": 4096}]}
    limited = {**base, "limits": {"tp": 2, "zero": [1], "recompute": ["none"]}}
    plain_ids = [s.id for s in expand_grid(base)]
    scenarios = expand_grid(limited)
    assert not set(plain_ids) & {s.id for s in scenarios}  # the limits are part of a scenario
    assert [s.id for s in expand_grid(dict(base))] == plain_ids
    for scenario in scenarios:
        row = run_scenario(scenario)
        assert (row["status"], row["tp"], row["zero"], row["recompute"]) == ("ok", 2, 1, "none")
        cluster = nest.load_cluster("dgx-h100", devices=scenario.params["devices"])
        direct = nest.plan("llama3-8b", cluster, nest.JobSpec(global_batch=256, seq_len=4096),
                           limits=nest.SpaceLimits(tp=(2,), zero=(1,), recompute=("none",)))
        assert row["step_time_s"] == direct.step_time_s


def test_a_row_reproduces_the_plan_of_the_same_scenario():
    scenario = expand_grid(SMALL)[0]
    row = run_scenario(scenario)
    cluster = nest.load_cluster("dgx-h100", devices=64)
    from dataclasses import replace
    mult = scenario.params["bandwidth"]
    cluster = replace(cluster, tiers=tuple(replace(t, bandwidth=t.bandwidth * mult.get(t.name, 1))
                                           for t in cluster.tiers))
    direct = nest.plan("llama3-8b", cluster, nest.JobSpec(256, 2048), threads=1).to_dict()
    assert row["status"] == "ok"
    assert row["step_time_s"] == direct["step_time_s"]
    assert row["tp"] == direct["parallelism"]["tp"] and row["dp"] == direct["parallelism"]["dp"]
    assert row["cost_per_Mtoken"] == pytest.approx(2.0 * 64 / 3600 / direct["throughput_tokens_per_s"] * 1e6)


def test_overlap_switches_are_a_job_axis():
    grid = {"models": ["llama3-8b"], "clusters": [{"cluster": "dgx-h100", "devices": [64]}],
            "jobs": [{"global_batch": 256}, {"global_batch": 256, "overlap_grad_reduce": True,
                                               "tp_comm_overlap": True}]}
    plain, overlapped = (run_scenario(s) for s in expand_grid(grid))
    assert overlapped["overlap_grad_reduce"] is True and "overlap_grad_reduce" not in plain
    job = nest.JobSpec(256, 8192, overlap_grad_reduce=True, tp_comm_overlap=True)
    direct = nest.plan("llama3-8b", nest.load_cluster("dgx-h100", devices=64), job, threads=1)
    assert overlapped["step_time_s"] == direct.step_time_s <= plain["step_time_s"]


def test_infeasible_and_invalid_scenarios_are_rows_with_a_reason():
    grid = {"models": ["llama3-8b"], "clusters": [{"cluster": "dgx-h100", "devices": [64]}],
            "memory_GiB": [2.25], "jobs": [{"global_batch": 256, "seq_len": 2048}, {"global_batch": 3}]}
    rows = [run_scenario(s) for s in expand_grid(grid)]
    assert rows[0]["status"] == "infeasible" and "memory" in rows[0]["reason"]
    assert rows[1]["status"] in ("invalid", "infeasible") and rows[1]["reason"]


def test_network_multipliers_on_a_graph_cluster_are_invalid_rows():
    """A graph cluster is priced on its links: a bandwidth multiplier of one of its derived
    tiers would change nothing, so the scenario is reported invalid instead."""
    grid = {"models": ["llama2-7b"], "clusters": [{"cluster": "h100-fattree", "devices": [64]}],
            "bandwidth_multipliers": {"level0": [1, 2]}}
    rows = [run_scenario(s) for s in expand_grid(grid)]
    assert [r["status"] for r in rows] == ["ok", "invalid"]
    assert "tier clusters" in rows[1]["reason"]


# -- journal, tables, resume ---------------------------------------------------------------


def test_sweep_writes_csv_jsonl_and_resumes_without_duplicates(tmp_path):
    out = tmp_path / "r.csv"
    first = run_sweep(SMALL, out, quiet=True, workers=2, plot=str(tmp_path / "p.png"))
    assert first["ran"] == 16 and first["ok"] == 8 and first["infeasible"] == 8
    assert (tmp_path / "p.png").stat().st_size > 0
    journal = tmp_path / "r.csv.jsonl"
    lines = journal.read_text().splitlines()
    assert len(lines) == 17  # the header and 16 rows
    # a torn last line (a kill in the middle of a write) and a lost row: both re-run
    journal.write_text("\n".join(lines[:-2]) + "\n" + lines[-2][: len(lines[-2]) // 2])
    notes = io.StringIO()
    second = run_sweep(SMALL, out, quiet=True, workers=1, stream=notes)
    assert second["resumed"] == 14 and second["ran"] == 2
    assert notes.getvalue().startswith(f"nest: note: {journal}: dropped a torn last line (line 16,")
    rows = _rows(journal)
    assert sorted(r["id"] for r in rows) == sorted(s.id for s in expand_grid(SMALL))
    csv_lines = out.read_text().splitlines()
    assert len(csv_lines) == 17 and csv_lines[0].startswith("id,model,cluster,devices,bw_leaf")
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]


def test_parquet_output(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow not installed")
    grid = {"models": ["llama3-8b"], "clusters": [{"cluster": "dgx-h100", "devices": [64]}],
            "bandwidth_multipliers": {"leaf": [0.5, 1]}, "jobs": [{"global_batch": 256, "seq_len": 2048}]}
    run_sweep(grid, tmp_path / "r.parquet", quiet=True, workers=1)
    table = pq.read_table(tmp_path / "r.parquet")
    assert table.num_rows == 2 and "throughput_tokens_per_s" in table.column_names


def test_workers_beyond_the_cpus_are_capped_with_a_note(tmp_path):
    from nest.studies.sweep_pool import cpu_count

    grid = {"models": ["gpt-1.7b"], "clusters": [{"cluster": "dgx-a100", "devices": [8]}],
            "jobs": [{"global_batch": 64, "seq_len": 1024}]}
    notes = io.StringIO()
    summary = run_sweep(grid, tmp_path / "r.jsonl", quiet=True, workers=4096, stream=notes)
    assert summary["workers"] == cpu_count() and summary["ok"] == 1
    assert notes.getvalue() == (f"nest: note: workers = 4096: more than the {cpu_count()} CPUs this process "
                                f"may use; using {cpu_count()}\n")


def test_bad_output_paths_and_options():
    with pytest.raises(nest.SpecError, match="^out = "):
        run_sweep(SMALL, "r.txt", quiet=True)
    with pytest.raises(nest.SpecError, match="^dask_local"):
        run_sweep(SMALL, "r.jsonl", quiet=True, scheduler="tcp://x:1", dask_local=2)
    with pytest.raises(nest.SpecError, match="^workers = "):
        run_sweep(SMALL, "r.jsonl", quiet=True, workers=0)


@pytest.mark.parametrize("address, message", [
    ("garbage", "scheduler = 'garbage': expected [PROTOCOL://]HOST:PORT such as tcp://scheduler:8786"),
    ("tcp://:8786", "scheduler = 'tcp://:8786': expected [PROTOCOL://]HOST:PORT"),
    ("tcp://host:99999", "scheduler = 'tcp://host:99999': the port must be an integer 1-65535"),
    ("tcp://host:port", "scheduler = 'tcp://host:port': the port must be an integer 1-65535"),
    ("http://host:8786", "scheduler = 'http://host:8786': protocol 'http' is not one of tcp, tls, ws, wss, ucx"),
    ("tcp://127.0.0.1:1", "scheduler = 'tcp://127.0.0.1:1': cannot connect to 127.0.0.1 port 1: Connection refused"),
])
def test_a_bad_scheduler_address_is_refused_before_anything_is_written(tmp_path, address, message):
    out = tmp_path / "r.jsonl"
    with pytest.raises(nest.SpecError) as error:
        run_sweep(SMALL, out, quiet=True, scheduler=address)
    assert str(error.value).startswith(message)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("reply", [b"\xff" * 64, b""])  # another protocol's bytes; silence
def test_a_server_that_is_not_a_dask_scheduler_is_named(tmp_path, monkeypatch, reply):
    from nest.studies import sweep_pool
    monkeypatch.setattr(sweep_pool, "CONNECT_TIMEOUT_S", 1.0)
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(10)
    port = server.getsockname()[1]

    def answer():
        with contextlib.suppress(OSError):
            while True:  # the address probe, then Dask's connections
                conn, _ = server.accept()
                conn.sendall(reply)

    threading.Thread(target=answer, daemon=True).start()
    with pytest.raises(nest.SpecError, match=rf"^scheduler = 'tcp://127.0.0.1:{port}': no Dask scheduler answers "):
        run_sweep(SMALL, tmp_path / "r.jsonl", quiet=True, scheduler=f"tcp://127.0.0.1:{port}")
    server.close()


def test_a_killed_sweep_resumes_with_every_scenario_exactly_once(tmp_path):
    out = tmp_path / "r.jsonl"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    command = [sys.executable, "-m", "nest", "sweep", str(KILL), "--out", str(out), "--quiet", "--workers", "2"]
    process = subprocess.Popen(command, env=env, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if out.exists() and out.read_text().count("\n") >= 7:  # the header and six rows
                break
            assert process.poll() is None, "the sweep ended before it could be killed"
            time.sleep(0.02)
        else:
            pytest.fail("the sweep wrote no rows in 60 s")
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the sweep and its worker processes
        process.wait()
    done = out.read_text().count("\n") - 1  # the header
    total = len(expand_grid(KILL))
    assert 6 <= done < total
    with open(out, "a") as f:  # what a kill in the middle of a write leaves
        f.write('{"id": "torn')
    summary = run_sweep(KILL, out, quiet=True, workers=2)
    assert summary["resumed"] == done and summary["ran"] == total - done
    ids = [r["id"] for r in _rows(out)]
    assert len(ids) == len(set(ids)) == total
    assert set(ids) == {s.id for s in expand_grid(KILL)}


def test_read_journal_cuts_a_torn_line(tmp_path):
    path = tmp_path / "j.jsonl"
    head = '{"nest_sweep_journal": 1}\n'
    path.write_text(head + '{"id": "a", "x": 1}\n{"id": "b", "x"')
    assert list(read_journal(path)) == ["a"]  # read only: a running sweep may be writing that line
    assert path.read_text() == head + '{"id": "a", "x": 1}\n{"id": "b", "x"'
    notes = []
    assert list(read_journal(path, notes.append, repair=True)) == ["a"]
    assert path.read_text() == head + '{"id": "a", "x": 1}\n'
    assert len(notes) == 1 and "torn last line (line 3" in notes[0]
    path.write_bytes(head.encode() + b'{"id": "a"}\n\xff\xfe{"id": "b"}\n{"id": "c"}\n')
    with pytest.raises(nest.SpecError, match="line 3 is damaged \\(not UTF-8\\)"):
        read_journal(path)
    path.write_text(head + '{"id": "a"}\n[1, 2]\n')
    with pytest.raises(nest.SpecError, match="line 3 is not a row"):
        read_journal(path)


# -- content keys: edited inputs, other directories ------------------------------------------


def _model_grid(tmp_path, name="m.yaml"):
    (tmp_path / name).write_text("base: gpt-1.7b\nname: tiny\n")
    grid = tmp_path / "grid.yaml"
    grid.write_text(f"models: [{name}, gpt-1.7b]\nclusters: [{{cluster: dgx-a100, devices: [8]}}]\n"
                    "jobs: [{global_batch: 64, seq_len: 1024}]\n")
    return grid


def test_scenario_ids_hash_the_resolved_specs_not_their_paths(tmp_path, monkeypatch):
    grid = _model_grid(tmp_path)
    ids = [s.id for s in expand_grid(grid)]
    assert len(ids) == 2
    monkeypatch.chdir(tmp_path)  # the same file named from another directory
    assert [s.id for s in expand_grid({"models": ["m.yaml", "gpt-1.7b"],
                                       "clusters": [{"cluster": "dgx-a100", "devices": [8]}],
                                       "jobs": [{"global_batch": 64, "seq_len": 1024}]})] == ids
    (tmp_path / "m.yaml").write_text("# a comment\nname: tiny\nbase: gpt-1.7b\n")  # same content
    assert [s.id for s in expand_grid(grid)] == ids
    (tmp_path / "m.yaml").write_text("base: gpt-1.7b\nname: tiny\nnum_layers: 12\n")
    edited = expand_grid(grid)
    assert edited[0].id != ids[0] and edited[1].id == ids[1]
    assert [s.slot for s in edited] == [s.slot for s in expand_grid(grid)]


def test_an_edited_model_file_reruns_its_scenarios_and_replaces_their_rows(tmp_path, monkeypatch):
    grid = _model_grid(tmp_path)
    out = tmp_path / "r.csv"
    assert run_sweep(grid, out, quiet=True, workers=1)["ran"] == 2
    other = tmp_path / "elsewhere"
    other.mkdir()
    monkeypatch.chdir(other)  # a rerun from another directory resumes everything
    again = run_sweep(os.path.relpath(grid), os.path.relpath(out), quiet=True, workers=1)
    assert (again["ran"], again["resumed"]) == (0, 2)
    (tmp_path / "m.yaml").write_text("base: gpt-1.7b\nname: tiny\nnum_layers: 12\n")
    notes = io.StringIO()
    third = run_sweep(grid, out, quiet=True, workers=1, stream=notes)
    assert (third["ran"], third["changed"], third["stale_rows"]) == (1, 1, 0)
    assert notes.getvalue() == (f"nest: note: model {tmp_path / 'm.yaml'} changed since {out}.jsonl was written: "
                                "its 1 scenario rerun, old rows replaced\n")
    rows = _rows(tmp_path / "r.csv.jsonl")
    assert sorted(r["id"] for r in rows) == sorted(s.id for s in expand_grid(grid))
    csv_lines = out.read_text().splitlines()
    assert len(csv_lines) == 3 and ",12," not in csv_lines[2]


# -- Dask ------------------------------------------------------------------------------------


def test_dask_local_cluster_gives_the_local_executor_results(tmp_path):
    pytest.importorskip("distributed", reason="distributed not installed (pip install 'nest-planner[dask]')")
    local = tmp_path / "local.jsonl"
    dask = tmp_path / "dask.jsonl"
    run_sweep(SMALL, local, quiet=True, workers=2)
    summary = run_sweep(SMALL, dask, quiet=True, dask_local=2)
    assert summary["ran"] == 16
    assert _stable(_rows(dask)) == _stable(_rows(local))


# -- progress and plot -------------------------------------------------------------------


def test_progress_bar_and_quiet():
    stream = io.StringIO()
    progress = Progress(10, 2, stream)
    for _ in range(8):
        progress.update()
    progress.close()
    text = stream.getvalue()
    assert "10/10" in text and "/s" in text and "ETA" in text
    quiet = io.StringIO()
    progress = Progress(10, 0, quiet, quiet=True)
    progress.update(10)
    progress.close()
    assert quiet.getvalue() == ""


def test_plot_metrics(tmp_path):
    pytest.importorskip("matplotlib")
    rows = [{"model": m, "status": "ok", "bw_leaf": x, "devices": 8,
             "throughput_tokens_per_s": 100.0 * x, "mfu": 0.5, "cost_per_Mtoken": 1.0 / x}
            for m in ("a", "b") for x in (0.5, 1.0, 2.0)]
    rows.append({"model": "a", "status": "infeasible", "bw_leaf": 4.0, "devices": 8})
    for y in (None, "throughput", "mfu"):
        path = sweep_plot(rows, str(tmp_path / f"{y}.png"), y=y)
        assert Path(path).stat().st_size > 0


def test_a_job_without_a_batch_is_an_invalid_row_not_a_batch_of_one(tmp_path):
    """A model with no published batch and a job that names none: the scenario is invalid,
    with the reason (earlier versions silently planned a global batch of 1)."""
    model = tmp_path / "m.yaml"
    model.write_text("base: gpt-1.7b\nname: no-batch\ndefault_global_batch: 0\n")
    grid = {"models": [str(model)], "clusters": [{"cluster": "dgx-a100", "devices": 8}], "jobs": [{"seq_len": 1024}]}
    (scenario,) = expand_grid(grid)
    row = run_scenario(scenario)
    assert row["status"] == "invalid"
    assert row["reason"].startswith("job.global_batch: model no-batch has no default global batch; pass one")


def _die_once(batch):
    """A sweep batch whose first attempt kills its worker (SIGKILL, as the out-of-memory
    killer does); ``batch`` is ``(marker path or None, rows)``."""
    marker, rows = batch
    if marker is not None and not os.path.exists(marker):
        Path(marker).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return rows


def test_a_dead_worker_is_replaced_and_every_batch_runs_exactly_once(tmp_path):
    from nest.studies.sweep_pool import iter_local
    batches = [(None, [1]), (str(tmp_path / "once"), [2]), (None, [3]), (None, [4])]
    rows = [row for batch_rows in iter_local(_die_once, batches, 2) for row in batch_rows]
    assert sorted(rows) == [1, 2, 3, 4]


def test_a_worker_that_keeps_dying_is_one_error_line(tmp_path, monkeypatch):
    from nest.studies import sweep_pool
    monkeypatch.setattr(sweep_pool, "MAX_RESTARTS", 0)
    with pytest.raises(sweep_pool.WorkerDied, match="^a worker was killed by SIGKILL, often the out-of-memory "
                                                    "killer 1 times$"):
        list(sweep_pool.iter_local(_die_once, [(str(tmp_path / "once"), [1])], 1))


def test_grid_jobs_take_the_expert_load_imbalance():
    """``moe_load_cv`` is a job key: its scenarios are their own (ids), their rows carry it,
    an imbalanced router only lengthens the step, and JobSpec's rule names the grid field."""
    job = {"global_batch": 256, "seq_len": 4096}
    grid = {"models": ["mixtral-8x7b"], "clusters": [{"cluster": "dgx-h100", "devices": [64]}],
            "jobs": [job, {**job, "moe_load_cv": 0.5}]}
    balanced, skewed = expand_grid(grid)
    assert balanced.id != skewed.id
    rows = [run_scenario(s) for s in (balanced, skewed)]
    assert "moe_load_cv" not in rows[0] and rows[1]["moe_load_cv"] == 0.5
    assert rows[0]["status"] == rows[1]["status"] == "ok" and rows[1]["step_time_s"] > rows[0]["step_time_s"]
    for bad, why in ((-1, "must be a finite number >= 0"), (True, "must be a finite number >= 0"),
                     (99, "must be at most 16.0")):
        grid["jobs"][1]["moe_load_cv"] = bad
        with pytest.raises(nest.SpecError, match=rf"^grid.jobs\[1\].moe_load_cv = {bad}: {why}$"):
            expand_grid(grid)


def test_grid_jobs_take_the_fp8_recipe_and_the_offload_handler(tmp_path):
    from nest.studies.sweep import build_inputs

    grid = {"models": ["gpt-1.7b"], "clusters": [{"cluster": "dgx-h100", "devices": [8]}],
            "jobs": [{"global_batch": 16, "seq_len": 1024, "dtype": "fp8", "fp8_recipe": "tensorwise",
                      "activation_offload_handler": "v2"}]}
    (scenario,) = expand_grid(grid)
    _, _, job = build_inputs(scenario.params)
    assert (job.fp8_recipe, job.activation_offload_handler) == ("tensorwise", "v2")
    row = run_scenario(scenario)
    assert row["status"] == "ok" and (row["fp8_recipe"], row["activation_offload_handler"]) == ("tensorwise", "v2")
    grid["jobs"][0]["fp8_recipe"] = "nvfp4"
    with pytest.raises(nest.SpecError, match=r"^grid.jobs\[0\].fp8_recipe = 'nvfp4': must be one of delayed, "
                                             r"tensorwise, blockwise, mxfp8$"):
        expand_grid(grid)
