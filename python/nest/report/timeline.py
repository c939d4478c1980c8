"""Pictures: the simulated pipeline schedule as a Gantt chart (``nest evaluate --timeline``)
and the matplotlib set-up every plot of nest shares (matplotlib is an optional extra)."""

from __future__ import annotations

import numpy as np

from ..schedule.simulate import SimResult
from ..schedule.tasks import BACKWARD, COMPUTE_KINDS, FORWARD, RECOMPUTE, SEND_BACKWARD, SEND_FORWARD

COLORS = {FORWARD: "#4c72b0", RECOMPUTE: "#8172b2", BACKWARD: "#55a868",
          "comm": "#dd8452", SEND_FORWARD: "#c44e52", SEND_BACKWARD: "#c44e52",
          "all-reduce": "#937860", "reduce-scatter": "#937860", "all-gather": "#937860",
          "sync": "#937860", "optimizer": "#8c8c8c"}


def pyplot():
    """matplotlib.pyplot with a non-interactive backend; ImportError with the install hint
    without matplotlib (``nest-planner[plot]``)."""
    try:
        import matplotlib
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError("plotting needs matplotlib: pip install 'nest-planner[plot]'") from error
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def timeline_png(result: SimResult, path, *, title: str | None = None, max_labels: int = 400) -> None:
    """Draw ``result`` as a Gantt chart into ``path`` (PNG): one row per pipeline rank.

    Forward, recompute and backward compute in blue, purple and green; the exposed
    collectives inside them (tensor/context/expert parallel, ZeRO) in orange at the end of
    the task; point-to-point sends in red; the end-of-step gradient sync in brown and
    the optimizer step in grey. Micro-batch numbers are written on compute tasks when
    there are at most ``max_labels`` of them. Needs matplotlib (``nest-planner[plot]``).
    """
    plt = pyplot()
    from matplotlib.patches import Patch

    pp = result.pp
    scale, unit = (1e3, "ms") if result.step_time_s < 10 else (1.0, "s")
    fig, ax = plt.subplots(figsize=(12, 1.0 + 0.5 * pp))
    bars: dict[str, list[tuple[float, float]]] = {}
    rows: dict[str, list[int]] = {}

    def add(color_key, device, start, width):
        if width <= 0:
            return
        bars.setdefault(color_key, []).append((start * scale, width * scale))
        rows.setdefault(color_key, []).append(device)

    labelled = sum(1 for e in result.events if e.kind in COMPUTE_KINDS) <= max_labels
    for row in result.timelines:
        for e in row:
            if e.kind in COMPUTE_KINDS:
                add(e.kind, e.device, e.start_s, e.duration_s - e.comm_s)
                add("comm", e.device, e.end_s - e.comm_s, e.comm_s)
                if labelled and e.kind != RECOMPUTE:
                    ax.text((e.start_s + e.duration_s / 2) * scale, e.device, str(e.micro_batch),
                            ha="center", va="center", fontsize=6, color="white")
            else:
                add(e.kind, e.device, e.start_s, e.duration_s)
    for key, spans in bars.items():
        devices = np.array(rows[key])
        for d in np.unique(devices):
            ax.broken_barh([s for s, dev in zip(spans, devices) if dev == d], (d - 0.4, 0.8),
                           facecolors=COLORS.get(key, "#8c8c8c"), edgecolor="none")
    labels = result.labels or tuple(f"stage {d}" for d in range(pp))
    ax.set_yticks(range(pp))
    ax.set_yticklabels(labels)
    ax.set_ylim(pp - 0.5, -0.5)
    ax.set_xlim(0, result.step_time_s * scale * 1.01)
    ax.set_xlabel(f"time ({unit})")
    legend = [("forward", FORWARD), ("recompute", RECOMPUTE), ("backward", BACKWARD),
              ("collectives (TP/CP/EP/ZeRO)", "comm"), ("pipeline send", SEND_FORWARD),
              ("gradient sync", "all-reduce"), ("optimizer", "optimizer")]
    present = set(bars)
    present |= {"all-reduce"} if present & {"reduce-scatter", "all-gather", "sync"} else set()
    ax.legend(handles=[Patch(color=COLORS[k], label=name) for name, k in legend if k in present],
              loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.3 / max(pp, 1)), ncol=4,
              fontsize=8, frameon=False)
    closed = f", nest {result.predicted_s * scale:.4g} {unit}" if result.predicted_s else ""
    ax.set_title(title or f"{result.schedule}: p={pp} v={result.vp} m={result.micro_batches}, "
                          f"simulated step {result.step_time_s * scale:.4g} {unit}{closed}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
