"""Launch configurations round-trip: the emitted Megatron-LM arguments, DeepSpeed config and
torchtitan command line, read back by each framework's reading of them (launch_readers),
give the plan's degrees, batch, split, precision and memory semantics (ZeRO stage,
recomputation) -- for every preset model under every framework that can launch it."""

from __future__ import annotations

import copy
import re
import subprocess
from dataclasses import asdict, replace

import pytest

import nest
from launch_readers import assert_round_trip
from nest.errors import RuleError, SpecError
from nest.frameworks import framework
from nest.frameworks.torchtitan import registry_entry
from nest.parallel import DEFAULT_ORDER
from nest.presets.models import MODELS
from nest.report.export import FORMATS, emit, launch_notes

# deepseek-v3 trains with its multi-token prediction module, which torchtitan 0.3.0 has not
TORCHTITAN_MODELS = {"llama3-8b", "llama3-70b", "qwen3-30b-a3b"}


def _plan(model: str, preset: str, devices: int, fw: str, **job) -> dict:
    spec = MODELS[model]
    return nest.plan(spec, nest.load_cluster(preset, devices=devices),
                     nest.job_spec(spec, framework=fw, **job)).to_dict()


# -- every preset under every framework ------------------------------------------------------

SIZES = (("dgx-h100", 64), ("dgx-h100", 512), ("dgx-a100", 2048))
FAST = {("llama3-70b", 512, "megatron"), ("mixtral-8x7b", 64, "deepspeed"), ("llama3-8b", 64, "torchtitan"),
        ("gpt-1.7b", 64, "megatron"), ("qwen3-30b-a3b", 64, "torchtitan"), ("llama2-7b", 64, "deepspeed")}
CASES = [pytest.param(model, preset, devices, fw, id=f"{model}-{devices}-{fw}",
                      marks=() if (model, devices, fw) in FAST else pytest.mark.slow)
         for model in MODELS for preset, devices in SIZES for fw in FORMATS]


@pytest.mark.parametrize("model,preset,devices,fw", CASES)
def test_every_preset_round_trips(model, preset, devices, fw):
    if fw == "torchtitan" and model not in TORCHTITAN_MODELS:
        with pytest.raises(SpecError, match=f"^framework = torchtitan: model {model}: torchtitan 0.3.0 launches"):
            _plan(model, preset, devices, fw)
        return
    try:
        plan = _plan(model, preset, devices, fw)
    except nest.InfeasibleError:
        pytest.skip(f"{model} does not fit {devices} devices under {fw}")
    assert_round_trip(plan, fw)


def test_the_registry_models_are_the_presets_torchtitan_launches():
    assert {name for name, m in MODELS.items() if registry_entry(asdict(m))} == TORCHTITAN_MODELS
    assert registry_entry(asdict(replace(MODELS["deepseek-v3"], mtp_layers=0))) == ("deepseek_v3", "deepseek_v3_671b")


def test_long_context_megatron_plan_uses_context_parallelism_and_its_mapping():
    plan = _plan("llama3-8b", "dgx-h100", 64, "megatron", seq_len=65536, global_batch=64)
    assert plan["parallelism"]["cp"] > 1
    got = assert_round_trip(plan, "megatron")
    assert got["args"]["--max-position-embeddings"] == "65536"


def test_interleaved_megatron_plan_round_trips():
    plan = nest.evaluate("gpt3-175b", nest.load_cluster("dgx-a100", devices=1024),
                         nest.job_spec(MODELS["gpt3-175b"], framework="megatron"), tp=8, pp=8, vp=4, dp=16,
                         micro_batch=1, sp=True, zero=1, recompute="selective").to_dict()
    assert plan["parallelism"]["vp"] == 4
    assert len(assert_round_trip(plan, "megatron")["blocks"]) == plan["parallelism"]["pp"] * plan["parallelism"]["vp"]


# -- memory semantics of fixed configurations --------------------------------------------------

CLUSTER = nest.load_cluster("dgx-h100", devices=64)
LLAMA = MODELS["llama3-8b"]


def _evaluate(fw: str, **config) -> dict:
    config = {"micro_batch": 1, "recompute": "none", **config}
    return nest.evaluate(LLAMA, CLUSTER, nest.job_spec(LLAMA, framework=fw), **config).to_dict()


@pytest.mark.parametrize("zero,strategy", [(2, "optim_grads"), (3, "optim_grads_params")])
def test_megatron_zero2_and_zero3_are_megatron_fsdp(zero, strategy):
    plan = _evaluate("megatron", tp=2, pp=1, dp=32, sp=True, zero=zero)
    got = assert_round_trip(plan, "megatron")
    assert got["args"]["--data-parallel-sharding-strategy"] == strategy
    assert launch_notes(plan, "megatron")[1].startswith("unset CUDA_DEVICE_MAX_CONNECTIONS")


def test_megatron_zero1_is_the_distributed_optimizer_and_recompute_flags():
    plan = _evaluate("megatron", tp=2, pp=4, dp=8, sp=True, zero=1, recompute="full")
    got = assert_round_trip(plan, "megatron")
    assert got["args"]["--use-distributed-optimizer"] is True and "--use-megatron-fsdp" not in got["args"]
    assert launch_notes(plan, "megatron") == [f"launch configuration for {framework('megatron').version}",
                                              "export CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron-LM requires it for "
                                              "tensor or context parallelism before Blackwell)"]
    selective = assert_round_trip(_evaluate("megatron", tp=2, pp=4, dp=8, sp=True, recompute="selective"),
                                  "megatron")
    assert selective["args"]["--recompute-granularity"] == "selective" and "--recompute-method" not in \
        selective["args"]


def test_megatron_uneven_split_is_its_layout():
    plan = _evaluate("megatron", tp=2, pp=4, dp=8, sp=True, layers_per_stage=[7, 9, 9, 9])
    assert assert_round_trip(plan, "megatron")["args"]["--pipeline-model-parallel-layout"] == \
        "E" + "t" * 6 + "|" + "t" * 9 + "|" + "t" * 9 + "|" + "t" * 8 + "L"


def test_megatron_architecture_flags_of_moe_and_mla():
    plan = _plan("deepseek-v3", "dgx-h100", 2048, "megatron")
    args = assert_round_trip(plan, "megatron")["args"]
    assert args["--multi-latent-attention"] is True and args["--kv-lora-rank"] == "512"
    assert args["--q-lora-rank"] == "1536" and args["--qk-pos-emb-head-dim"] == "64"
    assert args["--moe-layer-freq"] == "[" + ",".join(["0"] * 3 + ["1"] * 58) + "]"
    assert args["--moe-router-topk"] == "8" and args["--moe-shared-expert-intermediate-size"] == "2048"
    # always given for a MoE model (Megatron's default is tp): the plan's expert TP
    assert args["--expert-tensor-parallel-size"] == str(plan["parallelism"]["expert_tp"])


def test_deepspeed_batch_is_derived_from_its_own_data_parallel_size():
    plan = _evaluate("deepspeed", tp=2, pp=1, dp=32, zero=2)
    got = assert_round_trip(plan, "deepspeed")
    assert got["tp"] == 2 and got["zero"] == 2
    piped = assert_round_trip(_evaluate("deepspeed", tp=1, pp=4, dp=16, zero=1, recompute="full"), "deepspeed")
    assert piped["recompute"] == "full" and piped["pp"] == 4


def test_torchtitan_modes_round_trip():
    fsdp = _evaluate("torchtitan", tp=1, pp=1, dp=64, zero=3)
    assert assert_round_trip(fsdp, "torchtitan")["zero"] == 3
    ddp = _evaluate("torchtitan", tp=2, pp=4, dp=8, sp=True, zero=0, recompute="full")
    got = assert_round_trip(ddp, "torchtitan")
    assert got["recompute"] == "full" and got["vp"] == 1
    inter = _evaluate("torchtitan", tp=2, pp=2, dp=16, sp=True, zero=0, vp=4)
    assert assert_round_trip(inter, "torchtitan")["vp"] == 4
    assert "--parallelism.pipeline_parallel_layers_per_stage" in emit(inter, "torchtitan")


# -- plans a framework cannot launch -----------------------------------------------------------

def test_emit_refuses_a_plan_of_another_framework_with_the_rule():
    plan = _evaluate("any", tp=2, pp=4, dp=8, sp=True, zero=2)
    with pytest.raises(RuleError, match="^framework = megatron: fsdp-without-pipeline: "):
        emit(plan, "megatron")
    with pytest.raises(RuleError, match="^framework = deepspeed: zero-with-pipeline: "):
        emit(plan, "deepspeed")


def test_emit_needs_the_architecture():
    plan = _evaluate("megatron", tp=1, pp=1, dp=64, zero=3)
    plan["model"]["spec"] = None
    with pytest.raises(SpecError, match="^plan.model.spec: missing; a launch configuration needs"):
        emit(plan, "megatron")


def test_unknown_format():
    with pytest.raises(SpecError, match=r"emit = 'jax': unknown format \(known: megatron"):
        emit(_evaluate("megatron", tp=1, pp=1, dp=64, zero=3), "jax")


@pytest.mark.parametrize("fmt", FORMATS)
def test_broken_documents_are_rejected(fmt):
    plan = _evaluate(fmt, tp=2, pp=2, dp=16, sp=fmt != "deepspeed", zero=1 if fmt != "torchtitan" else 0)
    emit(plan, fmt)
    broken = copy.deepcopy(plan)
    del broken["parallelism"]
    with pytest.raises(SpecError, match="plan.parallelism"):
        emit(broken, fmt)
    broken = copy.deepcopy(plan)
    broken["job"]["global_batch"] += 1
    with pytest.raises(SpecError, match="job.global_batch"):
        emit(broken, fmt)
    broken = copy.deepcopy(plan)
    broken["stages"][1]["layers"].insert(0, "block.99")
    with pytest.raises(SpecError, match="plan.stages"):
        emit(broken, fmt)
    broken = copy.deepcopy(plan)
    broken["parallelism"]["tp"] = 0
    with pytest.raises(SpecError, match="tp = 0"):
        emit(broken, fmt)
    broken = copy.deepcopy(plan)
    broken["parallelism"]["recompute"] = "attention"
    with pytest.raises(SpecError, match=r"^parallelism.recompute = 'attention': must be one of none, selective, "
                                        r"full, mlp, moe_act, layernorm,moe_act, "):
        emit(broken, fmt)


# -- the rankfile ------------------------------------------------------------------------------

def test_rankfile_launch_binds_each_rank_to_its_gpu(tmp_path):
    """The header's mpirun recipe, run for each rank as Open MPI would start it, gives
    the rank exactly its GPU (CUDA_VISIBLE_DEVICES) and local rank 0."""
    plan = _evaluate("any", tp=2, pp=2, dp=16, sp=True, rank_order=DEFAULT_ORDER)
    text = emit(plan, "hostfile")
    path = tmp_path / "ranks"
    path.write_text(text + "\n")
    recipe = next(line for line in text.splitlines() if "mpirun" in line)
    command = re.search(r"sh -c '(.*)'$", recipe).group(1)
    command = command.replace("THIS_FILE", str(path)).replace("COMMAND", 'echo "$CUDA_VISIBLE_DEVICES $LOCAL_RANK"')
    for rank in plan["placement"]["ranks"][:12]:
        out = subprocess.run(["sh", "-c", command], env={"OMPI_COMM_WORLD_RANK": str(rank["rank"]), "PATH": "/usr/bin:/bin"},
                             capture_output=True, text=True, check=True).stdout
        assert out.split() == [str(rank["slot"]), "0"]
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert lines == [f"rank {r['rank']}={r['host']} slot={r['slot']}" for r in plan["placement"]["ranks"]]


def test_megatron_recompute_modules():
    plan = nest.evaluate("qwen3-30b-a3b", nest.load_cluster("dgx-h100", devices=64),
                         nest.job_spec(MODELS["qwen3-30b-a3b"], framework="megatron"), tp=1, pp=2, dp=32, ep=8,
                         micro_batch=1, zero=1, recompute="layernorm,moe_act").to_dict()
    got = assert_round_trip(plan, "megatron")
    assert got["args"]["--recompute-granularity"] == "selective"
    assert got["args"]["--recompute-modules"] == "layernorm moe_act"
    with pytest.raises(RuleError, match="^framework = deepspeed: no-selective-recompute: .* no selective or module"):
        emit(plan, "deepspeed")
