"""Stitching: one runnable ``GraphModule`` from engines and Torch segments, in the partition's order.

Each TensorRT segment becomes a single ``call_module`` of an ``EngineModule`` followed by one ``getitem``
per output; each Torch segment's original ATen nodes are copied as they are. The stitched graph keeps the
lowered graph's placeholders and code generator (``torch.export``'s pytree specs), so the stitched module
has the model's own calling convention and output structure (tuples, lists, dicts).

Engines return contiguous tensors; an engine output whose users were traced on another layout gets it back
(``restride``), and a control-flow node whose branches run engines calls its op without autograd.
"""

from __future__ import annotations

import copy
import functools
import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from trtcheck.engines import Engine
from trtcheck.errors import EngineRuntimeError, InputMismatchError
from trtcheck.lowering.graph import is_mutable_state
from trtcheck.lowering.symbols import size_hint
from trtcheck.onnx_format.origins import explain_node_names
from trtcheck.partitioning.nodes import branch_names, is_control_flow
from trtcheck.partitioning.partition import Partition, Segment
from trtcheck.partitioning.reasons import Target


class EngineModule(torch.nn.Module):
    """An engine as a submodule, so ``print(stitched)`` lists it and ``named_modules`` finds it."""

    def __init__(self, engine: Engine, segment_index: int) -> None:
        super().__init__()
        self.engine = engine
        self.segment_index = segment_index

    def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        try:
            return self.engine(*tensors)
        except ValueError as error:  # the engine's input check: name the segment and the fix
            raise InputMismatchError(
                f"engine of TensorRT segment @{self.segment_index}: {error}. trtcheck builds engines for the "
                "shapes and dtypes of the example inputs (and the ranges of their torch.export.Dim): call the "
                "compiled module with inputs like those, or compile again with examples of the new shape "
                "(or dynamic_shapes covering it)"
            ) from error
        except Exception as error:  # a run-time failure must name the engine that failed
            # An ONNX node the engine's message names (``div/Div``) as the fx node and converter it came from.
            origin = explain_node_names(str(error), self.engine.node_origins)
            raise EngineRuntimeError(
                f"the {self.engine.backend} engine of TensorRT segment @{self.segment_index} failed while running: "
                f"{type(error).__name__}: {error}. " + (f"{origin}. " if origin else "")
                + "Compile with torch_executed_ops naming this segment's ops "
                "to keep them in PyTorch, and report the segment (trtcheck.verify writes a repro)"
            ) from error

    def extra_repr(self) -> str:
        inputs = ", ".join(f"{s.name}: {list(s.shape)} {str(s.dtype).removeprefix('torch.')}" for s in self.engine.inputs)
        return f"backend={self.engine.backend}, segment=@{self.segment_index}, inputs=({inputs}), outputs={len(self.engine.outputs)}"


SEGMENT_META = "trtcheck_segment"
"""``node.meta`` key of every stitched node that runs a segment (an engine call, its ``getitem``s and
``restride``s, a Torch segment's copied nodes): the index of that segment (``trtcheck.profile`` reads it)."""


def stitch(
    partition: Partition, engines: Mapping[int, Engine], branches: Mapping[str, torch.nn.Module] | None = None
) -> torch.fx.GraphModule:
    """Build the stitched module; ``engines`` maps the index of every TensorRT segment to its engine, ``branches``
    the name of a control-flow branch (``true_graph_0``) to its own stitched module, called in its place. A
    control-flow node whose branches run engines calls its op without autograd (``WithoutAutograd``).

    The constants Torch segments read (parameters, constant buffers) are copied when stitching: engines baked
    the weights of the moment they were built, so Torch segments must read that moment's weights too. A
    compiled module is a snapshot of the model: changing the model's weights afterwards (``load_state_dict``,
    an optimizer step) changes neither its engines nor its Torch segments; compile again to follow them.
    Mutable state (``is_mutable_state``: buffers ``forward`` writes) stays the compiled module's own, updated
    by every call. The copies carry no autograd: the compiled module is for inference.
    """
    source = partition.graph_module
    branches = branches or {}
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    attributes: dict[str, object] = {}  # every get_attr and call_module target of the stitched graph
    snapshots: dict[int, torch.Tensor] = {}  # one copy per tensor, shared weights stay shared

    def lookup(node: torch.fx.Node) -> torch.fx.Node:
        if node not in env and node.op == "get_attr":  # constants are copied where first used
            env[node] = graph.node_copy(node)
            value = branches[node.target] if node.target in branches else operator.attrgetter(node.target)(source)
            if isinstance(value, torch.Tensor) and not is_mutable_state(node):
                if id(value) not in snapshots:
                    snapshots[id(value)] = value.detach().clone()
                value = snapshots[id(value)]
            attributes[node.target] = value
        return env[node]

    for node in source.graph.nodes:
        if node.op == "placeholder":
            env[node] = graph.node_copy(node)
    for index, segment in enumerate(partition.segments):
        if segment.target is Target.TENSORRT:
            name = f"trt_engine_{index}"
            attributes[name] = EngineModule(engines[index], index)
            _call_engine(graph, name, segment, env, lookup, index)
        else:
            for node in segment.nodes:
                env[node] = graph.node_copy(node, lookup)
                env[node].meta[SEGMENT_META] = index
                if is_control_flow(node) and any(_runs_engines(branches.get(name)) for name in branch_names(node)):
                    env[node].target = _without_autograd(node.target)
    output = next(node for node in reversed(source.graph.nodes) if node.op == "output")
    graph.node_copy(output, lookup)
    graph._codegen = copy.deepcopy(source.graph._codegen)

    stitched = torch.fx.GraphModule(attributes, graph, class_name="StitchedModule")  # sets the pytree specs
    stitched.partition = partition
    return stitched


def _call_engine(graph: torch.fx.Graph, name: str, segment: Segment, env: dict, lookup, index: int) -> None:
    call = graph.call_module(name, tuple(lookup(value) for value in segment.inputs))
    call.meta[SEGMENT_META] = index
    for position, value in enumerate(segment.outputs):
        item = graph.call_function(operator.getitem, (call, position))
        item.meta = {**value.meta, SEGMENT_META: index}
        stride = recorded_stride(value)
        if stride is not None:  # the consumers were traced with this layout (views depend on it)
            if isinstance(stride, DimOrder):
                item = graph.call_function(restride_in_order, (item, stride.dims))
            else:
                item = graph.call_function(restride, (item, stride))
            item.meta = {**value.meta, SEGMENT_META: index}
        env[value] = item


@dataclass(frozen=True)
class DimOrder:
    """A layout for values of dynamic shape: the dims from outermost to innermost in memory. Their strides
    depend on the sizes of each call, so the layout is kept as an order and made dense for the call's sizes."""

    dims: tuple[int, ...]

    def __str__(self) -> str:
        return f"dims {list(self.dims)} outermost first"


def recorded_stride(value: torch.fx.Node) -> tuple[int, ...] | DimOrder | None:
    """The layout export recorded for ``value`` when it is not the contiguous one an engine returns, else None:
    its strides, or for a value of dynamic shape a ``DimOrder``.

    Engines return contiguous tensors, but the Torch ops after them were traced on the layout eager
    produced: ``view`` of a transposed tensor is legal only with the transposed strides, and
    ``as_strided`` reads memory by them. Values crossing out of an engine get that layout back.
    A symbolic layout is judged on its hints (the example's sizes) and never compared as symbols: a
    comparison would install a guard that specializes the graph's shared metadata to the example's size.
    """
    meta = value.meta.get("val")
    if not isinstance(meta, torch.Tensor):
        return None
    if not all(isinstance(d, int) for d in (*meta.shape, *meta.stride())):
        return _symbolic_layout(meta)
    # An expanded layout (stride 0) cannot be written to; a contiguous tensor is as good for every view.
    if meta.is_contiguous() or dim_order(meta.shape, meta.stride()) is None:
        return None
    return tuple(int(s) for s in meta.stride())


def _symbolic_layout(meta: torch.Tensor) -> DimOrder | None:
    shape, stride = [size_hint(d) for d in meta.shape], tuple(size_hint(s) for s in meta.stride())
    order = dim_order(shape, stride)
    if order is None or dense_strides(shape, order) != stride:
        return None  # any layout will do, or not dense in any order (a slice of a larger value): the engine's will
    return None if order == tuple(range(len(shape))) else DimOrder(order)


def dim_order(shape: Sequence[int], stride: Sequence[int]) -> tuple[int, ...] | None:
    """The dims of a tensor of ``shape`` and ``stride`` from outermost to innermost in memory (largest stride
    first, ties by dim), or None where any layout will do: an expanded layout (a stride 0: no layout can be
    written to) or at most one element (every layout is the same)."""
    if 0 in stride or math.prod(shape) <= 1:
        return None
    return tuple(sorted(range(len(shape)), key=lambda d: (-stride[d], d)))


def dense_strides(shape: Sequence[int], order: Sequence[int]) -> tuple[int, ...]:
    """Dense strides for ``shape`` with its dims laid out in ``order`` (outermost first, as ``dim_order`` gives)."""
    strides = [0] * len(shape)
    step = 1
    for dim in reversed(order):
        strides[dim] = step
        step *= max(shape[dim], 1)
    return tuple(strides)


def restride(tensor: torch.Tensor, stride: tuple[int, ...]) -> torch.Tensor:
    """``tensor``'s values laid out with ``stride`` (a copy, made only where the layout differs)."""
    if tensor.stride() == stride:
        return tensor
    return torch.empty_strided(tensor.shape, stride, dtype=tensor.dtype, device=tensor.device).copy_(tensor)


def restride_in_order(tensor: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    """``tensor`` laid out densely with ``dims`` outermost first (a ``DimOrder``), for this call's sizes."""
    return restride(tensor, dense_strides(tensor.shape, dims))


RESTRIDES = (restride, restride_in_order)
"""The functions a stitched graph calls to give an engine output its recorded layout."""


def _runs_engines(module: torch.nn.Module | None) -> bool:
    return module is not None and any(isinstance(child, EngineModule) for child in module.modules())


class WithoutAutograd:
    """``op`` called under ``torch.no_grad()``: the target of a stitched control-flow node whose branches run engines.

    With grad enabled and any operand requiring grad (the parameters a cond passes in always do), a
    control-flow op's autograd kernel first traces both branches with fake tensors to check them for
    mutation (``HigherOrderOperator.gen_schema``), and no engine can run on fake tensors. Engines carry no
    gradient anyway, so the op runs as it does under ``torch.no_grad()``: its eager kernel, calling the
    branch that the predicate picks. Nodes whose branches hold no engine keep autograd.
    """

    def __init__(self, op: Any) -> None:
        self.op = op
        self.__name__ = f"{getattr(op, '__name__', 'control_flow')}_without_autograd"  # what the stitched code shows

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            return self.op(*args, **kwargs)

    def __repr__(self) -> str:
        return f"WithoutAutograd({self.op!r})"


@functools.cache
def _without_autograd(op: Any) -> WithoutAutograd:
    return WithoutAutograd(op)


def stitched_branches(stitched: torch.fx.GraphModule) -> list[tuple[str, torch.fx.GraphModule]]:
    """The stitched branch modules ``stitch`` put into ``stitched`` (its own, not nested ones), by name."""
    return [(name, child) for name, child in stitched.named_children() if isinstance(child, torch.fx.GraphModule)]


def unrestrided_engine_outputs(stitched: torch.fx.GraphModule) -> list[tuple[torch.fx.Node, tuple[int, ...] | DimOrder, list[str]]]:
    """The engine outputs of ``stitched`` (its own graph; its branches are ``stitched_branches``) that users read as the
    engine returns them, contiguous, though export recorded another layout for them (``recorded_stride``): each
    ``getitem`` of an engine call with that layout and the names of the users that do not ``restride`` it. ``stitch``
    leaves none; verification checks the stitched graph through this, knowing nothing of how stitching marks them."""
    engines = {
        node for node in stitched.graph.nodes
        if node.op == "call_module" and isinstance(stitched.get_submodule(node.target), EngineModule)
    }
    found = []
    for node in stitched.graph.nodes:
        if node.op == "call_function" and node.target is operator.getitem and node.args[0] in engines:
            stride = recorded_stride(node)
            bare = [user.name for user in node.users if not (user.op == "call_function" and user.target in RESTRIDES)]
            if stride is not None and bare:
                found.append((node, stride, bare))
    return found
