"""Compile time by phase: what the benchmark report splits compile time by.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class CompileTimes:
    """Seconds spent in each phase of ``compile`` (the benchmark report splits compile time by these)."""

    lowering: float = 0.0
    partitioning: float = 0.0
    shape_analysis: float = 0.0
    conversion: float = 0.0
    engine_build: float = 0.0
    stitching: float = 0.0

    @property
    def total(self) -> float:
        return sum(vars(self).values())


@dataclass
class Clock:
    times: CompileTimes = field(default_factory=CompileTimes)

    def run(self, phase: str, fn, *args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            setattr(self.times, phase, getattr(self.times, phase) + time.perf_counter() - start)
