"""Planning on graph clusters: graph prices drive the search, its bounds stay below the
exact objective, the plan is the exhaustive optimum, and graph forms of the hierarchical
presets plan exactly like the tiers."""

import math
from dataclasses import replace

import networkx as nx
import numpy as np
import pytest

import nest
from nest.cost.scenario import Scenario
from nest.network import generators, routing
from nest.network import graph as graph_net
from nest.parallel import RANK_ORDERS, SpaceLimits
from nest.presets.models import MODELS
from nest.specs import JobSpec, ModelSpec
from planning_checks import assert_bounds_below_objective, assert_plans_are_optimal

H100 = nest.load_device("h100-sxm")


def _hierarchy_graph_cluster(name, devices):
    tiers = nest.load_cluster(name, devices=devices)
    graph = generators.from_hierarchy(tiers)
    return tiers, graph_net.graph_cluster(graph, tiers.device, name=f"{name}-graph", order=routing.devices(graph))


@pytest.mark.parametrize("name,devices,model,job", [
    ("dgx-a100", 64, "gpt-1.7b", JobSpec(512, 2048)),
    ("h100-spineleaf", 128, "llama2-7b", JobSpec(256, 4096)),
    ("dgx-h100", 128, "mixtral-8x7b", JobSpec(256, 4096)),
])
def test_graph_of_hierarchy_plans_like_the_tiers(name, devices, model, job):
    """The graph form of a hierarchical preset (from_hierarchy, ranks in device index
    order) has the preset's tiers as levels and gives the same plan and step time."""
    tiers, graph = _hierarchy_graph_cluster(name, devices)
    assert [(t.fanout, t.latency) for t in graph.tiers] == [(t.fanout, t.latency) for t in tiers.tiers]
    for a, b in zip(graph.tiers, tiers.tiers):
        assert math.isclose(a.bandwidth, b.effective_bandwidth, rel_tol=1e-12)
    on_tiers, on_graph = nest.plan(model, tiers, job), nest.plan(model, graph, job)
    assert math.isclose(on_graph.step_time_s, on_tiers.step_time_s, rel_tol=1e-9)
    assert on_graph.parallelism == on_tiers.parallelism


@pytest.mark.parametrize("config", [
    dict(tp=2, pp=4, dp=8, micro_batch=1, sp=True, zero=1, rank_order="tp-cp-ep-dp-pp"),
    dict(tp=1, pp=2, dp=32, micro_batch=2, zero=2, rank_order="tp-cp-ep-pp-dp"),
    dict(tp=4, pp=2, dp=4, cp=2, micro_batch=1, sp=True, zero=3, rank_order="tp-cp-ep-dp-pp"),
    dict(tp=1, pp=4, dp=16, micro_batch=1, zero=1, vp=2, rank_order="tp-cp-ep-pp-dp"),
])
def test_graph_of_hierarchy_evaluates_like_the_tiers(config):
    """Fixed configurations whose TP, DP, CP groups and pipeline boundaries cross the
    tiers cost the same on the graph form (hierarchical rings, per-boundary transfers)."""
    tiers, graph = _hierarchy_graph_cluster("dgx-a100", 64)
    job = JobSpec(512, 4096)
    a = nest.evaluate("gpt-1.7b", tiers, job, **config)
    b = nest.evaluate("gpt-1.7b", graph, job, **config)
    assert math.isclose(a.step_time_s, b.step_time_s, rel_tol=1e-9)
    assert [s.layers for s in a.stages] == [s.layers for s in b.stages]
    for key, value in a.breakdown_s.items():
        assert math.isclose(value, b.breakdown_s[key], rel_tol=1e-6, abs_tol=1e-12), key


def _oversubscribed_fat_tree():
    return graph_net.graph_cluster(generators.fat_tree(8, bandwidth=50e9, latency=1e-6, oversubscription=(2, 4)), H100,
                           name="fat-tree-4:1")


def _rail():
    return graph_net.graph_cluster(generators.rail_optimized(8, 8, spines=2, nvlink_bandwidth=450e9, nic_bandwidth=50e9),
                           H100, name="rail")


def _torus():
    return graph_net.graph_cluster(generators.torus((4, 4, 4), bandwidth=50e9, latency=1e-6), H100, name="torus")


BOUND_CASES = [
    ("qwen3-30b-a3b", _oversubscribed_fat_tree, JobSpec(global_batch=256, seq_len=4096)),
    ("mixtral-8x7b", _rail, JobSpec(global_batch=128, seq_len=4096)),
    ("llama2-13b", _torus, JobSpec(global_batch=96, seq_len=8192)),
    ("gpt-1.7b", _oversubscribed_fat_tree, JobSpec(global_batch=512, seq_len=2048)),
]


@pytest.mark.parametrize("name,cluster_of,job", BOUND_CASES, ids=[c[0] for c in BOUND_CASES])
def test_bounds_never_exceed_the_exact_objective_on_graphs(name, cluster_of, job):
    """lb1 (partials, generic floors), lb2 (rank-0 group floors) and the table bound are
    below the exact objective of every candidate priced on the graph."""
    assert_bounds_below_objective(MODELS[name], cluster_of(), job, seed=11, sample=40)


TINY = ModelSpec(name="tiny", num_layers=4, hidden=1024, num_heads=16, ffn_hidden=4096,
                 vocab_size=32000, seq_len=1024)
EVERYTHING = SpaceLimits(sp=(False, True), zero=(0, 1, 2, 3), rank_order=RANK_ORDERS, offload=(0.0,))


def _slow_uplink_spine_leaf(memory_gib):
    """4 leaves x 4 devices, 2 spines, uplinks at a quarter of the device links."""
    graph = generators.spine_leaf(4, 4, 2, bandwidth=100e9, uplink_bandwidth=25e9, latency=2e-6)
    device = replace(nest.load_device("a100-80gb"), memory_bytes=memory_gib * 2**30)
    return graph_net.graph_cluster(graph, device, name="slow-uplinks")


@pytest.mark.parametrize("memory_gib", [pytest.param(80, marks=pytest.mark.slow), pytest.param(1.0, marks=pytest.mark.slow), 0.8])
def test_graph_plan_is_the_exhaustive_optimum(memory_gib):
    cluster = _slow_uplink_spine_leaf(memory_gib)
    job = JobSpec(global_batch=16, seq_len=1024, reserved_memory_bytes=0.5 * 2**30)
    plan = assert_plans_are_optimal(TINY, cluster, job, EVERYTHING)
    assert plan.memory_max_bytes <= cluster.device.memory_bytes


def _ecmp_reference(graph, flows):
    """Independent ECMP: every flow split evenly over networkx's all shortest paths
    (weight = cost), loads per directed link; (max load / capacity, max path latency)."""
    load, latency = {}, 0.0
    devices = routing.devices(graph)
    for s, t, amount in flows:
        paths = list(nx.all_shortest_paths(graph, devices[s], devices[t], weight="cost"))
        for path in paths:
            latency = max(latency, sum(graph.edges[u, v].get("latency", 0.0) for u, v in zip(path, path[1:])))
            for u, v in zip(path, path[1:]):
                load[(u, v)] = load.get((u, v), 0.0) + amount / len(paths)
    ratio = max(v / graph.edges[e]["bandwidth"] for e, v in load.items())
    return ratio, latency


@pytest.mark.parametrize("make", [
    lambda: generators.fat_tree(4, bandwidth=10.0, latency=1.0, oversubscription=(1, 2)),
    lambda: generators.spine_leaf(3, 2, 3, bandwidth=10.0, uplink_bandwidth=4.0, latency=1.0),
    lambda: generators.rail_optimized(3, 4, spines=2, nvlink_bandwidth=90.0, nic_bandwidth=10.0),
    lambda: generators.dragonfly(4, 3, 2),
    lambda: generators.torus((3, 4), bandwidth=10.0, latency=1.0),
])
def test_ecmp_pricing_equals_path_enumeration(make):
    """Pair DAGs, twin switches merged (fat-tree cores, spines): the same link loads and
    latencies as splitting every flow over networkx's enumeration of its shortest paths."""
    graph = make()
    for u, v in graph.edges:  # costs become explicit weights for networkx
        graph.edges[u, v].setdefault("cost", 1)
    n = len(routing.devices(graph))
    rng = np.random.default_rng(3)
    for _ in range(4):
        src = rng.integers(0, n, 12)
        dst = rng.integers(0, n, 12)
        keep = src != dst
        pairs = np.stack([src[keep], dst[keep]], axis=1)
        alpha, beta = routing.point_to_point(graph, pairs)
        ratio, latency = _ecmp_reference(graph, [(s, t, 1.0) for s, t in pairs])
        assert math.isclose(beta, ratio, rel_tol=1e-12) and math.isclose(alpha, latency, rel_tol=1e-12)


def test_twin_switches_are_merged():
    comp = routing.compile_graph(generators.fat_tree(8))
    # (k/2)^2 = 16 core switches form k/2 = 4 classes of twins: 4 representatives keep links
    cores = [i for i, r in enumerate(comp.routers) if str(r).startswith("core")]
    assert len(cores) == 16
    assert len(set(comp.eu.tolist()) & set(cores)) == 4
    assert set(comp.mul_tail[np.isin(comp.eu, cores)]) == {4.0}


def test_locality_order_and_levels():
    fat = generators.fat_tree(8)
    assert graph_net.locality_order(fat) == routing.devices(fat)  # pods and edge switches contiguous
    assert graph_net.level_sizes(fat) == (4, 16, 128)
    rail = generators.rail_optimized(4, 8)
    assert graph_net.level_sizes(rail) == (8, 32)
    # devices numbered across nodes (d0 on node 0, d1 on node 1, ...): the order regroups them
    shuffled = nx.relabel_nodes(rail, {f"d{i}": f"g{(i % 8) * 4 + i // 8}" for i in range(32)})
    for i in range(32):
        shuffled.nodes[f"g{i}"]["index"] = i
    order = graph_net.locality_order(shuffled)
    hosts = [shuffled.nodes[d]["host"] for d in order]
    assert all(len(set(hosts[i:i + 8])) == 1 for i in range(0, 32, 8))


def test_graph_cluster_spec():
    cluster = nest.load_cluster("h100-fattree", devices=128)
    assert cluster.is_graph and cluster.num_devices == 128
    assert [t.fanout for t in cluster.tiers] == [4, 4, 8]
    assert cluster == replace(cluster, graph=None, device_order=())  # graph and order left out of eq
    assert "graph" not in repr(cluster)
    with pytest.raises(nest.SpecError, match="device_order"):
        nest.ClusterSpec("x", H100, cluster.tiers, graph=cluster.graph, device_order=("d0",))
    with pytest.raises(nest.SpecError, match="fat tree"):
        nest.load_cluster("h100-fattree", devices=17)


def test_graph_placement_in_plan():
    """Every rank's coordinates, device and host; stages list their devices."""
    cluster = nest.load_cluster("dgx-h100-rail", devices=64)
    plan = nest.evaluate("gpt-1.7b", cluster, JobSpec(512, 2048), tp=2, pp=4, dp=8, micro_batch=1,
                         sp=True, zero=1, rank_order="tp-cp-ep-pp-dp")
    doc = plan.to_dict()
    ranks = doc["placement"]["ranks"]
    assert doc["placement"]["device_order"] == "graph" and len(ranks) == 64
    strides = {"tp": 1, "cp": 2, "pp": 2, "dp": 8}
    for r in ranks:
        assert r["rank"] == sum(r[d] * s for d, s in strides.items())
        assert r["device"] == cluster.device_order[r["rank"]]
        assert r["host"] == cluster.graph.nodes[r["device"]]["host"]
    for stage in doc["stages"]:
        assert stage["devices"] == [ranks[i]["device"] for i in stage["ranks"]]
        assert {ranks[i]["pp"] for i in stage["ranks"]} == {stage["index"]}
    assert doc["placement"]["hosts"] == 8
    # a host's devices are its slots 0..7 in device order
    for host in {r["host"] for r in ranks}:
        assert sorted(r["slot"] for r in ranks if r["host"] == host) == list(range(8))


def test_tier_placement_is_device_index():
    plan = nest.evaluate("gpt-1.7b", nest.load_cluster("dgx-a100", devices=64), JobSpec(512, 2048),
                         tp=8, pp=2, dp=4, micro_batch=1, sp=True, zero=1)
    doc = plan.to_dict()
    assert [r["device"] for r in doc["placement"]["ranks"]] == list(range(64))
    assert doc["stages"][1]["devices"] == list(range(32, 64)) == doc["stages"][1]["ranks"]
    assert [r["host"] for r in doc["placement"]["ranks"][:9]] == ["node0"] * 8 + ["node1"]
    for r in doc["placement"]["ranks"]:
        assert r["ep"] == 0 and r["expert_dp"] == r["tp"] + 8 * r["dp"]


def test_expert_coordinates():
    cluster = nest.load_cluster("dgx-h100", devices=64)
    plan = nest.evaluate("mixtral-8x7b", cluster, JobSpec(128, 4096), tp=2, pp=2, dp=16, ep=8,
                         micro_batch=1, sp=True, zero=1)
    ranks = plan.to_dict()["placement"]["ranks"]
    for stage in range(2):
        members = [r for r in ranks if r["pp"] == stage]
        assert [r["ep"] for r in members] == [i % 8 for i in range(32)]
        assert [r["expert_dp"] for r in members] == [i // 8 for i in range(32)]


def test_boundary_seconds_on_graph_equal_the_tiers():
    """Each pipeline boundary's transfer (what the simulator needs) prices like its tier."""
    tiers, graph = _hierarchy_graph_cluster("dgx-a100", 64)
    model, job = MODELS["gpt-1.7b"], JobSpec(512, 2048)
    for order in RANK_ORDERS:
        a, b = Scenario(model, tiers, job), Scenario(model, graph, job)
        key = (2, 1, 8, 4, 1, order)
        k, nbytes = np.arange(4), np.full(4, 3e6)
        on_tiers = a.placer.boundary_seconds(a.placer.placement(*key), k, nbytes)
        on_graph = b.placer.boundary_seconds(b.placer.placement(*key), k, nbytes)
        np.testing.assert_allclose(on_graph, on_tiers, rtol=1e-9)


@pytest.mark.parametrize("name", ["dgx-a100", "dgx-h100", "h100-spineleaf", "tpuv4-fattree"])
def test_graph_form_presets_plan_like_their_tiers(name):
    """`<preset>-graph` is the hierarchical preset as a graph: same plan, same step time."""
    tiers = nest.load_cluster(name, devices=64)
    graph = nest.load_cluster(f"{name}-graph", devices=64)
    assert graph.is_graph and graph.num_devices == 64
    job = JobSpec(global_batch=64, seq_len=2048)
    a, b = nest.plan("gpt-1.7b", tiers, job), nest.plan("gpt-1.7b", graph, job)
    assert a.parallelism == b.parallelism
    assert b.step_time_s == pytest.approx(a.step_time_s, rel=1e-9)


@pytest.mark.parametrize("name,devices", [("h100-leafspine", 256), ("h100-dragonfly", 256)])
def test_leaf_spine_and_dragonfly_presets(name, devices):
    """The generator presets build connected graphs of the asked size and plan on them;
    a size they cannot build is a one-line SpecError."""
    cluster = nest.load_cluster(name, devices=devices)
    assert cluster.is_graph and len(routing.devices(cluster.graph)) == devices
    plan = nest.plan("llama2-7b", cluster, JobSpec(global_batch=256, seq_len=2048))
    assert plan.devices_used <= devices and plan.memory_max_bytes <= cluster.device.memory_bytes
    with pytest.raises(nest.SpecError, match="multiple of 32"):
        nest.load_cluster(name, devices=48)


@pytest.mark.parametrize("model,cluster", [("qwen3-30b-a3b", "dgx-h100-rail"),
                                           pytest.param("mixtral-8x7b", "tpuv4-torus", marks=pytest.mark.slow)])
def test_moe_models_plan_on_graph_presets(model, cluster):
    """The cheap bound once priced a configuration on a layout of dp = ep replicas (tp 1,
    cp 8, ep 16: 128 ranks on 64 devices), which graphs cannot place (IndexError); its
    innermost layout is ep / gcd(ep, tp cp) replicas (on tier presets the bound is
    unchanged)."""
    plan = nest.plan(model, nest.load_cluster(cluster, devices=64))
    assert plan.devices_used <= 64 and plan.step_time_s > 0


def test_evaluate_that_does_not_fit_on_a_graph_is_diagnosed():
    """Diagnosing a configuration that does not fit once priced deeper pipelines on more
    devices than the graph has (IndexError); on a graph it suggests what the graph holds."""
    cluster = nest.load_cluster("dgx-h100-graph", devices=16)
    with pytest.raises(nest.InfeasibleError, match="does not fit in memory") as info:
        nest.evaluate("gpt3-175b", cluster, tp=8, pp=1, dp=2, micro_batch=1)
    assert "on 32 devices" not in str(info.value) and "\n" not in str(info.value)
