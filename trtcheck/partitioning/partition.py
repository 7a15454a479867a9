"""The partitioning phase's data: ``Target``, ``Reason``, ``Segment`` and ``Partition``.

These are plain objects (the seed's ``SegmentedBlock`` and ``PartitionInfo``): tests and downstream code
may build or edit them by hand, so anything derivable (a segment's inputs and outputs) is computed from
the nodes on demand rather than stored and left to go stale.
"""

from __future__ import annotations

import enum
import operator
import textwrap
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from trtcheck.lowering import is_mutable_state, symbol_ranges
from trtcheck.settings import Settings

NOT_SEGMENTED = ("placeholder", "get_attr", "output")


class Target(str, enum.Enum):
    """Where a node or segment runs."""

    TENSORRT = "tensorrt"
    TORCH = "torch"

    @property
    def display(self) -> str:
        return "TensorRT" if self is Target.TENSORRT else "Torch"


class ReasonKind(str, enum.Enum):
    """Why a node runs where it runs; every node of a partition has exactly one final reason."""

    CONVERTIBLE = "convertible"  # a converter exists and accepts the node: TensorRT
    NO_CONVERTER = "no_converter"  # no converter, or its validator rejects the node
    VALIDATOR_ERROR = "validator_error"  # a converter's validator raised: a bug in it, not a refusal
    FORCED_OP = "forced_op"  # the op is in torch_executed_ops
    FORCED_MODULE = "forced_module"  # the node lies inside a module of torch_executed_modules
    NON_TENSOR_BOUNDARY = "non_tensor_boundary"  # linked to Torch through a non-Tensor value
    MIN_BLOCK_SIZE = "min_block_size"  # its TensorRT run was shorter than min_block_size
    FOLLOWS_PRODUCER = "follows_producer"  # operator.getitem runs where the tuple it indexes was made
    CONVERSION_FAILED = "conversion_failed"  # its TensorRT segment failed to convert or build: PyTorch
    CONTROL_FLOW = "control_flow"  # torch.cond / while_loop: its own Torch segment; its branches are partitioned apart


@dataclass(frozen=True)
class Reason:
    kind: ReasonKind
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind.value}: {self.detail}" if self.detail else self.kind.value


def is_compute(node: torch.fx.Node) -> bool:
    """Nodes that segments hold: everything but graph inputs, constants and the output."""
    return node.op not in NOT_SEGMENTED


def counts_toward_block_size(node: torch.fx.Node) -> bool:
    """``getitem`` only unpacks a result; it does no work an engine could save."""
    return not (node.op == "call_function" and node.target is operator.getitem)


def is_tensor_value(value: Any) -> bool:
    """True for a Tensor or a list of Tensors: the only values a TensorRT engine can take or return."""
    if isinstance(value, torch.Tensor):
        return True
    return isinstance(value, list) and bool(value) and all(isinstance(v, torch.Tensor) for v in value)


def node_is_tensor(node: torch.fx.Node) -> bool:
    return is_tensor_value(node.meta.get("val"))


@dataclass(eq=False)
class Segment:
    """A run of nodes with one target, executed as a unit (one engine, or one block of ATen calls)."""

    target: Target
    nodes: list[torch.fx.Node] = field(default_factory=list)
    do_not_merge: bool = False

    def _node_set(self) -> set[torch.fx.Node]:
        return set(self.nodes)

    @property
    def inputs(self) -> list[torch.fx.Node]:
        """Values the segment reads from outside itself (graph inputs or other segments), first use first.

        ``get_attr`` constants are not inputs: they travel with every segment that uses them. Mutable
        state (``is_mutable_state``) is, so that every call reads its current value.
        """
        members = self._node_set()
        seen: dict[torch.fx.Node, None] = {}
        for node in self.nodes:
            for value in node.all_input_nodes:
                if value not in members and (value.op != "get_attr" or is_mutable_state(value)):
                    seen.setdefault(value, None)
        return list(seen)

    @property
    def outputs(self) -> list[torch.fx.Node]:
        """Values of this segment read by a later segment or by the graph's output, in node order."""
        members = self._node_set()
        return [node for node in self.nodes if any(user not in members for user in node.users)]

    @property
    def constants(self) -> list[torch.fx.Node]:
        """The ``get_attr`` nodes (parameters, buffers, constants) this segment uses; mutable state excluded."""
        seen: dict[torch.fx.Node, None] = {}
        for node in self.nodes:
            for value in node.all_input_nodes:
                if value.op == "get_attr" and not is_mutable_state(value):
                    seen.setdefault(value, None)
        return list(seen)

    @property
    def size(self) -> int:
        """Compute nodes that count toward ``min_block_size``."""
        return sum(map(counts_toward_block_size, self.nodes))

    def format(self, index: int, ranges: Mapping[str, tuple[int, int | None]] | None = None) -> str:
        """The seed's ``Segment Block @i`` rendering. With ``ranges`` (the graph's symbol ranges), a value of
        dynamic shape shows each size's min..opt..max: ``Tensor[2, 2..16..128, 64]``."""
        inputs = self.inputs
        params = ",\n      ".join(f"%{value.name} : {_type_name(value, ranges)}" for value in inputs)
        lines = [f"Segment Block @{index}:", f"    Target: {self.target.display}", f"    Graph: graph({params}):"]
        for node in self.nodes:
            args = ", ".join(map(_format_arg, node.args))
            kwargs = ", ".join(f"{k}={_format_arg(v)}" for k, v in node.kwargs.items())
            call = ", ".join(filter(None, [args, kwargs]))
            lines.append(f"      %{node.name} : {_type_name(node, ranges)} = {_op_name(node)}({call})")
        lines.append(f"      return ({', '.join('%' + o.name for o in self.outputs)})")
        return "\n".join(lines)


def _type_name(node: torch.fx.Node, ranges: Mapping[str, tuple[int, int | None]] | None = None) -> str:
    value = node.meta.get("val")
    if isinstance(value, torch.Tensor):
        if ranges is not None and not all(isinstance(d, int) for d in value.shape):
            from trtcheck.shape_analysis import dim_range  # it imports this module

            return f"Tensor[{', '.join(str(dim_range(d, ranges)) for d in value.shape)}]"
        return "Tensor"
    if is_tensor_value(value):
        return "Tensor[]"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join("Tensor" if isinstance(v, torch.Tensor) else type(v).__name__ for v in value) + ")"
    return type(value).__name__ if value is not None else "Any"


def _op_name(node: torch.fx.Node) -> str:
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        namespace, _, rest = target.name().partition("::")
        return f"{namespace}::{rest}"
    if target is operator.getitem:
        return "prim::TupleIndex"
    return getattr(target, "__name__", str(target))


def _format_arg(arg: Any) -> str:
    if isinstance(arg, torch.fx.Node):
        return f"%{arg.name}"
    if isinstance(arg, (list, tuple)):
        inner = ", ".join(map(_format_arg, arg))
        return f"[{inner}]"
    return repr(arg)


@dataclass(eq=False)
class Partition:
    """The result of partitioning one graph: segments in execution order and a reason for every node."""

    graph_module: torch.fx.GraphModule
    segments: list[Segment]
    reasons: dict[torch.fx.Node, Reason]
    settings: Settings = field(default_factory=Settings)
    fallbacks: list[str] = field(default_factory=list)  # TensorRT segments that failed to compile, and why
    # The partition of every branch (body, cond_fn) graph of a torch.cond / while_loop node, by the name of the
    # branch's GraphModule attribute (``true_graph_0``); nested control flow nests (see partitioning/control_flow.py).
    subpartitions: dict[str, Partition] = field(default_factory=dict)

    def segments_of(self, target: Target) -> list[Segment]:
        return [segment for segment in self.segments if segment.target is target]

    def segment_of(self, node: torch.fx.Node) -> Segment | None:
        for segment in self.segments:
            if node in segment.nodes:
                return segment
        return None

    def target_of(self, node: torch.fx.Node) -> Target | None:
        segment = self.segment_of(node)
        return segment.target if segment is not None else None

    def fall_back(self, segment: Segment, error: BaseException, stage: str = "conversion failed") -> str:
        """Run ``segment``, a TensorRT segment that failed to compile, in PyTorch; return the reason.

        ``stage`` says what failed ("conversion failed": trtcheck's converters; "engine build failed": the
        backend, on an ONNX model that passed the checker), so a converter bug and an engine limitation
        read apart; it ends the reason, in brackets.
        Each of its nodes gets a ``CONVERSION_FAILED`` reason, ``fallbacks`` records the segment, and it
        merges with neighbouring Torch segments, so the partition keeps one segment per run of a target.
        Segment objects other than merged Torch ones keep their identity (engines are keyed by them).
        """
        index = next((i for i, s in enumerate(self.segments) if s is segment), None)
        if index is None:
            raise ValueError("fall_back() takes one of this partition's own segments (partition.segments[i])")
        if segment.target is not Target.TENSORRT:
            raise ValueError(f"segment @{index} already runs in {segment.target.display}: nothing to fall back from")
        message = f"{type(error).__name__}: {str(error).strip()} [{stage}]"
        self.fallbacks.append(f"segment @{index} ({len(segment.nodes)} nodes) runs in PyTorch: {message}")
        segment.target = Target.TORCH
        for node in segment.nodes:
            self.reasons[node] = Reason(ReasonKind.CONVERSION_FAILED, message)
        from trtcheck.partitioning.segmentation import merge_adjacent  # it imports this module

        self.segments = merge_adjacent(self.segments)
        return message

    @property
    def compute_nodes(self) -> list[torch.fx.Node]:
        return [node for node in self.graph_module.graph.nodes if is_compute(node)]

    def __iter__(self) -> Iterator[Segment]:
        return iter(self.segments)

    def __len__(self) -> int:
        return len(self.segments)

    def summary(self) -> str:
        """One line: how many segments and nodes run where (then the same for all branches together, if any)."""
        line = _count_line(self.segments)
        if not self.subpartitions:
            return line
        from trtcheck.partitioning.control_flow import walk  # it imports this module

        branches = [part for path, part in walk(self) if path]
        return f"{line}; in {len(branches)} branch graph(s): {_count_line([s for part in branches for s in part.segments])}"

    def explain_summary(self) -> str:
        """Op coverage, engines with their sizes, and every Torch node grouped by reason.

        What to read first when a model is slow: how much runs in TensorRT and what keeps the rest out
        (``trtcheck.partitioning.explain.ExplainSummary`` has the same figures as data).
        """
        from trtcheck.partitioning.explain import ExplainSummary  # it imports this module

        return ExplainSummary.of(self).format()

    def explain(self, nodes: Iterable[torch.fx.Node] | None = None) -> str:
        """Where each node runs and why, one line per node: the first thing to read when a model is slow.

        Without ``nodes`` (every compute node), ``explain_summary()`` comes first; a selection of nodes
        (the blockers of ``require_full_compilation``, say) gets its lines only.
        Nodes of branches (``subpartitions``) follow the parent's, each named with its branch path
        (``true_graph_0/relu``); a selection may hold them too.
        """
        from trtcheck.partitioning.control_flow import walk  # it imports this module

        parts = list(walk(self))
        if nodes is None:
            selected = [(path, part, node) for path, part in parts for node in part.compute_nodes]
        else:
            by_graph = {part.graph_module.graph: (path, part) for path, part in parts}
            selected = [(*by_graph.get(node.graph, ("", self)), node) for node in nodes]
        targets: dict[int, dict[torch.fx.Node, Target]] = {}
        lines = [self.explain_summary(), "where each node runs, and why:"] if nodes is None else []
        for path, part, node in selected:
            if id(part) not in targets:
                targets[id(part)] = {n: segment.target for segment in part.segments for n in segment.nodes}
            target = targets[id(part)].get(node)
            where = target.display if target is not None else "unplaced"
            name = f"{path}/{node.name}" if path else node.name
            lines.append(f"{name} ({_op_name(node)}): {where} - {part.reasons.get(node, 'no reason recorded')}")
        return "\n".join(lines)

    def __str__(self) -> str:
        """The seed's segment blocks; then each branch's, indented under its name."""
        ranges = symbol_ranges(self.graph_module)
        lines = [segment.format(i, ranges) for i, segment in enumerate(self.segments)]
        if self.subpartitions:
            from trtcheck.partitioning.control_flow import branch_owners  # it imports this module

            owners = branch_owners(self)
            for name, sub in self.subpartitions.items():
                owner = f" (a branch of %{owners[name].name})" if name in owners else ""
                lines.append(f"Sub-partition {name}{owner}:")
                lines.append(textwrap.indent(str(sub) or "(no compute nodes)", "    "))
        return "\n".join(lines)


def _count_line(segments: list[Segment]) -> str:
    trt = [s for s in segments if s.target is Target.TENSORRT]
    torch_segments = [s for s in segments if s.target is Target.TORCH]
    trt_nodes = sum(len(s.nodes) for s in trt)
    torch_nodes = sum(len(s.nodes) for s in torch_segments)
    return f"{len(segments)} segments: {len(trt)} TensorRT ({trt_nodes} nodes), {len(torch_segments)} Torch ({torch_nodes} nodes)"
