"""Localization: which engine, and which op inside it, makes a compiled module's outputs differ from eager's.

A failing comparison says *that* outputs differ; on a model of thousands of nodes the culprit is one op among
them. Error found at an output is accumulated: every op after the culprit carries it, so the first op whose
output differs is not necessarily wrong, and an op whose error a ``relu`` or a ``max`` hides later still is.
What tells a wrong op from a victim is its *local* error: the op run on eager's own values at its inputs.

``localize`` records eager's value of every node of the lowered graph on the failing input set, then:

1. per TensorRT segment, runs its engine on eager's values at its inputs (its local error) and on the compiled
   module's upstream values (its accumulated error), inside control-flow branches too (``walk.Walk``); the culprit
   segment is the first, in dataflow order, whose local error fails the check;
2. inside it, bisects over prefixes of its nodes with *sub-engines* (``probes.check_nodes``), so the engine under
   test is never the answer's instrument; the first prefix that fails ends at the first diverging op;
3. runs that op alone (isolation), and against float64 (``reference.float64_outputs`` of the op on the same
   inputs), which tells "this converter is wrong" (the engine is much further from float64 than eager) from
   "this op is ill-conditioned on these inputs" (eager is as far from float64 as the engine).

Everything runs within a time budget (``probes.Budget``); a localization the budget cut short says so. The report
it fills is ``findings``'.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch
import torch.fx

from trtcheck.conversion import get as converter_of
from trtcheck.dtypes import PRECISION_DTYPES
from trtcheck.lowering.graph import flat_inputs as flattened
from trtcheck.lowering.graph import past_range_constant
from trtcheck.names import node_source
from trtcheck.partitioning.nodes import is_getitem
from trtcheck.partitioning.partition import Segment
from trtcheck.values import cloned
from trtcheck.verification.equivalence import compare_outputs
from trtcheck.verification.findings import Culprit, Localization, ValueRange, in_where
from trtcheck.verification.judge import Distance, Judge
from trtcheck.verification.probes import Budget, NodeCheck, check_nodes, compared, dense, floating, normalised, subgraph_module
from trtcheck.verification.recording import Values
from trtcheck.verification.state import restore_state, snapshot_state
from trtcheck.verification.walk import Walk, WalkedGraph


@torch.no_grad()  # recorded values are views of parameters; autograd would refuse them once the state is restored
def localize(
    compiled: Any,
    flat_inputs: Sequence[Any],
    backend: str,
    rtol: float | None = None,
    atol: float | None = None,
    budget: float | None = 60.0,
    *,
    judge: Judge | None = None,
) -> Localization:
    """Localize the mismatch of ``compiled`` (a ``CompiledModule``) on ``flat_inputs`` (its lowered graph's
    placeholders' values): per-segment local and accumulated errors, inside control-flow branches too, then the
    culprit op (module docstring). ``judge``: the request's (None: ``Judge.of`` the compiled settings, ``rtol``
    and ``atol``), which every segment, sub-engine and the culprit's diagnosis are judged by."""
    clock = Budget(budget)
    found = Localization()
    settings = compiled.partition.settings
    judge = Judge.of_partition(compiled.partition, rtol, atol) if judge is None else judge
    top = WalkedGraph.of(compiled.graph_module)
    walk = Walk(judge, clock, found)
    state = snapshot_state(top.gm)
    try:
        walk.graph(top, flat_inputs, flat_inputs)
    finally:
        restore_state(top.gm, state)
    found.segments = [check for check, _ in walk.checked]
    failing = next(((check, graph) for check, graph in walk.checked if not check.local_passed), None)
    if failing is None and not judge.judges_every_output:  # no converter error: an op ill-conditioned beyond the tolerances?
        failing = next(((check, graph) for check, graph in walk.checked if not check.local_within_tolerances), None)
        judge = replace(judge, reference=False)  # its sub-engines judged by the tolerances alone: where they fail
    if failing is not None:
        check, graph = failing
        found.culprit_segment, found.culprit_where, found.culprit_graph = check.index, graph.where, graph
        try:
            found.culprit = _first_diverging_op(
                graph, check.index, graph.partition.segments[check.index], backend, judge, clock, found, settings)
        except Exception as error:  # noqa: BLE001 - a localization that breaks must not hide the failure it explains
            found.notes.append(f"the culprit op could not be found: {type(error).__name__}: {error}")
    if judge.engines_note:
        found.notes.insert(0, judge.engines_note)
    found.cut_short = clock.cut_short
    found.seconds = clock.elapsed
    return found


def localized(
    compiled: Any, input_set: Sequence[Any], kwargs: Mapping[str, Any], backend: str, judge: Judge, budget: float,
) -> Localization:
    """``localize`` on one of ``verify``'s input sets (the model's inputs, flattened here as the lowered graph takes
    them; the given values are not changed), or a ``Localization`` holding only why it could not be: localizing
    explains a failure, and must never replace it."""
    try:
        flat = flattened(compiled.partition.graph_module, cloned(tuple(input_set)), cloned(dict(kwargs)))
        return localize(compiled, flat, backend, budget=budget, judge=judge)
    except Exception as error:  # noqa: BLE001 - localizing explains a failure; it must never replace it
        return Localization(notes=[f"the mismatch could not be localized: {type(error).__name__}: {error}"])


def _first_diverging_op(
    graph: WalkedGraph, index: int, segment: Segment, backend: str, judge: Judge, clock: Budget, found: Localization,
    settings: Any = None,
) -> Culprit | None:
    """Bisect over prefixes of ``segment``'s nodes (segment ``index`` of ``graph``, walked: its values recorded) with
    sub-engines fed eager's values: the smallest failing prefix ends at the first op whose own error fails; then
    that op alone (isolation) and against float64."""
    gm, eager = graph.gm, graph.eager
    nodes = normalised(segment.nodes)
    handed_on = {node for node in segment.outputs if isinstance(eager.get(node), torch.Tensor) and not compared(eager[node])}

    def judged_on(chosen: Sequence[torch.fx.Node]) -> list[torch.fx.Node] | None:
        """What a sub-engine of ``chosen`` is judged on: its values of numbers (``check_nodes``' default), and the
        segment's own outputs of other types, which the segment's local check compared."""
        if not handed_on:
            return None
        return [node for node in normalised(chosen) if compared(eager.get(node)) or node in handed_on]

    def fails(count: int) -> NodeCheck:
        found.sub_engines += 1
        check = check_nodes(gm, nodes[:count], eager, backend, judge, outputs=judged_on(nodes[:count]), settings=settings)
        _unjudged(found, check)
        return check

    whole = fails(len(nodes))
    if not whole.failed:
        found.notes.append(
            f"segment @{index}{in_where(graph.where)} fails as one engine but not as a sub-engine with every value an output: the error "
            "comes from how the engine runs its ops together (a fusion), not from one converter")
        return None
    first = whole.first_failure()  # every intermediate output compared at once: where the bisection should end
    low, high, last = 0, len(nodes), whole  # fails(high) fails; fails(low), nothing, passes
    if first is not None and not clock.spent:
        # The whole sub-engine says no output before ``first`` fails; confirm that the prefix ending at it fails on
        # its own (nothing after it involved), comparing only its output, which is cheap.
        position = nodes.index(first) + 1
        found.sub_engines += 1
        check = check_nodes(gm, nodes[:position], eager, backend, judge, outputs=[first], settings=settings)
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
    return _culprit(graph, index, node, backend, judge, last, found, judged_on([node]), settings)


def _unjudged(found: Localization, check: NodeCheck) -> None:
    """A sub-engine whose references could not run: noted once, the tolerances judged it."""
    note = f"a sub-engine had {check.unjudged}: the tolerances judged it"
    if check.unjudged and note not in found.notes:
        found.notes.append(note)


def _culprit(
    graph: WalkedGraph, index: int, node: torch.fx.Node, backend: str, judge: Judge, prefix: NodeCheck, found: Localization,
    outputs: Sequence[torch.fx.Node] | None = None, settings: Any = None,
) -> Culprit:
    gm, eager = graph.gm, graph.eager
    found.sub_engines += 1
    alone = check_nodes(gm, [node], eager, backend, judge, outputs=outputs, settings=settings)
    _unjudged(found, alone)
    target = node.args[0] if is_getitem(node) else node
    output = alone.of(node) or (alone.comparison.outputs[0] if alone.comparison and alone.comparison.outputs else None)
    converter = converter_of(node.target)
    name = "-" if converter is None else f"{converter.fn.__module__}.{converter.fn.__qualname__}"
    # Against float64 where the op diverged: at the end of the prefix (its inputs as the engine computes them), so
    # that an op ill-conditioned on what its segment feeds it is told from a wrong one; alone where no prefix ran.
    measured = prefix if prefix.engine is not None and _outputs_of(node, prefix) else alone
    return Culprit(
        node=node.name, op=str(target.target), converter=name, segment=index,
        local_error=output.max_abs if output else math.nan, local_rel=output.max_rel if output else math.nan,
        accumulated_error=_accumulated(prefix, node, graph.upstream, eager),
        inputs=[ValueRange.of(value.name, eager.get(value)) for value in node.all_input_nodes if value.op != "get_attr"],
        survives_isolation=alone.failed,
        distance=_distance(gm, node, measured, eager, judge) if measured.engine is not None else None,
        judge=judge,
        message=alone.error,
        where=graph.where,
        source=node_source(target),
        exact=not any(floating(eager.get(value)) for value in _outputs_of(node, alone)) and bool(_outputs_of(node, alone)),
        clamped=_clamped(target, judge),
    )


def _distance(gm: torch.fx.GraphModule, node: torch.fx.Node, check: NodeCheck, eager: Values, judge: Judge) -> Distance | None:
    """The op's distance from float64 (``Judge.distances``): ``check``'s nodes computed from eager's values at its
    inputs by its engine, by float64 and by the judge's yardstick. A multi-output op is measured at each floating
    output it hands on, and the one furthest beyond eager's own error (the largest ratio) speaks for it."""
    at = [output for output in _outputs_of(node, check) if floating(eager.get(output))]
    if not at:
        return None
    module, inputs = subgraph_module(gm, check.nodes, eager, check.outputs)
    fed = [dense(eager[value]) for value in inputs]
    with torch.no_grad():
        actual = list(check.engine(*fed))
    distances = judge.distances(module, fed, [eager[output] for output in check.outputs], actual)
    measured = [distances[check.outputs.index(output)] for output in at]
    if any(distance is None for distance in measured):
        return None
    return max(measured, key=lambda distance: (distance.ratio, distance.compiled))


def _clamped(node: torch.fx.Node, judge: Judge) -> tuple[float, list[str]] | None:
    """The constant past the judged precision's range ``node`` computes with (``lowering.graph.past_range_constant``)."""
    return past_range_constant(node, torch.finfo(PRECISION_DTYPES[judge.precision]).max) if judge.narrows_range else None


def _outputs_of(node: torch.fx.Node, check: NodeCheck) -> list[torch.fx.Node]:
    """Where ``check`` measured ``node``: the node itself when it is an output, else, for a multi-output op
    (``native_layer_norm``'s ``(out, mean, rstd)``, max-pool with indices: a tuple is no engine output), its
    ``getitem``s that are (a multi-output op measured through them has a float64 reference too)."""
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
        outputs = prefix.engine(*[dense(upstream[value]) for value in prefix.inputs])
    return max(compare_outputs(eager[output], outputs[prefix.outputs.index(output)]).outputs[0].max_abs for output in at)
