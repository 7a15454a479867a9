"""``trtcheck.compile`` and ``trtcheck.partition`` with a ``frontend``: how a model becomes graphs.

``"export"``: one graph by ``torch.export`` (the pipeline as it always was); ``"compile"``: the graphs
``torch.compile`` captures between graph breaks, each compiled (or partitioned) on its own, as
``torch.compile(model, backend="tensorrt")`` deploys a model; ``"auto"`` (the default): export, and where export
refuses the model itself (``ExportRefusedError``) a warning saying so and ``"compile"``. A model export takes is
compiled and partitioned exactly as before.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from trtcheck.compiler import pipeline
from trtcheck.compiler.request import CompileRequest
from trtcheck.dynamo.backend import DynamoModule, compile_dynamo
from trtcheck.dynamo.capture import CapturedGraph, capture
from trtcheck.errors import ExportRefusedError, SettingsError
from trtcheck.partitioning import driver
from trtcheck.partitioning.decisions import Support
from trtcheck.partitioning.partition import Partition
from trtcheck.runtime.module import CompiledModule
from trtcheck.settings import Settings

FRONTENDS = ("auto", "export", "compile")


class GraphBreakWarning(UserWarning):
    """``frontend="auto"`` went through torch.compile: torch.export refused the model (the message says why)."""


def check_frontend(frontend: Any, dynamic: Any, caller: str) -> None:
    """A bad ``frontend`` or ``dynamic`` is the caller's mistake, refused before any work."""
    if frontend not in FRONTENDS:
        raise SettingsError(f"{caller}(frontend={frontend!r}): one of {', '.join(map(repr, FRONTENDS))} ('auto': torch.export, "
                            "and torch.compile's graphs only where export refuses the model)")
    if dynamic not in (False, True, None):
        raise SettingsError(f"{caller}(dynamic={dynamic!r}): torch.compile's dynamic, False (static: a new size recompiles), "
                            "True or None (frontend='compile' only)")


def through_compile(model: Any, frontend: str, caller: str) -> bool:
    """Whether ``frontend`` asks for torch.compile's graphs (a program or file cannot give them: refused)."""
    if frontend == "compile" and not isinstance(model, torch.nn.Module):
        raise SettingsError(f"{caller}(frontend='compile') of a {type(model).__name__}: torch.compile takes the nn.Module; "
                            "an exported program or .pt2 file is one graph already (frontend='export')")
    return frontend == "compile"


def _refused(error: ExportRefusedError) -> None:
    warnings.warn(f"{str(error).splitlines()[0]}; frontend='auto' compiles it through torch.compile's graphs instead, as "
                  "torch.compile(backend='tensorrt') deploys it (docs/graph-breaks.md)", GraphBreakWarning, stacklevel=3)


def compile(  # trtcheck.compile mirrors torch.compile and torch_tensorrt.compile
    model: torch.nn.Module | torch.export.ExportedProgram | str | os.PathLike,
    example_inputs: Sequence[Any] | None = None,
    settings: Settings | None = None,
    backend: str = "auto",
    *,
    frontend: str = "auto",
    dynamic: bool | None = False,
    example_kwargs: Mapping[str, Any] | None = None,
    **options: Any,
) -> CompiledModule | DynamoModule:
    """``compiler.pipeline.compile`` (its docstring says what every other option does) with a ``frontend`` (module
    docstring): through torch.compile it returns a ``DynamoModule``, called like ``model``, whose ``graphs`` are
    each captured graph's ``CompiledModule`` (``dynamic``: torch.compile's)."""
    check_frontend(frontend, dynamic, "compile")
    if not through_compile(model, frontend, "compile"):
        try:
            return pipeline.compile(model, example_inputs, settings, backend, example_kwargs=example_kwargs, **options)
        except ExportRefusedError as error:
            if frontend == "export" or not isinstance(model, torch.nn.Module):
                raise
            _refused(error)
    request = CompileRequest(settings, backend, **{key: value for key, value in options.items() if key != "dynamic_shapes"})
    return compile_dynamo(model, tuple(example_inputs or ()), request, example_kwargs=dict(example_kwargs or {}), dynamic=dynamic)


def partition(
    model: torch.nn.Module | torch.export.ExportedProgram,
    example_inputs: Sequence[Any] = (),
    settings: Settings | None = None,
    support: Support = None,
    *,
    frontend: str = "auto",
    dynamic: bool | None = False,
    example_kwargs: Mapping[str, Any] | None = None,
    dynamic_shapes: Any = None,
) -> Partition | list[tuple[CapturedGraph, Partition]]:
    """``partitioning.driver.partition`` with a ``frontend`` (module docstring): through torch.compile it returns each
    captured graph (its frame and the graph break that ended it) with its ``Partition``, in capture order."""
    check_frontend(frontend, dynamic, "partition")
    if not through_compile(model, frontend, "partition"):
        try:
            return driver.partition(model, example_inputs, settings, support, example_kwargs=example_kwargs,
                                    dynamic_shapes=dynamic_shapes)
        except ExportRefusedError as error:
            if frontend == "export" or not isinstance(model, torch.nn.Module):
                raise
            _refused(error)
    captured, _ = capture(model, [tuple(example_inputs)], example_kwargs, dynamic=dynamic)
    return [(graph, driver.partition(graph.graph_module, graph.calls[0][1], settings, support))
            for graph in captured.graphs if graph.calls and graph.compute_nodes]
