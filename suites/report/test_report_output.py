"""The written report: Markdown and a self-contained HTML page, with the table and the five plots."""

from __future__ import annotations

import base64
import re

import pytest

from suites.report.report_runs import SLOW_MODEL
from trtcheck.report import load_runs, write_report
from trtcheck.report.plots import SPEEDUP_MODELS_PER_ROW
from trtcheck.report.render import WIDE_PX

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PLOTS = ("speedup", "latency_history", "compile_times", "segments", "time_breakdown")


@pytest.fixture
def written(bench_files, tmp_path):
    runs = load_runs([bench_files["baseline"], bench_files["changed"]])
    return write_report(runs, tmp_path / "out")


def test_the_report_files_and_plots_are_written(written, tmp_path):
    out = tmp_path / "out"
    assert written.markdown == out / "report.md" and written.html == out / "report.html"
    assert [p.name for p in written.plots] == list(PLOTS)
    for plot in written.plots:
        assert plot.path.parent == out
        assert plot.path.read_bytes().startswith(PNG_SIGNATURE)


def test_html_is_self_contained(written):
    page = written.html.read_text()
    sources = re.findall(r'src="([^"]*)"', page)
    assert len(sources) == len(PLOTS) and all(s.startswith("data:image/png;base64,") for s in sources)
    for source in sources:
        assert base64.b64decode(source.split(",", 1)[1]).startswith(PNG_SIGNATURE)
    assert not re.search(r"<link|<script|href=|url\(", page)  # no stylesheet, script, link or CSS import
    for name in PLOTS:
        assert f'id="plot-{name}"' in page


def test_html_has_the_summary_table_with_every_group_and_the_regressions_first(written):
    page = written.html.read_text()
    table = page[page.index("<table>"):page.index("</table>")]
    columns = (
        "eager ms", "stitched ms", "speedup", "segments (TRT/Torch)", "boundaries",
        "boundary overhead µs", "compile s", "equivalence", "regression",
    )
    for column in columns:
        assert f"<th>{column}</th>" in table
    for group in written.summary.latest.groups:
        assert f"<td>{group.model}</td><td>{group.preset}</td>" in table
    assert table.count('<tr class="regressed">') == len(written.regressions)
    assert "PASS" in table
    assert page.index("regression(s) against baseline.json") < page.index("<table>")


def test_markdown_leads_with_regressions_then_the_table(written):
    text = written.markdown.read_text()
    regressions = text.index("## Regressions")
    table = text.index("| model | preset | eager ms | stitched ms | speedup |")
    assert regressions < table
    assert f"**{SLOW_MODEL}/min_block_size_1: stitched median" in text
    rows = [line for line in text[table:].splitlines()[2:] if line.startswith("|")]
    first_row = rows[: len(written.summary.latest.groups)]
    assert all(line.count("|") == 13 for line in first_row)  # 12 columns (precision since issue 24)
    assert sum("REGRESSED" in line for line in first_row) == len(written.regressions)
    for plot in PLOTS:
        assert f"({plot}.png)" in text


def test_markdown_shows_machine_and_commit_per_run(written):
    text = written.markdown.read_text()
    runs = text[text.index("## Runs"):]
    for run in written.summary.runs:
        assert run.path.name in runs
        assert run.machine.describe() in runs
        assert run.commit.describe() in runs


def test_an_equivalence_failure_shows_as_fail(bench_files, tmp_path):
    import dataclasses

    (run,) = load_runs([bench_files["baseline"]])
    failed = dataclasses.replace(run.groups[0], equivalence={"passed": False, "max_abs": 0.5, "cosine": 0.9})
    result = write_report([dataclasses.replace(run, groups=(failed, *run.groups[1:]))], tmp_path)
    assert "FAIL (max abs 5.0e-01)" in result.markdown.read_text()
    assert '<td class="fail">FAIL' in result.html.read_text()


def test_the_cross_machine_warning_is_at_the_top_of_both_documents(bench_files, tmp_path):
    result = write_report(load_runs([bench_files["baseline"], bench_files["other_machine"]]), tmp_path)
    text, page = result.markdown.read_text(), result.html.read_text()
    assert text.index("**WARNING:** runs come from 2 different machines") < text.index("| model |")
    assert page.index("different machines") < page.index("<table>")
    assert "REGRESSED" not in text and "not checked" in text


@pytest.mark.slow
def test_the_latency_history_keeps_its_axes_with_the_whole_zoo(bench_files, tmp_path):
    """With 130+ model/preset lines (the default matrix), a fixed-size figure gave the legend all the room and
    the axes none: matplotlib warned and drew an empty strip. The figure must grow with the legend."""
    import dataclasses
    import warnings

    runs = load_runs([bench_files["baseline"], bench_files["changed"]])
    many = [
        dataclasses.replace(run, groups=tuple(
            dataclasses.replace(group, model=f"{group.model}_copy{copy}") for copy in range(70) for group in run.groups
        ))
        for run in runs
    ]
    assert len({group.label for group in many[0].groups}) >= 130
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "constrained_layout not applied because axes sizes collapsed to zero"
        result = write_report(many, tmp_path)
    plots = {p.name: p for p in result.plots}
    assert plots["latency_history"].path.read_bytes().startswith(PNG_SIGNATURE)
    # The speedup bars wrap into rows of SPEEDUP_MODELS_PER_ROW models (one row of 140 models was 70 inches
    # wide), and a plot wider than a page column spans the page.
    presets = len({g.preset for g in many[-1].groups})
    assert png_width(plots["speedup"].path) <= round(100 * (1.2 + 0.5 * SPEEDUP_MODELS_PER_ROW * presets))
    page = result.html.read_text()
    for plot in result.plots:
        wide = png_width(plot.path) > WIDE_PX
        assert (f'<figure id="plot-{plot.name}" class="wide">' in page) == wide, plot.name
    assert 'id="plot-latency_history" class="wide"' in page


def png_width(path) -> int:
    return int.from_bytes(path.read_bytes()[16:20], "big")
