"""The NEST artifact's DP-input instances (nest.nest_instance)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from nest.errors import SpecError
from nest.inputs.nest_instance import ARTIFACT_SEQ_LEN, GLOBAL_BATCH_SEQUENCES, Baseline, NestInstance, load_instance

FOLDER = Path("/work/shared/data/nest-artifact")
if not FOLDER.is_dir():  # the sibling checkout layout of DESIGN.md ("../shared/data/")
    FOLDER = Path(__file__).resolve().parents[2] / "shared" / "data" / "nest-artifact"
FILES = sorted(FOLDER.glob("*.json"))
LAYERS = {"bert": 24, "gpt3": 96, "llama2": 32, "llama3": 80, "mixtral": 32}
HIDDEN = {"bert": 1024, "gpt3": 12288}

pytestmark = pytest.mark.skipif(not FILES, reason="NEST artifact instances not available")


@pytest.fixture(scope="module")
def instances() -> dict[str, tuple[dict, NestInstance]]:
    return {f.stem: (json.loads(f.read_text()), load_instance(f)) for f in FILES}


def test_the_folder_holds_every_setup_and_model():
    stems = {f.stem for f in FILES}
    for model in LAYERS:
        assert any(f"_{model}_" in s for s in stems)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_instance_loads(path, instances):
    raw, inst = instances[path.stem]
    layers = LAYERS[inst.model]
    # graph: embedding + layers, at every TP width of the file
    assert inst.profile.num_nodes == layers + 1 == inst.num_layers + 1
    assert inst.profile.names[0] == "embedding" and inst.profile.names[-1] == f"block.{layers - 1}"
    assert inst.node_ids == tuple(range(-1, layers))
    assert inst.profile.tp_degrees == tuple(sorted(int(k) for k in raw["nodes"]))
    # cluster: devices, tiers, memory in SI units
    assert inst.cluster.num_devices == raw["maxDevices"] == inst.max_devices
    assert [t.fanout for t in inst.cluster.tiers] == raw["devices_per_level"]
    assert [t.bandwidth for t in inst.cluster.tiers] == raw["bws"]
    assert [t.latency for t in inst.cluster.tiers] == raw["latency_per_level"]
    assert inst.cluster.device.memory_bytes == raw["maxMemoryPerDevice"]
    # job
    assert inst.micro_batch * inst.mbs_in_batch * inst.ep_degree == GLOBAL_BATCH_SEQUENCES
    assert f"_mbs{inst.micro_batch}_" in path.stem
    assert (inst.ep_degree, inst.cp_degree, inst.sp_enabled) == (
        raw["ep_degree"], raw["cp_degree"], raw["sp_enabled"])
    assert inst.activation_recomputation == raw["activationRecomputation"]
    assert inst.recompute == ("full" if raw["activationRecomputation"] else "none")
    assert inst.optimizer_algorithm == raw["optimizerAlgorithm"] == "SGD"
    assert inst.seq_len == ARTIFACT_SEQ_LEN[inst.model]
    job = inst.job()
    assert (job.global_batch, job.seq_len, job.dtype) == (4096, inst.seq_len, "bf16")
    assert job.optimizer.grad_bytes + job.optimizer.master_bytes + job.optimizer.state_bytes == 2
    assert inst.sequential == path.stem.endswith("_seq")
    # baselines
    assert set(inst.baselines) == set(raw["baselines"])
    for name, base in inst.baselines.items():
        cfg = raw["baselines"][name]
        assert (base.p, base.t, base.d) == (cfg["p"], cfg["t"], cfg["d"])
        assert base.num_transformer_layers == layers
        assert sum(base.blocks_per_stage()) == layers and len(base.blocks_per_stage()) == base.p
        assert sum(base.nodes_per_stage()) == layers + 1
        assert base.t in inst.profile.tp_degrees
        assert inst.fits(base) == (base.p * base.t * base.d * inst.ep_degree * inst.cp_degree
                                   <= inst.max_devices)
        if "layer_partition" in cfg:
            assert list(base.blocks_per_stage()) == cfg["layer_partition"]
    if inst.baselines:
        assert any(inst.fits(b) for b in inst.baselines.values())


def test_some_artifact_baselines_exceed_the_devices(instances):
    """The artifact lists configurations its own solver rejects ("too many devices used")."""
    _, inst = instances["tpuv4_fatTree_gpt3_mbs1_n64"]
    assert not inst.fits(inst.baselines["Manual"])  # p 32 x t 4 = 128 devices > 64
    assert inst.fits(inst.baselines["Phaze"])


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_node_costs_are_the_artifact_numbers_in_si_units(path, instances):
    raw, inst = instances[path.stem]
    for key, nodes in raw["nodes"].items():
        tp = int(key)
        by_id = {n["id"]: n for n in nodes}
        chain = {(e["sourceId"], e["destId"]): e["communicationCost"] for e in raw["edges"][key]}
        costs = inst.profile.node_costs(tp, inst.micro_batch, 2, "none")
        for position, node_id in enumerate(inst.node_ids):
            node, cost = by_id[node_id], costs[position]
            assert cost.fwd_s == pytest.approx(node["optimalLatencyFw"] / 1000)
            assert cost.bwd_s == pytest.approx(node["optimalLatencyBw"] / 1000)
            assert cost.params == math.ceil(node["parameterSize"] / 2)
            assert cost.act_bytes == node["activationSize"]
            expected = chain.get((node_id, node_id + 1), 0)
            assert cost.out_bytes == expected
            assert cost.tp_comm_s == 0.0


def test_boundary_bytes_are_hidden_states_for_bert_and_gpt3(instances):
    for stem, (_, inst) in instances.items():
        if inst.model in HIDDEN:
            out = inst.profile.node_costs(inst.profile.tp_degrees[0], inst.micro_batch, 2, "none")
            hidden_state = inst.seq_len * inst.micro_batch * HIDDEN[inst.model] * 2
            assert {c.out_bytes for c in out[:-1]} == {hidden_state}, stem


def test_cut_boundaries_include_skip_edges():
    path = FOLDER / "tpuv4_fatTree_bert_mbs1_n128.json"
    chain, cut = load_instance(path), load_instance(path, boundary="cut")
    for tp in chain.profile.tp_degrees:
        a = chain.profile.node_costs(tp, 1, 2, "none")
        b = cut.profile.node_costs(tp, 1, 2, "none")
        assert [c.out_bytes for c in b] == [round(x) for x in chain.cut_bytes(tp)]
        assert all(y.out_bytes >= x.out_bytes for x, y in zip(a, b))
        assert b[0].out_bytes > a[0].out_bytes  # the embedding also feeds every later layer
    with pytest.raises(SpecError, match="boundary = 'max'"):
        load_instance(path, boundary="max")


def test_artifact_uniform_split_rule():
    # ceil(96 / 33) = 3 layers per stage until they run out: the 33rd stage is empty.
    base = Baseline("MCMC", p=33, t=4, d=7, num_transformer_layers=96)
    assert base.blocks_per_stage() == (3,) * 32 + (0,)
    assert base.nodes_per_stage()[0] == 4
    assert Baseline("x", p=15, t=1, d=1, num_transformer_layers=32).blocks_per_stage() == (
        (3,) * 10 + (2,) + (0,) * 4)
    assert Baseline("x", p=4, t=1, d=1, num_transformer_layers=32,
                    layer_partition=(5, 9, 9, 9)).blocks_per_stage() == (5, 9, 9, 9)
    assert Baseline("x", p=16, t=1, d=16, num_transformer_layers=32).devices(ep_degree=4) == 1024


def test_mixtral_micro_batch_excludes_the_expert_degree(instances):
    _, inst = instances["h100_spineLeaf_mixtral_mbs1_n128"]
    assert (inst.ep_degree, inst.mbs_in_batch, inst.micro_batch) == (4, 1024, 1)
    manual = inst.baselines["Manual"]
    assert manual.devices(inst.ep_degree) == 128


def test_full_recompute_from_the_profile(instances):
    _, inst = instances["tpuv4_fatTree_llama2_mbs1_n128"]
    none = inst.profile.node_costs(1, 1, 2, "none")
    full = inst.profile.node_costs(1, 1, 2, inst.recompute)
    assert inst.recompute == "full"
    assert full[5].compute_s == pytest.approx(none[5].compute_s + none[5].fwd_s)
    assert full[5].act_bytes == none[4].out_bytes


def test_seq_len_for_unknown_models(tmp_path):
    data = json.loads((FOLDER / "tpuv4_fatTree_llama2_mbs1_n128.json").read_text())
    path = tmp_path / "custom.json"
    path.write_text(json.dumps(data))
    inst = load_instance(path)
    assert inst.seq_len is None and inst.model == ""
    with pytest.raises(SpecError, match="pass seq_len"):
        inst.job()
    assert inst.job(seq_len=2048).seq_len == 2048
    assert load_instance(path, seq_len=1024).seq_len == 1024


# -- errors ------------------------------------------------------------------------------

def broken(tmp_path, change, name="tpuv4_fatTree_bert_mbs1_n128") -> Path:
    data = json.loads((FOLDER / f"{name}.json").read_text())
    change(data)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("change, message", [
    (lambda d: d["nodes"]["2"][3].update(optimalLatencyFw=-1.0), r"optimalLatencyFw = -1.0"),
    (lambda d: d["nodes"]["2"][3].update(parameterSize="big"), r"parameterSize = 'big'"),
    (lambda d: d["nodes"]["4"][0].pop("activationSize"), r"activationSize: missing"),
    (lambda d: d["nodes"]["8"].pop(), r"nodes\['8'\]"),
    (lambda d: d["edges"].pop("8"), r"edges: TP widths"),
    (lambda d: d["edges"]["1"].pop(0), r"no edge from node 0 to node 1"),
    (lambda d: d.update(devices_per_level=[8, 4, 8]), r"devices_per_level = \[8, 4, 8\]: multiplies to 256"),
    (lambda d: d.update(bws=[1.0, 2.0]), r"one entry per level"),
    (lambda d: d.update(maxMemoryPerDevice=0), r"maxMemoryPerDevice = 0"),
    (lambda d: d.update(mbsInBatch=3000.0), r"mbsInBatch = 3000"),
    (lambda d: d.update(mbsInBatch=2048.0), r"file name says mbs 1"),
    (lambda d: d.pop("maxDevices"), r"maxDevices: missing"),
    (lambda d: d.update(optimizerAlgorithm="LAMB"), r"optimizerAlgorithm = 'LAMB'"),
    (lambda d: d["baselines"]["Manual"].update(num_transformer_layers=12), r"num_transformer_layers = 12"),
    (lambda d: d["baselines"]["Manual"].update(layer_partition=[3] * 7), r"layer_partition"),
    (lambda d: d["baselines"]["MCMC"].pop("t"), r"baselines.MCMC.t: missing"),
])
def test_bad_instances_are_named(tmp_path, change, message):
    with pytest.raises(SpecError, match=message):
        load_instance(broken(tmp_path, change))


def test_file_errors(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        load_instance(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    with pytest.raises(SpecError, match="must hold a JSON object"):
        load_instance(bad)
    bad.write_text("{")
    with pytest.raises(SpecError, match="not JSON"):
        load_instance(bad)
