"""Stitching: one runnable ``GraphModule`` from engines and Torch segments, in the partition's order.

Each TensorRT segment becomes a single ``call_module`` of an ``EngineModule`` followed by one ``getitem``
per output; each Torch segment's original ATen nodes are copied as they are. The stitched graph keeps the
lowered graph's placeholders and code generator (``torch.export``'s pytree specs), so the stitched module
has the model's own calling convention and output structure (tuples, lists, dicts).
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Mapping

import torch
import torch.fx

from trtcheck.engines import Engine
from trtcheck.errors import TrtcheckError
from trtcheck.partitioning.partition import Partition, Segment, Target


class InputMismatchError(TrtcheckError, ValueError):
    """The compiled module was called with inputs whose shapes or dtypes differ from the example inputs."""


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
                "static shapes and dtypes of the example inputs: call the compiled module with inputs like "
                "those, or compile again with examples of the new shape"
            ) from error

    def extra_repr(self) -> str:
        inputs = ", ".join(f"{s.name}: {list(s.shape)} {str(s.dtype).removeprefix('torch.')}" for s in self.engine.inputs)
        return f"backend={self.engine.backend}, segment=@{self.segment_index}, inputs=({inputs}), outputs={len(self.engine.outputs)}"


def stitch(partition: Partition, engines: Mapping[int, Engine]) -> torch.fx.GraphModule:
    """Build the stitched module; ``engines`` maps the index of every TensorRT segment to its engine."""
    source = partition.graph_module
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    attributes: dict[str, object] = {}  # every get_attr and call_module target of the stitched graph

    def lookup(node: torch.fx.Node) -> torch.fx.Node:
        if node not in env and node.op == "get_attr":  # constants are copied where first used
            env[node] = graph.node_copy(node)
            attributes[node.target] = operator.attrgetter(node.target)(source)
        return env[node]

    for node in source.graph.nodes:
        if node.op == "placeholder":
            env[node] = graph.node_copy(node)
    for index, segment in enumerate(partition.segments):
        if segment.target is Target.TENSORRT:
            name = f"trt_engine_{index}"
            attributes[name] = EngineModule(engines[index], index)
            _call_engine(graph, name, segment, env, lookup)
        else:
            for node in segment.nodes:
                env[node] = graph.node_copy(node, lookup)
    output = next(node for node in reversed(source.graph.nodes) if node.op == "output")
    graph.node_copy(output, lookup)
    graph._codegen = copy.deepcopy(source.graph._codegen)

    stitched = torch.fx.GraphModule(attributes, graph, class_name="StitchedModule")  # sets the pytree specs
    stitched.partition = partition
    return stitched


def _call_engine(graph: torch.fx.Graph, name: str, segment: Segment, env: dict, lookup) -> None:
    call = graph.call_module(name, tuple(lookup(value) for value in segment.inputs))
    for position, value in enumerate(segment.outputs):
        item = graph.call_function(operator.getitem, (call, position))
        item.meta = dict(value.meta)
        env[value] = item
