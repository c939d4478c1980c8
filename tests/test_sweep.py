"""``nest sweep``: grid expansion and validation, rows, journal, resume after a kill,
the local and Dask executors, progress and the plot."""

import io
import json
import os
import signal
import subprocess
import sys
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
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


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
    assert scenario_id(reordered) == scenarios[3].id
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
            "memory_GiB": [3], "jobs": [{"global_batch": 256, "seq_len": 2048}, {"global_batch": 3}]}
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
    assert len(lines) == 16
    # a torn last line (a kill in the middle of a write) and a lost row: both re-run
    journal.write_text("\n".join(lines[:-2]) + "\n" + lines[-2][: len(lines[-2]) // 2])
    second = run_sweep(SMALL, out, quiet=True, workers=1)
    assert second["resumed"] == 14 and second["ran"] == 2
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


def test_bad_output_paths_and_options():
    with pytest.raises(nest.SpecError, match="^out = "):
        run_sweep(SMALL, "r.txt", quiet=True)
    with pytest.raises(nest.SpecError, match="^dask_local"):
        run_sweep(SMALL, "r.jsonl", quiet=True, scheduler="tcp://x:1", dask_local=2)
    with pytest.raises(nest.SpecError, match="^workers = "):
        run_sweep(SMALL, "r.jsonl", quiet=True, workers=0)


def test_a_killed_sweep_resumes_with_every_scenario_exactly_once(tmp_path):
    out = tmp_path / "r.jsonl"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    command = [sys.executable, "-m", "nest", "sweep", str(KILL), "--out", str(out), "--quiet", "--workers", "2"]
    process = subprocess.Popen(command, env=env, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if out.exists() and out.read_text().count("\n") >= 6:
                break
            assert process.poll() is None, "the sweep ended before it could be killed"
            time.sleep(0.02)
        else:
            pytest.fail("the sweep wrote no rows in 60 s")
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the sweep and its worker processes
        process.wait()
    done = out.read_text().count("\n")
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
    path.write_text('{"id": "a", "x": 1}\n{"id": "b", "x"')
    assert list(read_journal(path)) == ["a"]
    assert path.read_text() == '{"id": "a", "x": 1}\n'


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
