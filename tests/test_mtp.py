"""Multi-token prediction (DeepSeek-V3's MTP): its modules run with the output layer and
loss on the last pipeline stage, as Megatron-Core places them; each is a layer like the
last block plus ``eh_proj``, three norms and one more loss."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import nest
from nest.cost.compute import KernelModel
from nest.cost.model import BLOCK, HEAD, MOE, mtp_params, node_params, parameter_count
from nest.cost.nodes import NodeCostModel
from nest.frameworks import framework
from nest.inputs.hf import model_from_hf_config, read_hf_config
from nest.parallel import ConfigArrays, LayerConfig
from nest.presets.models import MODELS
from nest.specs import JobSpec, OptimizerSpec
DATA = Path(__file__).parent / "data" / "hf"

DSV3 = MODELS["deepseek-v3"]
PLAIN = replace(DSV3, mtp_layers=0)


def test_the_hf_config_gives_the_module_and_its_published_size():
    """README_WEIGHTS.md: a 671B main model and a module of "11.5B unique parameters"
    whose transformer layer is "identical to the Main Model hidden layers"; 685B as stored,
    the module repeating the 0.9B embedding and output head (nest counts each once)."""
    spec = model_from_hf_config(read_hf_config(DATA / "deepseek-v3.json"))
    assert spec.mtp_layers == 1
    module = parameter_count(spec) - parameter_count(replace(spec, mtp_layers=0))
    assert module == pytest.approx(11.5e9, rel=0.01)
    assert module == pytest.approx(sum(mtp_params(spec)))
    assert sum(mtp_params(spec)) - sum(node_params(spec, MOE, 1, False)) == pytest.approx(
        3 * spec.hidden + 2 * spec.hidden ** 2, abs=2)  # norms and eh_proj beside the layer
    stored = parameter_count(spec) + 2 * spec.vocab_size * spec.hidden
    assert stored == pytest.approx(685e9, rel=0.01)
    assert parameter_count(replace(spec, mtp_layers=0)) == 671_026_419_200 - 256 * 58


def _row(model, kind, config, job=None):
    job = job or JobSpec(1024, 4096)
    costs = NodeCostModel(model, job, KernelModel.for_job(nest.load_cluster("dgx-h100", devices=8).device, job))
    table = costs.table(kind, ConfigArrays.of([config]))
    return {k: np.asarray(v)[0] for k, v in table.items()}, costs


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_the_head_carries_its_modules_by_hand(recompute):
    """Head with D modules = (1 + D) losses + D x (the last block's kind + eh_proj, the
    embedding lookup and the norms); the expert all-to-alls are the module's."""
    config = LayerConfig(2, True, 1, recompute, True, 1, 64)
    head, costs = _row(DSV3, HEAD, config)
    plain, _ = _row(PLAIN, HEAD, config)
    layer, _ = _row(DSV3, MOE, config)
    n, h, e, tp = 4096, DSV3.hidden, 2, 2
    k = costs.k
    extras = k.gemm(n, h / tp, 2 * h) + k.stream(10 * n * h * e / tp, kernels=6)
    assert head["fwd_s"] == pytest.approx(2 * plain["fwd_s"] + layer["fwd_s"] + extras, rel=1e-9)
    assert head["ep_count"][0] == layer["ep_count"][0] and head["ep_bytes"][0] == layer["ep_bytes"][0]
    assert head["params_expert"] == layer["params_expert"]
    if recompute == "full":  # the module keeps its two inputs; the losses keep theirs
        assert head["act_bytes"] == 2 * plain["act_bytes"] + 2 * n * h * e // tp
        assert head["recompute_s"] == pytest.approx(2 * plain["recompute_s"] + layer["recompute_s"] + extras)
    else:
        assert head["act_bytes"] > 2 * plain["act_bytes"] + layer["act_bytes"]


def test_the_last_stage_keeps_an_embedding_for_the_modules():
    """Untied with MTP: the output layer and, off the embedding's stage, its own embedding."""
    vocab = DSV3.vocab_size * DSV3.hidden / 2
    on_stage, _ = node_params(DSV3, HEAD, 2, False, 64)
    off_stage, expert = node_params(DSV3, HEAD, 2, True, 64)
    dense, experts = mtp_params(DSV3, 2, 64)
    assert off_stage - on_stage == pytest.approx(vocab, abs=1)
    assert on_stage == pytest.approx(DSV3.hidden + vocab + dense, abs=1) and expert == pytest.approx(experts, abs=1)
    assert DSV3.head_needs_embedding and not MODELS["llama3-70b"].head_needs_embedding


def test_model_flops_count_the_modules_as_megatron_does():
    """Megatron-LM's count (training.py num_floating_point_operations): each module is a
    layer of the last block's kind, eh_proj (2h -> h) and one more logits GEMM."""
    config = LayerConfig(2, True, 1, "none", True, 1, 64)
    _, costs = _row(DSV3, HEAD, config)
    arrays = ConfigArrays.of([config])
    n, h = 4096, DSV3.hidden
    expected = (2 * costs.model_flops(HEAD, arrays, mtp=False)[0] + costs.model_flops(MOE, arrays)[0]
                + 3 * 2 * n * 2 * h * h / 2)
    assert costs.model_flops(HEAD, arrays)[0] == pytest.approx(expected, rel=1e-12)
    dense = replace(MODELS["llama3-8b"], mtp_layers=2)
    _, dense_costs = _row(dense, HEAD, config)
    block = dense_costs.model_flops(BLOCK, arrays)[0]
    assert dense_costs.model_flops(HEAD, arrays)[0] == pytest.approx(
        3 * dense_costs.model_flops(HEAD, arrays, mtp=False)[0] + 2 * (block + 3 * 2 * n * 2 * 4096 * 4096 / 2))


def test_megatron_launches_the_module_with_the_loss():
    cluster = nest.load_cluster("dgx-h100", devices=256)
    plan = nest.evaluate(DSV3, cluster, JobSpec(1024, 4096, framework="megatron"), tp=2, pp=4, dp=32, ep=64,
                         micro_batch=1, sp=True, zero=1, recompute="full")
    args = framework("megatron").emit(plan.to_dict()).splitlines()
    assert "--mtp-num-layers 1" in args
    layout = next(a for a in args if a.startswith("--pipeline-model-parallel-layout")).split()[1]
    assert layout.endswith("mL") and layout.count("m") == 1 and layout.count("t") == DSV3.num_layers


def test_megatron_refuses_modules_it_cannot_run():
    cluster = nest.load_cluster("dgx-h100", devices=8)
    learned = replace(MODELS["llama3-8b"], mtp_layers=1, position_embedding="learned")
    with pytest.raises(nest.SpecError, match="^framework = megatron: model.mtp_layers = 1: multi-token prediction "
                                             "runs with rotary positions only"):
        nest.evaluate(learned, cluster, JobSpec(64, 4096, framework="megatron"), tp=8, pp=1, dp=1, micro_batch=1)
    two = replace(DSV3, mtp_layers=2)
    with pytest.raises(nest.SpecError, match="the EP overlap .* runs with one MTP module at most"):
        nest.evaluate(two, nest.load_cluster("dgx-h100", devices=128),
                      JobSpec(1024, 4096, framework="megatron", overlap_moe_expert_parallel_comm=True),
                      tp=2, pp=1, dp=64, ep=64, micro_batch=1, sp=True, zero=1)


def test_torchtitan_030_has_no_module():
    with pytest.raises(nest.SpecError, match="^framework = torchtitan: model deepseek-v3"):
        nest.plan(DSV3, nest.load_cluster("dgx-h100", devices=256), JobSpec(1024, 4096, framework="torchtitan"))


def test_the_module_lengthens_the_last_stage():
    """DeepSeek-V3 on 1024 H100 as Megatron-Bridge runs it (layout Et|(tt|)*30mL): the last
    virtual stage holds the module and two losses, the step grows by more than the
    module's share of the compute."""
    cluster = nest.load_cluster("dgx-h100", devices=1024)
    config = dict(tp=2, pp=8, vp=4, dp=64, ep=64, micro_batch=1, sp=True, zero=1, recompute="mla_up_proj,mlp",
                  layers_per_stage=[2] + [2] * 30 + [1])
    job = JobSpec(8192, 4096, dtype="fp8", fp8_param_gather=True, optimizer=OptimizerSpec.of("adam", "bf16", "fp32"))
    with_mtp = nest.evaluate(DSV3, cluster, job, **config)
    without = nest.evaluate(PLAIN, cluster, job, **config)
    assert with_mtp.step_time_s > without.step_time_s * (1 + 1 / 61)
