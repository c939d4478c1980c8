"""Memory options a user sets: gradient and optimizer-state dtypes, FP8 weights, the
device's reserve (nest's JobSpec, device files and the command line), each with the bytes
Megatron-Core keeps for it and the launch flags that mean it."""

from __future__ import annotations

import json

import pytest

import nest
from launch_readers import assert_round_trip
from nest.cli import main
from nest.inputs.loading import load_device
from nest.presets.models import MODELS
from nest.specs import JobSpec, OptimizerSpec

LLAMA = MODELS["llama3-8b"]
CLUSTER = nest.load_cluster("dgx-h100", devices=64)


@pytest.mark.parametrize("grad,state,expected", [
    ("fp32", "fp32", (4, 4, 8)), ("bf16", "fp32", (2, 4, 8)), ("fp32", "bf16", (4, 2, 4)),
    ("bf16", "bf16", (2, 2, 4)), ("bf16", "fp8", (2, 2, 2)),
])
def test_optimizer_layouts_are_megatron_cores(grad, state, expected):
    """(gradient, master, moments) bytes per parameter: the precision-aware optimizer keeps
    the master weight as a 16-bit remainder of the bf16 weight (store_param_remainders)."""
    opt = OptimizerSpec.of("adam", grad, state)
    assert (opt.grad_bytes, opt.master_bytes, opt.state_bytes) == expected
    assert (opt.grad_dtype, opt.state_dtype) == (grad, state if state != "fp16" else "bf16")


def test_sgd_has_no_moments_to_shrink():
    with pytest.raises(nest.SpecError, match="job.optimizer_state_dtype = 'bf16': applies to Adam's moments"):
        OptimizerSpec.of("sgd", "fp32", "bf16")


def _rank0(job, **config):
    plan = nest.evaluate(LLAMA, CLUSTER, job, micro_batch=1, recompute="full", **config)
    return plan, plan.memory[0]


def test_bytes_per_parameter_follow_the_state_layout():
    """ZeRO-1 over dp 64: weights 2, gradients (4 or 2), the sharded master and moments
    (12 or 6) / 64 per parameter -- read off the rank's breakdown."""
    params = None
    for grad, state, per_grad, per_state in (("fp32", "fp32", 4, 12), ("bf16", "bf16", 2, 6)):
        job = nest.job_spec(LLAMA, optimizer=OptimizerSpec.of("adam", grad, state))
        _, rank = _rank0(job, tp=1, pp=1, dp=64, zero=1)
        params = rank.weights / 2 if params is None else params
        assert rank.weights == pytest.approx(2 * params, rel=1e-12)
        assert rank.gradients == pytest.approx(per_grad * params, rel=1e-12)
        assert rank.optimizer == pytest.approx(per_state * params / 64, rel=1e-12)


def test_fp8_weights_and_their_cached_copies():
    """FP8 training keeps bf16 weights plus Transformer Engine's cached FP8 copies of the
    block weights (2 bytes each); with --fp8-param-gather the weights are FP8 (1 byte)."""
    bf16 = _rank0(nest.job_spec(LLAMA), tp=1, pp=1, dp=64, zero=1)[1]
    fp8 = _rank0(nest.job_spec(LLAMA, dtype="fp8"), tp=1, pp=1, dp=64, zero=1)[1]
    gathered = _rank0(nest.job_spec(LLAMA, dtype="fp8", fp8_param_gather=True), tp=1, pp=1, dp=64, zero=1)[1]
    params = bf16.weights / 2
    embedding_and_head = 2 * LLAMA.vocab_size * LLAMA.hidden + LLAMA.hidden  # and the final norm
    # every block weight is cached (its two norms' 2h weights too: 0.003% of a block)
    assert fp8.weights - bf16.weights == 2 * (params - embedding_and_head)
    assert gathered.weights == pytest.approx(params, rel=1e-12)
    with pytest.raises(nest.SpecError, match="job.fp8_param_gather = True: stores weights in FP8; needs dtype fp8"):
        JobSpec(global_batch=8, seq_len=8, fp8_param_gather=True)


def test_the_reserve_is_the_devices_and_can_be_set(tmp_path):
    device = tmp_path / "gpu.yaml"
    device.write_text("base: h100-sxm\nmemory_MiB: 97871\nreserved_GiB: 3.5\n")
    spec = load_device(str(device))
    assert spec.memory_bytes == 97871 * 2**20 and spec.reserved_bytes == 3.5 * 2**30
    _, rank = _rank0(nest.job_spec(LLAMA), tp=1, pp=1, dp=64, zero=3)
    assert rank.reserve == 2 * 2**30
    _, rank = _rank0(nest.job_spec(LLAMA, reserved_memory_bytes=2**29), tp=1, pp=1, dp=64, zero=3)
    assert rank.reserve == 2**29


def test_cli_options_reach_the_plan_and_the_megatron_launch(capsys):
    args = ["plan", "--model", "llama3-70b", "--cluster", "dgx-h100", "--devices", "256", "--grad-dtype", "bf16",
            "--optimizer-state-dtype", "bf16", "--dtype", "fp8", "--fp8-param-gather", "--reserved-gib", "1.5",
            "--framework", "megatron"]
    assert main(args + ["--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["job"]["optimizer_bytes"] == {"grad": 2, "master": 2, "state": 4}
    assert plan["job"]["fp8_param_gather"] and plan["job"]["reserved_memory_bytes"] == 1.5 * 2**30
    assert all(r["reserve_bytes"] == 1.5 * 2**30 for r in plan["memory"]["ranks"])
    assert plan["parallelism"]["zero"] >= 1  # the precision-aware optimizer needs the distributed one
    got = assert_round_trip(plan, "megatron")
    assert got["args"]["--exp-avg-dtype"] == "bf16" and got["args"]["--fp8-param-gather"] is True


@pytest.mark.parametrize("fw", ["deepspeed", "torchtitan"])
def test_frameworks_without_these_options_refuse_them(fw):
    job = nest.job_spec(LLAMA, framework=fw, optimizer=OptimizerSpec.of("adam", "bf16", "fp32"))
    with pytest.raises(nest.SpecError, match=f"^framework = {fw}: job.optimizer: .* keeps fp32 gradients"):
        nest.plan(LLAMA, CLUSTER, job)


def test_mxfp8_weights_hold_both_copies_and_gather_in_bf16():
    """MXFP8 (Blackwell): Transformer Engine's cached weight copy is row- and column-wise
    with an 8-bit scale per 32 values, 2 + 2/32 bytes per block weight; with
    --fp8-param-gather the weights themselves are that (TE module/base.py
    reset_parameters), and Megatron gathers them in bf16 into the gradient buffer it
    shares with them (param_and_grad_buffer.py shared_buffer), so their all-gathers and
    the optimizer's weight update move 2 bytes each, as without FP8 weights."""
    from nest.cost.scenario import Scenario

    gb200 = nest.load_cluster("gb200-nvl72", devices=72)

    def rank0(**options):
        job = nest.job_spec(LLAMA, global_batch=72, **options)
        plan = nest.evaluate(LLAMA, gb200, job, micro_batch=1, recompute="full", tp=1, pp=1, dp=72, zero=1)
        return plan, plan.memory[0], Scenario(LLAMA, gb200, job)

    bf16, bf16_rank, _ = rank0()
    delayed, delayed_rank, _ = rank0(dtype="fp8")
    mx, mx_rank, mx_scn = rank0(dtype="fp8", fp8_recipe="mxfp8")
    mx_pg, mx_pg_rank, mx_pg_scn = rank0(dtype="fp8", fp8_recipe="mxfp8", fp8_param_gather=True)
    delayed_pg, _, delayed_pg_scn = rank0(dtype="fp8", fp8_param_gather=True)
    params = bf16_rank.weights / 2
    blocks = params - (2 * LLAMA.vocab_size * LLAMA.hidden + LLAMA.hidden)  # not the embedding, head, final norm
    assert mx_rank.weights - bf16_rank.weights == pytest.approx((2 + 2 / 32) * blocks, rel=1e-12)
    assert delayed_rank.weights - bf16_rank.weights == pytest.approx(2 * blocks, rel=1e-12)
    assert mx_pg_rank.weights == pytest.approx((2 + 2 / 32) * params, rel=1e-12)
    assert mx_pg_rank.gradients == mx_rank.gradients
    assert (mx_scn.weight_bytes, mx_scn.gather_bytes, mx_scn.fp8_weight_cache_bytes) == (2, 2, 2 + 2 / 32)
    assert (mx_pg_scn.weight_bytes, mx_pg_scn.gather_bytes, mx_pg_scn.fp8_weight_cache_bytes) == (2 + 2 / 32, 2, 0)
    assert (delayed_pg_scn.weight_bytes, delayed_pg_scn.gather_bytes) == (1, 1)
    # the same traffic and compute with MXFP8 weights; delayed FP8 weights gather half the bytes
    assert mx_pg.step_time_s == mx.step_time_s
    assert delayed_pg.breakdown_s["dp_comm"] < delayed.breakdown_s["dp_comm"]
    assert mx.breakdown_s["dp_comm"] == bf16.breakdown_s["dp_comm"]


def test_mxfp8_plan_reaches_the_megatron_launch(capsys):
    """``--fp8-recipe mxfp8 --fp8-param-gather`` on Blackwell: the plan keeps the
    distributed optimizer (the path nest prices), and the launch names the recipe and
    gathers the weights through the gradient buffer; on Hopper the recipe is refused
    with exit code 2 and the closest recipe it has."""
    args = ["plan", "--model", "llama3-8b", "--cluster", "gb200-nvl72", "--devices", "72", "--dtype", "fp8",
            "--fp8-recipe", "mxfp8", "--fp8-param-gather", "--framework", "megatron"]
    assert main(args + ["--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["job"]["fp8_recipe"] == "mxfp8" and plan["parallelism"]["zero"] == 1
    got = assert_round_trip(plan, "megatron")
    assert got["args"]["--fp8-recipe"] == "mxfp8" and got["args"]["--reuse-grad-buf-for-mxfp8-param-ag"] is True
    # the report's job line names the recipe and the FP8 weights
    assert main(args) == 0
    assert "job: global batch 512 x seq 8192 tokens, fp8 (mxfp8 scaling, FP8 weights), for Megatron-LM" in \
        capsys.readouterr().out
    assert main(["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--devices", "64", "--dtype", "fp8",
                 "--fp8-recipe", "mxfp8"]) == 2
    assert capsys.readouterr().err.startswith("nest: error: job.fp8_recipe = 'mxfp8': device h100-sxm has no MXFP8 "
                                              "GEMMs")
