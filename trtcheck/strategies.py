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
"""

from __future__ import annotations

import copy
import operator
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from hypothesis import strategies as st

aten = torch.ops.aten


FULL = [1, 3, 3, 3]  # every value broadcasts to this: ops keep or reduce dimensions to 1, never change 3s

# The dtypes a graph may have (its inputs' and weights'), float32 first: hypothesis shrinks towards it.
DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.float16, torch.bfloat16, torch.int64)


class _Builder:
    """Emits nodes whose ``meta["val"]`` is their real value, computed as the graph is built."""

    def __init__(self, generator: torch.Generator, dtype: torch.dtype = torch.float32) -> None:
        self.graph = torch.fx.Graph()
        self.root = torch.nn.Module()
        self.values: dict[torch.fx.Node, Any] = {}
        self.generator = generator
        self.dtype = dtype

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

    def full(self, node: torch.fx.Node) -> torch.fx.Node:
        return node if list(self.values[node].shape) == FULL else self.call(aten.expand.default, node, FULL)


def _conv(b: _Builder, x: torch.fx.Node, in_channels: int, kernel: int) -> torch.fx.Node:
    """A convolution with weights of ``x``'s dtype (PyTorch's CPU convolution takes int64 too)."""
    dtype = b.dtype_of(x)
    weight, bias = b.constant(3, in_channels, kernel, kernel, dtype=dtype), b.constant(3, dtype=dtype)
    pad = kernel // 2
    return b.call(aten.convolution.default, x, weight, bias, [1, 1], [pad, pad], [1, 1], False, [0, 0], 1)


def _matmul(b: _Builder, x: torch.fx.Node, y: torch.fx.Node) -> torch.fx.Node:
    """bmm does not promote: an int64 and a float32 operand meet in float32."""
    dtype = torch.promote_types(b.dtype_of(x), b.dtype_of(y))
    left, right = (b.view(b.full(b.cast(v, dtype)), [3, 3, 3]) for v in (x, y))
    return b.call(aten.view.default, b.call(aten.bmm.default, left, right), FULL)


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
    shape = list(b.values[x].shape)
    return b.call(aten.view.default, b.view(x, [-1]), shape)


def _on_positive(target: Any) -> Callable[[_Builder, torch.fx.Node], torch.fx.Node]:
    """``target(|x| + 1)``: lgamma and digamma are ill-conditioned near their poles at 0, -1, ..., where the
    last-bit differences between two correct engines upstream would be amplified into false alarms."""
    return lambda b, x: b.call(target, b.call(aten.add.Scalar, b.call(aten.abs.default, x), 1.0))


@dataclass(frozen=True)
class OpKind:
    """How an op of the random graphs takes operands and what it returns."""

    target: Any
    tensor_args: int  # Tensor operands
    returns: str = "tensor"  # "tensor", "tuple" (a (values, indices) pair) or "int"
    takes_int: bool = False  # a trailing int operand, made by a "size" op
    extra_args: tuple = ()
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
    # No converter in TensorRT: these make fallback happen.
    "lgamma": OpKind(aten.lgamma.default, 1, emit=_on_positive(aten.lgamma.default)),
    "digamma": OpKind(aten.digamma.default, 1, emit=_on_positive(aten.digamma.default)),
}
UNSUPPORTED = frozenset({"lgamma", "digamma"})
SUPPORTED = tuple(name for name in OPS if name not in UNSUPPORTED)


def unsupported_targets(names: Sequence[str] = tuple(UNSUPPORTED)) -> frozenset:
    return frozenset(OPS[name].target for name in names)


def supports_all_but(names: Sequence[str] = tuple(UNSUPPORTED)) -> Callable[[torch.fx.Node], bool]:
    """A ``support`` predicate for ``partition``: every op of the random graphs except ``names``."""
    blocked = unsupported_targets(names)
    return lambda node: node.target not in blocked


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
    if dtype not in DTYPES:
        raise ValueError(f"random graphs are built in {', '.join(map(str, DTYPES))}, not {dtype}")
    b = _Builder(torch.Generator().manual_seed(seed), dtype)
    tensors: list[torch.fx.Node] = []
    ints: list[torch.fx.Node] = []
    extra_outputs: list[torch.fx.Node] = []  # tuple members kept as outputs
    example_inputs = []
    for i in range(num_inputs):
        value = _input(b, shape)  # floats positive: the first input set keeps lgamma and digamma away from poles
        node = b.graph.placeholder(f"x{i}")
        b.values[node] = node.meta["val"] = value
        tensors.append(node)
        example_inputs.append(value)

    for step in recipe:
        kind = OPS[step.op]
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

    leaves = [node for node in tensors if not node.users and node.op != "placeholder"] + extra_outputs
    b.graph.output(tuple(leaves or [tensors[-1]]))
    return RandomGraph(torch.fx.GraphModule(b.root, b.graph), tuple(example_inputs), list(recipe), dtype, seed)


def float64_twin(graph_module: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of a random graph that computes every floating-point value in float64: the *exact* result, to
    within float64 rounding, against which eager's and an engine's rounding errors can be measured.

    Floating weights become float64, ``_to_copy`` to a floating dtype targets float64; call it with float64
    copies of the floating inputs (integer inputs as they are) under ``torch.set_default_dtype(torch.float64)``
    (``float64_outputs`` does), so that int64 values promote to float64 too.
    """
    twin = torch.fx.GraphModule(
        {name: buffer.to(torch.float64) if buffer.is_floating_point() else buffer.clone()
         for name, buffer in graph_module.named_buffers()},
        copy.deepcopy(graph_module.graph),
    )
    for node in twin.graph.nodes:
        dtype = node.kwargs.get("dtype")
        if isinstance(dtype, torch.dtype) and dtype.is_floating_point:
            node.kwargs = {**node.kwargs, "dtype": torch.float64}
    twin.recompile()
    return twin


def float64_outputs(graph_module: torch.fx.GraphModule, inputs: Sequence[Any]) -> Any:
    """``float64_twin(graph_module)`` run on ``inputs`` (floating ones made float64)."""
    twin = float64_twin(graph_module)
    wide = [x.to(torch.float64) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with torch.no_grad():
            return twin(*wide)
    finally:
        torch.set_default_dtype(previous)


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
    ``seeds``: draws the seed of the inputs' and weights' values (default: always 0).
    """
    recipes = st.lists(steps(ops), min_size=min_nodes, max_size=max_nodes)
    unknown = [dtype for dtype in dtypes if dtype not in DTYPES]
    if not dtypes or unknown:
        raise ValueError(f"dtypes must be among {', '.join(map(str, DTYPES))}; got {list(dtypes)}")
    dtype_strategy = st.just(dtypes[0]) if len(dtypes) == 1 else st.sampled_from(list(dtypes))
    return st.builds(build_graph, recipes, seed=seeds if seeds is not None else st.just(0), dtype=dtype_strategy)


TENSOR_ONLY = tuple(name for name, kind in OPS.items() if kind.returns != "int" and not kind.takes_int)


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
