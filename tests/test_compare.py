"""``compare``: rows, normalisation, rendering, JSON and the plot."""

import io
import json

import pytest

import nest
from nest.presets.clusters import CLUSTERS
from nest.studies.compare import (
    CompareRow,
    compare,
    compare_json,
    compare_plot,
    normalize,
    render_compare,
    sized_cluster,
)


def _row(devices, strategy, tokens, model="m", cluster="c"):
    feasible = tokens is not None
    return CompareRow(model, cluster, devices, strategy, feasible, None if feasible else "too big",
                      tokens, 1.0 / tokens if feasible else None, 1.0 if feasible else None,
                      2.0 if feasible else None, 0.5 if feasible else None, devices if feasible else None,
                      {} if feasible else None, [] if feasible else None, 0.0)


def test_normalization_uses_the_first_feasible_manual_result():
    rows = normalize([
        _row(64, "manual", None), _row(64, "nest", 50.0),
        _row(128, "manual", 100.0), _row(128, "nest", 150.0),
        _row(256, "manual", 180.0), _row(256, "nest", 360.0), _row(256, "mcmc", None),
        _row(64, "manual", 10.0, model="other"), _row(64, "nest", 30.0, model="other"),
    ])
    by = {(r.model, r.devices, r.strategy): r for r in rows}
    assert by[("m", 64, "nest")].normalized == 0.5  # manual infeasible at 64: reference is 128
    assert by[("m", 64, "nest")].vs_manual is None
    assert by[("m", 128, "manual")].normalized == 1.0
    assert by[("m", 128, "nest")].normalized == 1.5 and by[("m", 128, "nest")].vs_manual == 1.5
    assert by[("m", 256, "nest")].normalized == 3.6 and by[("m", 256, "nest")].vs_manual == 2.0
    assert by[("m", 256, "mcmc")].normalized is None
    assert by[("other", 64, "nest")].normalized == 3.0  # each model has its own reference
    no_manual = normalize([_row(64, "nest", 5.0)])
    assert no_manual[0].normalized is None and no_manual[0].vs_manual is None


@pytest.fixture(scope="module")
def rows():
    given = dict(tp=8, pp=2, micro_batch=1, sp=True, zero=1, layers_per_stage=[17, 17])
    return compare("llama2-7b", "h100-spineleaf", [64, 128],
                   strategies=["manual", "nest", "given", "mcmc"], config=given, budget=40)


def test_compare_rows(rows):
    assert [(r.devices, r.strategy) for r in rows] == [
        (d, s) for d in (64, 128) for s in ("manual", "nest", "given", "mcmc")]
    by = {(r.devices, r.strategy): r for r in rows}
    manual64 = by[(64, "manual")]
    assert manual64.feasible and manual64.normalized == 1.0 and manual64.vs_manual == 1.0
    for r in rows:
        assert r.feasible
        assert r.normalized == pytest.approx(r.throughput_tokens_per_s / manual64.throughput_tokens_per_s)
        assert r.vs_manual == pytest.approx(r.throughput_tokens_per_s
                                            / by[(r.devices, "manual")].throughput_tokens_per_s)
        assert r.throughput_tokens_per_s == pytest.approx(1024 * 4096 / r.step_time_s)
        assert r.memory_max_bytes <= r.memory_capacity_bytes
        assert by[(r.devices, "nest")].step_time_s <= r.step_time_s * (1 + 1e-12)
    assert by[(64, "given")].parallelism["dp"] == 4 and by[(128, "given")].parallelism["dp"] == 8


def test_render_and_json(rows):
    text = render_compare(rows)
    assert "llama2-7b on h100-spineleaf" in text and "normalized to manual at 64 devices" in text
    assert text.count("\n") >= 2 + 8
    doc = json.loads(compare_json(rows))
    assert doc["normalized_to"][0]["devices"] == 64
    assert len(doc["rows"]) == 8 and doc["rows"][0]["strategy"] == "manual"
    assert doc["rows"][0]["normalized"] == 1.0


def test_infeasible_strategies_show_why():
    bad = dict(tp=8, pp=1, micro_batch=1, sp=True, zero=1, recompute="none")
    rows = compare("gpt3-175b", "h100-spineleaf", [64], strategies=["manual", "given"], config=bad)
    given = rows[1]
    assert not given.feasible and given.normalized is None
    assert "GiB" in given.reason
    text = render_compare(rows)
    assert "infeasible" in text and given.reason in text
    with pytest.raises(nest.SpecError):
        compare("gpt3-175b", "h100-spineleaf", [64], strategies=["given"])


def test_sized_cluster_accepts_templates_callables_and_specs():
    template = CLUSTERS["dgx-h100"]
    assert sized_cluster(template, 128).num_devices == 128
    assert sized_cluster("dgx-h100", 256).num_devices == 256
    assert sized_cluster(lambda n: template.sized(n), 64).num_devices == 64
    fixed = template.sized(64)
    assert sized_cluster(fixed, 64) is fixed
    with pytest.raises(nest.SpecError):
        sized_cluster(fixed, 128)


def test_compare_plot(rows, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "compare.png"
    compare_plot(rows, path)
    assert path.read_bytes()[:4] == b"\x89PNG"


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_waits_its_delay_and_shows_only_on_a_terminal(monkeypatch):
    from nest.report import progress as module

    clock = [100.0]
    monkeypatch.setattr(module.time, "perf_counter", lambda: clock[0])
    quick = _Terminal()
    bar = module.Progress(4, stream=quick, delay_s=2.0, tty_only=True)
    bar.update()
    clock[0] += 1.0
    bar.update()
    bar.close()
    assert quick.getvalue() == ""  # ended before its delay: nothing at all
    slow = _Terminal()
    bar = module.Progress(4, stream=slow, delay_s=2.0, tty_only=True)
    bar.update()
    clock[0] += 2.5
    bar.update()
    assert slow.getvalue().startswith("\r[") and "2/4" in slow.getvalue()
    bar.update(2)
    bar.close()
    assert slow.getvalue().rsplit("\r", 1)[1].startswith("[" + "#" * 30 + "] 4/4 ") and slow.getvalue().endswith("\n")
    piped = io.StringIO()  # not a terminal: quiet
    bar = module.Progress(4, stream=piped, delay_s=2.0, tty_only=True)
    clock[0] += 5
    bar.update(4)
    bar.close()
    assert piped.getvalue() == ""


def test_compare_cli_is_silent_off_a_terminal_and_with_quiet(capsys):
    from nest.cli import main

    args = ["compare", "--model", "gpt-1.7b", "--cluster", "dgx-a100", "--devices", "8", "--strategies", "manual,nest"]
    for extra in ([], ["--quiet"]):
        assert main(args + extra) == 0
        captured = capsys.readouterr()
        assert captured.err == "" and "manual" in captured.out
