"""Formatting a summary as Markdown and as one self-contained HTML page.

Both documents put what a person reads in ten seconds first: warnings, regressions, then the summary
table. They are built from the same rows (``table_rows``) so the two can never disagree. The HTML embeds
its plots as base64 PNG data URIs, so the page can be mailed or attached to a CI run on its own.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass

from trtcheck.report.analysis import Summary, format_speedup
from trtcheck.report.plots import Plot
from trtcheck.report.runs import Group, Run

BOUNDARY_OVERHEAD = "boundary overhead µs"
COLUMNS = (
    "model", "preset", "eager ms", "stitched ms", "speedup", "segments (TRT/Torch)", "boundaries", BOUNDARY_OVERHEAD,
    "precision", "compile s", "equivalence", "regression",
)


@dataclass(frozen=True)
class Row:
    """One table row: its cells as text, and its status (``regressed``, ``ok``, ``unchecked``) for styling."""

    cells: tuple[str, ...]
    status: str
    equivalence_failed: bool
    """The group failed (equivalence FAIL or a fallback to PyTorch): its equivalence cell is drawn red."""


def _number(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e3:.3f}"


def _equivalence(group: Group) -> str:
    """PASS or FAIL with details; any fallback to PyTorch is a FAIL, even when the outputs agree."""
    passed = group.equivalence_passed
    fallbacks = group.fallbacks or 0
    if passed is None and not fallbacks:
        return "n/a"
    details = []
    if fallbacks:
        details.append(f"{fallbacks} fallback{'s' if fallbacks != 1 else ''} to PyTorch")
    max_abs = (group.equivalence or {}).get("max_abs")
    if isinstance(max_abs, (int, float)):
        details.append(f"max abs {max_abs:.1e}")
    word = "PASS" if passed and not fallbacks else "FAIL"
    return word + (f" ({', '.join(details)})" if details else "")


def _boundary_overhead(group: Group) -> str:
    """Microseconds of boundary overhead per value crossing a boundary (from the profile), or n/a."""
    per_boundary = group.per_boundary_seconds
    if per_boundary is None:
        return "n/a"
    if not (group.profile or {}).get("boundaries"):
        return "none"  # nothing crosses: no per-boundary cost to show
    return f"{per_boundary * 1e6:.1f}"


def _regression_cell(summary: Summary, group: Group) -> tuple[str, str]:
    if not summary.compared:
        return ("not checked", "unchecked")
    regression = summary.regression_of(group)
    if summary.baseline is None or summary.baseline.group(group.model, group.preset) is None:
        return ("new (no baseline)", "unchecked")
    if regression is None:
        return ("ok", "ok")
    reasons = []
    if regression.latency_regressed and regression.slowdown is not None:
        reasons.append(f"{regression.slowdown:+.0%} latency")
    if regression.segments_grew:
        reasons.append(f"segments {regression.baseline.segments_total}→{regression.current.segments_total}")
    return ("REGRESSED: " + ", ".join(reasons), "regressed")


def table_rows(summary: Summary) -> list[Row]:
    """The summary table of the latest run, one row per model/preset, in file order."""
    rows = []
    for group in summary.latest.groups:
        flag, status = _regression_cell(summary, group)
        segments = "n/a" if group.segments_total is None else f"{group.segments_tensorrt}/{group.segments_torch}"
        speedup = group.speedup
        cells = (
            group.model,
            group.preset,
            _ms(group.eager_median),
            _ms(group.stitched_median),
            "n/a" if speedup is None else format_speedup(speedup),
            segments,
            _number(group.boundaries, "d"),
            _boundary_overhead(group),
            group.precision,
            _number(group.compile_seconds, ".2f"),
            _equivalence(group),
            flag,
        )
        rows.append(Row(cells, status, summary.failure_of(group) is not None))
    return rows


def _headline(summary: Summary) -> str:
    """The one sentence under the title: did anything fail or regress, against what."""
    failed = f"{len(summary.failures)} failure(s) (equivalence FAIL or fallbacks to PyTorch). " if summary.failures else ""
    return failed + _regression_headline(summary)


def _regression_headline(summary: Summary) -> str:
    if summary.baseline is None:
        return "No baseline: regressions were not checked."
    if not summary.compared:
        return f"Regressions were NOT checked: the baseline {summary.baseline.path.name} is from another machine."
    against = f"against {summary.baseline.path.name} (threshold {summary.threshold:.0%} on the stitched median, or more segments)"
    if summary.regressions:
        return f"{len(summary.regressions)} regression(s) {against}."
    return f"No regressions {against}."


def _run_rows(summary: Summary) -> list[tuple[str, ...]]:
    rows = []
    for run in (*summary.runs, *([summary.baseline] if summary.baseline is not None and summary.baseline not in summary.runs else [])):
        role = "latest" if run is summary.latest else ("baseline" if run == summary.baseline else "")
        rows.append((
            run.path.name,
            role,
            run.datetime.strftime("%Y-%m-%d %H:%M:%S %Z"),
            run.machine.describe(),
            run.commit.describe(),
            str(len(run.groups)),
            str(run.ignored),
        ))
    return rows


OVERHEAD_NOTE = (
    "Boundary overhead = time of one stitched call outside engines and Torch segments (trtcheck.profile), "
    "per value crossing a segment boundary; n/a where the run recorded no profile."
)

RUN_COLUMNS = ("file", "role", "datetime", "machine", "commit", "trtcheck groups", "other benchmarks")


# Markdown -------------------------------------------------------------------------------------------

def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(" --- " for _ in columns) + "|"]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return lines


def render_markdown(summary: Summary, plots: Sequence[Plot]) -> str:
    """The report as Markdown; plots are linked by file name (they sit next to report.md)."""
    latest = summary.latest
    lines = [f"# trtcheck benchmark report: {latest.path.name}", ""]
    lines += [f"> **WARNING:** {warning}" for warning in summary.warnings]
    if summary.warnings:
        lines.append("")
    lines += [f"**{_headline(summary)}**", ""]
    if summary.failures:
        lines += ["## Failures", ""] + [f"- **{f.describe()}**" for f in summary.failures] + [""]
    if summary.regressions:
        lines += ["## Regressions", ""] + [f"- **{r.describe()}**" for r in summary.regressions] + [""]
    lines += [f"## Summary: {latest.label}", ""]
    lines += _md_table(COLUMNS, [row.cells for row in table_rows(summary)])
    lines.append("")
    lines += [f"Speedup = eager median / stitched median (above 1: the stitched module is faster). {OVERHEAD_NOTE}", ""]
    lines += ["## Plots", ""]
    for plot in plots:
        lines += [f"### {plot.title}", "", f"![{plot.title}]({plot.path.name})", "", plot.caption, ""]
    lines += ["## Runs", ""] + _md_table(RUN_COLUMNS, _run_rows(summary)) + [""]
    if summary.notes:
        lines += ["## Notes", ""] + [f"- {_md_cell(note)}" for note in summary.notes] + [""]
    return "\n".join(lines)


# HTML -----------------------------------------------------------------------------------------------

STYLE = """
body { font-family: system-ui, sans-serif; margin: 24px; color: #222; max-width: 1320px; }
.table-wrap { max-width: 100%; overflow-x: auto; }  /* a table wider than the screen scrolls inside the page */
h1, h2, .box, p, li, figcaption { overflow-wrap: anywhere; }  /* a long model/preset name or path wraps on a phone */
h1 { font-size: 22px; margin-bottom: 4px; }
.headline { font-size: 17px; font-weight: 600; margin: 10px 0; }
.box { padding: 10px 14px; border-radius: 6px; margin: 10px 0; }
.warning { background: #fff4d6; border: 1px solid #e0b000; }
.regressions { background: #fde5e3; border: 1px solid #d93025; }
.clean { background: #e6f4ea; border: 1px solid #34a853; }
table { border-collapse: collapse; margin: 8px 0 18px; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: left; }
td { white-space: nowrap; }
/* the last two columns (equivalence, regression) wrap, so the whole table, regression column included, fits 1400 px */
td:nth-last-child(-n+2) { white-space: normal; min-width: 9em; }
th { background: #f1f3f4; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.regressed td { background: #fde5e3; font-weight: 600; }
td.fail, li.fail { color: #b00020; font-weight: 700; }
.plots { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(620px, 100%), 1fr)); gap: 18px; }
figure { margin: 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figure.wide { grid-column: 1 / -1; }  /* a plot drawn wider than a column gets the page's width */
figcaption { font-size: 12px; color: #555; }
"""

NUMERIC = {"eager ms", "stitched ms", "speedup", "boundaries", BOUNDARY_OVERHEAD, "compile s"}


def _html_table(
    columns: Sequence[str], rows: Sequence[Sequence[str]], row_classes: Sequence[str] = (), cell_classes: Sequence[Sequence[str]] = ()
) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for index, row in enumerate(rows):
        row_class = row_classes[index] if index < len(row_classes) else ""
        classes = cell_classes[index] if index < len(cell_classes) else [""] * len(row)
        cells = "".join(
            f'<td class="{cls}">{html.escape(cell)}</td>' if cls else f"<td>{html.escape(cell)}</td>" for cell, cls in zip(row, classes)
        )
        body.append(f'<tr class="{row_class}">{cells}</tr>' if row_class else f"<tr>{cells}</tr>")
    return f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


WIDE_PX = 1000  # a plot wider than this spans every column of the page: at a column's 620 px it would be unreadable


def _figure_html(plot: Plot) -> str:
    """The plot as a ``<figure>`` with its PNG inline, marked ``wide`` when the PNG is wider than ``WIDE_PX``
    (its width: the 4 bytes of the IHDR header after the signature, the chunk length and type)."""
    png = plot.path.read_bytes()
    wide = ' class="wide"' if int.from_bytes(png[16:20], "big") > WIDE_PX else ""
    return (
        f'<figure id="plot-{html.escape(plot.name)}"{wide}>'
        f'<img alt="{html.escape(plot.title)}" src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'
        f"<figcaption>{html.escape(plot.caption)}</figcaption></figure>"
    )


def render_html(summary: Summary, plots: Sequence[Plot]) -> str:
    """The report as one HTML page with no external reference: styles inline, plots as data URIs."""
    latest: Run = summary.latest
    rows = table_rows(summary)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>trtcheck report: {html.escape(latest.path.name)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>trtcheck benchmark report: {html.escape(latest.path.name)}</h1>",
    ]
    parts += [f'<div class="box warning"><strong>Warning:</strong> {html.escape(w)}</div>' for w in summary.warnings]
    box = "regressions" if summary.regressions or summary.failures else ("clean" if summary.compared else "warning")
    parts.append(f'<div class="box {box}"><div class="headline">{html.escape(_headline(summary))}</div>')
    if summary.failures:
        items = "".join(f'<li class="fail">{html.escape(f.describe())}</li>' for f in summary.failures)
        parts.append(f'<ul class="failures">{items}</ul>')
    if summary.regressions:
        parts.append("<ul>" + "".join(f"<li>{html.escape(r.describe())}</li>" for r in summary.regressions) + "</ul>")
    parts.append("</div>")
    parts.append(f"<h2>Summary: {html.escape(latest.label)}</h2>")
    cell_classes = [
        ["num" if column in NUMERIC else ("fail" if column == "equivalence" and row.equivalence_failed else "") for column in COLUMNS]
        for row in rows
    ]
    row_classes = [row.status if row.status == "regressed" else "" for row in rows]
    parts.append(_html_table(COLUMNS, [row.cells for row in rows], row_classes, cell_classes))
    parts.append(f"<p>Speedup = eager median / stitched median (above 1: the stitched module is faster). {html.escape(OVERHEAD_NOTE)}</p>")
    parts.append('<h2>Plots</h2><div class="plots">')
    parts += [_figure_html(plot) for plot in plots]
    parts.append("</div>")
    parts.append("<h2>Runs</h2>" + _html_table(RUN_COLUMNS, _run_rows(summary)))
    if summary.notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in summary.notes) + "</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)
