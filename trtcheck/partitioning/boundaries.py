"""Dependency analysis (of Torch-TensorRT's partitioning design, docs/partitioning.md): Tensor-only TensorRT
boundaries, and ``min_block_size``.

An engine takes and returns Tensors only, so a non-Tensor value (an int, a SymInt, a tuple) may not cross
the boundary of a TensorRT segment. Which rule applies depends on who produces and who consumes it:

=====================  =====================  ==================================================================
producer               consumer               rule
=====================  =====================  ==================================================================
TensorRT (segment A)   TensorRT (segment B)   *copy*: the producer is recomputed inside B (a copy of the node is
                                              inserted before its first user in B); the copy's own non-Tensor
                                              inputs are handled the same way on the next round, so the whole
                                              producer chain moves over. Its Tensor inputs become B's inputs.
TensorRT               Torch                  a *size computation* (``sym_size``, SymInt arithmetic: pure and cheap,
                                              ``is_size_computation``) is copied into the Torch segment the same
                                              way, so TensorRT keeps it for its own users; any other producer
                                              falls back to Torch.
TensorRT               graph output           the producer falls back to Torch.
Torch or graph input   TensorRT               the consumer falls back to Torch.
=====================  =====================  ==================================================================

``operator.getitem`` never meets these rules: it joins its producer's segment during segmentation.
Each rule changes targets (or the graph), so the driver re-segments and repeats until nothing changes.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch.fx

from trtcheck.errors import GraphMustChange
from trtcheck.partitioning.nodes import is_size_computation, node_is_tensor
from trtcheck.partitioning.partition import Segment
from trtcheck.partitioning.reasons import Reason, ReasonKind, Target
from trtcheck.text import plural


def enforce_tensor_boundaries(
    graph: torch.fx.Graph,
    segments: Sequence[Segment],
    targets: dict[torch.fx.Node, Target],
    reasons: dict[torch.fx.Node, Reason],
    may_change_graph: bool = True,
    non_tensor: Sequence[torch.fx.Node] | None = None,
    changes: GraphChanges | None = None,
    index_of: dict[torch.fx.Node, int] | None = None,
) -> bool:
    """Apply the table above once; True when a target or the graph changed.

    Only edges that carry a non-Tensor value can break the rule, and those are few, so the pass walks the
    users of non-Tensor values instead of every edge of the graph. ``non_tensor`` is ``non_tensor_values(graph)``
    when the caller has it (the driver's rounds keep it while the graph is unchanged); the copies the rule
    inserts, and the originals it erases, are recorded in ``changes``, when given (the caller's lists of the
    graph's nodes are then stale).
    ``index_of``: each node's segment index, when the caller has it (``segment_index``; copies are added to it).
    """
    if non_tensor is None:
        non_tensor = non_tensor_values(graph)
    if not non_tensor:
        return False
    if index_of is None:
        index_of = segment_index(segments)
    changed = False
    for value in non_tensor:
        for user in list(value.users):
            if user.op == "output":
                if targets.get(value) is Target.TENSORRT:
                    _fall_back(value, targets, reasons, f"returns the non-Tensor value {_shown(value)} from the graph")
                    changed = True
                continue
            position = index_of.get(user)
            if position is None or position == index_of.get(value) or value not in user.all_input_nodes:
                continue  # an unsegmented user, an internal edge, or a user that already reads a copy
            if not may_change_graph and targets.get(value) is Target.TENSORRT and (
                targets[user] is Target.TENSORRT or is_size_computation(value)
            ):
                raise GraphMustChange(value.name)
            changed |= _fix_edge(graph, value, user, segments[position], position, targets, reasons, index_of, changes)
    return changed


@dataclass
class GraphChanges:
    """What one application of the rules did to the graph: the copies it inserted and the originals it erased."""

    copies: list[torch.fx.Node] = field(default_factory=list)
    erased: list[torch.fx.Node] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.copies or self.erased)


def segment_index(segments: Sequence[Segment]) -> dict[torch.fx.Node, int]:
    """Each node's segment: its index in ``segments``."""
    return {node: i for i, segment in enumerate(segments) for node in segment.nodes}


def non_tensor_values(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    """The nodes of ``graph`` whose value is not a Tensor (nor a list of Tensors), constants and the output aside:
    the only values ``enforce_tensor_boundaries`` has to look at, in graph order."""
    found = []
    for node in graph.nodes:
        if not isinstance(node.meta.get("val"), torch.Tensor) and node.op not in ("get_attr", "output") and not node_is_tensor(node):
            found.append(node)
    return found


def _fix_edge(
    graph: torch.fx.Graph,
    value: torch.fx.Node,
    consumer: torch.fx.Node,
    segment: Segment,
    position: int,
    targets: dict[torch.fx.Node, Target],
    reasons: dict[torch.fx.Node, Reason],
    index_of: dict[torch.fx.Node, int],
    changes: GraphChanges | None = None,
) -> bool:
    producer_target = targets.get(value)  # None: a graph input
    consumer_target = targets[consumer]
    if producer_target is Target.TENSORRT and (consumer_target is Target.TENSORRT or is_size_computation(value)):
        copy = _copy_into(graph, value, segment, targets, reasons, consumer_target, index_of, position)
        index_of[copy] = position
        if changes is not None:
            changes.copies.append(copy)
            if not value.users:  # ``_copy_into`` erased it
                changes.erased.append(value)
        return True
    if producer_target is Target.TENSORRT:
        _fall_back(value, targets, reasons, f"its non-Tensor result {_shown(value)} is read by Torch node {consumer.name}")
        return True
    if consumer_target is Target.TENSORRT:
        source = "graph input" if producer_target is None else "Torch node"
        _fall_back(consumer, targets, reasons, f"reads the non-Tensor value of {source} {value.name}: {_shown(value)}")
        return True
    return False


def _shown(value: torch.fx.Node) -> str:
    """The non-Tensor value that caused a fallback, as traced (``4 (int)``, ``s0 (SymInt)``), for explain()."""
    traced = value.meta.get("val")
    if isinstance(traced, (tuple, list)):
        inner = ", ".join("Tensor" if isinstance(v, torch.Tensor) else f"{v}" for v in traced)
        return f"({inner}) ({type(traced).__name__})"
    text = repr(traced) if traced is not None else "unknown"
    return f"{text[:60]} ({type(traced).__name__})" if traced is not None else text


def _fall_back(node: torch.fx.Node, targets: dict, reasons: dict, why: str) -> None:
    if targets.get(node) is Target.TENSORRT:
        targets[node] = Target.TORCH
        reasons[node] = Reason(ReasonKind.NON_TENSOR_BOUNDARY, why)


def _copy_into(
    graph: torch.fx.Graph,
    value: torch.fx.Node,
    segment: Segment,
    targets: dict[torch.fx.Node, Target],
    reasons: dict[torch.fx.Node, Reason],
    target: Target = Target.TENSORRT,
    index_of: dict[torch.fx.Node, int] | None = None,
    position: int | None = None,
) -> torch.fx.Node:
    """Recompute ``value`` inside ``segment`` (whose target is ``target``): one copy before its first user
    there, shared by all.

    ``index_of`` and ``position`` (each node's segment index, and ``segment``'s) find its users there among the
    value's few users, and bisection their places (``_find_in``), not a walk over the segment: a walk per copy made
    many copies into one large segment (a dynamic-shape model's sizes, read all over one engine) cost copies
    times the segment's length (2,000 copies into 20k nodes: 2.5 s of list searches).
    """
    found = None if index_of is None else _find_in(segment.nodes, [user for user in value.users if index_of.get(user) == position])
    if found is None:
        users = [user for user in segment.nodes if user in value.users]
        first = segment.nodes.index(users[0])
    else:
        first, users = found
    with graph.inserting_before(users[0]):
        copy = graph.node_copy(value)
    for user in users:
        user.replace_input_with(value, copy)
    targets[copy] = target
    if target is Target.TENSORRT:
        reasons[copy] = Reason(
            ReasonKind.CONVERTIBLE, f"copy of {value.name}: its non-Tensor result is recomputed in the TensorRT segment that reads it"
        )
    else:
        reasons[copy] = Reason(
            ReasonKind.NON_TENSOR_BOUNDARY,
            f"copy of {value.name} = {_shown(value)}: a size computation recomputed in the Torch segment that reads it",
        )
    segment.nodes.insert(first, copy)
    if not value.users:  # every user now reads the copy: the original is dead
        graph.erase_node(value)
        targets.pop(value, None)
        reasons.pop(value, None)
    return copy


def _find_in(nodes: list[torch.fx.Node], users: list[torch.fx.Node]) -> tuple[int, list[torch.fx.Node]] | None:
    """The list index of the first of ``users`` in ``nodes`` and ``users`` in the list's order, found by bisection:
    a segment's nodes are in graph order (nodes compare by their place in the graph), except after a ``getitem``
    joined a segment another was then merged into. Each user is checked where bisection puts it; None when one is
    not there (that order, or a torch.fx whose nodes do not compare), and the caller walks the list instead."""
    try:
        places = []
        for user in users:
            place = bisect.bisect_left(nodes, user)
            if place >= len(nodes) or nodes[place] is not user:
                return None
            places.append((place, user))
    except TypeError:  # pragma: no cover - nodes that do not compare
        return None
    if not places:
        return None
    places.sort(key=lambda pair: pair[0])
    return places[0][0], [user for _, user in places]


def apply_min_block_size(
    segments: Sequence[Segment],
    min_block_size: int,
    targets: dict[torch.fx.Node, Target],
    reasons: dict[torch.fx.Node, Reason],
    getitems: Sequence[int] | None = None,
) -> bool:
    """Send every TensorRT segment smaller than ``min_block_size`` to Torch; True when any moved.

    ``getitems``: how many ``getitem`` nodes each segment holds, when the caller counted them (the driver does,
    from the few ``getitem``s of the graph): a segment's size is then its length less those, without a visit
    to each of its nodes (``Segment.size``).
    """
    changed = False
    for index, segment in enumerate(segments):
        if segment.target is not Target.TENSORRT:
            continue
        nodes = segment.nodes
        size = segment.size if getitems is None else len(nodes) - getitems[index]
        if size < min_block_size:
            reason = Reason(
                ReasonKind.MIN_BLOCK_SIZE,
                f"its TensorRT segment had {plural(size, 'compute node')} < min_block_size={min_block_size}",
            )
            for node in nodes:
                targets[node] = Target.TORCH
                reasons[node] = reason  # frozen: one per segment, as equal as one per node
            changed = True
    return changed
