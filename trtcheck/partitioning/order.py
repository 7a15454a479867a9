"""The order of reads and writes around an in-place write, in edges linear in the graph's size.

``trtcheck.lowering.graph.state_order`` states the rule: around an in-place write of a value, every read or
write of that value before it in graph order stays before it, and every one after it stays after it. It lists
an edge between the write and *every* other access of the value, so a buffer written ``w`` times and read
``r`` times costs ``w * (w + r)`` edges: quadratic in the graph's size (a KV cache, a counter updated every
step: the benchmark's ``with-ints`` graphs, docs/performance.md#partitioning).

``state_order`` here lists, per written value, its accesses in graph order as a chain of epochs split by the
writes: every access after a write follows that write, and every write follows the accesses since the write
before it (and that write). Every edge of the full rule is then a path of these edges (a write's later
accesses follow it through the later writes; an access before a write precedes it through the writes in
between), and every edge here is one of the full rule's, so both give the same transitive order with at most
two edges per access. What the partitioner asks of the order depends only on that transitive order:

* ``dependency_aware`` finalizes the other open list when the next node depends on one of its nodes; a node
  of the other list reached through a path reaches it through a direct edge from that list too (the first
  node of the path outside the list would have joined it, or finalized it: it is open, so neither happened);
* ``optimal``'s levels never decrease along an edge, and along a path they rise at least as much as along
  the one edge the path replaces, so the legal levels are the same;
* a segmentation respects every edge of the full rule exactly when it respects every edge here.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.fx

from trtcheck.lowering.graph import written_values

aten = torch.ops.aten

# Ops that read a value's metadata, never its elements (as ``lowering.graph.state_order`` excludes them): the
# shape an in-place write keeps. Compared by identity: hashing an OpOverload runs Python code.
_METADATA_READS = (
    aten.sym_size.int, aten.sym_stride.int, aten.sym_numel.default, aten.sym_storage_offset.default, aten.dim.default,
)


WRITES: dict[int, tuple[object, bool]] = {}  # id(target) -> (target, may_write): keyed by id, as hashing is slow


def may_write(target: object) -> bool:
    """Whether ``target`` is an ATen overload whose schema writes into one of its arguments."""
    if not isinstance(target, torch._ops.OpOverload):
        return False
    return any(argument.alias_info is not None and argument.alias_info.is_write for argument in target._schema.arguments)


def may_write_cached(target: object) -> bool:
    """``may_write`` of a call_function's target, remembered per target (a function or an overload: it lives as long
    as the process, so its id stays its own): what the partitioner asks of every node, once per round."""
    known = WRITES.get(id(target))
    if known is None or known[0] is not target:
        known = WRITES[id(target)] = (target, may_write(target))
    return known[1]


def state_order(nodes: Sequence[torch.fx.Node]) -> dict[torch.fx.Node, list[torch.fx.Node]]:
    """Per node of ``nodes``, the nodes that must run before it besides its inputs (see the module docstring):
    the transitive order of ``lowering.graph.state_order`` in at most two edges per access of a written value."""
    written: dict[torch.fx.Node, None] = {}
    for node in nodes:
        if node.op == "call_function" and may_write_cached(node.target):
            for value in written_values(node):
                written[value] = None
    if not written:  # the common case, and the one the partitioner's rounds pay for on every large graph
        return {}
    position = {node: index for index, node in enumerate(nodes)}
    extra: dict[torch.fx.Node, list[torch.fx.Node]] = {}
    for value in written:
        accesses = sorted(
            (position[user], user) for user in value.users
            if user in position and not any(user.target is op for op in _METADATA_READS)
        )
        last_write: torch.fx.Node | None = None
        since: list[torch.fx.Node] = []  # the accesses since the last write (or since the start)
        for _, access in accesses:
            if value in written_values(access):
                before = extra.setdefault(access, [])
                before.extend(since)
                if last_write is not None:
                    before.append(last_write)
                last_write, since = access, []
            else:
                if last_write is not None:
                    extra.setdefault(access, []).append(last_write)
                since.append(access)
    return extra


__all__ = ["state_order"]
