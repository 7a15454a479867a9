"""Comparing runs: which groups regressed against a baseline, and whether two runs may be compared at all.

Timings from different machines say nothing about a change, so a comparison across machines is refused
unless the caller explicitly allows it; the report then says so instead of flagging noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trtcheck.errors import ReportError
from trtcheck.report.runs import Group, Run
from trtcheck.report.statistics import Evidence, Spread, is_regression

DEFAULT_THRESHOLD = 0.10


@dataclass(frozen=True)
class Regression:
    """A group that got worse than in the baseline: slower stitched median, more segments, or both."""

    model: str
    preset: str
    baseline: Group
    current: Group
    slowdown: float | None
    """Relative change of the stitched median (0.15 = 15% slower); None when either median is missing."""
    latency_regressed: bool
    segments_grew: bool
    evidence: Evidence | None = None
    """Why the slowdown is taken as real (the rank test's p-value, or disjoint quartiles); None when no
    latency was compared."""

    @property
    def label(self) -> str:
        return f"{self.model}/{self.preset}"

    def describe(self) -> str:
        """One line a person can act on: what got worse, from what to what."""
        parts = []
        if self.latency_regressed and self.slowdown is not None:
            parts.append(
                f"stitched median {_ms(self.baseline.stitched_median)} -> {_ms(self.current.stitched_median)} "
                f"({self.slowdown:+.1%}{_iqrs(self.baseline, self.current)}"
                + (f"; {self.evidence.describe()}" if self.evidence else "") + ")"
            )
        if self.segments_grew:
            parts.append(
                f"segments {_segments(self.baseline)} -> {_segments(self.current)}"
            )
        return f"{self.label}: " + "; ".join(parts)


@dataclass(frozen=True)
class Failure:
    """A group of the latest run that failed outright, whatever the baseline says.

    Its stitched module disagreed with eager (equivalence FAIL), or some of its TensorRT segments fell
    back to PyTorch (their conversion or engine build failed): then the timings measure a model that
    converted less than the settings ask for, and a PASS would mean nothing.
    """

    model: str
    preset: str
    group: Group
    reasons: tuple[str, ...]

    @property
    def label(self) -> str:
        return f"{self.model}/{self.preset}"

    def describe(self) -> str:
        """One line: which group failed and why."""
        return f"{self.label}: FAILED: " + "; ".join(self.reasons)


def failure_reasons(group: Group) -> tuple[str, ...]:
    """Why ``group`` counts as a failure (empty when it does not): equivalence FAIL, fallbacks to PyTorch."""
    reasons = []
    if group.equivalence_passed is False:
        max_abs = (group.equivalence or {}).get("max_abs")
        detail = f" (max abs {max_abs:.1e})" if isinstance(max_abs, (int, float)) else ""
        reasons.append(f"stitched output differs from eager{detail}")
    if group.fallbacks:
        reasons.append(
            f"{group.fallbacks} TensorRT segment(s) fell back to PyTorch (conversion or engine build failed), "
            "so the stitched module is not what the settings ask for"
        )
    return tuple(reasons)


def find_failures(run: Run) -> list[Failure]:
    """The groups of ``run`` that failed (see ``failure_reasons``), in file order."""
    return [Failure(g.model, g.preset, g, reasons) for g in run.groups if (reasons := failure_reasons(g))]


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e3:.3f} ms"


def _iqrs(baseline: Group, current: Group) -> str:
    """``, IQR 0.010 -> 0.050 ms``: each median's spread, where recorded."""
    before, after = (g.stitched_spread.iqr if g.stitched_spread else None for g in (baseline, current))
    return "" if before is None or after is None else f", IQR {before * 1e3:.3f} -> {after * 1e3:.3f} ms"


def _segments(group: Group) -> str:
    return f"{group.segments_total} ({group.segments_tensorrt} TensorRT + {group.segments_torch} Torch)"


def format_speedup(speedup: float) -> str:
    """``1.79x``, ``250x``, ``0.0013x``: two decimals would print a 700x slowdown as ``0.00x``."""
    if speedup >= 100:
        return f"{speedup:.0f}x"
    if speedup >= 0.01:
        return f"{speedup:.2f}x"
    return f"{speedup:.2g}x"


def relative_change(baseline: float | None, current: float | None) -> float | None:
    """``current / baseline - 1``: how much slower ``current`` is; None when it cannot be computed."""
    if baseline is None or current is None or baseline <= 0:
        return None
    return current / baseline - 1.0


def _check_threshold(threshold: float) -> None:
    if not threshold >= 0:  # also rejects NaN
        raise ReportError(f"threshold must be >= 0 (a fraction: 0.10 = 10% slower), got {threshold}")


def find_regressions(baseline: Run, current: Run, threshold: float = DEFAULT_THRESHOLD) -> list[Regression]:
    """Groups of ``current`` that got slower for real (``statistics.is_regression``: beyond chance, by more than
    ``threshold`` and the noise floor), or whose segments grew.

    Only groups present in both runs are compared. This compares whatever it is given; callers decide
    whether the runs are comparable (``comparable``), since the report must explain a refusal.
    """
    _check_threshold(threshold)
    regressions = []
    for group in current.groups:
        before = baseline.group(group.model, group.preset)
        if before is None:
            continue
        slowdown = relative_change(before.stitched_median, group.stitched_median)
        latency, evidence = False, None
        if slowdown is not None:
            machine = relative_change(before.eager_median, group.eager_median)  # eager: the same model, the same runs
            latency, evidence = is_regression(_spread_of(before), _spread_of(group), threshold, 1.0 + (machine or 0.0))
        grew = before.segments_total is not None and group.segments_total is not None and group.segments_total > before.segments_total
        if latency or grew:
            regressions.append(Regression(group.model, group.preset, before, group, slowdown, latency, grew, evidence))
    return regressions


def _spread_of(group: Group) -> Spread:
    """The stitched timings of ``group``; a median alone where the file recorded no spread."""
    assert group.stitched_median is not None
    return group.stitched_spread or Spread(group.stitched_median)


def comparable(a: Run, b: Run) -> bool:
    """Whether timings of the two runs can be compared: same host, CPU model and architecture."""
    return a.machine.identity == b.machine.identity


def machine_warning(runs: Sequence[Run]) -> str | None:
    """A warning naming each machine when the runs were not all measured on the same one."""
    machines: dict[tuple[str, str, str], list[Run]] = {}
    for run in runs:
        machines.setdefault(run.machine.identity, []).append(run)
    if len(machines) < 2:
        return None
    listing = "; ".join(
        f"{group[0].machine.describe()}: {', '.join(run.path.name for run in group)}" for group in machines.values()
    )
    return f"runs come from {len(machines)} different machines, so their timings are not comparable: {listing}"


def select_baseline(runs: Sequence[Run], baseline: Run | None = None) -> Run | None:
    """The run to compare the latest against: the one given, or else the previous run by datetime."""
    if baseline is not None:
        return baseline
    return runs[-2] if len(runs) >= 2 else None


@dataclass(frozen=True)
class Summary:
    """Everything the report says, before it is drawn or formatted.

    ``compared`` is False when there was no baseline or it came from another machine (and cross-machine
    comparison was not allowed): then ``regressions`` is empty because nothing was checked, which the
    report must say rather than print "no regressions".
    """

    runs: tuple[Run, ...]
    baseline: Run | None
    threshold: float
    regressions: tuple[Regression, ...]
    compared: bool
    warnings: tuple[str, ...]
    notes: tuple[str, ...]
    failures: tuple[Failure, ...] = ()
    """Groups of the latest run that failed (equivalence FAIL, fallbacks): checked with or without a baseline."""

    @property
    def latest(self) -> Run:
        return self.runs[-1]

    def regression_of(self, group: Group) -> Regression | None:
        return next((r for r in self.regressions if (r.model, r.preset) == group.key), None)

    def failure_of(self, group: Group) -> Failure | None:
        return next((f for f in self.failures if (f.model, f.preset) == group.key), None)


def summarize(
    runs: Sequence[Run],
    baseline: Run | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    allow_cross_machine: bool = False,
) -> Summary:
    """Compare the latest run with its baseline, refusing (with a warning) to compare across machines."""
    if not runs:
        raise ReportError("no runs to report on")
    _check_threshold(threshold)  # even when nothing is compared: a bad value is a mistake either way
    runs = tuple(sorted(runs, key=lambda run: run.datetime))
    latest = runs[-1]
    chosen = select_baseline(runs, baseline)
    warnings = []
    everything = [*runs, *([chosen] if chosen is not None and chosen not in runs else [])]
    machines = machine_warning(everything)
    if machines:
        warnings.append(machines)
    compared = chosen is not None and (comparable(chosen, latest) or allow_cross_machine)
    if chosen is not None and not comparable(chosen, latest):
        warnings.append(
            f"the baseline {chosen.path.name} ran on {chosen.machine.describe()}, the latest run "
            f"{latest.path.name} on {latest.machine.describe()}: "
            + (
                "regressions were checked anyway (--allow-cross-machine)"
                if allow_cross_machine
                else "regressions were NOT checked (pass --allow-cross-machine to compare anyway)"
            )
        )
    if chosen is not None and chosen.datetime > latest.datetime:
        warnings.append(f"the baseline {chosen.path.name} is newer than the latest run {latest.path.name}")
    regressions = tuple(find_regressions(chosen, latest, threshold)) if compared else ()
    notes = [f"{run.path.name}: {note}" for run in everything for note in run.notes]
    if chosen is None:
        notes.append("one run and no --baseline: nothing to compare against, so no regression check")
    elif compared:
        missing = [g.label for g in chosen.groups if latest.group(g.model, g.preset) is None]
        new = [g.label for g in latest.groups if chosen.group(g.model, g.preset) is None]
        if missing:
            notes.append(f"in the baseline but not in the latest run: {', '.join(missing)}")
        if new:
            notes.append(f"new since the baseline (not compared): {', '.join(new)}")
    unprofiled = [g.label for g in latest.groups if g.profile is None]
    if unprofiled:
        which = "its groups" if len(unprofiled) == len(latest.groups) else ", ".join(unprofiled)
        notes.append(
            f"{latest.path.name}: no time profile (extra_info['profile'], recorded since trtcheck.profile) for {which}: "
            "their boundary overhead is n/a and they are not in the time plot"
        )
    failures = tuple(find_failures(latest))
    return Summary(runs, chosen, threshold, regressions, compared, tuple(warnings), tuple(notes), failures)
