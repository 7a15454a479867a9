"""The partitioning phase's data: ``Segment`` and ``Partition``, with their printing and no policy.

These are plain objects (``SegmentedBlock`` and ``PartitionInfo`` of Torch-TensorRT's partitioning design,
docs/partitioning.md): tests and downstream code
may build or edit them by hand, so anything derivable (a segment's inputs and outputs) is computed from
the nodes on demand rather than stored and left to go stale. Later phases never edit a partition:
``with_fallbacks`` returns a new one where segments fell back to Torch, merged with their neighbours.
"""

from __future__ import annotations

import textwrap
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from trtcheck.lowering.graph import is_mutable_state
from trtcheck.lowering.symbols import dim_range, symbol_ranges, value_bytes
from trtcheck.partitioning.explain import ExplainSummary
from trtcheck.partitioning.nodes import branch_names, counts_toward_block_size, in_branch, is_compute, is_tensor_value, op_name
from trtcheck.partitioning.reasons import Reason, ReasonKind, Target
from trtcheck.provenance import from_source, node_source
from trtcheck.settings import Settings
from trtcheck.text import plural


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
        """The ``Segment Block @i`` rendering of Torch-TensorRT's partitioning design. With ``ranges`` (the graph's
        symbol ranges), a value of dynamic shape shows each size's min..opt..max: ``Tensor[2, 2..16..128, 64]``."""
        inputs = self.inputs
        params = ",\n      ".join(f"%{value.name} : {_type_name(value, ranges)}" for value in inputs)
        lines = [f"Segment Block @{index}:", f"    Target: {self.target.display}", f"    Graph: graph({params}):"]
        for node in self.nodes:
            args = ", ".join(map(_format_arg, node.args))
            kwargs = ", ".join(f"{k}={_format_arg(v)}" for k, v in node.kwargs.items())
            call = ", ".join(filter(None, [args, kwargs]))
            lines.append(f"      %{node.name} : {_type_name(node, ranges)} = {op_name(node)}({call})")
        lines.append(f"      return ({', '.join('%' + o.name for o in self.outputs)})")
        return "\n".join(lines)


def _type_name(node: torch.fx.Node, ranges: Mapping[str, tuple[int, int | None]] | None = None) -> str:
    value = node.meta.get("val")
    if isinstance(value, torch.Tensor):
        if ranges is not None and not all(isinstance(d, int) for d in value.shape):
            return f"Tensor[{', '.join(str(dim_range(d, ranges)) for d in value.shape)}]"
        return "Tensor"
    if is_tensor_value(value):
        return "Tensor[]"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join("Tensor" if isinstance(v, torch.Tensor) else type(v).__name__ for v in value) + ")"
    return type(value).__name__ if value is not None else "Any"


def _format_arg(arg: Any) -> str:
    if isinstance(arg, torch.fx.Node):
        return f"%{arg.name}"
    if isinstance(arg, (list, tuple)):
        inner = ", ".join(map(_format_arg, arg))
        return f"[{inner}]"
    return repr(arg)


@dataclass(frozen=True)
class Fallback:
    """Why one TensorRT segment runs in PyTorch after all: the error, and the stage that raised it (a converter
    bug and an engine limitation call for different fixes, so the reason says which)."""

    error: BaseException
    stage: str = "conversion failed"

    @property
    def message(self) -> str:
        """``RuntimeError: nope [engine build failed]``: the reason's text."""
        return f"{type(self.error).__name__}: {str(self.error).strip()} [{self.stage}]"


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
    branches: dict[str, Partition] = field(default_factory=dict)

    @property
    def subpartitions(self) -> dict[str, Partition]:
        """Deprecated: ``branches``, read-only (the name every other result's branches have)."""
        warnings.warn("Partition.subpartitions is deprecated: use Partition.branches", DeprecationWarning, stacklevel=2)
        return self.branches

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

    def with_fallbacks(
        self,
        failed: Mapping[int, Fallback] | None = None,
        *,
        branches: Mapping[str, Partition] | None = None,
        subpartitions: Mapping[str, Partition] | None = None,
    ) -> Partition:
        """A new partition: this one with each TensorRT segment of ``failed`` (by index) run in PyTorch, and
        ``branches`` (branches' partitions after their own fallbacks; ``subpartitions``, deprecated, is the same)
        in place of this one's. This one is left
        as it is: what a later phase learns (an engine that would not build) is its own result, and the partition
        stays what partitioning made, which the determinism check and a repro read.

        Each failed segment's nodes get a ``CONVERSION_FAILED`` reason naming the error and its stage, the
        segment is listed in ``fallbacks`` and merged with its Torch neighbours, so the partition keeps one
        segment per run of a target. A replaced branch's fallbacks are listed too, as ``branch NAME: ...``.
        TensorRT segments never merge, so the ones that survive keep their order (``surviving_indices``).
        """
        failed = dict(failed or {})
        if subpartitions is not None:
            if branches is not None:
                raise TypeError("with_fallbacks() got both branches= and subpartitions= (its deprecated name)")
            warnings.warn("with_fallbacks(subpartitions=) is deprecated: use branches=", DeprecationWarning, stacklevel=2)
            branches = subpartitions
        for index in failed:
            if not 0 <= index < len(self.segments):
                raise ValueError(f"with_fallbacks() got segment @{index}; this partition has {len(self.segments)} segments")
            if self.segments[index].target is not Target.TENSORRT:
                raise ValueError(f"segment @{index} already runs in {self.segments[index].target.display}: nothing to fall back from")
        reasons = dict(self.reasons)
        fallbacks = list(self.fallbacks)
        segments = []
        for index, segment in enumerate(self.segments):
            target = segment.target
            if index in failed:
                message = failed[index].message
                fallbacks.append(f"segment @{index} ({len(segment.nodes)} nodes) runs in PyTorch: {message}{_from(segment.nodes)}")
                reasons.update({node: Reason(ReasonKind.CONVERSION_FAILED, message) for node in segment.nodes})
                target = Target.TORCH
            segments.append(Segment(target, list(segment.nodes), segment.do_not_merge))
        subs = dict(self.branches)
        for name, sub in (branches or {}).items():
            if name not in subs:
                raise ValueError(f"with_fallbacks() got branch {name!r}, which this partition does not have")
            fallbacks += [f"branch {name}: {line}" for line in sub.fallbacks[len(subs[name].fallbacks):]]
            subs[name] = sub
        return Partition(self.graph_module, merge_adjacent(segments), reasons, self.settings, fallbacks, subs)

    def surviving_indices(self, after: Partition) -> dict[int, int]:
        """Each TensorRT segment's index here -> its index in ``after`` (this partition ``with_fallbacks``), for
        those still in TensorRT there: what engines, built per segment before the fallbacks, are keyed by after."""
        first_nodes = {s.nodes[0]: i for i, s in enumerate(after.segments) if s.target is Target.TENSORRT and s.nodes}
        return {
            i: first_nodes[s.nodes[0]] for i, s in enumerate(self.segments)
            if s.target is Target.TENSORRT and s.nodes and s.nodes[0] in first_nodes
        }

    @property
    def compute_nodes(self) -> list[torch.fx.Node]:
        return [node for node in self.graph_module.graph.nodes if is_compute(node)]

    def walk(self, path: str = "") -> Iterator[tuple[str, Partition]]:
        """This partition and every branch partition below it, depth first, each with its branch path
        (``""`` for this one, then ``"true_graph_0"``, ``"true_graph_0/false_graph_0"``, ...)."""
        yield path, self
        for name, sub in self.branches.items():
            yield from sub.walk(in_branch(path, name))

    def branch_owners(self) -> dict[str, torch.fx.Node]:
        """The control-flow node of this partition's graph that calls each branch, by branch name."""
        return {name: node for node in self.graph_module.graph.nodes for name in branch_names(node)}

    def __iter__(self) -> Iterator[Segment]:
        return iter(self.segments)

    def __len__(self) -> int:
        return len(self.segments)

    def summary(self) -> str:
        """One line: how many segments and nodes run where (then the same for all branches together, if any)."""
        line = _count_line(self.segments)
        if not self.branches:
            return line

        inside = [part for path, part in self.walk() if path]
        return f"{line}; in {plural(len(inside), 'branch graph')}: {_count_line([s for part in inside for s in part.segments])}"

    def explain_summary(self) -> str:
        """Op coverage, engines with their sizes, and every Torch node grouped by reason.

        What to read first when a model is slow: how much runs in TensorRT and what keeps the rest out
        (``trtcheck.partitioning.explain.ExplainSummary`` has the same figures as data).
        """
        return ExplainSummary.of(self).format()

    def explain(self, nodes: Iterable[torch.fx.Node] | None = None) -> str:
        """Where each node runs and why, one line per node: the first thing to read when a model is slow.

        Without ``nodes`` (every compute node), ``explain_summary()`` comes first; a selection of nodes
        (the blockers of ``require_full_compilation``, say) gets its lines only.
        Nodes of branches (``branches``) follow the parent's, each named with its branch path
        (``true_graph_0/relu``); a selection may hold them too.
        """

        parts = list(self.walk())
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
            name = in_branch(path, node.name)
            lines.append(f"{name} ({op_name(node)}): {where} - {part.reasons.get(node, 'no reason recorded')}{_from([node])}")
        return "\n".join(lines)

    def __str__(self) -> str:
        """The segment blocks of Torch-TensorRT's partitioning design; then each branch's, indented under its name."""
        ranges = symbol_ranges(self.graph_module)
        lines = [segment.format(i, ranges) for i, segment in enumerate(self.segments)]
        if self.branches:

            owners = self.branch_owners()
            for name, sub in self.branches.items():
                owner = f" (a branch of %{owners[name].name})" if name in owners else ""
                lines.append(f"Sub-partition {name}{owner}:")
                lines.append(textwrap.indent(str(sub) or "(no compute nodes)", "    "))
        return "\n".join(lines)


def _from(nodes: Iterable[torch.fx.Node]) -> str:
    """`` [from layers.3.attention (Attention), model.py:42]``: where in the user's code the first of ``nodes`` that
    torch.export kept a module path or a stack trace for came from (``provenance.node_source``); ``""`` when none has one."""
    source = next((found for found in map(node_source, nodes) if found), "")
    return f" [{from_source(source)}]" if source else ""


def _count_line(segments: list[Segment]) -> str:
    """Segments per target and their compute nodes (``Segment.size``: getitem not counted, as for min_block_size
    and op coverage, so the three figures agree)."""
    trt = [s for s in segments if s.target is Target.TENSORRT]
    torch_segments = [s for s in segments if s.target is Target.TORCH]
    trt_nodes = plural(sum(s.size for s in trt), "compute node")
    torch_nodes = plural(sum(s.size for s in torch_segments), "compute node")
    return f"{plural(len(segments), 'segment')}: {len(trt)} TensorRT ({trt_nodes}), {len(torch_segments)} Torch ({torch_nodes})"


def mergeable(first: Segment, second: Segment) -> bool:
    """Neighbours of one target merge unless either is ``do_not_merge`` (the loop and conditional blocks of
    Torch-TensorRT's partitioning design)."""
    return first.target is second.target and not first.do_not_merge and not second.do_not_merge


def merge_adjacent(segments: list[Segment]) -> list[Segment]:
    """Merge neighbouring segments of one target unless either is ``do_not_merge``.

    Concatenating neighbours keeps every node after its producers, so merging is always safe. The first
    segment of each merged run absorbs the others (segments are fresh from a segmenter, so reusing them
    saves allocations).
    """
    merged: list[Segment] = []
    for segment in segments:
        if merged and mergeable(merged[-1], segment):
            merged[-1].nodes.extend(segment.nodes)
        else:
            merged.append(segment)
    return merged


def crossing_values(segments: Sequence[Segment]) -> Iterator[torch.fx.Node]:
    """The values read across segment boundaries in one call: every segment's external input, once per
    reading segment, except a graph input read by a Torch segment (it crosses no engine boundary)."""
    for segment in segments:
        for value in segment.inputs:
            if not (segment.target is Target.TORCH and value.op == "placeholder"):
                yield value


def boundary_traffic(segments: Sequence[Segment]) -> tuple[int, int]:
    """Values read across segment boundaries per call (``crossing_values``), and their bytes at the example's
    sizes: what the benchmarks record, ``trtcheck.profile`` counts and ``segmentation="optimal"`` minimizes."""
    values = list(crossing_values(segments))
    return len(values), sum(map(value_bytes, values))


def boundary_bytes(segments: Sequence[Segment]) -> int:
    """The bytes of ``boundary_traffic``: ``segmentation="optimal"``'s tie-breaking cost."""
    return boundary_traffic(segments)[1]
