"""``trtcheck.compile``: the whole pipeline, lowering to stitching, with a failure of one segment contained.

A TensorRT segment whose conversion or engine build fails does not fail the model: the segment falls
back to PyTorch, each of its nodes gets a ``conversion_failed`` reason carrying the error, and
``partition.fallbacks`` lists it. ``strict=True`` raises instead, for CI that must not degrade quietly.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from trtcheck.conversion import segment_to_onnx
from trtcheck.engines import Engine, TensorSpec, build_engine, resolve_backend
from trtcheck.errors import TrtcheckError
from trtcheck.lowering import copy_graph_module, lower
from trtcheck.partitioning.decisions import Support
from trtcheck.partitioning.extract import segment_module
from trtcheck.partitioning.partition import Partition, Reason, ReasonKind, Target
from trtcheck.partitioning.partitioner import partition_graph
from trtcheck.partitioning.segmentation import merge_adjacent
from trtcheck.settings import Settings, resolve_modules
from trtcheck.shape_analysis import confirm_shapes, random_like, segment_shapes
from trtcheck.stitching import stitch


class CompilationError(TrtcheckError):
    """With ``strict=True``: a TensorRT segment could not be converted or built."""


@dataclass
class CompileTimes:
    """Seconds spent in each phase of ``compile`` (the benchmark report splits compile time by these)."""

    lowering: float = 0.0
    partitioning: float = 0.0
    shape_analysis: float = 0.0
    conversion: float = 0.0
    engine_build: float = 0.0
    stitching: float = 0.0

    @property
    def total(self) -> float:
        return sum(vars(self).values())


@dataclass
class _Clock:
    times: CompileTimes = field(default_factory=CompileTimes)

    def run(self, phase: str, fn, *args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            setattr(self.times, phase, getattr(self.times, phase) + time.perf_counter() - start)


def compile(  # noqa: A001 - trtcheck.compile mirrors torch.compile and torch_tensorrt.compile
    model: torch.nn.Module,
    example_inputs: Sequence[Any],
    settings: Settings | None = None,
    backend: str = "auto",
    *,
    support: Support = None,
    strict: bool = False,
    check_shapes: bool = True,
    example_kwargs: Mapping[str, Any] | None = None,
) -> torch.fx.GraphModule:
    """Partition ``model``, build one engine per TensorRT segment, and stitch them with the Torch segments.

    Returns a ``torch.fx.GraphModule`` called like ``model`` (same inputs, same output structure), with
    ``.partition`` (the ``Partition``, including fallbacks) and ``.compile_times`` (``CompileTimes``).
    """
    settings = settings if settings is not None else Settings()
    settings.validate()
    backend = resolve_backend(backend)
    clock = _Clock()
    gm = clock.run("lowering", lower, model, example_inputs, example_kwargs)
    forced_modules = resolve_modules(settings.torch_executed_modules, gm.graph, model)
    if gm is model:  # compile never rewrites the caller's own GraphModule
        gm = copy_graph_module(gm)
    partition = clock.run("partitioning", partition_graph, gm, settings, support, forced_modules=forced_modules)
    if check_shapes:
        fresh_inputs = [random_like(x) for x in _flat_inputs(gm, example_inputs, example_kwargs)]
        clock.run("shape_analysis", confirm_shapes, partition, fresh_inputs)

    engines: dict[int, Engine] = {}
    failed: list[int] = []
    for index, segment in enumerate(partition.segments):
        if segment.target is not Target.TENSORRT:
            continue
        try:
            shapes = segment_shapes(segment)
            onnx_model = clock.run("conversion", segment_to_onnx, segment_module(gm, segment))
            outputs = [TensorSpec(f"output_{i}", s.shape, s.dtype) for i, s in enumerate(shapes.outputs)]
            engines[index] = clock.run("engine_build", build_engine, onnx_model, shapes.inputs, outputs, backend)
        except Exception as error:  # noqa: BLE001 - any failure of one segment is contained and reported
            if strict:
                raise CompilationError(
                    f"TensorRT segment @{index} ({len(segment.nodes)} nodes, first {segment.nodes[0].name}) "
                    f"failed to compile: {type(error).__name__}: {error}"
                ) from error
            _fall_back(partition, index, error)
            failed.append(index)
    if failed:
        engines = _renumber(partition, engines)
    stitched = clock.run("stitching", stitch, partition, engines)
    stitched.compile_times = clock.times
    return stitched


def _fall_back(partition: Partition, index: int, error: Exception) -> None:
    segment = partition.segments[index]
    message = f"{type(error).__name__}: {error}".strip()
    partition.fallbacks.append(f"segment @{index} ({len(segment.nodes)} nodes) runs in PyTorch: {message}")
    segment.target = Target.TORCH
    for node in segment.nodes:
        partition.reasons[node] = Reason(ReasonKind.CONVERSION_FAILED, message)


def _renumber(partition: Partition, engines: dict[int, Engine]) -> dict[int, Engine]:
    """Merge segments made neighbours by a fallback, and re-key the engines by their new indices."""
    by_segment = {id(partition.segments[i]): engine for i, engine in engines.items()}
    partition.segments = merge_adjacent(partition.segments)
    return {i: by_segment[id(s)] for i, s in enumerate(partition.segments) if id(s) in by_segment}


def _flat_inputs(gm: torch.fx.GraphModule, args: Sequence[Any], kwargs: Mapping[str, Any] | None) -> list[Any]:
    """The model's inputs flattened the way the lowered graph's placeholders take them."""
    if getattr(gm.graph._codegen, "pytree_info", None) is None:  # placeholders take the arguments as they are
        return list(args)
    leaves, _ = torch.utils._pytree.tree_flatten((tuple(args), dict(kwargs or {})))
    return leaves
