"""Random core-ATen ``torch.fx`` graphs: hypothesis strategies, and a seeded generator for benchmarks.

A graph is described by a *recipe*, a list of ``Step(op, a, b)``; ``a`` and ``b`` pick operands among the
values made so far (modulo their count, so any integers are valid and shrink towards the first value).
One builder turns a recipe into a ``GraphModule`` with real example values in ``meta["val"]``, so the
hypothesis strategy (which shrinks recipes to small failing graphs) and the benchmark generator (which
draws recipes from ``random.Random``) share every line of graph construction.

A graph has one *dtype*, that of its inputs and weights (``DTYPES``: float32, float16, bfloat16, int64).
Every op is emitted so that eager PyTorch on the CPU accepts it in every dtype: ops PyTorch promotes
(``tanh`` of an int64 tensor is float32) are left to promote, so int64 graphs mix int64 and float32 values,
and an op PyTorch has no kernel for (``mean`` of an integer tensor) or whose operands disagree (``bmm``)
gets an explicit ``_to_copy`` first. Whether a converter accepts an op in a dtype is the partitioner's
business, not the generator's (the int64 ``relu``, ``bmm`` and ``convolution`` run in PyTorch).

Dynamic graphs (``build_dynamic_graph``, ``dynamic_aten_graphs``) take the same recipes over inputs
``[batch, 3, 3, 3]`` whose dim 0 is a ``torch.export.Dim``. The builder then writes every shape argument that
mentions dim 0 as a SymInt flow, as torch.export itself writes them: ``aten.sym_size.int(x, 0)`` and int
arithmetic on it (``operator.mul``, ``operator.floordiv``, ``operator.add``) feeding ``view``, ``expand`` and
``full``; ``DYNAMIC_ONLY`` adds ops along dim 0 (``cat`` on it, its mean, a ``full`` of its size) and int
arithmetic whose results ``add_scalar``/``mul_scalar`` read. Such a graph is verified through
``trtcheck.lower(model, inputs, dynamic_shapes=...)``: the metadata is torch.export's, with symbolic sizes, and a
step that wrote the example's size instead of a SymInt would make the export fail on the Dim.
Static graphs are built exactly as before (``aten_graphs``, ``random_recipe`` and the benchmarks).
"""

from __future__ import annotations

import dataclasses
import math
import operator
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from hypothesis import strategies as st

from trtcheck.lowering.export import lower
from trtcheck.lowering.graph import copy_graph_module, written_values
from trtcheck.names import resolve_ops
from trtcheck.settings import Settings

aten = torch.ops.aten


FULL = [1, 3, 3, 3]  # every value broadcasts to this: ops keep or reduce dimensions to 1, never change 3s

# The dtypes a graph may have (its inputs' and weights'), float32 first: hypothesis shrinks towards it.
DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.float16, torch.bfloat16, torch.int64)


class _Builder:
    """Emits nodes whose ``meta["val"]`` is their real value, computed as the graph is built."""

    def __init__(self, generator: torch.Generator, dtype: torch.dtype = torch.float32, batch: int | None = None) -> None:
        self.graph = torch.fx.Graph()
        self.root = torch.nn.Module()
        self.values: dict[torch.fx.Node, Any] = {}
        self.generator = generator
        self.dtype = dtype
        self.batch = batch  # a dynamic graph's example size of dim 0 (``build_dynamic_graph``); None: static
        self.inputs: list[torch.fx.Node] = []
        self._sizes: dict[torch.fx.Node, torch.fx.Node] = {}
        self.state: torch.fx.Node | None = None  # the mutable buffer, once a step reads or writes it
        self.input_writes: list[tuple[torch.fx.Node, torch.fx.Node]] = []  # (input, new value): ``_write_input``

    def call(self, target: Any, *args: Any, **kwargs: Any) -> torch.fx.Node:
        node = self.graph.call_function(target, args, kwargs)
        real = torch.fx.node.map_arg((args, kwargs), self.values.__getitem__)
        self.values[node] = node.meta["val"] = target(*real[0], **real[1])
        return node

    def view(self, node: torch.fx.Node, shape: list[int]) -> torch.fx.Node:
        """A reshape as core ATen writes it: a contiguous copy (the value may be permuted or expanded), a view."""
        dense = self.call(aten.clone.default, node, memory_format=torch.contiguous_format)
        return self.call(aten.view.default, dense, shape)

    def dtype_of(self, node: torch.fx.Node) -> torch.dtype:
        return self.values[node].dtype

    def cast(self, node: torch.fx.Node, dtype: torch.dtype) -> torch.fx.Node:
        """``node`` as ``dtype``: an ``aten._to_copy``, as core ATen writes ``x.to(dtype)``; no node if it already is."""
        return node if self.dtype_of(node) == dtype else self.call(aten._to_copy.default, node, dtype=dtype)

    def constant(self, *shape: int, dtype: torch.dtype = torch.float32) -> torch.fx.Node:
        """A small random weight of ``dtype``, as a ``get_attr`` constant (as torch.export lifts parameters)."""
        name = f"weight_{len(self.root._buffers)}"
        if dtype.is_floating_point:
            value = (torch.randn(shape, generator=self.generator) * 0.2).to(dtype)
        else:
            value = torch.randint(-2, 3, shape, generator=self.generator, dtype=dtype)
        self.root.register_buffer(name, value)
        node = self.graph.get_attr(name)
        self.values[node] = node.meta["val"] = getattr(self.root, name)
        return node

    def size(self, node: torch.fx.Node) -> torch.fx.Node:
        """``aten.sym_size.int(node, 0)``, one node per value: a SymInt once a dynamic graph is exported."""
        if node not in self._sizes:
            self._sizes[node] = self.call(aten.sym_size.int, node, 0)
        return self._sizes[node]

    def has_batch(self, node: torch.fx.Node) -> bool:
        """True in a dynamic graph when ``node``'s dim 0 is the dynamic one (else it is 1: a batch mean's)."""
        return self.batch is not None and self.values[node].shape[0] == self.batch

    def batch_size(self, node: torch.fx.Node) -> int | torch.fx.Node:
        """What a shape argument says for dim 0 of a full value: 1 in a static graph; in a dynamic one the
        ``sym_size`` of ``node`` (of the first input where ``node``'s dim 0 is 1), never the example's size."""
        if self.batch is None:
            return FULL[0]
        return self.size(node if self.has_batch(node) else self.inputs[0])

    def full_shape(self, node: torch.fx.Node) -> list[int | torch.fx.Node]:
        """``FULL``, with dim 0 as ``batch_size`` says (a SymInt flow in a dynamic graph)."""
        return [self.batch_size(node), *FULL[1:]]

    def is_full(self, node: torch.fx.Node) -> bool:
        lead = FULL[0] if self.batch is None else self.batch
        return list(self.values[node].shape) == [lead, *FULL[1:]]

    def full(self, node: torch.fx.Node) -> torch.fx.Node:
        return node if self.is_full(node) else self.call(aten.expand.default, node, self.full_shape(node))


def _conv(b: _Builder, x: torch.fx.Node, in_channels: int, kernel: int) -> torch.fx.Node:
    """A convolution with weights of ``x``'s dtype (PyTorch's CPU convolution takes int64 too)."""
    dtype = b.dtype_of(x)
    weight, bias = b.constant(3, in_channels, kernel, kernel, dtype=dtype), b.constant(3, dtype=dtype)
    pad = kernel // 2
    return b.call(aten.convolution.default, x, weight, bias, [1, 1], [pad, pad], [1, 1], False, [0, 0], 1)


def _matmul(b: _Builder, x: torch.fx.Node, y: torch.fx.Node) -> torch.fx.Node:
    """bmm does not promote: an int64 and a float32 operand meet in float32."""
    dtype = torch.promote_types(b.dtype_of(x), b.dtype_of(y))
    dense = []

    def batches_of_matrices(v: torch.fx.Node) -> torch.fx.Node:  # [3 * batch, 3, 3]: a SymInt product if dynamic
        dense.append(b.full(b.cast(v, dtype)))
        rows = 3 if b.batch is None else b.call(operator.mul, b.size(dense[-1]), 3)
        return b.view(dense[-1], [rows, 3, 3])

    left, right = batches_of_matrices(x), batches_of_matrices(y)
    return b.call(aten.view.default, b.call(aten.bmm.default, left, right), b.full_shape(dense[0]))


def _cat(b: _Builder, x: torch.fx.Node, y: torch.fx.Node) -> torch.fx.Node:
    joined = b.call(aten.cat.default, [b.full(x), b.full(y)], 1)  # 6 channels, back to 3 by a 1x1 conv
    return _conv(b, joined, 6, 1)


def _mean(b: _Builder, x: torch.fx.Node) -> torch.fx.Node:
    """PyTorch's mean takes no integers: an int64 value is averaged as float32."""
    if not b.dtype_of(x).is_floating_point:
        x = b.cast(x, torch.float32)
    return b.call(aten.mean.dim, x, [2], True)


def _to_float(b: _Builder, x: torch.fx.Node) -> torch.fx.Node:
    """``x.to(torch.float32)``, so that what follows mixes dtypes (``add(float16, float32)`` is float32): exact
    from float16 and bfloat16, correctly rounded (alike in every engine) from int64, a copy from float32.
    Narrowing casts are left out: an engine's last-bit difference would flip their rounding or truncation."""
    return b.call(aten._to_copy.default, x, dtype=torch.float32)


def _reshape(b: _Builder, x: torch.fx.Node) -> torch.fx.Node:
    """Flatten and back. With a dynamic dim 0 both shapes are SymInt arithmetic: ``[size(x, 0) * rest]``, then
    ``[size(flat, 0) // rest, ...]``; export keeps them symbolic (``-1`` would let it infer the size itself)."""
    shape = list(b.values[x].shape)
    if not b.has_batch(x):
        return b.call(aten.view.default, b.view(x, [-1]), shape)
    rest = math.prod(shape[1:])
    flat = b.view(x, [b.call(operator.mul, b.size(x), rest)])
    return b.call(aten.view.default, flat, [b.call(operator.floordiv, b.size(flat), rest), *shape[1:]])


def _on_positive(target: Any) -> Callable[[_Builder, torch.fx.Node], torch.fx.Node]:
    """``target(|x| + 1)``: lgamma and digamma are ill-conditioned near their poles at 0, -1, ..., where the
    last-bit differences between two correct engines upstream would be amplified into false alarms."""
    return lambda b, x: b.call(target, b.call(aten.add.Scalar, b.call(aten.abs.default, x), 1.0))


# ---- mutable state: reads and in-place writes of a buffer and of the inputs ----------------------------------
# A buffer ``forward`` updates and an input it writes into are read before and after the write; the order of
# those reads around the write is no data edge, and a segmentation that loses it computes with the value of
# another step (the rule partitioning keeps for it: ``trtcheck.lowering.graph.state_order``). The buffer is
# float32 ([1, 3, 3, 3], broadcast by its readers) and what is written into it is widened to float32, never
# narrowed: a last-bit difference must not flip a rounding.
def _state(b: _Builder) -> torch.fx.Node:
    """The graph's one mutable buffer, made at first use."""
    if b.state is None:
        b.root.register_buffer("state", (torch.rand([1, *FULL[1:]], generator=b.generator) + 0.5))
        b.state = b.graph.get_attr("state")
        b.values[b.state] = b.state.meta["val"] = b.root.state
    return b.state


def _read_state(b: _Builder, x: torch.fx.Node) -> torch.fx.Node:
    return b.call(aten.add.Tensor, b.full(x), _state(b))


def _write_state(b: _Builder, x: torch.fx.Node) -> torch.fx.Node:
    """``state.copy_(x summed over dim 0)``; the step's value is ``x`` itself (a write makes no new value)."""
    b.call(aten.copy_.default, _state(b), b.call(aten.sum.dim_IntList, _to_float(b, b.full(x)), [0], True))
    return x


def _write_input(b: _Builder, x: torch.fx.Node) -> torch.fx.Node:
    """``x0.copy_(-x0)``: an input written in place (a KV cache's update), in its own dtype. The new value is
    computed here, the ``copy_`` emitted at the end of the graph (``_emit_input_writes``), where lowering puts
    an input's mutation: every read before it sees the old value, as in a functionalized graph."""
    first = b.inputs[0]
    b.input_writes.append((first, b.call(aten.neg.default, first)))
    return x


def _emit_input_writes(b: _Builder, outputs: list[torch.fx.Node]) -> list[torch.fx.Node]:
    """The deferred input writes, emitted after every step; an output that is a view of a written input is
    cloned first. A lowered graph never returns an alias of an input it mutates (functionalization regenerates
    such a view from the new value); a raw one would make the eager output change under the write while an
    engine's output, a copy, cannot."""
    written = {b.values[node].untyped_storage().data_ptr() for node, _ in b.input_writes}
    outputs = [
        b.call(aten.clone.default, node)
        if isinstance(b.values[node], torch.Tensor) and b.values[node].untyped_storage().data_ptr() in written else node
        for node in outputs
    ]
    for node, value in b.input_writes:
        b.call(aten.copy_.default, node, value)
    return outputs


# ---- dynamic graphs only (``build_dynamic_graph``): ops whose shape arguments are SymInt arithmetic ----------
def _batch_cat(b: _Builder, x: torch.fx.Node, y: torch.fx.Node) -> torch.fx.Node:
    """``cat`` on the dynamic dim: ``[2 * batch, 3, 3, 3]``, viewed as ``[2, size(cat, 0) // 2, 3, 3, 3]`` and the
    two halves summed (``x + y``, reached through a floordiv of a SymInt)."""
    joined = b.call(aten.cat.default, [b.full(x), b.full(y)], 0)
    half = b.call(operator.floordiv, b.size(joined), 2)
    return b.call(aten.sum.dim_IntList, b.call(aten.view.default, joined, [2, half, *FULL[1:]]), [0])


def _batch_mean(b: _Builder, x: torch.fx.Node) -> torch.fx.Node:
    """The mean over the dynamic dim (``keepdim``: dim 0 becomes 1), expanded back to ``x``'s batch by a SymInt."""
    shape = [b.batch_size(x), *b.values[x].shape[1:]]
    if not b.dtype_of(x).is_floating_point:
        x = b.cast(x, torch.float32)
    return b.call(aten.expand.default, b.call(aten.mean.dim, x, [0], True), shape)


def _batch_full(b: _Builder, x: torch.fx.Node) -> torch.fx.Node:
    """``x`` plus an ``aten.full`` of shape ``[batch, 3, 1, 1]`` (dim 0 a SymInt) in the graph's dtype."""
    fill = 1.5 if b.dtype.is_floating_point else 2
    return b.call(aten.add.Tensor, x, b.call(aten.full.default, [b.batch_size(x), 3, 1, 1], fill, dtype=b.dtype))


@dataclass(frozen=True)
class OpKind:
    """How an op of the random graphs takes operands and what it returns."""

    target: Any
    tensor_args: int  # Tensor operands
    returns: str = "tensor"  # "tensor", "tuple" (a (values, indices) pair) or "int"
    takes_int: bool = False  # a trailing int operand, made by a "size" op
    extra_args: tuple = ()
    int_args: int = 0  # int operands (made by "size" and int ops), for ops on ints only (``tensor_args`` 0)
    emit: Callable[..., torch.fx.Node] | None = None  # several nodes with consistent shapes (e.g. matmul)


OPS: dict[str, OpKind] = {
    "relu": OpKind(aten.relu.default, 1),
    "neg": OpKind(aten.neg.default, 1),
    "tanh": OpKind(aten.tanh.default, 1),
    "sigmoid": OpKind(aten.sigmoid.default, 1),
    "abs": OpKind(aten.abs.default, 1),
    "add": OpKind(aten.add.Tensor, 2),
    "mul": OpKind(aten.mul.Tensor, 2),
    "sub": OpKind(aten.sub.Tensor, 2),
    "maximum": OpKind(aten.maximum.default, 2),
    "sum": OpKind(aten.sum.dim_IntList, 1, extra_args=([3], True)),
    "mean": OpKind(aten.mean.dim, 1, extra_args=([2], True), emit=_mean),
    "transpose": OpKind(aten.permute.default, 1, extra_args=([0, 1, 3, 2],)),
    "reshape": OpKind(None, 1, emit=_reshape),
    "matmul": OpKind(None, 2, emit=_matmul),
    "conv": OpKind(None, 1, emit=lambda b, x: _conv(b, b.full(x), 3, 3)),
    "cat": OpKind(None, 2, emit=_cat),
    "to_float": OpKind(aten._to_copy.default, 1, emit=_to_float),
    "max_dim": OpKind(aten.max.dim, 1, returns="tuple", extra_args=(1, True)),
    "size": OpKind(aten.sym_size.int, 1, returns="int", extra_args=(0,)),
    "add_scalar": OpKind(aten.add.Scalar, 1, takes_int=True),
    "mul_scalar": OpKind(aten.mul.Scalar, 1, takes_int=True),
    "read_state": OpKind(None, 1, emit=_read_state),
    "write_state": OpKind(None, 1, emit=_write_state),
    "write_input": OpKind(None, 1, emit=_write_input),
    # No converter in TensorRT: these make fallback happen.
    "lgamma": OpKind(aten.lgamma.default, 1, emit=_on_positive(aten.lgamma.default)),
    "digamma": OpKind(aten.digamma.default, 1, emit=_on_positive(aten.digamma.default)),
}
UNSUPPORTED = frozenset({"lgamma", "digamma"})
STATEFUL = frozenset({"read_state", "write_state", "write_input"})  # in-place writes run in PyTorch (``copy_``)
SUPPORTED = tuple(name for name in OPS if name not in UNSUPPORTED)

# Dynamic graphs take every op of OPS (their shape arguments become SymInt flows there: ``full``'s expand,
# reshape, matmul, cat's and conv's expand, ``size``) and these: shape changes along the dynamic dim, and int
# arithmetic as torch.export writes it for sizes (``operator.mul`` & co.), whose results ``add_scalar`` and
# ``mul_scalar`` read. Factors and divisors are constants: a SymInt divisor could be 0 at some size in range,
# and products of SymInts would grow the ints (the scalars added to values) exponentially with the steps.
DYNAMIC_ONLY: dict[str, OpKind] = {
    "batch_cat": OpKind(None, 2, emit=_batch_cat),
    "batch_mean": OpKind(None, 1, emit=_batch_mean),
    "batch_full": OpKind(None, 1, emit=_batch_full),
    "sym_add": OpKind(operator.add, 0, returns="int", int_args=2),
    "sym_mul": OpKind(operator.mul, 0, returns="int", int_args=1, extra_args=(3,)),
    "sym_floordiv": OpKind(operator.floordiv, 0, returns="int", int_args=1, extra_args=(2,)),
}
DYNAMIC_OPS: dict[str, OpKind] = {**OPS, **DYNAMIC_ONLY}


def unsupported_targets(names: Sequence[str] = tuple(UNSUPPORTED)) -> frozenset:
    return frozenset(OPS[name].target for name in names)


def supports_all_but(names: Sequence[str] = tuple(UNSUPPORTED)) -> Callable[[torch.fx.Node], bool]:
    """A ``support`` predicate for ``partition``: every op of the random graphs except ``names`` and in-place
    writes (no engine writes into a value it was given: trtcheck has no converter for ``copy_``)."""
    blocked = unsupported_targets(names)
    return lambda node: node.target not in blocked and not written_values(node)


@dataclass(frozen=True)
class Step:
    op: str
    a: int = 0
    b: int = 0


@dataclass
class RandomGraph:
    """A generated graph with its inputs and the recipe that made it (for repros)."""

    graph_module: torch.fx.GraphModule
    example_inputs: tuple[torch.Tensor, ...]
    recipe: list[Step] = field(default_factory=list)
    dtype: torch.dtype = torch.float32
    seed: int = 0

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # else hypothesis prints dataclasses field by field
        printer.text(repr(self))

    def __repr__(self) -> str:  # what hypothesis prints for a falsifying example
        return (
            f"RandomGraph(recipe={self.recipe!r}, dtype={self.dtype}, seed={self.seed})\n"
            f"{self.graph_module.code.strip()}"
        )


def _input(b: _Builder, shape: tuple[int, ...]) -> torch.Tensor:
    if b.dtype.is_floating_point:  # float32 draws the very values it always drew
        return (torch.rand(shape, generator=b.generator) + 0.5).to(b.dtype)
    return torch.randint(-3, 4, shape, generator=b.generator, dtype=b.dtype)  # small, both signs


def build_graph(
    recipe: Sequence[Step],
    num_inputs: int = 2,
    shape: tuple[int, ...] = tuple(FULL),
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> RandomGraph:
    """Build a ``GraphModule`` from a recipe; every node's ``meta["val"]`` is its real value.

    ``dtype`` is the inputs' and weights' dtype (one of ``DTYPES``); ``seed`` draws their values.
    """
    b, example_inputs = _build(recipe, num_inputs, shape, seed, dtype, OPS, batch=None)
    return RandomGraph(torch.fx.GraphModule(b.root, b.graph), example_inputs, list(recipe), dtype, seed)


def _build(
    recipe: Sequence[Step],
    num_inputs: int,
    shape: tuple[int, ...],
    seed: int,
    dtype: torch.dtype,
    kinds: dict[str, OpKind],
    batch: int | None,
) -> tuple[_Builder, tuple[torch.Tensor, ...]]:
    """The graph of ``recipe`` (ops from ``kinds``) in a builder, and the example inputs; ``batch``: see ``_Builder``."""
    if dtype not in DTYPES:
        raise ValueError(f"random graphs are built in {', '.join(map(str, DTYPES))}, not {dtype}")
    unknown = sorted({step.op for step in recipe if step.op not in kinds})
    if unknown:
        only = [name for name in unknown if name in DYNAMIC_ONLY]
        hint = f" ({', '.join(only)}: dynamic graphs only, see build_dynamic_graph)" if only else ""
        raise ValueError(f"unknown ops {unknown}{hint}; known: {', '.join(kinds)}")
    b = _Builder(torch.Generator().manual_seed(seed), dtype, batch)
    tensors: list[torch.fx.Node] = []
    ints: list[torch.fx.Node] = []
    extra_outputs: list[torch.fx.Node] = []  # tuple members kept as outputs
    example_inputs = []
    for i in range(num_inputs):
        value = _input(b, shape)  # floats positive: the first input set keeps lgamma and digamma away from poles
        node = b.graph.placeholder(f"x{i}")
        b.values[node] = node.meta["val"] = value
        tensors.append(node)
        b.inputs.append(node)
        example_inputs.append(value)

    for step in recipe:
        kind = kinds[step.op]
        if kind.int_args:  # int arithmetic: its operands are ints, the size of the latest value if none yet
            if not ints:
                ints.append(b.call(aten.sym_size.int, tensors[-1], 0))
            picked = [ints[len(ints) - 1 - (p % len(ints))] for p in (step.a, step.b)[: kind.int_args]]
            ints.append(b.call(kind.target, *picked, *kind.extra_args))
            continue
        picks = [step.a, step.b][: kind.tensor_args]
        operands = [tensors[len(tensors) - 1 - (p % len(tensors))] for p in picks]  # near the end: local
        if kind.takes_int and not ints:  # no int made yet: the step makes its own (a skipped step could
            ints.append(b.call(aten.sym_size.int, operands[0], 0))  # leave a graph without compute nodes)
        if kind.emit is not None:
            tensors.append(kind.emit(b, *operands))
            continue
        if kind.takes_int:
            operands.append(ints[len(ints) - 1 - (step.b % len(ints))])
        node = b.call(kind.target, *operands, *kind.extra_args)
        if kind.returns == "tuple":
            tensors.append(b.call(operator.getitem, node, 0))
            if step.b % 2:  # sometimes keep the indices too, as a graph output
                extra_outputs.append(b.call(operator.getitem, node, 1))
        elif kind.returns == "int":
            ints.append(node)
        else:
            tensors.append(node)

    if batch is not None and ints and not ints[-1].users:  # int arithmetic nobody read would be dead code to
        tensors.append(b.call(aten.add.Scalar, tensors[-1], ints[-1]))  # export (and a graph of int steps empty)
    leaves = [node for node in tensors if not node.users and node.op != "placeholder"] + extra_outputs
    b.graph.output(tuple(_emit_input_writes(b, leaves or [tensors[-1]])))
    return b, tuple(example_inputs)


DIM_NAME = "batch"  # the torch.export.Dim of a dynamic graph's dim 0, shared by all its inputs


@dataclass
class DynamicGraph:
    """A generated graph whose inputs' dim 0 is dynamic (``torch.export.Dim`` ``DIM_NAME`` in ``dim_range``).

    ``graph_module`` is the builder's graph (``meta["val"]`` real values at the example's size); it reads
    every size it needs through ``aten.sym_size.int`` and int arithmetic, so it runs at any size in range.
    ``model`` is what to lower, compile or verify with ``dynamic_shapes``: a module calling ``graph_module``
    (a bare ATen ``GraphModule`` is taken as it is by ``trtcheck.lower``, which refuses ``dynamic_shapes`` for
    it), so torch.export traces it and the lowered graph's metadata is torch.export's, with symbolic sizes.
    """

    graph_module: torch.fx.GraphModule
    model: torch.fx.GraphModule
    example_inputs: tuple[torch.Tensor, ...]
    dynamic_shapes: tuple[dict[int, Any], ...]
    dim_range: tuple[int, int]
    recipe: list[Step] = field(default_factory=list)
    dtype: torch.dtype = torch.float32
    seed: int = 0

    @property
    def batch(self) -> int:
        """The example inputs' size of the dynamic dim."""
        return int(self.example_inputs[0].shape[0])

    def lower(self) -> torch.fx.GraphModule:
        """``trtcheck.lower(model, example_inputs, dynamic_shapes=...)``: the core-ATen graph, dim 0 symbolic."""
        return lower(self.model, self.example_inputs, dynamic_shapes=self.dynamic_shapes)

    def inputs_of_size(self, size: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
        """Inputs like the examples (same dtype, values drawn the same way from ``seed``) with dim 0 ``size``."""
        b = _Builder(torch.Generator().manual_seed(seed), self.dtype)
        return tuple(_input(b, (size, *x.shape[1:])) for x in self.example_inputs)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # hypothesis prints dataclasses field by field
        printer.text(repr(self))

    def __repr__(self) -> str:  # what hypothesis prints for a falsifying example: the call that rebuilds it
        return (
            f"build_dynamic_graph({self.recipe!r}, batch={self.batch}, dim_range={self.dim_range}, "
            f"dtype={self.dtype}, seed={self.seed})\n{self.graph_module.code.strip()}"
        )


def build_dynamic_graph(
    recipe: Sequence[Step],
    batch: int = 3,
    dim_range: tuple[int, int] = (1, 8),
    num_inputs: int = 2,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> DynamicGraph:
    """Build a graph from a recipe (ops of ``DYNAMIC_OPS``) over inputs ``[batch, 3, 3, 3]`` whose dim 0 is
    dynamic in ``dim_range`` (inclusive). Every shape argument that mentions dim 0 is a SymInt flow
    (``sym_size.int``, then ``operator.mul``/``floordiv``...), never the example's size, so torch.export keeps
    the dim symbolic: a step that wrote the example's size would make export specialize and fail on the Dim.

    ``batch`` is at least 2 (torch.export specializes an example size of 0 or 1); ``dim_range`` holds it, and its
    maximum exceeds its minimum (``torch.export.Dim`` refuses an empty range).
    """
    low, high = dim_range
    if batch < 2 or not 1 <= low <= batch <= high or low == high:
        raise ValueError(f"need 2 <= batch and 1 <= min <= batch <= max, min < max; got batch={batch}, dim_range={dim_range}")
    b, example_inputs = _build(recipe, num_inputs, (batch, *FULL[1:]), seed, dtype, DYNAMIC_OPS, batch=batch)
    body = torch.fx.GraphModule(b.root, b.graph)
    outer = torch.fx.Graph()  # forward(x0, x1, ...) calling the body: torch.export binds dynamic_shapes by position
    outer.output(outer.call_module("body", tuple(outer.placeholder(f"x{i}") for i in range(num_inputs))))
    holder = torch.nn.Module()
    holder.body = body
    model = torch.fx.GraphModule(holder, outer, class_name="DynamicRandomGraph")
    dim = torch.export.Dim(DIM_NAME, min=low, max=high)
    return DynamicGraph(body, model, example_inputs, tuple({0: dim} for _ in example_inputs), (low, high), list(recipe), dtype, seed)


def steps(ops: Sequence[str] = tuple(OPS)) -> st.SearchStrategy[Step]:
    """One recipe step; the operand picks shrink towards the most recent values."""
    return st.builds(Step, st.sampled_from(list(ops)), st.integers(0, 63), st.integers(0, 63))


def aten_graphs(
    min_nodes: int = 1,
    max_nodes: int = 25,
    ops: Sequence[str] = tuple(OPS),
    dtypes: Sequence[torch.dtype] = (torch.float32,),
    seeds: st.SearchStrategy[int] | None = None,
) -> st.SearchStrategy[RandomGraph]:
    """Random core-ATen graphs with unsupported, tuple-returning and int-producing ops mixed in.

    ``dtypes``: the graph dtypes to draw from (``DTYPES`` for all; shrinks towards the first one).
    ``seeds``: draws the random seed of the inputs' and weights' values (default: always 0).
    """
    recipes = st.lists(steps(ops), min_size=min_nodes, max_size=max_nodes)
    unknown = [dtype for dtype in dtypes if dtype not in DTYPES]
    if not dtypes or unknown:
        raise ValueError(f"dtypes must be among {', '.join(map(str, DTYPES))}; got {list(dtypes)}")
    dtype_strategy = st.just(dtypes[0]) if len(dtypes) == 1 else st.sampled_from(list(dtypes))
    return st.builds(build_graph, recipes, seed=seeds if seeds is not None else st.just(0), dtype=dtype_strategy)


def dynamic_aten_graphs(
    min_nodes: int = 1,
    max_nodes: int = 25,
    ops: Sequence[str] = tuple(DYNAMIC_OPS),
    dtypes: Sequence[torch.dtype] = (torch.float32,),
    seeds: st.SearchStrategy[int] | None = None,
    batches: st.SearchStrategy[int] | None = None,
    max_size: int = 8,
) -> st.SearchStrategy[DynamicGraph]:
    """Random core-ATen graphs whose inputs' dim 0 is dynamic (``build_dynamic_graph``), with SymInt flows.

    A ``DynamicGraph`` holds the module to lower or verify, its example inputs and torch.export's
    ``dynamic_shapes`` (one ``Dim`` shared by every input's dim 0), and the Dim's range ``dim_range``.
    ``batches`` draws the example's size (default 2 to 4); the range's minimum is 1 or 2, its maximum between the
    example's size (above the minimum, and at least 3) and ``max_size``. Everything shrinks: the recipe as in
    ``aten_graphs``, the sizes towards the smallest example and the narrowest range above it.
    ``ops``: names of ``DYNAMIC_OPS`` (every op of ``OPS`` and ``DYNAMIC_ONLY``); ``dtypes``, ``seeds`` as in ``aten_graphs``.
    """
    unknown_ops = [name for name in ops if name not in DYNAMIC_OPS]
    if not ops or unknown_ops:
        raise ValueError(f"ops must be among {', '.join(DYNAMIC_OPS)}; got {list(ops)}")
    unknown = [dtype for dtype in dtypes if dtype not in DTYPES]
    if not dtypes or unknown:
        raise ValueError(f"dtypes must be among {', '.join(map(str, DTYPES))}; got {list(dtypes)}")
    if max_size < 3:
        raise ValueError(f"max_size must be at least 3 (above the smallest example size, 2), got {max_size}")
    recipes = st.lists(steps(ops), min_size=min_nodes, max_size=max_nodes)
    dtype_strategy = st.just(dtypes[0]) if len(dtypes) == 1 else st.sampled_from(list(dtypes))
    seed_strategy = seeds if seeds is not None else st.just(0)
    batch_strategy = batches if batches is not None else st.integers(2, min(4, max_size))

    @st.composite
    def graphs(draw: st.DrawFn) -> DynamicGraph:
        recipe, dtype, seed = draw(recipes), draw(dtype_strategy), draw(seed_strategy)
        batch = draw(batch_strategy)
        if not 2 <= batch <= max_size:
            raise ValueError(f"batches drew {batch}: example sizes must lie in 2..max_size={max_size}")
        low = draw(st.integers(1, 2))
        # A Dim's max exceeds its min; and it is 3 or more: torch.export 2.14 drops the equality of the inputs
        # that share a Dim of range 1..2 (test_fuzz_regressions.py, bug 3)
        high = draw(st.integers(max(batch, low + 1, 3), max_size))
        return build_dynamic_graph(recipe, batch=batch, dim_range=(low, high), seed=seed, dtype=dtype)

    return graphs()


# Ops with Tensor operands and results only, and no mutable state: what the exhaustive segmentation references
# (suites/partitioning) enumerate, which know no ordering but data edges.
TENSOR_ONLY = tuple(name for name, kind in OPS.items() if kind.returns != "int" and not kind.takes_int and name not in STATEFUL)


def random_recipe(
    num_nodes: int, unsupported_fraction: float = 0.1, seed: int = 0, ops: Sequence[str] = tuple(OPS)
) -> list[Step]:
    """A seeded recipe of ``num_nodes`` steps from ``ops``, ``unsupported_fraction`` of them without a converter."""
    rng = random.Random(seed)
    unsupported = sorted(UNSUPPORTED & set(ops))
    supported = [name for name in ops if name not in UNSUPPORTED]
    recipe = []
    for _ in range(num_nodes):
        pool = unsupported if rng.random() < unsupported_fraction else supported
        recipe.append(Step(rng.choice(pool), rng.randrange(16), rng.randrange(16)))
    return recipe


def called_ops_only(graph: torch.fx.GraphModule, settings: Settings) -> Settings:
    """``settings`` without the ``torch_executed_ops`` entries ``graph`` never calls. trtcheck refuses a forced op
    that matches nothing (``UnmatchedOpError``), and settings drawn apart from the graph (``forcing relu`` on a graph
    of one ``neg``) meet such graphs all the time: the draw keeps its other settings instead of being thrown away."""
    live = copy_graph_module(graph)
    live.graph.eliminate_dead_code()  # as lowering does: a dead node is not called (a graph of one unused sym_size)
    unmatched = set(resolve_ops(settings.torch_executed_ops).unmatched([live.graph]))
    return dataclasses.replace(settings, torch_executed_ops=[op for op in settings.torch_executed_ops if op not in unmatched])
