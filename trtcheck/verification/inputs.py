"""The input sets ``verify`` compares on, and running eager on one.

The example, the example again (a second call must still be right: state, caches), then generated sets
drawn like the example (one policy for every generated set, at the example's sizes or at others within a
``Dim``'s range). Eager failing on a generated set is an ``InputDomainError``: the model's inputs are
constrained, and the user passes valid sets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.fx
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from trtcheck.errors import InputDomainError
from trtcheck.values import cloned

#: The share of a generated integer tensor's elements that ``draw_like`` sets to an edge value.
EDGE_SHARE = 0.25


def draw_like(example: Any, shape: Sequence[int], generator: torch.Generator | None = None) -> Any:
    """One generated input leaf like ``example``, at ``shape``: the one policy of every generated input set.

    Floating-point (and complex) tensors are drawn from a standard normal distribution; bool tensors are fair
    coins; anything else is kept as it is. Integer tensors are drawn uniformly within the example's observed
    ``[min, max]`` (zeros where the example has no element to observe), and each element, with probability
    ``EDGE_SHARE``, is an edge value instead, where integer arithmetic goes wrong (an overflow, a sign rule):
    the example's own min and max, and 0, 1 and -1 where they lie within ``[min, max]``.

    The rule: a generated value never leaves the example's observed ``[min, max]``, so an index tensor stays a
    valid index, a divisor that is never 0 stays non-zero, and a mask of 0s and 1s stays one. The dtype's own
    extremes (``-2147483648 // 3`` once overflowed an engine) are therefore drawn only where the example holds
    them: an example that holds the dtype's min or max is one whose values may be anything, and its min or max
    is then that extreme, drawn as an edge value. A wide range that stops short of the extremes does not widen
    it: nothing tells an index from a value there, so the only values trusted are those the example shows.
    """
    if not isinstance(example, torch.Tensor):
        return example
    if example.is_floating_point() or example.is_complex():
        return torch.randn(shape, generator=generator, dtype=example.dtype).to(example.device)
    if example.dtype == torch.bool:
        return (torch.rand(shape, generator=generator) < 0.5).to(example.device)
    if not example.numel():
        return torch.zeros(shape, dtype=example.dtype, device=example.device)
    low, high = int(example.min()), int(example.max())
    if low == high:
        return torch.full(tuple(shape), low, dtype=example.dtype, device=example.device)
    # randint's end is exclusive and must fit in int64: int64's max then comes from the edge values only.
    end = high + 1 if high < torch.iinfo(torch.int64).max else high
    drawn = torch.randint(low, end, shape, generator=generator, dtype=example.dtype)
    edges = torch.tensor(_edge_values(low, high), dtype=example.dtype)
    at_edge = torch.rand(shape, generator=generator) < EDGE_SHARE
    picks = torch.randint(len(edges), shape, generator=generator)
    return torch.where(at_edge, edges[picks], drawn).to(example.device)


def _edge_values(low: int, high: int) -> list[int]:
    """The edge values of an integer tensor observed in ``[low, high]``: ``low``, ``high``, 0, 1, -1 within it."""
    return sorted({value for value in (low, high, 0, 1, -1) if low <= value <= high})


def random_like(value: Any, generator: torch.Generator | None = None) -> Any:
    """A fresh input like ``value`` (a pytree of inputs): every leaf drawn by ``draw_like`` at its own shape."""
    return _drawn(value, generator, lambda index, leaf: leaf.shape)


def _drawn(value: Any, generator: torch.Generator | None, shape_of: Callable[[int, torch.Tensor], Sequence[int]]) -> Any:
    """``value`` with every leaf drawn by ``draw_like``, in flat order, at ``shape_of(flat index, leaf)``."""
    leaves, spec = tree_flatten(value)
    drawn = [
        draw_like(leaf, shape_of(index, leaf), generator) if isinstance(leaf, torch.Tensor) else leaf
        for index, leaf in enumerate(leaves)
    ]
    return tree_unflatten(drawn, spec)


InputSet = Sequence[Any]


def check_input_sets(given: Any) -> None:
    """Raise ``InputDomainError`` unless ``given`` is what ``verify(inputs=)`` takes: a list of input sets, each a
    tuple (or list) of the model's positional inputs. A bare tensor, or one set not wrapped in a list, is the usual
    slip; ``VerifyRequest`` calls this before anything runs, and ``draw_input_sets`` for the other callers."""
    if isinstance(given, (str, bytes, torch.Tensor)) or not isinstance(given, Sequence) or not all(
        isinstance(s, (tuple, list)) for s in given
    ):
        raise InputDomainError(
            "inputs must be a list of input sets, each a tuple of the model's positional inputs, like "
            "example_inputs: write inputs=[(x1,), (x2,)]"
        )


def draw_input_sets(example: Sequence[Any], given: Sequence[InputSet] | None, count: int, seed: int) -> list[tuple]:
    """The example, the example again (a second call), then the given sets or ``count - 1`` random ones."""
    if given is not None:
        check_input_sets(given)
        extra = [tuple(s) for s in given]
    else:
        generator = torch.Generator().manual_seed(seed)
        extra = [random_like(tuple(example), generator) for _ in range(max(count - 1, 0))]
    return [tuple(example), tuple(example), *extra]


def compared_input_sets(
    signature: Any, example: Sequence[Any], given: Sequence[InputSet] | None, count: int, seed: int
) -> list[tuple[str, tuple]]:
    """The labelled input sets ``verify`` compares (and ``reduce_model`` searches): the example, the example again,
    then ``given``, else ``count - 1`` random sets like the example, or, for a module compiled with dynamic sizes
    (``signature.dynamic``), ``sized_input_sets``."""
    sets = draw_input_sets(example, given, count, seed)
    labelled = [("example", sets[0]), ("example again", sets[1])]
    if given is None and signature.dynamic:
        return labelled + sized_input_sets(signature, example, count, seed)
    return labelled + [("given" if given is not None else "random values", s) for s in sets[2:]]


def sized_input_sets(signature: Any, example: Sequence[Any], count: int, seed: int) -> list[tuple[str, tuple]]:
    """Input sets with every dynamic size at its minimum, at its maximum, then ``count - 1`` at random sizes in
    range, each labelled with its sizes; values drawn by ``draw_like``."""
    ranges = signature.symbol_ranges()
    generator = torch.Generator().manual_seed(seed)
    # Symbols of one Dim (export gives inputs sharing a Dim a symbol each for some small ranges) take one size.
    groups: dict[str, list[Any]] = {}
    for symbol in ranges:
        groups.setdefault(signature.dim_names.get(str(symbol), str(symbol)), []).append(symbol)
    low = {name: max(max(ranges[s][0] for s in symbols), 1) for name, symbols in groups.items()}
    high = {
        name: min((ranges[s][1] for s in symbols if ranges[s][1] is not None), default=2 * _example_size(signature, example, symbols[0]))
        for name, symbols in groups.items()
    }
    choices = [("min", low), ("max", high)]
    for _ in range(max(count - 1, 0)):
        choices.append(("random size", {name: int(torch.randint(low[name], high[name] + 1, (), generator=generator)) for name in groups}))
    sets = []
    for kind, by_name in choices:
        label = f"{kind}: " + ", ".join(f"{name}={v}" for name, v in sorted(by_name.items()))
        values = {symbol: by_name[name] for name, symbols in groups.items() for symbol in symbols}
        sets.append((label, input_set_of_sizes(signature, example, values, generator)))
    return sets


def _example_size(signature: Any, example: Sequence[Any], symbol: Any) -> int:
    leaves, _ = tree_flatten((tuple(example), {}))
    for index, leaf in enumerate(signature.leaves):
        for dim, size in enumerate(getattr(leaf, "sizes", None) or ()):
            if getattr(size, "expr", None) == symbol and index < len(leaves):
                return int(leaves[index].shape[dim])
    return 1


def input_set_of_sizes(signature: Any, example: Sequence[Any], values: Mapping[Any, int], generator: torch.Generator) -> tuple:
    """The positional inputs drawn by ``draw_like`` with the sizes ``values`` gives each symbol."""
    return tuple(_drawn(tuple(example), generator, lambda index, leaf: signature.shape_for(index, values)))


def run_eager(model: torch.nn.Module, input_set: tuple, kwargs: dict, index: int, generated: bool, grad: bool = False) -> Any:
    """Eager's outputs on one input set, under ``torch.no_grad()`` (inference) or with autograd on (``grad``)."""
    try:
        with torch.set_grad_enabled(grad):
            return model(*cloned(input_set), **cloned(kwargs))
    except Exception as error:  # eager itself failing is the input set's fault, said plainly
        origin = (
            "which trtcheck generated like the example inputs (floats normal, booleans fair coins, integers within "
            "the example's smallest and largest value, a share of them at its edges: those two, 0 and +-1)"
            if generated
            else "which was given"
        )
        raise InputDomainError(
            f"eager {type(model).__name__} itself fails on input set {index}, {origin}: {type(error).__name__}: "
            f"{str(error).strip().splitlines()[0] if str(error).strip() else ''}\nFix: the model's inputs are "
            "constrained; pass valid input sets with verify(..., inputs=[(x1, ...), (x2, ...)]) (the "
            "trtcheck_verify fixture takes the same keyword)"
        ) from error


def detached(value: Any) -> Any:
    """``value`` with every Tensor detached from autograd (eager run with grad on returns tensors that require it)."""
    return tree_map(lambda x: x.detach() if isinstance(x, torch.Tensor) else x, value)
