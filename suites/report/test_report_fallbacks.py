"""A model/preset whose stitched module fell back to PyTorch is a failure in the report, like an equivalence
FAIL: red in the table, listed first, and ``--fail-on-regression`` exits 1 on it, baseline or not.

The run with a fallback is real: the benchmark suite of ``report_runs`` with the relu converter of
``SPLIT_MODEL`` broken (``TRTCHECK_REPORT_BROKEN_CONVERTER``), so its conversion fails and the segment runs
in PyTorch, exactly what a converter bug on a user's machine does. Its outputs still agree with eager,
which is the point: equivalence alone would call it a PASS.
"""

from __future__ import annotations

import json

import pytest

from suites.report import report_runs
from suites.report.report_runs import SPLIT_MODEL
from trtcheck.report import find_failures, load_run, load_runs, summarize, write_report
from trtcheck.tools.cli import main


@pytest.fixture(scope="module")
def fallback_run(tmp_path_factory):
    spec = report_runs.RunSpec("fallback", {"TRTCHECK_REPORT_BROKEN_CONVERTER": f"{SPLIT_MODEL}=aten.relu.default"})
    return report_runs.run_benchmarks(tmp_path_factory.mktemp("fallback_run"), spec)


def _fell_back(run):
    return [g for g in run.groups if g.fallbacks]


@pytest.mark.slow
def test_the_run_records_the_fallback_and_equivalence_still_passes(fallback_run):
    run = load_run(fallback_run)
    fell_back = _fell_back(run)
    assert fell_back and all(g.model == SPLIT_MODEL for g in fell_back)
    assert all(g.equivalence_passed is True for g in fell_back)  # the outputs agree: only fallbacks tell
    assert all(not g.fallbacks for g in run.groups if g.model != SPLIT_MODEL)


@pytest.mark.slow
def test_a_fallback_is_a_failure_even_without_a_baseline(fallback_run):
    run = load_run(fallback_run)
    summary = summarize([run])
    assert summary.baseline is None and summary.regressions == ()
    assert [f.label for f in summary.failures] == [g.label for g in _fell_back(run)]
    assert [f.label for f in find_failures(run)] == [f.label for f in summary.failures]
    failure = summary.failures[0]
    assert failure.describe().startswith(f"{failure.label}: FAILED: {failure.group.fallbacks} TensorRT segment(s) fell back to PyTorch")


@pytest.mark.slow
def test_the_report_shows_it_as_fail_in_red_and_first(fallback_run, tmp_path):
    result = write_report(load_runs([fallback_run]), tmp_path)
    group = _fell_back(result.summary.latest)[0]
    text, page = result.markdown.read_text(), result.html.read_text()
    cell = f"FAIL ({group.fallbacks} fallback{'s' if group.fallbacks != 1 else ''} to PyTorch, max abs"
    row = next(line for line in text.splitlines() if line.startswith(f"| {group.model} | {group.preset} |"))
    assert cell in row
    assert text.index("## Failures") < text.index("| model |")
    assert "failure(s) (equivalence FAIL or fallbacks to PyTorch)" in text
    assert f'<td class="fail">{cell}' in page
    assert page.index('<li class="fail">') < page.index("<table>")
    assert '<div class="box regressions">' in page  # the red box, not the "clean" one
    passing = [g for g in result.summary.latest.groups if not g.fallbacks]
    assert passing and text.count("| PASS (") == len(passing)


@pytest.mark.slow
def test_fail_on_regression_exits_1_on_a_fallback(fallback_run, tmp_path, capsys):
    argv = ["report", str(fallback_run), "--out", str(tmp_path)]
    assert main(argv) == 0  # without the flag a failure is reported, not fatal
    assert main([*argv, "--fail-on-regression"]) == 1
    out = capsys.readouterr().out
    assert f"{SPLIT_MODEL}/min_block_size_1: FAILED:" in out and "fell back to PyTorch" in out


@pytest.mark.slow
def test_fail_on_regression_exits_1_on_a_fallback_against_a_clean_baseline(bench_files, fallback_run, tmp_path, derive):
    # The recorded baseline as if measured on the machine that made the fallback run now: runs from another machine
    # are not compared (their CPU differs from this one's wherever the recording was made elsewhere).
    here = json.loads(fallback_run.read_text())["machine_info"]
    baseline = derive(bench_files["baseline"], "baseline_here.json", lambda data: data.update(machine_info=here))
    # --baseline: which of the two files was written last depends on fixture order, not on this test.
    result = write_report(load_runs([fallback_run]), tmp_path, baseline=load_run(baseline))
    assert result.summary.compared and result.failures
    assert all(failure in result.regressions for failure in result.failures)
    argv = ["report", str(fallback_run), "--baseline", str(baseline), "--out", str(tmp_path / "cli"), "--fail-on-regression"]
    assert main(argv) == 1
