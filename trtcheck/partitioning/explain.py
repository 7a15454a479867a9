"""The summary that heads ``Partition.explain()``: coverage, engines, and every Torch node grouped by reason.

A per-node listing answers "where does this node run?"; a person looking at a slow model first asks
"how much runs in TensorRT, in how many engines, and what keeps the rest out?". ``ExplainSummary``
answers that from the partition alone, and both the text (``format``) and the HTML graph page
(``trtcheck.partitioning.html``) are built from it, so the two can never disagree.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

import torch.fx

from trtcheck.partitioning.partition import Partition, ReasonKind, Target

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
    ReasonKind.FOLLOWS_PRODUCER: "getitem of a Torch result",
    ReasonKind.CONVERTIBLE: "convertible, yet in Torch",
}


@dataclass(frozen=True)
class Engine:
    """One TensorRT segment: its index in ``Partition.segments`` and how many compute nodes it holds."""

    index: int
    nodes: int


@dataclass(frozen=True)
class ReasonGroup:
    """Torch nodes sharing one reason kind and detail (``detail`` is '' when the reason has none)."""

    kind: ReasonKind
    detail: str
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class ExplainSummary:
    """Coverage, engines and Torch nodes by reason of one partition (see ``of``)."""

    compute_nodes: int
    tensorrt_nodes: int
    engines: tuple[Engine, ...]
    torch_groups: tuple[ReasonGroup, ...]
    unplaced: tuple[str, ...] = ()

    @property
    def coverage(self) -> float:
        """Percent of compute nodes (everything but inputs, constants and the output) in TensorRT."""
        return 100.0 * self.tensorrt_nodes / self.compute_nodes if self.compute_nodes else 0.0

    @property
    def torch_nodes(self) -> int:
        return sum(len(group.nodes) for group in self.torch_groups)

    @classmethod
    def of(cls, partition: Partition) -> ExplainSummary:
        """Summarize ``partition``; linear in the graph's size (one pass over segments and nodes)."""
        target_by_node: dict[torch.fx.Node, Target] = {}
        engines = []
        for index, segment in enumerate(partition.segments):
            for node in segment.nodes:
                target_by_node[node] = segment.target
            if segment.target is Target.TENSORRT:
                engines.append(Engine(index, len(segment.nodes)))
        compute = partition.compute_nodes
        groups: dict[tuple[ReasonKind, str], list[str]] = {}
        unplaced = []
        for node in compute:
            target = target_by_node.get(node)
            if target is None:
                unplaced.append(node.name)
            elif target is Target.TORCH:
                reason = partition.reasons.get(node)
                if reason is None:
                    key = (None, "no reason recorded")
                elif reason.kind is ReasonKind.FOLLOWS_PRODUCER:  # its detail names its producer: one line for all
                    key = (reason.kind, "runs where the tuple it indexes was made")
                else:
                    key = (reason.kind, reason.detail)
                groups.setdefault(key, []).append(node.name)
        order = {kind: i for i, kind in enumerate(REASON_HEADINGS)}
        ordered = sorted(groups.items(), key=lambda item: (order.get(item[0][0], len(order)), -len(item[1]), item[0][1]))
        return cls(
            compute_nodes=len(compute),
            tensorrt_nodes=sum(target_by_node.get(node) is Target.TENSORRT for node in compute),
            engines=tuple(engines),
            torch_groups=tuple(ReasonGroup(kind, detail, tuple(nodes)) for (kind, detail), nodes in ordered),
            unplaced=tuple(unplaced),
        )

    def coverage_line(self) -> str:
        return (
            f"op coverage: {self.coverage:.1f}% ({self.tensorrt_nodes} of {self.compute_nodes} compute nodes in TensorRT)"
        )

    def engines_line(self) -> str:
        if not self.engines:
            return "engines: none (everything runs in PyTorch)"
        each = ", ".join(f"@{engine.index}: {engine.nodes}" for engine in self.engines)
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
                heading = REASON_HEADINGS.get(kind, getattr(kind, "value", "no reason recorded"))
                lines.append(f"  {heading} ({count}):")
            names = ", ".join(group.nodes)
            text = f"{group.detail}: {names}" if group.detail else names
            lines += textwrap.wrap(text, width, initial_indent="    ", subsequent_indent="      ", break_on_hyphens=False)
        if self.unplaced:
            lines.append(f"  in no segment ({len(self.unplaced)}): {', '.join(self.unplaced)}")
        return "\n".join(lines)
