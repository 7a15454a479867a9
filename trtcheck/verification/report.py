"""``VerificationReport``: everything one ``verify`` call found, and how a failing test prints it.

The driver (``verify``) fills it family by family: the violations of every soundness check, one ``Comparison`` per
input set, the notes on what could not be checked, the localization of a mismatch, the fp16/bf16 range findings;
``str(report)`` is the failure message (or, passing, what was checked), and the pytest plugin's summary lists
``checked()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtcheck.compiler.clock import CompileTimes
from trtcheck.partitioning.explain import ExplainSummary
from trtcheck.partitioning.partition import Partition
from trtcheck.settings import Settings
from trtcheck.text import plural
from trtcheck.verification.equivalence import Comparison
from trtcheck.verification.findings import Localization
from trtcheck.verification.invariants import Violation
from trtcheck.verification.quantizers import QuantizationLoss, QuantizerCheck
from trtcheck.verification.ranges import RangeFinding, describe_findings


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
    engine: str = ""  # which backend ran and why, with versions and device (describe_backend)
    input_sets: list[str] = field(default_factory=list)  # per comparison: what input set it was ("min: seq=2")
    notes: list[str] = field(default_factory=list)  # what the checks could not do, and why
    localization: Localization | None = None  # where a mismatch comes from (localize.py), on the first failing input set
    range_findings: list[RangeFinding] = field(default_factory=list)  # precision fp16/bf16: nodes leaving its range
    range_fix: list[str] = field(default_factory=list)  # the fp32_nodes the report prints for them (``ranges.fp32_fix``)
    range_fix_holds: bool | None = None  # whether verify passed with them (None: not checked)
    quantizers: list[QuantizerCheck] = field(default_factory=list)  # a quantized model: each quantizer alone
    quantization: QuantizationLoss | None = None  # a quantized model: what quantizing costs it, and which quantizers

    @property
    def passed(self) -> bool:
        return not self.violations and all(c.passed for c in self.comparisons)

    def fallbacks(self) -> list[str]:
        """The TensorRT segments that fell back to PyTorch, and why (``Partition.fallbacks``)."""
        return list(self.partition.fallbacks)

    def checked(self) -> list[str]:
        """What was compared, one line each: the input sets, per output its worst error and cosine over them, and
        each engine. A bare "PASSED" said nothing of what it had checked; ``str()`` of a passing report ends with
        these lines, and the pytest plugin's end-of-run summary prints them per test."""
        lines = []
        if self.comparisons:
            kinds: dict[str, int] = {}
            for kind in self.input_sets[: len(self.comparisons)]:
                kinds[kind] = kinds.get(kind, 0) + 1
            sets = ", ".join(kind if count == 1 else f"{kind} x{count}" for kind, count in kinds.items())
            lines.append(f"compared {plural(len(self.comparisons), 'input set')} with eager: {sets}")
        worst: dict[str, list[Any]] = {}
        for comparison in self.comparisons:
            for output in comparison.outputs:
                seen = worst.setdefault(output.path, [output, output.max_abs, output.cosine])
                seen[1], seen[2] = max(seen[1], output.max_abs), min(seen[2], output.cosine)
        ratios: dict[str, float] = {}  # outputs outside the tolerances that passed against float64: their worst ratio
        for comparison in self.comparisons:
            for output in comparison.outputs:
                if output.reference_ratio is not None:
                    ratios[output.path] = max(ratios.get(output.path, 0.0), output.reference_ratio)
        for path, (output, max_abs, cosine) in worst.items():
            dtype = str(output.dtype).removeprefix("torch.") if output.dtype is not None else "value"
            judged = f"; outside them, judged against float64: ratio {ratios[path]:.3g} to eager's own error" if path in ratios else ""
            if path in ratios and output.eager_precision:  # precision="fp16"/"bf16": every output has its ratio
                judged = f"; against float64: ratio {ratios[path]:.3g} to eager {output.eager_precision}'s own error"
            lines.append(f"output {path} {list(output.shape)} {dtype}: worst max abs error {max_abs:.3g}, lowest cosine {cosine:.6f} "
                         f"(rtol {output.rtol:g}, atol {output.atol:g}{judged})")
        for engine in ExplainSummary.of(self.partition).engines:
            lines.append(f"engine {engine.label}: {plural(engine.nodes, 'compute node')} on {self.backend}")
        if self.range_findings:
            lines.append(describe_findings(self.range_findings, self.settings.precision)[0])
        if self.quantizers:
            worst = min(check.matched for check in self.quantizers)
            lines.append(f"{plural(len(self.quantizers), 'quantizer')} built alone, each as TensorRT computes it (codes "
                         f"matched on the first input set: at least {worst:.4%}; ties at one step allowed)")
        if self.quantization is not None:
            lines += self.quantization.lines()
        return lines

    def __str__(self) -> str:
        status = "PASSED" if self.passed else "FAILED"
        lines = [
            f"trtcheck verification of {self.name}: {status}",
            f"  backend={self.backend} settings={self.settings}",
            *(f"  {line}" for line in self.engine.splitlines()),
            f"  partition: {self.partition.summary()}",
        ]
        lines += [f"  fallback: {line}" for line in self.partition.fallbacks]
        if self.violations:
            lines.append(f"  {len(self.violations)} invariant violation(s):")
            lines += [f"    {violation}" for violation in self.violations]
        lines += [f"  note: {note}" for note in self.notes]
        if self.input_sets and any(kind.startswith(("min", "max", "random size")) for kind in self.input_sets):
            lines.append(f"  input sets: {'; '.join(self.input_sets)}")
        for index, comparison in enumerate(self.comparisons):
            if not comparison.passed:
                what = f" ({self.input_sets[index]})" if index < len(self.input_sets) else ""
                lines.append(f"  input set {index}{what}: outputs differ from eager")
                lines += [f"    {line}" for line in str(comparison).splitlines()]
        if self.localization is not None:
            lines += [f"  {line}" for line in str(self.localization).splitlines()]
        if self.quantization is not None and not self.passed:
            lines += [f"  {line}" for line in self.quantization.lines()]
        if not self.passed:
            lines += [f"  {line}" for line in describe_findings(self.range_findings, self.settings.precision,
                                                                 fix=self.range_fix, holds=self.range_fix_holds)]
            lines.append("  partition explained (Partition.explain):")
            lines += [f"    {line}" for line in self.partition.explain().splitlines()]
            lines.append("  partition:")
            lines += [f"    {line}" for line in str(self.partition).splitlines()]
        if self.repro is not None:
            lines.append(f"  repro: python {self.repro / 'repro.py'}")
        if self.passed:
            lines += [f"  {line}" for line in self.checked()]
        return "\n".join(lines)
