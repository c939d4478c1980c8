"""The co-design plot of a sweep: a metric against the swept variable, one line per model."""

from __future__ import annotations

import json

from ..report.timeline import pyplot
from .journal import columns

_PARAM_COLUMNS = ("devices", "memory_GiB", "global_batch", "seq_len", "cluster")


def _swept(rows: list[dict]) -> list[str]:
    names = columns(rows)
    candidates = [c for c in names if c.startswith(("bw_", "oversub_"))] + list(_PARAM_COLUMNS)
    models = {r.get("model") for r in rows}  # varying within a model (a default job differs by model)
    return [c for c in candidates
            if any(len({json.dumps(r.get(c)) for r in rows if r.get("model") == m}) > 1 for m in models)]


def sweep_plot(rows: list[dict], path: str, x: str | None = None, y: str | None = None) -> str:
    """Plot ``y`` against the swept variable ``x``, one line per model.

    ``y``: ``throughput`` (tokens/s), ``mfu`` or ``cost`` (per million tokens; the default
    when the grid has a price). ``x``: a row column (default: the first swept one of
    ``bw_<tier>``, ``oversub_<tier>``, ``devices``, ``memory_GiB``, ...). When other
    parameters vary too, each point is the best value over them. Infeasible points are
    left out.
    """
    plt = pyplot()
    ok = [r for r in rows if r.get("status") == "ok"]
    if y is None:
        y = "cost" if any("cost_per_Mtoken" in r for r in ok) else "throughput"
    metric = {"throughput": "throughput_tokens_per_s", "mfu": "mfu", "cost": "cost_per_Mtoken"}.get(y, y)
    swept = _swept(rows)
    if x is None:
        x = swept[0] if swept else "devices"
    best = min if metric == "cost_per_Mtoken" else max
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for model in dict.fromkeys(r["model"] for r in rows):
        points: dict = {}
        for r in ok:
            if r["model"] == model and r.get(x) is not None and r.get(metric) is not None:
                points[r[x]] = best(points.get(r[x], r[metric]), r[metric])
        if points:
            xs = sorted(points)
            ax.plot(xs, [points[v] for v in xs], marker="o", label=model)
    labels = {"throughput_tokens_per_s": "throughput (tokens/s)", "mfu": "MFU",
              "cost_per_Mtoken": "cost per million tokens"}
    ax.set_xlabel(x)
    others = [c for c in swept if c != x]
    ax.set_ylabel(labels.get(metric, metric))
    if others:
        ax.set_title("best over " + ", ".join(others), fontsize=9)
    if x.startswith("bw_") or x == "devices":
        ax.set_xscale("log", base=2)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
