"""The front half of ``compile``: lower, partition, analyse shapes. Nothing here converts or builds.

Each phase takes the previous one's result and returns its own: ``lower`` a ``GraphModule`` (copied here when it
is the caller's own), ``partition_graph`` a ``Partition`` of it, ``analyse_shapes`` a ``ShapeAnalysis`` of that
partition. ``Front`` holds the three, with the example inputs as the graph takes them, for the back half
(``convert``: ONNX, ``engine_build``: engines, ``pipeline``: stitching).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from trtcheck.compiler.clock import Clock
from trtcheck.compiler.request import CompileRequest, request_of
from trtcheck.lowering.export import independent_inputs, keeps, lower
from trtcheck.lowering.graph import copy_graph_module, flat_inputs, own_mutable_state
from trtcheck.names import resolve_modules
from trtcheck.partitioning.driver import partition_graph
from trtcheck.partitioning.partition import Partition
from trtcheck.settings import Settings
from trtcheck.shapes import ShapeAnalysis, analyse_shapes


@dataclass(frozen=True)
class Front:
    """A model lowered (``graph_module``, compile's own copy), partitioned and shape-analysed, with the example
    inputs it was lowered on (aliases made independent)."""

    graph_module: torch.fx.GraphModule
    partition: Partition
    shapes: ShapeAnalysis
    example_args: tuple
    example_kwargs: dict


def front(
    model: torch.nn.Module | torch.export.ExportedProgram,
    example_inputs: Sequence[Any],
    settings: Settings | CompileRequest | None = None,
    *,
    example_kwargs: Mapping[str, Any] | None = None,
    clock: Clock | None = None,
    **options: Any,
) -> Front:
    """Lower, partition and analyse shapes, as ``settings`` (a ``CompileRequest``, or ``Settings`` and ``options``,
    the request's other fields, made into one: ``request_of``) asks.

    The model is never changed: aliased example inputs are copied before export (a graph traced on
    ``(x, x)`` would ignore one input), and buffers the graph writes into get their own copies.
    ``request.lowered`` is ``lower(model, example_inputs)`` made earlier (see ``LoweringCache``): its graph is copied,
    never changed, so one lowering serves every setting a model is compiled with (it carries its own
    dynamic sizes: ``dynamic_shapes`` is then not read). Its ``meta`` keeps shape analysis's run on the example
    inputs (``shapes.OBSERVED``), which the next analysis from it on the same inputs reads instead of running again.
    ``check_shapes=False`` skips that run: segment shapes are then the metadata's, unchecked.
    """
    request = request_of(settings, **options)
    settings, lowered, keep = request.settings, request.lowered, request.kept_ops
    clock = clock or Clock()
    args, kwargs = independent_inputs(example_inputs, example_kwargs)
    if lowered is not None and not keeps(lowered, keep):
        lowered = None  # lowered for settings that let a forced op decompose: lower again, keeping it whole
    gm = lowered if lowered is not None else clock.run(
        "lowering", lower, model, args, kwargs, dynamic_shapes=request.dynamic_shapes, keep=keep)
    owner = model if isinstance(model, torch.nn.Module) else None  # a program: its graph's meta names the modules
    forced_modules = resolve_modules(settings.torch_executed_modules, gm.graph, owner)
    if gm is model or gm is lowered:  # compile never rewrites the caller's own GraphModule, nor its buffers
        gm = copy_graph_module(gm)
    own_mutable_state(gm)
    partition = clock.run("partitioning", partition_graph, gm, settings, request.support, forced_modules=forced_modules)
    flat = flat_inputs(gm, args, kwargs) if request.check_shapes else None
    shapes = clock.run("shape_analysis", analyse_shapes, partition, flat, lowered)
    return Front(gm, partition, shapes, args, kwargs)
