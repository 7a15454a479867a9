"""Shape analysis: the shapes and dtypes crossing every segment boundary, with their ranges.

They come from the graph's fake-tensor metadata (``meta["val"]``), which is what engines are built from.
A graph exported with ``dynamic_shapes`` carries symbolic sizes (``s0``, ``2*s0``); as the seed's shape
analysis gives every engine input a (min, opt, max) shape, ``value_shape`` bounds each size over the
ranges export recorded for its symbols (``bound_sympy``), opt being the example's size.
As the seed's shape analysis runs each segment with JIT, ``find_mismatches`` runs the graph on the example
inputs (``observe``) and checks that every boundary value has the recorded shape and dtype, so an engine is
never built for a shape the model does not produce. One run (an ``Observation``) serves every partition of one
graph: compile keeps it with a lowering that is reused (``convert``'s ``lowered``). The example inputs, not
random ones: a model's inputs may be constrained (a Cholesky factor needs a positive-definite matrix), and the
examples are the one input set known to be valid. They run on copies, and the graph's mutable buffers are restored afterwards, so
shape analysis changes neither the caller's tensors nor the compiled module's state.

``TensorSpec`` and ``ShapeRange``, what an engine is built for, are defined here: shape analysis makes them,
the engines take them.
"""

from __future__ import annotations

import contextlib
import ctypes
import operator
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch
import torch.fx

from trtcheck.errors import ShapeMismatchError
from trtcheck.lowering.graph import is_mutable_state
from trtcheck.lowering.symbols import DimRange, Ranges, dim_range, symbol_ranges
from trtcheck.partitioning.model import Partition, Segment
from trtcheck.values import cloned


@dataclass(frozen=True)
class TensorSpec:
    """Name, static shape and dtype of one engine input or output.

    Segments are cut from a graph carrying fake-tensor metadata, so every shape is known when the
    engine is built. That is what lets engines check calls cheaply and pre-allocate their outputs.
    A negative dimension means "not known at build time": a size that varies with a ``torch.export.Dim``
    (it matches any size on input, ``ShapeRange`` bounds it, and the backend allocates that output).
    """

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    def __post_init__(self) -> None:
        # Normalise torch.Size / lists to a plain tuple so equality and hashing behave.
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    @property
    def is_static(self) -> bool:
        """True when every dimension is known, so a buffer can be allocated before running."""
        return all(d >= 0 for d in self.shape)

    def matches_shape(self, shape: Sequence[int]) -> bool:
        """True when ``shape`` fits this spec (negative spec dimensions accept any size)."""
        return len(shape) == len(self.shape) and all(e < 0 or e == g for e, g in zip(self.shape, shape))

    @classmethod
    def like(cls, name: str, tensor: torch.Tensor) -> TensorSpec:
        """The spec of ``tensor`` under ``name``: handy for tests and for callers holding examples."""
        return cls(name, tuple(tensor.shape), tensor.dtype)


@dataclass(frozen=True)
class ShapeRange:
    """The shapes one engine input accepts: TensorRT optimizes for ``opt`` and runs anything in [min, max]."""

    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]

    def __post_init__(self) -> None:
        for name in ("min", "opt", "max"):
            object.__setattr__(self, name, tuple(int(d) for d in getattr(self, name)))
        if not len(self.min) == len(self.opt) == len(self.max):
            raise ValueError(f"min {self.min}, opt {self.opt} and max {self.max} must have the same rank")
        if any(d < 0 for d in self.min):
            raise ValueError(f"min {self.min} has a negative dimension; a range needs known bounds")
        if not all(lo <= o <= hi for lo, o, hi in zip(self.min, self.opt, self.max)):
            raise ValueError(f"need min <= opt <= max in every dimension, got min {self.min}, opt {self.opt}, max {self.max}")

    @classmethod
    def static(cls, shape: Sequence[int]) -> ShapeRange:
        """The range of a static input: exactly ``shape``."""
        return cls(tuple(shape), tuple(shape), tuple(shape))

    @property
    def is_static(self) -> bool:
        return self.min == self.opt == self.max

    def contains(self, shape: Sequence[int]) -> bool:
        return len(shape) == len(self.min) and all(lo <= d <= hi for lo, d, hi in zip(self.min, shape, self.max))


def meta_shape(meta: torch.Tensor) -> tuple[int, ...]:
    """A fake tensor's shape with every symbolic (dynamic) dimension as -1."""
    return tuple(int(d) if isinstance(d, int) else -1 for d in meta.shape)


def tensor_spec(value: torch.fx.Node) -> TensorSpec:
    """The ``TensorSpec`` of one boundary value (a dynamic dimension becomes -1)."""
    meta = value.meta.get("val")
    if not isinstance(meta, torch.Tensor):
        raise TypeError(f"{value.name} carries {type(meta).__name__}, not a Tensor: it cannot cross an engine boundary")
    return TensorSpec(value.name, meta_shape(meta), meta.dtype)


@dataclass(frozen=True)
class ValueShape:
    """(min, opt, max) of one boundary value, per dimension; what a TensorRT optimization profile needs."""

    name: str
    dims: tuple[DimRange, ...]
    dtype: torch.dtype

    @property
    def is_static(self) -> bool:
        return all(d.is_static for d in self.dims)

    @property
    def opt(self) -> tuple[int, ...]:
        return tuple(d.opt for d in self.dims)

    def shape_range(self) -> ShapeRange | None:
        """The engine input's profile; None when a dimension is unbounded (a TensorRT profile needs a max).
        A minimum of 0 becomes 1: an empty tensor is a corner engines handle unevenly, and no converter takes one."""
        if any(d.max is None for d in self.dims):
            return None
        return ShapeRange(
            tuple(max(d.min, 1) if not d.is_static else d.min for d in self.dims),
            self.opt,
            tuple(d.max for d in self.dims),  # type: ignore[misc] - checked above
        )

    def __str__(self) -> str:
        return f"[{', '.join(map(str, self.dims))}] {str(self.dtype).removeprefix('torch.')}"


def value_shape(value: torch.fx.Node, ranges: Ranges) -> ValueShape:
    """The ``ValueShape`` of one Tensor value, from its metadata and the graph's symbol ranges."""
    meta = value.meta.get("val")
    if not isinstance(meta, torch.Tensor):
        raise TypeError(f"{value.name} carries {type(meta).__name__}, not a Tensor: it has no shape range")
    return ValueShape(value.name, tuple(dim_range(d, ranges) for d in meta.shape), meta.dtype)


@dataclass(frozen=True)
class SegmentShapes:
    """What crosses one segment's boundary: the engine's specs (-1 for a dynamic size) and their ranges."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    input_ranges: tuple[ValueShape, ...] = ()
    output_ranges: tuple[ValueShape, ...] = ()

    def shape_ranges(self) -> dict[str, ShapeRange]:
        """Engine input name -> profile, for every dynamic input whose range is bounded."""
        found = {}
        for spec, shape in zip(self.inputs, self.input_ranges):
            if not shape.is_static:
                profile = shape.shape_range()
                if profile is not None:
                    found[spec.name] = profile
        return found


def segment_shapes(segment: Segment, ranges: Ranges | None = None) -> SegmentShapes:
    """Input and output specs of a segment whose boundary values are all Tensors (TensorRT segments), with
    the (min, opt, max) of each over ``ranges`` (``symbol_ranges`` of the graph; None: no symbol bounded)."""
    ranges = ranges or {}
    return SegmentShapes(
        tuple(map(tensor_spec, segment.inputs)),
        tuple(map(tensor_spec, segment.outputs)),
        tuple(value_shape(v, ranges) for v in segment.inputs),
        tuple(value_shape(v, ranges) for v in segment.outputs),
    )


def partition_shapes(partition: Partition) -> list[SegmentShapes | None]:
    """``segment_shapes`` of every segment whose boundary values are all Tensors, None for the others."""
    ranges = symbol_ranges(partition.graph_module)
    found: list[SegmentShapes | None] = []
    for segment in partition.segments:
        try:
            found.append(segment_shapes(segment, ranges))
        except TypeError:  # a non-Tensor value crosses this (Torch) segment's boundary
            found.append(None)
    return found


def symbol_values(gm: torch.fx.GraphModule, flat_inputs: Sequence[Any]) -> dict[sympy.Symbol, int]:
    """The value every symbol takes for ``flat_inputs`` (one per placeholder), read off the sizes that are a
    plain symbol: what the symbolic sizes of every other value are evaluated with."""
    found: dict[sympy.Symbol, int] = {}
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    for node, value in zip(placeholders, flat_inputs):
        meta = node.meta.get("val")
        if isinstance(meta, torch.Tensor) and isinstance(value, torch.Tensor) and meta.dim() == value.dim():
            for size, got in zip(meta.shape, value.shape):
                if isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol):
                    found.setdefault(size.node.expr, int(got))
    return found


def expected_shape(meta: torch.Tensor, values: Mapping[sympy.Symbol, int]) -> tuple[int, ...]:
    """``meta``'s shape evaluated with ``values``; -1 for a size whose symbols are not all known."""
    shape = []
    for size in meta.shape:
        if isinstance(size, int):
            shape.append(size)
            continue
        expr = size.node.expr
        if expr.free_symbols <= set(values):
            shape.append(int(expr.xreplace(values)))
        else:
            shape.append(-1)
    return tuple(shape)


@dataclass(frozen=True)
class ShapeMismatch:
    """A boundary value whose shape or dtype, when the segments run on the example inputs, is not its metadata's."""

    segment: int  # the index of the segment that produced it, when it was found
    node: torch.fx.Node
    expected: str  # what the metadata says, e.g. "[5] torch.float32"
    got: str

    def __str__(self) -> str:
        return f"segment @{self.segment}: {self.node.name} is {self.got}, metadata says {self.expected}"


@dataclass(frozen=True)
class Observation:
    """What every value of a graph was when the graph ran on the example inputs: its shape and dtype (the
    type's name for a non-Tensor), by node name, and where the run stopped if a node raised.

    One run serves every partition of that graph: a boundary value is the same value whichever segments the
    graph is cut into, so ``find_mismatches`` checks each partition's boundaries against one observation instead
    of running the model again per partition (the matrix compiles one lowering under several presets).
    """

    values: Mapping[str, tuple[str, tuple[int, ...], torch.dtype] | tuple[str, str]]  # name -> (op, shape, dtype) | (op, type)
    symbols: Mapping[sympy.Symbol, int]
    failed_at: str | None = None  # the node whose op raised
    error: BaseException | None = None

    def covers(self, graph: torch.fx.Graph) -> bool:
        """True when this was observed on a graph with ``graph``'s nodes (names, ops, targets and arguments), up to
        where it stopped."""
        for node in graph.nodes:
            if node.op in ("placeholder", "output"):
                continue
            if node.name == self.failed_at:
                return True
            seen = self.values.get(node.name)
            if seen is None or seen[0] != _op(node):
                return False
        return self.failed_at is None


def _op(node: torch.fx.Node) -> str:
    """What a node computes, as far as an observation's reuse must tell: its op, its target and its arguments (other
    nodes by name), so that a graph rewired under the same names is not taken for the one observed."""
    return f"{node.op}:{node.target}:{node.args!r}:{node.kwargs!r}"


class _Observer(torch.fx.Interpreter):
    """Runs the graph node by node (freeing each value after its last use) and records what each node gave."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__(gm, garbage_collect_values=True)
        self.extra_traceback = False  # the model's own error, as its segments raised it, without fx's "While executing"
        self.seen: dict[str, Any] = {}
        self.failed: tuple[str, BaseException] | None = None

    def run_node(self, node: torch.fx.Node) -> Any:
        try:
            value = super().run_node(node)
        except Exception as error:
            self.failed = (node.name, error)
            raise
        if node.op != "output":
            if isinstance(value, torch.Tensor):
                self.seen[node.name] = (_op(node), tuple(value.shape), value.dtype)
            else:
                self.seen[node.name] = (_op(node), type(value).__name__)
        return value


@contextlib.contextmanager
def lean_run() -> Iterator[None]:
    """PyTorch on one thread with oneDNN off, for a run that only needs shapes and dtypes; then the heap pages it
    freed given back to the system (glibc's ``malloc_trim(0)``).

    Why (issue 25: compile in no more memory than ``torch.onnx.export`` and a session): in a fresh process shape
    analysis is the first run of PyTorch's CPU kernels, and what that run loads or frees stays in the process:
    oneDNN's code and JIT kernels, an OpenMP worker with its own malloc arena, freed activations kept in malloc's
    heap. RSS above the start after shape analysis, without and with this (``python -m
    suites.benchmarks.bench_compile --models ... --repeat 1``, one round each): convnext_tiny 93 -> 52 MiB, vit_b_16
    92 -> 59, vgg11 72 -> 45. The run is slower (convnext_tiny 0.09 -> 0.5 s, vit_b_16 0.3 -> 0.45 s); the shapes
    are the same (a kernel choice changes values' last bits, never shapes). Both settings are restored also when
    the run raises; while it runs they hold for the whole process, as every ``torch.backends`` flag does. MKL's
    buffers the run leaves stay until ``release_mkl_buffers`` (its docstring says why)."""
    threads, onednn = torch.get_num_threads(), torch.backends.mkldnn.enabled
    try:
        torch.set_num_threads(1)
        # set_flags, not the ``enabled`` property: that raises once torch.testing's common_utils froze the flags
        # (disable_global_flags); only the flag given is set, and _fp32_precision=None leaves that one alone.
        torch.backends.mkldnn.set_flags(_enabled=False, _fp32_precision=None)
        yield
    finally:
        torch.backends.mkldnn.set_flags(_enabled=onednn, _fp32_precision=None)
        torch.set_num_threads(threads)
        _trim_heap()


def release_mkl_buffers() -> None:
    """MKL's cached buffers freed (``mkl_free_buffers``), then glibc's ``malloc_trim(0)`` (where either is missing:
    nothing). ``compile`` calls this once its engines are built, not when shape analysis's run ends.

    MKL keeps the packing buffers of its last GEMMs for the next call (after shape analysis's run, ``mkl_serv_mem_stat``:
    vgg11 9.0 MiB, resnet50 5.7, convnext_tiny 29.3 in 5 buffers, bert_base 14.4), which the peer never allocates; MKL
    allocates them again when a GEMM next needs them. Why after the engines: vgg11's compile peaks 21-32 MiB higher
    when they are freed before its engine build (single processes, MiB, freed before / not, the heap trimmed when the
    run ends: 935, 935 / 912, 903; not trimmed: 928, 935 / 907, 913; the peer 909-920), which decided issue 25's
    memory target for vgg11. What it costs the others, medians of five rounds,
    freed when the run ended / after the build (``python -m suites.benchmarks.bench_compile --models resnet50
    convnext_tiny inception_v3 bert_base --repeat 5``): resnet50 291 / 305 MiB (the peer 305), convnext_tiny 166 / 180
    (181), inception_v3 263 / 269 (270-284), bert_base 406 / 406 (405-406). Why the early free costs vgg11 is not
    established: glibc's mmap threshold, the first suspect, is ~27.9 MiB after vgg11's run with the free and without
    it (the run's own im2col buffers raised it), found by probing which malloc size gets mmapped. Running shape
    analysis itself after the engine build was tried too: vgg11 894, but its run then adds its activations to the
    session's kept memory (one round: efficientnet_b0 105 against the peer's 99, densenet121 1.01, convnext_tiny 1.02;
    bert_base 417 against 405 over three)."""
    if _MKL_FREE_BUFFERS is not None:
        _MKL_FREE_BUFFERS()
    _trim_heap()


def _trim_heap() -> None:
    """glibc's ``malloc_trim(0)``: the heap pages free chunks occupy go back to the system (elsewhere: nothing)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def _malloc_trim() -> Any:
    try:
        return ctypes.CDLL(None).malloc_trim  # this process's own C library, where it is glibc
    except (OSError, AttributeError):
        return None


def _mkl_free_buffers() -> Any:
    """``mkl_free_buffers`` of the MKL linked into libtorch (exported under its service name,
    ``mkl_serv_free_buffers``), or None: a torch without MKL, or not on Linux."""
    if not torch.backends.mkl.is_available():
        return None
    try:
        return ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")).mkl_serv_free_buffers
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _malloc_trim()
_MKL_FREE_BUFFERS = _mkl_free_buffers()


def observe(gm: torch.fx.GraphModule, flat_inputs: Sequence[Any]) -> Observation:
    """Run ``gm`` on copies of ``flat_inputs`` (one per placeholder) and record every value's shape and dtype.

    The graph's mutable buffers are restored afterwards, so observing changes neither the caller's tensors nor
    the module's state. A node that raises ends the run; the observation keeps it and its error."""
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    if len(placeholders) != len(flat_inputs):
        raise ShapeMismatchError(f"expected {len(placeholders)} flat inputs, got {len(flat_inputs)}")
    copies = cloned(list(flat_inputs))
    state = [operator.attrgetter(node.target)(gm) for node in gm.graph.nodes if is_mutable_state(node)]
    saved = [tensor.clone() for tensor in state]
    observer = _Observer(gm)
    try:
        with torch.no_grad(), lean_run():
            observer.run(*copies)
    except Exception:  # noqa: BLE001 - kept in the observation: find_mismatches decides whether it is the model's
        if observer.failed is None:
            raise
    finally:
        with torch.no_grad():
            for tensor, value in zip(state, saved):
                tensor.copy_(value)
    failed_at, error = observer.failed or (None, None)
    return Observation(observer.seen, symbol_values(gm, flat_inputs), failed_at, error)


def confirm_shapes(partition: Partition, flat_inputs: Sequence[Any]) -> None:
    """Run the graph on copies of ``flat_inputs`` (one per placeholder); raise on any boundary mismatch."""
    mismatches = find_mismatches(partition, flat_inputs)
    if mismatches:
        raise ShapeMismatchError(str(mismatches[0]))


def find_mismatches(partition: Partition, flat_inputs: Sequence[Any], observation: Observation | None = None) -> list[ShapeMismatch]:
    """Every boundary value (a segment's output) whose shape or dtype differs from its metadata, the graph run
    on copies of ``flat_inputs`` (one per placeholder), or read from ``observation`` where it covers this graph
    (the caller's word that it was ``observe``'s on these inputs: ``convert`` checks them bit for bit).

    The graph runs in its own order, the order the model was traced in. A mismatch does not stop the run: later
    nodes get the value the earlier ones really produced (as the compiled module would), so every mismatch is
    found. Should a node then fail on such a value, the check stops at its segment with the mismatches of the
    segments before it; a node that fails with none found before it is the model failing on its own example
    inputs, and that error propagates.
    """
    return boundary_mismatches(partition, observed(partition.graph_module, flat_inputs, observation))


def observed(gm: torch.fx.GraphModule, flat_inputs: Sequence[Any], observation: Observation | None = None) -> Observation:
    """``observation`` where it covers ``gm``'s graph, else a new run of ``gm`` on ``flat_inputs`` (``observe``)."""
    if observation is not None and observation.covers(gm.graph):
        return observation
    return observe(gm, flat_inputs)


def boundary_mismatches(partition: Partition, observation: Observation) -> list[ShapeMismatch]:
    """``find_mismatches`` read from ``observation``, which the caller knows covers ``partition``'s graph."""
    mismatches: list[ShapeMismatch] = []
    for index, segment in enumerate(partition.segments):
        if observation.failed_at is not None and any(node.name == observation.failed_at for node in segment.nodes):
            break
        for node in segment.outputs:
            mismatch = _check(index, node, observation.values.get(node.name), observation.symbols)
            if mismatch is not None:
                mismatches.append(mismatch)
    if observation.error is not None and not mismatches:  # most likely a mismatch's doing when there is one
        raise observation.error
    return mismatches


def _check(index: int, node: torch.fx.Node, seen: tuple | None, symbols: Mapping[sympy.Symbol, int]) -> ShapeMismatch | None:
    """A symbolic size is checked against its expression evaluated for this run (``2*s0`` must be twice
    the size the input gave ``s0``), not merely accepted. ``seen``: the node's (op, shape, dtype), or (op, type name)
    for a non-Tensor."""
    meta = node.meta.get("val")
    if not isinstance(meta, torch.Tensor) or seen is None:
        return None
    expected = expected_shape(meta, symbols)
    if len(seen) == 2:
        return ShapeMismatch(index, node, f"{list(expected)} {meta.dtype}", seen[1])
    _, got, dtype = seen
    if len(expected) != len(got) or any(e not in (-1, g) for e, g in zip(expected, got)) or dtype != meta.dtype:
        return ShapeMismatch(index, node, f"{list(expected)} {meta.dtype}", f"{list(got)} {dtype}")
    return None
