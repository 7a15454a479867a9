"""Verify a model as ``torch.compile(model, backend="tensorrt")`` deploys it: graph by graph, and whole.

A model ``torch.export`` refuses (torchvision's detectors: box selection and NMS have data-dependent sizes) runs under
dynamo as graphs with Python between them. Two checks, as dynamo's own accuracy minifier makes them:

* **each captured graph** against eager on the inputs it was really called with (``capture`` records them on every
  input set): ``verify``'s whole check (invariants, equivalence judged against float64, localization, repro) per
  graph, so a wrong engine in a detector's backbone is found even where the model's outputs hide it (a random-weight
  detector may keep no box at all);
* **the whole model**: the deployed model (every graph compiled by trtcheck, under dynamo) against eager on the same
  input sets, its detections matched first (``detections``): a detection only one side kept is on a cut (said as
  such) or a failure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from trtcheck.dynamo import Capture, CapturedGraph, DynamoModule, capture, compile_dynamo
from trtcheck.dynamo.backend import sizes_of, without_unmatched_ops
from trtcheck.dynamo.capture import detached_copy
from trtcheck.errors import TrtcheckError, UnmatchedOpError, VerificationError
from trtcheck.settings import Settings
from trtcheck.text import plural
from trtcheck.verification.detections import Matching, aligned_with_reference, cuts_of, matched_outputs
from trtcheck.verification.equivalence import Comparison
from trtcheck.verification.inputs import cloned, draw_input_sets
from trtcheck.verification.reference import float64_outputs_and_depth
from trtcheck.verification.report import VerificationReport
from trtcheck.verification.request import VerifyRequest
from trtcheck.verification.state import restore_state, snapshot_state

VerifyGraph = Callable[[torch.nn.Module, tuple, VerifyRequest], VerificationReport]
"""``verify_request`` of one captured graph (passed in: it is the driver above this module)."""


@dataclass
class GraphVerdict:
    """One captured graph's verification: its report, or why it was not verified (``skipped``: nothing to compile)."""

    graph: CapturedGraph
    report: VerificationReport | None = None
    error: str = ""
    skipped: str = ""

    @property
    def passed(self) -> bool:
        return bool(self.skipped) or (self.report is not None and self.report.passed)


@dataclass
class GraphBreakReport:
    """What ``verify`` found of a model verified through torch.compile: the capture (graphs, breaks, recompiles),
    each graph's verdict, and the whole model's comparison per input set with its detection matching."""

    name: str
    settings: Settings
    backend: str
    capture: Capture
    graphs: list[GraphVerdict] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)
    matchings: list[Matching] = field(default_factory=list)
    failed_graphs: list[str] = field(default_factory=list)  # graphs the deployed model runs uncompiled, and why
    notes: list[str] = field(default_factory=list)
    frontend: str = "compile"

    @property
    def passed(self) -> bool:
        return (all(graph.passed for graph in self.graphs) and all(c.passed for c in self.comparisons)
                and all(matching.explained for matching in self.matchings) and not self.failed_graphs)

    def fallbacks(self) -> list[str]:
        """Every captured graph's fallen-back segments, and the graphs the deployed model runs uncompiled."""
        return [f"{verdict.graph.name}: {line}" for verdict in self.graphs if verdict.report is not None
                for line in verdict.report.fallbacks()] + list(self.failed_graphs)

    def checked(self) -> list[str]:
        verified = [graph for graph in self.graphs if graph.report is not None]
        lines = [f"{plural(len(verified), 'captured graph')} verified against eager on the inputs each was called with",
                 f"the model under torch.compile compared with eager on {plural(len(self.comparisons), 'input set')}"]
        matched = sum(matching.matched for matching in self.matchings)
        if self.matchings and any(matching.matched or matching.one_sided for matching in self.matchings):
            lines.append(f"{plural(matched, 'detection')} matched and judged")
        return lines

    def __str__(self) -> str:
        status = "PASSED" if self.passed else "FAILED"
        lines = [f"trtcheck verification of {self.name}: {status}",
                 f"  frontend={self.frontend} (torch.compile) backend={self.backend} settings={self.settings}",
                 *(f"  {line}" for line in self.capture.lines())]
        lines += [f"  note: {note}" for note in self.notes]
        lines += [f"  not compiled, runs as captured: {failed}" for failed in self.failed_graphs]
        for verdict in self.graphs:
            if verdict.skipped:
                continue
            if verdict.report is None:
                lines.append(f"  {verdict.graph.name}: not verified: {verdict.error}")
            elif not verdict.report.passed:
                lines.append(f"  {verdict.graph.name}: FAILED")
                lines += [f"    {line}" for line in str(verdict.report).splitlines()[1:]]
            else:
                lines.append(f"  {verdict.graph.name}: PASSED, {verdict.report.partition.summary()}")
        for index, (comparison, matching) in enumerate(zip(self.comparisons, self.matchings)):
            lines += [f"  input set {index}: {line}" for line in matching.lines()]
            if not comparison.passed:
                lines.append(f"  input set {index}: the model's outputs differ from eager")
                lines += [f"    {line}" for line in str(comparison).splitlines()]
        if self.passed:
            lines += [f"  {line}" for line in self.checked()]
        return "\n".join(lines)


def verify_across_breaks(model: torch.nn.Module, args: tuple, kwargs: Mapping[str, Any], request: VerifyRequest,
                         verify_graph: VerifyGraph, *, dynamic: bool | None = False, note: str = "") -> GraphBreakReport:
    """``model`` verified as torch.compile deploys it (module docstring); raises ``VerificationError`` on a failure."""
    __tracebackhide__ = True
    before = snapshot_state(model)
    name = request.name or type(model).__name__
    input_sets = draw_input_sets(args, request.inputs, request.num_inputs, request.seed)
    try:
        captured, _ = capture(model, input_sets, kwargs, dynamic=dynamic)
        restore_state(model, before)
        expected = _eager_outputs(model, input_sets, kwargs, before)
        report = GraphBreakReport(name, request.settings, request.resolved_backend, captured, notes=[note] if note else [])
        report.graphs = [verdict for graph in captured.graphs for verdict in _verified_graphs(graph, request, name, verify_graph)]
        restore_state(model, before)
        deployed = compile_dynamo(model, cloned(args), request.compile_request, example_kwargs=dict(kwargs), dynamic=dynamic)
        report.failed_graphs = [f"{graph.captured.name}: {graph.error}" for graph in deployed.failed]
        _compare_whole(report, model, deployed, input_sets, kwargs, expected, request)
    finally:
        torch._dynamo.reset()
        restore_state(model, before)
    if not report.passed:
        raise VerificationError(report)
    return report


def _verified_graphs(graph: CapturedGraph, request: VerifyRequest, name: str, verify_graph: VerifyGraph) -> list[GraphVerdict]:
    """``graph`` verified on the inputs of its first call, then of every other call at the same sizes; a graph with
    symbolic sizes (``dynamic=True``) called at several sizes is verified once per size, as it is compiled."""
    if not graph.calls:
        return [GraphVerdict(graph, skipped="never called")]
    if not graph.compute_nodes:
        return [GraphVerdict(graph, skipped="no compute node")]
    by_size: dict[tuple, list[tuple]] = {}
    for _, inputs in graph.calls:
        by_size.setdefault(sizes_of(inputs), []).append(inputs)
    verdicts = []
    for sizes, calls in by_size.items():
        first, *others = calls
        label = f"{name} {graph.name}" + (f" at sizes {list(sizes)}" if len(by_size) > 1 else "")
        graph_request = dataclasses.replace(request, inputs=others or None, num_inputs=1 if not others else request.num_inputs,
                                            name=label, lowered=None, dynamic_shapes=None, eager_cache=None)
        try:
            try:
                verdicts.append(GraphVerdict(graph, verify_graph(graph.graph_module, first, graph_request)))
            except UnmatchedOpError as error:  # an op this graph does not call: the model is asked as a whole (deploying it)
                narrowed = without_unmatched_ops(graph_request.compile_request, error.unmatched).settings
                verdicts.append(GraphVerdict(graph, verify_graph(graph.graph_module, first,
                                                                 dataclasses.replace(graph_request, settings=narrowed))))
        except VerificationError as error:
            verdicts.append(GraphVerdict(graph, error.report))
        except TrtcheckError as error:  # refused before a report exists (lowering): the graph runs uncompiled when deployed
            verdicts.append(GraphVerdict(graph, error=f"{type(error).__name__}: {str(error).splitlines()[0]}"))
    return verdicts


def _eager_outputs(model: torch.nn.Module, input_sets: list[tuple], kwargs: Mapping[str, Any],
                   before: Mapping[str, torch.Tensor]) -> list[Any]:
    """Eager's outputs on each input set, under no_grad, each call from the state the calls before it left."""
    outputs = []
    with torch.no_grad():
        for input_set in input_sets:
            outputs.append(detached_copy(model(*cloned(input_set), **cloned(dict(kwargs)))))
    restore_state(model, before)
    return outputs


def _judge_detections(comparison: Comparison, model: torch.nn.Module, input_set: tuple, kwargs: Mapping[str, Any],
                      eager: Any, compiled: Any, request: VerifyRequest) -> str:
    """Matched detections outside the tolerances, judged against float64 as any output is (``Judge.judge_outputs``):
    each detection against its own float64 values (``aligned_with_reference``). A deep backbone's float32 rounding moves a
    box by about 1e-4 of its size (fasterrcnn_resnet50_fpn), far outside float32's rtol, well inside what eager's own
    error allows. Returns the note on what was not judged so ("" when everything was, or nothing needed to be)."""
    judge = request.judge
    if comparison.passed or not judge.reference:
        return ""
    if judge.reduced:
        return f"matched detections are not judged against float64 at {judge.precision} yet; the tolerances decide"
    exact, why, depth = float64_outputs_and_depth(model, input_set, kwargs)
    if exact is None:
        return f"{judge.missing_reference} ({why}); the tolerances decide"
    eager, compiled, reference, dropped = aligned_with_reference(eager, compiled, exact)
    judged = request.judge.compare(eager, compiled)
    judge.judge_outputs(judged, eager, compiled, reference, depth)
    comparison.outputs, comparison.passed, comparison.structure_error = judged.outputs, judged.passed, judged.structure_error
    if dropped:
        return (f"{dropped} matched detection(s) float64 did not keep (each on a cut in float64 too: a rounding decides "
                "whether it exists) are not judged; the others are judged against float64")
    return ""


def _composed(comparison: Comparison, deployed: DynamoModule, input_set: tuple, kwargs: Mapping[str, Any],
              request: VerifyRequest) -> str:
    """Whether a whole-model difference is each graph's allowed rounding compounded across the graph breaks: the
    deployed model run again, every call of a compiled graph judged against that graph in eager on the very inputs it
    got (dynamo's accuracy minifier's check). When each passes, the comparison passes, saying so; when one fails, the
    note names it. A RetinaNet's box decoding multiplies its regression by up to exp(4.135) = 62.5: per-graph errors
    within float32's rule came out 5.5x eager's own error in its boxes, every graph call within its rule."""
    with deployed.backend.recording() as calls, torch.no_grad():
        deployed(*cloned(input_set), **cloned(dict(kwargs)))
    failing = []
    for call in calls:
        graph, args, outputs = call.graph, call.inputs, call.outputs
        module = graph.captured.graph_module
        with torch.no_grad():
            expected = detached_copy(module(*cloned(args)))
        judged = request.judge.compare(expected, outputs)
        request.judge.judge_call(judged, module, args, {}, expected, outputs)
        if not judged.passed:
            failing.append(graph.captured.name)
    if failing:
        named = list(dict.fromkeys(failing))
        verb = "differs" if len(named) == 1 else "differ"
        return f"on the deployed run's own inputs, {plural(len(named), 'graph')} {verb} from eager: {', '.join(named)}"
    comparison.passed = True
    return (f"the outputs differ from eager beyond the rule, but each of the deployed run's {plural(len(calls), 'graph call')} "
            "is within it on the inputs it got: rounding compounded across the graph breaks, not a conversion error")


def _compare_whole(report: GraphBreakReport, model: torch.nn.Module, deployed: DynamoModule, input_sets: list[tuple],
                   kwargs: Mapping[str, Any], expected: list[Any], request: VerifyRequest) -> None:
    """The deployed model against eager (``expected``) per input set,
    detections matched first; outputs without detections are judged by the request's judge in full."""
    cuts = cuts_of(model)
    for index, input_set in enumerate(input_sets):
        with torch.no_grad():
            actual = deployed(*cloned(input_set), **cloned(dict(kwargs)))
        eager, compiled, matching = matched_outputs(expected[index], actual, cuts)
        comparison = request.judge.compare(eager, compiled)
        if not matching.matched and not matching.one_sided:  # no detections: the judge's float64 rule applies as in verify
            why = request.judge.judge_call(comparison, model, input_set, kwargs, expected[index], actual)
            note = f"{why}; the tolerances decide" if why else ""
        else:
            note = _judge_detections(comparison, model, input_set, kwargs, eager, compiled, request)
        if not comparison.passed and not report.failed_graphs:
            note = "; ".join(filter(None, [note, _composed(comparison, deployed, input_set, kwargs, request)]))
        if note:
            report.notes.append(f"input set {index}: {note}")
        report.comparisons.append(comparison)
        report.matchings.append(matching)
