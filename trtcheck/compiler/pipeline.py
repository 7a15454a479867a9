"""``trtcheck.compile``: the whole pipeline, lowering to stitching, with a failure of one segment contained.

A TensorRT segment whose conversion or engine build fails does not fail the model: the segment falls
back to PyTorch, each of its nodes gets a ``conversion_failed`` reason carrying the error, and
``partition.fallbacks`` lists it. ``strict=True`` raises instead, for CI that must not degrade quietly.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch
import torch.fx

from trtcheck.compiler.clock import Clock
from trtcheck.compiler.convert import convert
from trtcheck.compiler.engine_build import build_branches, build_engines, stitch_built
from trtcheck.compiler.request import CompileRequest
from trtcheck.lowering.export import source_of
from trtcheck.memory import release_mkl_buffers
from trtcheck.partitioning.decisions import Support
from trtcheck.runtime.module import CompiledModule
from trtcheck.runtime.signature import InputSignature
from trtcheck.settings import Settings


def compile(  # trtcheck.compile mirrors torch.compile and torch_tensorrt.compile
    model: torch.nn.Module | torch.export.ExportedProgram | str | os.PathLike,
    example_inputs: Sequence[Any] | None = None,
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

    ``model`` is an ``nn.Module``, a ``torch.export.ExportedProgram`` (lowered as exported, called like
    ``program.module()``) or a ``.pt2`` file's path; a program's stored example inputs serve when
    ``example_inputs`` is None.

    Returns a ``CompiledModule`` called like ``model`` (same inputs, same output structure), with
    ``.partition`` (the ``Partition``, including fallbacks), ``.compile_times`` (``CompileTimes``),
    ``.engines`` and ``.graph_module`` (the stitched graph). A TensorRT segment that fails to convert or
    build runs in PyTorch (``partition.fallbacks`` says why) unless ``strict``. ``lowered``: see ``convert``.

    ``torch_threads``: PyTorch's thread count while the compiled module runs. ``"auto"`` runs PyTorch on
    one thread when the module has engines and every op left to PyTorch is memory-bound (a spinning
    PyTorch worker would otherwise slow the next engine: ``stitching.auto_torch_threads``); an int sets
    that count for every call; None leaves ``torch.get_num_threads()`` as the caller has it.
    """
    request = CompileRequest(settings, backend, support=support, strict=strict, check_shapes=check_shapes, lowered=lowered,
                             dynamic_shapes=dynamic_shapes, torch_threads=torch_threads)
    return compile_request(model, example_inputs, request, example_kwargs)


def compile_request(
    model: torch.nn.Module | torch.export.ExportedProgram | str | os.PathLike,
    example_inputs: Sequence[Any] | None,
    request: CompileRequest,
    example_kwargs: Mapping[str, Any] | None = None,
) -> CompiledModule:
    """``compile`` with its options as one ``CompileRequest``, checked once by its maker (``verify``'s request holds
    one): each phase takes the previous phase's value and returns its own, ``front -> convert -> build -> stitch``."""
    clock = Clock()
    source = source_of(model, example_inputs, example_kwargs)
    conversion = convert(source.lowerable, source.example_args, request, example_kwargs=source.example_kwargs, clock=clock)
    backend, strict = request.backend, request.strict
    branches = build_branches(conversion, backend, strict=strict, clock=clock)  # engines inside control-flow branches
    built = build_engines(
        conversion.partition, conversion.onnx_models, conversion.errors, backend, clock, conversion.shapes,
        strict=strict, engines_in_model=conversion.engine_count, branches={n: b.partition for n, b in branches.items()},
    )
    stitched = stitch_built(replace(built, branches=branches), clock)
    release_mkl_buffers()  # what shape analysis's run left cached, freed now that no engine is left to build
    signature = InputSignature.of(source.eager, conversion.example_args, conversion.example_kwargs, graph_module=conversion.graph_module)
    return CompiledModule(stitched, signature, clock.times, conversion, request.torch_threads)
