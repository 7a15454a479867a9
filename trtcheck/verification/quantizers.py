"""Each quantizer of a quantized model checked alone: its engine's codes against TensorRT's arithmetic, same input.

A model's outputs can hide a wrong quantizer (one flipped FP8 code moves an output as much as a scale 2% off), and
a right one can look wrong there (an engine's float32 arithmetic lands an input near a rounding tie on its other
side). So every quantizer compiled into an engine is also built alone (``probes.engine_of``, compile's own path), fed
the very input eager gave it, and its output measured in its own quantization steps from eager's (``qdq.steps_apart``):
a faithful quantizer gives what ``trtcheck.qdq`` gives, all but a tie here and there (``qdq.TIE_FRACTION``), and none
more than one step away. The
check names the quantizer by its node, its ModelOpt module path and source line, as a culprit is named.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from trtcheck import qdq
from trtcheck.lowering.graph import constant_tensor, flat_inputs
from trtcheck.lowering.quantized import is_quantize
from trtcheck.partitioning.reasons import Target
from trtcheck.provenance import node_source
from trtcheck.values import cloned
from trtcheck.verification.probes import dense, engine_of, subgraph_module
from trtcheck.verification.recording import Values, record_eager


@dataclass(frozen=True)
class QuantizerCheck:
    """One quantizer (``node``, a ``trtcheck.quantize_op``) built alone and compared code by code: ``elements``
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
        return not self.error and self.steps <= 1 + qdq.APART and self.mismatched <= qdq.TIE_FRACTION * self.elements

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
    chain, value = [], node.args[1]
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
        fmt = qdq.format_of(node.args[2], node.args[3])
        amax = constant_tensor(node.args[1])
        name = fmt.name if fmt is not None else "?"
        if fmt is None or amax is None:
            found.append(QuantizerCheck(node.name, name, node_source(node), error="not a constant INT8 or FP8 quantizer"))
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


def quantizer_checks(compiled: Any, input_set: Sequence[Any], kwargs: Mapping[str, Any], backend: str) -> list[QuantizerCheck]:
    """``check_quantizers`` for every quantizer in ``compiled``'s engines, on one of ``verify``'s input sets (eager's
    values recorded on the lowered graph; the given values are not changed)."""
    nodes = converted_quantizers(compiled)
    if not nodes:
        return []
    gm = compiled.partition.graph_module
    values = record_eager(gm, flat_inputs(gm, cloned(tuple(input_set)), cloned(dict(kwargs))))
    return check_quantizers(gm, nodes, values, backend, compiled.partition.settings)


__all__ = ["QuantizerCheck", "check_quantizers", "converted_quantizers", "quantizer_checks"]
