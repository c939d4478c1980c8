"""Pipeline orders and the exact activation peak (nest.schedule.order, nest.schedule.memory)
against a transcription of Megatron-Core's own schedule code and a brute-force replay; the
stage DP's memory check against the exact peak; the memory breakdown of plans."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

import nest
from nest.cost.pricing import price_candidate
from nest.cost.scenario import Scenario
from nest.dp.reference import stage_details
from nest.parallel import Candidate, LayerConfig
from nest.report.text import render
from nest.schedule.memory import device_memory, live_summary, peak_activations
from nest.schedule.order import device_ops
from nest.search.problems import problem as dp_problem

# -- Megatron-Core core_v0.14.0, megatron/core/pipeline_parallel/schedules.py, transcribed --

def megatron_schedule_table(num_microbatches, num_model_chunks, group):
    """``get_schedule_table``."""
    table = []
    for low in range(0, num_microbatches, group):
        high = num_microbatches if low + group >= num_microbatches else low + group
        table.extend((mb, chunk) for chunk in range(num_model_chunks) for mb in range(low, high))
    return table


def megatron_warmup(pp, rank, vp, num_microbatches):
    """``get_pp_rank_microbatches`` (training, no MoE overlap)."""
    total = num_microbatches * vp
    warmup = pp - rank - 1 if vp == 1 else (pp - rank - 1) * 2 + (vp - 1) * pp
    return min(warmup, total)


def megatron_order(pp, rank, vp, num_microbatches):
    """``convert_schedule_table_to_order``: +i forward of chunk i - 1, -i backward of chunk
    i - 1 (a virtual micro-batch of chunk c is backward through chunk v - 1 - c, code
    c - v), with the micro-batch of each virtual micro-batch."""
    table = megatron_schedule_table(num_microbatches, vp, pp)
    warmup = megatron_warmup(pp, rank, vp, num_microbatches)
    forward = [(chunk + 1, mb) for mb, chunk in table]
    backward = [(chunk - vp, mb) for mb, chunk in table]
    order = forward[:warmup]
    for i in range(warmup, len(forward)):
        order.append(forward[i])
        order.append(backward[i - warmup])
    if warmup > 0:
        order.extend(backward[-warmup:])
    return order


def brute_force_peak(pp, rank, vp, m, chunk_bytes):
    """Replay the transcribed order op by op; the largest live bytes after any op."""
    live, best = [0] * vp, 0.0
    for code, _ in megatron_order(pp, rank, vp, m):
        if code > 0:
            live[code - 1] += 1  # forward of chunk code - 1
        else:
            live[-code - 1] -= 1  # backward of chunk -code - 1
        assert min(live) >= 0
        best = max(best, sum(n * chunk_bytes[c * pp + rank] for c, n in enumerate(live)))
    assert live == [0] * vp
    return best


def _cases(seed, count):
    rng = random.Random(seed)
    for _ in range(count):
        pp = rng.randint(1, 8)
        vp = 1 if pp == 1 or rng.random() < 0.3 else rng.randint(2, 5)
        m = rng.randint(1, 3 * pp) if vp == 1 else pp * rng.randint(1, 4)
        yield pp, vp, m, rng


def test_orders_are_megatrons():
    for pp, vp, m, _ in _cases(0, 300):
        for rank in range(pp):
            forward, chunk, micro = device_ops(rank, pp, vp, m)
            ours = [((1 if f else -1) * (int(c) + 1), int(j)) for f, c, j in zip(forward, chunk, micro)]
            assert ours == megatron_order(pp, rank, vp, m), (pp, vp, m, rank)


def test_peak_equals_a_brute_force_replay():
    """Random pipelines (1F1B with m below, at and above p; interleaved), uneven chunks."""
    for pp, vp, m, rng in _cases(1, 300):
        chunk_bytes = [rng.choice([0.0, rng.uniform(0, 10), 1e3 * rng.random()]) for _ in range(pp * vp)]
        peaks, at_peak = peak_activations(pp, vp, m, chunk_bytes)
        for rank in range(pp):
            assert peaks[rank] == pytest.approx(brute_force_peak(pp, rank, vp, m, chunk_bytes), rel=1e-12, abs=1e-9)
            own = [chunk_bytes[c * pp + rank] for c in range(vp)]
            assert peaks[rank] == pytest.approx(float(np.dot(at_peak[rank], own)), rel=1e-12, abs=1e-9)


def test_live_counts_match_the_classic_forms():
    """1F1B stage d of p holds min(p - d, m); an interleaved rank 2 (p - d - 1) + (v - 1) p
    + 1 (capped at m v); the last rank's last chunk (the output layer) never more than one."""
    for pp, vp, m, _ in _cases(2, 200):
        summary = live_summary(pp, vp, m)
        for d in range(pp):
            expected = min(pp - d, m) if vp == 1 else min(2 * (pp - d - 1) + (vp - 1) * pp + 1, m * vp)
            assert summary.total[d] == expected, (pp, vp, m, d)
        assert summary.per_chunk[-1, -1] == 1


# -- the stage DP's check against the exact peak --------------------------------------------

CASES = [("llama3-8b", 32, 1, 4, 8, 2, 8), ("llama3-70b", 64, 4, 4, 4, 5, 16), ("gpt3-175b", 128, 4, 8, 4, 6, 8),
         ("mixtral-8x7b", 64, 2, 4, 8, 2, 8), ("llama3-70b", 64, 4, 8, 2, 1, 16)]


def _setup(model, devices, tp, pp, dp, vp, m):
    spec = nest.load_model(model)
    scn = Scenario(spec, nest.load_cluster("dgx-h100", devices=devices), nest.JobSpec(global_batch=m * dp,
                                                                                         seq_len=4096))
    ep = 8 if spec.is_moe else 1
    cand = Candidate(LayerConfig(tp, tp > 1, 1, "none", spec.tied_embeddings and pp > 1, 1, ep), pp, dp, vp, 1)
    return scn, cand


@pytest.mark.parametrize("model,devices,tp,pp,dp,vp,m", CASES)
def test_dp_check_is_the_exact_peak_for_alike_chunks(model, devices, tp, pp, dp, vp, m):
    """Chunks of alike blocks (Megatron's even layouts): the DP's check of a rank's chunks
    is its exact peak, up to the embedding's token ids it charges at the rank's count; on
    random uneven splits the check stays above the exact peak (v copies of the fullest
    chunk bound the rank's chunks)."""
    scn, cand = _setup(model, devices, tp, pp, dp, vp, m)
    problem = dp_problem(scn, [cand], capacity=1e30)
    priced = price_candidate(scn, cand)
    stages, blocks = pp * vp, scn.num_nodes - 2
    even = [blocks // stages] * stages
    for k in range(blocks % stages):
        even[k] += 1
    even[0] += 1
    even[-1] += 1
    splits = [even]
    rng = np.random.default_rng(3)
    for _ in range(10):
        cuts = np.sort(rng.choice(np.arange(1, scn.num_nodes), stages - 1, replace=False))
        splits.append(np.diff([0, *cuts, scn.num_nodes]).tolist())
    for layers in splits:
        details = stage_details(problem, 0, np.cumsum(layers).tolist())
        memory = device_memory(priced, 0, layers)
        for d in range(pp):
            checked = max(details[q]["memory_bytes"] for q in range(d, stages, pp))
            assert checked >= memory[d].total * (1 - 1e-12), (layers, d)
            if layers is even and len(set(layers[1:-1])) <= 1:
                assert checked <= memory[d].total * 1.01, (layers, d)


def test_plans_fit_at_their_exact_peak_and_report_it():
    for model, preset, devices in (("llama3-70b", "dgx-h100", 512), ("deepseek-v3", "dgx-h100", 2048),
                                   ("gpt3-175b", "dgx-a100", 1024), ("qwen3-30b-a3b", "dgx-h100", 64)):
        plan = nest.plan(model, nest.load_cluster(preset, devices=devices))
        doc = plan.to_dict()
        ranks = doc["memory"]["ranks"]
        assert len(ranks) == plan.parallelism["pp"]
        for r in ranks:
            parts = ("weights", "gradients", "optimizer", "activations", "transient", "reserve")
            assert r["total_bytes"] == pytest.approx(sum(r[f"{p}_bytes"] for p in parts), rel=1e-12)
            assert r["total_bytes"] <= r["capacity_bytes"]
            assert len(r["live_micro_batches"]) == plan.parallelism["vp"]
        assert doc["memory_per_device_bytes"]["max"] == max(r["total_bytes"] for r in ranks)
        assert ranks[-1]["transient_bytes"] >= ranks[0]["transient_bytes"]  # the logits are the last rank's
        peak = plan.peak_memory
        assert f"(pipeline rank {peak.rank} at its activation peak)" in render(plan)


def test_evaluate_refuses_a_split_whose_exact_peak_does_not_fit():
    """A split the DP's check passes but whose rank does not fit at its exact peak is
    refused with the rank's parts (constructed with a capacity between the two)."""
    scn, cand = _setup("deepseek-v3", 256, 2, 8, 16, 2, 16)
    priced = price_candidate(scn, cand)
    problem = dp_problem(scn, [cand], capacity=1e30)
    # found by a random search: the largest check of a rank's chunks, v copies of one,
    # is just below the rank's exact peak when its chunks mix dense and MoE blocks
    layers = [1, 10, 3, 7, 1, 1, 5, 5, 2, 8, 6, 2, 4, 1, 5, 2]
    details = stage_details(problem, 0, np.cumsum(layers).tolist())
    exact = max(d.total for d in device_memory(priced, 0, layers))
    checked = max(d["memory_bytes"] for d in details)
    assert checked < exact
    cluster = replace(scn.cluster, device=replace(scn.cluster.device, memory_bytes=(checked + exact) / 2))
    with pytest.raises(nest.InfeasibleError, match=r"^pipeline rank \d+ needs [\d.]+ GiB at its activation peak"):
        nest.evaluate(scn.model, cluster, scn.job, tp=2, pp=8, dp=16, vp=2, micro_batch=1, sp=True, zero=1, ep=8,
                      layers_per_stage=layers)
