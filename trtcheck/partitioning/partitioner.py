"""The partitioning driver: decisions, then segmentation and the boundary rules until a fixed point.

Every rule only ever moves nodes from TensorRT to Torch (or copies a non-Tensor producer into the
segment that reads it), so the loop terminates; each round is linear in the graph's size.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.fx

from trtcheck.errors import PartitionError
from trtcheck.lowering import copy_graph_module, lower
from trtcheck.partitioning.boundaries import GraphMustChange, apply_min_block_size, enforce_tensor_boundaries
from trtcheck.partitioning.decisions import Support, decide, follow_producers, is_getitem, support_function
from trtcheck.partitioning.partition import Partition, Reason, Segment, Target, is_compute
from trtcheck.partitioning.optimal import Optimal, boundary_bytes
from trtcheck.partitioning.segmentation import SEGMENTERS, Segmenter, dependency_aware, merge_adjacent
from trtcheck.settings import ModuleMatcher, OpMatcher, Settings, resolve_modules, resolve_ops


def partition(
    model: torch.nn.Module | torch.export.ExportedProgram,
    example_inputs: Sequence[Any] = (),
    settings: Settings | None = None,
    support: Support = None,
    *,
    example_kwargs: Mapping[str, Any] | None = None,
) -> Partition:
    """Lower ``model`` to core ATen and split it into TensorRT and Torch segments.

    ``settings`` is a ``Settings`` or ``None`` (the defaults); anything else is a ``SettingsError``
    (see ``Settings.coerce``). ``support`` decides convertibility: ``None`` for trtcheck's converter
    registry, a callable ``(torch.fx.Node) -> bool``, or a ``torch.fx.passes.operator_support.OperatorSupportBase``.
    A ``torch.export.ExportedProgram`` is partitioned as exported (decomposed, never traced again).
    """
    settings = Settings.coerce(settings)
    gm = lower(model, example_inputs, example_kwargs)
    owner = model if isinstance(model, torch.nn.Module) else None  # an ExportedProgram: its graph's meta names modules
    forced_modules = resolve_modules(settings.torch_executed_modules, gm.graph, owner)
    if gm is not model:  # lowering made a new graph: ours to rewrite
        return partition_graph(gm, settings, support, forced_modules=forced_modules)
    try:  # the user's own GraphModule: partition it in place unless a rule must add nodes
        return partition_graph(gm, settings, support, forced_modules=forced_modules, may_change_graph=False)
    except GraphMustChange:
        with _gc_paused():
            copy = copy_graph_module(gm)
        return partition_graph(copy, settings, support, forced_modules=forced_modules)


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
    settings = Settings.coerce(settings)
    with _gc_paused():
        return _partition_graph(gm, settings, support, forced_modules, may_change_graph)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: partitioning allocates many small acyclic objects next to a large
    graph, and each full collection walks the whole graph (measured: half of the time at 100k nodes)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _partition_graph(
    gm: torch.fx.GraphModule,
    settings: Settings,
    support: Support,
    forced_modules: ModuleMatcher | None,
    may_change_graph: bool,
) -> Partition:
    supports = support_function(support)
    forced_ops: OpMatcher = resolve_ops(settings.torch_executed_ops)
    if forced_modules is None:
        forced_modules = resolve_modules(settings.torch_executed_modules, gm.graph)
    segmenter = SEGMENTERS[settings.segmentation]

    nodes = [node for node in gm.graph.nodes if is_compute(node)]
    targets: dict[torch.fx.Node, Target] = {}
    reasons: dict[torch.fx.Node, Reason] = {}
    for node in nodes:
        if not is_getitem(node):
            targets[node], reasons[node] = decide(node, supports, forced_ops, forced_modules)
    follow_producers(nodes, targets, reasons)

    if settings.segmentation == "optimal":
        segments = _best_candidate(gm, nodes, targets, reasons, settings, may_change_graph)
    else:
        segments = _settle(gm, nodes, segmenter, targets, reasons, settings, may_change_graph)

    if may_change_graph:  # copies may have been inserted: keep the module's code in step with its graph
        gm.recompile()
    result = Partition(gm, segments, reasons, settings)
    if settings.require_full_compilation:
        _check_full_compilation(result)
    return result


def _settle(
    gm: torch.fx.GraphModule,
    nodes: list[torch.fx.Node],
    segmenter: Segmenter,
    targets: dict[torch.fx.Node, Target],
    reasons: dict[torch.fx.Node, Reason],
    settings: Settings,
    may_change_graph: bool,
) -> list[Segment]:
    """Segment, then apply the boundary rules and ``min_block_size``, until nothing changes (in place)."""
    # Each round either changes nothing (done) or moves at least one node to Torch or copies a
    # non-Tensor producer forward; the bound only guards against a bug turning that into a hang.
    for _ in range(2 * len(nodes) + 2):
        segments = merge_adjacent(segmenter(nodes, targets))
        changed = enforce_tensor_boundaries(gm.graph, segments, targets, reasons, may_change_graph)
        if not changed and not settings.require_full_compilation:
            changed = apply_min_block_size(segments, settings.min_block_size, targets, reasons)
        if not changed:
            return segments
        nodes = [node for node in gm.graph.nodes if is_compute(node)]
        follow_producers(nodes, targets, reasons)
    raise PartitionError("partitioning did not converge; please report this graph")  # pragma: no cover - a bug


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


def _best_candidate(
    gm: torch.fx.GraphModule,
    nodes: list[torch.fx.Node],
    targets: dict[torch.fx.Node, Target],
    reasons: dict[torch.fx.Node, Reason],
    settings: Settings,
    may_change_graph: bool,
) -> list[Segment]:
    """Run every candidate from the same decisions and adopt the best end result (``targets`` and
    ``reasons`` updated in place).

    A candidate that must insert copies (the copy rule) is scored on a private copy of the graph, so the
    candidates never see each other's copies; if it wins it runs again on ``gm`` itself (deterministic:
    the same decisions give the same result).
    """
    if settings.min_block_size <= 1 or settings.require_full_compilation:
        # Without min_block_size, every rule that moves a node to Torch looks only at targets (an edge
        # between targets is always between segments), so every candidate ends with the same targets,
        # for which the leveling is optimal: the others cannot win.
        return _settle(gm, nodes, Optimal(), targets, reasons, settings, may_change_graph)
    best: tuple[tuple[int, int, int], int, Callable[[], Segmenter], tuple | None, list[Segment]] | None = None
    for index, (_, make) in enumerate(OPTIMAL_CANDIDATES):
        mine_targets, mine_reasons = dict(targets), dict(reasons)
        try:
            segments = _settle(gm, list(nodes), make(), mine_targets, mine_reasons, settings, False)
            adopted: tuple | None = (segments, mine_targets, mine_reasons)
        except GraphMustChange:
            copy = copy_graph_module(gm)
            mapping = dict(zip(gm.graph.nodes, copy.graph.nodes, strict=True))
            copy_targets = {mapping[node]: target for node, target in targets.items()}
            copy_reasons = {mapping[node]: reason for node, reason in reasons.items()}
            copy_nodes = [mapping[node] for node in nodes]
            segments = _settle(copy, copy_nodes, make(), copy_targets, copy_reasons, settings, True)
            adopted = None
        score = candidate_score(segments)
        if best is None or score < best[0]:
            best = (score, index, make, adopted, segments)
        elif score == best[0] and boundary_bytes(segments) < boundary_bytes(best[4]):  # bytes only on a tie
            best = (score, index, make, adopted, segments)
    assert best is not None
    _, _, make, adopted, _ = best
    if adopted is None:  # the winner changes the graph: run it for real
        return _settle(gm, nodes, make(), targets, reasons, settings, may_change_graph)
    segments, won_targets, won_reasons = adopted
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
        "Fix: register a converter for these ops (trtcheck.converters.register), drop them from "
        "torch_executed_ops / torch_executed_modules, or set require_full_compilation=False."
    )
