"""What a localization reports: each TensorRT segment's check (``SegmentCheck``), the culprit op and its diagnosis
(``Culprit``, its inputs' ``ValueRange``), and the whole (``Localization``).

Their own room because they are read by more than the algorithm that fills them (``report`` prints them, ``reduce``
starts from them) and need none of it: plain data and its printout, over the judges' constants.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from trtcheck.names import from_source
from trtcheck.verification.judge import Distance, Judge, Verdict

if TYPE_CHECKING:  # pragma: no cover - the walker fills the report, not vice versa
    from trtcheck.verification.walk import WalkedGraph


@dataclass
class ValueRange:
    """What a tensor held: its smallest and largest finite values and how many NaNs and infinities."""

    name: str
    shape: tuple[int, ...]
    low: float
    high: float
    nans: int
    infs: int

    @classmethod
    def of(cls, name: str, value: Any) -> ValueRange:
        if not isinstance(value, torch.Tensor) or not (value.is_floating_point() or value.dtype in (torch.int32, torch.int64)):
            return cls(name, (), math.nan, math.nan, 0, 0)
        wide = value.detach().to(torch.float64)
        finite = wide[wide.isfinite()]
        low = float(finite.min()) if finite.numel() else math.nan
        high = float(finite.max()) if finite.numel() else math.nan
        return cls(name, tuple(value.shape), low, high, int(wide.isnan().sum()), int(wide.isinf().sum()))

    def __str__(self) -> str:
        return f"{self.name}{list(self.shape)} in [{self.low:.4g}, {self.high:.4g}] NaN={self.nans} Inf={self.infs}"


@dataclass
class SegmentCheck:
    """One TensorRT segment's engine checked on recorded values, as ``NodeCheck`` checks a set of nodes: its error on
    eager's values at its inputs (local) and on the compiled module's (accumulated), and the verdicts."""

    index: int
    nodes: int
    first: str
    last: str
    local: float  # the largest abs error of any output, engine on eager's inputs
    accumulated: float  # the same, engine on the compiled module's upstream values
    local_passed: bool  # verify's check: within the tolerances, or as close to float64 as eager
    accumulated_passed: bool
    local_within_tolerances: bool = True  # the tolerances alone
    where: str = ""  # the control-flow branch it runs in ("" for the lowered graph): "branch true_graph_0 of cond (node cond)"
    yardstick: str = "eager"  # what ``local_passed`` held it to (``Judge.yardstick``: "eager in fp16" below float32)

    def __str__(self) -> str:
        if not self.local_passed:
            verdict = "FAIL"
        elif not self.local_within_tolerances:
            verdict = f"outside the tolerances, but as close to float64 as {self.yardstick}"
        else:
            verdict = "ok" if self.accumulated_passed else "ok locally, inherits error"
        return (f"segment @{self.index} ({self.nodes} nodes, {self.first}..{self.last}){in_where(self.where)}: "
                f"local error {self.local:.3g}, accumulated {self.accumulated:.3g}: {verdict}")


@dataclass
class Culprit:
    """The first op whose own error exceeds its budget, and everything needed to judge it."""

    node: str
    op: str
    converter: str  # module.function of the converter that produced its ONNX
    segment: int
    local_error: float  # the op alone, on eager's values at its inputs: largest abs error
    local_rel: float
    accumulated_error: float  # at the op inside its segment, fed the compiled module's values at the segment's inputs
    inputs: list[ValueRange]
    survives_isolation: bool  # alone it still fails the check
    # The op's engine output and eager's (at the judged precision) against float64 on the same inputs: what the
    # judge weighs (None: no reference ran), and the judge itself: its diagnosis is the judge's rule on that distance.
    distance: Distance | None = None
    judge: Judge = field(default_factory=Judge)
    message: str = ""
    where: str = ""  # the control-flow branch its segment runs in, as ``SegmentCheck.where``
    source: str = ""  # where in the user's code the op came from (``names.node_source``): module path, file:line
    exact: bool = False  # its output is integers or booleans: compared exactly, no float64 distance to weigh
    clamped: tuple[float, list[str]] | None = None  # a constant past the precision's range it computes with, and what keeps it

    @property
    def precision(self) -> str:
        """What its sub-engines were built and judged at."""
        return self.judge.precision

    @property
    def op_float64_error(self) -> float | None:
        return None if self.distance is None else self.distance.compiled

    @property
    def eager_error(self) -> float | None:
        return None if self.distance is None else self.distance.eager

    @property
    def verdict(self) -> Verdict | None:
        """The judge's verdict on the op's distance from float64 (None: no reference)."""
        return None if self.distance is None else self.judge.rule(self.distance)

    @property
    def ill_conditioned(self) -> bool:
        """Rounding or the precision's range, not the converter: the judge's rule on the op's own distance, or a
        constant past the precision's range."""
        return self.clamped is not None or (self.verdict is not None and self.verdict.precision_cause)

    def diagnosis(self) -> str:
        if self.clamped is not None:
            value, keep = self.clamped
            return (f"it computes with a constant {value:g} past {self.precision}'s range, which the {self.precision} graph "
                    f"clamps: {self.precision}'s range, not the converter; keep {', '.join(map(repr, keep))} in float32 (the "
                    "report's 'keep in float32' line is a set verify was run with)")
        if self.exact and self.survives_isolation:
            return ("this op's converter is wrong: its integer or boolean output differs from eager's on the same inputs "
                    "(compared exactly: there is no rounding to forgive)")
        return self.judge.explain(self.distance, self.node)

    def __str__(self) -> str:
        lines = [
            f"culprit: {self.node} = {self.op} (segment @{self.segment}){in_where(self.where)}, converted by {self.converter}",
            f"  local error {self.local_error:.3g} (rel {self.local_rel:.3g}), accumulated {self.accumulated_error:.3g}; "
            f"{'still fails alone' if self.survives_isolation else 'passes alone: the error needs its neighbours'}",
            f"  {self.diagnosis()}",
        ]
        if self.source:
            lines.insert(1, f"  {from_source(self.source)}")
        lines += [f"  input {value}" for value in self.inputs]
        if self.message:
            lines.append(f"  {self.message}")
        return "\n".join(lines)


@dataclass
class Localization:
    """Where a mismatch comes from: each TensorRT segment's local and accumulated error, and the culprit op."""

    segments: list[SegmentCheck] = field(default_factory=list)  # in dataflow order, those inside branches included
    culprit_segment: int | None = None  # the culprit segment's index in the graph it lies in:
    culprit_where: str = ""  # that graph, named as SegmentCheck.where names it ("" for the lowered graph)
    culprit_graph: WalkedGraph | None = field(default=None, repr=False, compare=False)  # and walked, its values recorded
    culprit: Culprit | None = None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    cut_short: bool = False
    sub_engines: int = 0

    def __str__(self) -> str:
        lines = [f"localization ({self.seconds:.1f} s, {self.sub_engines} sub-engines"
                 f"{', cut short by its time budget' if self.cut_short else ''}):"]
        lines += [f"  {segment}" for segment in self.segments]
        if self.culprit is not None:
            lines += [f"  {line}" for line in str(self.culprit).splitlines()]
        elif self.culprit_segment is None and self.segments and not self.cut_short:
            lines.append("  no engine fails on eager's values at its inputs: the mismatch is rounding accumulated across engines, "
                         "or comes from what runs in PyTorch, not from one converted op")
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


def in_where(where: str) -> str:
    """`` in <where>``, to follow a segment's name; nothing for the lowered graph."""
    return f" in {where}" if where else ""
