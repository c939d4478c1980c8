"""``nest sweep``: plan every scenario of a grid, with progress, resume and plots.

A grid file (YAML or JSON) names the axes; their cartesian product is the scenario list::

    models: [llama3-8b, llama3-70b]            # presets or model files
    clusters:                                  # presets (sized by devices) or cluster files
      - {cluster: dgx-h100, devices: [256, 1024]}
      - {cluster: lab.yaml}                    # a file fixes its own size
    bandwidth_multipliers:                     # per tier name: values, product over tiers
      leaf: [0.5, 1, 2]
      spine: [0.25, 1]
    oversubscription: {spine: [1, 2]}          # optional, per tier: replaces the tier's value
    memory_GiB: [80, 141]                      # optional HBM sizes (omit: the device's own)
    jobs:                                      # optional (omit: each model's published job)
      - {global_batch: 1024, seq_len: 4096}    # also dtype, framework and the overlap switches
                                               # (overlap_grad_reduce: true, ...)
    limits: {tp: [4, 8], zero: [1]}            # optional: the search limits of every scenario
                                               # (SpaceLimits fields; nest plan's --tp ... flags)
    price_per_device_hour: 2.5                 # optional: adds cost_per_Mtoken to each row
    plot: {x: bw_leaf, y: throughput}          # optional: plot axes (see sweep_plot)

Every scenario has a stable ``id``: a hash of its parameters (model and cluster names or
file paths as written, devices, multipliers, oversubscription, memory, job), so a rerun
of the same grid with the same ``out`` skips the rows it already has.

Output: ``out`` ending in ``.jsonl`` is the journal itself: one JSON object per line,
appended, flushed and fsync'ed as each scenario completes. For ``.csv`` and ``.parquet``
(pyarrow) the journal is ``<out>.jsonl`` beside it (kept: it is what a rerun resumes
from) and the table is rewritten whole through a temporary file and ``os.replace`` every
``table_every_s`` seconds and at the end. A kill leaves at worst a torn last journal line;
the next run truncates it and reruns that scenario, so every scenario appears exactly once.
Rows are flat: scenario parameters (``model cluster devices bw_<tier> oversub_<tier>
memory_GiB global_batch seq_len``), ``status`` (``ok``, ``infeasible``: no plan fits,
``invalid``: the scenario is inconsistent, e.g. the batch does not divide; ``error``:
anything else), ``reason``, the plan's parallel degrees and ``step_time_s
throughput_tokens_per_s mfu devices_used memory_per_device_bytes solve_time_s``.

Executors. The default runs a ``ProcessPoolExecutor`` over all cores with the *spawn*
start method (fork after libgomp has started threads can hang); ``OMP_NUM_THREADS=1`` is
in the environment every worker starts with (the parent sets it for the duration of the
sweep) and each plan runs with ``threads=1``: scenarios are the parallelism.

Dask: ``scheduler="tcp://host:port"`` sends scenarios to an existing ``distributed``
cluster; ``dask_local=N`` starts a ``LocalCluster(n_workers=N, threads_per_worker=1,
processes=True)`` for the sweep. On several machines::

    # on the scheduler host
    dask scheduler --port 8786
    # on every worker host (same Python environment with nest-planner installed;
    # one single-threaded worker process per core)
    dask worker tcp://SCHEDULER:8786 --nworkers auto --nthreads 1
    # anywhere that reaches the scheduler, with the grid's model/cluster files readable
    # at the same paths on the workers (or use presets)
    nest sweep grid.yaml --out results.jsonl --scheduler tcp://SCHEDULER:8786

The Dask nanny starts workers with ``OMP_NUM_THREADS=1`` (its default
``distributed.nanny.pre-spawn-environ``); plans run with ``threads=1`` regardless. Only
the client writes the output; workers return rows.

What is computed once. Each worker process keeps the models and cluster templates it has
loaded, and one analytic node-cost source per (model, device, job): scenarios that differ
only in the network (bandwidths, oversubscription, device count) reuse the node-kind cost
models and the (model, job) chain description. What is *not* shared: the planner's
per-scenario caches (group prices, placements, the DP), which depend on the network and
are rebuilt for every scenario, and nothing is shared between worker processes.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

from ..cost.compute import KernelModel
from ..cost.scenario import AnalyticSource
from ..errors import InfeasibleError, SpecError, reject_unknown_keys, short_repr
from ..inputs.coerce import coerce_inputs, job_spec
from ..inputs.files import is_path, read_spec_file
from ..inputs.loading import load_cluster, load_model
from ..parallel import SpaceLimits
from ..planner import plan
from ..presets.clusters import CLUSTERS
from ..report.progress import Progress
from ..specs import FRAMEWORKS, MOE_DISPATCHERS, OVERLAP_SWITCHES
from ..units import GiB
from .journal import Journal, journal_path, read_journal, write_table
from .sweep_plot import sweep_plot

_GRID_KEYS = {"models", "clusters", "bandwidth_multipliers", "oversubscription", "memory_GiB",
              "jobs", "limits", "price_per_device_hour", "plot", "name"}
_JOB_KEYS = {"global_batch", "seq_len", "dtype", "framework", "moe_dispatcher", *OVERLAP_SWITCHES}

MAX_SCENARIOS = 1_000_000
"""Most scenarios one grid may expand to (a million plans is hours of CPU; beyond that a
typo in an axis is far likelier than intent)."""

PLAN_FIELDS = ("tp", "pp", "dp", "cp", "ep", "vp", "sp", "zero", "recompute", "micro_batch",
               "num_microbatches", "rank_order")
RESULT_FIELDS = ("step_time_s", "throughput_tokens_per_s", "mfu", "devices_used",
                 "memory_per_device_bytes", "solve_time_s")


# -- the grid --------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """One point of the grid: ``params`` is canonical JSON-able data, ``id`` its hash."""

    id: str
    index: int
    params: dict


def _as_list(value, field: str, *, allow_none=False) -> list:
    if value is None and allow_none:
        return [None]
    values = value if isinstance(value, list) else [value]
    if not values:
        raise SpecError(f"{field} = []: must not be empty")
    return values


def _number(value, field: str, *, integer=False):
    ok = (isinstance(value, int) if integer else isinstance(value, (int, float)))
    if not ok or isinstance(value, bool) or not value > 0 or not math.isfinite(value):
        raise SpecError(f"{field} = {short_repr(value)}: must be a positive {'integer' if integer else 'number'}")
    return value


def _resolve(path: str, base: Path | None) -> str:
    """A relative spec-file path is read relative to the grid file (presets unchanged)."""
    if base is None or not is_path(path) or Path(path).is_absolute() or Path(path).exists():
        return path
    candidate = base / path
    return str(candidate) if candidate.exists() else path


def read_grid(grid) -> dict:
    """A grid mapping from a dict or a YAML/JSON file (SpecError naming the field)."""
    if isinstance(grid, dict):
        return dict(grid)
    data = read_spec_file(str(grid), "grid")
    data["__base__"] = str(Path(grid).resolve().parent)
    return data


def expand_grid(grid, framework: str | None = None) -> list[Scenario]:
    """Validate the grid and list its scenarios (cartesian product, grid order);
    ``framework`` (other than ``any``) is the framework of every job that names none."""
    if framework is not None and framework not in FRAMEWORKS:
        raise SpecError(f"framework = {short_repr(framework)}: must be one of {', '.join(FRAMEWORKS)}")
    data = read_grid(grid)
    base = Path(data.pop("__base__")) if "__base__" in data else None
    reject_unknown_keys(data, _GRID_KEYS, "grid")
    if "models" not in data:
        raise SpecError("grid.models: missing")
    if "clusters" not in data:
        raise SpecError("grid.clusters: missing")
    _check_size(data)

    models = []
    for i, name in enumerate(_as_list(data["models"], "grid.models")):
        if not isinstance(name, str):
            raise SpecError(f"grid.models[{i}] = {short_repr(name)}: must be a preset name or a file path")
        name = _resolve(name, base)
        try:
            load_model(name)
        except SpecError as error:
            raise SpecError(f"grid.models[{i}]: {error}") from None
        models.append(name)

    clusters = []  # (name, devices or None, tier names)
    for i, entry in enumerate(_as_list(data["clusters"], "grid.clusters")):
        where = f"grid.clusters[{i}]"
        if isinstance(entry, str):
            entry = {"cluster": entry}
        if not isinstance(entry, dict) or "cluster" not in entry:
            raise SpecError(f"{where} = {short_repr(entry)}: must be a name or {{cluster: NAME, devices: [...]}}")
        reject_unknown_keys(entry, {"cluster", "devices"}, where)
        name = entry["cluster"]
        if not isinstance(name, str):
            raise SpecError(f"{where}.cluster = {short_repr(name)}: must be a preset name or a file path")
        name = _resolve(name, base)
        devices = _as_list(entry.get("devices"), f"{where}.devices", allow_none=True)
        for j, n in enumerate(devices):
            if n is not None:
                _number(n, f"{where}.devices[{j}]", integer=True)
            try:
                spec = load_cluster(name, n)
            except SpecError as error:
                raise SpecError(f"{where}: {error}") from None
            family = [t.name for t in (CLUSTERS[name].tiers if name in CLUSTERS else spec.tiers)]
            clusters.append((name, spec.num_devices if n is None else n,
                             [t.name for t in spec.tiers], family))

    def per_tier(key):
        table = data.get(key) or {}
        if not isinstance(table, dict):
            raise SpecError(f"grid.{key} = {short_repr(table)}: must map tier names to lists of values")
        axes = []
        for tier, values in table.items():
            if not any(tier in family for *_, family in clusters):
                known = sorted({t for *_, family in clusters for t in family})
                raise SpecError(f"grid.{key}.{tier}: no cluster of the grid has this tier "
                                f"(tiers: {', '.join(known)})")
            values = _as_list(values, f"grid.{key}.{tier}")
            for j, v in enumerate(values):
                _number(v, f"grid.{key}.{tier}[{j}]")
                if key == "oversubscription" and v < 1:
                    raise SpecError(f"grid.{key}.{tier}[{j}] = {short_repr(v)}: must be >= 1")
            axes.append([(str(tier), v) for v in values])
        return axes

    def product(axes):
        return [dict(combo) for combo in itertools.product(*axes)] if axes else [{}]

    bandwidth_axes = per_tier("bandwidth_multipliers")
    oversub_axes = per_tier("oversubscription")
    memories = _as_list(data.get("memory_GiB"), "grid.memory_GiB", allow_none=True)
    jobs_given = _as_list(data.get("jobs"), "grid.jobs", allow_none=True)
    bandwidths = product(bandwidth_axes)
    oversubs = product(oversub_axes)
    for j, v in enumerate(memories):
        if v is not None:
            _number(v, f"grid.memory_GiB[{j}]")
    jobs = []
    for j, job in enumerate(jobs_given):
        if job is None:
            jobs.append(None)
            continue
        if not isinstance(job, dict):
            raise SpecError(f"grid.jobs[{j}] = {short_repr(job)}: must be a mapping {{global_batch, seq_len}}")
        reject_unknown_keys(job, _JOB_KEYS, f"grid.jobs[{j}]")
        for key in ("global_batch", "seq_len"):
            if key in job:
                _number(job[key], f"grid.jobs[{j}].{key}", integer=True)
        if "dtype" in job and job["dtype"] not in ("bf16", "fp16", "fp8", "fp32"):
            raise SpecError(f"grid.jobs[{j}].dtype = {short_repr(job['dtype'])}: must be one of bf16, fp16, fp8, fp32")
        if "framework" in job and job["framework"] not in FRAMEWORKS:
            raise SpecError(f"grid.jobs[{j}].framework = {short_repr(job['framework'])}: must be one of "
                            f"{', '.join(FRAMEWORKS)}")
        if "moe_dispatcher" in job and job["moe_dispatcher"] not in MOE_DISPATCHERS:
            raise SpecError(f"grid.jobs[{j}].moe_dispatcher = {short_repr(job['moe_dispatcher'])}: must be one of "
                            f"{', '.join(MOE_DISPATCHERS)}")
        for key in OVERLAP_SWITCHES:
            if key in job and not isinstance(job[key], bool):
                raise SpecError(f"grid.jobs[{j}].{key} = {short_repr(job[key])}: must be true or false")
        jobs.append({k: job[k] for k in sorted(job)})
    if framework not in (None, "any"):  # unchanged ids (and resumes) for grids without one
        jobs = [{"framework": framework, **(job or {})} for job in jobs]
        jobs = [{k: job[k] for k in sorted(job)} for job in jobs]
    limits = _limits(data.get("limits"))
    price = data.get("price_per_device_hour")
    if price is not None:
        _number(price, "grid.price_per_device_hour")
    plot = data.get("plot")
    if plot is not None and (not isinstance(plot, dict) or set(plot) - {"x", "y"}):
        raise SpecError(f"grid.plot = {short_repr(plot)}: must be a mapping with keys x and/or y")

    scenarios, seen = [], set()
    for model, (cluster, devices, tiers, _), bw, ov, mem, job in itertools.product(
            models, clusters, bandwidths, oversubs, memories, jobs):
        params = {"model": model, "cluster": cluster, "devices": devices,
                  "bandwidth": {t: v for t, v in bw.items() if t in tiers},
                  "oversubscription": {t: v for t, v in ov.items() if t in tiers},
                  "memory_GiB": mem, "job": job}
        if limits:  # unchanged ids (and resumes) for grids without limits
            params["limits"] = limits
        if price is not None:
            params["price_per_device_hour"] = price
        key = scenario_id(params)
        if key in seen:  # e.g. a multiplier of a tier this cluster lacks: one scenario
            continue
        seen.add(key)
        scenarios.append(Scenario(key, len(scenarios), params))
    return scenarios


def _limits(data) -> dict:
    """The grid's ``limits`` as lists per :class:`~nest.parallel.SpaceLimits` field (keys sorted)
    (a scalar is a one-value list), checked by building the limits (SpecError naming the
    key and value)."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SpecError(f"grid.limits = {short_repr(data)}: must be a mapping of SpaceLimits fields to values")
    reject_unknown_keys(data, set(SpaceLimits.__dataclass_fields__), "grid.limits")
    out = {}
    for key, values in sorted(data.items()):
        values = values if isinstance(values, list) else [values]
        kind = {"recompute": str, "rank_order": str, "sp": bool}.get(key, int)
        for value in values:
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise SpecError(f"grid.limits.{key} = {short_repr(value)}: must be a list of {kind.__name__} values")
        out[key] = values
    return out


def _check_size(data: dict) -> None:
    """SpecError if the grid's axes multiply to more than :data:`MAX_SCENARIOS`; counted
    from the raw lists before any model or cluster is loaded or any product is built (a
    few long axes multiply to more scenarios than memory holds). Malformed axes count
    as one value: their own validation reports them."""
    def length(value) -> int:
        return len(value) if isinstance(value, list) else 1

    clusters = data["clusters"] if isinstance(data["clusters"], list) else [data["clusters"]]
    count = length(data["models"]) * length(data.get("memory_GiB")) * length(data.get("jobs"))
    count *= sum(length(c.get("devices")) if isinstance(c, dict) else 1 for c in clusters)
    for key in ("bandwidth_multipliers", "oversubscription"):
        table = data.get(key)
        if isinstance(table, dict):
            count *= math.prod(length(values) for values in table.values())
    if count > MAX_SCENARIOS:
        raise SpecError(f"grid scenarios = {count}: at most {MAX_SCENARIOS} per grid (the product of "
                        "models, clusters x devices, per-tier values, memory_GiB and jobs); split the grid")


def scenario_id(params: dict) -> str:
    """Stable hash of a scenario's parameters (independent of key order and grid order)."""
    text = json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def grid_options(grid) -> dict:
    data = read_grid(grid)
    return {"price_per_device_hour": data.get("price_per_device_hour"), "plot": data.get("plot") or {}}


# -- one scenario (runs in workers) ------------------------------------------------------

_MODELS: dict = {}
_CLUSTERS: dict = {}
_SOURCES: dict = {}


def _init_worker() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def _model(name):
    if name not in _MODELS:
        _MODELS[name] = load_model(name)
    return _MODELS[name]


def _cluster(name, devices):
    key = (name, devices)
    if key not in _CLUSTERS:
        _CLUSTERS[key] = load_cluster(name, devices)
    return _CLUSTERS[key]


def build_inputs(params: dict):
    """(model, cluster, job) specs of a scenario."""
    model = _model(params["model"])
    cluster = _cluster(params["cluster"], params["devices"])
    bw, ov = params.get("bandwidth", {}), params.get("oversubscription", {})
    if cluster.is_graph and (any(v != 1.0 for v in bw.values()) or ov):
        # a graph cluster is priced on its links; its tiers only describe the device order
        raise SpecError(f"cluster = {cluster.name}: bandwidth multipliers and oversubscription apply to "
                        "tier clusters; a graph cluster's links are in its graph file")
    tiers = tuple(replace(t, bandwidth=t.bandwidth * bw.get(t.name, 1.0),
                          oversubscription=ov.get(t.name, t.oversubscription)) for t in cluster.tiers)
    device = cluster.device
    if params.get("memory_GiB") is not None:
        device = replace(device, memory_bytes=float(params["memory_GiB"]) * GiB)
    cluster = replace(cluster, device=device, tiers=tiers)
    job = None
    if params.get("job"):
        spec = params["job"]
        job = job_spec(model, global_batch=spec.get("global_batch"), seq_len=spec.get("seq_len"),
                       dtype=spec.get("dtype", "bf16"), framework=spec.get("framework", "any"),
                       moe_dispatcher=spec.get("moe_dispatcher", "alltoall"),
                       **{key: spec[key] for key in OVERLAP_SWITCHES if key in spec})
    return model, cluster, job


def _source(model, cluster, job):
    """One analytic node-cost source per (model, device, job), kept by the worker."""
    model, cluster, job = coerce_inputs(model, cluster, job)
    key = (model, cluster.device, job)
    if key not in _SOURCES:
        kernels = KernelModel(cluster.device, job.dtype_bytes, cluster.device.peak_flops(job.dtype))
        _SOURCES[key] = AnalyticSource(model, job, kernels)
    return job, _SOURCES[key]


def _flat_params(params: dict) -> dict:
    row = {"model": params["model"], "cluster": params["cluster"], "devices": params["devices"]}
    for tier, v in sorted(params.get("bandwidth", {}).items()):
        row[f"bw_{tier}"] = v
    for tier, v in sorted(params.get("oversubscription", {}).items()):
        row[f"oversub_{tier}"] = v
    row["memory_GiB"] = params.get("memory_GiB")
    job = params.get("job") or {}
    row["global_batch"] = job.get("global_batch")
    row["seq_len"] = job.get("seq_len")
    for key in ("dtype", "framework", "moe_dispatcher"):
        if key in job:
            row[key] = job[key]
    for key in OVERLAP_SWITCHES:
        if key in job:
            row[key] = job[key]
    return row


def run_scenario(scenario: Scenario | tuple, threads: int = 1) -> dict:
    """Plan one scenario and return its flat row (never raises for a scenario's failure)."""
    if not isinstance(scenario, Scenario):
        scenario = Scenario(*scenario)
    params = scenario.params
    row = {"id": scenario.id, **_flat_params(params)}
    started = time.perf_counter()
    try:
        model, cluster, job = build_inputs(params)
        job, source = _source(model, cluster, job)
        row["global_batch"], row["seq_len"] = job.global_batch, job.seq_len
        limits = SpaceLimits(**{k: tuple(v) for k, v in params.get("limits", {}).items()})
        result = plan(model, cluster, job, threads=threads, source=source, limits=limits).to_dict()
    except InfeasibleError as error:
        row.update(status="infeasible", reason=str(error))
    except SpecError as error:
        row.update(status="invalid", reason=str(error))
    except Exception as error:  # noqa: BLE001 - one scenario must not abort the sweep
        row.update(status="error", reason=f"{type(error).__name__}: {error}")
    else:
        row.update(status="ok", reason=None)
        row.update({k: result["parallelism"].get(k) for k in PLAN_FIELDS})
        for k in RESULT_FIELDS:
            v = result.get(k)
            row[k] = v["max"] if isinstance(v, dict) and "max" in v else v
        price = params.get("price_per_device_hour")
        if price is not None and result["throughput_tokens_per_s"]:
            row["cost_per_Mtoken"] = (price * params["devices"] / 3600.0
                                      / result["throughput_tokens_per_s"] * 1e6)
    if row["status"] != "ok":
        row["solve_time_s"] = time.perf_counter() - started
    return row


def _run_batch(batch: list, threads: int = 1) -> list[dict]:
    return [run_scenario(s, threads) for s in batch]


# -- executors ---------------------------------------------------------------------------


def _batches(todo: list[Scenario], batch_size: int) -> list[list[tuple]]:
    """Scenarios in batches of one model (a worker's caches then serve the whole batch)."""
    todo = sorted(todo, key=lambda s: (s.params["model"], s.index))
    items = [(s.id, s.index, s.params) for s in todo]
    return [items[i:i + batch_size] for i in range(0, len(items), batch_size)]


def _iter_local(batches, workers):
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context,
                             initializer=_init_worker) as pool:
        futures = [pool.submit(_run_batch, batch) for batch in batches]
        try:
            for future in as_completed(futures):
                yield future.result()
        finally:
            for future in futures:
                future.cancel()


def _iter_dask(batches, scheduler=None, dask_local=None):
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise SpecError("scheduler: Dask needs the 'distributed' package "
                        "(pip install 'nest-planner[dask]')") from None
    cluster = None
    if scheduler is None:
        cluster = LocalCluster(n_workers=int(dask_local), threads_per_worker=1, processes=True,
                               dashboard_address=None)
        client = Client(cluster)
    else:
        client = Client(scheduler)
    try:
        futures = [client.submit(_run_batch, batch, pure=False) for batch in batches]
        for future in as_completed(futures):
            yield future.result()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


# -- the sweep ---------------------------------------------------------------------------


def run_sweep(grid_path, out_path, *, scheduler: str | None = None, dask_local: int | None = None,
              quiet: bool = False, plot: str | None = None, workers: int | None = None,
              batch_size: int | None = None, table_every_s: float = 10.0, stream=None,
              framework: str | None = None) -> dict:
    """Run (or resume) the sweep of ``grid_path`` into ``out_path``; return a summary.

    ``out_path`` ends in ``.jsonl``, ``.csv`` or ``.parquet``. ``scheduler`` (a Dask
    address) or ``dask_local`` (a local Dask cluster of N workers) choose Dask; otherwise
    a spawn process pool of ``workers`` processes (default: all cores). ``plot`` writes
    the co-design plot. ``framework`` is the target framework of every job that names none
    (the grid's ``jobs[].framework``). SpecError on a bad grid or output path; a scenario's
    own failure is a row, never an exception.
    """
    started = time.perf_counter()
    out = Path(out_path)
    if out.suffix not in (".jsonl", ".csv", ".parquet"):
        raise SpecError(f"out = {str(out_path)!r}: must end in .jsonl, .csv or .parquet")
    if out.suffix == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise SpecError(f"out = {str(out_path)!r}: Parquet needs pyarrow (pip install pyarrow)") from None
    if scheduler is not None and dask_local is not None:
        raise SpecError("dask_local: give either a scheduler address or a local Dask cluster size, not both")
    if dask_local is not None and (not isinstance(dask_local, int) or dask_local < 1):
        raise SpecError(f"dask_local = {short_repr(dask_local)}: must be a positive integer")
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise SpecError(f"workers = {short_repr(workers)}: must be a positive integer")
    scenarios = expand_grid(grid_path, framework)
    options = grid_options(grid_path)
    journal = journal_path(out)
    existing = read_journal(journal)
    wanted = {s.id for s in scenarios}
    todo = [s for s in scenarios if s.id not in existing]
    progress = Progress(len(scenarios), len(scenarios) - len(todo), stream, quiet)

    if scheduler is None and dask_local is None:
        workers = workers or os.cpu_count() or 1
    else:
        workers = workers or dask_local or 8
    if batch_size is None:  # a few batches per worker for balance, at most 4 scenarios each
        batch_size = max(1, min(4, len(todo) // (4 * workers) or 1))
    batches = _batches(todo, batch_size)

    rows = dict(existing)
    saved_env = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"  # inherited by every worker the sweep starts
    writer = Journal(journal)
    last_table = time.perf_counter()
    try:
        if not batches:
            stream_ = iter(())
        elif scheduler is None and dask_local is None:
            stream_ = _iter_local(batches, workers)
        else:
            stream_ = _iter_dask(batches, scheduler, dask_local)
        for batch_rows in stream_:
            for row in batch_rows:
                writer.append(row)
                rows[row["id"]] = row
            progress.update(len(batch_rows))
            if out.suffix != ".jsonl" and time.perf_counter() - last_table > table_every_s:
                write_table(_ordered(rows, scenarios), out)
                last_table = time.perf_counter()
    finally:
        writer.close()
        if saved_env is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = saved_env
        progress.close()
    table = _ordered(rows, scenarios)
    if out.suffix != ".jsonl":
        write_table(table, out)
    if plot:
        sweep_plot(table, plot, x=options["plot"].get("x"), y=options["plot"].get("y"))
    wall = time.perf_counter() - started
    counts = {status: sum(r.get("status") == status for r in table)
              for status in ("ok", "infeasible", "invalid", "error")}
    ran = len(todo)
    return {"total": len(scenarios), "resumed": len(scenarios) - len(todo), "ran": ran,
            **counts, "stale_rows": len(set(existing) - wanted), "wall_s": wall,
            "scenarios_per_s": ran / wall if wall > 0 else 0.0, "out": str(out),
            "journal": str(journal), "plot": plot}


def _ordered(rows: dict[str, dict], scenarios: list[Scenario]) -> list[dict]:
    """The rows of the grid's scenarios, in grid order (stale rows of an older grid left out)."""
    return [rows[s.id] for s in scenarios if s.id in rows]
