"""Where the time of a compiled module goes: every segment (engine or Torch) and the crossings between them.

``trtcheck.profile(compiled, *inputs)`` runs a copy of the stitched graph with a timestamp taken at the
start and at the end of every segment (``time.perf_counter_ns`` into a preallocated list: about 0.1 us a
mark, no per-node interpreter), and, for engines that support it (``OnnxRuntimeEngine.run_times``), the
time inside the backend's run. What counts where:

* a **Torch segment**'s time is the wall time from its first copied ATen node to its last;
* an **engine segment**'s time is the time *inside* the engine's run, for ONNX Runtime the call of
  ``session.run_with_iobinding`` alone. Checking the inputs, binding them, allocating the outputs, the
  Python call of the ``EngineModule`` and the ``getitem``/``restride`` nodes after it are *crossing*
  costs. An engine without such a hook is timed from its call to its last ``getitem`` (an upper bound);
* ``total_s`` is one whole call of the compiled module, input check included, and ``boundary_s`` is
  what remains: ``total_s - engine_s - torch_s`` (crossings, the input check, output packing, marks).

``boundaries`` is the number of *values* crossing a segment boundary per call, as
``trtcheck.partitioning.partition.boundary_traffic`` counts them (and the benchmark report shows): every input of
an engine segment (graph inputs included) and every input of a Torch segment produced by another segment.
``per_boundary_s`` is ``boundary_s / boundaries`` (0.0 when nothing crosses).

Every field comes from one run: of ``repeat`` timed runs (after ``warmup``), the one with the median total
time, so that the fields add up exactly (segment times are disjoint intervals inside that run's total).
Profiling calls the module ``warmup + repeat`` times under ``torch.inference_mode``, with the same effects
as that many ordinary calls (a model that updates buffers updates them).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from torch.utils._pytree import tree_structure

from trtcheck.partitioning.partition import boundary_traffic
from trtcheck.partitioning.reasons import Target
from trtcheck.runtime.module import CompiledModule
from trtcheck.runtime.stitch import SEGMENT_META

__all__ = ["Profile", "Profiler", "SegmentTime", "profile"]


@dataclass(frozen=True)
class SegmentTime:
    """Seconds spent in one segment: ``target`` is ``"tensorrt"`` (an engine) or ``"torch"``."""

    index: int
    target: str
    seconds: float


@dataclass(frozen=True)
class Profile:
    """One call of a compiled module, split into engines, Torch segments and the crossings between them."""

    total_s: float
    engine_s: float
    torch_s: float
    boundary_s: float
    boundaries: int
    per_boundary_s: float
    segments: list[SegmentTime] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "total_s": self.total_s,
            "engine_s": self.engine_s,
            "torch_s": self.torch_s,
            "boundary_s": self.boundary_s,
            "boundaries": self.boundaries,
            "per_boundary_s": self.per_boundary_s,
            "segments": [{"index": s.index, "target": s.target, "seconds": s.seconds} for s in self.segments],
        }

    def __str__(self) -> str:
        return (
            f"total {self.total_s * 1e3:.3f} ms = engines {self.engine_s * 1e3:.3f} ms + torch {self.torch_s * 1e3:.3f} ms "
            f"+ boundaries {self.boundary_s * 1e3:.3f} ms ({self.boundaries} values crossing, "
            f"{self.per_boundary_s * 1e6:.1f} us each)"
        )


class Profiler:
    """A compiled module instrumented for timing: call ``run`` to call it once and keep that run's timings."""

    def __init__(self, compiled: CompiledModule) -> None:
        if not isinstance(compiled, CompiledModule):
            raise TypeError(f"trtcheck.profile takes what trtcheck.compile returns, got {type(compiled).__name__}")
        self.compiled = compiled
        self.partition = compiled.partition
        self.targets = ["tensorrt" if s.target is Target.TENSORRT else "torch" for s in self.partition.segments]
        self.engines = {index: e for index, e in compiled.engines.items() if hasattr(e, "run_times")}
        self.stamps = [0] * (2 * len(self.targets))
        self.module = self._instrument(compiled.graph_module)
        self.samples: list[tuple[int, list[int]]] = []  # per run: total ns, ns per segment

    def _instrument(self, stitched: torch.fx.GraphModule) -> torch.fx.GraphModule:
        stamps, clock = self.stamps, time.perf_counter_ns

        def mark(slot: int) -> None:
            stamps[slot] = clock()

        graph = torch.fx.Graph()
        copies: dict[torch.fx.Node, torch.fx.Node] = {}
        for node in stitched.graph.nodes:  # node_copy copies meta too: the segment index comes along
            copies[node] = graph.node_copy(node, copies.__getitem__)
        graph._codegen = stitched.graph._codegen
        current = None
        seen: set[int] = set()
        for node in list(graph.nodes):
            index = node.meta.get(SEGMENT_META)
            if node.op == "output" or (index is not None and index != current):
                if current is not None:
                    with graph.inserting_before(node):
                        graph.call_function(mark, (2 * current + 1,))
                    current = None
                if index is not None:
                    if index in seen:  # stitch emits each segment's nodes contiguously
                        raise ValueError(f"segment @{index}'s nodes are not contiguous in the stitched graph")
                    seen.add(index)
                    with graph.inserting_before(node):
                        graph.call_function(mark, (2 * index,))
                    current = index
        missing = set(range(len(self.targets))) - seen
        if missing:
            raise ValueError(
                f"segments {sorted(missing)} have no node marked with meta[{SEGMENT_META!r}]: "
                "the compiled module was stitched by an older trtcheck; compile it again"
            )
        return torch.fx.GraphModule(stitched, graph, class_name="ProfiledModule")

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Call the instrumented module once, like the compiled module; record and return its outputs."""
        for engine in self.engines.values():
            engine.run_times = []
        try:
            start = time.perf_counter_ns()
            result = self.compiled.call(self.module, args, kwargs)
            total = time.perf_counter_ns() - start
            per_segment = [self.stamps[2 * i + 1] - self.stamps[2 * i] for i in range(len(self.targets))]
            for index, engine in self.engines.items():
                per_segment[index] = sum(engine.run_times)
        finally:
            for engine in self.engines.values():
                engine.run_times = None
        self.samples.append((total, per_segment))
        return result

    def result(self) -> Profile:
        """The run with the median total time among those recorded, as a ``Profile``."""
        if not self.samples:
            raise ValueError("no run recorded: call Profiler.run first")
        ordered = sorted(self.samples, key=lambda sample: sample[0])
        total, per_segment = ordered[(len(ordered) - 1) // 2]
        segments = [SegmentTime(i, t, ns * 1e-9) for i, (t, ns) in enumerate(zip(self.targets, per_segment))]
        engine_ns = sum(ns for t, ns in zip(self.targets, per_segment) if t == "tensorrt")
        torch_ns = sum(ns for t, ns in zip(self.targets, per_segment) if t == "torch")
        boundary_ns = total - engine_ns - torch_ns
        boundaries, _ = boundary_traffic(self.partition.segments)
        return Profile(
            total_s=total * 1e-9,
            engine_s=engine_ns * 1e-9,
            torch_s=torch_ns * 1e-9,
            boundary_s=boundary_ns * 1e-9,
            boundaries=boundaries,
            per_boundary_s=boundary_ns * 1e-9 / boundaries if boundaries else 0.0,
            segments=segments,
        )


def profile(
    compiled: CompiledModule,
    *inputs: Any,
    repeat: int = 20,
    warmup: int = 3,
    kwargs: Mapping[str, Any] | None = None,
) -> Profile:
    """Time every segment of ``compiled`` and the crossings between them; see the module's docstring.

    ``inputs`` are the compiled module's positional inputs, or one tuple of them
    (``trtcheck.profile(m, x, y)`` and ``trtcheck.profile(m, (x, y))`` are the same).
    """
    if repeat < 1 or warmup < 0:
        raise ValueError(f"repeat must be >= 1 and warmup >= 0, got repeat={repeat}, warmup={warmup}")
    args = _positional(compiled, inputs)
    profiler = Profiler(compiled)
    kwargs = dict(kwargs or {})
    with torch.inference_mode():
        for _ in range(warmup):
            profiler.run(*args, **kwargs)
        profiler.samples.clear()
        for _ in range(repeat):
            profiler.run(*args, **kwargs)
    return profiler.result()


def _positional(compiled: CompiledModule, inputs: tuple) -> tuple:
    """``inputs`` as positional arguments: one tuple (or list) holding all of them is unpacked.

    The module's own structure decides: ``(x, y)`` for ``forward(x, y)`` is unpacked, ``([a, b],)`` for
    ``forward(xs)`` too, but ``[a, b]`` for ``forward(xs)`` is that one input.
    """
    if len(inputs) == 1 and isinstance(inputs[0], (tuple, list)):
        if tree_structure(tuple(inputs[0])) == compiled.signature.spec.child(0):  # the spec of (args, kwargs)
            return tuple(inputs[0])
    return inputs

