"""Interleaved memory: the embedding (first node) and the output layer (last node) are
charged once to every position of their rank, not v times to their chunk; the check
still bounds every rank's real weights (the sum of its own chunks)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import nest
from nest.cost.pricing import price_candidate
from nest.cost.scenario import Scenario
from nest.dp.reference import stage_details
from nest.parallel import Candidate, LayerConfig
from nest.search.problems import problem as dp_problem

CASES = [  # model, devices, tp, pp, dp, vp
    ("llama2-13b", 16, 1, 4, 4, 10),
    ("llama2-70b", 64, 4, 4, 4, 20),
    ("gpt3-175b", 128, 4, 8, 4, 6),
    ("mixtral-8x7b", 64, 2, 4, 8, 2),
]


def _setup(model, devices, tp, pp, dp, vp):
    spec = nest.load_model(model)
    scn = Scenario(spec, nest.load_cluster("dgx-h100", devices=devices),
                   nest.JobSpec(global_batch=128, seq_len=4096))
    cfg = LayerConfig(tp, tp > 1, 1, "selective", spec.tied_embeddings and pp > 1, 1, 1)
    return scn, Candidate(cfg, pp, dp, vp, 1)


def _node_bytes(scn, cand):
    """Every node's parameter-state bytes on its rank (weights, gradients, optimizer)."""
    priced = price_candidate(scn, cand)
    dense, expert = (priced.col(name)[0][scn.kind_index] for name in ("params_dense", "params_expert"))
    return np.ceil(priced.sync["dense_bytes"][0] * dense + priced.sync["expert_bytes"][0] * expert)


@pytest.mark.parametrize("model,devices,tp,pp,dp,vp", CASES)
def test_charged_weights_bound_every_rank(model, devices, tp, pp, dp, vp):
    scn, cand = _setup(model, devices, tp, pp, dp, vp)
    problem = dp_problem(scn, [cand], capacity=1e30)
    nodes = _node_bytes(scn, cand)
    p_total = pp * vp
    rng = np.random.default_rng(0)
    splits = [np.sort(rng.choice(np.arange(1, scn.num_nodes), p_total - 1, replace=False)) for _ in range(20)]
    even = np.linspace(0, scn.num_nodes, p_total + 1).astype(int)[1:-1]
    for cuts in [even, *splits]:
        ends = [int(e) for e in cuts] + [scn.num_nodes]
        starts = [0] + ends[:-1]
        details = stage_details(problem, 0, ends)
        for d in range(pp):
            positions = range(d, p_total, pp)
            real = sum(nodes[starts[q]:ends[q]].sum() for q in positions)
            charged = max(float(problem.pos_mem_fixed[q])
                          + float(problem.cand_mem_per_param[0]) * float(problem.mem_params[0, starts[q]:ends[q]].sum())
                          for q in positions)
            assert real <= charged * (1 + 1e-12), (d, ends)
            assert charged <= max(details[q]["memory_bytes"] for q in positions)


@pytest.mark.parametrize("model,devices,tp,pp,dp,vp", CASES)
def test_embedding_and_output_layer_are_charged_once(model, devices, tp, pp, dp, vp):
    scn, cand = _setup(model, devices, tp, pp, dp, vp)
    problem = dp_problem(scn, [cand], capacity=1e30)
    nodes = _node_bytes(scn, cand)
    device = np.arange(pp * vp) % pp
    priced = price_candidate(scn, cand)
    head_acts = float(priced.col("act_bytes")[0][scn.kind_index[-1]])
    # the output layer's chunk holds one micro-batch at a time in Megatron's order, and its
    # logits buffer is only the last stage's
    expected = (np.where(device == 0, nodes[0], 0.0) + np.where(device == pp - 1, nodes[-1] + head_acts, 0.0))
    expected[-1] += priced.table.last_transient[0]
    np.testing.assert_array_equal(problem.pos_mem_fixed, expected)
    assert problem.mem_params[0, 0] == 0 and problem.mem_params[0, -1] == 0
    assert problem.act_bytes[0, -1] == 0
    np.testing.assert_array_equal(problem.mem_params[0, 1:-1], nodes[1:-1].astype(np.int64))


def test_without_interleaving_nothing_moves():
    scn, cand = _setup("llama2-13b", 16, 1, 4, 4, 1)
    problem = dp_problem(scn, [cand], capacity=1e30)
    # only the output layer's logits buffer, on the last stage
    last = price_candidate(scn, cand).table.last_transient[0]
    assert list(problem.pos_mem_fixed) == [0, 0, 0, last] and last > 0
    np.testing.assert_array_equal(problem.mem_params[0], _node_bytes(scn, cand).astype(np.int64))


def test_first_rank_holds_one_embedding_and_its_own_blocks():
    """llama2-13b on 16 GPUs, TP1 PP4 VP10 (NeMo's layout): rank 0's weights, gradients and
    optimizer state are its ten blocks and one embedding, exactly (its chunks: the
    embedding and a block, then one block each), and the DP's check of its chunks covers
    its exact peak."""
    scn, cand = _setup("llama2-13b", 16, 1, 4, 4, 10)
    nodes = _node_bytes(scn, cand)
    roomy = replace(scn.cluster, device=replace(scn.cluster.device, memory_bytes=1e12))
    split = [2] + [1] * 38 + [2]
    plan = nest.evaluate("llama2-13b", roomy, scn.job, tp=1, pp=4, dp=4, vp=10, micro_batch=1, zero=1,
                         sp=False, recompute="selective", layers_per_stage=split)
    rank0 = plan.memory[0]
    assert rank0.weights + rank0.gradients + rank0.optimizer == pytest.approx(nodes[0] + 10 * nodes[1], rel=1e-9)
    assert nodes[0] > 0.4 * nodes[1]  # the embedding is a large share of the chunk: v copies would overstate it
    problem = dp_problem(Scenario(scn.model, roomy, scn.job), [cand], capacity=1e30)
    details = stage_details(problem, 0, np.cumsum(split).tolist())
    assert max(details[q]["memory_bytes"] for q in range(0, 40, 4)) >= rank0.total * (1 - 1e-12)
