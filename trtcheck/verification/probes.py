"""Localization's sub-engines and their checks: any set of nodes cut out, built as an engine, fed recorded values and
judged as ``verify`` judges (``check_nodes``), and the time ``Budget`` every search over them runs within.

Their own room because three searches use them, not one: ``localize`` (the culprit op), ``reduce`` (delta
debugging over node sets) and ``fp32_search`` (the budget). A sub-engine is what compile would build of its nodes:
cut by ``partitioning.extract`` (the function compile converts segments from) and converted and built by
``compiler.engine_build.build_graph_engine``, so localization has no conversion or build path of its own. A check
fails as ``verify``'s does, by the request's one ``judge.Judge``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from trtcheck.compiler.engine_build import build_graph_engine
from trtcheck.engines import Engine, TensorSpec
from trtcheck.partitioning.extract import nodes_module
from trtcheck.partitioning.nodes import is_getitem
from trtcheck.verification.equivalence import Comparison, OutputComparison
from trtcheck.verification.judge import Judge
from trtcheck.verification.recording import Values
from trtcheck.verification.reference import float64_outputs


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
    node of the set whose recorded value in ``values`` is a Tensor of numbers, ``compared``)."""
    if outputs is None:
        outputs = [node for node in nodes if compared(values.get(node))]
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
    unjudged: str = ""  # why a reference the judge needed could not run (the tolerances decided)

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
    judge: Judge | None = None,
    outputs: Sequence[torch.fx.Node] | None = None,
    settings: Any = None,
) -> NodeCheck:
    """Cut ``nodes`` out of ``gm``, build their sub-engine, feed it ``values`` (eager's, recorded) at the cut, and
    compare every output with ``values``: does this set of nodes, alone, fail the check? ``judge``: the request's
    (``Judge.judge_engine``; None: ``Judge.of(settings)``). ``settings``: the compiled partition's, which the
    sub-engine is built with as compile built the engine it stands for (``fp32_nodes`` match the cut's nodes, which
    keep their names)."""
    judge = Judge.of(settings) if judge is None else judge
    chosen = normalised(nodes)
    check = NodeCheck(chosen, [])
    if not chosen:
        return check
    outputs = list(outputs) if outputs is not None else [n for n in chosen if compared(values.get(n))]
    module, inputs = subgraph_module(gm, chosen, values, outputs)
    check.inputs = inputs
    check.outputs = outputs
    if not check.outputs:
        return check
    fed = [dense(values[node]) for node in inputs]
    expected = [values[node] for node in check.outputs]
    try:
        check.engine = engine_of(module, fed, expected, backend, settings)
        with torch.no_grad():
            actual = list(check.engine(*fed))
    except Exception as error:  # noqa: BLE001 - a set that does not convert or run fails, and says why
        check.error = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
        return check
    check.comparison, check.unjudged = judge.judge_engine(module, fed, expected, actual, first_failure=True)
    return check


def floating(value: Any) -> bool:
    """A floating-point Tensor: what has a float64 reference and a distance from it."""
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def compared(value: Any) -> bool:
    """What a sub-engine is judged on: floating Tensors, and integer and boolean ones, which must match eager exactly
    (``equivalence``: nothing to round). A wrong index first shows in the integers, so the op that makes it is the
    first failing output; compared only through the floats computed from it, the culprit was its first reader (an
    embedding "wrong" though it passed alone)."""
    return isinstance(value, torch.Tensor) and (value.is_floating_point() or value.dtype in _EXACT)


_EXACT = frozenset({torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64})


def dense(value: Any) -> Any:
    return value.contiguous() if isinstance(value, torch.Tensor) else value
