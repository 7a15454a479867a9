"""Cut nodes out of their graph as a standalone ``GraphModule``: a segment, or any set of nodes.

Conversion turns such a module into one ONNX model, and shape analysis runs it; both need the segment as
a function of exactly its boundary values: placeholders for ``segment.inputs`` (carrying the original
``meta["val"]``), the constants it reads as ``get_attr``, and a tuple of ``segment.outputs``. Localization and
reduction cut the sets of nodes they build sub-engines of the same way (``nodes_module``), so that a sub-engine is
what compile would have built of those nodes: one cutting rule, written once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
import torch.fx

from trtcheck.lowering.graph import graph_module as lazy_graph_module
from trtcheck.partitioning.partition import Segment
from trtcheck.partitioning.reasons import Target


def segment_module(
    graph_module: torch.fx.GraphModule, segment: Segment, outputs: Sequence[torch.fx.Node] | None = None
) -> torch.fx.GraphModule:
    """A ``GraphModule`` computing ``outputs`` (default ``segment.outputs``), as a tuple, from ``segment.inputs``."""
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
    graph.output(tuple(env[value] for value in (segment.outputs if outputs is None else outputs)))
    return lazy_graph_module(graph_module, graph)


def nodes_module(
    graph_module: torch.fx.GraphModule, nodes: Iterable[torch.fx.Node], outputs: Sequence[torch.fx.Node]
) -> tuple[torch.fx.GraphModule, list[torch.fx.Node]]:
    """Any set of ``nodes`` of ``graph_module`` (in graph order; contiguous or not) cut out as ``segment_module`` cuts
    a segment of them, computing ``outputs``; and the values its placeholders stand for (``Segment.inputs``). Every
    value the set reads from outside it is fed, not computed: what a sub-engine of these nodes takes."""
    segment = Segment(Target.TENSORRT, list(nodes))
    return segment_module(graph_module, segment, outputs), segment.inputs
