"""Segmentation: group compute nodes, already given a target each, into segments; then merge.

Both strategies are one linear pass over the nodes in graph order:

* ``naive`` starts a new segment at every change of target.
* ``dependency_aware`` ("Dependency Aware Partitioning" of Torch-TensorRT's partitioning design) keeps a TensorRT list and a Torch
  list open at once and finalizes a list only when the next node depends on it and has the other target
  (its data, or the order of reads and writes around an in-place write: ``order.state_order``).
  Nodes thereby move across a boundary only past nodes they do not depend on, so every segment's inputs
  are produced by earlier segments, and for the same targets it never has more segments than ``naive``.

In both, ``operator.getitem`` joins the segment of the tuple it indexes (even one already finalized), so a
tuple never crosses a segment boundary.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence

import torch.fx

from trtcheck.partitioning.optimal import optimal
from trtcheck.partitioning.order import state_order
from trtcheck.partitioning.partition import Segment
from trtcheck.partitioning.reasons import Target

Segmenter = Callable[[Sequence[torch.fx.Node], dict[torch.fx.Node, Target]], list[Segment]]

_GETITEM = operator.getitem


def naive(nodes: Sequence[torch.fx.Node], targets: dict[torch.fx.Node, Target]) -> list[Segment]:
    """Greedy: a new segment whenever the target changes."""
    segments: list[Segment] = []
    segment_of: dict[torch.fx.Node, Segment] = {}
    current: Segment | None = None
    for node in nodes:
        if node.target is _GETITEM and node.op == "call_function":  # ``is_getitem``, inlined: asked of every node
            producer = segment_of.get(node.args[0])
            if producer is not None:  # joins the segment of the tuple it indexes
                producer.nodes.append(node)
                segment_of[node] = producer
                continue
        target = targets[node]
        if current is None or current.target is not target:
            current = Segment(target)
            segments.append(current)
        current.nodes.append(node)
        segment_of[node] = current
    return segments


def _depends_on(
    node: torch.fx.Node,
    segment: Segment,
    get: Callable[[torch.fx.Node], Segment | None],
    order: Mapping[torch.fx.Node, Sequence[torch.fx.Node]] | None,
) -> bool:
    """True when ``node`` reads a value of the open list ``segment`` or must follow one of its nodes around an
    in-place write (``order``): what finalizes that list in ``dependency_aware``. ``get`` is the node -> list map."""
    for value in node.all_input_nodes:
        if get(value) is segment:
            return True
    before = order.get(node) if order else None
    return bool(before) and any(get(value) is segment for value in before)


def dependency_aware(
    nodes: Sequence[torch.fx.Node],
    targets: dict[torch.fx.Node, Target],
    order: Mapping[torch.fx.Node, Sequence[torch.fx.Node]] | None = None,
) -> list[Segment]:
    """Two open lists; a list is finalized only when a node of the other target depends on it (reads one of its
    values, or must follow one of its nodes around an in-place write: ``state_order``).

    ``order`` is ``state_order(nodes)`` when the caller has it already (the driver's rounds reuse it).
    """
    if order is None:
        order = state_order(nodes)
    trt = Target.TENSORRT
    segments: list[Segment] = []
    open_trt: Segment | None = None  # the open lists, and the position each was opened at
    open_torch: Segment | None = None
    opened_trt = opened_torch = 0
    segment_of: dict[torch.fx.Node, Segment] = {}  # every node placed so far, open list or finalized
    get = segment_of.get
    for position, node in enumerate(nodes):
        if node.target is _GETITEM and node.op == "call_function":  # ``is_getitem``, inlined
            producer = get(node.args[0])
            if producer is not None:
                producer.nodes.append(node)
                segment_of[node] = producer
                continue
        if targets[node] is trt:
            if open_torch is not None and _depends_on(node, open_torch, get, order):
                segments.append(open_torch)
                open_torch = None
            current = open_trt
            if current is None:
                current = open_trt = Segment(trt)
                opened_trt = position
        else:
            if open_trt is not None and _depends_on(node, open_trt, get, order):
                segments.append(open_trt)
                open_trt = None
            current = open_torch
            if current is None:
                current = open_torch = Segment(Target.TORCH)
                opened_torch = position
        current.nodes.append(node)
        segment_of[node] = current
    # No open list depends on the other (a dependency would have finalized it): emit the older first.
    still_open = [(opened, segment) for opened, segment in ((opened_trt, open_trt), (opened_torch, open_torch)) if segment is not None]
    segments.extend(segment for _, segment in sorted(still_open, key=lambda pair: pair[0]))
    return segments


# "optimal" alone segments one set of targets; the driver also runs dependency_aware for it and keeps the
# better end result (``partitioner._best_candidate``).
SEGMENTERS: dict[str, Segmenter] = {"naive": naive, "dependency_aware": dependency_aware, "optimal": optimal}
