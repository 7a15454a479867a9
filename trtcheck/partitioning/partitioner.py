"""The partitioning driver: decisions, then segmentation and the boundary rules until a fixed point.

Every rule only ever moves nodes from TensorRT to Torch (or copies a non-Tensor producer into the
segment that reads it), so the loop terminates; each round is linear in the graph's size.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.fx

from trtcheck.errors import PartitionError
from trtcheck.lowering import copy_graph_module, lower
from trtcheck.partitioning.boundaries import GraphMustChange, apply_min_block_size, enforce_tensor_boundaries
from trtcheck.partitioning.decisions import Support, decide, follow_producers, is_getitem, support_function
from trtcheck.partitioning.partition import Partition, Reason, Target, is_compute
from trtcheck.partitioning.segmentation import SEGMENTERS, merge_adjacent
from trtcheck.settings import ModuleMatcher, OpMatcher, Settings, resolve_modules, resolve_ops


def partition(
    model: torch.nn.Module,
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
    """
    settings = Settings.coerce(settings)
    gm = lower(model, example_inputs, example_kwargs)
    forced_modules = resolve_modules(settings.torch_executed_modules, gm.graph, model)
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

    # Each round either changes nothing (done) or moves at least one node to Torch or copies a
    # non-Tensor producer forward; the bound only guards against a bug turning that into a hang.
    for _ in range(2 * len(nodes) + 2):
        segments = merge_adjacent(segmenter(nodes, targets))
        changed = enforce_tensor_boundaries(gm.graph, segments, targets, reasons, may_change_graph)
        if not changed and not settings.require_full_compilation:
            changed = apply_min_block_size(segments, settings.min_block_size, targets, reasons)
        if not changed:
            break
        nodes = [node for node in gm.graph.nodes if is_compute(node)]
        follow_producers(nodes, targets, reasons)
    else:  # pragma: no cover - would be a bug in the rules
        raise PartitionError("partitioning did not converge; please report this graph")

    if may_change_graph:  # copies may have been inserted: keep the module's code in step with its graph
        gm.recompile()
    result = Partition(gm, segments, reasons, settings)
    if settings.require_full_compilation:
        _check_full_compilation(result)
    return result


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
