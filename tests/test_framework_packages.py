"""The frameworks' own code accepts what nest emits (optional: needs the ``frameworks``
extra, ``pip install '.[frameworks]'``; never part of the default test command, run it
with ``python -m pytest -m frameworks tests/test_framework_packages.py``).

DeepSpeed's ``DeepSpeedConfig`` (with an mpu that reports the plan's data-parallel size,
as Megatron-DeepSpeed's does, and with DeepSpeed's own pipeline grid) and torchtitan's
``ConfigManager`` parse the emitted configuration; the values they derive are the plan's."""

from __future__ import annotations

import contextlib
import json
import os
import shlex

import pytest

import nest
from nest.presets.models import MODELS
from nest.report.export import emit

pytestmark = pytest.mark.frameworks

PLANS = [("llama3-8b", "dgx-h100", 64), ("llama3-70b", "dgx-h100", 512), ("mixtral-8x7b", "dgx-h100", 256),
         ("gpt3-175b", "dgx-a100", 1024), ("qwen3-30b-a3b", "dgx-h100", 64)]


def _plan(model: str, preset: str, devices: int, fw: str, **config) -> dict:
    spec = MODELS[model]
    cluster = nest.load_cluster(preset, devices=devices)
    job = nest.job_spec(spec, framework=fw)
    if config:
        return nest.evaluate(spec, cluster, job, **config).to_dict()
    return nest.plan(spec, cluster, job).to_dict()


@contextlib.contextmanager
def _fake_world(world: int):
    """torch.distributed (and deepspeed.comm) on torch's in-process fake backend, rank 0
    of ``world`` ranks: what DeepSpeedConfig reads its world size from."""
    import deepspeed
    import torch.distributed as tdist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    os.environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": str(world)})
    tdist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        deepspeed.init_distributed(dist_backend="fake")
        yield
    finally:
        tdist.destroy_process_group()


class _Mpu:
    """A Megatron-style mpu with the plan's data- and model-parallel sizes."""

    def __init__(self, dp: int, tp: int):
        self.dp, self.tp = dp, tp

    def get_data_parallel_world_size(self):
        return self.dp

    def get_model_parallel_world_size(self):
        return self.tp


DEEPSPEED = [(*p, {}) for p in PLANS if p[0] != "qwen3-30b-a3b"] + [
    ("llama3-70b", "dgx-h100", 128, {"tp": 1, "pp": 8, "dp": 16, "micro_batch": 1, "zero": 1, "recompute": "full"}),
    ("llama3-8b", "dgx-h100", 64, {"tp": 2, "pp": 1, "dp": 32, "micro_batch": 1, "zero": 2})]


@pytest.mark.parametrize("model,preset,devices,config", DEEPSPEED, ids=[f"{m}-{d}-{len(c)}" for m, _, d, c in DEEPSPEED])
def test_deepspeed_config_accepts_the_emitted_config(model, preset, devices, config):
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.config import DeepSpeedConfig

    plan = _plan(model, preset, devices, "deepspeed", **config)
    p = plan["parallelism"]
    emitted = json.loads(emit(plan, "deepspeed"))
    with _fake_world(plan["devices_used"]):
        parsed = DeepSpeedConfig(emitted, mpu=_Mpu(p["dp"], p["tp"]))
        # without an mpu DeepSpeed counts every rank as data parallel: the config has no
        # train_batch_size for it to reject, and the count is the plan's without TP or PP
        alone = DeepSpeedConfig(emitted)
    assert alone.train_batch_size == plan["job"]["global_batch"] * p["tp"] * p["pp"]
    assert parsed.train_batch_size == plan["job"]["global_batch"]
    assert parsed.train_micro_batch_size_per_gpu == p["micro_batch"]
    assert parsed.gradient_accumulation_steps == p["num_microbatches"]
    assert parsed.zero_optimization_stage == p["zero"]
    assert parsed.bfloat16_config.enabled == (plan["job"]["dtype"] == "bf16")
    if p["pp"] > 1:
        from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology

        topology = PipeModelDataParallelTopology(num_pp=p["pp"], num_mp=p["tp"],
                                                 num_dp=plan["devices_used"] // (p["pp"] * p["tp"]))
        assert topology.get_dim("data") == p["dp"]
        assert parsed.pipeline["activation_checkpoint_interval"] == (1 if p["recompute"] == "full" else 0)
    else:
        assert parsed.tensor_parallel_config.autotp_size == (p["tp"] if p["tp"] > 1 else 0)


TORCHTITAN = [("llama3-8b", "dgx-h100", 64, {}), ("llama3-70b", "dgx-h100", 512, {}),
              ("qwen3-30b-a3b", "dgx-h100", 64, {}),
              ("llama3-70b", "dgx-h100", 64, {"tp": 8, "pp": 4, "dp": 2, "sp": True, "zero": 0, "micro_batch": 1,
                                              "recompute": "full", "vp": 2}),
              ("llama3-8b", "dgx-h100", 64, {"tp": 2, "pp": 1, "dp": 16, "cp": 2, "sp": True, "zero": 3,
                                             "micro_batch": 1})]


@pytest.mark.parametrize("model,preset,devices,config", TORCHTITAN, ids=[f"{m}-{d}-{len(c)}" for m, _, d, c in TORCHTITAN])
def test_torchtitan_config_manager_accepts_the_emitted_command_line(model, preset, devices, config):
    pytest.importorskip("torchtitan")
    from torchtitan.config import ConfigManager

    plan = _plan(model, preset, devices, "torchtitan", **config)
    p = plan["parallelism"]
    tokens = shlex.split(emit(plan, "torchtitan").replace("\\\n", " "))
    parsed = ConfigManager().parse_args(tokens)
    par, training = parsed.parallelism, parsed.training
    assert (par.tensor_parallel_degree, par.pipeline_parallel_degree, par.context_parallel_degree,
            par.expert_parallel_degree) == (p["tp"], p["pp"], p["cp"], p["ep"])
    assert par.data_parallel_replicate_degree * par.data_parallel_shard_degree == p["dp"]
    assert (par.data_parallel_shard_degree > 1) == (p["zero"] == 3)
    assert training.global_batch_size == plan["job"]["global_batch"] and training.seq_len == plan["job"]["seq_len"]
    if p["pp"] > 1:
        assert par.pipeline_parallel_microbatch_size == p["micro_batch"]
        assert training.local_batch_size == p["micro_batch"] * p["num_microbatches"]
    from torchtitan.distributed.activation_checkpoint import FullAC

    if p["recompute"] == "full":
        assert isinstance(parsed.activation_checkpoint, FullAC.Config)
    else:
        assert parsed.activation_checkpoint is None
