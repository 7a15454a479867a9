"""Localization: which engine, and which op inside it, makes a compiled module's outputs differ from eager's.

A failing comparison says *that* outputs differ; on a model of thousands of nodes the culprit is one op among
them. Error found at an output is accumulated: every op after the culprit carries it, so the first op whose
output differs is not necessarily wrong, and an op whose error a ``relu`` or a ``max`` hides later still is.
What tells a wrong op from a victim is its *local* error: the op run on eager's own values at its inputs.

``localize`` records eager's value of every node of the lowered graph on the failing input set, then:

1. per TensorRT segment, runs its engine on eager's values at its inputs (its local error) and on the compiled
   module's upstream values (its accumulated error); the culprit segment is the first, in dataflow order, whose
   local error fails the check;
2. inside it, bisects over prefixes of its nodes with *sub-engines* (``check_nodes``: the nodes cut out as their
   own graph, every value they produce an output, every value they read a recorded eager value), so the engine
   under test is never the answer's instrument; the first prefix that fails ends at the first diverging op;
3. runs that op alone (isolation), and against float64 (``reference.float64_outputs`` of the op on the same
   inputs), which tells "this converter is wrong" (the engine is much further from float64 than eager) from
   "this op is ill-conditioned on these inputs" (eager is as far from float64 as the engine).

Control flow is walked inside. A ``torch.cond`` or ``while_loop`` node runs in PyTorch, but its branches are
partitioned and compiled on their own (``compiler.engine_build.build_branches``): the compiled module's values after
the node come from the stitched branch modules, engines and all, and so do localization's (``_Walk``). Each branch
that runs engines is walked itself, as a graph of its own (its partition, its engines, its branches), on the values
it is called with: the branch eager's predicate takes, and each iteration of a loop's condition and body, until the
first iteration whose engines fail locally. Its segments are checked, and a culprit in it found, by the same steps
as the lowered graph's, and named with where they are: ``segment @0 in branch true_graph_0 of cond (node cond)``,
``in the body of while_loop (node while_loop), iteration 3`` (iterations count from 1).

A sub-engine is what compile would build of its nodes: cut by ``partitioning.extract`` (the function compile converts
segments from) and converted and built by ``compiler.engine_build.build_graph_engine``, so localization has no
conversion or build path of its own. A check fails as ``verify``'s does: outside the tolerances
(``compare_outputs``) and, where float64 runs, more than ``REFERENCE_MULTIPLE`` times as far from it as eager
(``judge_against_reference``). Everything runs within a time budget; a localization the budget cut short says so.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from trtcheck.compiler.engine_build import build_graph_engine
from trtcheck.conversion import get as converter_of
from trtcheck.engines import Engine, TensorSpec
from trtcheck.engines.precision import judged_precision
from trtcheck.lowering.graph import flat_inputs as flattened
from trtcheck.names import from_source, node_source
from trtcheck.partitioning.extract import nodes_module, segment_module
from trtcheck.partitioning.nodes import bound_operands, branch_names, is_control_flow, is_getitem
from trtcheck.partitioning.partition import Partition, Segment
from trtcheck.partitioning.reasons import Target
from trtcheck.runtime.stitch import EngineModule, stitched_branches
from trtcheck.values import cloned
from trtcheck.verification.equivalence import (
    REDUCED_PRECISION_FLOOR,
    REDUCED_PRECISION_MULTIPLE,
    REFERENCE_MULTIPLE,
    Comparison,
    OutputComparison,
    compare_outputs,
    default_tolerances,
    judge_against_reference,
)
from trtcheck.verification.precision import judge_at_precision
from trtcheck.verification.recording import Values, record_eager, run_nodes
from trtcheck.verification.reference import float64_outputs
from trtcheck.verification.state import restore_state, snapshot_state


class Budget:
    """Seconds left for a localization or a reduction: ``spent`` once the deadline passed (None: no limit)."""

    def __init__(self, seconds: float | None) -> None:
        self.start = time.perf_counter()
        self.deadline = None if seconds is None else self.start + seconds
        self.cut_short = False

    @property
    def spent(self) -> bool:
        if self.deadline is not None and time.perf_counter() > self.deadline:
            self.cut_short = True
        return self.cut_short

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start


# ------------------------------------------------------------------------------------------- sub-engines


def normalised(nodes: Iterable[torch.fx.Node]) -> list[torch.fx.Node]:
    """``nodes`` made a set a sub-engine can take, in graph order: a multi-output op brings its ``getitem``s (a
    tuple is no engine output), and a ``getitem`` of an op left out is dropped (its value becomes an input)."""
    chosen = {node for node in nodes if node.op == "call_function"}
    for node in list(chosen):
        chosen.update(user for user in node.users if is_getitem(user))
    chosen = {node for node in chosen if not is_getitem(node) or node.args[0] in chosen}
    if not chosen:
        return []
    order = {node: index for index, node in enumerate(next(iter(chosen)).graph.nodes)}
    return sorted(chosen, key=order.__getitem__)


def subgraph_module(
    gm: torch.fx.GraphModule, nodes: Sequence[torch.fx.Node], values: Values, outputs: Sequence[torch.fx.Node] | None = None
) -> tuple[torch.fx.GraphModule, list[torch.fx.Node]]:
    """``nodes`` of ``gm`` cut out as a standalone ``GraphModule`` (``partitioning.extract.nodes_module``: as compile
    cuts a segment) and the original nodes its placeholders stand for; the outputs are ``outputs`` (default: every
    node of the set whose recorded value in ``values`` is a floating Tensor)."""
    if outputs is None:
        outputs = [node for node in nodes if floating(values.get(node))]
    return nodes_module(gm, nodes, outputs)


@dataclass
class NodeCheck:
    """One set of nodes run as a sub-engine on recorded values: the comparison of each output with eager's.

    ``comparison`` holds one ``OutputComparison`` per output node (``outputs``), judged against float64 where the
    tolerances failed; ``error`` is why no engine could be made (a conversion error is a failure too)."""

    nodes: list[torch.fx.Node]
    outputs: list[torch.fx.Node]
    comparison: Comparison | None = None
    error: str = ""
    engine: Engine | None = None
    inputs: list[torch.fx.Node] = field(default_factory=list)
    unjudged: str = ""  # at a reduced precision: why eager could not run in float64 or in it (the tolerances decided)

    @property
    def failed(self) -> bool:
        return bool(self.error) or (self.comparison is not None and not self.comparison.passed)

    def of(self, node: torch.fx.Node) -> OutputComparison | None:
        """``node``'s comparison (None: not an output, or not compared: the check stops at its first failure)."""
        if self.comparison is None or node not in self.outputs or self.outputs.index(node) >= len(self.comparison.outputs):
            return None
        return self.comparison.outputs[self.outputs.index(node)]

    def first_failure(self) -> torch.fx.Node | None:
        if self.comparison is None:
            return None
        return next((node for node, output in zip(self.outputs, self.comparison.outputs) if not output.passed), None)


def engine_of(
    module: torch.fx.GraphModule, values: Sequence[Any], expected: Sequence[Any], backend: str, settings: Any = None
) -> Engine:
    """``module`` (a standalone graph) converted and built into an engine for these static values by the compiler's
    own path (``compiler.engine_build.build_graph_engine``): with ``settings`` (the compiled partition's: its
    precision, ``fp32_nodes``, ``use_fp32_acc``, ``autocast``, ``tf32``) as compile built the engine it stands for,
    in float32 with the defaults where None."""
    placeholders = [node for node in module.graph.nodes if node.op == "placeholder"]
    inputs = [TensorSpec.like(node.name, value) for node, value in zip(placeholders, values)]
    outputs = [TensorSpec.like(f"output_{i}", value) for i, value in enumerate(expected)]
    return build_graph_engine(module, inputs, outputs, backend, settings=settings)


def judge(
    expected: Sequence[Any], actual: Sequence[Any], exact: Callable[[], Any] | None, rtol: float | None, atol: float | None,
    *, first_failure: bool = False,
) -> Comparison:
    """The check ``verify`` makes, on many outputs at once: each output within the tolerances, or (``exact``: a thunk
    of the float64 outputs, run once and only when some output needs it) no further from float64 than
    ``REFERENCE_MULTIPLE`` times eager. An output that passes the tolerances gets no statistics: a sub-engine has an
    output per node, and the statistics of hundreds of activations would cost more than building the engine.
    ``first_failure``: stop at the first output that fails (outputs after it are not compared): every output
    downstream of a wrong op fails too, and only the first one is news."""
    outputs: list[OutputComparison] = []
    reference: list[Any] | None = None
    for index, (e, a) in enumerate(zip(expected, actual)):
        if _quickly_close(e, a, rtol, atol):
            outputs.append(OutputComparison(f"out[{index}]", tuple(e.shape), e.dtype, rtol or 0.0, atol or 0.0, True))
            continue
        if exact is not None and reference is None:
            reference = list(exact() or [None] * len(expected))
        if reference is not None and _quickly_as_exact(e, a, reference[index], rtol, atol):
            outputs.append(OutputComparison(f"out[{index}]", tuple(e.shape), e.dtype, rtol or 0.0, atol or 0.0, True))
            continue
        comparison = compare_outputs(e, a, rtol=rtol, atol=atol)
        if not comparison.passed and reference is not None and reference[index] is not None:
            judge_against_reference(comparison, e, a, reference[index])
        output = comparison.outputs[0] if comparison.outputs else OutputComparison(f"out[{index}]", (), None, 0.0, 0.0, False)
        output.passed = output.passed and comparison.structure_error is None
        output.path = f"out[{index}]"
        outputs.append(output)
        if first_failure and not output.passed:
            break
    return Comparison(outputs, all(output.passed for output in outputs))


def _quickly_as_exact(expected: Any, actual: Any, exact: Any, rtol: float | None, atol: float | None) -> bool:
    """``judge_against_reference``'s pass rule alone, no statistics: finite everywhere, and no further from float64
    than ``REFERENCE_MULTIPLE`` times eager, plus a tenth of the atol."""
    if not all(isinstance(v, torch.Tensor) for v in (expected, actual, exact)) or not expected.is_floating_point():
        return False
    if not (expected.shape == actual.shape == exact.shape) or expected.numel() == 0:
        return False
    exact = exact.to(torch.float64)
    eager_error = float((expected.to(torch.float64) - exact).abs().max())
    error = float((actual.to(expected.device, torch.float64) - exact).abs().max())
    atol = default_tolerances(expected.dtype)[1] if atol is None else atol
    return math.isfinite(error) and math.isfinite(eager_error) and error <= REFERENCE_MULTIPLE * eager_error + atol / 10


def _quickly_close(expected: Any, actual: Any, rtol: float | None, atol: float | None) -> bool:
    """``compare_outputs``'s pass rule alone (``torch.isclose`` at the dtype's default tolerances), no statistics."""
    if not isinstance(expected, torch.Tensor) or not isinstance(actual, torch.Tensor):
        return False
    if expected.shape != actual.shape or expected.dtype != actual.dtype:
        return False
    default_rtol, default_atol = default_tolerances(expected.dtype)
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    actual = actual.to(expected.device)
    if expected.numel() == 0:
        return True
    if expected.is_floating_point():  # isclose is slow on the CPU: its rule without its NaN handling, where no NaN
        error = (actual - expected).abs_()
        largest = float(error.max())
        if largest <= atol:
            return True
        if math.isfinite(largest):  # a failure here is a failure; an element on the edge is judged again in full
            return bool((error <= expected.abs().mul_(rtol).add_(atol)).all())
    return bool(torch.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True).all())


def float64_of(module: torch.fx.GraphModule, values: Sequence[Any]) -> Callable[[], Any]:
    """A thunk: ``module``'s outputs in float64 on ``values`` (None when it cannot run in float64)."""

    def run() -> Any:
        exact, _ = float64_outputs(module, tuple(values), {})
        return exact

    return run


@torch.no_grad()
def check_nodes(
    gm: torch.fx.GraphModule,
    nodes: Iterable[torch.fx.Node],
    values: Values,
    backend: str,
    rtol: float | None = None,
    atol: float | None = None,
    outputs: Sequence[torch.fx.Node] | None = None,
    reference: bool = True,
    settings: Any = None,
) -> NodeCheck:
    """Cut ``nodes`` out of ``gm``, build their sub-engine, feed it ``values`` (eager's, recorded) at the cut, and
    compare every output with ``values``: does this set of nodes, alone, fail the check? ``reference``: an output
    outside the tolerances is judged again against float64 (``verify``'s check); without it the tolerances decide.
    ``settings``: the compiled partition's; below fp32 (or with TF32) the sub-engine is built with them and every
    output judged by the reduced-precision judge (``precision.judge_at_precision``), all outputs compared. (At fp32
    the sub-engine is built with None: exactly as a float32 localization always built it. Below, with the settings,
    issue 43: ``fp32_nodes`` match the cut's nodes, which keep their names.)"""
    precision = judged_precision(settings)
    build = None if precision == "fp32" else settings
    chosen = normalised(nodes)
    check = NodeCheck(chosen, [])
    if not chosen:
        return check
    outputs = list(outputs) if outputs is not None else [n for n in chosen if floating(values.get(n))]
    module, inputs = subgraph_module(gm, chosen, values, outputs)
    check.inputs = inputs
    check.outputs = outputs
    if not check.outputs:
        return check
    fed = [_dense(values[node]) for node in inputs]
    expected = [values[node] for node in check.outputs]
    try:
        check.engine = engine_of(module, fed, expected, backend, build)
        with torch.no_grad():
            actual = list(check.engine(*fed))
    except Exception as error:  # noqa: BLE001 - a set that does not convert or run fails, and says why
        check.error = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
        return check
    if precision != "fp32" and reference:  # as verify judges such a module: float64, eager at that precision its yardstick
        check.comparison = compare_outputs(expected, actual, rtol=rtol, atol=atol)
        check.unjudged = judge_at_precision(check.comparison, module, tuple(fed), {}, actual, precision)
        return check
    exact = float64_of(module, fed) if reference else None
    check.comparison = judge(expected, actual, exact, rtol, atol, first_failure=True)
    return check


def floating(value: Any) -> bool:
    """Compared outputs are floating-point: an integer output (a max-pool's indices) may differ where ties are
    broken differently, and a wrong integer shows in the floating values computed from it anyway."""
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def _dense(value: Any) -> Any:
    return value.contiguous() if isinstance(value, torch.Tensor) else value


# ------------------------------------------------------------------------------------------- the report


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
    precision: str = "fp32"  # what ``local_passed`` was judged at (below fp32: against eager at that precision)

    def __str__(self) -> str:
        if not self.local_passed:
            verdict = "FAIL"
        elif not self.local_within_tolerances:
            eager = "eager" if self.precision == "fp32" else f"eager in {self.precision}"
            verdict = f"outside the tolerances, but as close to float64 as {eager}"
        else:
            verdict = "ok" if self.accumulated_passed else "ok locally, inherits error"
        return (f"segment @{self.index} ({self.nodes} nodes, {self.first}..{self.last}){_in(self.where)}: local error {self.local:.3g}, "
                f"accumulated {self.accumulated:.3g}: {verdict}")


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
    op_float64_error: float | None = None  # the op's engine output against float64 on the same inputs
    # Eager's own output against float64 on the same inputs, eager at ``precision`` (float32 at "fp32"): the yardstick
    # ``ill_conditioned`` holds the engine's error to.
    eager_error: float | None = None
    message: str = ""
    where: str = ""  # the control-flow branch its segment runs in, as ``SegmentCheck.where``
    source: str = ""  # where in the user's code the op came from (``names.node_source``): module path, file:line
    precision: str = "fp32"  # what its sub-engines were built and judged at (``engines.precision.judged_precision``)

    @property
    def ill_conditioned(self) -> bool:
        """Eager itself is as far from float64 as the engine: rounding, not the converter. The judges' own rules decide
        how far is as far: at fp32 within ``REFERENCE_MULTIPLE``; below, eager at that precision within
        ``REDUCED_PRECISION_MULTIPLE`` and the precision's floor (the precision's rounding or range)."""
        if self.op_float64_error is None or self.eager_error is None:
            return False
        if self.precision == "fp32":
            return self.op_float64_error <= REFERENCE_MULTIPLE * self.eager_error + 1e-12
        return self.op_float64_error <= REDUCED_PRECISION_MULTIPLE * self.eager_error + REDUCED_PRECISION_FLOOR[self.precision]

    def diagnosis(self) -> str:
        if self.precision != "fp32":
            return self._reduced_diagnosis()
        if self.op_float64_error is None or self.eager_error is None:
            return "no float64 reference for this op: the tolerances alone decide"
        ratio = self.op_float64_error / self.eager_error if self.eager_error else math.inf
        if self.ill_conditioned:
            return (f"this op is ill-conditioned on these inputs: eager is {self.eager_error:.3g} from float64, the "
                    f"engine {self.op_float64_error:.3g} ({ratio:.3g}x), so no converter can do better in this dtype")
        return (f"this op's converter is wrong: the engine is {self.op_float64_error:.3g} from float64, {ratio:.3g}x eager's "
                f"own {self.eager_error:.3g}")

    def _reduced_diagnosis(self) -> str:
        precision = self.precision
        if self.op_float64_error is None or self.eager_error is None:
            return f"no float64 or {precision} eager reference for this op: the tolerances alone decide"
        eager = self.eager_error
        ratio = self.op_float64_error / eager if eager else (math.inf if self.op_float64_error else 1.0)
        if self.ill_conditioned:
            return (f"eager in {precision} is as far from float64 as the engine built in {precision}: eager "
                    f"{eager:.3g}, the engine {self.op_float64_error:.3g} ({ratio:.3g}x): {precision}'s rounding or range on "
                    f"these inputs, not the converter; keep it in float32 (Settings.fp32_nodes=[{self.node!r}])")
        return (f"this op's converter is wrong: the engine, built in {precision}, is {self.op_float64_error:.3g} from "
                f"float64, {ratio:.3g}x eager in {precision}'s own {eager:.3g}")

    def __str__(self) -> str:
        lines = [
            f"culprit: {self.node} = {self.op} (segment @{self.segment}){_in(self.where)}, converted by {self.converter}",
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


# ------------------------------------------------------------------------------------------- localizing


@torch.no_grad()  # recorded values are views of parameters; autograd would refuse them once the state is restored
def localize(
    compiled: Any,
    flat_inputs: Sequence[Any],
    backend: str,
    rtol: float | None = None,
    atol: float | None = None,
    budget: float | None = 60.0,
) -> Localization:
    """Localize the mismatch of ``compiled`` (a ``CompiledModule``) on ``flat_inputs`` (its lowered graph's
    placeholders' values): per-segment local and accumulated errors, inside control-flow branches too, then the
    culprit op (module docstring)."""
    clock = Budget(budget)
    found = Localization()
    settings = compiled.partition.settings
    precision = judged_precision(settings)
    top = WalkedGraph.of(compiled.graph_module)
    walk = _Walk(rtol, atol, clock, found, settings)
    state = snapshot_state(top.gm)
    try:
        walk.graph(top, flat_inputs, flat_inputs)
    finally:
        restore_state(top.gm, state)
    found.segments = [check for check, _ in walk.checked]
    failing = next(((check, graph) for check, graph in walk.checked if not check.local_passed), None)
    reference = failing is not None
    if failing is None and precision == "fp32":  # no converter error: is some op ill-conditioned (beyond the tolerances)?
        failing = next(((check, graph) for check, graph in walk.checked if not check.local_within_tolerances), None)
    if failing is not None:
        check, graph = failing
        found.culprit_segment, found.culprit_where, found.culprit_graph = check.index, graph.where, graph
        try:
            found.culprit = _first_diverging_op(
                graph, check.index, graph.partition.segments[check.index], backend, rtol, atol, clock, found, reference,
                settings)
        except Exception as error:  # noqa: BLE001 - a localization that breaks must not hide the failure it explains
            found.notes.append(f"the culprit op could not be found: {type(error).__name__}: {error}")
    if precision != "fp32":  # issue 43: the sub-engines are the engines' precision, judged by its one judge
        rounding = "with TF32 (matmul and convolution inputs rounded to 10 mantissa bits)" if precision == "tf32" else (
            f"in {precision} (with the compiled fp32_nodes, use_fp32_acc and autocast)")
        found.notes.insert(0, (
            f"the engines run {rounding}, and so were this localization's sub-engines built; each segment and sub-engine "
            f"is judged as verify judges {precision}: against float64, eager in {precision} its yardstick, within "
            f"{precision}'s rounding over its depth. The accumulated errors are measured by the tolerances alone"))
    found.cut_short = clock.cut_short
    found.seconds = clock.elapsed
    return found


def localized(
    compiled: Any, input_set: Sequence[Any], kwargs: Mapping[str, Any], backend: str, rtol: float | None,
    atol: float | None, budget: float,
) -> Localization:
    """``localize`` on one of ``verify``'s input sets (the model's inputs, flattened here as the lowered graph takes
    them; the given values are not changed), or a ``Localization`` holding only why it could not be: localizing
    explains a failure, and must never replace it."""
    try:
        flat = flattened(compiled.partition.graph_module, cloned(tuple(input_set)), cloned(dict(kwargs)))
        return localize(compiled, flat, backend, rtol, atol, budget)
    except Exception as error:  # noqa: BLE001 - localizing explains a failure; it must never replace it
        return Localization(notes=[f"the mismatch could not be localized: {type(error).__name__}: {error}"])


@dataclass
class WalkedGraph:
    """One graph as the compiled module runs it, for one call: its partition (the lowered graph, or a control-flow
    branch's own copy, which compile partitioned on its own), the engine of each TensorRT segment, the stitched
    module of each of its branches (what the compiled module calls in their place), and, once walked, eager's value
    and the compiled module's value of its nodes on that call. ``where`` names it in the report ("" for the lowered
    graph; "branch true_graph_0 of cond (node cond)", "the body of while_loop (node while_loop), iteration 2").
    ``Localization.culprit_graph`` is the one the culprit is in: ``reduce`` reduces a branch's mismatch on it."""

    partition: Partition
    engines: dict[int, Engine]
    branches: dict[str, torch.fx.GraphModule]
    where: str = ""
    eager: Values = field(default_factory=dict)
    upstream: Values = field(default_factory=dict)

    @classmethod
    def of(cls, stitched: torch.fx.GraphModule, where: str = "") -> WalkedGraph:
        """The graph ``stitched`` (``runtime.stitch``'s module: the compiled module's, or a branch's) runs."""
        engines = {child.segment_index: child.engine for child in stitched.children() if isinstance(child, EngineModule)}
        return cls(stitched.partition, engines, dict(stitched_branches(stitched)), where)

    @property
    def gm(self) -> torch.fx.GraphModule:
        return self.partition.graph_module


class _Walk:
    """A compiled module's graphs walked in dataflow order on one call, control-flow branches inside at the place of
    the node that calls them: every TensorRT segment checked on eager's values at its inputs (local) and on the
    compiled module's (accumulated), ``checked`` in that order with the graph it lies in.

    The compiled module's values are computed as it computes them: a segment's engine on its upstream values, Torch
    nodes in PyTorch, and a control-flow node calling the stitched modules of its branches, so that the error an
    engine inside a branch makes reaches everything after the node. A branch that runs engines is then walked
    itself, on the values it is called with: the branch the predicate takes, and every iteration of a loop's
    condition and body until the first whose engines fail locally (``_while_loop``)."""

    def __init__(self, rtol: float | None, atol: float | None, clock: Budget, found: Localization, settings: Any = None) -> None:
        self.rtol, self.atol, self.clock, self.found, self.settings = rtol, atol, clock, found, settings
        self.checked: list[tuple[SegmentCheck, WalkedGraph]] = []

    def graph(self, graph: WalkedGraph, eager_inputs: Sequence[Any], compiled_inputs: Sequence[Any]) -> tuple[Any, Any]:
        """Walk ``graph`` on its placeholders' values, eager's and the compiled module's: its outputs, both ways."""
        gm = graph.gm
        placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
        graph.eager = record_eager(gm, eager_inputs)
        graph.upstream = dict(zip(placeholders, compiled_inputs))
        for index, segment in enumerate(graph.partition.segments):
            self._fill(graph, segment.inputs)
            if segment.target is Target.TENSORRT and index in graph.engines:
                check = _segment_check(
                    gm, index, segment, graph.engines[index], graph.eager, graph.upstream, self.rtol, self.atol, self.settings)
                check.where = graph.where
                self.checked.append((check, graph))
                continue
            self._run(graph, [*segment.constants, *segment.nodes])
            for node in segment.nodes:
                if is_control_flow(node):
                    self._control_flow(graph, node)
        output = next(node for node in reversed(gm.graph.nodes) if node.op == "output")
        self._fill(graph, output.all_input_nodes)
        return (torch.fx.node.map_arg(output.args[0], graph.eager.__getitem__),
                torch.fx.node.map_arg(output.args[0], graph.upstream.__getitem__))

    def _run(self, graph: WalkedGraph, nodes: Sequence[torch.fx.Node]) -> None:
        """``nodes`` run in PyTorch on the compiled module's values, a branch read as the compiled module reads it:
        its stitched module, engines and all (eager's lowered branch would hide their error)."""
        stitched = {node for node in nodes if node.op == "get_attr" and node.target in graph.branches}
        graph.upstream.update((node, graph.branches[node.target]) for node in stitched)
        run_nodes(graph.gm, [node for node in nodes if node not in stitched], graph.upstream)

    def _fill(self, graph: WalkedGraph, needed: Iterable[torch.fx.Node]) -> None:
        """Compute, in PyTorch, any value ``needed`` that no segment produced (a getitem at a boundary, a constant)."""
        for node in needed:
            if node not in graph.upstream:
                self._fill(graph, node.all_input_nodes)
                self._run(graph, [node])

    def _control_flow(self, graph: WalkedGraph, node: torch.fx.Node) -> None:
        """Go inside ``node``'s branches when any runs engines, each walked on the values it is called with."""
        if not any(_runs_engines(graph.branches.get(name)) for name in branch_names(node)):
            return
        operands = [value for value, _ in bound_operands(node)]
        eager = [graph.eager[value] if isinstance(value, torch.fx.Node) else value for value in operands]
        compiled = [graph.upstream[value] if isinstance(value, torch.fx.Node) else value for value in operands]
        if node.target is torch.ops.higher_order.while_loop:
            self._while_loop(graph, node, eager, compiled)
        elif node.target is torch.ops.higher_order.cond:
            self._cond(graph, node, eager, compiled)
        else:
            self.found.notes.append(f"localization does not go inside the branches of {node.name} ({node.target}): "
                                    "their engines were not checked")

    def _branch(self, graph: WalkedGraph, name: str, where: str, eager: Sequence[Any], compiled: Sequence[Any]) -> tuple[Any, Any]:
        """Branch ``name`` of ``graph`` walked on these values: its outputs, eager's and the compiled module's."""
        inside = where if not graph.where else f"{where}, in {graph.where}"
        return self.graph(WalkedGraph.of(graph.branches[name], inside), eager, compiled)

    def _cond(self, graph: WalkedGraph, node: torch.fx.Node, eager: Sequence[Any], compiled: Sequence[Any]) -> None:
        """The branch eager's predicate takes, walked on the cond's operands."""
        predicate = node.args[0]
        taken = bool(graph.eager[predicate] if isinstance(predicate, torch.fx.Node) else predicate)
        names = branch_names(node)
        name, other = (names[0], names[1]) if taken else (names[1], names[0])
        if isinstance(predicate, torch.fx.Node) and bool(graph.upstream[predicate]) != taken:
            self.found.notes.append(
                f"the compiled module's predicate of {node.name} differs from eager's: it runs {other}, eager {name}; "
                f"the error before {node.name} changes the branch taken, and {name} is checked as eager takes it")
        if _runs_engines(graph.branches.get(name)):
            self._branch(graph, name, f"branch {name} of {_op_name(node)} (node {node.name})", eager, compiled)

    def _while_loop(self, graph: WalkedGraph, node: torch.fx.Node, eager: Sequence[Any], compiled: Sequence[Any]) -> None:
        """The loop run iteration by iteration, eager's and the compiled module's carried values side by side, its
        condition and body walked on each iteration's. The checks reported are those of the first iteration whose
        engines fail locally (an error there is the culprit, whatever later iterations do with it), else those of
        the iteration furthest from eager (outside the tolerances, then the largest accumulated error)."""
        cond_name, body_name = branch_names(node)
        carried = sum(not fixed for _, fixed in bound_operands(node))
        eager_carried, eager_fixed = list(eager[:carried]), list(eager[carried:])
        compiled_carried, compiled_fixed = list(compiled[:carried]), list(compiled[carried:])
        op, outer = _op_name(node), self.checked
        best: list[tuple[SegmentCheck, WalkedGraph]] = []
        best_rank: tuple[bool, bool, float] | None = None
        iteration, differs = 0, False
        while True:
            iteration += 1
            if iteration > 1 and self.clock.spent:
                self.found.notes.append(f"{node.name} was checked on its first {iteration - 1} iteration(s) only: "
                                        "the time budget ran out")
                break
            self.checked = []
            try:
                where = f"of {op} (node {node.name}), iteration {iteration}"
                go_on, compiled_go_on = self._branch(
                    graph, cond_name, f"the condition {where}", eager_carried + eager_fixed, compiled_carried + compiled_fixed)
                if bool(go_on) != bool(compiled_go_on) and not differs:
                    differs = True
                    self.found.notes.append(
                        f"the compiled module's loop {node.name} {'stops' if go_on else 'goes on'} at iteration {iteration}, "
                        "eager's does not: the loop is checked for as many iterations as eager runs")
                if bool(go_on):
                    eager_carried, compiled_carried = map(list, self._branch(
                        graph, body_name, f"the body {where}", eager_carried + eager_fixed, compiled_carried + compiled_fixed))
            finally:
                run, self.checked = self.checked, outer
            rank = (any(not check.local_passed for check, _ in run), any(not check.local_within_tolerances for check, _ in run),
                    max((check.accumulated for check, _ in run), default=0.0))
            if best_rank is None or rank > best_rank:
                best, best_rank = run, rank
            if not bool(go_on) or rank[0]:
                break
        self.checked.extend(best)


def _in(where: str) -> str:
    """`` in <where>``, to follow a segment's name; nothing for the lowered graph."""
    return f" in {where}" if where else ""


def _runs_engines(module: torch.nn.Module | None) -> bool:
    """Whether ``module`` (a stitched branch) runs an engine, in itself or in a branch of its own."""
    return module is not None and any(isinstance(child, EngineModule) for child in module.modules())


def _op_name(node: torch.fx.Node) -> str:
    """A control-flow node's op as the model wrote it: ``cond``, ``while_loop``."""
    return getattr(node.target, "__name__", str(node.target))


def _segment_check(
    gm: torch.fx.GraphModule, index: int, segment: Segment, engine: Engine, eager: Values, upstream: Values,
    rtol: float | None, atol: float | None, settings: Any = None,
) -> SegmentCheck:
    expected = [eager[node] for node in segment.outputs]
    fed = [_dense(eager[node]) for node in segment.inputs]
    with torch.no_grad():
        local = list(engine(*fed))
        accumulated = list(engine(*[_dense(upstream[node]) for node in segment.inputs]))
    upstream.update(zip(segment.outputs, accumulated))
    local_check = compare_outputs(expected, local, rtol=rtol, atol=atol)
    within = passed = local_check.passed
    precision = judged_precision(settings)
    if precision != "fp32":  # the engine at its precision, judged as verify judges it (the tolerances where it cannot)
        judge_at_precision(local_check, segment_module(gm, segment), tuple(fed), {}, local, precision)
        passed = local_check.passed  # (unchanged where nothing could be judged)
    elif not passed:
        passed = judge(expected, local, float64_of(segment_module(gm, segment), fed), rtol, atol).passed
    accumulated_check = compare_outputs(expected, accumulated, rtol=rtol, atol=atol)
    return SegmentCheck(
        index, len(segment.nodes), segment.nodes[0].name, segment.nodes[-1].name,
        _largest(local_check), _largest(accumulated_check), passed, accumulated_check.passed, within,
        precision=precision,
    )


def _largest(comparison: Comparison) -> float:
    return max((output.max_abs for output in comparison.outputs), default=0.0)


def _first_diverging_op(
    graph: WalkedGraph, index: int, segment: Segment, backend: str, rtol: float | None, atol: float | None, clock: Budget,
    found: Localization, reference: bool = True, settings: Any = None,
) -> Culprit | None:
    """Bisect over prefixes of ``segment``'s nodes (segment ``index`` of ``graph``, walked: its values recorded) with
    sub-engines fed eager's values: the smallest failing prefix ends at the first op whose own error fails; then
    that op alone (isolation) and against float64."""
    gm, eager = graph.gm, graph.eager
    nodes = normalised(segment.nodes)
    handed_on = {node for node in segment.outputs if isinstance(eager.get(node), torch.Tensor) and not floating(eager[node])}

    def compared(chosen: Sequence[torch.fx.Node]) -> list[torch.fx.Node] | None:
        """What a sub-engine of ``chosen`` is judged on: its floating values (``check_nodes``' default), and the
        segment's own outputs that are not floating (a loop's condition, a count), which the segment's local check
        compared: a wrong predicate shows in no floating value inside its segment."""
        if not handed_on:
            return None
        return [node for node in normalised(chosen) if floating(eager.get(node)) or node in handed_on]

    def fails(count: int) -> NodeCheck:
        found.sub_engines += 1
        check = check_nodes(gm, nodes[:count], eager, backend, rtol, atol, outputs=compared(nodes[:count]), reference=reference,
                            settings=settings)
        _unjudged(found, check)
        return check

    whole = fails(len(nodes))
    if not whole.failed:
        found.notes.append(
            f"segment @{index}{_in(graph.where)} fails as one engine but not as a sub-engine with every value an output: the error "
            "comes from how the engine runs its ops together (a fusion), not from one converter")
        return None
    first = whole.first_failure()  # every intermediate output compared at once: where the bisection should end
    low, high, last = 0, len(nodes), whole  # fails(high) fails; fails(low), nothing, passes
    if first is not None and not clock.spent:
        # The whole sub-engine says no output before ``first`` fails; confirm that the prefix ending at it fails on
        # its own (nothing after it involved), comparing only its output, which is cheap.
        position = nodes.index(first) + 1
        found.sub_engines += 1
        check = check_nodes(gm, nodes[:position], eager, backend, rtol, atol, outputs=[first], reference=reference,
                            settings=settings)
        _unjudged(found, check)
        if check.failed:
            low, high, last = position - 1, position, check
        else:  # it passes without what follows it: the failure needs later nodes, bisect what lies after it
            low = position
    while high - low > 1 and not clock.spent:
        middle = (low + high) // 2
        check = fails(middle)
        if check.failed:
            high, last = middle, check
        else:
            low = middle
    if high - low > 1 and first is not None:
        found.notes.append("the bisection was cut short: the culprit is the first failing output of the whole segment")
        node = first
    else:
        node = nodes[high - 1]
    while is_getitem(node) and node.args[0] in nodes:  # a getitem is its producer's output
        node = node.args[0]
    return _culprit(graph, index, node, backend, rtol, atol, last, found, reference, compared([node]), settings)


def _unjudged(found: Localization, check: NodeCheck) -> None:
    """Below fp32, a sub-engine eager could not run in float64 or at that precision: noted once, the tolerances judged."""
    note = f"a sub-engine had no float64 or reduced-precision eager reference ({check.unjudged}): the tolerances judged it"
    if check.unjudged and note not in found.notes:
        found.notes.append(note)


def _culprit(
    graph: WalkedGraph, index: int, node: torch.fx.Node, backend: str, rtol: float | None, atol: float | None,
    prefix: NodeCheck, found: Localization, reference: bool = True, outputs: Sequence[torch.fx.Node] | None = None,
    settings: Any = None,
) -> Culprit:
    gm, eager = graph.gm, graph.eager
    precision = judged_precision(settings)
    found.sub_engines += 1
    alone = check_nodes(gm, [node], eager, backend, rtol, atol, outputs=outputs, reference=reference, settings=settings)
    _unjudged(found, alone)
    target = node.args[0] if is_getitem(node) else node
    output = alone.of(node) or (alone.comparison.outputs[0] if alone.comparison and alone.comparison.outputs else None)
    converter = converter_of(node.target)
    name = "-" if converter is None else f"{converter.fn.__module__}.{converter.fn.__qualname__}"
    culprit = Culprit(
        node=node.name, op=str(target.target), converter=name, segment=index,
        local_error=output.max_abs if output else math.nan, local_rel=output.max_rel if output else math.nan,
        accumulated_error=_accumulated(prefix, node, graph.upstream, eager),
        inputs=[ValueRange.of(value.name, eager.get(value)) for value in node.all_input_nodes if value.op != "get_attr"],
        survives_isolation=alone.failed,
        message=alone.error,
        where=graph.where,
        source=node_source(target),
        precision=precision,
    )
    # Against float64 where the op diverged: at the end of the prefix (its inputs as the engine computes them), so
    # that an op ill-conditioned on what its segment feeds it is told from a wrong one; alone where no prefix ran.
    measured = prefix if prefix.engine is not None and _outputs_of(node, prefix) else alone
    if measured.engine is not None and precision != "fp32":  # the reduced-precision judge measured both already
        culprit.op_float64_error, culprit.eager_error = _precision_errors(node, measured)
    elif measured.engine is not None:
        culprit.op_float64_error, culprit.eager_error = _float64_errors(gm, node, measured, eager)
    return culprit


def _precision_errors(node: torch.fx.Node, check: NodeCheck) -> tuple[float | None, float | None]:
    """Below fp32: the sub-engine's and eager-at-that-precision's errors against float64 at ``node``, as the
    reduced-precision judge measured them on ``check`` (``check_nodes``); for a multi-output op, the output
    furthest beyond eager's own error. (None, None) where nothing was judged."""
    judged = [check.of(output) for output in _outputs_of(node, check)]
    pairs = [(output.reference_error, output.eager_reference_error) for output in judged
             if output is not None and output.reference_error is not None and output.eager_reference_error is not None]
    if not pairs:
        return None, None
    return _furthest_beyond_eager(pairs)


def _furthest_beyond_eager(pairs: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Of (engine's error, eager's error) pairs against float64, the one whose engine is furthest beyond eager (the
    largest ratio, then the largest error): what speaks for a multi-output op."""
    return max(pairs, key=lambda pair: (pair[0] / pair[1] if pair[1] else (math.inf if pair[0] else 0.0), pair[0]))


def _outputs_of(node: torch.fx.Node, check: NodeCheck) -> list[torch.fx.Node]:
    """Where ``check`` measured ``node``: the node itself when it is an output, else, for a multi-output op
    (``native_layer_norm``'s ``(out, mean, rstd)``, max-pool with indices: a tuple is no engine output), its
    ``getitem``s that are (issue 43, item 5: without them such a culprit had no float64 reference)."""
    if node in check.outputs:
        return [node]
    return [output for output in check.outputs if is_getitem(output) and output.args[0] is node]


def _accumulated(prefix: NodeCheck, node: torch.fx.Node, upstream: Values, eager: Values) -> float:
    """The prefix sub-engine fed the compiled module's values at its inputs: its error at ``node`` (the largest over
    the outputs of a multi-output op)."""
    at = _outputs_of(node, prefix)
    if prefix.engine is None or not at or any(value not in upstream for value in prefix.inputs):
        return math.nan
    with torch.no_grad():
        outputs = prefix.engine(*[_dense(upstream[value]) for value in prefix.inputs])
    return max(compare_outputs(eager[output], outputs[prefix.outputs.index(output)]).outputs[0].max_abs for output in at)


def _float64_errors(gm: torch.fx.GraphModule, node: torch.fx.Node, alone: NodeCheck, eager: Values) -> tuple[float | None, float | None]:
    """The engine's and eager's errors at ``node`` against float64, the three computing ``alone``'s nodes from eager's
    values at its inputs: an engine far further from float64 than eager is wrong; as far, the op is ill-conditioned.
    A multi-output op is measured at each floating output it hands on, and the one furthest beyond eager's own
    error (the largest ratio) speaks for it."""
    at = [output for output in _outputs_of(node, alone)
          if isinstance(eager.get(output), torch.Tensor) and eager[output].is_floating_point()]
    if not at:
        return None, None
    module, inputs = subgraph_module(gm, alone.nodes, eager, alone.outputs)
    fed = [_dense(eager[value]) for value in inputs]
    exact = float64_of(module, fed)()
    if exact is None:
        return None, None
    with torch.no_grad():
        actual = alone.engine(*fed)
    errors = []
    for output in at:
        position = alone.outputs.index(output)
        wide = exact[position].to(torch.float64)
        if wide.numel() == 0:
            errors.append((0.0, 0.0))
        else:
            errors.append((_max_error(actual[position], wide), _max_error(eager[output], wide)))
    return _furthest_beyond_eager(errors)


def _max_error(value: torch.Tensor, exact: torch.Tensor) -> float:
    error = (value.detach().to(torch.float64) - exact).abs()
    error = error[error.isfinite()]
    return float(error.max()) if error.numel() else 0.0
