"""Shape analysis: the shapes and dtypes crossing every segment boundary, with their ranges.

They come from the graph's fake-tensor metadata (``meta["val"]``), which is what engines are built from.
A graph exported with ``dynamic_shapes`` carries symbolic sizes (``s0``, ``2*s0``); as shape analysis in
Torch-TensorRT's partitioning design (docs/partitioning.md) gives every engine input a (min, opt, max) shape,
``value_shape`` bounds each size over the ranges export recorded for its symbols (``bound_sympy``), opt being the
example's size. As that shape analysis runs each segment with JIT, ``find_mismatches`` runs the graph on the example
inputs (``observe``) and checks that every boundary value has the recorded shape and dtype, so an engine is
never built for a shape the model does not produce. One run (an ``Observation``) serves every partition of one
graph: compile keeps it with a lowering that is reused (``analyse_shapes``'s ``lowered``). The example inputs, not
random ones: a model's inputs may be constrained (a Cholesky factor needs a positive-definite matrix), and the
examples are the one input set known to be valid. They run on copies, and the graph's mutable buffers are restored afterwards, so
shape analysis changes neither the caller's tensors nor the compiled module's state.

The phase is ``analyse_shapes``: compile runs it once, after partitioning and before conversion, and its
``ShapeAnalysis`` carries both halves, the segments whose observed values betray their metadata and every
TensorRT segment's specs and ranges (``SegmentShapes``), which the engine build reads. ``TensorSpec`` and
``ShapeRange``, what an engine is built for, live with the engines (``trtcheck.engines.specs``).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
import torch.fx

from trtcheck.engines.specs import ShapeRange, TensorSpec
from trtcheck.errors import ShapeMismatchError
from trtcheck.lowering.graph import is_mutable_state
from trtcheck.lowering.symbols import DimRange, Ranges, dim_range, symbol_ranges
from trtcheck.memory import lean_run
from trtcheck.partitioning.partition import Partition, Segment
from trtcheck.partitioning.reasons import Target
from trtcheck.values import cloned, same_values


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
class ValueShape:
    """(min, opt, max) of one boundary value, per dimension; what a TensorRT optimization profile needs."""

    name: str
    dims: tuple[DimRange, ...]
    dtype: torch.dtype

    @property
    def is_static(self) -> bool:
        return all(d.is_static for d in self.dims)

    @property
    def opt(self) -> tuple[int, ...]:
        return tuple(d.opt for d in self.dims)

    def shape_range(self) -> ShapeRange | None:
        """The engine input's profile; None when a dimension is unbounded (a TensorRT profile needs a max).
        A minimum of 0 becomes 1: an empty tensor is a corner engines handle unevenly, and no converter takes one."""
        if any(d.max is None for d in self.dims):
            return None
        return ShapeRange(
            tuple(max(d.min, 1) if not d.is_static else d.min for d in self.dims),
            self.opt,
            tuple(d.max for d in self.dims),  # type: ignore[misc] - checked above
        )

    def __str__(self) -> str:
        return f"[{', '.join(map(str, self.dims))}] {str(self.dtype).removeprefix('torch.')}"


def value_shape(value: torch.fx.Node, ranges: Ranges) -> ValueShape:
    """The ``ValueShape`` of one Tensor value, from its metadata and the graph's symbol ranges."""
    meta = value.meta.get("val")
    if not isinstance(meta, torch.Tensor):
        raise TypeError(f"{value.name} carries {type(meta).__name__}, not a Tensor: it has no shape range")
    return ValueShape(value.name, tuple(dim_range(d, ranges) for d in meta.shape), meta.dtype)


@dataclass(frozen=True)
class SegmentShapes:
    """What crosses one segment's boundary: the engine's specs (-1 for a dynamic size) and their ranges."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    input_ranges: tuple[ValueShape, ...] = ()
    output_ranges: tuple[ValueShape, ...] = ()

    def shape_ranges(self) -> dict[str, ShapeRange]:
        """Engine input name -> profile, for every dynamic input whose range is bounded."""
        found = {}
        for spec, shape in zip(self.inputs, self.input_ranges):
            if not shape.is_static:
                profile = shape.shape_range()
                if profile is not None:
                    found[spec.name] = profile
        return found


def segment_shapes(segment: Segment, ranges: Ranges | None = None) -> SegmentShapes:
    """Input and output specs of a segment whose boundary values are all Tensors (TensorRT segments), with
    the (min, opt, max) of each over ``ranges`` (``symbol_ranges`` of the graph; None: no symbol bounded)."""
    ranges = ranges or {}
    return SegmentShapes(
        tuple(map(tensor_spec, segment.inputs)),
        tuple(map(tensor_spec, segment.outputs)),
        tuple(value_shape(v, ranges) for v in segment.inputs),
        tuple(value_shape(v, ranges) for v in segment.outputs),
    )


def partition_shapes(partition: Partition) -> list[SegmentShapes | None]:
    """``segment_shapes`` of every segment whose boundary values are all Tensors, None for the others."""
    ranges = symbol_ranges(partition.graph_module)
    found: list[SegmentShapes | None] = []
    for segment in partition.segments:
        try:
            found.append(segment_shapes(segment, ranges))
        except TypeError:  # a non-Tensor value crosses this (Torch) segment's boundary
            found.append(None)
    return found


def symbol_values(gm: torch.fx.GraphModule, flat_inputs: Sequence[Any]) -> dict[sympy.Symbol, int]:
    """The value every symbol takes for ``flat_inputs`` (one per placeholder), read off the sizes that are a
    plain symbol: what the symbolic sizes of every other value are evaluated with."""
    found: dict[sympy.Symbol, int] = {}
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    for node, value in zip(placeholders, flat_inputs):
        meta = node.meta.get("val")
        if isinstance(meta, torch.Tensor) and isinstance(value, torch.Tensor) and meta.dim() == value.dim():
            for size, got in zip(meta.shape, value.shape):
                if isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol):
                    found.setdefault(size.node.expr, int(got))
    return found


def expected_shape(meta: torch.Tensor, values: Mapping[sympy.Symbol, int]) -> tuple[int, ...]:
    """``meta``'s shape evaluated with ``values``; -1 for a size whose symbols are not all known."""
    shape = []
    for size in meta.shape:
        if isinstance(size, int):
            shape.append(size)
            continue
        expr = size.node.expr
        if expr.free_symbols <= set(values):
            shape.append(int(expr.xreplace(values)))
        else:
            shape.append(-1)
    return tuple(shape)


@dataclass(frozen=True)
class ShapeMismatch:
    """A boundary value whose shape or dtype, when the segments run on the example inputs, is not its metadata's."""

    segment: int  # the index of the segment that produced it, when it was found
    node: torch.fx.Node
    expected: str  # what the metadata says, e.g. "[5] torch.float32"
    got: str

    def __str__(self) -> str:
        return f"segment @{self.segment}: {self.node.name} is {self.got}, metadata says {self.expected}"


@dataclass(frozen=True)
class Observation:
    """What every value of a graph was when the graph ran on the example inputs: its shape and dtype (the
    type's name for a non-Tensor), by node name, and where the run stopped if a node raised.

    One run serves every partition of that graph: a boundary value is the same value whichever segments the
    graph is cut into, so ``find_mismatches`` checks each partition's boundaries against one observation instead
    of running the model again per partition (the matrix compiles one lowering under several presets).
    """

    values: Mapping[str, tuple[str, tuple[int, ...], torch.dtype] | tuple[str, str]]  # name -> (op, shape, dtype) | (op, type)
    symbols: Mapping[sympy.Symbol, int]
    failed_at: str | None = None  # the node whose op raised
    error: BaseException | None = None

    def covers(self, graph: torch.fx.Graph) -> bool:
        """True when this was observed on a graph with ``graph``'s nodes (names, ops, targets and arguments), up to
        where it stopped."""
        for node in graph.nodes:
            if node.op in ("placeholder", "output"):
                continue
            if node.name == self.failed_at:
                return True
            seen = self.values.get(node.name)
            if seen is None or seen[0] != _op(node):
                return False
        return self.failed_at is None


def _op(node: torch.fx.Node) -> str:
    """What a node computes, as far as an observation's reuse must tell: its op, its target and its arguments (other
    nodes by name), so that a graph rewired under the same names is not taken for the one observed."""
    return f"{node.op}:{node.target}:{node.args!r}:{node.kwargs!r}"


class _Observer(torch.fx.Interpreter):
    """Runs the graph node by node (freeing each value after its last use) and records what each node gave."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__(gm, garbage_collect_values=True)
        self.extra_traceback = False  # the model's own error, as its segments raised it, without fx's "While executing"
        self.seen: dict[str, Any] = {}
        self.failed: tuple[str, BaseException] | None = None

    def run_node(self, node: torch.fx.Node) -> Any:
        try:
            value = super().run_node(node)
        except Exception as error:
            self.failed = (node.name, error)
            raise
        if node.op != "output":
            if isinstance(value, torch.Tensor):
                self.seen[node.name] = (_op(node), tuple(value.shape), value.dtype)
            else:
                self.seen[node.name] = (_op(node), type(value).__name__)
        return value


def observe(gm: torch.fx.GraphModule, flat_inputs: Sequence[Any]) -> Observation:
    """Run ``gm`` on copies of ``flat_inputs`` (one per placeholder) and record every value's shape and dtype.

    The graph's mutable buffers are restored afterwards, so observing changes neither the caller's tensors nor
    the module's state. A node that raises ends the run; the observation keeps it and its error."""
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    if len(placeholders) != len(flat_inputs):
        raise ShapeMismatchError(f"expected {len(placeholders)} flat inputs, got {len(flat_inputs)}")
    copies = cloned(list(flat_inputs))
    state = [operator.attrgetter(node.target)(gm) for node in gm.graph.nodes if is_mutable_state(node)]
    saved = [tensor.clone() for tensor in state]
    observer = _Observer(gm)
    try:
        with torch.no_grad(), lean_run():
            observer.run(*copies)
    except Exception:  # kept in the observation: find_mismatches decides whether it is the model's
        if observer.failed is None:
            raise
    finally:
        with torch.no_grad():
            for tensor, value in zip(state, saved):
                tensor.copy_(value)
    failed_at, error = observer.failed or (None, None)
    return Observation(observer.seen, symbol_values(gm, flat_inputs), failed_at, error)


def confirm_shapes(partition: Partition, flat_inputs: Sequence[Any]) -> None:
    """Run the graph on copies of ``flat_inputs`` (one per placeholder); raise on any boundary mismatch."""
    mismatches = find_mismatches(partition, flat_inputs)
    if mismatches:
        raise ShapeMismatchError(str(mismatches[0]))


def find_mismatches(partition: Partition, flat_inputs: Sequence[Any], observation: Observation | None = None) -> list[ShapeMismatch]:
    """Every boundary value (a segment's output) whose shape or dtype differs from its metadata, the graph run
    on copies of ``flat_inputs`` (one per placeholder), or read from ``observation`` where it covers this graph
    (the caller's word that it was ``observe``'s on these inputs: ``convert`` checks them bit for bit).

    The graph runs in its own order, the order the model was traced in. A mismatch does not stop the run: later
    nodes get the value the earlier ones really produced (as the compiled module would), so every mismatch is
    found. Should a node then fail on such a value, the check stops at its segment with the mismatches of the
    segments before it; a node that fails with none found before it is the model failing on its own example
    inputs, and that error propagates.
    """
    return boundary_mismatches(partition, observed(partition.graph_module, flat_inputs, observation))


def observed(gm: torch.fx.GraphModule, flat_inputs: Sequence[Any], observation: Observation | None = None) -> Observation:
    """``observation`` where it covers ``gm``'s graph, else a new run of ``gm`` on ``flat_inputs`` (``observe``)."""
    if observation is not None and observation.covers(gm.graph):
        return observation
    return observe(gm, flat_inputs)


def boundary_mismatches(partition: Partition, observation: Observation) -> list[ShapeMismatch]:
    """``find_mismatches`` read from ``observation``, which the caller knows covers ``partition``'s graph."""
    mismatches: list[ShapeMismatch] = []
    for index, segment in enumerate(partition.segments):
        if observation.failed_at is not None and any(node.name == observation.failed_at for node in segment.nodes):
            break
        for node in segment.outputs:
            mismatch = _check(index, node, observation.values.get(node.name), observation.symbols)
            if mismatch is not None:
                mismatches.append(mismatch)
    if observation.error is not None and not mismatches:  # most likely a mismatch's doing when there is one
        raise observation.error
    return mismatches


def _check(index: int, node: torch.fx.Node, seen: tuple | None, symbols: Mapping[sympy.Symbol, int]) -> ShapeMismatch | None:
    """A symbolic size is checked against its expression evaluated for this run (``2*s0`` must be twice
    the size the input gave ``s0``), not merely accepted. ``seen``: the node's (op, shape, dtype), or (op, type name)
    for a non-Tensor."""
    meta = node.meta.get("val")
    if not isinstance(meta, torch.Tensor) or seen is None:
        return None
    expected = expected_shape(meta, symbols)
    if len(seen) == 2:
        return ShapeMismatch(index, node, f"{list(expected)} {meta.dtype}", seen[1])
    _, got, dtype = seen
    if len(expected) != len(got) or any(e not in (-1, g) for e, g in zip(expected, got)) or dtype != meta.dtype:
        return ShapeMismatch(index, node, f"{list(expected)} {meta.dtype}", f"{list(got)} {dtype}")
    return None


@dataclass(frozen=True)
class ShapeAnalysis:
    """Shape analysis's result for one partition: the specs and ranges of every TensorRT segment (by index),
    the TensorRT segments whose boundary values betray their metadata when the graph runs on the example inputs
    (by index, each with the error its fallback reports: their engines would be built from that metadata), and
    the same for every branch of control flow (by branch name; branches are not run, their shapes are their
    metadata's, bounded by the parent graph's symbol ranges)."""

    segments: dict[int, SegmentShapes] = field(default_factory=dict)
    mismatched: dict[int, Exception] = field(default_factory=dict)
    branches: dict[str, ShapeAnalysis] = field(default_factory=dict)


OBSERVED = "trtcheck_observed"
"""Key of ``lowered.meta``: the example inputs shape analysis last ran the lowering on, and what it observed."""


def analyse_shapes(
    partition: Partition,
    flat_inputs: Sequence[Any] | None,
    lowered: torch.fx.GraphModule | None = None,
    ranges: Ranges | None = None,
) -> ShapeAnalysis:
    """Shape analysis of ``partition``: every TensorRT segment's ``SegmentShapes`` over ``ranges`` (the graph's
    ``symbol_ranges`` when None), and, where ``flat_inputs`` is given, the mismatches of a run on them
    (``find_mismatches``). That run is read from the ``Observation`` kept with ``lowered`` where it was made on
    the same inputs (bit for bit, strides included), with ``lowered``'s parameters and buffers as they were then
    (their identity and version: an in-place change bumps it), and on a graph with the same nodes; else it is a
    new run, then kept there: a lowering reused under several settings (the matrix's presets) runs the model once
    for all of them. A run that failed is not kept (its error's traceback holds the run's tensors)."""
    ranges = symbol_ranges(partition.graph_module) if ranges is None else ranges
    mismatched: dict[int, Exception] = {}
    if flat_inputs is not None:
        versions = _state_versions(lowered) if lowered is not None else None
        kept = lowered.meta.get(OBSERVED) if lowered is not None else None
        reusable = kept[2] if kept is not None and kept[1] == versions and same_values(kept[0], list(flat_inputs)) else None
        observation = observed(partition.graph_module, flat_inputs, reusable)
        if lowered is not None and observation is not reusable and observation.error is None:
            lowered.meta[OBSERVED] = (cloned(list(flat_inputs)), versions, observation)
        mismatched = _mismatched_segments(partition, boundary_mismatches(partition, observation))
    return ShapeAnalysis(_tensorrt_shapes(partition, ranges), mismatched, _branch_shapes(partition, ranges))


def _branch_shapes(partition: Partition, ranges: Ranges) -> dict[str, ShapeAnalysis]:
    return {
        name: ShapeAnalysis(_tensorrt_shapes(sub, ranges), {}, _branch_shapes(sub, ranges))
        for name, sub in partition.branches.items()
    }


def _tensorrt_shapes(partition: Partition, ranges: Ranges) -> dict[int, SegmentShapes]:
    return {i: segment_shapes(s, ranges) for i, s in enumerate(partition.segments) if s.target is Target.TENSORRT}


def _state_versions(gm: torch.fx.GraphModule) -> tuple:
    """Each parameter's and buffer's identity and version counter: what tells that the state a graph computes
    from changed in place since (``load_state_dict``, an optimizer step) without reading a byte of it."""
    return tuple((name, id(tensor), tensor._version) for name, tensor in (*gm.named_parameters(), *gm.named_buffers()))


def _mismatched_segments(partition: Partition, mismatches: Sequence[ShapeMismatch]) -> dict[int, Exception]:
    """The TensorRT segments that produce or read a mismatched value, by index, each with the error its
    fallback reports: the value, what the metadata says and what the segments really gave (the first such
    value per segment). A value only Torch segments touch needs nothing: no engine is built from it."""
    found: dict[int, Exception] = {}
    for mismatch in mismatches:
        for index, segment in enumerate(partition.segments):
            produced, read = mismatch.node in segment.nodes, mismatch.node in segment.inputs
            if segment.target is Target.TENSORRT and (produced or read) and index not in found:
                found[index] = ShapeMismatchError(
                    f"{'output' if produced else 'input'} {mismatch.node.name} is {mismatch.got} when the segments "
                    f"run on the example inputs, the graph's metadata says {mismatch.expected}"
                )
    return found
