"""The partitioning driver: decisions, then segmentation and the boundary rules until a fixed point.

Every rule only ever moves nodes from TensorRT to Torch (or copies a non-Tensor producer into the
segment that reads it), so the loop terminates; each round is linear in the graph's size.
"""

from __future__ import annotations

import contextlib
import dataclasses
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from trtcheck.errors import GraphMustChange, PartitionError, SettingsError, UnmatchedOpError
from trtcheck.lowering.export import lower
from trtcheck.lowering.graph import copy_graph_module, gc_paused, written_values
from trtcheck.names import ModuleMatcher, checked_settings, resolve_autocast_ops, resolve_fp32_nodes, resolve_modules, resolve_ops
from trtcheck.partitioning.boundaries import GraphChanges, apply_min_block_size, enforce_tensor_boundaries, segment_index
from trtcheck.partitioning.control_flow import isolate_control_flow, partition_branches
from trtcheck.partitioning.decisions import Support, follow_producers, initial_targets, support_check_of
from trtcheck.partitioning.nodes import any_control_flow, in_branch, is_tensor_value
from trtcheck.partitioning.optimal import Optimal
from trtcheck.partitioning.order import WRITES, may_write_cached, state_order
from trtcheck.partitioning.partition import Partition, Segment, boundary_bytes, merge_adjacent
from trtcheck.partitioning.reasons import Reason, Target
from trtcheck.partitioning.segmentation import SEGMENTERS, Segmenter, dependency_aware
from trtcheck.settings import Autocast, Settings


def partition(
    model: torch.nn.Module | torch.export.ExportedProgram,
    example_inputs: Sequence[Any] = (),
    settings: Settings | None = None,
    support: Support = None,
    *,
    example_kwargs: Mapping[str, Any] | None = None,
    dynamic_shapes: Any = None,
) -> Partition:
    """Lower ``model`` to core ATen and split it into TensorRT and Torch segments.

    ``settings`` is a ``Settings`` or ``None`` (the defaults); anything else is a ``SettingsError``
    (see ``Settings.coerce``). ``support`` decides convertibility: ``None`` for trtcheck's converter
    registry, a callable ``(torch.fx.Node) -> bool``, or a ``torch.fx.passes.operator_support.OperatorSupportBase``.
    A ``torch.export.ExportedProgram`` is partitioned as exported (decomposed, never traced again).
    ``dynamic_shapes``: torch.export's argument (``torch.export.Dim`` per dynamic size), see ``trtcheck.lower``.
    """
    settings = checked_settings(settings)
    # A user's ATen GraphModule is lowered without torch.export, but with dead code it is copied and cleaned: with
    # the collector paused, as a copy allocates a node's worth of objects per node (``gc_paused``). An export
    # is left to the collector: it makes cyclic garbage of its own.
    with gc_paused() if isinstance(model, torch.fx.GraphModule) else contextlib.nullcontext():
        gm = lower(model, example_inputs, example_kwargs, dynamic_shapes=dynamic_shapes, keep=resolve_ops(settings.torch_executed_ops))
    owner = model if isinstance(model, torch.nn.Module) else None  # an ExportedProgram: its graph's meta names modules
    forced_modules = resolve_modules(settings.torch_executed_modules, gm.graph, owner)
    if gm is not model:  # lowering made a new graph: ours to rewrite
        return partition_graph(gm, settings, support, forced_modules=forced_modules)
    # One pause of the collector around both attempts: re-enabling it in between makes it walk everything
    # the first attempt allocated (measured: a second at 100k nodes).
    with gc_paused():
        try:  # the user's own GraphModule: partition it in place unless a rule must add nodes
            return partition_graph(gm, settings, support, forced_modules=forced_modules, may_change_graph=False)
        except GraphMustChange as error:
            copy = copy_graph_module(gm)
            resume: _Resume | None = getattr(error, "resume", None)
            if resume is not None:  # segmentation="optimal": carry what the first attempt found over to the copy
                resume = resume.onto(gm, copy)
            return _partition_graph(copy, settings, support, forced_modules, True, resume)


def partition_graph(
    gm: torch.fx.GraphModule,
    settings: Settings,
    support: Support = None,
    *,
    forced_modules: ModuleMatcher | None = None,
    may_change_graph: bool = True,
) -> Partition:
    """Partition an already lowered graph in place.

    The graph may gain copies of non-Tensor producers (see ``boundaries``); with ``may_change_graph=False``
    it raises ``GraphMustChange`` instead, and the caller retries on a copy.
    """
    settings = checked_settings(settings)
    with gc_paused():
        result = _partition_graph(gm, settings, support, forced_modules, may_change_graph)
    _check_forced_ops_matched(result)
    _check_fp32_nodes_matched(result)
    return result


def _check_forced_ops_matched(result: Partition) -> None:
    """An op named in ``torch_executed_ops`` that no node of the graph (or of its branches) calls would force
    nothing: a ``SettingsError`` naming it, never a setting that silently matches nothing. (Lowering keeps
    forced ops out of decomposition, so an op the model calls is still there.)"""
    unmatched = resolve_ops(result.settings.torch_executed_ops).unmatched(part.graph_module.graph for _, part in result.walk())
    if unmatched:
        ops = sorted({
            str(node.target) for _, part in result.walk() for node in part.graph_module.graph.nodes
            if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)
        })
        shown = ", ".join(ops[:20]) + (", ..." if len(ops) > 20 else "")
        raise UnmatchedOpError(
            f"torch_executed_ops: {', '.join(map(repr, unmatched))} matches no node of the lowered graph: the model "
            f"does not call it, so it would force nothing. Remove it, or name one of the graph's ops: {shown}",
            tuple(unmatched),
        )


def _check_fp32_nodes_matched(result: Partition) -> None:
    """An ``fp32_nodes`` entry, or an ``Autocast`` entry naming ops, nodes or calibrated values, that matches no node
    of the lowered graph (a node name from another model, or from before a change of lowering; an op the model does
    not call) keeps nothing in float32: a ``SettingsError`` naming the field the user wrote and the graph's nodes."""
    policy = Autocast.of(result.settings.autocast)
    fp32_nodes = resolve_fp32_nodes(result.settings.fp32_nodes)
    if not fp32_nodes and (policy is None or not (policy.excluded_ops or policy.excluded_nodes or policy.calibration)):
        return  # nothing to match (the common case: no walk over every node)
    graphs = [(path, part.graph_module.graph) for path, part in result.walk()]
    names = [in_branch(path, node.name) for path, graph in graphs for node in graph.nodes if node.op == "call_function"]
    unmatched = [("fp32_nodes", fp32_nodes.unmatched(graphs))]
    if policy is not None:
        unmatched += [
            ("Autocast.excluded_ops", resolve_autocast_ops(policy.excluded_ops).unmatched(graphs)),
            ("Autocast.excluded_nodes", [p for p in policy.excluded_nodes
                                         if not any(re.match(p, node.name) for _, g in graphs for node in g.nodes)]),
            ("Autocast.calibration", sorted(set(policy.calibration or {}) - {n.name for _, g in graphs for n in g.nodes})),
        ]
    for field, entries in unmatched:
        if entries:
            shown = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "")
            raise SettingsError(
                f"{field}: {', '.join(map(repr, entries))} matches no node of the lowered graph, so it would keep "
                f"nothing in float32. Name a node of the graph (Partition.explain lists them: {shown}) or an op it calls"
            )


def _partition_graph(
    gm: torch.fx.GraphModule,
    settings: Settings,
    support: Support,
    forced_modules: ModuleMatcher | None,
    may_change_graph: bool,
    resume: _Resume | None = None,
) -> Partition:
    segmenter = SEGMENTERS[settings.segmentation]
    nodes: list[torch.fx.Node]
    targets: dict[torch.fx.Node, Target]
    reasons: dict[torch.fx.Node, Reason]
    if forced_modules is None:
        forced_modules = resolve_modules(settings.torch_executed_modules, gm.graph)
    facts = None
    if resume is not None:  # the decisions of the attempt on the graph this one copies (the same nodes)
        nodes, targets, reasons = resume.nodes, resume.targets, resume.reasons
    else:
        facts = _Facts.gather(gm.graph)
        nodes = facts.nodes
        targets, reasons = initial_targets(nodes, support_check_of(support), resolve_ops(settings.torch_executed_ops), forced_modules)

    if settings.segmentation == "optimal":
        segments = _best_candidate(gm, nodes, targets, reasons, settings, may_change_graph, resume, facts)
    else:
        segments = _settle(gm, nodes, segmenter, targets, reasons, settings, may_change_graph, facts)

    if may_change_graph:  # copies may have been inserted: keep the module's code in step with its graph
        gm.recompile()
    result = Partition(gm, segments, reasons, settings)
    if settings.require_full_compilation:
        _check_full_compilation(result)
    if any_control_flow(nodes):  # ``nodes`` may miss copies, never a control-flow node
        result.branches = partition_branches(  # branch copies are ours to change: may_change_graph
            result, forced_modules,
            lambda branch, modules, name: _partition_graph(branch, _branch_settings(settings, name), support, modules, True),
        )
    return result


def _branch_settings(settings: Settings, name: str) -> Settings:
    """``settings`` as the branch graph ``name`` takes them: ``fp32_nodes`` naming its nodes by their path
    (``false_graph_0/mul_1``) name them as that graph does (``mul_1``), and bare names, the parent graph's nodes, are
    dropped (``Fp32Nodes.in_branch``), so that each node has the one name trtcheck prints for it."""
    if not settings.fp32_nodes:
        return settings
    return dataclasses.replace(settings, fp32_nodes=resolve_fp32_nodes(settings.fp32_nodes).in_branch(name).entries())


def _settle(
    gm: torch.fx.GraphModule,
    nodes: list[torch.fx.Node],
    segmenter: Segmenter,
    targets: dict[torch.fx.Node, Target],
    reasons: dict[torch.fx.Node, Reason],
    settings: Settings,
    may_change_graph: bool,
    facts: _Facts | None = None,
) -> list[Segment]:
    """Segment, then apply the boundary rules and ``min_block_size``, until nothing changes (in place).

    What the rounds read of the graph (its compute nodes, ``getitem``s, non-Tensor values and the order around
    in-place writes) is gathered once and again only after a round that changed the graph (the copy rule):
    a round that only moved nodes to Torch leaves it as it was.
    """
    # Each round either changes nothing (done) or moves at least one node to Torch or copies a
    # non-Tensor producer forward; the bound only guards against a bug turning that into a hang.
    if facts is None:  # ``nodes`` are the graph's compute nodes, in order: the gathered ones are the same
        facts = _Facts.gather(gm.graph)
    for _ in range(2 * len(nodes) + 2):
        segments = facts.segment(segmenter, targets)
        segments = merge_adjacent(isolate_control_flow(segments) if facts.flows else segments)
        index_of = segment_index(segments)
        changes = GraphChanges()
        changed = enforce_tensor_boundaries(gm.graph, segments, targets, reasons, may_change_graph, facts.non_tensor, changes, index_of)
        if not changed and not settings.require_full_compilation:
            getitems = [0] * len(segments)
            for node in facts.getitems:
                getitems[index_of[node]] += 1
            changed = apply_min_block_size(segments, settings.min_block_size, targets, reasons, getitems)
        if not changed:
            return segments
        if changes:  # the graph changed: its facts with the copies in and the erased originals out
            facts = facts.changed(gm.graph, changes)
        follow_producers(facts.getitems, targets, reasons)
    raise PartitionError("partitioning did not converge; please report this graph")  # pragma: no cover - a bug


@dataclass
class _Facts:
    """What every round of ``_settle`` reads of the graph, valid while the graph is unchanged."""

    nodes: list[torch.fx.Node]  # the compute nodes, in graph order
    getitems: list[torch.fx.Node]
    non_tensor: list[torch.fx.Node]  # ``boundaries.non_tensor_values``
    writes: bool  # whether a node may write in place (only then is there an order to keep)
    flows: bool  # whether a node may be control flow (the rounds copy only int producers: never one of those)
    inputs_first: bool  # whether every placeholder comes before every compute node (as lowering makes them)
    known_order: dict[torch.fx.Node, list[torch.fx.Node]] | None = None

    @property
    def order(self) -> dict[torch.fx.Node, list[torch.fx.Node]]:
        """``order.state_order(nodes)``, made when a segmenter first reads it (``naive`` never does)."""
        if self.known_order is None:
            self.known_order = state_order(self.nodes) if self.writes else {}
        return self.known_order

    @classmethod
    def gather(cls, graph: torch.fx.Graph) -> _Facts:
        """One pass over the graph (``is_compute``, ``is_getitem``, ``non_tensor_values`` and whether any node
        writes in place, inlined: at 100k nodes, a pass of calls per node costs as much as a segmentation)."""
        nodes: list[torch.fx.Node] = []
        getitems: list[torch.fx.Node] = []
        non_tensor: list[torch.fx.Node] = []
        writes = False
        inputs_first = True
        known = WRITES.get
        for node in graph.nodes:
            op = node.op
            if op == "get_attr" or op == "output":
                continue
            value = node.meta.get("val")
            if not isinstance(value, torch.Tensor) and not is_tensor_value(value):
                non_tensor.append(node)
            if op == "placeholder":
                if nodes:
                    inputs_first = False
                continue
            nodes.append(node)
            target = node.target
            if target is operator.getitem:
                if op == "call_function":
                    getitems.append(node)
            elif not writes and op == "call_function":
                cached = known(id(target))  # ``may_write_cached``, inlined
                writes = cached[1] if cached is not None and cached[0] is target else may_write_cached(target)
        return cls(nodes, getitems, non_tensor, writes, any_control_flow(nodes), inputs_first)

    def changed(self, graph: torch.fx.Graph, changes: GraphChanges) -> _Facts:
        """These facts after the copy rule inserted ``changes.copies`` (each just before a node) and erased
        ``changes.erased``: the lists rebuilt in one pass over the old nodes, the order kept unless a copy reads
        a value written in place (then, like anything unusual, everything is gathered again)."""
        copies = set(changes.copies)
        if not self.inputs_first or any(copy.target is operator.getitem for copy in copies):
            return _Facts.gather(graph)
        order = self.known_order  # not made yet: it will be, for the new nodes, when it is read
        if order:
            written = self.written()
            if any(value in written for copy in copies for value in copy.all_input_nodes):
                return _Facts.gather(graph)
        # Copies go just before a node of the graph (or before another copy, which went before one): group them by
        # the first old node after them, in graph order.
        before: dict[torch.fx.Node, list[torch.fx.Node]] = {}
        for copy in copies:
            anchor = copy.next
            while anchor in copies:
                anchor = anchor.next
            if anchor not in before:
                run, node = [], anchor.prev
                while node in copies:
                    run.append(node)
                    node = node.prev
                before[anchor] = run[::-1]
        gone = set(changes.erased)
        tracked = (set(self.non_tensor) | copies) - gone
        nodes: list[torch.fx.Node] = []
        non_tensor = [node for node in self.non_tensor if node.op == "placeholder"]  # first, as gathered
        for node in self.nodes:
            for new in before.get(node, ()):
                nodes.append(new)
                non_tensor.append(new)  # a copy of a non-Tensor producer: non-Tensor
            if node not in gone:
                nodes.append(node)
                if node in tracked:
                    non_tensor.append(node)
        return _Facts(nodes, self.getitems, non_tensor, self.writes, self.flows, self.inputs_first, order)

    def written(self) -> set[torch.fx.Node]:
        """The values written in place (those whose accesses ``order`` orders)."""
        order = self.known_order or {}
        return {value for node in order for value in written_values(node)} | {
            value for befores in order.values() for before in befores for value in written_values(before)
        }

    def segment(self, segmenter: Segmenter, targets: dict[torch.fx.Node, Target]) -> list[Segment]:
        if segmenter is dependency_aware or isinstance(segmenter, Optimal):  # they read the order: give them ours
            return segmenter(self.nodes, targets, self.order)  # type: ignore[call-arg]
        return segmenter(self.nodes, targets)


# The candidates of segmentation="optimal", best first on ties. The rules after segmentation (min_block_size,
# Tensor-only boundaries) move nodes to Torch depending on the segments they see, so the fewest segments
# for the *initial* targets need not end with the fewest segments; running dependency_aware too, and
# keeping the better end result, is what guarantees "never more segments than dependency_aware".
# Measured on 200 random graphs per setting (min_block_size 3 and 5, with and without int values):
# dependency_aware never ended better than the leveling. naive did end with fewer segments on 19 of 400
# graph/setting pairs, every time by sending far more nodes to Torch (all of them on 5: 1 segment, no
# engine), so it is deliberately not a candidate: fewer segments bought with lost TensorRT coverage.
OPTIMAL_CANDIDATES: tuple[tuple[str, Callable[[], Segmenter]], ...] = (
    ("optimal", Optimal), ("dependency_aware", lambda: dependency_aware),
)


def candidate_score(segments: Sequence[Segment]) -> tuple[int, int, int]:
    """How ``optimal`` ranks end results: segments, then TensorRT engines, then nodes left to Torch (a
    cascade that empties TensorRT is not a win); then, on a tie, bytes crossing boundaries."""
    engines = sum(1 for segment in segments if segment.target is Target.TENSORRT)
    torch_nodes = sum(segment.size for segment in segments if segment.target is Target.TORCH)
    return len(segments), engines, torch_nodes


@dataclass
class _Resume:
    """What an attempt of ``optimal`` on a graph it may not change found before it had to give up: the
    decisions (before any rule), which candidates must change the graph, and their segmenters (an
    ``Optimal`` keeps the structure and levels it computed). ``onto`` carries it over to a copy of the
    graph, whose nodes are the same in the same order, so the retry neither decides nor probes again."""

    nodes: list[torch.fx.Node]
    targets: dict[torch.fx.Node, Target]
    reasons: dict[torch.fx.Node, Reason]
    must_change: frozenset[int]  # indices into the candidates
    segmenters: dict[int, Segmenter]

    def onto(self, original: torch.fx.GraphModule, copy: torch.fx.GraphModule) -> _Resume:
        mapping = dict(zip(original.graph.nodes, copy.graph.nodes, strict=True))
        segmenters = {}
        for index, segmenter in self.segmenters.items():
            if isinstance(segmenter, Optimal):
                segmenters[index] = segmenter.moved(mapping)
        return _Resume(
            [mapping[node] for node in self.nodes],
            {mapping[node]: target for node, target in self.targets.items()},
            {mapping[node]: reason for node, reason in self.reasons.items()},
            self.must_change,
            segmenters,
        )


def _must_change(message: str, resume: _Resume) -> GraphMustChange:
    error = GraphMustChange(message)
    error.resume = resume  # type: ignore[attr-defined] - read by ``partition``
    return error


def _best_candidate(
    gm: torch.fx.GraphModule,
    nodes: list[torch.fx.Node],
    targets: dict[torch.fx.Node, Target],
    reasons: dict[torch.fx.Node, Reason],
    settings: Settings,
    may_change_graph: bool,
    resume: _Resume | None = None,
    facts: _Facts | None = None,
) -> list[Segment]:
    """Run every candidate from the same decisions and adopt the best end result (``targets`` and
    ``reasons`` updated in place).

    Each candidate runs once. A candidate first runs on ``gm`` without changing it; one that must insert
    copies (the copy rule) runs again on a private copy of the graph (made before anything changes
    ``gm``), so the candidates never see each other's copies. When every candidate must change the graph:
    on a graph that is not ours, ``GraphMustChange`` at once (whichever wins would raise it), carrying
    what was found over to the caller's copy (``_Resume``); on ours, the first candidate runs on ``gm``
    itself (it usually wins) and the others on copies. A winner that ran on a copy hands its graph to
    ``gm`` (``gm.graph = copy.graph``). Deterministic: the same decisions give the same result, on any
    copy of the graph.
    """
    single = settings.min_block_size <= 1 or settings.require_full_compilation
    # Without min_block_size, every rule that moves a node to Torch looks only at targets (an edge
    # between targets is always between segments), so every candidate ends with the same targets,
    # for which the leveling is optimal: the others cannot win.
    candidates: Sequence[tuple[str, Callable[[], Segmenter]]] = (("optimal", Optimal),) if single else OPTIMAL_CANDIDATES
    segmenters: dict[int, Segmenter] = {}
    results: list[tuple[list[Segment], dict, dict, torch.fx.GraphModule | None] | None] = [None] * len(candidates)
    must_change = set(resume.must_change) if resume is not None else set()
    for index, (_, make) in enumerate(candidates):
        segmenter = resume.segmenters.get(index) if resume is not None else None
        segmenters[index] = segmenter if segmenter is not None else make()
        if index in must_change:  # known from the attempt on the original graph
            continue
        mine_targets, mine_reasons = dict(targets), dict(reasons)
        try:
            segments = _settle(gm, list(nodes), segmenters[index], mine_targets, mine_reasons, settings, False, facts)
        except GraphMustChange:
            must_change.add(index)
            continue
        results[index] = (segments, mine_targets, mine_reasons, None)
    if must_change:
        everyone = len(must_change) == len(candidates)
        if not may_change_graph and everyone:
            resume = _Resume(nodes, targets, reasons, frozenset(must_change), segmenters)
            raise _must_change("every candidate must change the graph", resume)
        # gm itself may change only when it is ours and no candidate's result (nodes of gm) depends on it
        on_gm = min(must_change) if may_change_graph and everyone else None
        for index in sorted(must_change):
            if index == on_gm:
                continue
            copy = copy_graph_module(gm)
            mapping = dict(zip(gm.graph.nodes, copy.graph.nodes, strict=True))
            copy_targets = {mapping[node]: target for node, target in targets.items()}
            copy_reasons = {mapping[node]: reason for node, reason in reasons.items()}
            segmenter = segmenters[index]
            segmenter = segmenter.moved(mapping) if isinstance(segmenter, Optimal) else segmenter
            segments = _settle(copy, [mapping[node] for node in nodes], segmenter, copy_targets, copy_reasons, settings, True)
            results[index] = (segments, copy_targets, copy_reasons, copy)
        if on_gm is not None:
            mine_targets, mine_reasons = dict(targets), dict(reasons)
            segments = _settle(gm, list(nodes), segmenters[on_gm], mine_targets, mine_reasons, settings, True, facts)
            results[on_gm] = (segments, mine_targets, mine_reasons, None)
    best: tuple[tuple[int, int, int], int] | None = None
    for index, result in enumerate(results):
        assert result is not None
        score = candidate_score(result[0])
        if best is None or score < best[0]:
            best = (score, index)
        elif score == best[0] and boundary_bytes(result[0]) < boundary_bytes(results[best[1]][0]):  # bytes only on a tie
            best = (score, index)
    assert best is not None
    segments, won_targets, won_reasons, graph_of = results[best[1]]
    if graph_of is not None:  # the winner changed a copy of the graph
        if not may_change_graph:
            raise _must_change("the best candidate must change the graph", _Resume(nodes, targets, reasons, frozenset(must_change), {}))
        gm.graph = graph_of.graph
    targets.clear()
    targets.update(won_targets)
    reasons.clear()
    reasons.update(won_reasons)
    return segments


def _check_full_compilation(result: Partition) -> None:
    torch_nodes = [node for segment in result.segments_of(Target.TORCH) for node in segment.nodes]
    trt_segments = result.segments_of(Target.TENSORRT)
    if not torch_nodes and len(trt_segments) == 1:
        return
    if not result.segments:
        raise PartitionError("require_full_compilation=True, but the graph has no compute nodes to compile")
    blockers = "\n".join(f"  {line}" for line in result.explain(torch_nodes).splitlines())
    raise PartitionError(
        f"require_full_compilation=True, but {len(torch_nodes)} node(s) must run in PyTorch "
        f"({len(trt_segments)} TensorRT segment(s)):\n{blockers}\n"
        "Fix: register a converter for these ops (trtcheck.conversion.register), drop them from "
        "torch_executed_ops / torch_executed_modules, or set require_full_compilation=False."
    )
