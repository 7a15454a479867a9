"""The summary that heads ``Partition.explain()``: coverage, engines, and every Torch node grouped by reason.

A per-node listing answers "where does this node run?"; a person looking at a slow model first asks
"how much runs in TensorRT, in how many engines, and what keeps the rest out?". ``ExplainSummary``
answers that from the partition alone, and both the text (``format``) and the HTML graph page
(``trtcheck.partitioning.html``) are built from it, so the two can never disagree.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch.fx

from trtcheck.partitioning.nodes import counts_toward_block_size, in_branch
from trtcheck.partitioning.reasons import ReasonKind, Target
from trtcheck.text import plural

if TYPE_CHECKING:  # Partition imports this module to explain itself; this one only reads its fields
    from trtcheck.partitioning.partition import Partition

# Headings in the order a reader acts on them: what the user asked for, what a converter could fix, then
# what follows from the partitioning rules. Kinds not listed here (a Torch node should never be
# CONVERTIBLE, but a hand-edited partition may say so) come last, under their own value.
REASON_HEADINGS: dict[ReasonKind, str] = {
    ReasonKind.FORCED_OP: "forced op (torch_executed_ops)",
    ReasonKind.FORCED_MODULE: "forced module (torch_executed_modules)",
    ReasonKind.NO_CONVERTER: "no converter, or its validator refused the node",
    ReasonKind.VALIDATOR_ERROR: "a converter's validator raised",
    ReasonKind.NON_TENSOR_BOUNDARY: "non-Tensor value on a TensorRT boundary",
    ReasonKind.MIN_BLOCK_SIZE: "block too small (min_block_size)",
    ReasonKind.CONVERSION_FAILED: "conversion or engine build failed",
    ReasonKind.CONTROL_FLOW: "control flow (torch.cond, while_loop; its branches are partitioned separately)",
    ReasonKind.FOLLOWS_PRODUCER: "getitem of a Torch result",
    ReasonKind.CONVERTIBLE: "convertible, yet in Torch",
}
# The same kinds said of a node in TensorRT: the headings above explain what keeps a node *out* of TensorRT,
# and read wrongly for one inside an engine ("convertible, yet in Torch" for every converted node).
TENSORRT_HEADINGS: dict[ReasonKind, str] = {
    ReasonKind.CONVERTIBLE: "a converter accepts it",
    ReasonKind.FOLLOWS_PRODUCER: "getitem of a TensorRT result",
}


def reason_heading(kind: ReasonKind | None, target: Target | None) -> str:
    """How a reason kind reads for a node running on ``target``: the one wording of text and HTML alike."""
    headings = TENSORRT_HEADINGS if target is Target.TENSORRT else REASON_HEADINGS
    return headings.get(kind, getattr(kind, "value", "no reason recorded"))


@dataclass(frozen=True)
class EngineSegment:
    """One TensorRT segment: its index in ``Partition.segments`` and how many compute nodes it holds.

    ``branch`` is the path of the branch partition whose segment it is (``true_graph_0``), '' for the model's own.
    """

    index: int
    nodes: int
    branch: str = ""

    @property
    def label(self) -> str:
        return f"{self.branch}@{self.index}" if self.branch else f"@{self.index}"


@dataclass(frozen=True)
class ReasonGroup:
    """Torch nodes sharing one reason kind and detail (``detail`` is '' when the reason has none)."""

    kind: ReasonKind
    detail: str
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class ExplainSummary:
    """Coverage, engines and Torch nodes by reason of one partition (see ``of``).

    Branches of control flow count in full: their compute nodes add to ``compute_nodes`` (each branch graph
    once, whether or not a call takes it: the figures describe the graphs, not one run), their engines to
    ``engines`` and their Torch nodes to the groups, named with their branch path (``true_graph_0/relu``).
    ``branches`` and ``branch_nodes`` say how many of the figures come from branch graphs.
    """

    compute_nodes: int
    tensorrt_nodes: int
    engines: tuple[EngineSegment, ...]
    torch_groups: tuple[ReasonGroup, ...]
    unplaced: tuple[str, ...] = ()
    branches: int = 0  # branch partitions (``Partition.branches``, nested ones included)
    branch_nodes: int = 0  # of ``compute_nodes``, those inside branch graphs

    @property
    def coverage(self) -> float:
        """Percent of compute nodes (everything but inputs, constants, the output and getitem) in TensorRT."""
        return 100.0 * self.tensorrt_nodes / self.compute_nodes if self.compute_nodes else 0.0

    @property
    def torch_nodes(self) -> int:
        return sum(len(group.nodes) for group in self.torch_groups)

    @classmethod
    def of(cls, partition: Partition) -> ExplainSummary:
        """Summarize ``partition`` and its branches; linear in the graphs' size (one pass over segments and nodes)."""
        engines: list[EngineSegment] = []
        groups: dict[tuple[ReasonKind, str], list[str]] = {}
        unplaced: list[str] = []
        compute = tensorrt = branches = branch_nodes = 0
        for path, part in partition.walk():
            target_by_node: dict[torch.fx.Node, Target] = {}
            for index, segment in enumerate(part.segments):
                for node in segment.nodes:
                    target_by_node[node] = segment.target
                if segment.target is Target.TENSORRT:
                    engines.append(EngineSegment(index, segment.size, path))
            # Compute nodes as min_block_size counts them: a getitem only unpacks its producer's tuple, runs where
            # the producer runs, and would make "nodes per engine" disagree with "had N compute nodes".
            nodes = [node for node in part.compute_nodes if counts_toward_block_size(node)]
            compute += len(nodes)
            branches, branch_nodes = branches + bool(path), branch_nodes + (len(nodes) if path else 0)
            for node in nodes:
                target = target_by_node.get(node)
                name = in_branch(path, node.name)
                if target is None:
                    unplaced.append(name)
                elif target is Target.TENSORRT:
                    tensorrt += 1
                else:
                    groups.setdefault(_group_key(part.reasons.get(node)), []).append(name)
        order = {kind: i for i, kind in enumerate(REASON_HEADINGS)}
        ordered = sorted(groups.items(), key=lambda item: (order.get(item[0][0], len(order)), -len(item[1]), item[0][1]))
        return cls(
            compute_nodes=compute,
            tensorrt_nodes=tensorrt,
            engines=tuple(engines),
            torch_groups=tuple(ReasonGroup(kind, detail, tuple(nodes)) for (kind, detail), nodes in ordered),
            unplaced=tuple(unplaced),
            branches=branches,
            branch_nodes=branch_nodes,
        )

    def coverage_line(self) -> str:
        branches = (
            f"; {self.branch_nodes} of them in {plural(self.branches, 'branch graph')} of control flow, each counted once"
            if self.branches
            else ""
        )
        return (
            f"op coverage: {self.coverage:.1f}% ({self.tensorrt_nodes} of {self.compute_nodes} compute nodes in TensorRT{branches})"
        )

    def engines_line(self) -> str:
        if not self.engines:
            return "engines: none (everything runs in PyTorch)"
        each = ", ".join(f"{engine.label}: {engine.nodes}" for engine in self.engines)
        return f"engines: {len(self.engines)} (nodes per engine: {each})"

    def format(self, width: int = 100) -> str:
        """The summary as text: coverage, engines, then each reason group with every one of its nodes."""
        lines = [self.coverage_line(), self.engines_line()]
        if self.torch_groups:
            lines.append(f"Torch nodes by reason ({self.torch_nodes}):")
        kind = object()
        for group in self.torch_groups:
            if group.kind is not kind:
                kind = group.kind
                count = sum(len(g.nodes) for g in self.torch_groups if g.kind is kind)
                heading = reason_heading(kind, Target.TORCH)
                lines.append(f"  {heading} ({count}):")
            names = ", ".join(group.nodes)
            text = f"{group.detail}: {names}" if group.detail else names
            lines += textwrap.wrap(text, width, initial_indent="    ", subsequent_indent="      ", break_on_hyphens=False)
        if self.unplaced:
            lines.append(f"  in no segment ({len(self.unplaced)}): {', '.join(self.unplaced)}")
        return "\n".join(lines)


def _group_key(reason) -> tuple[ReasonKind | None, str]:
    """Torch nodes group by reason kind and detail; ``getitem``s by kind alone (their detail names each producer)."""
    if reason is None:
        return (None, "no reason recorded")
    if reason.kind is ReasonKind.FOLLOWS_PRODUCER:
        return (reason.kind, "runs where the tuple it indexes was made")
    return (reason.kind, reason.detail)
