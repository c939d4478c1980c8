"""The search prices layer configurations column-wise (numpy); plans are reported and
simulated from the per-configuration cost model. Both must agree bit for bit, or a plan
and its own evaluation would disagree."""

import numpy as np
import pytest

import nest
from nest.costs import COST_FIELDS, OP_FIELDS, kind_cost_columns
from nest.space import SpaceLimits, enumerate_partials
from nest.specs import JobSpec
from nest.tables import Scenario

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
def test_columnar_tables_equal_per_config_costs(name, cluster, devices, job):
    model, cluster = nest.load_model(name), nest.load_cluster(cluster, devices=devices)
    scn = Scenario(model, cluster, job)
    partials = enumerate_partials(model, cluster, job, scn.num_nodes, SpaceLimits())
    rng = np.random.default_rng(3)
    pick = rng.choice(len(partials.configs), size=min(200, len(partials.configs)), replace=False)
    configs = [partials.configs[i] for i in sorted(pick)]
    table = scn.config_table(configs)
    for k, kind in enumerate(scn.kind_list):
        reference = kind_cost_columns([scn.kind_costs(cfg)[kind] for cfg in configs])
        for field in COST_FIELDS:
            np.testing.assert_array_equal(table.cols[field][:, k], reference[field], err_msg=field)
        for field in OP_FIELDS:
            got = table.cols[field][:, k, :reference[field].shape[1]]
            np.testing.assert_array_equal(got, reference[field], err_msg=field)
