"""The walk over a compiled module's graphs on one call: every TensorRT segment checked on eager's values at its
inputs (local) and on the compiled module's (accumulated), control-flow branches walked inside.

Its own room because control flow is the one part of localization that follows the compiled module's structure
rather than a set of nodes. A ``torch.cond`` or ``while_loop`` node runs in PyTorch, but its branches are
partitioned and compiled on their own (``compiler.engine_build.build_branches``): the compiled module's values after
the node come from the stitched branch modules, engines and all, and so do localization's (``Walk``). Each branch
that runs engines is walked itself, as a graph of its own (its partition, its engines, its branches), on the values
it is called with: the branch eager's predicate takes, and each iteration of a loop's condition and body, until the
first iteration whose engines fail locally. Its segments are checked, and a culprit in it found, by the same steps
as the lowered graph's, and named with where they are: ``segment @0 in branch true_graph_0 of cond (node cond)``,
``in the body of while_loop (node while_loop), iteration 3`` (iterations count from 1).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from trtcheck.engines import Engine
from trtcheck.partitioning.extract import segment_module
from trtcheck.partitioning.nodes import bound_operands, branch_names, is_control_flow
from trtcheck.partitioning.partition import Partition, Segment
from trtcheck.partitioning.reasons import Target
from trtcheck.runtime.stitch import EngineModule, stitched_branches
from trtcheck.verification.equivalence import Comparison
from trtcheck.verification.findings import Localization, SegmentCheck
from trtcheck.verification.judge import Judge
from trtcheck.verification.probes import Budget, dense
from trtcheck.verification.recording import Values, record_eager, run_nodes


@dataclass
class WalkedGraph:
    """One graph as the compiled module runs it, for one call: its partition (the lowered graph, or a control-flow
    branch's own copy, which compile partitioned on its own), the engine of each TensorRT segment, the stitched
    module of each of its branches (what the compiled module calls in their place), and, once walked, eager's value
    and the compiled module's value of its nodes on that call. ``where`` names it in the report ("" for the lowered
    graph; "branch true_graph_0 of cond (node cond)", "the body of while_loop (node while_loop), iteration 2").
    ``Localization.culprit_graph`` is the one the culprit is in: ``reduce`` reduces a branch's mismatch on it."""

    partition: Partition
    engines: dict[int, Engine]
    branches: dict[str, torch.fx.GraphModule]
    where: str = ""
    eager: Values = field(default_factory=dict)
    upstream: Values = field(default_factory=dict)

    @classmethod
    def of(cls, stitched: torch.fx.GraphModule, where: str = "") -> WalkedGraph:
        """The graph ``stitched`` (``runtime.stitch``'s module: the compiled module's, or a branch's) runs."""
        engines = {child.segment_index: child.engine for child in stitched.children() if isinstance(child, EngineModule)}
        return cls(stitched.partition, engines, dict(stitched_branches(stitched)), where)

    @property
    def gm(self) -> torch.fx.GraphModule:
        return self.partition.graph_module


class Walk:
    """A compiled module's graphs walked in dataflow order on one call, control-flow branches inside at the place of
    the node that calls them: every TensorRT segment checked on eager's values at its inputs (local) and on the
    compiled module's (accumulated), ``checked`` in that order with the graph it lies in.

    The compiled module's values are computed as it computes them: a segment's engine on its upstream values, Torch
    nodes in PyTorch, and a control-flow node calling the stitched modules of its branches, so that the error an
    engine inside a branch makes reaches everything after the node. A branch that runs engines is then walked
    itself, on the values it is called with: the branch the predicate takes, and every iteration of a loop's
    condition and body until the first whose engines fail locally (``_while_loop``)."""

    def __init__(self, judge: Judge, clock: Budget, found: Localization) -> None:
        self.judge, self.clock, self.found = judge, clock, found
        self.checked: list[tuple[SegmentCheck, WalkedGraph]] = []

    def graph(self, graph: WalkedGraph, eager_inputs: Sequence[Any], compiled_inputs: Sequence[Any]) -> tuple[Any, Any]:
        """Walk ``graph`` on its placeholders' values, eager's and the compiled module's: its outputs, both ways."""
        gm = graph.gm
        placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
        graph.eager = record_eager(gm, eager_inputs)
        graph.upstream = dict(zip(placeholders, compiled_inputs))
        for index, segment in enumerate(graph.partition.segments):
            self._fill(graph, segment.inputs)
            if segment.target is Target.TENSORRT and index in graph.engines:
                check = _segment_check(gm, index, segment, graph.engines[index], graph.eager, graph.upstream, self.judge)
                check.where = graph.where
                self.checked.append((check, graph))
                continue
            self._run(graph, [*segment.constants, *segment.nodes])
            for node in segment.nodes:
                if is_control_flow(node):
                    self._control_flow(graph, node)
        output = next(node for node in reversed(gm.graph.nodes) if node.op == "output")
        self._fill(graph, output.all_input_nodes)
        return (torch.fx.node.map_arg(output.args[0], graph.eager.__getitem__),
                torch.fx.node.map_arg(output.args[0], graph.upstream.__getitem__))

    def _run(self, graph: WalkedGraph, nodes: Sequence[torch.fx.Node]) -> None:
        """``nodes`` run in PyTorch on the compiled module's values, a branch read as the compiled module reads it:
        its stitched module, engines and all (eager's lowered branch would hide their error)."""
        stitched = {node for node in nodes if node.op == "get_attr" and node.target in graph.branches}
        graph.upstream.update((node, graph.branches[node.target]) for node in stitched)
        run_nodes(graph.gm, [node for node in nodes if node not in stitched], graph.upstream)

    def _fill(self, graph: WalkedGraph, needed: Iterable[torch.fx.Node]) -> None:
        """Compute, in PyTorch, any value ``needed`` that no segment produced (a getitem at a boundary, a constant)."""
        for node in needed:
            if node not in graph.upstream:
                self._fill(graph, node.all_input_nodes)
                self._run(graph, [node])

    def _control_flow(self, graph: WalkedGraph, node: torch.fx.Node) -> None:
        """Go inside ``node``'s branches when any runs engines, each walked on the values it is called with."""
        if not any(_runs_engines(graph.branches.get(name)) for name in branch_names(node)):
            return
        operands = [value for value, _ in bound_operands(node)]
        eager = [graph.eager[value] if isinstance(value, torch.fx.Node) else value for value in operands]
        compiled = [graph.upstream[value] if isinstance(value, torch.fx.Node) else value for value in operands]
        if node.target is torch.ops.higher_order.while_loop:
            self._while_loop(graph, node, eager, compiled)
        elif node.target is torch.ops.higher_order.cond:
            self._cond(graph, node, eager, compiled)
        else:
            self.found.notes.append(f"localization does not go inside the branches of {node.name} ({node.target}): "
                                    "their engines were not checked")

    def _branch(self, graph: WalkedGraph, name: str, where: str, eager: Sequence[Any], compiled: Sequence[Any]) -> tuple[Any, Any]:
        """Branch ``name`` of ``graph`` walked on these values: its outputs, eager's and the compiled module's."""
        inside = where if not graph.where else f"{where}, in {graph.where}"
        return self.graph(WalkedGraph.of(graph.branches[name], inside), eager, compiled)

    def _cond(self, graph: WalkedGraph, node: torch.fx.Node, eager: Sequence[Any], compiled: Sequence[Any]) -> None:
        """The branch eager's predicate takes, walked on the cond's operands."""
        predicate = node.args[0]
        taken = bool(graph.eager[predicate] if isinstance(predicate, torch.fx.Node) else predicate)
        names = branch_names(node)
        name, other = (names[0], names[1]) if taken else (names[1], names[0])
        if isinstance(predicate, torch.fx.Node) and bool(graph.upstream[predicate]) != taken:
            self.found.notes.append(
                f"the compiled module's predicate of {node.name} differs from eager's: it runs {other}, eager {name}; "
                f"the error before {node.name} changes the branch taken, and {name} is checked as eager takes it")
        if _runs_engines(graph.branches.get(name)):
            self._branch(graph, name, f"branch {name} of {_op_name(node)} (node {node.name})", eager, compiled)

    def _while_loop(self, graph: WalkedGraph, node: torch.fx.Node, eager: Sequence[Any], compiled: Sequence[Any]) -> None:
        """The loop run iteration by iteration, eager's and the compiled module's carried values side by side, its
        condition and body walked on each iteration's. The checks reported are those of the first iteration whose
        engines fail locally (an error there is the culprit, whatever later iterations do with it), else those of
        the iteration furthest from eager (outside the tolerances, then the largest accumulated error)."""
        cond_name, body_name = branch_names(node)
        carried = sum(not fixed for _, fixed in bound_operands(node))
        eager_carried, eager_fixed = list(eager[:carried]), list(eager[carried:])
        compiled_carried, compiled_fixed = list(compiled[:carried]), list(compiled[carried:])
        op, outer = _op_name(node), self.checked
        best: list[tuple[SegmentCheck, WalkedGraph]] = []
        best_rank: tuple[bool, bool, float] | None = None
        iteration, differs = 0, False
        while True:
            iteration += 1
            if iteration > 1 and self.clock.spent:
                self.found.notes.append(f"{node.name} was checked on its first {iteration - 1} iteration(s) only: "
                                        "the time budget ran out")
                break
            self.checked = []
            try:
                where = f"of {op} (node {node.name}), iteration {iteration}"
                go_on, compiled_go_on = self._branch(
                    graph, cond_name, f"the condition {where}", eager_carried + eager_fixed, compiled_carried + compiled_fixed)
                if bool(go_on) != bool(compiled_go_on) and not differs:
                    differs = True
                    self.found.notes.append(
                        f"the compiled module's loop {node.name} {'stops' if go_on else 'goes on'} at iteration {iteration}, "
                        "eager's does not: the loop is checked for as many iterations as eager runs")
                if bool(go_on):
                    eager_carried, compiled_carried = map(list, self._branch(
                        graph, body_name, f"the body {where}", eager_carried + eager_fixed, compiled_carried + compiled_fixed))
            finally:
                run, self.checked = self.checked, outer
            rank = (any(not check.local_passed for check, _ in run), any(not check.local_within_tolerances for check, _ in run),
                    max((check.accumulated for check, _ in run), default=0.0))
            if best_rank is None or rank > best_rank:
                best, best_rank = run, rank
            if not bool(go_on) or rank[0]:
                break
        self.checked.extend(best)


def _runs_engines(module: torch.nn.Module | None) -> bool:
    """Whether ``module`` (a stitched branch) runs an engine, in itself or in a branch of its own."""
    return module is not None and any(isinstance(child, EngineModule) for child in module.modules())


def _op_name(node: torch.fx.Node) -> str:
    """A control-flow node's op as the model wrote it: ``cond``, ``while_loop``."""
    return getattr(node.target, "__name__", str(node.target))


def _segment_check(
    gm: torch.fx.GraphModule, index: int, segment: Segment, engine: Engine, eager: Values, upstream: Values, judge: Judge,
) -> SegmentCheck:
    """Segment ``index``'s engine on eager's values at its inputs (local) and on the compiled module's (accumulated,
    which ``upstream`` then holds at its outputs): the local error judged by ``judge``, the accumulated by the
    tolerances alone."""
    expected = [eager[node] for node in segment.outputs]
    fed = [dense(eager[node]) for node in segment.inputs]
    with torch.no_grad():
        local = list(engine(*fed))
        accumulated = list(engine(*[dense(upstream[node]) for node in segment.inputs]))
    upstream.update(zip(segment.outputs, accumulated))
    local_check = judge.compare(expected, local)
    passed = judge.judge_engine(segment_module(gm, segment), fed, expected, local)[0].passed
    accumulated_check = judge.compare(expected, accumulated)
    return SegmentCheck(
        index, len(segment.nodes), segment.nodes[0].name, segment.nodes[-1].name,
        _largest(local_check), _largest(accumulated_check), passed, accumulated_check.passed, local_check.passed,
        yardstick=judge.yardstick,
    )


def _largest(comparison: Comparison) -> float:
    return max((output.max_abs for output in comparison.outputs), default=0.0)
