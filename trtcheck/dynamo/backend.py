"""The dynamo backend: each graph ``torch.compile`` captures, compiled by trtcheck's own pipeline.

As Torch-TensorRT's ``backend="tensorrt"`` does, every captured graph is lowered to core ATen, partitioned, converted
and stitched on its own (``compile_request``, with the model's one ``CompileRequest``), and the model runs under
dynamo with those modules between its graph breaks. A graph trtcheck cannot compile at all (lowering refused) runs
as dynamo gave it and is listed (``DynamoModule.failed``): a failed conversion falls back to PyTorch and is reported,
the rule every segment follows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from trtcheck.compiler.pipeline import compile_request
from trtcheck.compiler.request import CompileRequest
from trtcheck.dynamo.capture import DYNAMIC, CapturedGraph, detached_copy, frame_of, graph_break_of
from trtcheck.errors import LoweringError, UnmatchedOpError
from trtcheck.runtime.module import CompiledModule


@dataclass
class CompiledGraph:
    """One captured graph as the backend compiled it: ``module`` (None when trtcheck could not, ``error`` says why).
    A graph with symbolic sizes (``dynamic=True``) is compiled once per size it is called at: ``sizes`` holds each
    compiled module by the sizes of its inputs, ``module`` the first."""

    captured: CapturedGraph
    module: CompiledModule | None
    error: str = ""
    sizes: dict[tuple, CompiledModule] = field(default_factory=dict)


def without_unmatched_ops(request: CompileRequest, unmatched: Sequence[str]) -> CompileRequest:
    """``request`` forcing only the ``torch_executed_ops`` one captured graph calls: a model in several graphs is
    asked for each op as a whole (``graph_breaks``, ``compile_graph``), never each graph for every op."""
    kept = [op for op in request.settings.torch_executed_ops if op not in unmatched]
    return dataclasses.replace(request, settings=dataclasses.replace(request.settings, torch_executed_ops=kept))


def compile_graph(gm: torch.fx.GraphModule, args: Sequence[Any], request: CompileRequest,
                  unmatched: list[tuple[str, ...]] | None = None) -> CompiledModule:
    """One captured graph compiled with ``request``, the ``torch_executed_ops`` it does not call left out (and
    appended to ``unmatched``, one entry per graph: ``check_ops_matched`` asks the model as a whole)."""
    try:
        module = compile_request(gm, tuple(args), request)
    except UnmatchedOpError as error:
        module = compile_request(gm, tuple(args), without_unmatched_ops(request, error.unmatched))
        missed = error.unmatched
    else:
        missed = ()
    if unmatched is not None:
        unmatched.append(missed)
    return module


def check_ops_matched(request: CompileRequest, unmatched: Sequence[tuple[str, ...]]) -> None:
    """The ``torch_executed_ops`` no captured graph calls (each graph's ``unmatched``) would force nothing: an
    ``UnmatchedOpError`` for the model, as one exported graph gets."""
    if not unmatched:
        return
    nowhere = [op for op in request.settings.torch_executed_ops if all(op in missed for missed in unmatched)]
    if nowhere:
        raise UnmatchedOpError(f"torch_executed_ops: {', '.join(map(repr, nowhere))} matches no node of any graph torch.compile "
                               "captured: the model does not call it, so it would force nothing. Remove it", tuple(nowhere))


def sizes_of(args: Sequence[Any]) -> tuple:
    """What a graph's static compilation depends on: each Tensor input's shape, each int's value."""
    return tuple(tuple(arg.shape) if isinstance(arg, torch.Tensor) else arg for arg in args)


def symbolic(gm: torch.fx.GraphModule) -> bool:
    """Whether dynamo gave ``gm`` symbolic sizes (``dynamic=True``, or ``None`` after a recompile): a SymInt input,
    or a Tensor input with a symbolic dimension."""
    for node in gm.graph.nodes:
        value = node.meta.get("example_value") if node.op == "placeholder" else None
        if isinstance(value, torch.SymInt) or (isinstance(value, torch.Tensor) and any(
                isinstance(size, torch.SymInt) for size in value.shape)):
            return True
    return False


class PerSize:
    """A graph with symbolic sizes, compiled statically per size it is called at (a new size compiles new engines,
    where TensorRT would take one engine with a shape range: ``graph.sizes`` says how many). Exporting dynamo's
    symbolic graph with ``dynamic_shapes`` fails in torch 2.14 (export's guard function reads dynamo's frame), so
    the sizes are made concrete before export."""

    def __init__(self, graph: CompiledGraph, request: CompileRequest, unmatched: list[tuple[str, ...]]) -> None:
        self.graph, self.request, self.unmatched = graph, request, unmatched

    def __call__(self, *args: Any) -> Any:
        """The graph at ``args``' sizes, compiled on its first call at them: compiling inside dynamo's own compile of
        the frame (the backend call) fails for a symbolic graph (export reads dynamo's frame), so it waits for a call.
        A size that cannot be lowered runs as captured (``graph.error`` says why, ``DynamoModule.failed`` lists it)."""
        key = sizes_of(args)
        if key not in self.graph.sizes:
            try:
                self.graph.sizes[key] = compile_graph(self.graph.captured.graph_module, args, self.request, self.unmatched)
            except LoweringError as error:
                self.graph.error = str(error).splitlines()[0]
                return self.graph.captured.graph_module.forward(*args)
            self.graph.module = self.graph.module or self.graph.sizes[key]
        return self.graph.sizes[key](*args)


@dataclass
class GraphCall:
    """One call of a compiled graph in a recorded run: its inputs and outputs (detached copies; empty when the
    recording kept only times) and the seconds it took."""

    graph: CompiledGraph
    inputs: tuple
    outputs: Any
    seconds: float


class TrtcheckBackend:
    """A ``torch.compile`` backend compiling every captured graph with ``request``; ``graphs`` lists them in the
    order dynamo captured them (a recompile adds one)."""

    def __init__(self, request: CompileRequest) -> None:
        self.request = request
        self.graphs: list[CompiledGraph] = []
        self.unmatched: list[tuple[str, ...]] = []  # per compiled graph, the torch_executed_ops it does not call
        self.calls: list[GraphCall] | None = None
        """While a list (``recording``): every call of a compiled graph."""
        self._copies = True

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        captured = CapturedGraph(len(self.graphs), gm, frame_of(gm), graph_break_of(gm))
        if symbolic(gm):
            graph = CompiledGraph(captured, None)
            run: Callable[..., Any] = PerSize(graph, self.request, self.unmatched)
        else:
            try:
                graph = CompiledGraph(captured, compile_graph(gm, example_inputs, self.request, self.unmatched))
                run = graph.module
            except LoweringError as error:  # the graph runs as captured; DynamoModule.failed reports it
                graph, run = CompiledGraph(captured, None, str(error).splitlines()[0]), gm.forward
        self.graphs.append(graph)

        def call(*args: Any) -> Any:
            if self.calls is None:
                return run(*args)
            start = time.perf_counter()
            outputs = run(*args)
            seconds = time.perf_counter() - start
            copies = (detached_copy(args), detached_copy(outputs)) if self._copies else ((), None)
            self.calls.append(GraphCall(graph, *copies, seconds))
            return outputs

        return call

    @contextlib.contextmanager
    def recording(self, copies: bool = True) -> Iterator[list[GraphCall]]:
        """Every call of a compiled graph while active: what the deployed model's graphs got and gave (``copies``
        False: only how long each took, for timing)."""
        self.calls, self._copies = [], copies
        try:
            yield self.calls
        finally:
            self.calls = None


class DynamoModule(torch.nn.Module):
    """``model`` under ``torch.compile`` with trtcheck's backend: called like ``model``; ``graphs`` are the graphs
    compiled so far (dynamo compiles on the first call, and again on a recompile)."""

    def __init__(self, model: torch.nn.Module, request: CompileRequest, dynamic: bool | None = False) -> None:
        super().__init__()
        if dynamic not in DYNAMIC:
            raise ValueError(f"dynamic={dynamic!r}: torch.compile's dynamic is False, True or None")
        self.model = model
        self.backend = TrtcheckBackend(request)
        self.dynamic = dynamic
        torch._dynamo.reset()  # a model compiled earlier in the process would keep its old backend's graphs
        self._compiled = torch.compile(model, backend=self.backend, dynamic=dynamic)

    @property
    def graphs(self) -> list[CompiledGraph]:
        return self.backend.graphs

    @property
    def failed(self) -> list[CompiledGraph]:
        return [graph for graph in self.graphs if graph.error]

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._compiled(*args, **kwargs)


def compile_dynamo(model: torch.nn.Module, example_inputs: Sequence[Any], request: CompileRequest, *,
                   example_kwargs: dict | None = None, dynamic: bool | None = False) -> DynamoModule:
    """``model`` compiled as ``torch.compile(model, backend="tensorrt", dynamic=dynamic)`` deploys it, with trtcheck's
    pipeline per graph: called once on the examples (under no_grad), so every graph of that path is compiled here.
    Dynamo's caches are reset first (``DynamoModule``), so other models compiled in the process compile again."""
    module = DynamoModule(model, request, dynamic)
    with torch.no_grad():
        module(*example_inputs, **dict(example_kwargs or {}))
    check_ops_matched(request, module.backend.unmatched)
    return module
