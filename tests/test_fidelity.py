"""Prediction fidelity regression checks (bench/fidelity): nest's iteration times stay
within the error band they achieve against published runs; a change to the cost model
that breaks them must be justified against the data."""

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "fidelity"


def _load():
    spec = importlib.util.spec_from_file_location("nest_bench_run_fidelity", BENCH / "run_fidelity.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


RUN = _load()
POINTS = sys.modules["points"]


def _errors(points):
    out = []
    for p in points:
        plan = RUN.evaluate(p)
        out.append((plan.step_time_s - p.measured_step_s) / p.measured_step_s)
    return out


def test_published_numbers_are_converted_to_iteration_times():
    one_t = next(p for p in POINTS.SC21_TABLE1 if p.model.name == "gpt-1t")
    # 96 B s l h^2 (1 + s/6h + V/16lh) at 163 TFLOP/s on 3072 GPUs
    assert one_t.measured_step_s == pytest.approx(102.63, rel=1e-3)
    llama = next(p for p in POINTS.NEMO if p.model.name == "llama2-70b")
    assert llama.measured_step_s == pytest.approx(128 * 4096 / (1728 * 64))
    assert llama.dp == 4 and llama.sp and llama.dtype == "fp8"
    assert RUN.megatron_split(80, 4, 20) == [2] + [1] * 78 + [2]


def test_sc21_weak_scaling_within_the_achieved_band():
    """SC21 Table 1 (A100, full recomputation): mean |error| 2.9% and worst 6.3% when this
    test was written; fail beyond 4% / 8%."""
    errors = _errors(POINTS.SC21_TABLE1)
    assert max(abs(e) for e in errors) <= 0.08, errors
    assert sum(abs(e) for e in errors) / len(errors) <= 0.04, errors


def test_sc21_strong_scaling_within_the_achieved_band():
    errors = _errors([p for p in POINTS.SC21_TABLE2 if p.headline])
    assert max(abs(e) for e in errors) <= 0.08, errors


def test_selective_recomputation_ranked_faster_than_full():
    full, selective = (RUN.evaluate(p).step_time_s for p in POINTS.KORTHIKANTI)
    assert selective < full
    measured = POINTS.KORTHIKANTI[0].measured_step_s / POINTS.KORTHIKANTI[1].measured_step_s
    assert 1.0 < full / selective < 1.2 * measured


def test_nemo_h100_fp8_simulated_within_the_achieved_band():
    """NeMo 24.12 on H100 with FP8, simulated step: mean |error| 10.2%, worst 27.7%
    (Llama-3-8B with context parallelism) when this test was written."""
    errors = []
    for p in POINTS.NEMO:
        plan = RUN.evaluate(p)
        sim = RUN.simulate(plan, p.model, RUN.timing_cluster(p), RUN.job_of(p)).step_time_s
        errors.append((sim - p.measured_step_s) / p.measured_step_s)
    assert max(abs(e) for e in errors) <= 0.30, errors
    assert sum(abs(e) for e in errors) / len(errors) <= 0.12, errors


MEMORY = sys.modules["memory_runs"]


def test_long_context_moe_and_the_routers_imbalance():
    """Megatron-Core's model zoo, Qwen3-235B on 256 H100 at 16k-128k tokens (TP4 CP1-8 EP8
    PP8 VP4): the forced-balance steps within 4%; with the router's moe_load_cv set by the
    16k pair, the dropless/forced ratios at 32k, 64k and 128k within 2% of the published
    ones (without the imbalance model every ratio would be 1)."""
    runs = {r.id: r for r in MEMORY.RUNS}
    for k in (16, 32, 64, 128):
        forced, dropless = runs[f"zoo-q3-235b-{k}k-forced-h100"], runs[f"zoo-q3-235b-{k}k-dropless-h100"]
        f, d = RUN.modern_plan(forced).step_time_s, RUN.modern_plan(dropless).step_time_s
        assert abs(f / forced.measured_step_s - 1) <= 0.04, (k, f, forced.measured_step_s)
        published = dropless.measured_step_s / forced.measured_step_s
        assert abs((d / f) / published - 1) <= (2e-3 if dropless.sets_router else 0.02), (k, d / f, published)


def test_megatron_flops_of_gpt_follow_its_closed_form():
    """Megatron-LM's count for GPT (causal attention halved): 72 l h^2 (1 + s/12h + V/12lh)
    per token, the SC21 form with the attention scores counted once."""
    flops = sys.modules["megatron_flops"].megatron_flops
    m = POINTS.SC21_TABLE1[0].model
    l, h, v, s = m.num_layers, m.hidden, m.vocab_size, 2048
    assert flops(m, s, 1) == pytest.approx(s * 72 * l * h * h * (1 + s / (12 * h) + v / (12 * l * h)), rel=1e-12)


def test_spearman():
    assert RUN.spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert RUN.spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    assert RUN.ranks([5.0, 1.0, 5.0]) == [2.5, 1.0, 2.5]


def test_memory_within_ten_percent_of_megatron_formulas():
    """First-stage memory against Megatron-LM's theoretical_memory_usage for every 16-bit
    headline layout (21 rows, interleaved ones included: worst 3.9% when this test was
    written). The formula knows no FP8: under FP8 Transformer Engine keeps FP8 copies of
    the GEMM inputs (fewer activation bytes) and of the weights (2 more bytes per weight),
    so FP8 rows sit above it in weights and below it in activations."""
    headline = [p for p in POINTS.POINTS if p.headline]
    rows = RUN.memory_rows([p for p in headline if p.dtype != "fp8"])
    assert len(rows) >= 20
    assert max(abs(r["err"]) for r in rows) <= 0.10, [(r["label"], r["err"]) for r in rows]
    assert max(abs(r["err_w"]) for r in rows if r["vp"] > 1) <= 0.05
    fp8 = RUN.memory_rows([p for p in headline if p.dtype == "fp8"])
    assert len(fp8) >= 10 and all(r["err_w"] > 0 and r["err_a"] < 0 for r in fp8)


def test_headline_rows_meet_the_issue_targets():
    """Every headline point (SC21 Tables 1-2 PTD-P, Korthikanti, NeMo 24.12; 27 rows):
    mean |error| <= 10% and no row beyond 20% (5.2% and 18.8% -- llama3-8b with context
    parallelism -- when this test was written)."""
    errors = _errors([p for p in POINTS.POINTS if p.headline])
    assert len(errors) == 27
    assert max(abs(e) for e in errors) <= 0.20, errors
    assert sum(abs(e) for e in errors) / len(errors) <= 0.10, errors
