"""A call's input sizes checked against a graph's symbolic input sizes, cheaply: it runs on every call.

A graph exported with ``dynamic_shapes`` has input sizes that are ints, symbols (``s0``, one per ``Dim``) or
expressions of them (``2*s0``, ``s0 + 1``: a ``Dim`` derived from another). torch.export's own program checks
each call against them (its guards, ``a.size()[0] == 2 * b.size()[0]``); lowering drops those guards, so trtcheck
checks instead, in two places: the compiled module on every call (``trtcheck.runtime.signature``) and the
example inputs given with an ``ExportedProgram`` (``trtcheck.lowering.export``). Both use one ``SizeCheck``.

``SizeCheck`` is compiled once from the metadata into a flat list of operations over integer slots, one slot
per symbol: a call's check is then a loop of integer comparisons and, for derived sizes, integer arithmetic
(``2 * s + 0``), never sympy. Every relation is checked whatever the inputs' order: a size ``2*s`` that comes
before the input defining ``s`` is checked once ``s`` is known, and an ``s`` that no input has as a plain size
is solved from the derived one (``2*s`` of 11 rows: no whole ``s``, refused).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch

from trtcheck.lowering.symbols import dim_range, named


@dataclass(frozen=True)
class SymbolicSize:
    """One dynamic size of an input: its expression over export's symbols and its range.

    ``label`` is the expression in the user's ``Dim`` names (``batch``, ``2*seq``), else the symbols'; ``alias``
    the Dim's name where it is not the symbol's own: one Dim may be two symbols (torch.export makes a Dim of
    range 1..2 shared by two inputs one symbol per input), and the check then holds the name equal too.
    """

    expr: sympy.Expr
    min: int
    max: int | None
    label: str = ""
    alias: str = ""

    def __str__(self) -> str:
        return f"{self.label or self.expr} in [{self.min}, {'inf' if self.max is None else self.max}]"

    def short(self) -> str:
        """``batch in 2..16``: how a shape lists it."""
        return f"{self.label or self.expr} in {self.min}..{'inf' if self.max is None else self.max}"


Size = int | SymbolicSize
Ranges = Mapping[str, tuple["int | None", "int | None"]]


def symbolic_size(size: int | torch.SymInt, ranges: Ranges, names: Mapping[str, str]) -> Size:
    """One size of a placeholder's metadata as ``SymbolicSize`` (an int stays an int), its range over the
    symbols' ``ranges`` and its label in the Dim ``names`` (``symbols.dim_names``)."""
    if isinstance(size, int):
        return size
    bounds = dim_range(size, ranges)
    label = named(size.node.expr, names)
    alias = label if isinstance(size.node.expr, sympy.Symbol) and label != str(size.node.expr) else ""
    return SymbolicSize(size.node.expr, bounds.min, bounds.max, label, alias)


def describe_sizes(sizes: Sequence[Size]) -> str:
    """``[batch in 2..16, 8]``: a shape whose dynamic sizes show their range."""
    return "[" + ", ".join(str(s) if isinstance(s, int) else s.short() for s in sizes) + "]"


# Operation kinds of a compiled SizeCheck (the first item of each operation tuple).
_STATIC, _DEFINE, _SAME, _SOLVE, _EVAL, _BOUND = range(6)


class SizeCheck:
    """The sizes of a fixed list of inputs, checked against their ``Size`` s (an int, or a ``SymbolicSize``).

    ``mismatch(shapes)`` takes the shapes of one call's inputs (each of the right rank: the caller checks rank,
    dtype and device, which it describes in its own terms) and returns the first size that disagrees, as
    ``(input, what)``, or None. ``what`` reads after "input 'x': " and names the dim, its expression and the values
    (``dim 0 is 11, but it is 2*s, and s is 5 (set by 'b' dim 0): 2*s = 10``).

    Compiled at construction (per symbol a slot; per size an operation). ``names`` name the inputs in messages;
    ``ranges`` (``symbols.symbol_ranges``) and ``dim_names`` (``symbols.dim_names``) give the range and the Dim's
    name of a symbol that only a derived size holds (``s`` of ``2*s``: the sizes' own ranges are the expression's).
    """

    def __init__(
        self, inputs: Sequence[Sequence[Size]], names: Sequence[str], ranges: Ranges, dim_names: Mapping[str, str] | None = None
    ) -> None:
        self.names = tuple(names)
        slots: dict[Any, int] = {}  # a sympy.Symbol, or a Dim name (an alias), -> its slot
        self._labels: list[str] = []  # per slot: the symbol's Dim name, else the symbol
        self._setters: list[tuple[str, int]] = []  # per slot: the input and dim a call's value of it comes from
        main: list[tuple] = []  # checked input by input: static sizes, plain symbols and their aliases
        derived: list[tuple[int, int, SymbolicSize]] = []

        def slot(key: Any, label: str, setter: tuple[str, int]) -> tuple[int, bool]:
            if key in slots:
                return slots[key], False
            slots[key] = len(self._labels)
            self._labels.append(label)
            self._setters.append(setter)
            return slots[key], True

        for index, sizes in enumerate(inputs):
            for dim, size in enumerate(sizes):
                if isinstance(size, int):
                    main.append((_STATIC, index, dim, size))
                elif isinstance(size.expr, sympy.Symbol):
                    label = size.label or str(size.expr)
                    where, new = slot(size.expr, label, (self.names[index], dim))
                    main.append((_DEFINE, index, dim, where, size.min, size.max, str(size)) if new else (_SAME, index, dim, where, label))
                    if size.alias:  # the same Dim under another symbol: held equal by its name too
                        where, new = slot(size.alias, size.alias, (self.names[index], dim))
                        main.append((_DEFINE, index, dim, where, 0, None, size.alias) if new else (_SAME, index, dim, where, size.alias))
                else:
                    derived.append((index, dim, size))
        solved: list[tuple] = []
        evaluated: list[tuple] = []
        for index, dim, size in derived:
            label = size.label or str(size.expr)
            symbols = sorted(size.expr.free_symbols, key=str)
            if all(symbol in slots for symbol in symbols):
                used = tuple(slots[symbol] for symbol in symbols)
                evaluated.append((_EVAL, index, dim, _evaluator(size.expr, slots), used, label))
                continue
            linear = _linear(size.expr)
            if linear is not None and linear[0] not in slots:
                symbol, scale, offset = linear
                low, high = ranges.get(str(symbol), (None, None))
                name = named(symbol, dim_names or {})
                where, _ = slot(symbol, name, (self.names[index], dim))
                solved.append((_SOLVE, index, dim, where, scale, offset, max(low or 0, 0), high, label, name))
            else:  # several unknown symbols, or not linear: no value to compare with, only its range
                evaluated.append((_BOUND, index, dim, size.min, size.max, str(size)))
        self._ops = tuple(main + solved + evaluated)  # a derived size once every symbol it uses has a value
        self._slots = len(self._labels)

    def mismatch(self, shapes: Sequence[Sequence[int]]) -> tuple[int, str] | None:
        """``(input, what)`` for the first size of ``shapes`` that disagrees with the compiled ones; None when all fit."""
        values = [0] * self._slots
        for op in self._ops:
            kind, index, dim = op[0], op[1], op[2]
            got = shapes[index][dim]
            if kind == _STATIC:
                if got != op[3]:
                    return index, f"dim {dim} is {got}, but it is static: {op[3]} in every call"
            elif kind == _DEFINE:
                if got < op[4] or (op[5] is not None and got > op[5]):
                    return index, f"dim {dim} is {got}, outside the range of {op[6]}"
                values[op[3]] = got
            elif kind == _SAME:
                if got != values[op[3]]:
                    return index, f"dim {dim} is {got}, but it is {op[4]}, which {self._setters[op[3]][0]!r} set to {values[op[3]]}"
            elif kind == _SOLVE:
                _, _, _, where, scale, offset, low, high, label, name = op
                value, remainder = divmod(got - offset, scale)
                if remainder:
                    return index, f"dim {dim} is {got}, but it is {label}, and no whole {name} gives {got}"
                if value < low or (high is not None and value > high):
                    return index, (
                        f"dim {dim} is {got}, but it is {label}, and {name} = {value} is outside {name}'s range "
                        f"[{low}, {'inf' if high is None else high}]"
                    )
                values[where] = value
            elif kind == _EVAL:
                want = op[3](values)
                if got != want:
                    known = ", ".join(
                        f"{self._labels[s]} is {values[s]} (set by {self._setters[s][0]!r} dim {self._setters[s][1]})" for s in op[4]
                    )
                    return index, f"dim {dim} is {got}, but it is {op[5]}, and {known}: {op[5]} = {want}"
            elif got < op[3] or (op[4] is not None and got > op[4]):  # _BOUND
                return index, f"dim {dim} is {got}, outside the range of {op[5]}"
        return None


def _linear(expr: sympy.Expr) -> tuple[sympy.Symbol, int, int] | None:
    """``(s, a, b)`` when ``expr`` is ``a*s + b`` over one symbol with whole ``a != 0`` and ``b`` (a derived Dim:
    torch.export derives a Dim only so), else None."""
    if len(expr.free_symbols) != 1:
        return None
    (symbol,) = expr.free_symbols
    scale, offset = expr.coeff(symbol, 1), expr.coeff(symbol, 0)
    if not (isinstance(scale, sympy.Integer) and isinstance(offset, sympy.Integer)) or scale == 0:
        return None
    if sympy.expand(scale * symbol + offset - expr) != 0:
        return None
    return symbol, int(scale), int(offset)


def _evaluator(expr: sympy.Expr, slots: Mapping[Any, int]) -> Callable[[list[int]], int]:
    """A Python function of the slots' values computing ``expr``, compiled once: integer arithmetic per call.

    Linear sizes (every derived Dim) are a closure; anything else is printed by torch's Python printer (``//``
    for ``FloorDiv``, ``%`` for ``Mod``) and compiled; only what that cannot print is evaluated with sympy.
    """
    linear = _linear(expr)
    if linear is not None:
        where, scale, offset = slots[linear[0]], linear[1], linear[2]
        return lambda values: scale * values[where] + offset
    renamed = expr.xreplace({symbol: sympy.Symbol(f"_v[{slots[symbol]}]", integer=True) for symbol in expr.free_symbols})
    try:
        from torch.utils._sympy.printers import PythonPrinter

        function = eval(f"lambda _v: int({PythonPrinter().doprint(renamed)})", {"math": math})  # our own expression
        function([1] * (max(slots.values(), default=0) + 1))  # it runs: the printer knew every function in it
        return function
    except Exception:  # noqa: BLE001 - a function the printer cannot print: sympy, slower but right
        return lambda values: int(expr.xreplace({symbol: values[slots[symbol]] for symbol in expr.free_symbols}))
