"""Cut one segment out of its graph as a standalone ``GraphModule``.

Conversion turns such a module into one ONNX model, and shape analysis runs it; both need the segment as
a function of exactly its boundary values: placeholders for ``segment.inputs`` (carrying the original
``meta["val"]``), the constants it reads as ``get_attr``, and a tuple of ``segment.outputs``.
"""

from __future__ import annotations

import torch
import torch.fx

from trtcheck.lowering.graph import graph_module as lazy_graph_module
from trtcheck.partitioning.partition import Segment


def segment_module(graph_module: torch.fx.GraphModule, segment: Segment) -> torch.fx.GraphModule:
    """A ``GraphModule`` computing ``segment.outputs`` (as a tuple) from ``segment.inputs``."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for value in segment.inputs:
        placeholder = graph.placeholder(value.name)
        placeholder.meta = dict(value.meta)
        env[value] = placeholder
    for constant in segment.constants:
        env[constant] = graph.node_copy(constant)
    for node in segment.nodes:
        env[node] = graph.node_copy(node, env.__getitem__)
    graph.output(tuple(env[value] for value in segment.outputs))
    return lazy_graph_module(graph_module, graph)
