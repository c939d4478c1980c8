"""Baseline strategies: Megatron rules, topology-blind DP, seeded MCMC, given, nest."""

from dataclasses import replace

import pytest

import nest
from nest.presets.clusters import CLUSTERS
from nest.studies.baselines import (
    ALL_STRATEGIES,
    even_split,
    flat_cluster,
    manual,
    manual_config,
    manual_split,
    mcmc,
    plan_config,
    run_strategy,
    topology_blind,
)


@pytest.fixture(scope="module")
def results():
    """All strategies on a few (model, cluster) cases, computed once."""
    cases = [("gpt3-175b", "h100-spineleaf", 64), ("llama2-7b", "tpuv4-fattree", 256),
             ("mixtral-8x7b", "dgx-h100", 64)]
    out = {}
    for model, cluster, devices in cases:
        c = nest.load_cluster(cluster, devices=devices)
        out[(model, cluster, devices)] = {
            name: run_strategy(name, model, c, seed=1, budget=120)
            for name in ("manual", "topology-blind", "mcmc", "nest")}
    return out


def test_nest_is_never_slower_than_any_baseline(results):
    for case, by_name in results.items():
        best = by_name["nest"]
        assert best.feasible, case
        for name, result in by_name.items():
            assert result.feasible, (case, name, result.reason)
            assert best.plan.step_time_s <= result.plan.step_time_s * (1 + 1e-12), (case, name)
            # every baseline is costed on the real cluster: evaluate reproduces it exactly
            model, cluster, devices = case
            again = nest.evaluate(model, nest.load_cluster(cluster, devices=devices),
                                  **plan_config(result.plan))
            assert again.step_time_s == result.plan.step_time_s


def test_baselines_differ_where_the_network_matters(results):
    """On the paper's spine-leaf network at 64 devices nest beats the Megatron rules and the
    topology-blind plan strictly (the flat view misprices the 12.5 GiB/s tier)."""
    by_name = results[("gpt3-175b", "h100-spineleaf", 64)]
    nest_time = by_name["nest"].plan.step_time_s
    assert nest_time < by_name["manual"].plan.step_time_s / 1.5
    assert nest_time < by_name["topology-blind"].plan.step_time_s
    predicted = by_name["topology-blind"].info["predicted_step_time_s"]
    assert predicted != by_name["topology-blind"].plan.step_time_s


def test_manual_follows_megatron_rules():
    cluster = nest.load_cluster("h100-spineleaf", devices=64)
    # BERT-large fits one device: no model parallelism, all data parallel.
    kwargs, plan = manual_config("bert-large", cluster)
    assert (kwargs["tp"], kwargs["pp"], kwargs["dp"]) == (1, 1, 64)
    assert kwargs["zero"] == 1 and kwargs["micro_batch"] == 1
    # GPT-3 needs model parallelism: TP over the 8-GPU node, the smallest depth that fits,
    # layers split evenly (embedding with the first stage, head with the last).
    kwargs, plan = manual_config("gpt3-175b", cluster)
    tp, pp = kwargs["tp"], kwargs["pp"]
    assert tp == 8 and kwargs["sp"] and kwargs["vp"] == 1 and kwargs["cp"] == 1
    assert kwargs["dp"] == 64 // (tp * pp)
    assert kwargs["layers_per_stage"] == manual_split(96, pp) == [96 // pp + 1] + [96 // pp] * (pp - 2) + [96 // pp + 1]
    assert [len(s.layers) for s in plan.stages] == kwargs["layers_per_stage"]
    for smaller in (d for d in (1, 2, 4, 8) if d < pp):
        for recompute in ("none", "selective", "full"):
            with pytest.raises(nest.InfeasibleError):
                nest.evaluate("gpt3-175b", cluster, tp=8, pp=smaller, dp=64 // (8 * smaller),
                              micro_batch=1, sp=True, zero=1, recompute=recompute,
                              layers_per_stage=manual_split(96, smaller))
    # MoE: experts spread over as many ranks as divide them.
    kwargs, _ = manual_config("mixtral-8x7b", cluster)
    assert kwargs["ep"] == 8


def test_manual_reports_why_nothing_fits():
    cluster = CLUSTERS["dgx-a100"].sized(8)
    tiny = replace(cluster, device=replace(cluster.device, memory_bytes=8 * 2**30))
    result = manual("gpt3-175b", tiny)
    assert not result.feasible and result.plan is None
    assert "GiB" in result.reason and "fits" in result.reason


def test_flat_cluster_and_topology_blind():
    cluster = nest.load_cluster("h100-spineleaf", devices=128)
    flat = flat_cluster(cluster)
    assert [t.fanout for t in flat.tiers] == [t.fanout for t in cluster.tiers]
    assert len({t.bandwidth for t in flat.tiers}) == 1 and len({t.latency for t in flat.tiers}) == 1
    # pair-weighted: 7 pairs at the first tier, 24 at the second, 96 at the third
    weights = [7, 24, 96]
    expected = sum(w * t.bandwidth for w, t in zip(weights, cluster.tiers)) / 127
    assert flat.tiers[0].bandwidth == pytest.approx(expected)
    # On a network that is already flat, the topology-blind plan is nest's plan.
    uniform = flat_cluster(nest.load_cluster("dgx-h100", devices=64))
    blind = topology_blind("llama2-7b", uniform)
    own = nest.plan("llama2-7b", uniform)
    assert blind.plan.step_time_s == own.step_time_s
    assert blind.info["predicted_step_time_s"] == own.step_time_s


def test_mcmc_is_deterministic_per_seed():
    cluster = nest.load_cluster("dgx-h100", devices=64)
    a = mcmc("llama2-7b", cluster, seed=3, budget=80)
    b = mcmc("llama2-7b", cluster, seed=3, budget=80)
    assert a.feasible and b.feasible
    assert plan_config(a.plan) == plan_config(b.plan)
    assert a.plan.step_time_s == b.plan.step_time_s
    assert a.info == b.info and a.info["proposals"] == 80
    # it starts from the manual configuration and keeps the best state it visits
    assert a.plan.step_time_s <= manual("llama2-7b", cluster).plan.step_time_s
    more = mcmc("llama2-7b", cluster, seed=3, budget=200)
    assert more.plan.step_time_s <= a.plan.step_time_s


def test_given_and_registry():
    cluster = nest.load_cluster("dgx-h100", devices=64)
    config = dict(tp=8, pp=2, micro_batch=1, sp=True, zero=1, layers_per_stage=[17, 17])
    result = run_strategy("given", "llama2-7b", cluster, config=config)
    assert result.feasible and result.plan.parallelism["dp"] == 4  # the largest that fits
    direct = nest.evaluate("llama2-7b", cluster, dp=4, **config)
    assert result.plan.step_time_s == direct.step_time_s
    bad = run_strategy("given", "llama2-7b", cluster, config=dict(config, layers_per_stage=[1, 1]))
    assert not bad.feasible and "layers_per_stage" in bad.reason
    with pytest.raises(nest.SpecError):
        run_strategy("annealing", "llama2-7b", cluster)
    assert set(ALL_STRATEGIES) == {"manual", "topology-blind", "mcmc", "nest", "given"}


def test_even_split():
    assert even_split(10, 3) == [3, 4, 3]
    assert even_split(26, 4) == [6, 7, 7, 6]
    assert sum(even_split(98, 16)) == 98 and max(even_split(98, 16)) - min(even_split(98, 16)) <= 1


def test_flat_cluster_of_a_graph_drops_the_graph():
    """The topology-blind view of a graph cluster prices on one flat tier, not the graph."""
    graph = nest.load_cluster("h100-fattree", devices=64)
    flat = flat_cluster(graph)
    assert graph.is_graph and not flat.is_graph
    assert flat.num_devices == graph.num_devices
    assert len({(t.bandwidth, t.latency, t.oversubscription) for t in flat.tiers}) == 1
