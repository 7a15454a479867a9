"""What the plugin prints around the tests: the header lines, and the terminal summary at the end of the run.

The header says which engine backend runs (and why, for ``auto``), the versions and the device, the presets and
precisions. The summary says what each passing ``trtcheck_verify`` call compared (``VerificationReport.checked``:
a bare PASSED said nothing of the input sets, the worst error and cosine per output, or the engines), then the
run's five-second summary (``run_summary``). Under ``-q`` (or ``--no-header``) the header lines and the reasons
trtcheck tests were skipped are printed at the end instead, so a quiet run still says what ran and what did not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from trtcheck.testing.session import MARKER, TrtcheckOptions, TrtcheckSession
from trtcheck.text import plural


def header_lines(options: TrtcheckOptions) -> list[str]:
    """With ``--trtcheck``: which engine backend runs (and why, for ``auto``), the versions and the device, and
    the presets, saying which apply to zoo models only (a user's own model has no zoo submodule to force)."""
    from trtcheck.engines import describe_backend  # deferred: torch only in sessions that use trtcheck

    lines = [f"trtcheck: {line}" for line in describe_backend(options.backend).splitlines()]
    zoo_only = [p.name for p in options.presets if p.settings_for(None) is None]
    lines.append(f"trtcheck: presets: {', '.join(p.name for p in options.presets)}" + (
        f" ({', '.join(zoo_only)}: zoo models only, it forces each zoo model's fallback_module; your own models "
        "run under the others)" if zoo_only else ""))
    if options.precisions != ("fp32",):
        lines.append(f"trtcheck: precisions: {', '.join(options.precisions)} (each preset runs at each)")
    if options.allow_fallbacks:
        lines.append("trtcheck: fallbacks to PyTorch allowed (--trtcheck-allow-fallbacks)")
    return lines


def terminal_summary(terminalreporter: Any, config: pytest.Config, options: TrtcheckOptions | None) -> None:
    """The end of the run (module docstring); ``options`` are the session's, None without ``--trtcheck`` (no header).
    Under ``-q`` one line says how to see the per-verification lines (quiet asks for less, and the matrix's section
    alone is 1,500 lines); the run's five-second summary comes last either way."""
    checked = TrtcheckSession.checked(terminalreporter.stats)
    _quiet_summary(terminalreporter, config, options)
    if not checked:
        return
    if config.option.verbose < 0:  # -q: the matrix's 200 verifications would print 1,500 lines above the summary
        terminalreporter.write_line(f"trtcheck: {plural(len(checked), 'passing verification')}: what each compared "
                                    "is listed without -q")
    else:
        terminalreporter.section("trtcheck: what passing verifications checked")
        for nodeid, lines in checked:
            terminalreporter.line(nodeid)
            for line in lines:
                terminalreporter.line(f"  {line}")
    for line in run_summary(terminalreporter.stats):
        terminalreporter.write_line(line, bold=True)


def _quiet_summary(terminalreporter: Any, config: pytest.Config, options: TrtcheckOptions | None) -> None:
    """Under ``-q`` (or ``--no-header``) pytest shows no header, and without ``-rs`` no skip reasons: the trtcheck
    header lines and each reason trtcheck tests were skipped for (run with --trtcheck; a preset that does not
    apply) are then printed at the end instead, so a quiet run still says what ran and what did not."""
    if options is not None and (config.option.verbose < 0 or config.getoption("no_header", False)):
        for line in header_lines(options):
            terminalreporter.write_line(line)
    if set(getattr(terminalreporter, "reportchars", "")) & {"s", "a", "A"}:
        return  # pytest lists the skips itself
    reasons: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        if MARKER in getattr(report, "keywords", {}) and isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
            reason = str(report.longrepr[2]).removeprefix("Skipped: ")
            reasons[reason] = reasons.get(reason, 0) + 1
    for reason, count in reasons.items():
        terminalreporter.write_line(f"trtcheck: {count} skipped: {reason}")


def run_summary(stats: Mapping[str, list[Any]]) -> list[str]:
    """The lines a user reads in five seconds at the end of a matrix run: how many verifications passed, failed and
    were skipped, fallbacks, the worst error of a passing one and the slowest test."""
    passed = TrtcheckSession.figures(stats)
    if not passed:
        return []
    failed = [r for r in stats.get("failed", []) if getattr(r, "when", "call") == "call"]
    skipped = len(stats.get("skipped", []))
    worst_report, worst = max(passed, key=lambda item: item[1]["max_abs"])
    slowest = max((report for report, _ in passed), key=lambda report: report.duration)
    fallbacks = sum(figures["fallbacks"] for _, figures in passed)
    return [
        f"trtcheck: {plural(len(passed), 'verification')} passed, {len(failed)} failed, {skipped} skipped; "
        f"fallbacks accepted: {fallbacks}",
        f"trtcheck: worst max abs error of a pass {worst['max_abs']:.3g} ({worst_report.nodeid}); "
        f"slowest {slowest.duration:.1f} s ({slowest.nodeid})",
    ]
