"""Device and collective efficiency curves (nest.cost.efficiency, nest.cost.compute, nest.network):
the documented properties, not particular numbers."""

import math

import numpy as np
import pytest

from nest.cost.compute import FLASH_BACKWARD_FACTOR, KernelModel
from nest.cost.efficiency import DEVICE_EFFICIENCY, GENERIC, device_efficiency, gemm_fraction, gemm_throughput
from nest.errors import SpecError
from nest.network.tiers import (
    NCCL_EFFICIENCY,
    RAW_EFFICIENCY,
    CollectiveEfficiency,
    TierEfficiency,
    calibrated_cluster,
    group_shape,
)
from nest.presets.clusters import CLUSTERS
from nest.presets.devices import DEVICES

A100, H100, TPU = DEVICES["a100-80gb"], DEVICES["h100-sxm"], DEVICES["tpuv4"]
SIZES = [64, 256, 1024, 2304, 4096, 8192, 16384, 65536]


@pytest.mark.parametrize("device,dtype", [(A100, "bf16"), (H100, "bf16"), (H100, "fp8"), (TPU, "bf16")])
def test_gemm_throughput_is_monotone_in_every_dimension(device, dtype):
    for base in ([4096, 4096, 4096], [2048, 1536, 12288], [512, 8192, 1024]):
        for axis in range(3):
            previous = 0.0
            for size in SIZES:
                shape = list(base)
                shape[axis] = size
                rate = gemm_throughput(device, dtype, *shape)
                assert rate >= previous * (1 - 1e-12), (axis, size)
                previous = rate


@pytest.mark.parametrize("device,dtype", [(A100, "bf16"), (H100, "bf16"), (H100, "fp8"), (TPU, "bf16")])
def test_gemm_saturates_at_the_documented_fraction(device, dtype):
    ceiling = device.peak_flops(dtype) * gemm_fraction(device, {"bf16": 2, "fp8": 1}[dtype])
    huge = gemm_throughput(device, dtype, 2.0**22, 2.0**22, 2.0**22)
    assert huge <= ceiling
    assert huge == pytest.approx(ceiling, rel=2e-3)
    # the fractions are the measured maximum achievable matmul FLOPS of the presets
    assert gemm_fraction(A100, 2) == pytest.approx(271.2 / 312)
    assert gemm_fraction(H100, 2) == pytest.approx(794.5 / 989)
    assert gemm_fraction(H100, 1) * H100.peak_flops("fp8") == pytest.approx(1402.6e12, rel=2e-3)


def test_small_gemms_fall_well_below_the_ceiling():
    big = gemm_throughput(H100, "bf16", 8192, 8192, 8192)
    assert gemm_throughput(H100, "bf16", 256, 256, 256) < 0.2 * big  # a fraction of one wave
    assert gemm_throughput(H100, "bf16", 8192, 8192, 64) < 0.5 * big  # HBM-bound (small k)


def test_fp8_faster_than_bf16_for_big_gemms_only_up_to_the_measured_ratio():
    for m, n, k in [(8192, 8192, 8192), (16384, 12288, 12288), (4096, 28672, 8192)]:
        fp8 = gemm_throughput(H100, "fp8", m, n, k)
        bf16 = gemm_throughput(H100, "bf16", m, n, k)
        ceiling = H100.peak_flops("fp8") / H100.peak_flops("bf16") * 0.709 / 0.803
        assert 1.3 < fp8 / bf16 < ceiling * (1 + 1e-9)
    with pytest.raises(ValueError):
        A100.peak_flops("fp8")


def test_fp8_kernels_keep_attention_and_batched_matmuls_in_16_bits():
    fp8 = KernelModel(H100, 1, H100.peak_flops("fp8"))
    bf16 = KernelModel(H100, 2, H100.peak_flops("bf16"))
    assert fp8.attention(1e12) == bf16.attention(1e12)
    assert fp8.bmm(2048, 2048, 128, 64) == bf16.bmm(2048, 2048, 128, 64)
    assert fp8.gemm(8192, 8192, 8192) < bf16.gemm(8192, 8192, 8192)


def test_fp8_quantization_by_recipe_and_architecture():
    """TE's quantizers (v2.7/v2.18 quantizer.cpp): delayed scaling casts with a known
    scale (read 2, write FP8 1 + its transpose 1 on Hopper; 2 launches), current scaling
    adds an amax pass (2 more bytes, 3 launches); Blackwell keeps no transpose."""
    m, n, k = 8192, 4096, 8192
    for device, recipe, nbytes, launches in ((H100, "delayed", 4, 2), (H100, "tensorwise", 6, 3),
                                             (DEVICES["b200"], "delayed", 3, 2), (DEVICES["b200"], "tensorwise", 5, 3),
                                             (DEVICES["gb200"], "delayed", 3, 2), (H100, "blockwise", 4 + 8 / 128, 1),
                                             (DEVICES["h200"], "blockwise", 4 + 8 / 128, 1),
                                             (DEVICES["b200"], "mxfp8", 4 + 2 / 32, 1),
                                             (DEVICES["gb200"], "mxfp8", 4 + 2 / 32, 1)):
        km = KernelModel(device, 1, device.peak_flops("fp8"), recipe)
        bare = KernelModel(device, 1, device.peak_flops("fp8"), recipe)
        bare.cast_bytes = bare.cast_launches = 0
        assert km.gemm(m, n, k) - bare.gemm(m, n, k) == pytest.approx(
            m * k * nbytes / km.memory_rate + launches * km.overhead, rel=1e-12), (device.name, recipe)
    # block scaling (one cast with per-block scales, 1 x 128) is Hopper's only
    for name in ("b200", "gb200"):
        with pytest.raises(SpecError, match=f"^job.fp8_recipe = 'blockwise': device {name} has no FP8 block-scaled "
                                            "GEMMs"):
            KernelModel(DEVICES[name], 1, DEVICES[name].peak_flops("fp8"), "blockwise")
    # MXFP8 (1 x 32 blocks, both copies written in one launch) is Blackwell's only
    # (TE check_mxfp8_support: compute capability 10.x); the error names each device's
    # own block scaling where it has one
    for name, closest in (("h100-sxm", "blockwise"), ("h200", "blockwise"), ("mi300x", "tensorwise")):
        with pytest.raises(SpecError, match=rf"^job.fp8_recipe = 'mxfp8': device {name} has no MXFP8 GEMMs .*"
                                            rf"closest expressible: fp8_recipe {closest}$"):
            KernelModel(DEVICES[name], 1, DEVICES[name].peak_flops("fp8"), "mxfp8")
    # GH200's GPU is an H100: its curve (FP8 at the H100's measured fraction, casts, block
    # scaling but no MXFP8)
    from nest.cost.efficiency import device_efficiency, gemm_fraction
    assert device_efficiency(DEVICES["gh200"]) == device_efficiency(H100)
    assert gemm_fraction(DEVICES["gh200"], 1) == gemm_fraction(H100, 1) < gemm_fraction(H100, 2)
    with pytest.raises(SpecError, match="^job.fp8_recipe = 'mxfp8': device gh200 has no MXFP8 GEMMs"):
        KernelModel(DEVICES["gh200"], 1, DEVICES["gh200"].peak_flops("fp8"), "mxfp8")
    # BF16 GEMMs quantize nothing, and the recipe does not matter to them
    assert KernelModel(H100, 2, H100.peak_flops("bf16"), "tensorwise").gemm(m, n, k) == \
        KernelModel(H100, 2, H100.peak_flops("bf16")).gemm(m, n, k)


def test_attention_backward_is_slower_per_flop_than_forward():
    k = KernelModel(H100, 2, H100.peak_flops("bf16"))
    flops = 1e13
    fwd, bwd = k.attention(flops) - k.overhead, k.attention_backward(flops) - k.overhead
    assert bwd / fwd == pytest.approx(FLASH_BACKWARD_FACTOR / DEVICE_EFFICIENCY["h100-sxm"].attention_backward_ratio)
    assert bwd > FLASH_BACKWARD_FACTOR * fwd


def test_kernels_on_columns_equal_each_element_alone_bit_for_bit():
    rng = np.random.default_rng(0)
    m = rng.integers(1, 70000, 400).astype(np.int64)
    n = rng.integers(1, 60000, 400).astype(np.float64)
    k = rng.integers(1, 30000, 400).astype(np.int64)
    batch = rng.integers(1, 500, 400).astype(np.int64)
    for device in (A100, H100, TPU, DEVICES["mi300x"]):
        for dtype_bytes, dtype in ((1, "fp8"), (2, "bf16"), (4, "fp32")):
            if dtype == "fp8" and not device.peak_flops_fp8:
                continue
            km = KernelModel(device, dtype_bytes, device.peak_flops(dtype))
            got = km.gemm(m, n, k)
            assert got.tolist() == [km.gemm(int(a), float(b), int(c)) for a, b, c in zip(m, n, k)]
            got = km.bmm(m, n, k, batch)
            assert got.tolist() == [km.bmm(int(a), float(b), int(c), int(d)) for a, b, c, d in zip(m, n, k, batch)]


def test_devices_without_a_curve_are_a_plain_roofline():
    assert device_efficiency(TPU) is GENERIC
    k = KernelModel(TPU, 2, TPU.peak_flops("bf16"))
    m = n = kk = 16384
    flops = 2.0 * m * n * kk
    out = m * n * 2
    expect = max(flops / (TPU.peak_flops("bf16") * TPU.gemm_efficiency) + out / k.memory_rate,
                 (m * kk + kk * n) * 2 / k.memory_rate + out / k.memory_rate) + k.overhead
    assert k.gemm(m, n, kk) == pytest.approx(expect, rel=1e-15)


# -- collectives --------------------------------------------------------------------------


def test_calibrated_cluster_scales_bandwidth_and_floors_latency():
    raw = CLUSTERS["dgx-h100"].sized(64)
    cal = calibrated_cluster(raw)
    assert [t.fanout for t in cal.tiers] == [t.fanout for t in raw.tiers]
    for i, (a, b) in enumerate(zip(raw.tiers, cal.tiers)):
        e = NCCL_EFFICIENCY.tier(i)
        assert b.bandwidth == a.bandwidth * e.bus_efficiency
        assert b.latency == max(a.latency, e.step_latency)
    assert calibrated_cluster(raw, RAW_EFFICIENCY) == raw
    # the paper setups' latencies (100-300 us) are above the NCCL floors and stay
    paper = CLUSTERS["h100-spineleaf"].sized(64)
    assert [t.latency for t in calibrated_cluster(paper).tiers] == [t.latency for t in paper.tiers]


def test_raw_formulas_are_unchanged_by_the_layer():
    """The alpha-beta prices of a raw cluster are what they were (test_topology compares
    them with the graph model); the calibrated cluster is priced by the same formulas."""
    raw = CLUSTERS["dgx-a100"].sized(64)
    g = np.arange(8)[None]
    tier = raw.tiers[0]
    n = 1e9
    assert group_shape(raw, g).all_reduce(n) == pytest.approx(2 * 7 / 8 * n / tier.bandwidth + 14 * tier.latency)
    cal = calibrated_cluster(raw)
    e = NCCL_EFFICIENCY.scale_up
    assert group_shape(cal, g).all_reduce(n) == pytest.approx(
        2 * 7 / 8 * n / (tier.bandwidth * e.bus_efficiency) + 14 * max(tier.latency, e.step_latency))


def test_bus_bandwidth_rises_with_size_and_saturates():
    cluster = CLUSTERS["dgx-h100"].sized(64)
    sizes = [2.0**p for p in range(10, 36, 2)]
    for tier, ranks in ((0, 8), (1, 8)):
        bw = [NCCL_EFFICIENCY.bus_bandwidth(cluster, tier, ranks, s) for s in sizes]
        assert all(b2 > b1 for b1, b2 in zip(bw, bw[1:]))
        ceiling = cluster.tiers[tier].bandwidth * NCCL_EFFICIENCY.tier(tier).bus_efficiency
        assert bw[-1] < ceiling and bw[-1] > 0.99 * ceiling
        assert bw[0] < 0.05 * ceiling  # latency floor: 1 KiB messages are latency-bound
    # measured large-message bus bandwidths the defaults come from (within 5%)
    assert NCCL_EFFICIENCY.bus_bandwidth(cluster, 0, 8, 16 * 2**30) == pytest.approx(367e9, rel=0.05)
    a100 = CLUSTERS["dgx-a100"].sized(64)
    assert NCCL_EFFICIENCY.bus_bandwidth(a100, 0, 8, 4 * 2**30) == pytest.approx(232.5e9, rel=0.05)
    assert NCCL_EFFICIENCY.bus_bandwidth(a100, 1, 8, 8 * 2**30) == pytest.approx(24e9, rel=0.05)


def test_tier_efficiency_is_validated():
    with pytest.raises(ValueError):
        TierEfficiency(1.2, 1e-6)
    with pytest.raises(ValueError):
        TierEfficiency(0.9, -1.0)
    assert CollectiveEfficiency().tier(0) == NCCL_EFFICIENCY.scale_up
    assert CollectiveEfficiency().tier(3) == NCCL_EFFICIENCY.scale_out
    assert math.isfinite(NCCL_EFFICIENCY.scale_out.step_latency)
