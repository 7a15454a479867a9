"""A regression must be real: a rank test over the rounds, an effect size, a noise floor, the machine's drift.

The same commit benchmarked twice (``bench_files["rerun"]``, run beside two other benchmark runs on a
two-core machine while the baseline ran alone) must flag nothing; a 1.3x slowdown of a 2 ms model must
still be flagged.
"""

from __future__ import annotations

import dataclasses

import pytest

from suites.report.report_runs import SLOW_MODEL
from suites.report.test_report_analysis import at_2ms, scaled
from trtcheck.report import find_regressions, load_run
from trtcheck.report.statistics import NOISE_FLOOR_S, Spread, is_regression, mann_whitney_greater, slower_beyond_chance


def test_rank_test_p_values():
    # Five rounds all above five others: U = 25, the smallest p five against five can give.
    assert mann_whitney_greater([6, 7, 8, 9, 10], [1, 2, 3, 4, 5]) == pytest.approx(0.0061, abs=2e-4)
    assert mann_whitney_greater([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) > 0.99  # faster is no evidence of slower
    assert 0.3 < mann_whitney_greater([1, 3, 5, 7, 9], [2, 4, 6, 8, 10]) < 0.8
    assert mann_whitney_greater([2.0] * 6, [2.0] * 6) == 1.0  # all tied: no evidence either way
    with pytest.raises(ValueError):
        mann_whitney_greater([], [1.0])


def test_rounds_decide_before_quartiles_and_quartiles_before_medians():
    base = Spread(1e-3, 0.9e-3, 1.1e-3, tuple(1e-3 + i * 1e-5 for i in range(-5, 5)))
    slower = Spread(1.5e-3, 1.4e-3, 1.6e-3, tuple(1.5e-3 + i * 1e-5 for i in range(-5, 5)))
    assert slower_beyond_chance(base, slower).method == "rank test"
    no_rounds = slower_beyond_chance(dataclasses.replace(base, rounds=None), dataclasses.replace(slower, rounds=None))
    assert no_rounds.significant and no_rounds.method == "interquartile ranges disjoint"
    overlapping = slower_beyond_chance(Spread(1e-3, 0.5e-3, 2e-3), Spread(1.5e-3, 1e-3, 2.5e-3))
    assert not overlapping.significant
    assert slower_beyond_chance(Spread(1e-3), Spread(2e-3)).significant  # medians alone: the old rule


def test_the_noise_floor_and_the_machine_drift():
    rounds = tuple(0.2e-3 + i * 1e-6 for i in range(20))
    small = Spread(0.2e-3, 0.195e-3, 0.205e-3, rounds)
    small_slower = Spread(0.26e-3, 0.255e-3, 0.265e-3, tuple(r * 1.3 for r in rounds))
    assert 0.26e-3 - 0.2e-3 < NOISE_FLOOR_S
    assert is_regression(small, small_slower, 0.10) == (False, slower_beyond_chance(small, small_slower))
    big = Spread(2e-3, 1.95e-3, 2.05e-3, tuple(r * 10 for r in rounds))
    big_slower = Spread(2.6e-3, 2.55e-3, 2.65e-3, tuple(r * 13 for r in rounds))
    assert is_regression(big, big_slower, 0.10)[0]
    # The machine ran eager 1.3x slower too: the stitched slowdown is the machine's, not trtcheck's.
    assert not is_regression(big, big_slower, 0.10, machine_slowdown=1.3)[0]
    # A faster machine is not credited: the slowdown stays visible.
    assert is_regression(big, big_slower, 0.10, machine_slowdown=0.7)[0]


def test_two_runs_of_one_commit_flag_nothing(bench_files):
    baseline, rerun = load_run(bench_files["baseline"]), load_run(bench_files["rerun"])
    assert all(g.stitched_spread is not None and g.stitched_spread.rounds for g in baseline.groups)  # rounds recorded
    assert find_regressions(baseline, rerun) == []
    assert find_regressions(rerun, baseline) == []


def test_a_real_slowdown_of_a_2ms_model_is_flagged(bench_files):
    baseline = at_2ms(load_run(bench_files["baseline"]))
    regressions = find_regressions(baseline, scaled(baseline, 1.3))
    assert len(regressions) == len(baseline.groups)
    assert all(r.latency_regressed and r.evidence.method == "rank test" and r.evidence.significant for r in regressions)
    assert "rank test p=" in regressions[0].describe() and "IQR" in regressions[0].describe()


def test_a_slower_machine_is_not_a_regression(bench_files):
    baseline = at_2ms(load_run(bench_files["baseline"]))
    loaded = scaled(baseline, 1.3)
    loaded = dataclasses.replace(loaded, groups=tuple(dataclasses.replace(g, eager_median=g.eager_median * 1.3) for g in loaded.groups))
    assert find_regressions(baseline, loaded) == []


def test_the_changed_run_is_still_flagged(bench_files):
    regressions = find_regressions(load_run(bench_files["baseline"]), load_run(bench_files["changed"]))
    slow = [r for r in regressions if r.model == SLOW_MODEL and r.latency_regressed]
    assert slow and all(r.evidence.method == "rank test" for r in slow)

