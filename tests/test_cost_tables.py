"""The node cost model is columnar: the search prices thousands of configurations in one
table, a report prices its plan's configuration alone. Both must agree bit for bit, or a
plan and its own evaluation would disagree."""

import numpy as np
import pytest

import nest
from nest.cost.nodes import COST_FIELDS, OP_FIELDS
from nest.cost.scenario import Scenario
from nest.inputs.measured import MeasuredSource
from nest.inputs.profiles import load_profile
from nest.parallel import ConfigArrays, LayerConfig, SpaceLimits
from nest.search.space import enumerate_partials
from nest.specs import JobSpec

CASES = [
    ("gpt3-175b", "dgx-a100", 1024, JobSpec(global_batch=1536, seq_len=2048)),
    ("bert-large", "dgx-h100", 64, JobSpec(global_batch=256, seq_len=512, flash_attention=False)),
    ("deepseek-v3", "dgx-h100", 2048, JobSpec(global_batch=4608, seq_len=4096)),
    ("llama3-70b", "h100-spineleaf", 256, JobSpec(global_batch=64, seq_len=32768, dtype="fp8")),
    # the efficiency curves' branches: batched 16-bit score matmuls (no fused attention)
    # under BF16 and FP8 GEMMs, and a device without a shape curve (plain roofline)
    ("gpt-1.7b", "dgx-a100", 64, JobSpec(global_batch=512, seq_len=2048, flash_attention=False)),
    ("llama2-7b", "dgx-h100", 64, JobSpec(global_batch=128, seq_len=4096, dtype="fp8", flash_attention=False)),
    ("llama2-7b", "tpuv4-fattree", 64, JobSpec(global_batch=128, seq_len=4096)),
]


@pytest.mark.parametrize("name,cluster,devices,job", CASES, ids=[c[0] for c in CASES])
def test_a_configuration_priced_alone_equals_its_row_of_a_large_table(name, cluster, devices, job):
    model, cluster = nest.load_model(name), nest.load_cluster(cluster, devices=devices)
    scn = Scenario(model, cluster, job)
    partials = enumerate_partials(model, cluster, job, scn.num_nodes, SpaceLimits())
    rng = np.random.default_rng(3)
    pick = sorted(rng.choice(len(partials.configs), size=min(200, len(partials.configs)), replace=False))
    configs = [partials.configs[i] for i in pick]
    table = scn.config_table(configs)
    for i in rng.choice(len(configs), size=12, replace=False).tolist():
        alone = scn.config_table([configs[i]])
        for field in COST_FIELDS:
            np.testing.assert_array_equal(alone.cols[field][0], table.cols[field][i], err_msg=field)
            assert alone.cols[field].dtype == table.cols[field].dtype
        for field in OP_FIELDS:
            np.testing.assert_array_equal(alone.cols[field][0], table.cols[field][i], err_msg=field)
        np.testing.assert_array_equal(alone.send_ps[0], table.send_ps[i])
        assert alone.transient[0] == table.transient[i]
        arrays = ConfigArrays.of([configs[i]])
        for kind in scn.kind_list:
            assert scn.source.model_flops(kind, arrays)[0] == scn.source.model_flops(kind, table.arrays)[i]


def test_model_flops_follow_narayanan_for_gpt():
    """``72 b s h^2 (1 + s / 6h)`` forward + backward FLOPs per GPT block (Narayanan et al.
    2021, eq. 3 without the logits): three times ``24 b s h^2 + 4 b s^2 h``."""
    model = nest.load_model("gpt3-175b")
    scn = Scenario(model, nest.load_cluster("dgx-a100", devices=8), JobSpec(global_batch=8, seq_len=2048))
    b, s, h = 2, 2048, model.hidden
    arrays = ConfigArrays.of([LayerConfig(1, False, b, "none")])
    expected = 72 * b * s * h * h * (1 + s / (6 * h))
    assert scn.source.model_flops("block", arrays)[0] == pytest.approx(expected, rel=1e-12)
    eight = ConfigArrays.of([LayerConfig(8, True, b, "none")])
    assert scn.source.model_flops("block", eight)[0] == scn.source.model_flops("block", arrays)[0] / 8


def test_measured_tables_are_the_profile_rows():
    profile = load_profile("tests/data/profiles/tiny.json")
    source = MeasuredSource(profile)
    tp = profile.tp_degrees[0]
    arrays = ConfigArrays.of([LayerConfig(tp, False, 1, r) for r in ("none", "full")])
    for node, name in enumerate(profile.names):
        columns = source.table(name, arrays)
        for row, recompute in enumerate(("none", "full")):
            cost = profile.node_costs(tp, 1, 2, recompute)[node]
            assert columns["fwd_s"][row] == cost.fwd_s and columns["recompute_s"][row] == cost.recompute_s
            assert columns["compute_s"][row] == cost.fwd_s + cost.bwd_s + cost.recompute_s
            assert columns["act_bytes"][row] == cost.act_bytes and columns["params_dense"][row] == cost.params
            assert columns["tp_count"][row].tolist() == [0.0]
        assert source.model_flops(name, arrays).tolist() == [profile.node_costs(tp, 1, 2, r)[node].model_flops
                                                              for r in ("none", "full")]
    with pytest.raises(nest.SpecError, match="^cp = 2, ep = 1: measured profiles fix"):
        source.table(profile.names[0], ConfigArrays.of([LayerConfig(tp, False, 1, "none", cp=2)]))


def test_jobs_beyond_int64_bytes_are_rejected_by_name():
    """Unfused attention over millions of tokens needs more bytes than int64 holds: a
    SpecError naming the job, not wrapped integers."""
    model = nest.load_model("gpt-1.7b")
    job = JobSpec(global_batch=1, seq_len=2**27, flash_attention=False)
    scn = Scenario(model, nest.load_cluster("dgx-a100", devices=8), job)
    with pytest.raises(nest.SpecError, match=r"^job = 1 x 134217728 tokens of gpt-1.7b: too large to price"):
        scn.config_table([LayerConfig(1, False, 1, "none")])


class _KindByKind:
    """A measured source seen without its ``tables``: the scenario prices it kind by kind."""

    def __init__(self, source):
        self._source = source
        self.kinds, self.names = source.kinds, source.names

    def table(self, kind, configs):
        return self._source.table(kind, configs)

    def model_flops(self, kind, configs):
        return self._source.model_flops(kind, configs)


def test_measured_tables_of_every_kind_at_once_equal_kind_by_kind():
    """A measured source has a kind per layer (hundreds on a NEST instance): the scenario
    takes every kind's columns in one call (``MeasuredSource.tables``); they must be the
    stacked columns of each kind, padded and typed alike."""
    profile = load_profile("tests/data/profiles/tiny.json")
    source = MeasuredSource(profile)
    model, cluster = source.model(profile.name), nest.load_cluster("dgx-a100", devices=8)
    job = JobSpec(global_batch=8, seq_len=model.seq_len)
    configs = [LayerConfig(t, False, 1, r) for t in profile.tp_degrees for r in ("none", "full")]
    at_once = Scenario(model, cluster, job, source=source).config_table(configs)
    by_kind = Scenario(model, cluster, job, source=_KindByKind(source)).config_table(configs)
    assert len(source.kinds) > 2 and len(at_once.cols) == len(COST_FIELDS) + len(OP_FIELDS)
    for field in (*COST_FIELDS, *OP_FIELDS):
        np.testing.assert_array_equal(at_once.cols[field], by_kind.cols[field], err_msg=field)
        assert at_once.cols[field].dtype == by_kind.cols[field].dtype, field
        assert at_once.cols[field].shape == by_kind.cols[field].shape, field
    np.testing.assert_array_equal(at_once.send_ps, by_kind.send_ps)
    np.testing.assert_array_equal(at_once.transient, by_kind.transient)


@pytest.mark.parametrize("name,cluster,devices", [("tiny-profile", "dgx-a100", 16), ("llama2-7b", "dgx-h100", 64),
                                                   ("mixtral-8x7b", "dgx-h100", 64)])
def test_pricing_without_operations_of_a_kind_is_the_full_formula(monkeypatch, name, cluster, devices):
    """Pricing skips the TP, EP and expert-TP sums of a table that has none of those
    operations (measured layers hold their TP; dense models have no all-to-alls); the
    plan must be the one the full sums give, to the last bit."""
    from nest.cost.scenario import ConfigTable
    from nest.planner import clear_shared_scenarios

    if name == "tiny-profile":
        source = MeasuredSource(load_profile("tests/data/profiles/tiny.json"))
        model, limits = source.model("tiny"), source.limits()
    else:
        source, model, limits = None, nest.load_model(name), SpaceLimits(cp=(1,))
    args = (model, nest.load_cluster(cluster, devices=devices))

    def planned():
        clear_shared_scenarios()
        job = JobSpec(global_batch=64, seq_len=model.seq_len)
        return nest.plan(*args, job, source=source, limits=limits).to_dict()

    skipped = planned()
    cached = ConfigTable.cached
    monkeypatch.setattr(ConfigTable, "cached",
                        lambda self, key, compute: True if str(key).startswith("has ") else cached(self, key, compute))
    full = planned()
    for document in (skipped, full):
        document.pop("solve_time_s")
        document.pop("runtime", None)
    assert skipped == full
