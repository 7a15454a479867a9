"""Speedups, regressions against a baseline, and the refusal to compare runs from different machines."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from suites.report.report_runs import SLOW_MODEL, SPLIT_MODEL
from trtcheck.report import ReportError, Run, find_regressions, format_speedup, load_run, relative_change, summarize
from trtcheck.report.statistics import Spread


def scaled(run: Run, factor: float) -> Run:
    """``run`` an hour later with every stitched timing times ``factor``: median, quartiles and rounds (an exact,
    untimed slowdown of the whole distribution)."""
    groups = tuple(_scaled_group(g, factor) for g in run.groups)
    return dataclasses.replace(run, groups=groups, datetime=run.datetime + timedelta(hours=1))


def _scaled_group(group, factor: float):
    spread = group.stitched_spread
    if spread is not None:
        spread = Spread(
            spread.median * factor,
            None if spread.q1 is None else spread.q1 * factor,
            None if spread.q3 is None else spread.q3 * factor,
            None if spread.rounds is None else tuple(r * factor for r in spread.rounds),
        )
    return dataclasses.replace(group, stitched_median=group.stitched_median * factor, stitched_spread=spread)


def tight_2ms(run: Run) -> Run:
    """``run`` with every group's stitched timings a 2 ms median and 20 rounds within 1% of it: a tight
    distribution, so that a test of the effect-size threshold does not hang on the fixture's few noisy rounds."""
    rounds = tuple(2e-3 * (1 + (i - 10) / 1000) for i in range(20))
    spread = Spread(2e-3, rounds[5], rounds[15], rounds)
    return dataclasses.replace(run, groups=tuple(dataclasses.replace(g, stitched_median=2e-3, stitched_spread=spread) for g in run.groups))


def at_2ms(run: Run) -> Run:
    """``run`` with every group's stitched timings scaled to a 2 ms median: above the noise floor
    (``NOISE_FLOOR_S``), which the fixture's sub-millisecond models are not."""
    groups = tuple(_scaled_group(g, 2e-3 / g.stitched_median) for g in run.groups)
    return dataclasses.replace(run, groups=groups)


def test_speedup_is_eager_median_over_stitched_median(bench_files):
    group = load_run(bench_files["baseline"]).groups[0]
    assert group.speedup == pytest.approx(group.eager_median / group.stitched_median)
    faster = dataclasses.replace(group, eager_median=3e-3, stitched_median=1.5e-3)
    assert faster.speedup == pytest.approx(2.0)
    assert dataclasses.replace(group, stitched_median=0.0).speedup is None


def test_relative_change():
    assert relative_change(2.0, 2.3) == pytest.approx(0.15)
    assert relative_change(2.0, 1.0) == pytest.approx(-0.5)
    assert relative_change(None, 1.0) is None and relative_change(0.0, 1.0) is None


@pytest.mark.parametrize(("factor", "flagged"), [(1.15, True), (1.05, False), (0.5, False)])
def test_a_slower_stitched_median_is_flagged_only_beyond_the_threshold(bench_files, factor, flagged):
    baseline = tight_2ms(load_run(bench_files["baseline"]))
    regressions = find_regressions(baseline, scaled(baseline, factor), threshold=0.10)
    assert bool(regressions) is flagged
    if flagged:
        assert len(regressions) == len(baseline.groups)
        assert all(r.latency_regressed and not r.segments_grew for r in regressions)
        assert all(r.slowdown == pytest.approx(0.15) for r in regressions)
        assert "+15.0%" in regressions[0].describe()


def test_the_threshold_is_the_callers(bench_files):
    baseline = tight_2ms(load_run(bench_files["baseline"]))
    assert find_regressions(baseline, scaled(baseline, 1.15), threshold=0.20) == []
    assert find_regressions(baseline, scaled(baseline, 1.05), threshold=0.01)
    with pytest.raises(ReportError, match="threshold must be >= 0"):
        find_regressions(baseline, baseline, threshold=-0.1)


def test_more_segments_is_a_regression_even_when_not_slower(bench_files):
    baseline = load_run(bench_files["baseline"])

    def torch_segments(change: int) -> Run:
        groups = tuple(dataclasses.replace(g, segments_torch=g.segments_torch + change) for g in baseline.groups)
        return dataclasses.replace(baseline, groups=groups)

    regressions = find_regressions(baseline, torch_segments(+1), threshold=0.10)
    assert len(regressions) == len(baseline.groups)
    assert all(r.segments_grew and not r.latency_regressed for r in regressions)
    first = baseline.groups[0]
    expected = (
        f"segments {first.segments_total} ({first.segments_tensorrt} TensorRT + {first.segments_torch} Torch) -> {first.segments_total + 1}"
    )
    assert expected in regressions[0].describe()
    assert find_regressions(baseline, torch_segments(-1), threshold=0.10) == []


def test_real_regressions_are_found_in_the_changed_run(bench_files):
    """The changed run slept 5 ms per stitched call of SLOW_MODEL and forced aten::relu to PyTorch in
    SPLIT_MODEL: a slowdown of many times the 10% threshold, and 3 -> 8 segments."""
    baseline, changed = load_run(bench_files["baseline"]), load_run(bench_files["changed"])
    found = {(r.model, r.preset): r for r in find_regressions(baseline, changed, threshold=0.10)}
    slow = [g.key for g in changed.groups if g.model == SLOW_MODEL]
    assert slow and all(found[key].latency_regressed and not found[key].segments_grew for key in slow)
    split = found[(SPLIT_MODEL, "min_block_size_1")]
    assert split.segments_grew
    assert split.current.segments_total > split.baseline.segments_total


def test_the_previous_run_is_the_default_baseline(bench_files):
    runs = [load_run(bench_files["changed"]), load_run(bench_files["baseline"])]
    summary = summarize(runs)
    assert summary.baseline.path == bench_files["baseline"] and summary.latest.path == bench_files["changed"]
    assert summary.compared and summary.regressions


def test_one_run_without_baseline_checks_nothing_and_says_so(bench_files):
    summary = summarize([load_run(bench_files["baseline"])])
    assert summary.baseline is None and not summary.compared and summary.regressions == ()
    assert any("nothing to compare" in note for note in summary.notes)


def test_runs_from_another_machine_are_warned_about_and_not_compared(bench_files):
    baseline = load_run(bench_files["baseline"])
    # The other machine's run, made far slower: it would be flagged if the runs were compared.
    other = scaled(load_run(bench_files["other_machine"]), 10.0)
    assert find_regressions(baseline, other, 0.10)  # so the refusal below is what prevents a flag
    summary = summarize([baseline, other])
    assert not summary.compared and summary.regressions == ()
    assert any("2 different machines" in w and "some-other-host" in w and baseline.machine.node in w for w in summary.warnings)
    assert any("NOT checked" in w for w in summary.warnings)
    allowed = summarize([baseline, other], allow_cross_machine=True)
    assert allowed.compared and allowed.regressions
    assert any("checked anyway" in w for w in allowed.warnings)


def test_an_explicit_baseline_from_another_machine_is_refused_too(bench_files):
    changed = load_run(bench_files["changed"])
    other = load_run(bench_files["other_machine"])
    summary = summarize([changed], baseline=dataclasses.replace(other, datetime=changed.datetime - timedelta(hours=1)))
    assert not summary.compared and summary.warnings


@pytest.mark.parametrize(("value", "text"), [(1.786, "1.79x"), (2872.95, "2873x"), (0.00131, "0.0013x"), (0.5, "0.50x")])
def test_speedups_stay_readable_at_every_scale(value, text):
    assert format_speedup(value) == text
