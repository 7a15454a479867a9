"""Segmentation: group compute nodes, already given a target each, into segments; then merge.

Both strategies are one linear pass over the nodes in graph order:

* ``naive`` starts a new segment at every change of target.
* ``dependency_aware`` (the seed's "Dependency Aware Partitioning") keeps a TensorRT list and a Torch
  list open at once and finalizes a list only when the next node depends on it and has the other target
  (its data, or the order of reads and writes around an in-place write: ``lowering.graph.state_order``).
  Nodes thereby move across a boundary only past nodes they do not depend on, so every segment's inputs
  are produced by earlier segments, and for the same targets it never has more segments than ``naive``.

In both, ``operator.getitem`` joins the segment of the tuple it indexes (even one already finalized), so a
tuple never crosses a segment boundary.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch.fx

from trtcheck.lowering.graph import state_order
from trtcheck.partitioning.nodes import is_getitem
from trtcheck.partitioning.optimal import optimal
from trtcheck.partitioning.partition import Segment
from trtcheck.partitioning.reasons import Target

Segmenter = Callable[[Sequence[torch.fx.Node], dict[torch.fx.Node, Target]], list[Segment]]


def naive(nodes: Sequence[torch.fx.Node], targets: dict[torch.fx.Node, Target]) -> list[Segment]:
    """Greedy: a new segment whenever the target changes."""
    segments: list[Segment] = []
    segment_of: dict[torch.fx.Node, Segment] = {}
    for node in nodes:
        if _join_producer(node, segment_of):
            continue
        target = targets[node]
        if not segments or segments[-1].target is not target:
            segments.append(Segment(target))
        segments[-1].nodes.append(node)
        segment_of[node] = segments[-1]
    return segments


def _join_producer(node: torch.fx.Node, segment_of: dict[torch.fx.Node, Segment]) -> bool:
    """Put a ``getitem`` into its producer's segment; False for any other node."""
    if not is_getitem(node):
        return False
    segment = segment_of.get(node.args[0])
    if segment is None:
        return False
    segment.nodes.append(node)
    segment_of[node] = segment
    return True


def dependency_aware(nodes: Sequence[torch.fx.Node], targets: dict[torch.fx.Node, Target]) -> list[Segment]:
    """Two open lists; a list is finalized only when a node of the other target depends on it (reads one of its
    values, or must follow one of its nodes around an in-place write: ``state_order``)."""
    order = state_order(nodes)
    segments: list[Segment] = []
    open_lists: dict[Target, Segment] = {}
    opened_at: dict[Target, int] = {}
    segment_of: dict[torch.fx.Node, Segment] = {}  # every node placed so far, open list or finalized
    for position, node in enumerate(nodes):
        if _join_producer(node, segment_of):
            continue
        target = targets[node]
        other = open_lists.get(Target.TORCH if target is Target.TENSORRT else Target.TENSORRT)
        if other is not None and any(segment_of.get(value) is other for value in (*node.all_input_nodes, *order.get(node, ()))):
            segments.append(open_lists.pop(other.target))
        current = open_lists.get(target)
        if current is None:
            current = open_lists[target] = Segment(target)
            opened_at[target] = position
        current.nodes.append(node)
        segment_of[node] = current
    # No open list depends on the other (a dependency would have finalized it): emit the older first.
    segments.extend(sorted(open_lists.values(), key=lambda segment: opened_at[segment.target]))
    return segments


# "optimal" alone segments one set of targets; the driver also runs dependency_aware for it and keeps the
# better end result (``partitioner._best_candidate``).
SEGMENTERS: dict[str, Segmenter] = {"naive": naive, "dependency_aware": dependency_aware, "optimal": optimal}
