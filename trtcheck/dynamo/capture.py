"""What dynamo captures of a model: its graphs, the breaks between them and the inputs each graph was called with.

``capture`` runs the model under ``torch.compile`` with a recording backend that runs every graph as dynamo gave
it (eager), so the model computes what eager computes while each graph's inputs are kept, call by call. Those inputs
are what verification compares each graph on: a graph inside a detector takes proposals, anchors and feature maps
that random values drawn like the model's inputs would not resemble.
"""

from __future__ import annotations

import contextlib
import os
import re
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from torch.utils._pytree import tree_map

DYNAMIC = (False, True, None)
"""``torch.compile``'s ``dynamic``: False (static: every new size recompiles, Torch-TensorRT's advice), True, or None
(static first, dynamic after a recompile)."""


@dataclass(frozen=True)
class GraphBreak:
    """Why dynamo ended a graph: its reason and the user's frames (innermost last), ``file:line in function``."""

    reason: str
    frames: tuple[str, ...] = ()

    @property
    def line(self) -> str:
        """The innermost frame: the line that broke the graph."""
        return self.frames[-1] if self.frames else "(unknown line)"

    def __str__(self) -> str:
        return f"{self.line}: {self.reason}"


@dataclass
class CapturedGraph:
    """One graph dynamo captured: ``index`` in capture order, the torch-level ``graph_module`` dynamo gave its
    backend, the frame it came from, the break that ended it (None: it ran to the frame's return), and ``calls``:
    ``(input set index, inputs)`` of every call it served, detached copies."""

    index: int
    graph_module: torch.fx.GraphModule
    frame: str
    ended_by: GraphBreak | None
    calls: list[tuple[int, tuple]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"graph {self.index} ({self.frame})"

    @property
    def compute_nodes(self) -> int:
        return sum(node.op in ("call_function", "call_method", "call_module") for node in self.graph_module.graph.nodes)


@dataclass
class Capture:
    """Every graph of a model's run under dynamo, in capture order, and the recompiles it made (a graph captured
    again for the same frame: a guard failed, a new input size under ``dynamic=False``)."""

    graphs: list[CapturedGraph]
    dynamic: bool | None
    guard_failures: list[str] = field(default_factory=list)
    """Why each recompile happened: ``function (file:line): the guard that failed`` (dynamo's ``guard_failures``)."""

    @property
    def breaks(self) -> list[GraphBreak]:
        return [graph.ended_by for graph in self.graphs if graph.ended_by is not None]

    @property
    def recompiles(self) -> int:
        frames = [graph.frame for graph in self.graphs]
        return len(frames) - len(set(frames)) if self.dynamic is not None else 0

    def at_recompile_limit(self) -> list[str]:
        """Frames captured as often as dynamo allows (``torch._dynamo.config.recompile_limit``): past it, dynamo runs
        the frame in eager PyTorch, silently, so a deployed model stops being accelerated there."""
        limit = torch._dynamo.config.recompile_limit
        counts: dict[str, int] = {}
        for graph in self.graphs:
            counts[graph.frame] = counts.get(graph.frame, 0) + 1
        return [frame for frame, count in counts.items() if count >= limit]

    def lines(self) -> list[str]:
        """The capture as a report prints it: each graph with its size and the break that ended it."""
        lines = [f"{len(self.graphs)} graph(s) captured by torch.compile (dynamic={self.dynamic}), {len(self.breaks)} graph "
                 f"break(s), {self.recompiles} recompile(s)"]
        lines += [f"  recompiled: {failure}" for failure in self.guard_failures]
        lines += [f"  {frame}: captured {torch._dynamo.config.recompile_limit} times, dynamo's recompile_limit: past it the "
                  "frame runs in eager PyTorch (data-dependent sizes under dynamic=False: try dynamic=None or True)"
                  for frame in self.at_recompile_limit()]
        for graph in self.graphs:
            ended = f"; ended by a graph break at {graph.ended_by}" if graph.ended_by else ""
            lines.append(f"  {graph.name}: {graph.compute_nodes} node(s), called {len(graph.calls)} time(s){ended}")
        return lines


def _frames(stack: Sequence[traceback.FrameSummary] | None) -> tuple[str, ...]:
    return tuple(f"{_short(frame.filename)}:{frame.lineno} in {frame.name}" for frame in stack or ())


def _short(filename: str) -> str:
    """A file as a report names it: from its package folder (``torchvision/ops/boxes.py``), no machine paths."""
    parts = filename.replace(os.sep, "/").split("/")
    for anchor in ("site-packages", "dist-packages"):
        if anchor in parts:
            return "/".join(parts[parts.index(anchor) + 1:])
    return "/".join(parts[-2:])


def graph_break_of(gm: torch.fx.GraphModule) -> GraphBreak | None:
    """The break that made dynamo compile ``gm`` (``compile_subgraph_reason``, what ``torch._dynamo.explain`` reads)."""
    reason = getattr(gm, "compile_subgraph_reason", None)
    if reason is None or not getattr(reason, "graph_break", False):
        return None
    return GraphBreak(str(reason.reason).strip().splitlines()[0], _frames(getattr(reason, "user_stack", None)))


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def frame_of(gm: torch.fx.GraphModule) -> str:
    """Where dynamo captured ``gm`` from: the outermost user frame of its first node's stack, ``file:line in
    function``."""
    for node in gm.graph.nodes:
        frames = _FRAME.findall(node.meta.get("stack_trace") or "")
        if frames:
            path, line, function = frames[0]
            return f"{_short(path)}:{line} in {function}"
    return "a frame without source"


def detached_copy(value: Any) -> Any:
    """``value`` with every Tensor detached and cloned (a Parameter made a plain tensor): what a call's inputs were."""
    return tree_map(lambda leaf: leaf.detach().clone() if isinstance(leaf, torch.Tensor) else leaf, value)


@contextlib.contextmanager
def fresh_dynamo() -> Iterator[None]:
    """Dynamo with nothing cached before and after: a model compiled earlier in the process would reuse its graphs
    (and its backend) instead of handing them to ours."""
    torch._dynamo.reset()
    try:
        yield
    finally:
        torch._dynamo.reset()


def capture(model: torch.nn.Module, input_sets: Sequence[tuple], kwargs: Mapping[str, Any] | None = None, *,
            dynamic: bool | None = False, run: Callable[[Any], Any] | None = None) -> tuple[Capture, list[Any]]:
    """Run ``model`` on each of ``input_sets`` under ``torch.compile`` (``dynamic``), every captured graph run as
    dynamo gave it; returns the ``Capture`` and the model's outputs per set (eager's, computed through dynamo)."""
    if dynamic not in DYNAMIC:
        raise ValueError(f"dynamic={dynamic!r}: torch.compile's dynamic is False, True or None")
    graphs: list[CapturedGraph] = []
    current = [0]

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        graph = CapturedGraph(len(graphs), gm, frame_of(gm), graph_break_of(gm))
        graphs.append(graph)

        def recorded(*args: Any) -> Any:
            graph.calls.append((current[0], detached_copy(args)))
            return gm.forward(*args)

        return recorded

    outputs = []
    with fresh_dynamo(), torch.no_grad():
        compiled = torch.compile(model, backend=backend, dynamic=dynamic)
        for index, input_set in enumerate(input_sets):
            current[0] = index
            outputs.append(detached_copy(compiled(*input_set, **dict(kwargs or {}))))
        failures = guard_failures()
    return Capture(graphs, dynamic, failures), outputs


def guard_failures() -> list[str]:
    """Every guard failure dynamo recorded since its last reset (``torch._dynamo.utils.guard_failures``), as
    ``function (file:line): reason``: why a frame was captured again."""
    return [f"{code.co_name} ({_short(code.co_filename)}:{code.co_firstlineno}): {reason}"
            for code, reasons in torch._dynamo.utils.guard_failures.items() for reason in reasons]
