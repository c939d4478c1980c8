"""Plan -> Megatron-LM arguments, DeepSpeed config JSON, torchtitan TOML (nest.export)."""

from __future__ import annotations

import copy
import json
import shlex

import pytest
import tomllib

import nest
from nest.errors import SpecError
from nest.report.export import FORMATS, emit


def names(first: int, last: int) -> list[str]:
    return [f"block.{i}" for i in range(first, last)]


def make_plan(counts: list[int], *, tp=1, dp=1, cp=1, ep=1, vp=1, sp=False, zero=0, mbs=1,
              recompute="none", dtype="bf16", order="tp-cp-ep-dp-pp", seq_len=4096,
              num_microbatches=8, moe=False) -> dict:
    """A hand-made plan dict whose stages hold ``counts`` blocks each (virtual stages if vp > 1)."""
    stages, start = [], 0
    for k, count in enumerate(counts):
        layers = names(start, start + count)
        start += count
        if k == 0:
            layers.insert(0, "embedding")
        if k == len(counts) - 1:
            layers.append("head")
        stages.append({"index": k, "layers": layers, "devices": [], "time_s": 1.0,
                       "memory_bytes": 1.0, "params": 1})
    pp = len(counts) // vp
    params = 1000
    return {
        "parallelism": {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "ep": ep, "sp": sp, "vp": vp,
                        "zero": zero, "distributed_optimizer": zero >= 1, "recompute": recompute,
                        "micro_batch": mbs, "num_microbatches": num_microbatches,
                        "rank_order": order},
        "stages": stages,
        "job": {"global_batch": mbs * num_microbatches * dp, "seq_len": seq_len, "dtype": dtype},
        "model": {"name": "m", "parameters": params, "active_parameters": params // 4 if moe else params,
                  "layers": start},
    }


def megatron_args(plan: dict) -> dict:
    """Parse the emitted arguments: flag -> value (True for switches)."""
    tokens = shlex.split(emit(plan, "megatron"))
    args, i = {}, 0
    while i < len(tokens):
        flag = tokens[i]
        assert flag.startswith("--"), flag
        if i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            args[flag] = tokens[i + 1]
            i += 2
        else:
            args[flag] = True
            i += 1
    return args


def deepspeed(plan: dict) -> dict:
    return json.loads(emit(plan, "deepspeed"))


def titan(plan: dict) -> dict:
    return tomllib.loads(emit(plan, "torchtitan"))


# -- a real plan -----------------------------------------------------------------------

@pytest.fixture(scope="module", params=[("gpt3-175b", "dgx-a100", 1024), ("llama2-70b", "dgx-h100", 64)],
                ids=lambda p: f"{p[0]}-{p[2]}")
def real_plan(request) -> dict:
    """nest's best non-interleaved plan (every format can run it)."""
    model, cluster, devices = request.param
    limits = nest.SpaceLimits(vp=(1,))
    return nest.plan(model, nest.load_cluster(cluster, devices=devices), limits=limits).to_dict()


def test_real_interleaved_plan():
    """nest's unrestricted gpt3-175b plan interleaves: Megatron gets the virtual stages,
    DeepSpeed (no interleaved schedule) refuses with the field and value."""
    plan = nest.plan("gpt3-175b", nest.load_cluster("dgx-a100", devices=1024)).to_dict()
    vp = plan["parallelism"]["vp"]
    assert vp > 1
    args = megatron_args(plan)
    assert args["--num-virtual-stages-per-pipeline-rank"] == str(vp)
    with pytest.raises(nest.SpecError, match=f"parallelism.vp = {vp}: DeepSpeed's pipeline engine"):
        deepspeed(plan)


def megatron_block_counts(args: dict, num_layers: int, stages: int) -> list[int]:
    """Blocks per pipeline stage as Megatron-LM would build them from ``args``."""
    if "--pipeline-model-parallel-layout" in args:
        return [s.count("t") for s in args["--pipeline-model-parallel-layout"].split("|")]
    if "--decoder-first-pipeline-num-layers" in args:
        first = int(args["--decoder-first-pipeline-num-layers"])
        last = int(args["--decoder-last-pipeline-num-layers"])
        middle = (num_layers - first - last) // max(stages - 2, 1)
        return [first] + [middle] * (stages - 2) + [last]
    return [num_layers // stages] * stages


def test_real_plan_in_every_format(real_plan):
    par, job = real_plan["parallelism"], real_plan["job"]
    args = megatron_args(real_plan)
    assert args["--tensor-model-parallel-size"] == str(par["tp"])
    assert args["--pipeline-model-parallel-size"] == str(par["pp"])
    assert args["--micro-batch-size"] == str(par["micro_batch"])
    assert args["--global-batch-size"] == str(job["global_batch"])
    assert args["--seq-length"] == str(job["seq_len"])
    assert args["--num-layers"] == str(real_plan["model"]["layers"])
    assert ("--sequence-parallel" in args) == bool(par["sp"])
    assert "--bf16" in args

    ds = deepspeed(real_plan)
    assert ds["train_batch_size"] == job["global_batch"]
    assert ds["train_micro_batch_size_per_gpu"] == par["micro_batch"]
    assert ds["gradient_accumulation_steps"] == par["num_microbatches"]
    assert ds["zero_optimization"]["stage"] == max(par["zero"], int(par["distributed_optimizer"]))
    assert ds["train_batch_size"] == (ds["train_micro_batch_size_per_gpu"]
                                      * ds["gradient_accumulation_steps"] * par["dp"])

    toml = titan(real_plan)
    p = toml["parallelism"]
    assert p["tensor_parallel_degree"] == par["tp"]
    assert p["pipeline_parallel_degree"] == par["pp"]
    assert p["data_parallel_replicate_degree"] * p["data_parallel_shard_degree"] == par["dp"]
    assert toml["training"]["global_batch_size"] == job["global_batch"]
    assert toml["training"]["seq_len"] == job["seq_len"]
    assert toml["activation_checkpoint"]["mode"] == par["recompute"]


def test_real_plan_stage_split_round_trips(real_plan):
    blocks = [sum(n.startswith("block.") for n in s["layers"]) for s in real_plan["stages"]]
    ds = deepspeed(real_plan)["nest"]["pipeline"]
    sizes = [len(s["layers"]) for s in real_plan["stages"]]
    assert [b - a for a, b in zip(ds["parts"], ds["parts"][1:])] == sizes
    assert ds["blocks_per_stage"] == blocks
    args = megatron_args(real_plan)
    assert megatron_block_counts(args, sum(blocks), len(blocks)) == blocks
    parts = titan(real_plan)["parallelism"].get("module_fqns_per_model_part", [])
    if len(blocks) > 1:
        assert [sum(f.startswith("layers.") for f in part) for part in parts] == blocks


# -- Megatron-LM ------------------------------------------------------------------------

def test_megatron_parallel_sizes_and_switches():
    plan = make_plan([8, 8, 8, 8], tp=4, dp=2, cp=2, ep=4, sp=True, zero=1, mbs=2,
                     recompute="selective", moe=True)
    plan["parallelism"]["expert_tp"] = 1
    args = megatron_args(plan)
    assert args["--tensor-model-parallel-size"] == "4"
    assert args["--pipeline-model-parallel-size"] == "4"
    assert args["--context-parallel-size"] == "2"
    assert args["--expert-model-parallel-size"] == "4"
    assert args["--expert-tensor-parallel-size"] == "1"
    assert args["--sequence-parallel"] is True
    assert args["--recompute-granularity"] == "selective"
    assert "--recompute-method" not in args
    assert args["--use-distributed-optimizer"] is True
    assert args["--micro-batch-size"] == "2"
    assert args["--global-batch-size"] == str(2 * 8 * 2)
    assert args["--num-layers"] == "32"
    assert args["--seq-length"] == "4096"
    for absent in ("--decoder-first-pipeline-num-layers", "--pipeline-model-parallel-layout",
                   "--num-virtual-stages-per-pipeline-rank", "--use-tp-pp-dp-mapping"):
        assert absent not in args


def test_megatron_full_recompute_and_precision():
    args = megatron_args(make_plan([4, 4], recompute="full", dtype="fp8"))
    assert args["--recompute-granularity"] == "full"
    assert args["--recompute-method"] == "uniform"
    assert args["--recompute-num-layers"] == "1"
    assert args["--bf16"] is True and args["--fp8-format"] == "hybrid"
    assert "--fp16" in megatron_args(make_plan([4, 4], dtype="fp16"))
    fp32 = megatron_args(make_plan([4, 4], dtype="fp32"))
    assert "--bf16" not in fp32 and "--fp16" not in fp32


def test_megatron_zero3_uses_megatron_fsdp():
    args = megatron_args(make_plan([8], dp=8, zero=3))
    assert args["--use-megatron-fsdp"] is True
    assert args["--data-parallel-sharding-strategy"] == "optim_grads_params"
    assert "--use-distributed-optimizer" not in args


def test_megatron_uneven_first_and_last_stage():
    args = megatron_args(make_plan([5, 8, 8, 8, 3]))
    assert args["--decoder-first-pipeline-num-layers"] == "5"
    assert args["--decoder-last-pipeline-num-layers"] == "3"
    assert args["--num-layers"] == "32"
    assert "--pipeline-model-parallel-layout" not in args
    assert megatron_block_counts(args, 32, 5) == [5, 8, 8, 8, 3]
    two = megatron_args(make_plan([10, 6]))
    assert (two["--decoder-first-pipeline-num-layers"], two["--decoder-last-pipeline-num-layers"]) == ("10", "6")


def test_megatron_irregular_split_uses_the_layout():
    args = megatron_args(make_plan([3, 5, 4, 4]))
    assert args["--pipeline-model-parallel-layout"] == "Ettt|ttttt|tttt|ttttL"
    assert "--decoder-first-pipeline-num-layers" not in args


def test_megatron_standalone_embedding_stage_uses_the_layout():
    plan = make_plan([1, 3, 4])
    plan["stages"][0]["layers"] = ["embedding"]
    plan["stages"][1]["layers"] = names(0, 4)
    plan["model"]["layers"] = 8
    assert megatron_args(plan)["--pipeline-model-parallel-layout"] == "E|tttt|ttttL"


def test_megatron_virtual_stages():
    even = megatron_args(make_plan([2] * 8, vp=2))
    assert even["--pipeline-model-parallel-size"] == "4"
    assert even["--num-virtual-stages-per-pipeline-rank"] == "2"
    uneven = megatron_args(make_plan([1, 2, 2, 2, 2, 2, 2, 3], vp=2))
    assert uneven["--pipeline-model-parallel-layout"] == "Et|tt|tt|tt|tt|tt|tt|tttL"
    assert "--num-virtual-stages-per-pipeline-rank" not in uneven


def test_megatron_physical_stages_of_an_even_interleaving():
    plan = make_plan([2] * 8, vp=2)
    physical = []
    for rank in range(4):
        layers = plan["stages"][rank]["layers"] + plan["stages"][rank + 4]["layers"]
        physical.append({"index": rank, "layers": layers})
    plan["stages"] = physical
    assert megatron_args(plan)["--num-virtual-stages-per-pipeline-rank"] == "2"
    plan["stages"][0]["layers"], plan["stages"][1]["layers"] = (plan["stages"][1]["layers"],
                                                                plan["stages"][0]["layers"])
    with pytest.raises(SpecError, match="even interleaved split"):
        emit(plan, "megatron")


def test_megatron_rank_orders():
    assert "--use-tp-pp-dp-mapping" not in megatron_args(make_plan([4, 4], dp=2))
    args = megatron_args(make_plan([4, 4], dp=2, order="tp-cp-ep-pp-dp"))
    assert args["--use-tp-pp-dp-mapping"] is True
    # dimensions of degree 1 do not change the placement
    assert "--use-tp-pp-dp-mapping" not in megatron_args(make_plan([4, 4], dp=2, order="cp-tp-ep-dp-pp"))
    with pytest.raises(SpecError, match="rank_order = 'dp-tp-cp-ep-pp'"):
        emit(make_plan([4, 4], tp=2, dp=2, order="dp-tp-cp-ep-pp"), "megatron")


# -- DeepSpeed --------------------------------------------------------------------------

def test_deepspeed_keys():
    plan = make_plan([6, 10], tp=2, dp=4, zero=2, mbs=2, num_microbatches=16, recompute="full",
                     cp=2, ep=2, sp=True)
    ds = deepspeed(plan)
    assert ds["train_batch_size"] == 2 * 16 * 4
    assert ds["train_micro_batch_size_per_gpu"] == 2
    assert ds["gradient_accumulation_steps"] == 16
    assert ds["zero_optimization"] == {"stage": 2}
    assert ds["bf16"] == {"enabled": True} and ds["fp16"] == {"enabled": False}
    assert ds["tensor_parallel"] == {"autotp_size": 2}
    assert ds["pipeline"] == {"stages": 2, "activation_checkpoint_interval": 1}
    companion = ds["nest"]
    assert companion["pipeline"]["parts"] == [0, 7, 18]
    assert companion["pipeline"]["blocks_per_stage"] == [6, 10]
    assert companion["pipeline"]["first_layer"] == ["embedding", "block.6"]
    assert companion["pipeline"]["last_layer"] == ["block.5", "head"]
    assert (companion["context_parallel"], companion["expert_parallel"]) == (2, 2)
    assert companion["sequence_parallel"] is True


def test_deepspeed_uniform_pipeline_and_defaults():
    ds = deepspeed(make_plan([4, 4, 4, 4], dtype="fp16"))
    assert ds["pipeline"] == {"stages": 4, "partition": "uniform", "activation_checkpoint_interval": 0}
    assert ds["fp16"] == {"enabled": True} and ds["bf16"] == {"enabled": False}
    assert "tensor_parallel" not in ds
    assert ds["zero_optimization"] == {"stage": 0}
    assert "pipeline" not in deepspeed(make_plan([16]))


def test_deepspeed_rejects_interleaving():
    with pytest.raises(SpecError, match="vp = 2"):
        emit(make_plan([2] * 8, vp=2), "deepspeed")


# -- torchtitan ---------------------------------------------------------------------------

def test_torchtitan_pipeline_and_batches():
    plan = make_plan([3, 5], tp=2, dp=4, cp=2, zero=1, mbs=2, num_microbatches=8,
                     recompute="full")
    toml = titan(plan)
    p = toml["parallelism"]
    assert p["data_parallel_replicate_degree"] == 1
    assert p["data_parallel_shard_degree"] == 4
    assert p["fsdp_reshard_after_forward"] == "never"
    assert (p["tensor_parallel_degree"], p["pipeline_parallel_degree"]) == (2, 2)
    assert p["context_parallel_degree"] == 2 and p["expert_parallel_degree"] == 1
    assert p["pipeline_parallel_schedule"] == "1F1B"
    assert p["pipeline_parallel_microbatch_size"] == 2
    assert p["module_fqns_per_model_part"] == [
        ["tok_embeddings", "layers.0", "layers.1", "layers.2"],
        ["layers.3", "layers.4", "layers.5", "layers.6", "layers.7", "norm", "output"]]
    t = toml["training"]
    assert t["local_batch_size"] == 2 * 8  # the pipeline's micro-batches form the local batch
    assert t["global_batch_size"] == t["local_batch_size"] * 4
    assert t["seq_len"] == 4096 and t["mixed_precision_param"] == "bfloat16"
    assert toml["activation_checkpoint"]["mode"] == "full"


def test_torchtitan_data_parallel_modes_and_interleaving():
    ddp = titan(make_plan([16], dp=8, zero=0, mbs=4, num_microbatches=2))
    assert ddp["parallelism"]["data_parallel_replicate_degree"] == 8
    assert ddp["parallelism"]["data_parallel_shard_degree"] == 1
    assert "pipeline_parallel_schedule" not in ddp["parallelism"]
    # without pipelining torchtitan accumulates gradients: global = local x dp x steps
    assert ddp["training"]["local_batch_size"] == 4
    assert ddp["training"]["global_batch_size"] == 4 * 8 * 2
    fsdp = titan(make_plan([16], dp=8, zero=3))["parallelism"]
    assert (fsdp["data_parallel_shard_degree"], fsdp["fsdp_reshard_after_forward"]) == (8, "always")
    moe = titan(make_plan([16], dp=8, ep=4, zero=0))["parallelism"]
    assert (moe["data_parallel_replicate_degree"], moe["data_parallel_shard_degree"]) == (2, 4)
    assert moe["expert_parallel_degree"] == 4
    inter = titan(make_plan([2] * 8, vp=2))["parallelism"]
    assert inter["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert len(inter["module_fqns_per_model_part"]) == 8


def test_torchtitan_places_embedding_and_head_of_plans_without_them():
    plan = make_plan([4, 4])
    plan["stages"][0]["layers"].remove("embedding")
    plan["stages"][1]["layers"].remove("head")
    parts = titan(plan)["parallelism"]["module_fqns_per_model_part"]
    assert parts[0][0] == "tok_embeddings" and parts[1][-2:] == ["norm", "output"]
    assert megatron_args(plan)["--num-layers"] == "8"


def test_torchtitan_precisions():
    assert titan(make_plan([4], dtype="fp8"))["model"]["converters"] == ["float8"]
    assert titan(make_plan([4], dtype="fp32"))["training"]["mixed_precision_param"] == "float32"
    with pytest.raises(SpecError, match="fp16"):
        emit(make_plan([4], dtype="fp16"), "torchtitan")


# -- errors ------------------------------------------------------------------------------

def test_unknown_format():
    with pytest.raises(SpecError, match=r"emit = 'jax': unknown format \(known: megatron"):
        emit(make_plan([4]), "jax")


@pytest.mark.parametrize("fmt", FORMATS)
def test_bad_plans_are_rejected(fmt):
    plan = make_plan([4, 4])
    broken = copy.deepcopy(plan)
    del broken["parallelism"]
    with pytest.raises(SpecError, match="plan.parallelism"):
        emit(broken, fmt)
    broken = copy.deepcopy(plan)
    broken["job"]["global_batch"] += 1
    with pytest.raises(SpecError, match="job.global_batch"):
        emit(broken, fmt)
    broken = copy.deepcopy(plan)
    broken["stages"][1]["layers"].insert(0, "block.9")
    with pytest.raises(SpecError, match="plan.stages"):
        emit(broken, fmt)
    broken = copy.deepcopy(plan)
    broken["parallelism"]["tp"] = 0
    with pytest.raises(SpecError, match="tp = 0"):
        emit(broken, fmt)
