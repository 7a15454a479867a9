"""Is a slowdown real? A rank test over the recorded rounds, an effect size and a noise floor.

Two medians and a percentage threshold flag noise: back-to-back runs of one commit differed by +27%, +63%
and +99% on models whose stitched call takes 0.1-2.4 ms. Like asv and Google Benchmark's compare tool, a
slowdown here counts only when (1) the rounds of the two runs differ beyond chance: a one-sided
Mann-Whitney U test over the recorded rounds (``pytest --benchmark-save-data``), or, where a file kept
only its summary statistics, the two interquartile ranges do not overlap; (2) the effect is large: the
median grew by more than the threshold; and (3) it clears the noise floor: the median grew by more than
``NOISE_FLOOR_S`` in absolute terms, which only calls well under a millisecond fail to reach (their timings
move with the scheduler more than with the code); and (4) the machine does not explain it: the stitched
timings are first discounted by how much slower eager ran on the same model in the same runs (a loaded
machine slows both; a trtcheck regression slows the stitched module alone).

The U test is written out (its normal approximation, with the tie correction): a few lines of arithmetic
do not justify scipy as a dependency.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

ALPHA = 0.01
"""The rank test's significance level. A report compares hundreds of groups, so the test alone would flag a
few by chance; the effect size and the noise floor must be cleared as well. Not lower: five rounds against
five (pytest-benchmark's minimum) reach p = 0.006 at best."""

NOISE_FLOOR_S = 0.1e-3
"""A slowdown smaller than 0.1 ms is never flagged: a call of a few hundred microseconds moves by that much
with the machine's load (measured: +63% and +99% on 0.1 ms calls between two runs of one commit)."""

MIN_ROUNDS = 5
"""Fewer rounds than this on either side: no rank test (its normal approximation needs a few)."""


@dataclass(frozen=True)
class Spread:
    """The timings of one benchmark: its quartiles (seconds) and, when the file kept them, every round."""

    median: float
    q1: float | None = None
    q3: float | None = None
    rounds: tuple[float, ...] | None = None

    @property
    def iqr(self) -> float | None:
        return None if self.q1 is None or self.q3 is None else self.q3 - self.q1


def mann_whitney_greater(current: Sequence[float], baseline: Sequence[float]) -> float:
    """The one-sided p-value that ``current``'s values are not larger than ``baseline``'s (Mann-Whitney U,
    normal approximation with tie and continuity corrections): small when ``current`` is slower."""
    n1, n2 = len(current), len(baseline)
    if n1 == 0 or n2 == 0:
        raise ValueError("the rank test needs values on both sides")
    pooled = sorted([(value, 0) for value in current] + [(value, 1) for value in baseline])
    n = n1 + n2
    rank_sum, ties, i = 0.0, 0.0, 0
    while i < n:
        j = i
        while j + 1 < n and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        average_rank = (i + j) / 2 + 1
        rank_sum += average_rank * sum(1 for k in range(i, j + 1) if pooled[k][1] == 0)
        t = j - i + 1
        ties += t**3 - t
        i = j + 1
    u = rank_sum - n1 * (n1 + 1) / 2
    variance = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if variance <= 0:  # every value equal: no evidence either way
        return 1.0
    z = (u - n1 * n2 / 2 - 0.5) / math.sqrt(variance)
    return 0.5 * math.erfc(z / math.sqrt(2))


@dataclass(frozen=True)
class Evidence:
    """Why a slowdown is (or is not) taken as real: the test used and its outcome, for the report."""

    significant: bool
    p_value: float | None
    method: str

    def describe(self) -> str:
        if self.p_value is not None:
            return f"{self.method} p={self.p_value:.1g}"
        return self.method


def slower_beyond_chance(baseline: Spread, current: Spread, alpha: float = ALPHA) -> Evidence:
    """Whether ``current`` is slower than ``baseline`` beyond the runs' own spread (see the module's note)."""
    if baseline.rounds and current.rounds and min(len(baseline.rounds), len(current.rounds)) >= MIN_ROUNDS:
        p = mann_whitney_greater(current.rounds, baseline.rounds)
        return Evidence(p < alpha, p, "rank test")
    if None not in (baseline.q3, current.q1):
        return Evidence(current.q1 > baseline.q3, None, "interquartile ranges " + ("disjoint" if current.q1 > baseline.q3 else "overlap"))
    return Evidence(True, None, "medians only (no rounds or quartiles recorded)")


def discounted(spread: Spread, factor: float) -> Spread:
    """``spread`` with every timing divided by ``factor`` (the machine's own slowdown, see ``is_regression``)."""
    scale = (lambda v: v / factor)  # noqa: E731
    return Spread(
        scale(spread.median),
        None if spread.q1 is None else scale(spread.q1),
        None if spread.q3 is None else scale(spread.q3),
        None if spread.rounds is None else tuple(scale(v) for v in spread.rounds),
    )


def is_regression(baseline: Spread, current: Spread, threshold: float, machine_slowdown: float = 1.0,
                  noise_floor: float = NOISE_FLOOR_S) -> tuple[bool, Evidence]:
    """True when ``current`` is slower than ``baseline`` by more than ``threshold`` (a fraction), by more than
    the noise floor, and beyond chance; with the evidence either way.

    ``machine_slowdown``: how much slower the machine itself ran (eager's median of the same model, now over
    then: measured in the same runs, it changes with the load, not with trtcheck). ``current`` is discounted
    by it first, so a busy machine slows both and flags nothing; a faster machine (below 1) is not credited,
    so a real slowdown never hides behind it. ``noise_floor``: the growth in seconds below which nothing is a
    regression (``NOISE_FLOOR_S`` unless the caller sizes it to the figure it guards)."""
    current = discounted(current, max(machine_slowdown, 1.0))
    evidence = slower_beyond_chance(baseline, current)
    if baseline.median <= 0:
        return False, evidence
    grew = current.median - baseline.median
    large = grew > threshold * baseline.median and grew > noise_floor
    return large and evidence.significant, evidence


__all__ = [
    "ALPHA", "MIN_ROUNDS", "NOISE_FLOOR_S", "Evidence", "Spread", "discounted", "is_regression", "mann_whitney_greater",
    "slower_beyond_chance",
]
