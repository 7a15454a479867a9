"""Benchmark reports: pytest-benchmark JSON files of trtcheck benchmarks -> Markdown, HTML and plots.

    runs = trtcheck.report.load_runs(["monday.json", "tuesday.json"])
    result = trtcheck.report.write_report(runs, "report/")      # tuesday against monday
    result.regressions                                          # slower stitched medians, more segments,
                                                                # then failures (equivalence FAIL, fallbacks)

The ``trtcheck report`` command is a thin layer over ``load_runs`` and ``write_report``.
"""

from trtcheck.errors import ReportError
from trtcheck.report.analysis import (
    DEFAULT_THRESHOLD,
    Failure,
    Regression,
    Summary,
    comparable,
    failure_reasons,
    find_failures,
    find_regressions,
    format_speedup,
    relative_change,
    summarize,
)
from trtcheck.report.plots import Plot
from trtcheck.report.runs import Commit, Group, Machine, Run, load_run, load_runs
from trtcheck.report.writer import ReportResult, write_report

__all__ = [
    "DEFAULT_THRESHOLD",
    "Commit",
    "Failure",
    "Group",
    "Machine",
    "Plot",
    "Regression",
    "ReportError",
    "ReportResult",
    "Run",
    "Summary",
    "comparable",
    "failure_reasons",
    "find_failures",
    "find_regressions",
    "format_speedup",
    "load_run",
    "load_runs",
    "relative_change",
    "summarize",
    "write_report",
]
