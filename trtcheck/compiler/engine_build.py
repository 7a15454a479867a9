"""Build engines for a converted partition, containing every failure: a segment that fails falls back.

A TensorRT segment whose conversion, shape analysis or engine build fails does not fail the model: it
runs in PyTorch, each of its nodes gets a ``conversion_failed`` reason naming the stage and the error, and
``partition.fallbacks`` lists it, in a new ``Partition`` (``with_fallbacks``: the converted one is left as
partitioning made it). ``strict=True`` raises ``CompilationError`` instead. Branches of control flow get their
engines the same way, innermost first, and are stitched before the graph that calls them (``stitch_built``).

Each segment's ONNX is finished here, once, before its engine is built (``build_segment_engine``): the
mixed-precision graph of ``Settings.precision`` (``mixed_precision.precision_graph``: TensorRT 11 is strongly typed,
so the precision is the graph's types), and the backend's ``EngineOptions``, made from ``Settings`` once per build
(``engine_options``). Engines run the graph they are given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import onnx
import torch
import torch.fx

from trtcheck.compiler.clock import Clock
from trtcheck.compiler.convert import BranchConversion, OnnxModels, convert_module
from trtcheck.compiler.mixed_precision import precision_graph
from trtcheck.engines import Engine, EngineOptions, ShapeRange, TensorSpec, build_engine
from trtcheck.errors import CompilationError
from trtcheck.partitioning.nodes import in_branch
from trtcheck.partitioning.partition import Fallback, Partition
from trtcheck.runtime.stitch import stitch
from trtcheck.settings import Autocast, Settings
from trtcheck.shapes import ShapeAnalysis

if TYPE_CHECKING:
    from trtcheck.compiler.convert import Conversion


@dataclass(frozen=True)
class Built:
    """The engine build's result: the partition as it runs (a new one, with the segments that failed fallen back
    to PyTorch: ``Partition.with_fallbacks``), the engine of each of its TensorRT segments, by its index, and
    the same for each branch of control flow, by name (``build_branches``)."""

    partition: Partition
    engines: dict[int, Engine]
    branches: dict[str, Built] = field(default_factory=dict)


def build_engines(
    partition: Partition,
    onnx_models: OnnxModels | Mapping[int, bytes],
    errors: Mapping[int, Exception],
    backend: str,
    clock: Clock,
    shapes: ShapeAnalysis,
    *,
    strict: bool = False,
    engines_in_model: int = 1,
    where: str = "",
    branches: Mapping[str, Partition] | None = None,
) -> Built:
    """The engine of every TensorRT segment of ``partition`` that converted (``onnx_models``, by index), and the
    partition with each one that did not fall back to PyTorch: a conversion error (``errors``), a shape-analysis
    mismatch (``shapes.mismatched``) or a failed engine build, each with its stage; ``strict`` raises instead.
    ``partition`` is not changed. ``where`` names the control-flow branch in errors (``"true_graph_0"``);
    ``branches`` are the branches' partitions as built (``Partition.with_fallbacks``).
    """
    engines: dict[int, Engine] = {}
    options = engine_options(partition.settings)
    mismatched = shapes.mismatched
    failures = {**errors, **mismatched}
    for index in list(onnx_models):
        if index in failures:
            continue
        try:
            segment_shapes = shapes.segments[index]
            outputs = [TensorSpec(f"output_{i}", s.shape, s.dtype) for i, s in enumerate(segment_shapes.outputs)]
            model, weights = _model_and_weights(onnx_models, index)
            engines[index] = clock.run(
                "engine_build", build_segment_engine, model, segment_shapes.inputs, outputs, backend, settings=partition.settings,
                weights=weights, engines_in_model=engines_in_model, shape_ranges=segment_shapes.shape_ranges(), options=options,
            )
        except Exception as error:  # noqa: BLE001 - any failure of one segment is contained and reported
            failures[index] = error
    fallbacks: dict[int, Fallback] = {}
    for index in sorted(failures):
        if strict:
            segment = partition.segments[index]
            of_branch = f" of branch {where}" if where else ""
            raise CompilationError(
                f"TensorRT segment @{index}{of_branch} ({len(segment.nodes)} nodes, first {segment.nodes[0].name}) "
                f"failed to compile: {type(failures[index]).__name__}: {failures[index]}"
            ) from failures[index]
        if index in mismatched:
            stage = _SHAPE_STAGE
        else:
            stage = _CONVERSION_STAGE if index in errors else _ENGINE_STAGE
        fallbacks[index] = Fallback(failures[index], stage)
    built = partition.with_fallbacks(fallbacks, branches=branches)
    renumbered = partition.surviving_indices(built)
    return Built(built, {renumbered[i]: engine for i, engine in engines.items()})


def build_graph_engine(
    module: torch.fx.GraphModule,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    backend: str,
    *,
    settings: Settings | None = None,
) -> Engine:
    """The engine of one standalone graph (``partitioning.extract``'s cut), converted (``convert_module``) and built
    (``engines.build_engine``) as compile converts and builds a segment's: localization's and reduction's
    sub-engines, so that what they find about a converter or an engine is what compile would do with it. Nothing is
    contained: the caller reports a failure. ``inputs`` name the graph's placeholders; ``outputs`` are ``output_0``,
    ``output_1``, ... (``segment_to_onnx``'s names); ``settings`` None builds in float32 with the defaults."""
    converted = convert_module(module)
    return build_segment_engine(converted.model, inputs, outputs, backend, settings=settings, weights=converted.weights)


def engine_options(settings: Settings | None) -> EngineOptions:
    """The ``EngineOptions`` of ``settings`` (None: the defaults): TF32, TensorRT's workspace and engine cache, and
    how the graph was made (precision, fp32_nodes, use_fp32_acc, autocast), which TensorRT records in its cache."""
    if settings is None:
        return EngineOptions()
    autocast = Autocast.of(settings.autocast)
    return EngineOptions(
        tf32=bool(settings.tf32),
        workspace_size=settings.workspace_size,
        engine_cache=settings.engine_cache,
        engine_cache_dir=settings.engine_cache_dir,
        precision=settings.precision,
        fp32_nodes=tuple(sorted(settings.fp32_nodes or ())),
        use_fp32_acc=bool(settings.use_fp32_acc),
        autocast=None if autocast is None else dataclasses.asdict(autocast),
    )


def build_segment_engine(
    model: onnx.ModelProto,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    backend: str = "auto",
    *,
    settings: Settings | None = None,
    weights: Mapping[str, torch.Tensor] | None = None,
    engines_in_model: int = 1,
    shape_ranges: Mapping[str, ShapeRange] | None = None,
    options: EngineOptions | None = None,
) -> Engine:
    """The engine of one segment's ONNX ``model`` as converted (its ``weights`` by reference, or None) under
    ``settings``: its finished graph made once (``precision_graph``), then built (``engines.build_engine``) with
    ``options`` (None: ``engine_options(settings)``). What compile does for every segment and localization for
    its sub-engines."""
    model, weights = precision_graph(model, settings, weights)
    options = engine_options(settings) if options is None else options
    return build_engine(
        model, inputs, outputs, backend, engines_in_model=engines_in_model, options=options, shape_ranges=shape_ranges,
        weights=weights,
    )


def _model_and_weights(onnx_models: OnnxModels | Mapping[int, bytes], index: int) -> tuple[onnx.ModelProto, Any]:
    """Segment ``index``'s model as converted, its weights by reference (``SegmentOnnx``: nothing serialized or
    parsed here, each engine copies its weights once), or parsed from bytes where bytes are all there is."""
    model = onnx_models.segment(index) if isinstance(onnx_models, OnnxModels) else onnx_models[index]
    if isinstance(model, bytes):
        return onnx.load_from_string(model), None
    return model.model, model.weights


# What failed, in the words of a fallback's reason: a converter and an engine call for different fixes.
_CONVERSION_STAGE = "conversion failed: a trtcheck converter bug or gap"


_SHAPE_STAGE = (
    "shape analysis: the engine would be built from metadata the model does not follow, e.g. a PyTorch meta "
    "function that disagrees with its CPU kernel"
)


_ENGINE_STAGE = (
    "engine build failed: the backend refused an ONNX model that passed onnx.checker's full check, "
    "an engine limitation rather than a converter bug"
)


def build_branches(conversion: Conversion, backend: str, *, strict: bool, clock: Any) -> dict[str, Built]:
    """The engines of every branch of ``conversion``, each branch with its own branches built first: by branch name,
    each branch's ``Built`` (its partition as it runs, which lists its branches' fallbacks as ``branch NAME: ...``,
    and its engines). ``stitch_built`` stitches them."""
    return _build(conversion.branches, conversion.shapes.branches, backend, strict, clock, conversion.engine_count, "")


def _build(
    branches: Mapping[str, BranchConversion],
    shapes: Mapping[str, ShapeAnalysis],
    backend: str,
    strict: bool,
    clock: Any,
    engines_in_model: int,
    path: str,
) -> dict[str, Built]:
    built: dict[str, Built] = {}
    for name, branch in branches.items():
        where = in_branch(path, name)
        nested = _build(branch.branches, shapes[name].branches, backend, strict, clock, engines_in_model, where)
        own = build_engines(
            branch.partition, branch.onnx_models, branch.errors, backend, clock, shapes[name],
            strict=strict, engines_in_model=engines_in_model, where=where,
            branches={n: b.partition for n, b in nested.items()},
        )
        built[name] = replace(own, branches=nested)
    return built


def stitch_built(built: Built, clock: Any) -> torch.fx.GraphModule:
    """``built`` stitched, each of its branches stitched first (nested ones first of all) and put in its place."""
    modules = {name: stitch_built(branch, clock) for name, branch in built.branches.items()}
    return clock.run("stitching", stitch, built.partition, built.engines, branches=modules)
