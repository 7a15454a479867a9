"""Shape analysis: the shapes and dtypes crossing every segment boundary.

They come from the graph's fake-tensor metadata (``meta["val"]``), which is what engines are built from.
As the seed's shape analysis runs each segment with JIT, ``confirm_shapes`` runs the segments in order on
the example inputs and checks that every boundary value has the recorded shape and dtype, so an engine is
never built for a shape the model does not produce. The example inputs, not random ones: a model's inputs
may be constrained (a Cholesky factor needs a positive-definite matrix), and the examples are the one input
set known to be valid. They run on copies, and the graph's mutable buffers are restored afterwards, so
shape analysis changes neither the caller's tensors nor the compiled module's state.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from trtcheck.engines import TensorSpec
from trtcheck.errors import TrtcheckError
from trtcheck.partitioning.extract import segment_module
from trtcheck.partitioning.partition import Partition, Segment, is_mutable_state


class ShapeMismatchError(TrtcheckError):
    """A segment produced a value whose shape or dtype differs from the graph's metadata."""


def meta_shape(meta: torch.Tensor) -> tuple[int, ...]:
    """A fake tensor's shape with every symbolic (dynamic) dimension as -1."""
    return tuple(int(d) if isinstance(d, int) else -1 for d in meta.shape)


def tensor_spec(value: torch.fx.Node) -> TensorSpec:
    """The ``TensorSpec`` of one boundary value (a dynamic dimension becomes -1)."""
    meta = value.meta.get("val")
    if not isinstance(meta, torch.Tensor):
        raise TypeError(f"{value.name} carries {type(meta).__name__}, not a Tensor: it cannot cross an engine boundary")
    return TensorSpec(value.name, meta_shape(meta), meta.dtype)


@dataclass(frozen=True)
class SegmentShapes:
    """What crosses one segment's boundary."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]


def segment_shapes(segment: Segment) -> SegmentShapes:
    """Input and output specs of a segment whose boundary values are all Tensors (TensorRT segments)."""
    return SegmentShapes(tuple(map(tensor_spec, segment.inputs)), tuple(map(tensor_spec, segment.outputs)))


def random_like(value: Any, generator: torch.Generator | None = None) -> Any:
    """A fresh input like ``value``: random floats of its shape; other values (ints, indices) kept as they are,
    since their valid range is the model's business."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return torch.randn(value.shape, generator=generator, dtype=value.dtype).to(value.device)
    if isinstance(value, (list, tuple)):
        return type(value)(random_like(v, generator) for v in value)
    if isinstance(value, dict):
        return {k: random_like(v, generator) for k, v in value.items()}
    return value


def confirm_shapes(partition: Partition, flat_inputs: Sequence[Any]) -> None:
    """Run the segments in order on copies of ``flat_inputs`` (one per placeholder); raise on any mismatch."""
    gm = partition.graph_module
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    if len(placeholders) != len(flat_inputs):
        raise ShapeMismatchError(f"expected {len(placeholders)} flat inputs, got {len(flat_inputs)}")
    copies = [x.clone() if isinstance(x, torch.Tensor) else x for x in flat_inputs]
    values: dict[torch.fx.Node, Any] = dict(zip(placeholders, copies))
    state = {node: operator.attrgetter(node.target)(gm) for node in gm.graph.nodes if is_mutable_state(node)}
    saved = {node: tensor.clone() for node, tensor in state.items()}
    values.update(state)
    try:
        with torch.no_grad():
            for index, segment in enumerate(partition.segments):
                outputs = segment_module(gm, segment)(*(values[v] for v in segment.inputs))
                for node, value in zip(segment.outputs, outputs):
                    _check(index, node, value)
                    values[node] = value
    finally:
        with torch.no_grad():
            for node, tensor in state.items():
                tensor.copy_(saved[node])


def _check(index: int, node: torch.fx.Node, value: Any) -> None:
    meta = node.meta.get("val")
    if not isinstance(meta, torch.Tensor):
        return
    if not isinstance(value, torch.Tensor):
        raise ShapeMismatchError(f"segment @{index}: {node.name} gave {type(value).__name__}, metadata says Tensor")
    expected = meta_shape(meta)
    got = tuple(value.shape)
    if len(expected) != len(got) or any(e not in (-1, g) for e, g in zip(expected, got)) or value.dtype != meta.dtype:
        raise ShapeMismatchError(
            f"segment @{index}: {node.name} is {list(got)} {value.dtype}, metadata says {list(expected)} {meta.dtype}"
        )
