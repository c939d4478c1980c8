"""``nest compare``: strategies side by side over device counts (the NEST paper's Figure 5).

For each device count the cluster is sized (a preset family, a
:class:`~nest.presets.clusters.ClusterTemplate`, a callable ``devices -> ClusterSpec`` or a
fixed cluster file) and every strategy of :mod:`nest.studies.baselines` runs on it. Each row
reports tokens/s, step time, peak memory per device and two ratios:

* ``normalized``: tokens/s divided by the tokens/s of the first feasible ``manual``
  result (smallest device count at which the manual configuration fits) -- the paper's
  normalised-throughput view, which also shows scaling;
* ``vs_manual``: tokens/s divided by ``manual``'s at the same device count.

Both are None when there is no feasible manual result to divide by. Infeasible
strategies keep their reason.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Sequence

from ..errors import SpecError
from ..inputs.loading import load_cluster, load_model
from ..parallel import SpaceLimits
from ..presets.clusters import ClusterTemplate
from ..report.timeline import pyplot
from ..specs import ClusterSpec, JobSpec
from ..units import GiB
from .baselines import STRATEGIES, StrategyResult, run_strategy


@dataclass(frozen=True)
class CompareRow:
    """One strategy at one device count."""

    model: str
    cluster: str
    devices: int
    strategy: str
    feasible: bool
    reason: str | None
    throughput_tokens_per_s: float | None
    step_time_s: float | None
    memory_max_bytes: float | None
    memory_capacity_bytes: float | None
    mfu: float | None
    devices_used: int | None
    parallelism: dict | None
    layers_per_stage: list | None
    wall_s: float
    normalized: float | None = None
    vs_manual: float | None = None
    info: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_result(model: str, cluster: str, devices: int, result: StrategyResult) -> "CompareRow":
        p = result.plan
        if p is None:
            return CompareRow(model, cluster, devices, result.strategy, False, result.reason, None,
                              None, None, None, None, None, None, None, result.wall_s,
                              info=dict(result.info))
        return CompareRow(model, cluster, devices, result.strategy, True, None,
                          p.throughput_tokens_per_s, p.step_time_s, p.memory_max_bytes,
                          p.memory_capacity_bytes, p.mfu, p.devices_used, dict(p.parallelism),
                          [len(s.layers) for s in p.stages], result.wall_s, info=dict(result.info))


def sized_cluster(cluster, devices: int) -> ClusterSpec:
    """``cluster`` (preset name, template, callable, file path or spec) with ``devices``."""
    if isinstance(cluster, ClusterTemplate):
        return cluster.sized(devices)
    if callable(cluster) and not isinstance(cluster, ClusterSpec):
        spec = cluster(devices)
        if spec.num_devices != devices:
            raise SpecError(f"devices = {devices}: the cluster callable returned "
                            f"{spec.num_devices} devices")
        return spec
    return load_cluster(cluster, devices=devices)


def _cluster_name(cluster) -> str:
    if isinstance(cluster, (ClusterTemplate, ClusterSpec)):
        return cluster.name
    if isinstance(cluster, str):
        return cluster
    return getattr(cluster, "__name__", "cluster")


def compare(model, cluster, device_counts: Sequence[int], job: JobSpec | None = None,
            strategies: Sequence[str] = STRATEGIES, *, config: dict | None = None,
            seed: int = 0, budget: int | None = None, engine: str = "cpp",
            threads: int | None = None, limits: SpaceLimits = SpaceLimits(), source=None,
            progress: Callable[[CompareRow], None] | None = None) -> list[CompareRow]:
    """Run ``strategies`` on ``model`` at every device count; rows in device-count order,
    strategies in the given order within each count.

    ``cluster`` is a preset family name (``"dgx-h100"``), a
    :class:`~nest.presets.clusters.ClusterTemplate`, a callable ``devices -> ClusterSpec``
    or a cluster file / spec (then only its own size is valid). ``config`` is the
    ``given`` strategy's configuration (``nest.evaluate`` keyword arguments; ``dp``
    defaults to the largest that fits). ``seed`` and ``budget`` are MCMC's. ``progress``
    is called with every row as it is produced.
    """
    model = load_model(model)
    strategies = list(strategies)
    if "given" in strategies and not config:
        raise SpecError("strategy 'given' needs a configuration (config=...)")
    if not device_counts:
        raise SpecError("device_counts: needs at least one device count")
    options = {"config": config, "seed": seed, "engine": engine, "threads": threads,
               "limits": limits, "source": source}
    if budget is not None:
        options["budget"] = budget
    name = _cluster_name(cluster)
    rows: list[CompareRow] = []
    for devices in device_counts:
        sized = sized_cluster(cluster, int(devices))
        for strategy in strategies:
            result = run_strategy(strategy, model, sized, job, **options)
            row = CompareRow.from_result(model.name, name, int(devices), result)
            rows.append(row)
            if progress is not None:
                progress(row)
    return normalize(rows)


def normalize(rows: list[CompareRow]) -> list[CompareRow]:
    """Fill ``normalized`` and ``vs_manual`` (per model and cluster; see the module doc)."""

    out = []
    groups: dict[tuple, list[CompareRow]] = {}
    for row in rows:
        groups.setdefault((row.model, row.cluster), []).append(row)
    reference = {}
    for key, group in groups.items():
        manual = sorted((r for r in group if r.strategy == "manual" and r.feasible),
                        key=lambda r: r.devices)
        reference[key] = (manual[0].throughput_tokens_per_s if manual else None,
                          {r.devices: r.throughput_tokens_per_s for r in manual})
    for row in rows:
        first, per_count = reference[(row.model, row.cluster)]
        if not row.feasible:
            out.append(replace(row, normalized=None, vs_manual=None))
            continue
        same = per_count.get(row.devices)
        out.append(replace(row,
                           normalized=row.throughput_tokens_per_s / first if first else None,
                           vs_manual=row.throughput_tokens_per_s / same if same else None))
    return out


def reference_row(rows: list[CompareRow]) -> CompareRow | None:
    """The row the ``normalized`` column divides by (first feasible manual), if any."""
    manual = sorted((r for r in rows if r.strategy == "manual" and r.feasible), key=lambda r: r.devices)
    return manual[0] if manual else None


def _config_text(row: CompareRow) -> str:
    p = row.parallelism
    if not p:
        return ""
    text = f"tp{p['tp']} pp{p['pp']} dp{p['dp']}"
    if p.get("cp", 1) > 1:
        text += f" cp{p['cp']}"
    if p.get("ep", 1) > 1:
        text += f" ep{p['ep']}"
    if p.get("expert_tp", 1) > 1:
        text += f" etp{p['expert_tp']}"
    if p.get("vp", 1) > 1:
        text += f" vp{p['vp']}"
    text += f" z{p['zero']} mb{p['micro_batch']}"
    if p["recompute"] != "none":
        text += f" rc-{p['recompute']}"
    return text


def _fmt(value, spec: str, missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def render_compare(rows: list[CompareRow]) -> str:
    """A text table per model and cluster: one line per device count and strategy."""
    lines: list[str] = []
    groups: dict[tuple, list[CompareRow]] = {}
    for row in rows:
        groups.setdefault((row.model, row.cluster), []).append(row)
    for (model, cluster), group in groups.items():
        ref = reference_row(group)
        lines.append(f"{model} on {cluster}"
                     + (f" (normalized to manual at {ref.devices} devices: "
                        f"{ref.throughput_tokens_per_s:,.0f} tokens/s)" if ref else
                        " (no feasible manual result: no normalization)"))
        header = (f"{'devices':>7}  {'strategy':<15} {'tokens/s':>12} {'step (s)':>10} "
                  f"{'mem/dev (GiB)':>13} {'normalized':>10} {'vs manual':>9}  configuration")
        lines.append(header)
        lines.append("-" * len(header))
        for row in group:
            if row.feasible:
                memory = (f"{row.memory_max_bytes / GiB:.1f}/{row.memory_capacity_bytes / GiB:.0f}")
                lines.append(
                    f"{row.devices:>7}  {row.strategy:<15} {row.throughput_tokens_per_s:>12,.0f} "
                    f"{row.step_time_s:>10.4g} {memory:>13} {_fmt(row.normalized, '.2f'):>10} "
                    f"{_fmt(row.vs_manual, '.2f'):>9}  {_config_text(row)}")
            else:
                lines.append(f"{row.devices:>7}  {row.strategy:<15} {'infeasible':>12}  {row.reason}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def compare_document(rows: list[CompareRow]) -> dict:
    """The JSON document of a comparison: rows, and the normalization reference per group."""
    groups: dict[tuple, list[CompareRow]] = {}
    for row in rows:
        groups.setdefault((row.model, row.cluster), []).append(row)
    references = []
    for (model, cluster), group in groups.items():
        ref = reference_row(group)
        references.append({"model": model, "cluster": cluster,
                           "devices": ref.devices if ref else None,
                           "throughput_tokens_per_s": ref.throughput_tokens_per_s if ref else None})
    return {"normalized_to": references, "rows": [row.to_dict() for row in rows]}


def compare_json(rows: list[CompareRow], indent: int | None = 2) -> str:
    """:func:`compare_document` as a JSON string."""
    return json.dumps(compare_document(rows), indent=indent)


STRATEGY_COLORS = {"manual": "#8c8c8c", "topology-blind": "#dd8452", "mcmc": "#8172b2",
                   "nest": "#4c72b0", "given": "#55a868"}


def compare_plot(rows: list[CompareRow], path, *, title: str | None = None, columns: int = 2) -> None:
    """Grouped bars of normalized throughput per device count (one panel per model and
    cluster), infeasible strategies marked with an x. Needs matplotlib (``nest-planner[plot]``)."""

    plt = pyplot()
    groups: dict[tuple, list[CompareRow]] = {}
    for row in rows:
        groups.setdefault((row.model, row.cluster), []).append(row)
    panels = len(groups)
    cols = min(columns, panels)
    nrows = -(-panels // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(6.5 * cols, 3.4 * nrows), squeeze=False)
    for ax, ((model, cluster), group) in zip(axes.ravel(), groups.items()):
        counts = sorted({r.devices for r in group})
        names = list(dict.fromkeys(r.strategy for r in group))
        width = 0.8 / max(len(names), 1)
        for i, name in enumerate(names):
            xs, ys, bad = [], [], []
            for j, count in enumerate(counts):
                row = next((r for r in group if r.devices == count and r.strategy == name), None)
                x = j - 0.4 + width * (i + 0.5)
                if row is None:
                    continue
                if row.feasible and row.normalized is not None:
                    xs.append(x)
                    ys.append(row.normalized)
                elif not row.feasible:
                    bad.append(x)
            ax.bar(xs, ys, width, label=name, color=STRATEGY_COLORS.get(name, None))
            if bad:
                ax.scatter(bad, [0] * len(bad), marker="x", color=STRATEGY_COLORS.get(name, "k"), zorder=3)
        ax.set_xticks(range(len(counts)))
        ax.set_xticklabels([str(c) for c in counts])
        ax.set_xlabel("devices")
        ax.set_ylabel("throughput / manual")
        ax.set_title(f"{model} on {cluster}", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    for ax in axes.ravel()[panels:]:
        ax.set_visible(False)
    handles, labels = axes.ravel()[0].get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / (3.4 * nrows)))
    fig.legend(handles, labels, loc="upper center", ncol=len(labels), frameon=False)
    if title:
        fig.suptitle(title, y=1.02)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
