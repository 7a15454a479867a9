"""A quantized model's quantizers: each checked alone against TensorRT's arithmetic, and what each costs the model.

A model's outputs can hide a wrong quantizer (one flipped FP8 code moves an output as much as a scale 2% off), and
a right one can look wrong there (an engine's float32 arithmetic lands an input near a rounding tie on its other
side). So every quantizer compiled into an engine is also built alone (``probes.engine_of``, compile's own path), fed
the very input eager gave it, and its output measured in its own quantization steps from eager's (``qdq.steps_apart``):
a faithful quantizer gives what ``trtcheck.qdq`` gives, all but a tie here and there (``qdq.TIE_FRACTION``), and none
more than one step away. The
check names the quantizer by its node, its ModelOpt module path and source line, as a culprit is named.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch.utils import _pytree as pytree

from trtcheck import qdq
from trtcheck.lowering.graph import constant_tensor, flat_inputs
from trtcheck.lowering.quantized import is_quantize, quantizer_call
from trtcheck.partitioning.nodes import any_control_flow
from trtcheck.partitioning.reasons import Target
from trtcheck.provenance import node_source
from trtcheck.values import cloned
from trtcheck.verification.probes import dense, engine_of, subgraph_module
from trtcheck.verification.recording import Values, record_eager
from trtcheck.verification.reference import Float64Model


@dataclass(frozen=True)
class QuantizerCheck:
    """One quantizer (``node``, a call of one of trtcheck's quantize ops) built alone and compared code by code: ``elements``
    codes, ``mismatched`` of them differing, by at most ``steps`` (quantization steps); ``error`` where no engine
    could be built or run. ``where`` is its module path and source line (``provenance.node_source``)."""

    node: str
    fmt: str
    where: str
    elements: int = 0
    mismatched: int = 0
    steps: float = 0.0
    error: str = ""

    @property
    def passed(self) -> bool:
        return not self.error and qdq.within_ties(self.steps, self.mismatched, self.elements)

    @property
    def matched(self) -> float:
        """The share of codes the engine got exactly."""
        return 1.0 - self.mismatched / self.elements if self.elements else 1.0

    def __str__(self) -> str:
        head = f"quantizer {self.node} ({self.fmt}, from {self.where or 'a node trtcheck made'})"
        if self.error:
            return f"{head}: no engine of it alone: {self.error}"
        verdict = "as TensorRT computes it" if self.passed else "its converter is wrong (more than ties at one step)"
        return (f"{head}: {self.matched:.4%} of {self.elements} values match TensorRT's arithmetic on the same input, "
                f"{self.mismatched} differ, by up to {self.steps:.3g} step(s): {verdict}")


def _amax_chain(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The ops between a quantizer's amax buffer and the quantizer (ModelOpt's ``detach``, an ``alias``), in graph
    order: cut out with it, so that its engine reads the amax as the constant compile made it."""
    call = quantizer_call(node)
    chain, value = [], call.amax if call is not None else None
    while isinstance(value, torch.fx.Node) and value.op == "call_function":
        chain.append(value)
        value = value.args[0]
    return chain[::-1]


def converted_quantizers(compiled: Any) -> list[torch.fx.Node]:
    """The quantizers of a compiled module's lowered graph that run in an engine (TensorRT segments)."""
    partition = compiled.partition
    inside = {node for segment in partition.segments if segment.target is Target.TENSORRT for node in segment.nodes}
    return [node for node in partition.graph_module.graph.nodes if is_quantize(node) and node in inside]


@torch.no_grad()
def check_quantizers(gm: torch.fx.GraphModule, nodes: Sequence[torch.fx.Node], values: Values, backend: str,
                     settings: Any = None) -> list[QuantizerCheck]:
    """Each quantizer of ``nodes`` built alone as compile builds it, fed its input as eager recorded it in ``values``
    (``recording.record_eager``), its codes compared with eager's (module docstring)."""
    found = []
    for node in nodes:
        call = quantizer_call(node)
        fmt = call.fmt if call is not None else None
        amax = constant_tensor(call.amax) if call is not None else None
        name = fmt.name if fmt is not None else "?"
        if fmt is None or amax is None:
            found.append(QuantizerCheck(node.name, name, node_source(node), error="not a constant INT8, FP8 or NVFP4 quantizer"))
            continue
        module, inputs = subgraph_module(gm, [*_amax_chain(node), node], values, [node])
        fed = [dense(values[producer]) for producer in inputs]
        expected = values[node]
        try:
            actual = engine_of(module, fed, [expected], backend, settings)(*fed)[0]
        except Exception as error:  # noqa: BLE001 - a quantizer that does not build alone says why, and fails
            found.append(QuantizerCheck(node.name, name, node_source(node), error=f"{type(error).__name__}: {error}"))
            continue
        steps = qdq.steps_apart(actual, expected, amax, fmt)
        found.append(QuantizerCheck(node.name, name, node_source(node), steps.numel(), int((steps > qdq.APART).sum()),
                                    float(steps.max()) if steps.numel() else 0.0))
    return found


MAX_RANKED = 64
"""The most quantizers ranked by their cost: two float64 runs of the graph each."""


@dataclass(frozen=True)
class QuantizerCost:
    """What one quantizer costs: the loss of the model with it alone quantized (``alone``) and how much of the whole
    model's loss goes when it alone is left unquantized (``removed``), both relative to the outputs' scale."""

    node: str
    where: str
    alone: float
    removed: float


@dataclass(frozen=True)
class QuantizationLoss:
    """The accuracy a quantized model loses to its quantization, separately from the verdict (a faithful engine of a
    badly quantized model passes): ``loss`` is the largest error of the quantized model against the float model (the
    same graph with every quantizer as identity), both in float64, relative to the float outputs' largest magnitude;
    ``ranked`` the quantizers by what leaving each one out saves, most first."""

    loss: float
    ranked: list[QuantizerCost]
    not_ranked: int = 0

    def lines(self, count: int = 3) -> list[str]:
        head = (f"quantization costs {self.loss:.3g} of the outputs' scale against the float model (both in float64); "
                f"the quantizers that cost most, left out one at a time:")
        rows = [f"  {cost.node} (from {cost.where or 'a node trtcheck made'}): leaving it out saves {cost.removed:.3g}, "
                f"alone it costs {cost.alone:.3g}" for cost in self.ranked[:count]]
        more = [f"  ({self.not_ranked} more quantizers not ranked: at most {MAX_RANKED} are)"] if self.not_ranked else []
        return [head, *rows, *more]


def relative_error(value: Any, reference: Any) -> float:
    """The largest ``|value - reference|`` over every floating output, relative to the reference's largest value."""
    pairs = [(v, r) for v, r in zip(pytree.tree_leaves(value), pytree.tree_leaves(reference))
             if isinstance(v, torch.Tensor) and v.is_floating_point() and v.shape == r.shape]
    scale = max((float(r.abs().max()) for _, r in pairs if r.numel()), default=0.0)
    error = max((float((v - r).abs().max()) for v, r in pairs if v.numel()), default=0.0)
    return error / scale if scale else error


class QuantizedGraph:
    """A quantized graph in float64, cast once, run with any set of its quantizers left out (passing their input
    through, as a disabled ModelOpt quantizer exports no node): the float model is every quantizer left out. Its
    quantizers are counted in graph order, the order a call runs them."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        self.quantizers = [node for node in gm.graph.nodes if is_quantize(node)]
        self.index = {node.name: position for position, node in enumerate(self.quantizers)}
        self.model = Float64Model(gm, reused=True)

    def outputs(self, flat: Sequence[Any], left_out: Iterable[str] = ()) -> Any:
        """The outputs on ``flat`` with the quantizers named ``left_out`` passing their input through (None: it fails)."""
        return self.model.run(tuple(flat), {}, left_out=frozenset(self.index[name] for name in left_out))[0]


def quantized_graph(gm: torch.fx.GraphModule) -> QuantizedGraph | None:
    """``gm`` as a ``QuantizedGraph``; None where its quantizers cannot be counted in call order (a control-flow
    branch calls its own, in an order the top-level graph does not show) or it cannot be cast to float64."""
    if any_control_flow(gm.graph.nodes):
        return None
    try:
        return QuantizedGraph(gm)
    except Exception:  # noqa: BLE001 - a graph that cannot be copied or cast has no cost to measure
        return None


def quantization_loss(gm: torch.fx.GraphModule, flat: Sequence[Any]) -> QuantizationLoss | None:
    """What quantization costs ``gm`` on the flat inputs ``flat`` (``QuantizationLoss``), each quantizer quantized
    alone and left out alone, as ranking by a per-quantizer error (its MSE) misjudges what reaches the outputs; None
    where the graph does not run in float64."""
    graph = quantized_graph(gm)
    if graph is None:
        return None
    everyone = set(graph.index)
    quantized, exact = graph.outputs(flat), graph.outputs(flat, everyone)
    if quantized is None or exact is None:
        return None
    loss, costs = relative_error(quantized, exact), []
    for node in graph.quantizers[:MAX_RANKED]:
        alone, without = graph.outputs(flat, everyone - {node.name}), graph.outputs(flat, {node.name})
        if alone is None or without is None:
            continue
        costs.append(QuantizerCost(node.name, node_source(node), relative_error(alone, exact),
                                   loss - relative_error(without, exact)))
    costs.sort(key=lambda cost: (-cost.removed, -cost.alone))
    return QuantizationLoss(loss, costs, max(0, len(graph.quantizers) - MAX_RANKED))


def quantizer_checks(compiled: Any, input_set: Sequence[Any], kwargs: Mapping[str, Any], backend: str) -> list[QuantizerCheck]:
    """``check_quantizers`` for every quantizer in ``compiled``'s engines, on one of ``verify``'s input sets (eager's
    values recorded on the lowered graph; the given values are not changed)."""
    nodes = converted_quantizers(compiled)
    if not nodes:
        return []
    gm = compiled.partition.graph_module
    values = record_eager(gm, flat_inputs(gm, cloned(tuple(input_set)), cloned(dict(kwargs))))
    return check_quantizers(gm, nodes, values, backend, compiled.partition.settings)


def quantization_costs(compiled: Any, input_set: Sequence[Any], kwargs: Mapping[str, Any]) -> QuantizationLoss | None:
    """``quantization_loss`` of a compiled module's lowered graph on one of ``verify``'s input sets."""
    gm = compiled.partition.graph_module
    return quantization_loss(gm, flat_inputs(gm, cloned(tuple(input_set)), cloned(dict(kwargs))))


__all__ = [
    "MAX_RANKED", "QuantizationLoss", "QuantizedGraph", "QuantizerCheck", "QuantizerCost", "check_quantizers",
    "converted_quantizers", "quantization_costs", "quantization_loss", "quantized_graph", "quantizer_checks",
    "relative_error",
]
