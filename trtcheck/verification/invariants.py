"""Invariants every sound ``Partition`` satisfies, checked from the partition alone.

Each check is independent of how the partition was made, so it catches a bug in the partitioner as well as
a partition corrupted by hand. A violation names the rule, the segment and the node.

Rules (``Violation.rule``):

- ``placement``: every compute node in exactly one segment, nothing else in any segment.
- ``topological``: running the segments in order, every value is defined before it is read.
- ``tensor_boundary``: TensorRT segments take and return Tensors (or lists of Tensors) only.
- ``unsupported`` / ``forced_op`` / ``forced_module``: no TensorRT node lacks a converter or is forced
  to Torch by the settings.
- ``min_block_size``: no TensorRT segment is shorter than ``min_block_size``.
- ``merge``: no two adjacent segments could have been one.
- ``control_flow``: a control-flow node (``torch.cond``, ``while_loop``) runs in a Torch segment of its own,
  marked ``do_not_merge``, which holds nothing else but the ``getitem``s of its result.
- ``subpartition``: every branch of every control-flow node has a sub-partition, and every sub-partition is
  a branch of one. Every rule above holds in every sub-partition too: its violations name the branch
  (``branch true_graph_0``, nested ones ``true_graph_0/false_graph_0``).
- ``segment_count`` (``segment_count_violations``, which ``verify`` checks besides ``check_invariants``): for the
  partition's own targets, dependency-aware segmentation makes no more segments than naive. It runs both segmenters
  on those targets: no phase records what naive would have made.
- ``fallback`` (``fallback_violations``): no TensorRT segment fell back to PyTorch (lost coverage; ``verify`` accepts
  it with ``allow_fallbacks``).
- ``validator_error``: no node's reason is ``VALIDATOR_ERROR`` from a *built-in* converter (one
  registered by ``trtcheck.conversion.ops`` itself, ``Converter.builtin``). Partitioning survives such a
  crash (the node runs in Torch), but it is a trtcheck bug that would otherwise silently look like "no
  converter", so verification fails on it. A crash in a *user's* converter (``converters.register``,
  with or without ``override=True``) or in a user's ``support`` callable stays a reason only: it is
  reported in ``Partition.explain`` but it is the user's code, not a broken partition.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch.fx

from trtcheck.conversion import registry
from trtcheck.lowering.graph import state_order, written_values
from trtcheck.names import ModuleMatcher, resolve_modules, resolve_ops
from trtcheck.partitioning.control_flow import branch_modules
from trtcheck.partitioning.decisions import Support, judge_with
from trtcheck.partitioning.nodes import is_compute, is_control_flow, is_getitem, node_is_tensor
from trtcheck.partitioning.partition import Partition, merge_adjacent, mergeable
from trtcheck.partitioning.reasons import ReasonKind, Target
from trtcheck.partitioning.segmentation import dependency_aware, naive


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str
    segment: int | None = None
    node: str | None = None
    branch: str | None = None  # the sub-partition's branch path (``true_graph_0``); None: the model's own graph

    def inside(self, branch: str) -> Violation:
        """This violation of a sub-partition (or stitched branch), named from its parent: under ``branch``."""
        return dataclasses.replace(self, branch=f"{branch}/{self.branch}" if self.branch else branch)

    def __str__(self) -> str:
        where = [f"branch {self.branch}"] if self.branch is not None else []
        if self.segment is not None:
            where.append(f"segment @{self.segment}")
        if self.node is not None:
            where.append(f"node {self.node}")
        return f"[{self.rule}] {', '.join(where)}: {self.message}" if where else f"[{self.rule}] {self.message}"


def check_invariants(partition: Partition, support: Support = None) -> list[Violation]:
    """Every invariant violation of ``partition``; empty when it is sound.

    ``support`` must be what the partition was made with (``None``: the converter registry). Sub-partitions
    (branches of control flow) are checked too, recursively.
    """
    forced_modules = resolve_modules(partition.settings.torch_executed_modules, partition.graph_module.graph)
    return _check(partition, support, forced_modules)


def _check(partition: Partition, support: Support, forced_modules: ModuleMatcher) -> list[Violation]:
    violations: list[Violation] = []
    violations += _placement(partition)
    violations += _topological_order(partition)
    violations += _tensor_boundaries(partition)
    violations += _settings_honoured(partition, support, forced_modules)
    violations += _block_sizes(partition)
    violations += _merged(partition)
    violations += _validator_errors(partition, support)
    violations += _control_flow(partition)
    violations += _branches(partition, support, forced_modules)
    return violations


def _placement(partition: Partition) -> list[Violation]:
    """Every compute node in exactly one segment; nothing else in any segment."""
    found: list[Violation] = []
    placed: dict[torch.fx.Node, int] = {}
    graph_nodes = set(partition.graph_module.graph.nodes)
    for index, segment in enumerate(partition.segments):
        for node in segment.nodes:
            if node not in graph_nodes or not is_compute(node):
                found.append(Violation("placement", f"{node.op} node is not a compute node of the graph", index, node.name))
            elif node in placed:
                found.append(Violation("placement", f"also in segment @{placed[node]}", index, node.name))
            else:
                placed[node] = index
    for node in partition.compute_nodes:
        if node not in placed:
            found.append(Violation("placement", "compute node in no segment", None, node.name))
    return found


def _topological_order(partition: Partition) -> list[Violation]:
    """Running the segments in order, every value is defined before it is read, and every read or write of a
    value that is written in place keeps its graph order around the write (``state_order``): a read of the old
    value after the write, or of the new one before it, computes something else than the model."""
    found: list[Violation] = []
    graph_nodes = list(partition.graph_module.graph.nodes)
    defined = {n for n in graph_nodes if n.op in ("placeholder", "get_attr")}
    order = state_order(graph_nodes)
    for index, segment in enumerate(partition.segments):
        if not segment.nodes:
            found.append(Violation("topological", "empty segment", index))
        for node in segment.nodes:
            for value in node.all_input_nodes:
                if value not in defined:
                    found.append(Violation("topological", f"reads {value.name} before it is computed", index, node.name))
            for before in order.get(node, ()):
                if before not in defined:
                    written = ", ".join(v.name for v in (*written_values(node), *written_values(before)))
                    found.append(Violation(
                        "state_order",
                        f"runs before {before.name}, which the graph orders first around the in-place write of {written}: "
                        "a read would see the value of another step",
                        index, node.name,
                    ))
            defined.add(node)
    output = next(n for n in reversed(partition.graph_module.graph.nodes) if n.op == "output")
    for value in output.all_input_nodes:
        if value not in defined:
            found.append(Violation("topological", f"graph output {value.name} is never computed", None, value.name))
    return found


def _tensor_boundaries(partition: Partition) -> list[Violation]:
    """TensorRT segments take and return Tensors (or lists of Tensors) only."""
    found = []
    for index, segment in enumerate(partition.segments):
        if segment.target is not Target.TENSORRT:
            continue
        for kind, values in (("input", segment.inputs), ("output", segment.outputs)):
            for value in values:
                if not node_is_tensor(value):
                    found.append(Violation(
                        "tensor_boundary",
                        f"{kind} {value.name} is a {type(value.meta.get('val')).__name__}, not a Tensor",
                        index, value.name,
                    ))
    return found


def _settings_honoured(partition: Partition, support: Support, forced_modules: ModuleMatcher) -> list[Violation]:
    """No unsupported, forced-op or forced-module node in a TensorRT segment."""
    judge = judge_with(support)
    forced_ops = resolve_ops(partition.settings.torch_executed_ops)
    found = []
    for index, segment in enumerate(partition.segments):
        if segment.target is not Target.TENSORRT:
            continue
        for node in segment.nodes:
            if is_getitem(node):
                continue  # follows its producer, which is checked itself
            if forced_ops(node.target):
                found.append(Violation("forced_op", f"{node.target} is in torch_executed_ops", index, node.name))
            elif (module := forced_modules(node)) is not None:
                found.append(Violation("forced_module", f"inside forced module {module!r}", index, node.name))
            elif not judge(node):
                found.append(Violation("unsupported", f"{node.target} has no converter", index, node.name))
    return found


def _validator_errors(partition: Partition, support: Support) -> list[Violation]:
    """No node fell back to Torch because a built-in converter's validator raised."""
    if support is not None and support is not registry.is_convertible:
        return []  # a user's support callable: its crashes are the user's business
    found = []
    for node, reason in partition.reasons.items():
        if reason.kind is not ReasonKind.VALIDATOR_ERROR or node.op != "call_function":
            continue
        converter = registry.get(node.target)
        if converter is not None and converter.builtin:
            index = next((i for i, segment in enumerate(partition.segments) if node in segment.nodes), None)
            found.append(Violation("validator_error", f"built-in converter: {reason.detail}", index, node.name))
    return found


def _block_sizes(partition: Partition) -> list[Violation]:
    if partition.settings.require_full_compilation:
        return []
    minimum = partition.settings.min_block_size
    return [
        Violation("min_block_size", f"TensorRT segment of {segment.size} compute nodes < {minimum}", index)
        for index, segment in enumerate(partition.segments)
        if segment.target is Target.TENSORRT and segment.size < minimum
    ]


def _merged(partition: Partition) -> list[Violation]:
    segments = partition.segments
    return [
        Violation("merge", f"adjacent {segments[i].target.display} segments @{i} and @{i + 1} should be merged", i)
        for i in range(len(segments) - 1)
        if mergeable(segments[i], segments[i + 1])
    ]


def _control_flow(partition: Partition) -> list[Violation]:
    """Each control-flow node alone (with the ``getitem``s of its result) in a ``do_not_merge`` Torch segment."""
    found = []
    for index, segment in enumerate(partition.segments):
        flows = [node for node in segment.nodes if is_control_flow(node)]
        if not flows:
            continue
        for node in flows:
            if segment.target is Target.TENSORRT:
                found.append(Violation("control_flow", "control-flow node in a TensorRT segment: no engine can run it", index, node.name))
            if not segment.do_not_merge:
                found.append(Violation("control_flow", "the segment of a control-flow node is not do_not_merge", index, node.name))
            strays = ", ".join(user.name for user in node.users if user.op != "output" and user not in segment.nodes)
            if strays:
                found.append(Violation("control_flow", f"getitem(s) {strays} of its result lie in other segments", index, node.name))
        others = [node.name for node in segment.nodes if node not in flows and not (is_getitem(node) and node.args[0] in flows)]
        if others or len(flows) > 1:
            merged = ", ".join(others + [node.name for node in flows[1:]])
            found.append(Violation("control_flow", f"control-flow node merged with other nodes ({merged})", index, flows[0].name))
    return found


def _branches(partition: Partition, support: Support, forced_modules: ModuleMatcher) -> list[Violation]:
    """Every branch partitioned, every sub-partition a branch; then every rule inside each, naming the branch."""
    owners = partition.branch_owners()
    found = [
        Violation("subpartition", f"branch {name} has no sub-partition (Partition.branches)", node=owners[name].name)
        for name in sorted(owners.keys() - partition.branches.keys())
    ]
    for name, sub in partition.branches.items():
        if name not in owners:
            found.append(Violation("subpartition", "no control-flow node of the graph calls this branch", branch=name))
            continue
        inside = _check(sub, support, branch_modules(forced_modules, owners[name]))
        found += [violation.inside(name) for violation in inside]
    return found


def segment_count_violations(partition: Partition) -> list[Violation]:
    """Dependency-aware segmentation must never make more segments than naive for the same targets (the
    partition's own: each node's segment's target)."""
    targets = {node: segment.target for segment in partition.segments for node in segment.nodes}
    nodes = [node for node in partition.compute_nodes if node in targets]
    if len(nodes) != len(targets):  # a segment holds a non-compute node: "placement" already says so
        return []
    aware, greedy = len(merge_adjacent(dependency_aware(nodes, targets))), len(merge_adjacent(naive(nodes, targets)))
    if aware > greedy:
        return [Violation("segment_count", f"dependency-aware made {aware} segments, naive {greedy}, for the same targets")]
    return []


def fallback_violations(partition: Partition) -> list[Violation]:
    """A ``fallback`` violation per TensorRT segment that fell back to PyTorch (``Partition.fallbacks``): lost
    coverage, which ``verify`` fails on unless ``allow_fallbacks``."""
    return [Violation("fallback", f"{line} (pass allow_fallbacks=True to accept it)") for line in partition.fallbacks]
