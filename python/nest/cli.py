"""``nest`` command line: plan, evaluate, models, clusters.

Exit codes: 0 ok, 1 unexpected error, 2 bad input (also an input file that cannot be read, an
output path that cannot be written, checked before the work, and a stdout that cannot be
written, e.g. on a full disk), 3 no feasible plan.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
from dataclasses import replace

from . import __version__
from .cli_args import LIMIT_FLAGS, add_limits, fraction, int_list, narrowed_limits, non_negative, positive_int
from .jsontext import dumps_indented
from .errors import InfeasibleError, SpecError
from .degrees import DEFAULT_ORDER, RECOMPUTE_MODES, SpaceLimits
from .specs import FP8_RECIPES, FRAMEWORKS, MOE_DISPATCHERS, MOMENT_BYTES, OFFLOAD_HANDLERS
from .units import GiB

EXIT_OK, EXIT_UNEXPECTED, EXIT_BAD_INPUT, EXIT_INFEASIBLE = 0, 1, 2, 3


class _Parser(argparse.ArgumentParser):
    """argparse with exit code 2 and a one-line message for usage errors, and without
    abbreviated options (``--tp`` must never be read as ``--tp-comm-overlap``)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):  # noqa: D401 - argparse API
        raise _UsageError(message)


class _UsageError(Exception):
    """A command line argparse refused (its message), reported by :func:`main`."""


def _add_scenario(parser: argparse.ArgumentParser, device_list: bool = False) -> None:
    parser.add_argument("--model", help="preset name, model file (JSON/YAML) or Hugging Face config.json")
    parser.add_argument("--cluster", help="preset name (see 'nest clusters'), cluster file (JSON/YAML tiers "
                                          "or graph) or network graph (node-link JSON, GraphML, YAML edge list)")
    parser.add_argument("--nest-instance", metavar="FILE",
                        help="a NEST artifact DP instance (its measured layers, network and job)")
    parser.add_argument("--profile", metavar="FILE",
                        help="measured layer profile (JSON/CSV) used instead of the analytic model")
    parser.add_argument("--emit", choices=(*(f for f in FRAMEWORKS if f != "any"), "hostfile"),
                        help="print the plan as launch arguments/config for this framework (implies "
                             "--framework), or (hostfile) its rank -> host/GPU map as an Open MPI rankfile")
    parser.add_argument("--framework", choices=FRAMEWORKS,
                        help="search only what this framework can run, with its rules (default: any, nest's "
                             "whole space; --emit sets it)")
    if device_list:
        parser.add_argument("--devices", type=int_list, required=True,
                            help="comma-separated device counts, e.g. 64,128,256,512,1024")
    else:
        parser.add_argument("--devices", type=positive_int, help="size a cluster preset to N devices")
    parser.add_argument("--global-batch", type=positive_int,
                        help="sequences per step (default: the model's published batch)")
    parser.add_argument("--seq-len", type=positive_int, help="tokens per sequence (default: the model's)")
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp8", "fp32"))
    parser.add_argument("--network", default="nominal", choices=("nominal", "nccl"),
                        help="tier prices: nominal bandwidths and latencies (default), or what NCCL "
                             "collectives measure on them (nest.network.calibrated_cluster)")
    parser.add_argument("--optimizer", default="adam", choices=("adam", "sgd"))
    parser.add_argument("--grad-dtype", default="fp32", choices=("fp32", "bf16"),
                        help="main gradients and their reduction (bf16: Megatron-LM's --grad-reduce-in-bf16)")
    parser.add_argument("--optimizer-state-dtype", default="fp32", choices=tuple(MOMENT_BYTES),
                        help="Adam's moments (not fp32: Megatron-Core's precision-aware optimizer, which also "
                             "keeps the master weights as 16-bit remainders)")
    parser.add_argument("--fp8-param-gather", action="store_true",
                        help="with --dtype fp8: weights stored and gathered in FP8 (Megatron-LM's flag)")
    parser.add_argument("--reserved-gib", type=float, metavar="GIB",
                        help="memory per device kept from tensors (default: the device's, 2 GiB on presets)")
    parser.add_argument("--no-flash-attention", action="store_true",
                        help="model unfused attention (stores the s^2 softmax activations)")
    for flag, what in (("--overlap-grad-reduce", "data-parallel gradient reduction with each node's backward"),
                       ("--overlap-param-gather", "the sharded optimizer's weight all-gather with each "
                                                  "node's next forward"),
                       ("--tp-comm-overlap", "tensor-parallel collectives with the compute they feed"),
                       ("--overlap-moe-expert-parallel-comm", "each MoE layer's dispatch and combine with another "
                                                               "micro-batch's compute (combined 1F1B; where Megatron "
                                                               "allows it: EP > 1, VP when PP > 1, no full or moe "
                                                               "recomputation)")):
        parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None,
                            help=f"overlap {what} (Megatron-LM's {flag}; default off, as there, except "
                                 "where the framework always does: torchtitan's FSDP2 reduces gradients "
                                 "during the backward)")
    parser.add_argument("--host-threads", type=positive_int, metavar="N",
                        help="CPU threads of each rank's host optimizer step when it offloads (OMP_NUM_THREADS; "
                             "default 1, torchrun's)")
    parser.add_argument("--fp8-recipe", default="delayed", choices=FP8_RECIPES,
                        help="Megatron's FP8 recipe (--dtype fp8): delayed, its default, tensorwise, "
                             "blockwise (Hopper) or mxfp8 (Blackwell) scaling")
    parser.add_argument("--activation-offload-handler", default="v1", choices=OFFLOAD_HANDLERS,
                        help="TE's activation offload: v1 (TE 2.7; NVTE_CPU_OFFLOAD_V1=1) or v2 (TE >= 2.10)")
    parser.add_argument("--moe-dispatcher", default="alltoall", choices=MOE_DISPATCHERS,
                        help="how tokens reach their experts: alltoall (every routed copy; Megatron's alltoall "
                             "dispatcher) or flex (DeepEP: once per destination node, then NVLink; default "
                             "alltoall)")
    parser.add_argument("--moe-load-cv", type=non_negative, metavar="CV",
                        help="expert load imbalance of dropless routing: the coefficient of variation of a "
                             "micro-batch's tokens per expert (default 0: balanced, as published benchmarks force "
                             "it; a trained router: see docs/cost-model.md)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--engine", default="cpp", choices=("cpp", "python"),
                        help="stage DP implementation (python: the slow reference)")
    parser.add_argument("--threads", type=positive_int, help="OpenMP threads of the C++ DP")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``nest`` command."""
    parser = _Parser(prog="nest", description="Network- and memory-aware planning of "
                     "distributed deep-learning training.")
    parser.add_argument("--version", action="version", version=f"nest {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    plan = sub.add_parser("plan", help="find the fastest plan that fits in memory")
    _add_scenario(plan)
    plan.add_argument("--rank-order", action="append",
                      help="rank order(s) to search, innermost first (default: tp-cp-ep-dp-pp and "
                           "tp-cp-ep-pp-dp); repeat to give several")
    add_limits(plan)
    evaluate = sub.add_parser("evaluate", help="cost one fixed configuration")
    _add_scenario(evaluate)
    for command in (plan, evaluate):
        command.add_argument("--ranking", default="schedule", choices=("schedule", "closed-form"),
                             help="rank candidates by the exact schedule of their split and polish the "
                                  "chosen split on it (default), or by the closed form the stage DP "
                                  "minimises, keeping the DP's split")
    evaluate.add_argument("--tp", type=positive_int)
    evaluate.add_argument("--pp", type=positive_int)
    evaluate.add_argument("--dp", type=positive_int)
    evaluate.add_argument("--mbs", type=positive_int, help="micro-batch size")
    evaluate.add_argument("--baseline", help="with --nest-instance: cost one of the instance's "
                          "baselines (Manual, Phaze, MCMC)")
    evaluate.add_argument("--recompute", default="none", choices=RECOMPUTE_MODES, metavar="MODE",
                          help="activation recomputation: " + " | ".join(RECOMPUTE_MODES)
                          + " (a comma joins Megatron recompute modules; default: none)")
    evaluate.add_argument("--sp", action=argparse.BooleanOptionalAction, default=False,
                          help="Megatron sequence parallelism")
    evaluate.add_argument("--distributed-optimizer", action=argparse.BooleanOptionalAction,
                          default=False, help="shard optimizer state over DP (ZeRO-1)")
    evaluate.add_argument("--zero", type=int, choices=(0, 1, 2, 3),
                          help="ZeRO stage (default: 1 with --distributed-optimizer, else 0)")
    evaluate.add_argument("--optimizer-offload", type=fraction, default=0.0, metavar="F",
                          help="fraction of each rank's optimizer state held and stepped on the host "
                               "(Megatron --optimizer-cpu-offload; default 0)")
    evaluate.add_argument("--activation-offload", type=int, default=0, metavar="N",
                          help="the first N transformer layers keep their activations on the host between forward "
                               "and backward (Megatron --cpu-offloading-num-layers; pp 1, no recomputation; "
                               "default 0)")
    evaluate.add_argument("--cp", type=positive_int, default=1, help="context-parallel degree")
    evaluate.add_argument("--ep", type=positive_int, default=1, help="expert-parallel degree")
    evaluate.add_argument("--etp", type=positive_int, default=1,
                          help="expert tensor-parallel degree (each routed expert split over ETP ranks)")
    evaluate.add_argument("--vp", type=positive_int, default=1,
                          help="virtual pipeline stages per device (interleaved 1F1B)")
    evaluate.add_argument("--rank-order", default=DEFAULT_ORDER,
                          help="parallel dimensions innermost first (default tp-cp-ep-dp-pp)")
    evaluate.add_argument("--layers-per-stage", type=int_list,
                          help="layer-graph nodes per stage, first stage first (e.g. 13,12,...,13)")
    evaluate.add_argument("--simulate", action="store_true",
                          help="also simulate the step event by event and report both times")
    evaluate.add_argument("--timeline", metavar="PNG",
                          help="draw the simulated pipeline schedule (needs matplotlib: nest-planner[plot])")
    compare = sub.add_parser("compare", help="compare strategies across device counts")
    _add_scenario(compare, device_list=True)
    compare.add_argument("--strategies", default="manual,topology-blind,mcmc,nest",
                         help="comma-separated: manual, topology-blind, mcmc, nest")
    add_limits(compare)
    compare.add_argument("--seed", type=int, default=0, help="MCMC seed")
    compare.add_argument("--budget", type=positive_int, help="MCMC proposals")
    compare.add_argument("--plot", metavar="PNG", help="throughput plot (needs matplotlib)")
    compare.add_argument("--quiet", action="store_true",
                         help="no progress bar (shown on a terminal once a comparison runs 2 s)")
    sweep = sub.add_parser("sweep", help="plan every scenario of a grid file (resumable)")
    sweep.add_argument("grid", help="grid file (YAML/JSON): models, clusters, devices, bandwidth "
                                    "multipliers, memory sizes, jobs")
    sweep.add_argument("--out", required=True, help="results: .jsonl, .csv or .parquet (resumes)")
    sweep.add_argument("--quiet", action="store_true", help="no progress bar")
    sweep.add_argument("--framework", choices=FRAMEWORKS,
                       help="the framework of every grid job that names none (jobs[].framework)")
    sweep.add_argument("--plot", metavar="PNG", help="throughput (MFU, cost) against the swept variable")
    sweep.add_argument("--workers", type=positive_int, help="local worker processes (default: all cores)")
    sweep.add_argument("--scheduler", metavar="tcp://HOST:PORT", help="an existing Dask scheduler")
    sweep.add_argument("--dask-local", type=positive_int, metavar="N",
                       help="start a local Dask cluster of N workers")
    models = sub.add_parser("models", help="list model presets")
    models.add_argument("--json", action="store_true")
    clusters = sub.add_parser("clusters", help="list cluster and device presets")
    clusters.add_argument("--json", action="store_true")
    return parser


def _scenario(args) -> dict:
    """Keyword arguments of plan/evaluate: model, cluster, job, and source/limits if measured."""
    from .inputs.coerce import job_spec
    from .inputs.loading import load_cluster, load_model
    from .specs import OVERLAP_SWITCHES, OptimizerSpec

    if args.nest_instance:
        from .inputs.measured import instance_setup

        if args.model or args.cluster or args.profile or args.framework:
            raise SpecError("nest_instance: the instance brings its own model, cluster and job; "
                            "drop --model/--cluster/--profile/--framework")
        if args.network != "nominal":
            raise SpecError(f"network = {args.network}: a NEST instance brings its own network prices")
        if args.command == "compare":
            raise SpecError("nest_instance: compare varies the device count, which a NEST instance fixes; "
                            "use nest plan --nest-instance")
        overridden = _instance_overrides(args)
        if overridden:
            raise SpecError(f"nest_instance: the instance sets its cluster size and job; drop {', '.join(overridden)}")
        setup = instance_setup(args.nest_instance)
        return {"model": setup.model, "cluster": setup.cluster, "job": setup.job,
                "source": setup.source, "limits": setup.limits, "setup": setup}
    if not args.cluster:
        raise SpecError("cluster: missing; pass --cluster (or --nest-instance)")
    devices = args.devices[0] if isinstance(args.devices, list) else args.devices  # compare: a list
    cluster = load_cluster(args.cluster, devices)
    if args.network == "nccl":
        if cluster.is_graph:
            raise SpecError(f"network = nccl: cluster {cluster.name} is a graph; its links are priced as "
                            "the graph gives them (put measured rates in the graph file)")
        from .network.tiers import calibrated_cluster

        cluster = calibrated_cluster(cluster)
    source = limits = None
    if args.profile:
        from .inputs.measured import MeasuredSource
        from .inputs.profiles import load_profile

        source = MeasuredSource(load_profile(args.profile))
        model = load_model(args.model) if args.model else source.model(source.profile.name)
        if args.model:
            source.check_model(model, args.profile)
        limits = source.limits()
    elif args.model:
        model = load_model(args.model)
    else:
        raise SpecError("model: missing; pass --model (or --profile / --nest-instance)")
    optimizer = OptimizerSpec.of(args.optimizer, args.grad_dtype, args.optimizer_state_dtype)
    reserved = None if args.reserved_gib is None else args.reserved_gib * GiB
    job = job_spec(model, global_batch=args.global_batch, seq_len=args.seq_len, dtype=args.dtype,
                   optimizer=optimizer, flash_attention=not args.no_flash_attention,
                   fp8_param_gather=args.fp8_param_gather, reserved_memory_bytes=reserved,
                   framework=_framework(args), moe_dispatcher=args.moe_dispatcher, host_threads=args.host_threads,
                   moe_load_cv=args.moe_load_cv,
                   fp8_recipe=args.fp8_recipe, activation_offload_handler=args.activation_offload_handler,
                   **{name: getattr(args, name) for name in OVERLAP_SWITCHES})
    return {"model": model, "cluster": cluster, "job": job, "source": source, "limits": limits}


_INSTANCE_SETS = ("devices", "global_batch", "seq_len", "dtype", "optimizer", "grad_dtype", "optimizer_state_dtype",
                  "fp8_param_gather", "reserved_gib", "no_flash_attention", "overlap_grad_reduce",
                  "overlap_param_gather", "tp_comm_overlap", "overlap_moe_expert_parallel_comm", "host_threads",
                  "moe_dispatcher", "moe_load_cv", "fp8_recipe", "activation_offload_handler")
"""The destinations of the flags a NEST instance's own cluster and job settle."""


def _instance_overrides(args) -> list[str]:
    """The flags given with ``--nest-instance`` that the instance would silently override
    (their values differ from the command's defaults), as the user typed them."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    actions = {a.dest: a for a in commands.choices[args.command]._actions if a.option_strings}
    return [actions[name].option_strings[0] for name in _INSTANCE_SETS
            if name in actions and getattr(args, name, None) != actions[name].default]


def _framework(args) -> str:
    """The job's framework: ``--framework``, else the one ``--emit`` launches, else any."""
    emitted = args.emit if args.emit in FRAMEWORKS else None
    if args.emit and getattr(args, "json", False):
        raise SpecError(f"emit = {args.emit}: prints the launch configuration, --json the plan's document; "
                        "give one of them")
    if args.framework and emitted and args.framework != emitted:
        raise SpecError(f"framework = {args.framework}: conflicts with --emit {emitted} (a plan is launched in the "
                        "framework it was made for)")
    return args.framework or emitted or "any"


def _print_plan(plan, args) -> None:
    from .report.text import render

    if args.emit:
        from .report.export import emit, launch_notes

        document = plan.to_dict()
        print(emit(document, args.emit))
        for note in launch_notes(document, args.emit):
            print(f"nest: note: {note}", file=sys.stderr)
    elif args.json:
        print(dumps_indented(plan.to_dict()))  # json.dumps(..., indent=2), faster
    else:
        print(render(plan, args.command))


def _run(args) -> int:
    outputs = [(flag, getattr(args, flag, None)) for flag in ("timeline", "plot")]
    if any(path for _, path in outputs):  # before the work: a failed write must not waste it
        from .inputs.files import check_writable

        for flag, path in outputs:
            if path:
                check_writable(path, flag)
    if args.command == "models":
        from .cost.model import parameter_count
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
        from .presets.clusters import CLUSTERS, GRAPH_CLUSTERS
        from .presets.devices import DEVICES

        rows = {"clusters": [{"name": t.name, "device": t.device.name, "default_devices": t.default_devices,
                              "tiers": [{"name": x.name, "fanout": x.fanout, "bandwidth_GBps": x.bandwidth / 1e9,
                                         "latency_us": x.latency * 1e6} for x in t.tiers]}
                             for t in CLUSTERS.values()],
                "graph_clusters": [{"name": t.name, "device": t.device.name, "default_devices": t.default_devices,
                                    "network": t.description} for t in GRAPH_CLUSTERS.values()],
                "devices": [{"name": d.name, "memory_GiB": d.memory_bytes / GiB, "memory_MiB": d.memory_bytes / 2**20,
                             "reserved_GiB": d.reserved_bytes / GiB,
                             "peak_TFLOPS_bf16": d.peak_flops_bf16 / 1e12,
                             "hbm_bandwidth_GBps": d.hbm_bandwidth / 1e9} for d in DEVICES.values()]}
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            for t in rows["clusters"]:
                tiers = ", ".join(f"{x['name']} x{x['fanout'] if x is not t['tiers'][-1] else 'N'} "
                                  f"@ {x['bandwidth_GBps']:g} GB/s" for x in t["tiers"])
                print(f"{t['name']:<20} {t['device']:<12} {tiers}")
            for t in rows["graph_clusters"]:
                print(f"{t['name']:<20} {t['device']:<12} graph: {t['network']}")
            print()
            for d in rows["devices"]:
                print(f"{d['name']:<12} {d['memory_GiB']:7.1f} GiB  {d['peak_TFLOPS_bf16']:7.1f} TFLOPS bf16  "
                      f"{d['hbm_bandwidth_GBps']:6.0f} GB/s")
        return EXIT_OK

    if args.command == "sweep":
        from .studies.sweep import run_sweep

        summary = run_sweep(args.grid, args.out, scheduler=args.scheduler, dask_local=args.dask_local,
                            quiet=args.quiet, plot=args.plot, workers=args.workers,
                            framework=args.framework)
        print(json.dumps(summary, indent=2))
        return EXIT_OK

    from .planner import evaluate, plan

    scenario = _scenario(args)
    setup = scenario.pop("setup", None)
    limits = scenario.pop("limits") or SpaceLimits()
    common = {"engine": args.engine, "threads": args.threads, **scenario}
    if args.command in ("plan", "compare"):
        limits = narrowed_limits(args, limits)
    if args.command == "compare":
        return _compare(args, scenario, limits)
    if args.command == "plan":
        if args.rank_order:
            limits = replace(limits, rank_order=tuple(args.rank_order))
        result = plan(limits=limits, ranking=args.ranking, **common)
    else:
        fixed = {"tp": args.tp, "pp": args.pp, "dp": args.dp, "micro_batch": args.mbs,
                 "recompute": args.recompute, "layers_per_stage": args.layers_per_stage}
        if args.baseline:
            if setup is None:
                raise SpecError(f"baseline = {args.baseline!r}: needs --nest-instance")
            fixed = setup.baseline_config(args.baseline)
        elif setup is not None:
            fixed = {"micro_batch": setup.instance.micro_batch, "recompute": setup.instance.recompute,
                     **{k: v for k, v in fixed.items() if v is not None and k != "recompute"}}
        missing = [f"--{k}" for k in ("tp", "pp", "dp") if fixed.get(k) is None]
        if fixed.get("micro_batch") is None:
            missing.append("--mbs")
        if missing:
            raise SpecError(f"evaluate: missing {', '.join(missing)} (the configuration to cost)")
        result = evaluate(sp=args.sp, distributed_optimizer=args.distributed_optimizer, zero=args.zero,
                          cp=args.cp, ep=args.ep, etp=args.etp, vp=args.vp, rank_order=args.rank_order,
                          ranking=args.ranking,
                          optimizer_offload=args.optimizer_offload, activation_offload=args.activation_offload,
                          **fixed, **common)
    if args.command == "evaluate" and (args.simulate or args.timeline):
        return _simulate(args, result, scenario)
    _print_plan(result, args)
    return EXIT_OK


@contextlib.contextmanager
def _writing(path: str, flag: str):
    """An output file's write error as a one-line SpecError (what the early check cannot see:
    a full disk, a directory only root's permission bits let through, like /sys)."""
    try:
        yield
    except OSError as error:
        raise SpecError(f"{flag} = {path!r}: cannot write: {error.strerror or error}") from None


def _simulate(args, result, scenario) -> int:
    from .planner import simulate
    from .report.text import render_simulation
    from .report.timeline import timeline_png

    sim = simulate(result, scenario["model"], scenario["cluster"], scenario["job"],
                   source=scenario["source"])
    if args.timeline:
        with _writing(args.timeline, "timeline"):
            timeline_png(sim, args.timeline)
    if args.json:
        doc = result.to_dict()
        doc["simulation"] = sim.to_dict()
        print(dumps_indented(doc))
    else:
        _print_plan(result, args)
        print()
        print(render_simulation(sim), end="")
    return EXIT_OK


def _compare(args, scenario, limits) -> int:
    from .studies.compare import compare, compare_json, compare_plot, render_compare

    if args.emit:
        raise SpecError("emit: not available for compare")
    strategies = tuple(s.strip() for s in args.strategies.split(",") if s.strip())
    cluster = args.cluster if not args.nest_instance else scenario["cluster"]
    if args.network == "nccl":  # every device count priced as NCCL measures it
        from .inputs.loading import load_cluster
        from .network.tiers import calibrated_cluster

        cluster = lambda n, name=args.cluster: calibrated_cluster(load_cluster(name, n))  # noqa: E731
    from .report.progress import Progress

    # strategies x device counts: a bar on a terminal once it has run 2 s
    bar = Progress(len(args.devices) * len(strategies), quiet=args.quiet, delay_s=2.0, tty_only=True)
    try:
        rows = compare(scenario["model"], cluster,
                       args.devices, scenario["job"], strategies=strategies, seed=args.seed,
                       budget=args.budget, engine=args.engine, threads=args.threads, limits=limits,
                       source=scenario["source"], progress=lambda row: bar.update())
    finally:
        bar.close()
    if args.plot:
        with _writing(args.plot, "plot"):
            compare_plot(rows, args.plot)
    print(compare_json(rows) if args.json else render_compare(rows))
    return EXIT_OK


_FLAG_OF = {field: flag for flag, field, _, _ in LIMIT_FLAGS} | {
    "micro_batch": "--mbs", "optimizer_offload": "--optimizer-offload", "activation_offload": "--activation-offload"}
"""The command-line flag of each setting an infeasible message names as ``name=value``
(:func:`nest.plan` and :func:`nest.evaluate` arguments and :class:`~nest.parallel.SpaceLimits`
fields)."""

_SETTING = re.compile(r"(?<![\w.-])(" + "|".join(sorted(_FLAG_OF, key=len, reverse=True)) + r"|sp)="
                      r"(\w+(?:\.\w+)?(?:,\w+(?:\.\w+)?)*)")


def _flag_words(message: str) -> str:
    """An infeasible message as a command-line user acts on it: each ``name=value`` setting
    as its flag (``micro_batch=2`` is ``--mbs 2``, ``sp=False`` is ``--no-sp``) and a device
    count as ``--devices N``."""
    def flag(match: re.Match) -> str:
        name, value = match.groups()
        if name == "sp":
            return {"True": "--sp", "False": "--no-sp"}.get(value, f"--sp {value}")
        return f"{_FLAG_OF[name]} {value}"

    message = _SETTING.sub(flag, message)
    message = re.sub(r"\b(\d+) devices \(the cluster has", r"--devices \1 (the cluster has", message)
    return re.sub(r" on (\d+) devices\b", r" with --devices \1", message)


def _fail(args, kind: str, error: Exception, code: int) -> int:
    """Report a bad input (``kind`` "error") or an infeasible job on stderr, one line; with
    ``--json`` also as the JSON document on stdout, ``{"error": {"kind", "exit_code",
    "message"}}``, so that a caller reading stdout never parses an empty document. An
    infeasible job's suggestions name command-line flags (:func:`_flag_words`)."""
    message = _flag_words(str(error)) if kind == "infeasible" else str(error)
    print(f"nest: {kind}: {message}", file=sys.stderr)
    if getattr(args, "json", False):
        print(json.dumps({"error": {"kind": "bad_input" if kind == "error" else "infeasible",
                                    "exit_code": code, "message": message}}, indent=2))
    return code


class _StdoutError(Exception):
    """Writing to stdout failed (``OSError`` wrapped, to tell it from other files' errors)."""


class _Stdout:
    """``sys.stdout`` whose write and flush failures raise :class:`_StdoutError`."""

    def __init__(self, stream):
        self._stream = stream

    def __getattr__(self, name):
        return getattr(self._stream, name)

    def write(self, text):
        try:
            return self._stream.write(text)
        except OSError as error:
            raise _StdoutError(error) from None

    def flush(self):
        try:
            self._stream.flush()
        except OSError as error:
            raise _StdoutError(error) from None


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``nest`` console script; returns the exit code.

    stdout that cannot be written is exit 2 with one line on stderr (``nest plan >
    /dev/full``: no space left on device); a reader that leaves (``nest plan | head -1``)
    is exit 0, silently. Either way stdout is then pointed at /dev/null, so that the
    interpreter's final flush cannot fail again. ``--help`` and ``--version`` write
    through the same check."""
    stdout = sys.stdout
    if stdout is not None:  # None: started with stdout closed, where print writes nothing
        sys.stdout = _Stdout(stdout)
    try:
        try:
            args = build_parser().parse_args(argv)
        except _UsageError as error:  # as any bad input: one line, and the JSON document when asked
            words = sys.argv[1:] if argv is None else argv
            return _fail(argparse.Namespace(json="--json" in words), "error", error, EXIT_BAD_INPUT)
        except SystemExit as done:  # --help or --version
            if stdout is not None:
                sys.stdout.flush()
            return done.code if isinstance(done.code, int) else EXIT_BAD_INPUT
        try:
            code = _run(args)
        except SpecError as error:
            code = _fail(args, "error", error, EXIT_BAD_INPUT)
        except InfeasibleError as error:
            code = _fail(args, "infeasible", error, EXIT_INFEASIBLE)
        except MemoryError:  # the inputs' tables or graph outgrew what this process may allocate
            code = _fail(args, "error", SpecError(f"{args.command}: out of memory: these inputs need more memory than "
                                                  "this process may allocate (fewer devices, a smaller graph "
                                                  "or job, or a machine with more memory)"), EXIT_BAD_INPUT)
        except KeyboardInterrupt as error:  # Ctrl-C: one line and 128 + SIGINT, never a traceback
            print(f"nest: {error}" if str(error) else "nest: interrupted", file=sys.stderr)
            code = 130
        if stdout is not None:
            sys.stdout.flush()
        return code
    except _StdoutError as failure:
        error = failure.args[0]
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), stdout.fileno())
        except (OSError, ValueError):  # a stdout without a descriptor (a test's capture)
            pass
        if isinstance(error, BrokenPipeError):  # e.g. `nest clusters | head`: the reader left, not an error
            return EXIT_OK
        print(f"nest: error: stdout: cannot write: {error.strerror or error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    finally:
        sys.stdout = stdout


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
