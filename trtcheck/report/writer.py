"""Writing a report directory: ``report.md``, a self-contained ``report.html`` and the plot PNGs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from trtcheck.atomic import atomic_write
from trtcheck.errors import ReportError
from trtcheck.report.analysis import DEFAULT_THRESHOLD, Failure, Regression, Summary, summarize
from trtcheck.report.plots import Plot, draw_all
from trtcheck.report.render import render_html, render_markdown
from trtcheck.report.runs import Run


@dataclass(frozen=True)
class ReportResult:
    """What ``write_report`` wrote, and what it found (the CLI's exit code comes from ``regressions``)."""

    summary: Summary
    markdown: Path
    html: Path
    plots: tuple[Plot, ...]

    @property
    def regressions(self) -> tuple[Regression | Failure, ...]:
        """What ``trtcheck report --fail-on-regression`` fails on: the regressions against the baseline, then
        the latest run's failures (equivalence FAIL, segments fallen back to PyTorch), which fail with or
        without a baseline. Each has ``describe()``; ``summary.regressions`` holds the regressions alone."""
        return (*self.summary.regressions, *self.summary.failures)

    @property
    def failures(self) -> tuple[Failure, ...]:
        return self.summary.failures

    @property
    def warnings(self) -> tuple[str, ...]:
        return self.summary.warnings


def write_report(
    runs: Sequence[Run],
    out_dir: str | Path,
    baseline: Run | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    allow_cross_machine: bool = False,
) -> ReportResult:
    """Summarize ``runs`` (the latest against ``baseline``, or the previous run) and write the report files.

    ``runs`` are ordered by datetime here, so callers may pass them in any order.
    """
    summary = summarize(runs, baseline, threshold, allow_cross_machine)
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        plots = tuple(draw_all(summary.runs, out))
        # Atomically: a reader (a CI upload, a browser left open on report.html) never sees half a report.
        markdown = atomic_write(out / "report.md", render_markdown(summary, plots))
        page = atomic_write(out / "report.html", render_html(summary, plots))
    except OSError as error:
        raise ReportError(f"cannot write the report to {out}: {error}") from None
    return ReportResult(summary, markdown, page, plots)
