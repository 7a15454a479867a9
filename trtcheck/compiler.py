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

import onnx
import torch
import torch.fx

from trtcheck.control_flow import BranchConversion, Converted, compile_branches, convert_branches
from trtcheck.conversion import segment_to_onnx
from trtcheck.engines import Engine, TensorSpec, build_engine, resolve_backend
from trtcheck.errors import TrtcheckError
from trtcheck.lowering import copy_graph_module, independent_inputs, lower, own_mutable_state, symbol_ranges
from trtcheck.partitioning.decisions import Support
from trtcheck.partitioning.extract import segment_module
from trtcheck.partitioning.partition import Partition, Target
from trtcheck.partitioning.partitioner import partition_graph
from trtcheck.settings import Settings, resolve_modules
from trtcheck.shape_analysis import ShapeMismatch, ShapeMismatchError, find_mismatches, segment_shapes
from trtcheck.stitching import CompiledModule, InputSignature, check_torch_threads, stitch


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


@dataclass
class Conversion(Converted):
    """A model lowered, partitioned and converted: everything of ``compile`` before engines are built.

    ``onnx_models`` holds the serialized ONNX of every TensorRT segment that converted (by segment index);
    ``errors`` the conversion error of every one that did not. Determinism is checked on this: two
    conversions of one model from scratch must give the same segments and byte-identical ONNX.
    """

    graph_module: torch.fx.GraphModule
    partition: Partition
    onnx_models: dict[int, bytes]
    errors: dict[int, Exception]
    example_args: tuple
    example_kwargs: dict
    layout: list[tuple[str, list[str]]] = field(default_factory=list)  # segments as partitioned, before any fallback
    # TensorRT segments (by index) that produce or read a value whose shape or dtype, when the segments run
    # on the example inputs, is not its metadata's: their engines would be built from that metadata, so
    # compile runs them in PyTorch. They are converted all the same, so conversions compare alike.
    mismatched: dict[int, Exception] = field(default_factory=dict)
    branches: dict[str, BranchConversion] = field(default_factory=dict)  # torch.cond/while_loop branches (control_flow.py)


def convert(
    model: torch.nn.Module,
    example_inputs: Sequence[Any],
    settings: Settings | None = None,
    *,
    support: Support = None,
    example_kwargs: Mapping[str, Any] | None = None,
    check_shapes: bool = True,
    clock: _Clock | None = None,
    lowered: torch.fx.GraphModule | None = None,
    dynamic_shapes: Any = None,
) -> Conversion:
    """Lower, partition, analyse shapes and convert each TensorRT segment to ONNX; build no engine.

    The model is never changed: aliased example inputs are copied before export (a graph traced on
    ``(x, x)`` would ignore one input), and buffers the graph writes into get their own copies.
    ``lowered`` is ``lower(model, example_inputs)`` made earlier (see ``LoweringCache``): it is copied,
    never changed, so one lowering serves every setting a model is compiled with (it carries its own
    dynamic sizes: ``dynamic_shapes`` is then not read).
    """
    settings = Settings.coerce(settings)
    clock = clock or _Clock()
    args, kwargs = independent_inputs(example_inputs, example_kwargs)
    gm = lowered if lowered is not None else clock.run("lowering", lower, model, args, kwargs, dynamic_shapes=dynamic_shapes)
    forced_modules = resolve_modules(settings.torch_executed_modules, gm.graph, model)
    if gm is model or gm is lowered:  # compile never rewrites the caller's own GraphModule, nor its buffers
        gm = copy_graph_module(gm)
    own_mutable_state(gm)
    partition = clock.run("partitioning", partition_graph, gm, settings, support, forced_modules=forced_modules)
    mismatched: dict[int, Exception] = {}
    if check_shapes:
        mismatches = clock.run("shape_analysis", find_mismatches, partition, _flat_inputs(gm, args, kwargs))
        mismatched = _mismatched_segments(partition, mismatches)
    onnx_models, errors = convert_segments(partition, clock)
    branches = convert_branches(partition, clock)
    return Conversion(gm, partition, onnx_models, errors, args, kwargs, mismatched=mismatched, branches=branches)


def convert_segments(partition: Partition, clock: _Clock) -> tuple[dict[int, bytes], dict[int, Exception]]:
    """The serialized ONNX of every TensorRT segment of ``partition`` that converts, and the error of every
    one that does not (by segment index): one segment's failure is contained, reported, never raised."""
    onnx_models: dict[int, bytes] = {}
    errors: dict[int, Exception] = {}
    for index, segment in enumerate(partition.segments):
        if segment.target is Target.TENSORRT:
            try:
                model = clock.run("conversion", segment_to_onnx, segment_module(partition.graph_module, segment))
                onnx_models[index] = model.SerializeToString()
            except Exception as error:  # noqa: BLE001 - any failure of one segment is contained and reported
                errors[index] = error
    return onnx_models, errors


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
    lowered: torch.fx.GraphModule | None = None,
    dynamic_shapes: Any = None,
    torch_threads: int | str | None = "auto",
) -> CompiledModule:
    """Partition ``model``, build one engine per TensorRT segment, and stitch them with the Torch segments.

    Returns a ``CompiledModule`` called like ``model`` (same inputs, same output structure), with
    ``.partition`` (the ``Partition``, including fallbacks), ``.compile_times`` (``CompileTimes``),
    ``.engines`` and ``.graph_module`` (the stitched graph). A TensorRT segment that fails to convert or
    build runs in PyTorch (``partition.fallbacks`` says why) unless ``strict``. ``lowered``: see ``convert``.

    ``torch_threads``: PyTorch's thread count while the compiled module runs. ``"auto"`` runs PyTorch on
    one thread when the module has engines and every op left to PyTorch is memory-bound (a spinning
    PyTorch worker would otherwise slow the next engine: ``stitching.auto_torch_threads``); an int sets
    that count for every call; None leaves ``torch.get_num_threads()`` as the caller has it.
    """
    check_torch_threads(torch_threads)  # before any work: a bad value is the caller's mistake, not the model's
    settings = Settings.coerce(settings)
    backend = resolve_backend(backend)  # an explicit backend missing here fails now, before any work
    clock = _Clock()
    conversion = convert(
        model, example_inputs, settings, support=support, example_kwargs=example_kwargs, check_shapes=check_shapes, clock=clock,
        lowered=lowered, dynamic_shapes=dynamic_shapes,
    )
    partition = conversion.partition
    engines = build_engines(
        partition, conversion.onnx_models, conversion.errors, backend, clock, symbol_ranges(conversion.graph_module),
        strict=strict, mismatched=conversion.mismatched, engines_in_model=conversion.engine_count,
    )
    stitched = clock.run("stitching", stitch, partition, engines)
    compile_branches(conversion, stitched, backend, strict=strict, clock=clock)  # engines inside control-flow branches
    signature = InputSignature.of(model, conversion.example_args, conversion.example_kwargs, graph_module=conversion.graph_module)
    return CompiledModule(stitched, signature, clock.times, conversion, torch_threads)


def build_engines(
    partition: Partition,
    onnx_models: Mapping[int, bytes],
    errors: Mapping[int, Exception],
    backend: str,
    clock: _Clock,
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
    for index, onnx_bytes in onnx_models.items():
        if index in failures:
            continue
        shapes = segment_shapes(partition.segments[index], ranges)
        outputs = [TensorSpec(f"output_{i}", s.shape, s.dtype) for i, s in enumerate(shapes.outputs)]
        try:
            engines[index] = clock.run(
                "engine_build", build_engine, onnx.load_from_string(onnx_bytes), shapes.inputs, outputs, backend,
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


def _mismatched_segments(partition: Partition, mismatches: Sequence[ShapeMismatch]) -> dict[int, Exception]:
    """The TensorRT segments that produce or read a mismatched value, by index, each with the error its
    fallback reports: the value, what the metadata says and what the segments really gave (the first such
    value per segment). A value only Torch segments touch needs nothing: no engine is built from it."""
    found: dict[int, Exception] = {}
    for mismatch in mismatches:
        for index, segment in enumerate(partition.segments):
            produced, read = mismatch.node in segment.nodes, mismatch.node in segment.inputs
            if segment.target is Target.TENSORRT and (produced or read) and index not in found:
                found[index] = ShapeMismatchError(
                    f"{'output' if produced else 'input'} {mismatch.node.name} is {mismatch.got} when the segments "
                    f"run on the example inputs, the graph's metadata says {mismatch.expected}"
                )
    return found


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


def _flat_inputs(gm: torch.fx.GraphModule, args: Sequence[Any], kwargs: Mapping[str, Any] | None) -> list[Any]:
    """The model's inputs flattened the way the lowered graph's placeholders take them."""
    if getattr(gm.graph._codegen, "pytree_info", None) is None:  # placeholders take the arguments as they are
        return list(args)
    leaves, _ = torch.utils._pytree.tree_flatten((tuple(args), dict(kwargs or {})))
    return leaves
