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


@dataclass(frozen=True)
class ShapeMismatch:
    """A boundary value whose shape or dtype, when the segments run on the example inputs, is not its metadata's."""

    segment: int  # the index of the segment that produced it, when it was found
    node: torch.fx.Node
    expected: str  # what the metadata says, e.g. "[5] torch.float32"
    got: str

    def __str__(self) -> str:
        return f"segment @{self.segment}: {self.node.name} is {self.got}, metadata says {self.expected}"


def confirm_shapes(partition: Partition, flat_inputs: Sequence[Any]) -> None:
    """Run the segments in order on copies of ``flat_inputs`` (one per placeholder); raise on any mismatch."""
    mismatches = find_mismatches(partition, flat_inputs)
    if mismatches:
        raise ShapeMismatchError(str(mismatches[0]))


def find_mismatches(partition: Partition, flat_inputs: Sequence[Any]) -> list[ShapeMismatch]:
    """Every boundary value whose shape or dtype differs from its metadata, the segments run in order on
    copies of ``flat_inputs`` (one per placeholder).

    A mismatch does not stop the run: later segments get the value the earlier ones really produced (as the
    compiled module would), so every mismatch is found. Should a segment then fail on such a value, the run
    stops there with the mismatches found so far; a segment that fails with none found is the model failing
    on its own example inputs, and that error propagates.
    """
    gm = partition.graph_module
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    if len(placeholders) != len(flat_inputs):
        raise ShapeMismatchError(f"expected {len(placeholders)} flat inputs, got {len(flat_inputs)}")
    copies = [x.clone() if isinstance(x, torch.Tensor) else x for x in flat_inputs]
    values: dict[torch.fx.Node, Any] = dict(zip(placeholders, copies))
    state = {node: operator.attrgetter(node.target)(gm) for node in gm.graph.nodes if is_mutable_state(node)}
    saved = {node: tensor.clone() for node, tensor in state.items()}
    values.update(state)
    mismatches: list[ShapeMismatch] = []
    try:
        with torch.no_grad():
            for index, segment in enumerate(partition.segments):
                try:
                    outputs = segment_module(gm, segment)(*(values[v] for v in segment.inputs))
                except Exception:
                    if mismatches:  # most likely the mismatch's doing: report it, not its consequence
                        break
                    raise
                for node, value in zip(segment.outputs, outputs):
                    mismatch = _check(index, node, value)
                    if mismatch is not None:
                        mismatches.append(mismatch)
                    values[node] = value
    finally:
        with torch.no_grad():
            for node, tensor in state.items():
                tensor.copy_(saved[node])
    return mismatches


def _check(index: int, node: torch.fx.Node, value: Any) -> ShapeMismatch | None:
    meta = node.meta.get("val")
    if not isinstance(meta, torch.Tensor):
        return None
    expected = meta_shape(meta)
    if not isinstance(value, torch.Tensor):
        return ShapeMismatch(index, node, f"{list(expected)} {meta.dtype}", type(value).__name__)
    got = tuple(value.shape)
    if len(expected) != len(got) or any(e not in (-1, g) for e, g in zip(expected, got)) or value.dtype != meta.dtype:
        return ShapeMismatch(index, node, f"{list(expected)} {meta.dtype}", f"{list(got)} {value.dtype}")
    return None
