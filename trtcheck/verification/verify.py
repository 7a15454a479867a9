"""``trtcheck.verify``: compile a model, then prove the result sound (invariants) and right (equivalence).

One call does what a downstream test needs: it compiles, checks every invariant of the partition and of
the stitched graph, runs eager and stitched side by side on several inputs, and on any failure raises a
``VerificationError`` (an ``AssertionError``, so pytest reports a failure, not an error) whose report says
where each node runs and why, what differs, and where the standalone repro was written.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.fx

from trtcheck.compiler import CompileTimes, compile
from trtcheck.engines import resolve_backend
from trtcheck.errors import TrtcheckError
from trtcheck.lowering import copy_graph_module
from trtcheck.partitioning.decisions import Support
from trtcheck.partitioning.partition import Partition
from trtcheck.partitioning.partitioner import partition_graph
from trtcheck.partitioning.segmentation import dependency_aware, merge_adjacent, naive
from trtcheck.settings import Settings
from trtcheck.shape_analysis import random_like
from trtcheck.verification.equivalence import Comparison, compare
from trtcheck.verification.invariants import Violation, check_invariants


@dataclass
class VerificationReport:
    """Everything one ``verify`` call found; ``str(report)`` is what a failing test prints."""

    name: str
    settings: Settings
    backend: str
    partition: Partition
    violations: list[Violation] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)
    compile_times: CompileTimes | None = None
    repro: Path | None = None

    @property
    def passed(self) -> bool:
        return not self.violations and all(c.passed for c in self.comparisons)

    def __str__(self) -> str:
        status = "PASSED" if self.passed else "FAILED"
        lines = [
            f"trtcheck verification of {self.name}: {status}",
            f"  backend={self.backend} settings={self.settings}",
            f"  partition: {self.partition.summary()}",
        ]
        lines += [f"  fallback: {line}" for line in self.partition.fallbacks]
        if self.violations:
            lines.append(f"  {len(self.violations)} invariant violation(s):")
            lines += [f"    {violation}" for violation in self.violations]
        for index, comparison in enumerate(self.comparisons):
            if not comparison.passed:
                lines.append(f"  input set {index}: outputs differ from eager")
                lines += [f"    {line}" for line in str(comparison).splitlines()]
        if not self.passed:
            lines.append("  where each node runs, and why:")
            lines += [f"    {line}" for line in self.partition.explain().splitlines()]
            lines.append("  partition:")
            lines += [f"    {line}" for line in str(self.partition).splitlines()]
        if self.repro is not None:
            lines.append(f"  repro: python {self.repro / 'repro.py'}")
        return "\n".join(lines)


class VerificationError(TrtcheckError, AssertionError):
    """A stitched module differs from eager, or its partition breaks an invariant; ``.report`` says how."""

    def __init__(self, report: VerificationReport) -> None:
        super().__init__(str(report))
        self.report = report


def verify(
    model: torch.nn.Module,
    example_inputs: Sequence[Any],
    settings: Settings | None = None,
    backend: str = "auto",
    rtol: float | None = None,
    atol: float | None = None,
    num_inputs: int = 3,
    *,
    support: Support = None,
    seed: int = 0,
    report_dir: str | os.PathLike | None = None,
    name: str | None = None,
) -> VerificationReport:
    """Compile ``model`` and check it; raise ``VerificationError`` on any violation or mismatch.

    The first input set is ``example_inputs``; the other ``num_inputs - 1`` are random, drawn like them
    (floating-point tensors redrawn from a normal distribution seeded by ``seed``; integer and other
    inputs kept, since their valid range is the model's). ``rtol``/``atol`` default to the output dtype's
    tolerances (``equivalence.default_tolerances``). With ``report_dir``, a failure writes a standalone
    repro there.
    """
    settings = settings if settings is not None else Settings()
    backend = resolve_backend(backend)
    name = name or type(model).__name__
    stitched = compile(model, example_inputs, settings, backend, support=support)
    partition = stitched.partition
    report = VerificationReport(name, settings, backend, partition, compile_times=stitched.compile_times)
    report.violations = check_invariants(partition, support) + stitched_graph_violations(stitched)
    report.violations += segmentation_violations(partition, support)

    generator = torch.Generator().manual_seed(seed)
    for index in range(num_inputs):
        inputs = tuple(example_inputs) if index == 0 else random_like(tuple(example_inputs), generator)
        with torch.no_grad():
            expected = model(*inputs)
            actual = stitched(*inputs)
        report.comparisons.append(compare(expected, actual, rtol=rtol, atol=atol))

    if not report.passed:
        if report_dir is not None:
            from trtcheck.verification.repro import write_repro

            failure = "\n".join(str(report).splitlines()[:40])
            report.repro = write_repro(report_dir, partition.graph_module, tuple(example_inputs), settings, backend, failure, name=name)
        raise VerificationError(report)
    return report


def stitched_graph_violations(stitched: torch.fx.GraphModule) -> list[Violation]:
    """The stitched graph must be well formed: every value defined before use, every target present."""
    try:
        stitched.graph.lint()
    except Exception as error:  # noqa: BLE001 - lint raises RuntimeError today; any failure is a violation
        return [Violation("stitched_graph", f"{type(error).__name__}: {error}")]
    return []


def segmentation_violations(partition: Partition, support: Support = None) -> list[Violation]:
    """Checks that need the partitioner again: dependency-aware beats naive, and partitioning is deterministic."""
    found: list[Violation] = []
    targets = {node: segment.target for segment in partition.segments for node in segment.nodes}
    nodes = [node for node in partition.compute_nodes if node in targets]
    if len(nodes) == len(targets):  # else a segment holds a non-compute node: "placement" already says so
        aware, greedy = len(merge_adjacent(dependency_aware(nodes, targets))), len(merge_adjacent(naive(nodes, targets)))
        if aware > greedy:
            found.append(Violation("segment_count", f"dependency-aware made {aware} segments, naive {greedy}, for the same targets"))
    if not partition.fallbacks:  # a conversion fallback changes segments after partitioning, by design
        again = partition_graph(copy_graph_module(partition.graph_module), partition.settings, support)
        if _layout(again) != _layout(partition):
            found.append(Violation("determinism", "partitioning the same graph again gave different segments"))
    return found


def _layout(partition: Partition) -> list[tuple[str, list[str]]]:
    return [(segment.target.value, [node.name for node in segment.nodes]) for segment in partition.segments]
