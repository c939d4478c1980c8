"""Measured layer profiles (nest.inputs.profiles): formats, node costs, validation."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from nest.errors import SpecError
from nest.inputs.profiles import MeasuredProfile, load_profile, profile_from_dict

DATA = Path(__file__).parent / "data" / "profiles"


@pytest.fixture(scope="module")
def tiny() -> MeasuredProfile:
    return load_profile(DATA / "tiny.json")


def raw() -> dict:
    return json.loads((DATA / "tiny.json").read_text())


def test_json_and_csv_describe_the_same_profile(tiny):
    csv = load_profile(DATA / "tiny.csv")
    assert csv.measurements == tiny.measurements
    assert tiny.name == "tiny-gpt" and csv.name == "tiny"
    assert tiny.names == ("embedding", "block.0", "block.1", "head")
    assert tiny.num_nodes == 4
    assert tiny.tp_degrees == (1, 2)
    assert tiny.micro_batches(1) == (1, 2) and tiny.micro_batches(2) == (1,)


def test_round_trip(tiny, tmp_path):
    path = tmp_path / "again.json"
    path.write_text(json.dumps(tiny.to_dict()))
    assert load_profile(path) == tiny


def test_node_costs_without_recompute(tiny):
    costs = tiny.node_costs(tp=1, micro_batch=1, dtype_bytes_param=2, recompute="none")
    assert len(costs) == 4
    block = costs[1]
    assert block.compute_s == pytest.approx(0.002 + 0.004)
    assert block.tp_comm_s == 0.0 and block.time_s == block.compute_s
    assert block.params == 402653184 // 2
    assert block.act_bytes == 805306368
    assert block.out_bytes == 16777216
    assert block.transient_bytes == 0
    assert block.model_flops == 1.2e12
    assert costs[0].model_flops == 0.0
    assert costs[-1].out_bytes == 0


def test_params_use_the_bytes_per_parameter(tiny):
    fp32 = tiny.node_costs(tp=1, micro_batch=1, dtype_bytes_param=4, recompute="none")
    assert fp32[1].params == 402653184 // 4
    odd = tiny.node_costs(tp=2, micro_batch=1, dtype_bytes_param=3, recompute="none")
    assert odd[0].params == math.ceil(32768000 / 3)


def test_full_recompute_keeps_only_the_input(tiny):
    none = tiny.node_costs(tp=2, micro_batch=1, dtype_bytes_param=2, recompute="none")
    full = tiny.node_costs(tp=2, micro_batch=1, dtype_bytes_param=2, recompute="full")
    for i, (a, b) in enumerate(zip(none, full)):
        assert b.compute_s == pytest.approx(a.compute_s + a.fwd_s)
        assert b.recompute_s == pytest.approx(a.fwd_s)
        assert b.act_bytes == (none[i - 1].out_bytes if i else 0)
        assert b.transient_bytes == a.act_bytes
        assert b.params == a.params and b.out_bytes == a.out_bytes


def test_selective_recompute_uses_the_optional_columns(tiny):
    sel = tiny.node_costs(tp=1, micro_batch=1, dtype_bytes_param=2, recompute="selective")
    none = tiny.node_costs(tp=1, micro_batch=1, dtype_bytes_param=2, recompute="none")
    assert sel[1].compute_s == pytest.approx(none[1].compute_s + 5e-4)
    assert sel[1].act_bytes == 500000000
    assert sel[1].transient_bytes == none[1].act_bytes
    assert sel[2] == none[2]  # not measured: priced like no recomputation


def test_measured_micro_batch_is_used_as_is(tiny):
    two = tiny.node_costs(tp=1, micro_batch=2, dtype_bytes_param=2, recompute="none")
    assert two[1].compute_s == pytest.approx(0.004 + 0.008)
    assert two[1].act_bytes == 1610612736


def test_unmeasured_micro_batch_scales_linearly(tiny):
    base = tiny.node_costs(tp=2, micro_batch=1, dtype_bytes_param=2, recompute="none")
    four = tiny.node_costs(tp=2, micro_batch=4, dtype_bytes_param=2, recompute="none")
    for a, b in zip(base, four):
        assert b.compute_s == pytest.approx(4 * a.compute_s)
        assert b.act_bytes == 4 * a.act_bytes
        assert b.out_bytes == 4 * a.out_bytes
        assert b.params == a.params
    # tp = 1: micro-batch 3 scales the measured micro-batch 2 by 1.5
    three = tiny.node_costs(tp=1, micro_batch=3, dtype_bytes_param=2, recompute="none")
    two = tiny.node_costs(tp=1, micro_batch=2, dtype_bytes_param=2, recompute="none")
    assert three[1].compute_s == pytest.approx(1.5 * two[1].compute_s)
    measurement, scale = tiny.measurement(1, 3)
    assert (measurement.micro_batch, scale) == (2, 1.5)


def test_missing_tp_degree_is_named(tiny):
    with pytest.raises(SpecError, match=r"tp = 4: not measured in profile 'tiny-gpt' \(measured: 1, 2\)"):
        tiny.node_costs(tp=4, micro_batch=1, dtype_bytes_param=2, recompute="none")


def test_bad_arguments(tiny):
    with pytest.raises(SpecError, match="recompute = 'some'"):
        tiny.node_costs(tp=1, micro_batch=1, dtype_bytes_param=2, recompute="some")
    with pytest.raises(SpecError, match="micro_batch = 0"):
        tiny.node_costs(tp=1, micro_batch=0, dtype_bytes_param=2, recompute="none")
    with pytest.raises(SpecError, match="dtype_bytes_param = 0"):
        tiny.node_costs(tp=1, micro_batch=1, dtype_bytes_param=0, recompute="none")


# -- validation ------------------------------------------------------------------------

@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf"), "fast", True, None])
def test_bad_numbers_are_named(value):
    data = raw()
    data["measurements"][2]["nodes"][1]["forward_s"] = value
    expected = "forward_s missing" if value is None else "forward_s = "
    with pytest.raises(SpecError) as error:
        profile_from_dict(data)
    text = str(error.value)
    assert "profile tp=2 micro_batch=1" in text and "'block.0'" in text and expected in text


def test_duplicated_names():
    data = raw()
    data["measurements"][0]["nodes"][2]["name"] = "block.0"
    with pytest.raises(SpecError, match="node name 'block.0' appears twice"):
        profile_from_dict(data)


def test_inconsistent_node_lists():
    data = raw()
    data["measurements"][2]["nodes"][2]["name"] = "block.9"
    with pytest.raises(SpecError, match=r"profile tp=2 micro_batch=1: nodes .*'block.9'.* differ"):
        profile_from_dict(data)
    data = raw()
    del data["measurements"][1]["nodes"][3]
    with pytest.raises(SpecError, match="profile tp=1 micro_batch=2: nodes"):
        profile_from_dict(data)


def test_structure_errors():
    data = raw()
    data["measurements"].append(dict(data["measurements"][0]))
    with pytest.raises(SpecError, match="measured twice"):
        profile_from_dict(data)
    with pytest.raises(SpecError, match="profile.measurements = \\[\\]"):
        profile_from_dict({"measurements": []})
    with pytest.raises(SpecError, match=r"profile.measurements\[0\].tp = 0"):
        profile_from_dict({"measurements": [{"tp": 0, "nodes": raw()["measurements"][0]["nodes"]}]})
    data = raw()
    data["measurements"][0]["nodes"][0]["latency"] = 1
    with pytest.raises(SpecError, match="latency = 1: unknown field"):
        profile_from_dict(data)
    with pytest.raises(SpecError, match="profile.colour"):
        profile_from_dict({**raw(), "colour": "red"})


def test_csv_errors(tmp_path):
    text = (DATA / "tiny.csv").read_text()
    bad = tmp_path / "bad.csv"
    bad.write_text(text.replace("1,1,block.1,0.002", "1,1,block.1,-0.002"))
    with pytest.raises(SpecError, match=r"profile tp=1 micro_batch=1 line 5 node 'block.1': forward_s = -0.002"):
        load_profile(bad)
    bad.write_text(text.replace("1,1,block.1,0.002", "1,1,block.1,quick"))
    with pytest.raises(SpecError, match="forward_s = 'quick'"):
        load_profile(bad)
    bad.write_text(text.replace("output_bytes", "out_bytes"))
    with pytest.raises(SpecError, match="column 'out_bytes': unknown"):
        load_profile(bad)
    bad.write_text(text.replace(",flops,", ",backward_s,", 1))
    with pytest.raises(SpecError, match="a column appears twice"):
        load_profile(bad)
    bad.write_text("tp,name,forward_s,backward_s,param_bytes,activation_bytes\n1,a,1,1,1,1\n")
    with pytest.raises(SpecError, match="column 'output_bytes': missing"):
        load_profile(bad)
    bad.write_text("tp,name,forward_s,backward_s,param_bytes,activation_bytes,output_bytes\n"
                   "1,a,1,1,1,1,1\n1,b,1,1,1\n")
    with pytest.raises(SpecError, match="line 3: 5 fields"):
        load_profile(bad)


def test_file_errors(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        load_profile(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(SpecError, match="not JSON"):
        load_profile(bad)
    bad.write_text("[1]")
    with pytest.raises(SpecError, match="must be a JSON object"):
        load_profile(bad)
