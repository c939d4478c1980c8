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
      - {global_batch: 1024, seq_len: 4096}    # also dtype, framework, moe_dispatcher, fp8_recipe,
                                               # activation_offload_handler, moe_load_cv (expert load
                                               # imbalance, >= 0) and the overlap switches
                                               # (overlap_grad_reduce: true, ...)
    limits: {tp: [4, 8], zero: [1]}            # optional: the search limits of every scenario
                                               # (SpaceLimits fields; nest plan's --tp ... flags)
    price_per_device_hour: 2.5                 # optional: adds cost_per_Mtoken to each row
    plot: {x: bw_leaf, y: throughput}          # optional: plot axes (see sweep_plot)

Scenario keys. Every scenario has an ``id``: a hash of its *resolved* inputs (the
loaded model and cluster specs, whatever file or preset they came from, and the
devices, multipliers, oversubscription, memory, job and limits), and a ``slot``: the
same hash with the model and cluster named instead (a preset name, or a file's real
path). A rerun of the same grid with the same ``out`` skips the rows it has (also from
another directory: the id does not depend on how a path is written); a scenario whose
slot has a row of another id had an input edited since that row was written: nest
reports each changed model or cluster on stderr (one line, with the number of
scenarios), reruns those scenarios and drops their old rows from the journal (so the
journal and the table hold each scenario exactly once). Two grid entries with the same
resolved content are one scenario.

Output: ``out`` ending in ``.jsonl`` is the journal itself: a header line
``{"nest_sweep_journal": 1, ...}`` then one JSON object per row (the table's columns
plus ``slot`` and ``inputs``, the digests of the model and cluster), appended, flushed
and fsync'ed as each scenario completes (read it with :func:`read_journal`, or skip its
first line). For ``.csv`` and ``.parquet`` (pyarrow) the journal is ``<out>.jsonl``
beside it (kept: it is what a rerun resumes from) and the table is rewritten whole
through a temporary file and ``os.replace`` every ``table_every_s`` seconds and at the
end. A kill leaves at worst a torn last journal line; the next run cuts it off (and
says so) and reruns that scenario, so every scenario appears exactly once; a damaged
line elsewhere is refused (SpecError naming the line). Rows are flat: scenario
parameters (``model cluster devices bw_<tier> oversub_<tier> memory_GiB global_batch
seq_len``), ``status`` (``ok``, ``infeasible``: no plan fits, ``invalid``: the scenario
is inconsistent, e.g. the batch does not divide; ``error``: anything else), ``reason``,
the plan's parallel degrees and ``step_time_s throughput_tokens_per_s mfu devices_used
memory_per_device_bytes solve_time_s``.

Safety (:mod:`nest.studies.journal`). A sweep holds an exclusive lock on
``<journal>.lock`` for its whole run: a second sweep on the same output refuses at
once. nest writes only files it recognises as its own (a journal by its header line, a
CSV table by its header row, a Parquet table by its metadata): any other existing file
at ``out`` or at the journal's path is refused (SpecError, nothing touched). Ctrl-C
raises :class:`SweepInterrupted` (a ``KeyboardInterrupt`` saying how many scenarios are
saved and the command that resumes) after stopping the workers.

Executors (:mod:`nest.studies.sweep_pool`). The default runs a ``ProcessPoolExecutor``
with the *spawn* start method (fork after libgomp has started threads can hang) over
the CPUs the process may use (``workers`` above that count is capped, with a note);
its workers die with the sweep (also on ``kill -9``). ``OMP_NUM_THREADS=1`` is in the
environment every worker starts with (the parent sets it for the duration of the
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

import itertools
import math
import os
import shlex
import sys
import time
from dataclasses import dataclass, field, replace
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
from ..specs import DTYPE_BYTES, FP8_RECIPES, FRAMEWORKS, MOE_DISPATCHERS, OFFLOAD_HANDLERS, OVERLAP_SWITCHES, JobSpec
from ..units import GiB
from .journal import (
    Journal,
    SweepLock,
    check_table,
    create_journal,
    journal_path,
    read_journal,
    remove_leftovers,
    rewrite_journal,
    saved_ids,
    write_table,
)
from .sweep_keys import identity, scenario_id, spec_digest, superseded_rows
from .sweep_plot import sweep_plot
from .sweep_pool import WorkerDied, check_scheduler, cpu_count, iter_dask, iter_local

_GRID_KEYS = {"models", "clusters", "bandwidth_multipliers", "oversubscription", "memory_GiB",
              "jobs", "limits", "price_per_device_hour", "plot", "name"}
_JOB_CHOICES = {"dtype": tuple(DTYPE_BYTES), "framework": FRAMEWORKS, "moe_dispatcher": MOE_DISPATCHERS,
                "fp8_recipe": FP8_RECIPES, "activation_offload_handler": OFFLOAD_HANDLERS}
"""The grid's job keys that name one of a few values (``JobSpec`` fields of the same names)."""
_JOB_REALS = ("moe_load_cv",)
"""The grid's job keys that take a real number (``JobSpec`` fields, validated by it)."""
_JOB_KEYS = {"global_batch", "seq_len", *_JOB_CHOICES, *_JOB_REALS, *OVERLAP_SWITCHES}

MAX_SCENARIOS = 1_000_000
"""Most scenarios one grid may expand to (a million plans is hours of CPU; beyond that a
typo in an axis is far likelier than intent)."""

PLAN_FIELDS = ("tp", "pp", "dp", "cp", "ep", "vp", "sp", "zero", "recompute", "micro_batch",
               "num_microbatches", "rank_order", "expert_tp")
RESULT_FIELDS = ("step_time_s", "throughput_tokens_per_s", "mfu", "devices_used",
                 "memory_per_device_bytes", "solve_time_s")


# -- the grid --------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """One point of the grid: ``params`` is canonical JSON-able data; ``id`` the hash of
    its resolved content, ``slot`` of its place in the grid (model and cluster named),
    ``inputs`` the digests of its model and cluster specs."""

    id: str
    index: int
    params: dict
    slot: str = ""
    inputs: dict = field(default_factory=dict)


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


def _job_real(value, field: str, key: str):
    """``value`` as ``JobSpec``'s ``key`` accepts it (its own rule, named as ``field``)."""
    try:
        JobSpec(global_batch=1, seq_len=1, **{key: value})
    except SpecError as error:
        raise SpecError(str(error).replace(f"job.{key}", field, 1)) from None


def _resolve(path: str, base: Path | None) -> str:
    """A relative spec-file path is read relative to the grid file (presets unchanged)."""
    # os.path.exists: False (not an OSError) for names too long for the file system
    if base is None or not is_path(path) or Path(path).is_absolute() or os.path.exists(path):
        return path
    candidate = base / path
    return str(candidate) if os.path.exists(candidate) else path


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
            spec = load_model(name)
        except SpecError as error:
            raise SpecError(f"grid.models[{i}]: {error}") from None
        models.append((name, spec_digest(spec)))

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
            clusters.append(((name, spec_digest(spec)), spec.num_devices if n is None else n,
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
        for key, choices in _JOB_CHOICES.items():
            if key in job and job[key] not in choices:
                raise SpecError(f"grid.jobs[{j}].{key} = {short_repr(job[key])}: must be one of {', '.join(choices)}")
        for key in OVERLAP_SWITCHES:
            if key in job and not isinstance(job[key], bool):
                raise SpecError(f"grid.jobs[{j}].{key} = {short_repr(job[key])}: must be true or false")
        for key in _JOB_REALS:
            if key in job:
                _job_real(job[key], f"grid.jobs[{j}].{key}", key)
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
    for (model, model_digest), ((cluster, cluster_digest), devices, tiers, _), bw, ov, mem, job in \
            itertools.product(models, clusters, bandwidths, oversubs, memories, jobs):
        params = {"model": model, "cluster": cluster, "devices": devices,
                  "bandwidth": {t: v for t, v in bw.items() if t in tiers},
                  "oversubscription": {t: v for t, v in ov.items() if t in tiers},
                  "memory_GiB": mem, "job": job}
        if limits:  # unchanged ids (and resumes) for grids without limits
            params["limits"] = limits
        if price is not None:
            params["price_per_device_hour"] = price
        key = scenario_id({**params, "model": model_digest, "cluster": cluster_digest})
        if key in seen:  # e.g. a multiplier of a tier this cluster lacks: one scenario
            continue
        seen.add(key)
        slot = scenario_id({**params, "model": identity(model), "cluster": identity(cluster)})
        scenarios.append(Scenario(key, len(scenarios), params, slot,
                                  {"model": model_digest, "cluster": cluster_digest}))
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
        kind = {"recompute": str, "rank_order": str, "sp": bool, "offload": (int, float)}.get(key, int)
        for value in values:
            if not isinstance(value, kind) or (kind is not bool and kind is not str and isinstance(value, bool)):
                name = "number" if kind == (int, float) else kind.__name__
                raise SpecError(f"grid.limits.{key} = {short_repr(value)}: must be a list of {name} values")
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


def grid_options(grid) -> dict:
    data = read_grid(grid)
    return {"price_per_device_hour": data.get("price_per_device_hour"), "plot": data.get("plot") or {}}


# -- one scenario (runs in workers) ------------------------------------------------------

_MODELS: dict = {}
_CLUSTERS: dict = {}
_SOURCES: dict = {}


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
                       **{key: spec[key] for key in (*_JOB_CHOICES, *_JOB_REALS, *OVERLAP_SWITCHES) if key in spec})
    return model, cluster, job


def _source(model, cluster, job):
    """One analytic node-cost source per (model, device, job), kept by the worker."""
    model, cluster, job = coerce_inputs(model, cluster, job)
    key = (model, cluster.device, job)
    if key not in _SOURCES:
        kernels = KernelModel.for_job(cluster.device, job)
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
    for key in (*_JOB_CHOICES, *_JOB_REALS):
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
        result = plan(model, cluster, job, threads=threads, source=source, limits=limits,
                      explain_idle=False).to_dict()  # rows do not carry the reason
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


# -- the sweep ---------------------------------------------------------------------------


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`run_sweep`, raised once the workers are stopped: the rows
    saved so far stay in the journal, and ``str()`` is the one-line report (how many
    scenarios are saved, None if it stopped before reading the journal, and the command
    that resumes)."""

    def __init__(self, saved: int | None, total: int, journal, command: str | None):
        self.saved, self.total, self.journal, self.command = saved, total, str(journal), command
        resume = f"resume with: {command}" if command else "rerun the same sweep to resume"
        done = (f"{saved} of {total} scenarios saved in {journal}" if saved is not None
                else f"before it resumed from or wrote {journal}")
        super().__init__(f"sweep interrupted: {done}; {resume}")


def _resume_command(grid, out, *, framework, workers, scheduler, dask_local, quiet, plot) -> str | None:
    """The ``nest sweep`` command line of these arguments (None for a grid given as a dict)."""
    if not isinstance(grid, (str, os.PathLike)):
        return None
    words = ["nest", "sweep", os.fspath(grid), "--out", os.fspath(out)]
    for flag, value in (("--framework", framework), ("--workers", workers), ("--scheduler", scheduler),
                        ("--dask-local", dask_local), ("--plot", plot)):
        if value is not None:
            words += [flag, str(value)]
    return shlex.join(words + (["--quiet"] if quiet else []))


_TABLE_COLUMNS = frozenset({"id", "model", "cluster", "devices", "memory_GiB", "global_batch", "seq_len",
                            *_JOB_CHOICES, *OVERLAP_SWITCHES, "status", "reason",
                            *PLAN_FIELDS, *RESULT_FIELDS, "cost_per_Mtoken"})


def _table_column(name: str) -> bool:
    """Whether nest's sweep tables have (or may have) a column of this name."""
    return name in _TABLE_COLUMNS or name.startswith(("bw_", "oversub_"))


def run_sweep(grid_path, out_path, *, scheduler: str | None = None, dask_local: int | None = None,
              quiet: bool = False, plot: str | None = None, workers: int | None = None,
              batch_size: int | None = None, table_every_s: float = 10.0, stream=None,
              framework: str | None = None) -> dict:
    """Run (or resume) the sweep of ``grid_path`` into ``out_path``; return a summary.

    ``out_path`` ends in ``.jsonl``, ``.csv`` or ``.parquet``. ``scheduler`` (a Dask
    address) or ``dask_local`` (a local Dask cluster of N workers) choose Dask; otherwise
    a spawn process pool of ``workers`` processes (default, and at most: the CPUs this
    process may use). ``plot`` writes the co-design plot. ``framework`` is the target
    framework of every job that names none (the grid's ``jobs[].framework``). Progress
    and notes (changed inputs, a torn journal line, capped workers) go to ``stream``
    (stderr). SpecError on a bad grid or output path, an output nest did not write, one
    another sweep is writing, a damaged journal or a failed write; SweepInterrupted on
    Ctrl-C; a scenario's own failure is a row, never an exception.
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
    if scheduler is not None:
        scheduler = check_scheduler(scheduler)
    if dask_local is not None and (not isinstance(dask_local, int) or dask_local < 1):
        raise SpecError(f"dask_local = {short_repr(dask_local)}: must be a positive integer")
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 1):
        raise SpecError(f"workers = {short_repr(workers)}: must be a positive integer")
    command = _resume_command(grid_path, out_path, framework=framework, workers=workers, scheduler=scheduler,
                              dask_local=dask_local, quiet=quiet, plot=plot)
    notes = sys.stderr if stream is None else stream

    def note(message: str) -> None:
        notes.write(f"nest: note: {message}\n")
        notes.flush()

    journal = journal_path(out)
    scenarios, rows, state = [], {}, {"read": False}  # read: rows holds the journal's
    try:
        scenarios = expand_grid(grid_path, framework)
        options = grid_options(grid_path)
        if scheduler is None and dask_local is None:
            cpus = cpu_count()
            if workers is not None and workers > cpus:
                note(f"workers = {workers}: more than the {cpus} CPUs this process may use; using {cpus}")
            workers = min(workers or cpus, cpus)
        else:
            workers = workers or dask_local or 8
        try:
            with SweepLock(journal, out_path):
                stats = _sweep_locked(scenarios, out, journal, rows, state, note, scheduler=scheduler,
                                      dask_local=dask_local, workers=workers, batch_size=batch_size,
                                      table_every_s=table_every_s, stream=stream, quiet=quiet)
        except WorkerDied as died:
            saved = sum(s.id in rows for s in scenarios)
            raise SpecError(f"workers = {workers}: {died}; {saved} of {len(scenarios)} scenarios saved (rerun "
                            "the same sweep to resume, with fewer --workers if memory ran out)") from None
        except OSError as error:  # a full disk, a read-only directory, ...
            saved = sum(s.id in rows for s in scenarios)
            raise SpecError(f"out = {str(out_path)!r}: cannot write {error.filename or journal}: "
                            f"{error.strerror or error}; {saved} of {len(scenarios)} scenarios saved "
                            "(rerun the same sweep to resume)") from None
    except KeyboardInterrupt:
        saved = len({s.id for s in scenarios} & saved_ids(journal)) if state["read"] else None
        raise SweepInterrupted(saved, len(scenarios), journal, command) from None
    table = _ordered(rows, scenarios)
    if plot:
        sweep_plot(table, plot, x=options["plot"].get("x"), y=options["plot"].get("y"))
    wall = time.perf_counter() - started
    counts = {status: sum(r.get("status") == status for r in table)
              for status in ("ok", "infeasible", "invalid", "error")}
    ran = stats["ran"]
    return {"total": len(scenarios), "resumed": len(scenarios) - ran, "ran": ran, "changed": stats["changed"],
            **counts, "stale_rows": len(set(rows) - {s.id for s in scenarios}), "workers": workers,
            "wall_s": wall, "scenarios_per_s": ran / wall if wall > 0 else 0.0, "out": str(out),
            "journal": str(journal), "plot": plot}


def _sweep_locked(scenarios, out: Path, journal: Path, rows: dict, state: dict, note, *, scheduler, dask_local,
                  workers, batch_size, table_every_s, stream, quiet) -> dict:
    """The part of :func:`run_sweep` that holds the lock: check the outputs are nest's,
    resume from the journal, run the rest; ``rows`` fills with the journal's rows."""
    what = "out" if journal == out else "journal"
    had_table = out != journal and check_table(out, _table_column)
    fresh = not os.path.lexists(journal)
    existing = read_journal(journal, note, what, repair=True)  # may cut a torn last line: after every check
    if had_table and fresh:
        note(f"{out}: no journal {journal.name} beside it: every scenario runs and the table is rewritten")
    remove_leftovers(out, journal)
    superseded, rerun = superseded_rows(existing, scenarios, journal, note)
    if fresh:
        create_journal(journal)
    elif superseded:
        for key in superseded:
            existing.pop(key)
        rewrite_journal(journal, list(existing.values()))
    rows.update(existing)
    state["read"] = True
    todo = [s for s in scenarios if s.id not in existing]
    current = {s.id: s for s in todo}
    progress = Progress(len(scenarios), len(scenarios) - len(todo), stream, quiet)
    if batch_size is None:  # a few batches per worker for balance, at most 4 scenarios each
        batch_size = max(1, min(4, len(todo) // (4 * workers) or 1))
    batches = _batches(todo, batch_size)

    saved_env = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"  # inherited by every worker the sweep starts
    writer = Journal(journal)
    last_table = time.perf_counter()
    results = iter(())
    try:
        if not batches:
            pass
        elif scheduler is None and dask_local is None:
            results = iter_local(_run_batch, batches, workers)
        else:
            results = iter_dask(_run_batch, batches, scheduler, dask_local)
        for batch_rows in results:
            for row in batch_rows:
                scenario = current[row["id"]]
                row["slot"], row["inputs"] = scenario.slot, scenario.inputs
                writer.append(row)
                rows[row["id"]] = row
            progress.update(len(batch_rows))
            if out.suffix != ".jsonl" and time.perf_counter() - last_table > table_every_s:
                write_table(_ordered(rows, scenarios), out)
                last_table = time.perf_counter()
    finally:
        close = getattr(results, "close", None)
        if close is not None:  # stops the workers now if the loop ended early
            close()
        writer.close()
        if saved_env is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = saved_env
        progress.close()
    if out.suffix != ".jsonl":
        write_table(_ordered(rows, scenarios), out)
    return {"ran": len(todo), "changed": len(rerun)}


def _ordered(rows: dict[str, dict], scenarios: list[Scenario]) -> list[dict]:
    """The rows of the grid's scenarios, in grid order (stale rows of an older grid left out)."""
    return [rows[s.id] for s in scenarios if s.id in rows]
