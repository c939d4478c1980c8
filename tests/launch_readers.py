"""Each framework's reading of the launch configuration nest emits, written here from the
framework's own rules (independently of nest.frameworks), and the check that the reading
is the plan (imported by test modules; pytest puts this directory on sys.path)."""

from __future__ import annotations

import json
import math
import shlex

from nest.frameworks.base import expressed_order
from nest.frameworks.megatron import ORDERS, PP_LAST
from nest.frameworks.torchtitan import registry_entry
from nest.report.export import emit
from nest.specs import JobSpec


def blocks_of(plan: dict) -> list[int]:
    """Transformer blocks per virtual stage of the plan's JSON (its stages are virtual)."""
    return [sum(n.startswith("block.") for n in s["layers"]) for s in plan["stages"]]


def megatron_read(text: str, world: int) -> dict:
    """What Megatron-LM builds from the arguments: degrees (dp = world / (tp pp cp),
    ``initialize_model_parallel``; the expert grid's expert TP, ``--expert-tensor-parallel-size``
    defaulting to tp in ``validate_args``, and expert DP = world / (etp ep pp), with its
    asserts), batch (``--global-batch-size`` over micro-batch x dp:
    the micro-batch calculator), layout, ZeRO stage (distributed optimizer, Megatron-FSDP
    sharding strategy), recomputation and the architecture."""
    tokens = shlex.split(text)
    args, i = {}, 0
    while i < len(tokens):
        assert tokens[i].startswith("--"), tokens[i]
        assert tokens[i] not in args, f"{tokens[i]} given twice"
        values = []
        while i + 1 + len(values) < len(tokens) and not tokens[i + 1 + len(values)].startswith("--"):
            values.append(tokens[i + 1 + len(values)])  # nargs='*' options take several
        args[tokens[i]] = " ".join(values) if values else True
        i += 1 + len(values)
    tp, pp = int(args["--tensor-model-parallel-size"]), int(args["--pipeline-model-parallel-size"])
    cp = int(args.get("--context-parallel-size", 1))
    dp = world // (tp * pp * cp)
    # core_v0.14.0 parallel_state.py initialize_model_parallel: the expert RankGenerator
    ep = int(args.get("--expert-model-parallel-size", 1))
    etp = int(args.get("--expert-tensor-parallel-size", tp))
    assert world % (etp * ep * pp) == 0
    expert_dp = world // (etp * ep * pp)
    assert "--use-tp-pp-dp-mapping" not in args or pp == 1 or expert_dp == dp
    micro, global_batch = int(args["--micro-batch-size"]), int(args["--global-batch-size"])
    layers = int(args["--num-layers"])
    if "--pipeline-model-parallel-layout" in args:
        assert "--num-virtual-stages-per-pipeline-rank" not in args  # validate_args: exclusive
        groups = args["--pipeline-model-parallel-layout"].split("|")
        mtp = int(args.get("--mtp-num-layers", 0))
        # validate_layer_layout: MTP modules ("m") in the last stage, with the loss
        assert len(groups) % pp == 0 and groups[0].startswith("E") and groups[-1].endswith("m" * mtp + "L")
        assert set("".join(groups)) <= set("EtmL") and "".join(groups).count("t") == layers
        assert "".join(groups).count("m") == mtp
        vp, blocks = len(groups) // pp, [g.count("t") for g in groups]
    else:
        assert pp == 1
        vp, blocks = 1, [layers]
    if "--use-megatron-fsdp" in args:
        assert args["--ckpt-format"] == "fsdp_dtensor" and "--no-gradient-accumulation-fusion" in args
        zero = {"optim_grads": 2, "optim_grads_params": 3}[args["--data-parallel-sharding-strategy"]]
    else:
        zero = 1 if "--use-distributed-optimizer" in args else 0
    granularity = args.get("--recompute-granularity")
    if granularity == "full":
        assert (args["--recompute-method"], args["--recompute-num-layers"]) == ("uniform", "1")
    if granularity == "selective" and "--recompute-modules" in args:
        granularity = ",".join(args["--recompute-modules"].split())  # nest's name of a module set
    assert global_batch % (micro * dp) == 0
    # Megatron-Core's optimizer state (optimizer_config.py): bf16 main gradients with
    # --grad-reduce-in-bf16; the precision-aware optimizer's moments, and its master weights
    # kept as 16-bit remainders of the bf16 weights. With --optimizer-cpu-offload the hybrid
    # device optimizer takes the precision-aware path (arguments.py validate_args requires the
    # flag) but keeps fp32 masters and moments (hybrid_optimizer.py), on host and device
    offload = float(args["--optimizer-offload-fraction"]) if "--optimizer-cpu-offload" in args else 0.0
    if "--optimizer-cpu-offload" in args:
        assert "--use-precision-aware-optimizer" in args and "--overlap-cpu-optimizer-d2h-h2d" in args
        assert "--exp-avg-dtype" not in args and zero == 1
    # main's --cpu-offloading-num-layers sets cpu_offloading (arguments.py), which
    # TransformerConfig.__post_init__ allows below num_layers, without PP or recomputation
    act_offload = int(args.get("--cpu-offloading-num-layers", 0))
    if act_offload:
        assert act_offload < layers and pp == 1 and granularity is None
    aware = "--use-precision-aware-optimizer" in args and not offload
    moment = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}[args.get("--exp-avg-dtype", "fp32")]
    assert not aware or args["--exp-avg-sq-dtype"] == args["--exp-avg-dtype"]
    state = {"grad": 2 if "--grad-reduce-in-bf16" in args else 4, "master": 2 if aware else 4,
             "state": 2 * moment if args["--optimizer"] == "adam" else 4}
    # MXFP8 weights are gathered through the gradient buffer (nest's price of them)
    assert ("--reuse-grad-buf-for-mxfp8-param-ag" in args) == (
        "--fp8-param-gather" in args and args.get("--fp8-recipe") == "mxfp8")
    return {"optimizer_state": state, "fp8_param_gather": "--fp8-param-gather" in args,
            "fp8_recipe": args.get("--fp8-recipe"),
        "optimizer_offload_fraction": offload, "activation_offload_layers": act_offload,
        "tp": tp, "pp": pp, "cp": cp, "dp": dp, "vp": vp, "ep": ep,
        # a dense model has no experts to split (Megatron's default etp = tp then splits nothing)
        "expert_tp": etp if "--num-experts" in args else 1, "expert_dp": expert_dp if "--num-experts" in args else None,
        "sp": "--sequence-parallel" in args, "zero": zero, "recompute": granularity or "none",
        "micro_batch": micro, "num_microbatches": global_batch // (micro * dp), "blocks": blocks,
        "pp_last": "--use-tp-pp-dp-mapping" in args, "global_batch": global_batch,
        "seq_len": int(args["--seq-length"]),
        "dtype": "fp8" if "--fp8-format" in args else "bf16" if "--bf16" in args else
                 "fp16" if "--fp16" in args else "fp32",
        "arch": {"num_layers": layers, "hidden": int(args["--hidden-size"]),
                 "num_heads": int(args["--num-attention-heads"]),
                 "ffn_hidden": int(args["--ffn-hidden-size"]), "vocab_size": int(args["--vocab-size"]),
                 "num_kv_heads": int(args.get("--num-query-groups", args["--num-attention-heads"])),
                 "num_experts": int(args.get("--num-experts", 0)), "mtp_layers": int(args.get("--mtp-num-layers", 0))},
        "args": args,
    }


def deepspeed_read(text: str, world: int) -> dict:
    """What DeepSpeed derives from the config: its data-parallel size (world / (pp x tp)
    with a PipelineModule, world / AutoTP size without), train batch = micro x
    accumulation x that size, the ZeRO stage, checkpointing; the split from the companion
    ``nest`` section's ``parts``."""
    config = json.loads(text)
    assert "train_batch_size" not in config  # DeepSpeed derives it from its own DP size
    companion = config["nest"]
    pp = companion["pipeline"]["num_stages"]
    if pp > 1:
        assert "tensor_parallel" not in config  # AutoTP is not for PipelineModule models
        tp = companion["tensor_parallel"]
        assert companion["pipeline"]["topology"] == (f"PipeModelDataParallelTopology(num_pp={pp}, num_mp={tp}, "
                                                     f"num_dp={world // (pp * tp)})")
        recompute = "full" if config["pipeline"]["activation_checkpoint_interval"] == 1 else "none"
    else:
        assert "pipeline" not in config
        tp = config.get("tensor_parallel", {}).get("autotp_size", 1)
        recompute = companion["recompute"]
    dp = world // (pp * tp)
    parts = companion["pipeline"]["parts"]
    zero = config["zero_optimization"]["stage"]
    assert zero <= 1 or pp == 1  # PipelineEngine refuses ZeRO-2/3
    return {"tp": tp, "pp": pp, "dp": dp, "vp": 1, "cp": 1, "sp": False, "zero": zero, "recompute": recompute,
            "micro_batch": config["train_micro_batch_size_per_gpu"],
            "num_microbatches": config["gradient_accumulation_steps"],
            "global_batch": config["train_micro_batch_size_per_gpu"] * config["gradient_accumulation_steps"] * dp,
            "nodes": [b - a for a, b in zip(parts, parts[1:])], "ep": companion["expert_parallel"],
            "dtype": "bf16" if config["bf16"]["enabled"] else "fp16" if config["fp16"]["enabled"] else "fp32",
            "overlap": config["zero_optimization"].get("overlap_comm", False), "expert_tp": 1,
            "optimizer_offload_fraction": 1.0 if "offload_optimizer" in config["zero_optimization"] else 0.0,
            "activation_offload_layers": 0}


def torchtitan_fqns(stages: int, layers: int, input_weight: int, output_weight: int) -> list[list[str]]:
    """torchtitan 0.3.0 ``_generate_llm_fqn_per_model_part``
    (torchtitan/distributed/pipeline_parallel.py), transcribed."""
    if stages == 1:
        return [["tok_embeddings"] + [f"layers.{i}" for i in range(layers)] + ["norm", "lm_head"]]
    effective = layers + input_weight + output_weight
    assert stages <= effective
    per, extra = effective // stages, effective % stages
    assert per > 0 and input_weight <= per and output_weight <= per
    out, current = [], 0
    for k in range(stages):
        share = per + (1 if k < extra else 0)
        modules = []
        if k == 0:
            modules.append("tok_embeddings")
            share -= input_weight
        elif k == stages - 1:
            share -= output_weight
        for _ in range(share):
            if current < layers:
                modules.append(f"layers.{current}")
                current += 1
        if k == stages - 1:
            modules += ["norm", "lm_head"]
        out.append(modules)
    return out


def torchtitan_read(text: str, num_layers: int) -> dict:
    """What torchtitan builds from the command line: the mesh degrees, FSDP or
    replication, the pipeline stages (``_get_pipeline_metadata`` and the generated module
    names), the batch and the activation checkpointing."""
    tokens = shlex.split(text.replace("\\\n", " "))
    assert tokens[:2] == ["--module", tokens[1]] and tokens[2] == "--config"
    assert tokens[-1].startswith("activation-checkpoint:")  # tyro's subcommand, last
    options, i = {}, 4
    while i < len(tokens) - 1:
        key = tokens[i][2:]
        if i + 1 < len(tokens) - 1 and not tokens[i + 1].startswith("--"):
            options[key], i = tokens[i + 1], i + 2
        else:
            options[key], i = True, i + 1
    get = lambda key, default=None: options.get(f"parallelism.{key}", default)  # noqa: E731
    replicate, shard = int(get("data_parallel_replicate_degree")), int(get("data_parallel_shard_degree"))
    tp, cp, ep, pp = (int(get(f"{k}_parallel_degree")) for k in ("tensor", "context", "expert", "pipeline"))
    zero = 3 if shard > 1 else 0
    if shard > 1:
        assert replicate == 1 and get("fsdp_reshard_after_forward") == "always"
    local, global_batch = int(options["training.local_batch_size"]), int(options["training.global_batch_size"])
    dp = replicate * shard
    if pp > 1:
        first, last = int(get("pipeline_parallel_first_stage_less_layers")), int(
            get("pipeline_parallel_last_stage_less_layers"))
        per_stage = get("pipeline_parallel_layers_per_stage")
        schedule = get("pipeline_parallel_schedule")
        single = schedule == "1F1B"
        stages = (math.ceil((num_layers + first + last) / int(per_stage)) if per_stage is not None
                  else pp * (1 if single else 2))
        assert stages % pp == 0 and (stages == pp) == single
        fqns = torchtitan_fqns(stages, num_layers, first, last)
        micro = int(get("pipeline_parallel_microbatch_size"))
        microbatches = local // micro
        assert global_batch == local * dp  # one step, no gradient accumulation
    else:
        stages, fqns, micro = 1, torchtitan_fqns(1, num_layers, 0, 0), local
        assert global_batch % (local * dp) == 0
        microbatches = global_batch // (local * dp)  # gradient accumulation steps
    nodes = [sum(m.startswith("layers.") for m in f) + ("tok_embeddings" in f) + ("lm_head" in f) for f in fqns]
    return {"tp": tp, "cp": cp, "ep": ep, "pp": pp, "dp": dp, "vp": stages // pp, "zero": zero, "sp": tp > 1,
            "micro_batch": micro, "num_microbatches": microbatches, "global_batch": global_batch, "nodes": nodes,
            "seq_len": int(options["training.seq_len"]),
            "recompute": tokens[-1].split(":")[1], "module": tokens[1], "config": tokens[3],
            "optimizer_offload_fraction": 0.0, "activation_offload_layers": 0, "expert_tp": 1,
            "dtype": {"bfloat16": "bf16", "float32": "fp32"}[options["training.mixed_precision_param"]]}


def assert_round_trip(plan: dict, fw: str) -> dict:
    """The emitted configuration, read back, is the plan."""
    p, job = plan["parallelism"], plan["job"]
    world = plan["devices_used"]
    text = emit(plan, fw)
    nodes = [len(s["layers"]) for s in plan["stages"]]
    if fw == "megatron":
        got = megatron_read(text, world)
        assert got["blocks"] == blocks_of(plan)
        assert got["pp_last"] == (expressed_order(p, p["rank_order"], ORDERS) == PP_LAST)
        spec = plan["model"]["spec"]
        assert got["arch"] == {k: spec[k] or (spec["num_heads"] if k == "num_kv_heads" else 0)
                               for k in got["arch"]}
        assert got["dtype"] == job["dtype"] and got["seq_len"] == job["seq_len"]
        opt = JobSpec.of_document(job).optimizer
        assert got["optimizer_state"] == {"grad": opt.grad_bytes, "master": opt.master_bytes,
                                          "state": opt.state_bytes}
        assert got["fp8_param_gather"] == bool(job.get("fp8_param_gather"))
        assert got["fp8_recipe"] == (job.get("fp8_recipe", "delayed") if job["dtype"] == "fp8" else None)
        assert got["expert_dp"] in (None, p["expert_dp"])
        assert (got["expert_dp"] is None) == (not spec["num_experts"])
        keys = ("tp", "pp", "cp", "dp", "vp", "ep", "sp", "zero", "recompute", "micro_batch", "num_microbatches",
                "optimizer_offload_fraction", "activation_offload_layers", "expert_tp")
    elif fw == "deepspeed":
        got = deepspeed_read(text, world)
        assert got["nodes"] == nodes and got["dtype"] == job["dtype"]
        assert got["overlap"] == bool(job.get("overlap_grad_reduce")) or p["zero"] == 0
        keys = ("tp", "pp", "cp", "dp", "vp", "ep", "sp", "zero", "recompute", "micro_batch", "num_microbatches",
                "optimizer_offload_fraction", "activation_offload_layers", "expert_tp")
    else:
        got = torchtitan_read(text, plan["model"]["layers"])
        assert got["nodes"] == nodes and got["dtype"] == job["dtype"] and got["seq_len"] == job["seq_len"]
        assert (got["module"], got["config"]) == registry_entry(plan["model"]["spec"])
        keys = ("tp", "pp", "cp", "dp", "vp", "ep", "sp", "zero", "recompute", "micro_batch", "num_microbatches",
                "optimizer_offload_fraction", "activation_offload_layers", "expert_tp")
    assert got["global_batch"] == job["global_batch"]
    assert {k: got[k] for k in keys} == {k: p[k] for k in keys}
    return got


