"""Parameter counts, device and cluster presets."""

import math

import pytest

from nest.cost.model import parameter_count
from nest.errors import SpecError
from nest.presets.clusters import CLUSTERS
from nest.presets.devices import DEVICES
from nest.presets.models import MODELS

REQUIRED_MODELS = ["gpt3-175b", "gpt-1.7b", "gpt-3.6b", "gpt-7.5b", "gpt-18b", "gpt-39b", "gpt-76b",
                   "gpt-145b", "gpt-310b", "gpt-530b", "gpt-1t", "llama2-7b", "llama2-13b",
                   "llama2-70b", "llama3-8b", "llama3-70b", "llama3.1-405b", "bert-large"]


def _published_tolerance(published: int) -> float:
    """1%, or half a unit of the last digit the source prints (SC21 prints 1.7B)."""
    digits = f"{published / 1e9:.4g}".rstrip("0").rstrip(".")
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    return max(0.01, 0.5 * 10 ** -decimals * 1e9 / published)


@pytest.mark.parametrize("name", REQUIRED_MODELS)
def test_parameter_count_matches_published(name):
    model = MODELS[name]
    count = parameter_count(model)
    assert model.published_parameters > 0
    assert abs(count / model.published_parameters - 1) <= _published_tolerance(model.published_parameters)


@pytest.mark.parametrize("name,exact", [
    ("llama2-7b", 6_738_415_616), ("llama2-13b", 13_015_864_320), ("llama2-70b", 68_976_648_192),
    ("llama3-8b", 8_030_261_248), ("llama3-70b", 70_553_706_496), ("llama3.1-405b", 405_853_388_800),
    ("bert-large", 336_226_108)])
def test_exact_counts_of_released_checkpoints(name, exact):
    assert parameter_count(MODELS[name]) == exact


def test_gpt3_and_sc21_formula():
    """Narayanan et al.: P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12lh)), plus the final norm."""
    for name in ["gpt3-175b", "gpt-1t", "gpt-39b"]:
        m = MODELS[name]
        l, h, v, s = m.num_layers, m.hidden, m.vocab_size, m.seq_len
        formula = 12 * l * h * h * (1 + 13 / (12 * h) + (v + s) / (12 * l * h))
        assert parameter_count(m) == round(formula) + 2 * h


@pytest.mark.parametrize("name", ["a100-40gb", "a100-80gb", "h100-sxm", "h200", "b200", "mi300x",
                                  "tpuv4", "tpuv5p"])
def test_device_presets_documented(name):
    device = DEVICES[name]
    assert device.source and device.peak_flops("bf16") > 1e14 and device.memory_bytes > 16 * 2**30


def test_h100_datasheet_values():
    h100 = DEVICES["h100-sxm"]
    assert h100.peak_flops("bf16") == 989e12 and h100.peak_flops("fp8") == 1979e12
    assert h100.hbm_bandwidth == 3.35e12


# What the drivers report as the device's total memory: nvidia-smi's MiB for NVIDIA
# (A100 40/80 GB and H100 as listed in modal-labs/modal-client#2797; H200 and B200 as
# nvidia-smi prints them), rocm-smi's bytes for MI300X. TPUs: the documented HBM.
DRIVER_TOTALS = {"a100-40gb": 40960 * 2**20, "a100-80gb": 81920 * 2**20, "h100-sxm": 81559 * 2**20,
                 "h200": 143771 * 2**20, "b200": 183359 * 2**20, "mi300x": 206141652992,
                 "tpuv4": 32 * 2**30, "tpuv5p": 95e9,
                 # datasheet sizes, for want of a published driver figure (like the TPUs')
                 "gh200": 96 * 2**30, "v100-32gb": 32 * 2**30, "gb200": 186e9}


def test_every_device_has_its_driver_reported_capacity():
    assert set(DRIVER_TOTALS) == set(DEVICES)
    for name, total in DRIVER_TOTALS.items():
        assert DEVICES[name].memory_bytes == total, name
        assert DEVICES[name].reserved_bytes == 2 * 2**30  # the planning margin, shown in every breakdown


def test_fp8_on_a100_is_rejected():
    with pytest.raises(SpecError, match="job.dtype = 'fp8': is not supported by device a100-80gb"):
        DEVICES["a100-80gb"].peak_flops("fp8")


@pytest.mark.parametrize("devices,fanouts", [(1024, (8, 4, 32)), (64, (8, 4, 2)), (32, (8, 4)),
                                             (16, (8, 2)), (8, (8,)), (4, (4,))])
def test_paper_setup_sizing(devices, fanouts):
    cluster = CLUSTERS["tpuv4-fattree"].sized(devices)
    assert tuple(t.fanout for t in cluster.tiers) == fanouts
    assert cluster.num_devices == devices


def test_paper_setups_match_artifact_units():
    tpu = CLUSTERS["tpuv4-fattree"].sized(1024)
    assert [t.bandwidth for t in tpu.tiers] == [966367641600, 107374182400, 429496729600]
    assert tpu.device.memory_bytes == 68719476736
    h100 = CLUSTERS["h100-spineleaf"].sized(1024)
    assert [t.bandwidth for t in h100.tiers] == [966367641600, 13421772800.0, 53687091200]
    assert h100.device.memory_bytes == 96636764160


def test_dgx_presets():
    a100 = CLUSTERS["dgx-a100"].sized(1024)
    assert a100.device.name == "a100-80gb" and a100.tiers[0].fanout == 8
    assert math.isclose(a100.tiers[1].bandwidth, 200e9 / 8)  # HDR 200 Gb/s per GPU
    h100 = CLUSTERS["dgx-h100"].sized(512)
    assert math.isclose(h100.tiers[1].bandwidth, 400e9 / 8)  # NDR 400 Gb/s per GPU
    assert math.isclose(h100.tiers[0].bandwidth, 450e9)


@pytest.mark.parametrize("devices,message", [
    (100, "devices = 100: dgx-a100 needs whole 'nvlink' groups above one: a multiple of 8 devices"),
    (0, "devices = 0: must be a positive integer")])
def test_bad_sizes(devices, message):
    with pytest.raises(SpecError, match=message):
        CLUSTERS["dgx-a100"].sized(devices)


@pytest.mark.parametrize("devices,tiers", [
    (3, [("nvlink", 3)]),  # three GPUs of one node
    (200, [("nvlink", 8), ("leaf", 25)]),  # 25 nodes on one leaf
    (256, [("nvlink", 8), ("leaf", 32)]),
    (280, [("nvlink", 8), ("leaf+spine", 35)]),  # a leaf of 32 nodes and one of 3
    (1000, [("nvlink", 8), ("leaf+spine", 125)]),
    (2048, [("nvlink", 8), ("leaf", 32), ("spine", 8)]),
])
def test_partly_filled_groups_are_normal(devices, tiers):
    """Part of a node is that node; a partly filled leaf is one tier with the spine,
    at the slower bandwidth and the higher latency of the two."""
    cluster = CLUSTERS["dgx-h100"].sized(devices)
    assert [(t.name, t.fanout) for t in cluster.tiers] == tiers and cluster.num_devices == devices
    if "+" in tiers[-1][0]:
        leaf, spine = CLUSTERS["dgx-h100"].tiers[1:]
        assert cluster.tiers[-1].latency == max(leaf.latency, spine.latency)
        assert cluster.tiers[-1].bandwidth == min(leaf.bandwidth, spine.bandwidth)
