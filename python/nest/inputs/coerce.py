"""The one way inputs become specs: the command line, the Python API, sweeps and the
simulator all resolve a model, a cluster and a job here, with the same defaults."""

from __future__ import annotations

import numbers

import numpy as np

from ..errors import SpecError, short_repr
from ..frameworks import framework
from ..specs import FRAMEWORKS, ClusterSpec, JobSpec, ModelSpec, OptimizerSpec
from .loading import load_cluster, load_model


def job_spec(model: ModelSpec, *, global_batch: int | None = None, seq_len: int | None = None,
             optimizer: str | OptimizerSpec | None = None, **options) -> JobSpec:
    """The job of ``model`` with the given settings: ``global_batch`` defaults to the
    model's published batch (SpecError when it has none), ``seq_len`` to the model's,
    ``optimizer`` is a name (``adam``, ``sgd``) or an :class:`~nest.specs.OptimizerSpec`;
    ``options`` are the other :class:`~nest.specs.JobSpec` fields. An overlap switch that
    is None or not given takes the target framework's default
    (:meth:`~nest.frameworks.Framework.job_defaults`: torchtitan's FSDP2 always overlaps
    the gradient reduction), else off."""
    options = {key: value for key, value in options.items() if value is not None}
    if options.get("framework", "any") in FRAMEWORKS:  # else JobSpec names the bad value
        for key, value in framework(options.get("framework", "any")).job_defaults().items():
            options.setdefault(key, value)
    batch = global_batch if global_batch is not None else model.default_global_batch
    if not batch:
        raise SpecError(f"job.global_batch: model {model.name} has no default global batch; pass one "
                        "(--global-batch, or a JobSpec)")
    if isinstance(optimizer, str):
        options["optimizer"] = OptimizerSpec.named(optimizer)
    elif optimizer is not None:
        options["optimizer"] = optimizer
    return JobSpec(global_batch=batch, seq_len=seq_len if seq_len is not None else model.seq_len, **options)


def coerce_inputs(model, cluster, job=None, devices: int | None = None) -> tuple[ModelSpec, ClusterSpec, JobSpec]:
    """Specs from specs, preset names or files (:func:`~nest.inputs.loading.load_model`,
    :func:`~nest.inputs.loading.load_cluster` sized to ``devices``); ``job`` defaults to
    :func:`job_spec` of the model."""
    model, cluster = load_model(model), load_cluster(cluster, devices)
    if job is None:
        job = job_spec(model)
    elif not isinstance(job, JobSpec):
        raise SpecError(f"job = {type(job).__name__}: must be a JobSpec (nest.JobSpec) or None")
    return model, cluster, job


MAX_THREADS = 4096
"""The most OpenMP threads a plan may ask for (the core takes a C int; more threads than
any machine has cores only waste them)."""


def checked_threads(threads) -> int | None:
    """``threads`` as an int (numpy integers accepted), or None; SpecError naming the
    value for anything else (strings, bools, non-positive or more than :data:`MAX_THREADS`)."""
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, numbers.Integral) or not 1 <= threads <= MAX_THREADS:
        raise SpecError(f"threads = {short_repr(threads)}: must be an integer from 1 to {MAX_THREADS} (or None)")
    return int(threads)


def checked_switch(name: str, value) -> bool:
    """A yes/no argument as a bool (numpy bools accepted); SpecError naming ``name`` and
    the value for anything else (``"no"`` is not False)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise SpecError(f"{name} = {short_repr(value)}: must be true or false")


def checked_degree(name: str, value, low: int = 1) -> int:
    """An integer argument of at least ``low`` (numpy integers accepted, bools not)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise SpecError(f"{name} = {short_repr(value)}: must be an integer of at least {low}")
    return int(value)
