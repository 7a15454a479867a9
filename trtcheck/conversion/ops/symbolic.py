"""SymInt-valued nodes: ``sym_size`` and the integer arithmetic export emits on sizes (``operator.mul`` &
co., ``torch.sym_max``...). (``x.numel()`` and ``x.stride()`` export as arithmetic on ``sym_size`` or as
constants: no ``sym_numel``/``sym_stride`` node reaches a lowered graph, so they have no converter.)

A graph exported with ``dynamic_shapes`` computes shape arguments at run time: ``view(x, [sym_size_int_6,
2, 64])``, ``mul_134 = sym_size_int_6 * 2``. Inside a TensorRT segment each such value is a 0-d int64 ONNX
value computed from the segment's inputs (``Shape`` + ``Gather``, then ``Mul``/``Div``...), so the engine
serves every size in range. A SymInt crossing a segment boundary follows the Tensor-only rules of
``trtcheck.partitioning.boundaries`` (a TensorRT consumer gets its own copy of the producer chain).
SymFloat and SymBool values (``operator.truediv``, comparisons) have no converter: they stay in PyTorch.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from trtcheck.conversion.arguments import BoundArgs
from trtcheck.conversion.context import int_floor_divide, int_op, is_symint
from trtcheck.conversion.ops._common import aten, converter, engine_refusal
from trtcheck.conversion.registry import Refusal, register

if TYPE_CHECKING:  # pragma: no cover - the context imports the registry, not vice versa
    from trtcheck.conversion.context import ConversionContext

_INT64 = frozenset({torch.int64})


@converter(aten.sym_size.int, constants=("dim",), outputs=_INT64, dynamic=True)
def _sym_size(ctx: ConversionContext, args: BoundArgs) -> str:
    return ctx.dim_of(ctx.name(args.self), args.dim % max(args.meta("self").dim(), 1))


# ---- integer arithmetic on SymInts: plain Python functions, positional arguments, no schema ----------------
# target -> how to combine int64 values (folded left to right over the arguments); Python semantics:
# ``//`` floors (ONNX Div truncates), ``%`` takes the divisor's sign (ONNX Mod with fmod=0 does too).
_ARITHMETIC: dict[Callable[..., Any], Callable[[ConversionContext, str, str], str]] = {
    operator.add: int_op("Add"),
    operator.sub: int_op("Sub"),
    operator.mul: int_op("Mul"),
    operator.floordiv: int_floor_divide,
    operator.mod: int_op("Mod", fmod=0),
    torch.sym_max: int_op("Max"),
    torch.sym_min: int_op("Min"),
}


def _operands(node: torch.fx.Node) -> list[Any]:
    """The values a SymInt function combines: its positional arguments (``sym_sum`` takes one list)."""
    return list(node.args[0]) if node.target is torch.sym_sum else list(node.args)


def _symint_check(node: torch.fx.Node) -> bool | Refusal:
    """Ints and SymInt nodes in, a SymInt out; anything else (a float, a SymFloat) stays in PyTorch."""
    reason = engine_refusal(node, dynamic=True)
    if reason:
        return Refusal(reason)
    if node.kwargs:
        return Refusal(f"keyword arguments {sorted(node.kwargs)}: {node.target.__name__} takes positional ones here")
    result = node.meta.get("val")
    if not is_symint(result):
        return Refusal(f"the result is {type(result).__name__} {result!r}, not a SymInt")
    for index, value in enumerate(_operands(node)):
        if not (isinstance(value, torch.fx.Node) or is_symint(value)):
            return Refusal(f"argument {index} is {type(value).__name__} {value!r}, not an int or a SymInt")
    return True


_symint_check.input_dtypes = _INT64  # type: ignore[attr-defined] - the declarations converter() gives its validators
_symint_check.output_dtypes = _INT64  # type: ignore[attr-defined]
_symint_check.dynamic = True  # type: ignore[attr-defined]


def _fold(combine: Callable[[ConversionContext, str, str], str]) -> Callable[[ConversionContext, torch.fx.Node], str]:
    def convert(ctx: ConversionContext, node: torch.fx.Node) -> str:
        return functools.reduce(lambda a, b: combine(ctx, a, b), [ctx.int_value(value) for value in _operands(node)])

    return convert


for _target, _combine in _ARITHMETIC.items():
    register(_target, validator=_symint_check, _builtin=True)(_fold(_combine))
register(torch.sym_sum, validator=_symint_check, _builtin=True)(_fold(int_op("Add")))


@register(operator.neg, validator=_symint_check, _builtin=True)
def _neg(ctx: ConversionContext, node: torch.fx.Node) -> str:
    return ctx.add("Neg", [ctx.int_value(node.args[0])])

