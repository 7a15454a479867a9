"""Random core-ATen ``torch.fx`` graphs: hypothesis strategies, and a seeded generator for benchmarks.

A graph is described by a *recipe*, a list of ``Step(op, a, b)``; ``a`` and ``b`` pick operands among the
values made so far (modulo their count, so any integers are valid and shrink towards the first value).
One builder turns a recipe into a ``GraphModule`` with real example values in ``meta["val"]``, so the
hypothesis strategy (which shrinks recipes to small failing graphs) and the benchmark generator (which
draws recipes from ``random.Random``) share every line of graph construction.
"""

from __future__ import annotations

import operator
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from hypothesis import strategies as st

aten = torch.ops.aten


@dataclass(frozen=True)
class OpKind:
    """How an op of the random graphs takes operands and what it returns."""

    target: Any
    tensor_args: int  # Tensor operands
    returns: str = "tensor"  # "tensor", "tuple" (a (values, indices) pair) or "int"
    takes_int: bool = False  # a trailing int operand, made by a "size" op
    extra_args: tuple = ()


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
    "max_dim": OpKind(aten.max.dim, 1, returns="tuple", extra_args=(1, True)),
    "size": OpKind(aten.sym_size.int, 1, returns="int", extra_args=(0,)),
    "add_scalar": OpKind(aten.add.Scalar, 1, takes_int=True),
    "mul_scalar": OpKind(aten.mul.Scalar, 1, takes_int=True),
    # No converter in TensorRT: these make fallback happen.
    "lgamma": OpKind(aten.lgamma.default, 1),
    "digamma": OpKind(aten.digamma.default, 1),
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

    def __repr__(self) -> str:  # what hypothesis prints for a falsifying example
        return f"RandomGraph(recipe={self.recipe!r})\n{self.graph_module.code.strip()}"


def build_graph(recipe: Sequence[Step], num_inputs: int = 2, shape: tuple[int, ...] = (2, 3), seed: int = 0) -> RandomGraph:
    """Build a ``GraphModule`` from a recipe; every node's ``meta["val"]`` is its real value."""
    generator = torch.Generator().manual_seed(seed)
    graph = torch.fx.Graph()
    tensors: list[tuple[torch.fx.Node, torch.Tensor]] = []
    ints: list[tuple[torch.fx.Node, int]] = []
    consumed: set[torch.fx.Node] = set()
    leaves_extra: list[torch.fx.Node] = []  # tuple members kept as outputs
    example_inputs = []
    for i in range(num_inputs):
        value = torch.rand(shape, generator=generator) + 0.5  # positive: lgamma and digamma stay finite
        node = graph.placeholder(f"x{i}")
        node.meta["val"] = value
        tensors.append((node, value))
        example_inputs.append(value)

    for step in recipe:
        kind = OPS[step.op]
        if kind.takes_int and not ints:
            continue  # no int made yet: nothing to read, skip the step
        picks = [step.a, step.b][: kind.tensor_args]
        operands = [tensors[len(tensors) - 1 - (p % len(tensors))] for p in picks]  # near the end: local
        args = [node for node, _ in operands]
        values = [value for _, value in operands]
        if kind.takes_int:
            int_node, int_value = ints[len(ints) - 1 - (step.b % len(ints))]
            args.append(int_node)
            values.append(int_value)
        args.extend(kind.extra_args)
        values.extend(kind.extra_args)
        node = graph.call_function(kind.target, tuple(args))
        result = kind.target(*values)
        node.meta["val"] = result
        consumed.update(a for a in args if isinstance(a, torch.fx.Node))
        if kind.returns == "tuple":
            first = graph.call_function(operator.getitem, (node, 0))
            first.meta["val"] = result[0]
            tensors.append((first, result[0]))
            if step.b % 2:  # sometimes keep the indices too, as a graph output
                second = graph.call_function(operator.getitem, (node, 1))
                second.meta["val"] = result[1]
                leaves_extra.append(second)
        elif kind.returns == "int":
            ints.append((node, result))
        else:
            tensors.append((node, result))

    leaves = [node for node, _ in tensors if node not in consumed and node.op != "placeholder"] + leaves_extra
    if not leaves:
        leaves = [tensors[-1][0]]
    graph.output(tuple(leaves))
    return RandomGraph(torch.fx.GraphModule(torch.nn.Module(), graph), tuple(example_inputs), list(recipe))


def steps(ops: Sequence[str] = tuple(OPS)) -> st.SearchStrategy[Step]:
    """One recipe step; the operand picks shrink towards the most recent values."""
    return st.builds(Step, st.sampled_from(list(ops)), st.integers(0, 63), st.integers(0, 63))


def aten_graphs(min_nodes: int = 1, max_nodes: int = 25, ops: Sequence[str] = tuple(OPS)) -> st.SearchStrategy[RandomGraph]:
    """Random core-ATen graphs with unsupported, tuple-returning and int-producing ops mixed in."""
    recipes = st.lists(steps(ops), min_size=min_nodes, max_size=max_nodes)
    return recipes.map(build_graph)


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
