"""``trtcheck.verify``: compile a model, then prove the result sound (invariants) and right (equivalence).

One call does what a downstream test needs: it compiles, checks every invariant of the partition and of
the stitched graph, runs eager and stitched side by side on several inputs, and on any failure raises a
``VerificationError`` (an ``AssertionError``, so pytest reports a failure, not an error) whose report says
where each node runs and why, what differs, and where the standalone repro was written.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.fx
from torch.utils._pytree import tree_flatten, tree_unflatten

from trtcheck.compiler.clock import CompileTimes
from trtcheck.compiler.pipeline import compile
from trtcheck.engines import describe_backend, resolve_backend
from trtcheck.errors import InputMismatchError, VerificationError
from trtcheck.lowering.export import source_of
from trtcheck.lowering.graph import flat_inputs
from trtcheck.names import checked_settings
from trtcheck.partitioning.decisions import Support
from trtcheck.partitioning.explain import ExplainSummary
from trtcheck.partitioning.partition import Partition, merge_adjacent
from trtcheck.partitioning.segmentation import dependency_aware, naive
from trtcheck.runtime.stitch import RESTRIDES, EngineModule, recorded_stride, stitched_branches
from trtcheck.settings import Settings
from trtcheck.text import plural
from trtcheck.verification.determinism import (
    check_compiled_is_deterministic,
    check_eager_is_deterministic,
    detached,
    determinism_violations,
    grad_mode_violations,
    specialization_violations,
)
from trtcheck.verification.eager_cache import EagerCache
from trtcheck.verification.equivalence import Comparison, compare_outputs, judge_against_reference, judge_reduced_precision
from trtcheck.verification.inputs import InputSet, cloned, compared_input_sets, run_eager
from trtcheck.verification.invariants import Violation, check_invariants
from trtcheck.verification.localize import Localization, localize, record_eager
from trtcheck.verification.ranges import RangeFinding, describe_findings, range_findings
from trtcheck.verification.reference import float64_outputs, reduced_precision_outputs
from trtcheck.verification.repro import write_repro
from trtcheck.verification.state import (
    compiled_state,
    live_state,
    restore_compiled_state,
    restore_state,
    snapshot_state,
    state_violations,
)


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

    @property
    def passed(self) -> bool:
        return not self.violations and all(c.passed for c in self.comparisons)

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
        if not self.passed:
            lines += [f"  {line}" for line in describe_findings(self.range_findings, self.settings.precision)]
            lines.append("  partition explained (Partition.explain):")
            lines += [f"    {line}" for line in self.partition.explain().splitlines()]
            lines.append("  partition:")
            lines += [f"    {line}" for line in str(self.partition).splitlines()]
        if self.repro is not None:
            lines.append(f"  repro: python {self.repro / 'repro.py'}")
        if self.passed:
            lines += [f"  {line}" for line in self.checked()]
        return "\n".join(lines)


def verify(
    model: torch.nn.Module | torch.export.ExportedProgram | str | os.PathLike,
    example_inputs: Sequence[Any] | None = None,
    settings: Settings | None = None,
    backend: str = "auto",
    rtol: float | None = None,
    atol: float | None = None,
    num_inputs: int = 3,
    *,
    inputs: Sequence[InputSet] | None = None,
    example_kwargs: Mapping[str, Any] | None = None,
    allow_fallbacks: bool = False,
    lowered: torch.fx.GraphModule | None = None,
    support: Support = None,
    seed: int = 0,
    report_dir: str | os.PathLike | None = None,
    name: str | None = None,
    dynamic_shapes: Any = None,
    reference: bool = True,
    localize_budget: float = 60.0,
    eager_cache: EagerCache | None = None,
) -> VerificationReport:
    """Compile ``model`` and check it; raise ``VerificationError`` on any violation or mismatch.

    ``model`` is an ``nn.Module``, a ``torch.export.ExportedProgram`` (compiled as exported, compared with
    ``program.module()``) or a ``.pt2`` file's path; a program's stored example inputs serve when
    ``example_inputs`` is None.

    Input sets: ``example_inputs``, the same again (a second call of the compiled module must still be
    right: state, caches), then ``inputs`` when given, else ``num_inputs - 1`` random sets drawn like the
    examples, seeded by ``seed`` (``inputs.draw_like``: floating-point tensors from a normal distribution,
    bool tensors fair coins, integer tensors within the example's smallest and largest value, a share of them
    edge values there (the example's min and max, 0 and +-1 where in range); non-Tensor inputs kept). A model
    whose inputs are constrained (positive-definite, in a range) passes its own ``inputs``: eager failing on a
    generated set is an ``InputDomainError`` saying so.

    ``dynamic_shapes`` (torch.export's argument, ``torch.export.Dim`` per dynamic size): the compiled module must
    then serve every size in range, so without ``inputs`` the sets also include every dynamic size at its
    minimum, at its maximum, and ``num_inputs - 1`` sets of random sizes in range (an unbounded maximum is
    tested at twice the example's size, a minimum of 0 at 1). ``report.input_sets`` names the sizes of each.

    Eager runs twice on the examples first: a model that disagrees with itself (dropout in training
    mode, random ops) raises ``NondeterministicModelError`` naming its random ops, since comparing with
    it cannot tell anything about the conversion. Non-Tensor inputs are varied too: the compiled module
    must then match eager or refuse the call with ``InputMismatchError``, never answer for the example's
    value. The model's parameters and buffers are compared before and after ``compile``, and restored
    when ``verify`` returns.

    A TensorRT segment that fell back to PyTorch (its conversion or engine build failed) is lost
    coverage, so it fails verification unless ``allow_fallbacks``. ``rtol``/``atol`` default to the
    output dtype's tolerances (``equivalence.default_tolerances``). An output outside them is judged again
    against eager run in float64 (``reference``, default on): it passes when it is at most
    ``equivalence.REFERENCE_MULTIPLE`` times as far from float64 as eager itself (a deep network's rounding),
    and fails when further (a conversion error); the report gives the ratio. With ``report_dir``, a failure writes a
    standalone repro there.

    ``lowered`` is ``lower(model, example_inputs)`` made earlier (``LoweringCache``: once per model, its
    own determinism checked there); partitioning and conversion are then repeated from copies of it.

    When outputs differ, the mismatch is localized on the first failing input set (``localize``: each TensorRT
    segment's local and accumulated error, the first op whose own error fails the check, its converter, and
    whether eager is as far from float64 there) within ``localize_budget`` seconds (0: not localized); the
    report prints it, and the repro folder holds it as ``localization.txt``.

    ``eager_cache`` (an ``EagerCache``): eager's outputs kept from an earlier verify of the same model, in the same
    state, on the same input sets (the same example, seed and ``num_inputs``), used instead of running eager again:
    eager runs once on the examples and must give the kept outputs bit for bit, else the cache is emptied; pass one
    cache to the calls that verify one model under several settings. A model that differs (weights, structure,
    training flags, hooks) empties it first.
    """
    __tracebackhide__ = True  # pytest shows the report (the error's message), not this function's source and locals
    settings = checked_settings(settings)
    engine = describe_backend(backend)  # raises for an unknown backend, or an explicit one missing here
    backend = resolve_backend(backend)
    source = source_of(model, example_inputs, example_kwargs)  # an ExportedProgram or .pt2: eager runs program.module()
    lowerable, model = source.lowerable, source.eager
    example_inputs, example_kwargs = source.example_args, source.example_kwargs
    name = name or type(lowerable).__name__
    before = snapshot_state(model)
    eager_cache = eager_cache if eager_cache is not None else EagerCache()
    eager_cache.bind(model, before)
    try:
        stitched = compile(
            lowerable, example_inputs, settings, backend, support=support, example_kwargs=example_kwargs, lowered=lowered,
            dynamic_shapes=dynamic_shapes,
        )
        partition = stitched.partition
        report = VerificationReport(name, settings, backend, partition, compile_times=stitched.compile_times, engine=engine)
        report.violations = check_invariants(partition, support) + stitched_graph_violations(stitched.graph_module)
        report.violations += segmentation_violations(partition)
        report.violations += state_violations(before, live_state(model), "compile")
        report.violations += determinism_violations(
            stitched, lowerable, example_inputs, settings, support, example_kwargs, lowered, dynamic_shapes
        )
        report.violations += specialization_violations(stitched.conversion.graph_module)  # after converting again too
        if not allow_fallbacks:
            report.violations += [Violation("fallback", f"{line} (pass allow_fallbacks=True to accept it)") for line in partition.fallbacks]

        on_examples = check_eager_is_deterministic(model, example_inputs, example_kwargs, before, partition, eager_cache)
        check_compiled_is_deterministic(stitched, model, example_inputs, example_kwargs)
        mode_violations = grad_mode_violations(
            model, example_inputs, example_kwargs, before, rtol, atol, inference=on_examples, cache=eager_cache
        )
        report.violations += mode_violations
        grad = bool(mode_violations)  # eager differs between modes: compare with what was traced
        labelled = compared_input_sets(stitched.signature, example_inputs, inputs, num_inputs, seed)
        report.input_sets, input_sets = [label for label, _ in labelled], [s for _, s in labelled]
        mode_call_violations, in_modes = call_mode_violations(stitched, input_sets[0], example_kwargs)
        report.violations += mode_call_violations
        stateful = bool(compiled_state(stitched))  # eager's state before each call, for its float64 reference
        # Eager on the example and the example again, from the state it was checked from, is what the determinism
        # check computed (and proved twice alike): reused, where no state changes between the calls.
        known = None if stateful or grad else detached(on_examples)
        for index, input_set in enumerate(input_sets):
            state = snapshot_state(model) if stateful else None
            if index < 2 and known is not None:
                expected = known
            else:
                generated = inputs is None and index >= 2
                expected = _eager_outputs(model, input_set, example_kwargs, index, generated, grad, None if stateful else eager_cache)
            with torch.no_grad():
                actual = stitched(*cloned(input_set), **cloned(example_kwargs))
            comparison = compare_outputs(expected, actual, rtol=rtol, atol=atol)
            if settings.precision != "fp32" and reference:  # every output measured against eager at that precision
                _judge_reduced_precision(report, index, comparison, model, input_set, example_kwargs, state, actual)
            elif not comparison.passed and reference:  # outside the tolerances: rounding, or a conversion error?
                exact, why = float64_outputs(model, input_set, example_kwargs, state)
                if exact is not None:
                    judge_against_reference(comparison, expected, actual, exact)
                else:
                    report.notes.append(f"input set {index}: no float64 reference ({why}); the tolerances decide")
            report.comparisons.append(comparison)
            for mode, output in in_modes.items() if index == 0 else ():
                if not compare_outputs(actual, output, rtol=rtol, atol=atol).passed:
                    message = f"the compiled module gives other outputs with {mode} than under no_grad"
                    report.violations.append(Violation("grad_mode", message))
        report.violations += scalar_input_violations(model, stitched, example_inputs, example_kwargs, rtol, atol, settings.precision)
        if settings.precision != "fp32":
            report.range_findings, note = _range_findings(stitched, example_inputs, example_kwargs, settings.precision)
            report.notes += [note] if note else []
        failing = next((i for i, comparison in enumerate(report.comparisons) if not comparison.passed), None)
        if failing is not None and localize_budget > 0:
            report.localization = _localized(stitched, input_sets[failing], example_kwargs, backend, rtol, atol, localize_budget)
    finally:
        restore_state(model, before)

    if not report.passed:
        if report_dir is not None:
            failure = "\n".join(str(report).splitlines()[:40])
            options = {"dynamic_shapes": dynamic_shapes, "rtol": rtol, "atol": atol, "allow_fallbacks": allow_fallbacks,
                       "reference": reference}
            recorded = input_sets[2:]
            if dynamic_shapes is None and stitched.signature.dynamic:  # an ExportedProgram's Dims, fixed in it
                recorded = [s for s in recorded if _sizes(s) == _sizes(example_inputs)]
                options["not_recorded"] = [
                    f"the input sets at sizes other than the example's ({len(input_sets) - 2 - len(recorded)}): the "
                    "exported program's Dims are not in the saved graph; verify the program itself to test them"
                ]
            report.repro = write_repro(report_dir, partition.graph_module, tuple(example_inputs), settings, backend, failure,
                                       name=name, input_sets=recorded, options=options)
            if report.repro is not None and report.localization is not None:
                (report.repro / "localization.txt").write_text(str(report.localization) + "\n")
        raise VerificationError(report)
    return report


def _sizes(input_set: Sequence[Any]) -> list[Any]:
    """Each Tensor leaf's shape, None for other leaves: which input sets a static graph can take."""
    return [tuple(leaf.shape) if isinstance(leaf, torch.Tensor) else None for leaf in tree_flatten(tuple(input_set))[0]]


def _eager_outputs(
    model: Any, input_set: tuple, kwargs: Mapping[str, Any], index: int, generated: bool, grad: bool, cache: EagerCache | None
) -> Any:
    """Eager's (detached) outputs on one input set, from ``cache`` where it holds them (a stateful model's calls
    start from another state each time: it passes none)."""
    known, outputs = cache.get(input_set, kwargs, grad) if cache is not None else (False, None)
    if not known:
        outputs = detached(run_eager(model, input_set, kwargs, index, generated=generated, grad=grad))
        if cache is not None:
            cache.put(input_set, kwargs, grad, outputs, model)
    return outputs


def _judge_reduced_precision(
    report: VerificationReport, index: int, comparison: Comparison, model: Any, input_set: tuple, kwargs: Mapping[str, Any],
    state: Any, actual: Any,
) -> None:
    """A module compiled with ``precision="fp16"``/``"bf16"`` judged by eager's own error at that precision
    (``equivalence.judge_reduced_precision``); without eager in float64 or in that precision, the tolerances decide."""
    precision = report.settings.precision
    exact, why = float64_outputs(model, input_set, kwargs, state)
    low, why_low = reduced_precision_outputs(model, input_set, kwargs, precision, state) if exact is not None else (None, "")
    if exact is None or low is None:
        report.notes.append(f"input set {index}: no float64 or {precision} eager reference ({why or why_low}); the tolerances decide")
        return
    judge_reduced_precision(comparison, detached(low), actual, exact, precision)


def _range_findings(
    stitched: Any, example_inputs: Sequence[Any], kwargs: Mapping[str, Any], precision: str
) -> tuple[list[RangeFinding], str]:
    """The nodes whose eager values on the example leave ``precision``'s range (``ranges.range_findings``), and a
    note when they could not be found (naming them explains a failure; it must never replace it)."""
    gm = stitched.partition.graph_module
    try:
        return range_findings(gm, record_eager(gm, flat_inputs(gm, cloned(tuple(example_inputs)), cloned(dict(kwargs)))), precision), ""
    except Exception as error:  # noqa: BLE001 - a diagnostic
        return [], f"the nodes leaving {precision}'s range could not be found: {type(error).__name__}: {error}"


def _localized(stitched: Any, input_set: tuple, kwargs: Mapping[str, Any], backend: str, rtol, atol, budget: float) -> Localization:
    """The mismatch on ``input_set`` localized (``localize``), or a localization holding only why it could not be."""
    try:
        flat = flat_inputs(stitched.partition.graph_module, cloned(input_set), cloned(kwargs))  # the examples stay as given
        return localize(stitched, flat, backend, rtol, atol, budget)
    except Exception as error:  # noqa: BLE001 - localizing explains a failure; it must never replace it
        return Localization(notes=[f"the mismatch could not be localized: {type(error).__name__}: {error}"])


CALL_MODES: tuple[tuple[str, Any], ...] = (("autograd on", torch.enable_grad), ("inference_mode", torch.inference_mode))
"""How users call a compiled module besides ``torch.no_grad()`` (where the comparisons call it)."""


def call_mode_violations(stitched: Any, input_set: tuple, kwargs: dict) -> tuple[list[Violation], dict[str, Any]]:
    """The compiled module called as users call it outside ``torch.no_grad()`` (``CALL_MODES``), on ``input_set``
    from its current state (restored after each call): it must run (engines carry no gradient, and an in-place
    update of a weight that requires grad, as ``nn.Embedding(max_norm=...)`` makes, raises with autograd on).
    Returns the violations and each mode's outputs, which must equal those under no_grad."""
    found: list[Violation] = []
    outputs: dict[str, Any] = {}
    for mode, context in CALL_MODES:
        state = compiled_state(stitched)
        try:
            with context():
                outputs[mode] = detached(stitched(*cloned(input_set), **cloned(kwargs)))
        except Exception as error:  # noqa: BLE001 - any failure in a mode users call it in is what this reports
            found.append(Violation("grad_mode", f"calling the compiled module with {mode} failed: {type(error).__name__}: {error}"))
        finally:
            restore_compiled_state(stitched, state)
    return found, outputs


def scalar_input_violations(model, stitched, example_inputs, example_kwargs, rtol, atol, precision: str = "fp32") -> list[Violation]:
    """Each int/float input varied: the compiled module matches eager or refuses the call, never answers wrong (below
    fp32, ``precision``, as judged against eager at that precision: ``judge_reduced_precision``)."""
    found: list[Violation] = []
    leaves, spec = tree_flatten((tuple(example_inputs), dict(example_kwargs)))
    names = stitched.signature.names
    for index, value in enumerate(leaves):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        varied = list(leaves)
        varied[index] = value * 2 + 3 if isinstance(value, int) else value * 2.5 + 1.0
        args, kwargs = tree_unflatten(varied, spec)
        state = snapshot_state(model)
        try:
            with torch.no_grad():
                expected = model(*cloned(args), **cloned(kwargs))
        except Exception:  # noqa: BLE001 - eager rejects the varied value: nothing to compare
            continue
        finally:
            restore_state(model, state)
        try:
            with torch.no_grad():
                actual = stitched(*cloned(args), **cloned(kwargs))
        except InputMismatchError:
            continue  # refusing a value it was not compiled for is sound
        comparison = compare_outputs(expected, actual, rtol=rtol, atol=atol)
        if not comparison.passed and precision != "fp32":
            exact, _ = float64_outputs(model, args, kwargs, state)
            low, _ = reduced_precision_outputs(model, args, kwargs, precision, state) if exact is not None else (None, "")
            if low is not None:
                judge_reduced_precision(comparison, detached(low), actual, exact, precision)
        if not comparison.passed:
            message = f"{names[index]}={varied[index]!r} (compiled with {value!r}): outputs differ from eager\n{comparison}"
            found.append(Violation("scalar_input", message))
    return found


def stitched_graph_violations(stitched: torch.fx.GraphModule) -> list[Violation]:
    """The stitched graph must be well formed, and engine outputs must carry the layout their users were traced on."""
    try:
        stitched.graph.lint()
    except Exception as error:  # noqa: BLE001 - lint raises RuntimeError today; any failure is a violation
        return [Violation("stitched_graph", f"{type(error).__name__}: {error}")]
    found = []
    engines = {
        node
        for node in stitched.graph.nodes
        if node.op == "call_module" and isinstance(stitched.get_submodule(node.target), EngineModule)
    }
    for node in stitched.graph.nodes:
        if node.op == "call_function" and node.target is operator.getitem and node.args[0] in engines:
            stride = recorded_stride(node)
            bare = [user.name for user in node.users if not (user.op == "call_function" and user.target in RESTRIDES)]
            if stride is not None and bare:
                found.append(Violation(
                    "layout",
                    f"{node.name} leaves engine {node.args[0].target} contiguous, but export recorded strides {stride} "
                    f"for it and {', '.join(bare)} read it as it is",
                ))
    for name, branch in stitched_branches(stitched):  # the stitched branches of torch.cond / while_loop, recursively
        found += [violation.inside(name) for violation in stitched_graph_violations(branch)]
    return found


def segmentation_violations(partition: Partition) -> list[Violation]:
    """Dependency-aware segmentation must never make more segments than naive for the same targets."""
    targets = {node: segment.target for segment in partition.segments for node in segment.nodes}
    nodes = [node for node in partition.compute_nodes if node in targets]
    if len(nodes) != len(targets):  # a segment holds a non-compute node: "placement" already says so
        return []
    aware, greedy = len(merge_adjacent(dependency_aware(nodes, targets))), len(merge_adjacent(naive(nodes, targets)))
    if aware > greedy:
        return [Violation("segment_count", f"dependency-aware made {aware} segments, naive {greedy}, for the same targets")]
    return []


