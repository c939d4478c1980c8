"""``nest`` command line: plan, evaluate, models, clusters.

Exit codes: 0 ok, 1 unexpected error, 2 bad input, 3 no feasible plan.
"""

from __future__ import annotations

import argparse
import json
import sys

from .errors import InfeasibleError, SpecError
from .layout import DEFAULT_ORDER

EXIT_OK, EXIT_UNEXPECTED, EXIT_BAD_INPUT, EXIT_INFEASIBLE = 0, 1, 2, 3


class _Parser(argparse.ArgumentParser):
    """argparse with exit code 2 and a one-line message for usage errors."""

    def error(self, message):  # noqa: D401 - argparse API
        self.exit(EXIT_BAD_INPUT, f"nest: error: {message}\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None


def _add_scenario(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="preset name or model file (JSON/YAML)")
    parser.add_argument("--cluster", required=True, help="preset name or cluster file (JSON/YAML)")
    parser.add_argument("--devices", type=_positive_int, help="size a cluster preset to N devices")
    parser.add_argument("--global-batch", type=_positive_int,
                        help="sequences per step (default: the model's published batch)")
    parser.add_argument("--seq-len", type=_positive_int, help="tokens per sequence (default: the model's)")
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp8", "fp32"))
    parser.add_argument("--optimizer", default="adam", choices=("adam", "sgd"))
    parser.add_argument("--no-flash-attention", action="store_true",
                        help="model unfused attention (stores the s^2 softmax activations)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--engine", default="cpp", choices=("cpp", "python"),
                        help="stage DP implementation (python: the slow reference)")
    parser.add_argument("--threads", type=_positive_int, help="OpenMP threads of the C++ DP")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``nest`` command."""
    parser = _Parser(prog="nest", description="Network- and memory-aware planning of "
                     "distributed deep-learning training.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    plan = sub.add_parser("plan", help="find the fastest plan that fits in memory")
    _add_scenario(plan)
    plan.add_argument("--rank-order", action="append",
                      help="rank order(s) to search, innermost first (default: tp-cp-ep-dp-pp and "
                           "tp-cp-ep-pp-dp); repeat to give several")
    evaluate = sub.add_parser("evaluate", help="cost one fixed configuration")
    _add_scenario(evaluate)
    evaluate.add_argument("--tp", type=_positive_int, required=True)
    evaluate.add_argument("--pp", type=_positive_int, required=True)
    evaluate.add_argument("--dp", type=_positive_int, required=True)
    evaluate.add_argument("--mbs", type=_positive_int, required=True, help="micro-batch size")
    evaluate.add_argument("--recompute", default="none", choices=("none", "selective", "full"))
    evaluate.add_argument("--sp", action=argparse.BooleanOptionalAction, default=False,
                          help="Megatron sequence parallelism")
    evaluate.add_argument("--distributed-optimizer", action=argparse.BooleanOptionalAction,
                          default=False, help="shard optimizer state over DP (ZeRO-1)")
    evaluate.add_argument("--zero", type=int, choices=(0, 1, 2, 3),
                          help="ZeRO stage (default: 1 with --distributed-optimizer, else 0)")
    evaluate.add_argument("--cp", type=_positive_int, default=1, help="context-parallel degree")
    evaluate.add_argument("--ep", type=_positive_int, default=1, help="expert-parallel degree")
    evaluate.add_argument("--vp", type=_positive_int, default=1,
                          help="virtual pipeline stages per device (interleaved 1F1B)")
    evaluate.add_argument("--rank-order", default=DEFAULT_ORDER,
                          help="parallel dimensions innermost first (default tp-cp-ep-dp-pp)")
    evaluate.add_argument("--layers-per-stage", type=_int_list,
                          help="layer-graph nodes per stage, first stage first (e.g. 13,12,...,13)")
    models = sub.add_parser("models", help="list model presets")
    models.add_argument("--json", action="store_true")
    clusters = sub.add_parser("clusters", help="list cluster and device presets")
    clusters.add_argument("--json", action="store_true")
    return parser


def _scenario(args):
    from .loading import load_cluster, load_model
    from .specs import JobSpec, OptimizerSpec

    model = load_model(args.model)
    cluster = load_cluster(args.cluster, args.devices)
    batch = args.global_batch or model.default_global_batch
    if not batch:
        raise SpecError(f"global_batch: model {model.name} has no default; pass --global-batch")
    job = JobSpec(global_batch=batch, seq_len=args.seq_len or model.seq_len, dtype=args.dtype,
                  optimizer=OptimizerSpec.named(args.optimizer),
                  flash_attention=not args.no_flash_attention)
    return model, cluster, job


def _print_plan(plan, as_json: bool) -> None:
    from .report import render

    if as_json:
        print(json.dumps(plan.to_dict(), indent=2))
    else:
        print(render(plan))


def _run(args) -> int:
    if args.command == "models":
        from .model import parameter_count
        from .presets.models import MODELS

        rows = [{"name": m.name, "parameters": parameter_count(m), "layers": m.num_layers,
                 "hidden": m.hidden, "heads": m.num_heads, "kv_heads": m.num_kv_heads,
                 "seq_len": m.seq_len, "default_global_batch": m.default_global_batch}
                for m in MODELS.values()]
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            for r in rows:
                print(f"{r['name']:<15} {r['parameters'] / 1e9:8.2f}B  layers {r['layers']:>3}  "
                      f"hidden {r['hidden']:>5}  heads {r['heads']:>3}/{r['kv_heads']:<3} seq {r['seq_len']}")
        return EXIT_OK
    if args.command == "clusters":
        from .presets.clusters import CLUSTERS
        from .presets.devices import DEVICES

        rows = {"clusters": [{"name": t.name, "device": t.device.name, "default_devices": t.default_devices,
                              "tiers": [{"name": x.name, "fanout": x.fanout, "bandwidth_GBps": x.bandwidth / 1e9,
                                         "latency_us": x.latency * 1e6} for x in t.tiers]}
                             for t in CLUSTERS.values()],
                "devices": [{"name": d.name, "memory_GiB": d.memory_bytes / 2**30,
                             "peak_TFLOPS_bf16": d.peak_flops_bf16 / 1e12,
                             "hbm_bandwidth_GBps": d.hbm_bandwidth / 1e9} for d in DEVICES.values()]}
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            for t in rows["clusters"]:
                tiers = ", ".join(f"{x['name']} x{x['fanout'] if x is not t['tiers'][-1] else 'N'} "
                                  f"@ {x['bandwidth_GBps']:g} GB/s" for x in t["tiers"])
                print(f"{t['name']:<15} {t['device']:<12} {tiers}")
            print()
            for d in rows["devices"]:
                print(f"{d['name']:<12} {d['memory_GiB']:7.1f} GiB  {d['peak_TFLOPS_bf16']:7.1f} TFLOPS bf16  "
                      f"{d['hbm_bandwidth_GBps']:6.0f} GB/s")
        return EXIT_OK

    from .planner import evaluate, plan

    model, cluster, job = _scenario(args)
    common = {"engine": args.engine, "threads": args.threads}
    if args.command == "plan":
        from .space import SpaceLimits

        orders = tuple(args.rank_order) if args.rank_order else None
        result = plan(model, cluster, job, limits=SpaceLimits(rank_order=orders), **common)
    else:
        result = evaluate(model, cluster, job, tp=args.tp, pp=args.pp, dp=args.dp, micro_batch=args.mbs,
                          recompute=args.recompute, sp=args.sp,
                          distributed_optimizer=args.distributed_optimizer, zero=args.zero, cp=args.cp,
                          ep=args.ep, vp=args.vp, rank_order=args.rank_order,
                          layers_per_stage=args.layers_per_stage, **common)
    _print_plan(result, args.json)
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``nest`` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except SpecError as error:
        print(f"nest: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except InfeasibleError as error:
        print(f"nest: infeasible: {error}", file=sys.stderr)
        return EXIT_INFEASIBLE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
