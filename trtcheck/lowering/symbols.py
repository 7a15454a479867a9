"""Dynamic sizes of a lowered graph: each symbol's range, the user's ``Dim`` names, and reading sizes safely.

``torch.export`` with ``dynamic_shapes`` leaves symbolic sizes (``s0``, ``2*s0``) in the graph's metadata and
each symbol's range in its program. Lowering keeps both on the ``GraphModule`` (``gm.meta``); partitioning
prints ranges, shape analysis builds engine profiles from them and verification draws sizes in them, so
they live at the bottom of the pipeline. Every reader goes through ``size_hint``: comparing a symbolic
size installs a guard that fixes the symbol to the example's size for every copy of the lowering.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sympy
import torch
import torch.fx

RANGES = "trtcheck_symbol_ranges"
"""``GraphModule.meta`` key: ``{symbol name: (min, max)}`` of every symbol (None: unbounded that way; only a
data-dependent value, never a Dim's size, is unbounded below)."""


def size_hint(size: int | torch.SymInt) -> int:
    """The example's value of one size of a lowered graph's metadata, read without a guard.

    ``int(size)`` (or ``size.numel()``, ``size > 1``) on a SymInt installs a guard in the shape environment
    that every copy of a lowering shares, replacing the symbol by the example's size for good: later
    engines, signatures and checks then see a static graph (``shape_analysis.specialized_symbols``).
    An unbacked size (a data-dependent one, with no example value) reads as 0.
    """
    if isinstance(size, int):
        return size
    hint = size.node.hint
    return int(hint) if hint is not None else 0


def value_bytes(node: torch.fx.Node) -> int:
    """Bytes of the value ``node`` produces at the example's sizes (0 for a non-Tensor): what crossing a
    segment boundary moves, for the partitioner's costs and the benchmarks' ``boundary_bytes`` alike."""
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor):
        return 0
    count = 1
    for size in value.shape:
        count *= size_hint(size)
    return count * value.element_size()


def expression_bounds(expr: Any, ranges: Mapping[str, tuple[int | None, int | None]]) -> tuple[int | None, int | None]:
    """(min, max) of a sympy expression over its symbols' ``ranges`` (None: unbounded that way); a symbol
    without a range counts as any size (at least 0, no max)."""
    from torch.utils._sympy.numbers import int_oo
    from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

    bounds = {}
    for symbol in expr.free_symbols:
        low, high = ranges.get(str(symbol), (0, None))
        bounds[symbol] = ValueRanges(-int_oo if low is None else low, int_oo if high is None else high)
    bound = bound_sympy(expr, bounds)
    return (int(bound.lower) if finite(bound.lower) else None, int(bound.upper) if finite(bound.upper) else None)


def finite(bound: Any) -> bool:
    """Whether a sympy bound of a range is a number, not one of sympy's or torch's infinities."""
    return bool(getattr(bound, "is_finite", True)) and str(bound) not in ("oo", "-oo", "int_oo", "-int_oo")


def symbol_ranges(gm: torch.fx.GraphModule) -> dict[str, tuple[int | None, int | None]]:
    """``{symbol name: (min, max)}`` of the dynamic sizes in ``gm``'s metadata (empty for static graphs)."""
    return dict(gm.meta.get(RANGES, {}))


DIM_NAMES = "trtcheck_dim_names"
"""``GraphModule.meta`` key: ``{symbol name: the torch.export.Dim's name}`` (``{"s17": "batch"}``)."""


def dim_names(gm: torch.fx.GraphModule) -> dict[str, str]:
    """The user's name of each symbol (its ``torch.export.Dim``'s), where lowering could tell; messages use it."""
    return dict(gm.meta.get(DIM_NAMES, {}))


Ranges = Mapping[str, tuple["int | None", "int | None"]]
"""``{symbol name: (min, max)}``, max None when unbounded: ``trtcheck.lowering.symbols.symbol_ranges(gm)``."""


@dataclass(frozen=True)
class DimRange:
    """The sizes one dimension takes: ``opt`` is the example's, ``max`` None when export left it unbounded."""

    min: int
    opt: int
    max: int | None

    @property
    def is_static(self) -> bool:
        return self.min == self.opt == self.max

    def __str__(self) -> str:
        if self.is_static:
            return str(self.opt)
        return f"{self.min}..{self.opt}..{'inf' if self.max is None else self.max}"


def dim_range(size: int | torch.SymInt, ranges: Ranges) -> DimRange:
    """The range of one size of a value's metadata: an int is static; a SymInt is bounded over its symbols'
    ranges (a symbol without a recorded range counts as unbounded, at least 0)."""
    if isinstance(size, int):
        return DimRange(size, size, size)
    low, high = expression_bounds(size.node.expr, ranges)
    low = max(low or 0, 0)  # a size is never negative
    hint = size.node.hint
    opt = int(hint) if hint is not None else max(low, 1)
    return DimRange(low, opt, high)


def named(expr: sympy.Expr, names: Mapping[str, str]) -> str:
    """``expr`` written with the user's Dim names (``2*seq`` for ``2*s98``); ``str(expr)`` without names."""
    renames = {symbol: sympy.Symbol(names[str(symbol)], integer=True) for symbol in expr.free_symbols if str(symbol) in names}
    return str(expr.xreplace(renames)) if renames else str(expr)


def specialized_symbols(gm: torch.fx.GraphModule) -> dict[str, int]:
    """The symbols of ``gm``'s recorded ranges that its shape environment has since fixed to a number.

    The metadata of every copy of a lowered graph shares one shape environment, and a Python comparison on
    a symbolic size (``int(size)``, ``if size > 1``) installs a guard that can replace the symbol by the
    example's size for good: every later engine, signature and determinism check would then see a static
    graph. Nothing in trtcheck may do that; ``verify`` reports any symbol this finds.
    """
    names = set(symbol_ranges(gm))
    environment = next(
        (
            size.node.shape_env
            for node in gm.graph.nodes
            if node.op == "placeholder" and isinstance(node.meta.get("val"), torch.Tensor)
            for size in node.meta["val"].shape
            if isinstance(size, torch.SymInt)
        ),
        None,
    )
    if environment is None:
        return {}
    return {str(symbol): int(value) for symbol, value in environment.replacements.items() if str(symbol) in names and value.is_number}
