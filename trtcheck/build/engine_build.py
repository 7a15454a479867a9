"""Build engines for a converted partition, containing every failure: a segment that fails falls back.

A TensorRT segment whose conversion, shape analysis or engine build fails does not fail the model: it
runs in PyTorch, each of its nodes gets a ``conversion_failed`` reason naming the stage and the error, and
``partition.fallbacks`` lists it. ``strict=True`` raises ``CompilationError`` instead. Branches of control
flow get their engines the same way, each stitched and swapped into its stitched parent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import onnx
import torch
import torch.fx

from trtcheck.build.clock import Clock
from trtcheck.build.convert import BranchConversion, OnnxModels
from trtcheck.engines import Engine, TensorSpec, build_engine
from trtcheck.errors import CompilationError
from trtcheck.lowering.symbols import symbol_ranges
from trtcheck.partitioning.model import Partition
from trtcheck.runtime.stitch import call_without_autograd, stitch
from trtcheck.shapes import segment_shapes

if TYPE_CHECKING:
    from trtcheck.build.convert import Conversion


def build_engines(
    partition: Partition,
    onnx_models: OnnxModels | Mapping[int, bytes],
    errors: Mapping[int, Exception],
    backend: str,
    clock: Clock,
    ranges: Mapping[str, Any],
    *,
    strict: bool = False,
    mismatched: Mapping[int, Exception] | None = None,
    engines_in_model: int = 1,
    where: str = "",
) -> dict[int, Engine]:
    """The engine of every TensorRT segment of ``partition`` that converted (``onnx_models``, by index), after
    falling back to PyTorch each one that did not: a conversion error (``errors``), a shape-analysis mismatch
    (``mismatched``) or a failed engine build, each with its stage; ``strict`` raises instead. Engines are
    keyed by their segments' indices after those fallbacks (which merge segments). ``where`` names the
    control-flow branch in errors (``"true_graph_0"``); ``ranges`` the graph's symbol ranges (``symbol_ranges``).
    """
    mismatched = mismatched or {}
    engines: dict[int, Engine] = {}
    failures = {**errors, **mismatched}
    for index in list(onnx_models):
        if index in failures:
            continue
        shapes = segment_shapes(partition.segments[index], ranges)
        outputs = [TensorSpec(f"output_{i}", s.shape, s.dtype) for i, s in enumerate(shapes.outputs)]
        try:
            model, weights = _model_and_weights(onnx_models, index)
            engines[index] = clock.run(
                "engine_build", build_engine, model, shapes.inputs, outputs, backend, weights=weights,
                engines_in_model=engines_in_model, settings=partition.settings, shape_ranges=shapes.shape_ranges(),
            )
        except Exception as error:  # noqa: BLE001 - any failure of one segment is contained and reported
            failures[index] = error
    by_segment = {id(partition.segments[i]): engine for i, engine in engines.items()}
    for index, segment in [(i, partition.segments[i]) for i in sorted(failures)]:
        if strict:
            of_branch = f" of branch {where}" if where else ""
            raise CompilationError(
                f"TensorRT segment @{index}{of_branch} ({len(segment.nodes)} nodes, first {segment.nodes[0].name}) "
                f"failed to compile: {type(failures[index]).__name__}: {failures[index]}"
            ) from failures[index]
        if index in mismatched:
            stage = _SHAPE_STAGE
        else:
            stage = _CONVERSION_STAGE if index in errors else _ENGINE_STAGE
        partition.fall_back(segment, failures[index], stage=stage)
    if failures:  # fall_back merged segments: re-key the engines by their segments' new indices
        engines = {i: by_segment[id(s)] for i, s in enumerate(partition.segments) if id(s) in by_segment}
    return engines


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


def compile_branches(conversion: Conversion, stitched: torch.fx.GraphModule, backend: str, *, strict: bool, clock: Any) -> None:
    """Build the engines of every branch of ``conversion``, stitch each branch and swap it into ``stitched``
    (the stitched parent, in place), nested branches first into their own stitched parents.

    Fallbacks go to the branch's sub-partition and, prefixed ``branch NAME:``, to its parent's.
    """
    ranges = symbol_ranges(conversion.graph_module)  # one export: branches share the parent's symbols
    _compile(conversion.partition, conversion.branches, stitched, backend, strict, clock, ranges, conversion.engine_count, "")


def _compile(
    parent: Partition,
    branches: Mapping[str, BranchConversion],
    stitched_parent: torch.fx.GraphModule,
    backend: str,
    strict: bool,
    clock: Any,
    ranges: Mapping[str, Any],
    engines_in_model: int,
    path: str,
) -> None:

    for name, branch in branches.items():
        where = f"{path}/{name}" if path else name
        engines = build_engines(
            branch.partition, branch.onnx_models, branch.errors, backend, clock, ranges,
            strict=strict, engines_in_model=engines_in_model, where=where,
        )
        module = clock.run("stitching", stitch, branch.partition, engines)
        _compile(branch.partition, branch.branches, module, backend, strict, clock, ranges, engines_in_model, where)
        owner, _, attribute = name.rpartition(".")
        setattr(stitched_parent.get_submodule(owner), attribute, module)
        parent.fallbacks += [f"branch {name}: {line}" for line in branch.partition.fallbacks]
    call_without_autograd(stitched_parent)
