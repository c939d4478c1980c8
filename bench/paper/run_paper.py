"""The NEST paper's comparison (its Figure 5 view) with nest's strategies.

Five models (bert-large, llama2-7b, llama3-70b, mixtral-8x7b, gpt3-175b) on the paper's
two networks (tpuv4-fattree, h100-spineleaf) at 64 to 1024 devices, every strategy of
:mod:`nest.studies.baselines` (manual, topology-blind, mcmc, nest), each at the model's published
global batch and sequence length. Writes ``results.md`` (tables), ``results.json`` (every
row) and ``compare.png`` (normalized throughput, needs matplotlib) into ``--out``, and
prints the total wall time.

    python bench/paper/run_paper.py                      # everything, a few minutes
    python bench/paper/run_paper.py --models bert-large --devices 64,128 --budget 100
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from nest.studies.baselines import STRATEGIES
from nest.studies.compare import compare, compare_document, compare_plot

MODELS = ("bert-large", "llama2-7b", "llama3-70b", "mixtral-8x7b", "gpt3-175b")
CLUSTERS = ("tpuv4-fattree", "h100-spineleaf")
DEVICES = (64, 128, 256, 512, 1024)
PAPER_BUDGET = 1000
"""MCMC proposals per case: ~1-3 ms each, the whole run stays within a few minutes on 2 cores."""


def _config(row) -> str:
    p = row.parallelism
    text = f"{p['tp']}/{p['pp']}/{p['dp']}"
    extras = [f"cp{p['cp']}" if p["cp"] > 1 else "", f"ep{p['ep']}" if p["ep"] > 1 else "",
              f"v{p['vp']}" if p["vp"] > 1 else "", f"z{p['zero']}", f"mb{p['micro_batch']}",
              {"none": "", "selective": "rc-sel", "full": "rc-full"}[p["recompute"]]]
    return text + " " + " ".join(e for e in extras if e)


def markdown(rows, strategies, wall_s: float, budget: int, seed: int) -> str:
    out = ["# nest vs. baselines on the NEST paper's setups", ""]
    out.append(f"Strategies: {', '.join(strategies)} (MCMC: {budget} proposals, seed {seed}). "
               "Cells: tokens/s normalized to the first feasible `manual` result of the same "
               "model and cluster; in brackets the speed-up over `manual` at the same device "
               "count. `-`: infeasible (reasons in results.json). Configuration of nest's plan: "
               "TP/PP/DP, CP, EP, interleaving, ZeRO stage, micro-batch, recomputation.")
    out.append("")
    out.append(f"Total wall time: {wall_s:.1f} s.")
    out.append("")
    groups: dict[tuple, list] = {}
    for row in rows:
        groups.setdefault((row.model, row.cluster), []).append(row)
    for (model, cluster), group in groups.items():
        out.append(f"## {model} on {cluster}")
        out.append("")
        out.append("| devices | " + " | ".join(strategies) + " | nest tokens/s | nest configuration |")
        out.append("|---:|" + "---:|" * len(strategies) + "---:|---|")
        for devices in sorted({r.devices for r in group}):
            cells, nest_row = [], None
            for name in strategies:
                row = next((r for r in group if r.devices == devices and r.strategy == name), None)
                if row is None or not row.feasible or row.normalized is None:
                    cells.append("-")
                else:
                    vs = f" ({row.vs_manual:.2f}x)" if row.vs_manual is not None else ""
                    cells.append(f"{row.normalized:.2f}{vs}")
                if name == "nest" and row is not None and row.feasible:
                    nest_row = row
            tail = (f"{nest_row.throughput_tokens_per_s:,.0f} | {_config(nest_row)}" if nest_row
                    else "- | -")
            out.append(f"| {devices} | " + " | ".join(cells) + f" | {tail} |")
        out.append("")
    out.append("## nest's speed-up over each baseline (geometric mean over the cases both solve)")
    out.append("")
    baselines = [s for s in strategies if s != "nest"]
    out.append("| cluster | " + " | ".join(baselines) + " |")
    out.append("|---|" + "---:|" * len(baselines))
    for cluster in dict.fromkeys(r.cluster for r in rows):
        cells = []
        for name in baselines:
            ratios = []
            for row in rows:
                if row.cluster != cluster or row.strategy != name or not row.feasible:
                    continue
                mine = next((r for r in rows if r.cluster == cluster and r.model == row.model
                             and r.devices == row.devices and r.strategy == "nest" and r.feasible), None)
                if mine:
                    ratios.append(mine.throughput_tokens_per_s / row.throughput_tokens_per_s)
            cells.append(f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}x "
                         f"(max {max(ratios):.2f}x, n={len(ratios)})" if ratios else "-")
        out.append(f"| {cluster} | " + " | ".join(cells) + " |")
    out.append("")
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--clusters", default=",".join(CLUSTERS))
    parser.add_argument("--devices", default=",".join(map(str, DEVICES)))
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--budget", type=int, default=PAPER_BUDGET, help="MCMC proposals per case")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args(argv)
    models, clusters = args.models.split(","), args.clusters.split(",")
    devices = [int(d) for d in args.devices.split(",")]
    strategies = args.strategies.split(",")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    rows, per_strategy = [], {s: 0.0 for s in strategies}
    for cluster in clusters:
        for model in models:
            case = time.perf_counter()
            found = compare(model, cluster, devices, strategies=strategies, seed=args.seed,
                            budget=args.budget)
            for row in found:
                per_strategy[row.strategy] += row.wall_s
            rows += found
            print(f"{model:>13} on {cluster:<15} {time.perf_counter() - case:6.1f} s", flush=True)
    wall = time.perf_counter() - started

    (out / "results.md").write_text(markdown(rows, strategies, wall, args.budget, args.seed))
    document = compare_document(rows)
    document["wall_time_s"] = wall
    document["wall_time_per_strategy_s"] = per_strategy
    document["mcmc_budget"] = args.budget
    (out / "results.json").write_text(json.dumps(document, indent=1))
    try:
        order = {(m, c): (i, j) for i, m in enumerate(models) for j, c in enumerate(clusters)}
        by_model = sorted(rows, key=lambda r: order[(r.model, r.cluster)])  # a row per model
        compare_plot(by_model, out / "compare.png", columns=len(clusters))
    except ImportError as error:
        print(f"no plot: {error}", file=sys.stderr)
    print(f"total wall time {wall:.1f} s; per strategy: "
          + ", ".join(f"{k} {v:.1f} s" for k, v in per_strategy.items()))
    print(f"wrote {out / 'results.md'}, {out / 'results.json'}, {out / 'compare.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
