"""Reductions: sum/mean/prod/amax/amin/logsumexp, max/min with indices, argmax/argmin, any/all, var,
cumsum (integers by shifted adds: TensorRT's CumSum takes floats only).

Every Reduce op takes its axes as an input at trtcheck's opset (19; from 18), which :func:`_reduce` writes. Inputs
are cast to the output dtype first, as PyTorch accumulates e.g. int32 and bool sums in int64.

All but ``var`` (whose divisor is the reduced element count) are ``dynamic``: they read axes, not sizes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from trtcheck.conversion.arguments import BoundArgs
from trtcheck.conversion.ops._common import (
    FLOAT,
    NUMERIC,
    TENSORRT_DTYPES,
    BoundConverterFn,
    aten,
    cast,
    converter,
    dynamic_refusal,
    ints,
    norm_dims,
    operand,
    out_dtype,
    out_meta,
    refuse,
    register_table,
)
from trtcheck.conversion.ops.shape import reshape
from trtcheck.conversion.registry import Refusal

if TYPE_CHECKING:  # pragma: no cover - the context imports the registry, not vice versa
    from trtcheck.conversion.context import ConversionContext


def _reduce(ctx: ConversionContext, onnx_op: str, x: str, axes: list[int], keepdim: bool) -> str:
    return ctx.add(onnx_op, [x, ints(ctx, axes)], keepdims=int(keepdim))  # axes are an input from opset 18


def _reduction_args(args: BoundArgs) -> tuple[list[int], bool]:
    """(axes, keepdim) for both the ``.default`` (all axes) and ``.dim*`` overloads."""
    rank = args.meta("self").dim()
    if "dim" not in args:  # e.g. sum.default: every axis
        return list(range(rank)), False
    return norm_dims(args.dim, rank), bool(args.keepdim)


def _reduction_ok(args: BoundArgs) -> bool | Refusal:
    """Non-scalar input; an explicit ``dtype`` argument only if it is the output dtype anyway."""
    if args.meta("self").dim() == 0:
        return refuse("self is 0-dimensional: nothing to reduce")
    dtype = args["dtype"] if "dtype" in args else None
    if dtype is not None and dtype != out_dtype(args.node):
        return refuse(f"dtype {dtype} differs from the output dtype")
    return True


# What NaN-propagating reductions need: PyTorch's max/min/argmax/argmin return NaN (and its first index)
# when a NaN is in the reduced slice, ONNX ReduceMax/ArgMax skip it.
_NAN_AWARE = {"ReduceMax", "ReduceMin", "ArgMax", "ArgMin"}


def _nan_mask(ctx: ConversionContext, x: str, axes: list[int], keepdim: bool) -> tuple[str, str]:
    """``(is_nan as int32, any NaN in the slice as bool)``; int32 because ONNX reductions take no bools."""
    is_nan = cast(ctx, ctx.add("IsNaN", [x]), torch.bool, torch.int32)
    any_nan = cast(ctx, _reduce(ctx, "ReduceMax", is_nan, axes, keepdim), torch.int32, torch.bool)
    return is_nan, any_nan


def _extreme_values(ctx: ConversionContext, onnx_op: str, x: str, dtype: torch.dtype, axes: list[int],
                    keepdim: bool) -> str:
    """ReduceMax/ReduceMin that return NaN for a slice holding one, as PyTorch does (floats only)."""
    values = _reduce(ctx, onnx_op, x, axes, keepdim)
    if dtype not in FLOAT:
        return values
    _, any_nan = _nan_mask(ctx, x, axes, keepdim)
    return ctx.add("Where", [any_nan, ctx.constant(float("nan"), dtype), values])


_REDUCTIONS: dict[Any, str] = {
    aten.sum.dim_IntList: "ReduceSum",
    aten.sum.default: "ReduceSum",
    aten.mean.dim: "ReduceMean",
    aten.mean.default: "ReduceMean",
    aten.prod.dim_int: "ReduceProd",
    aten.prod.default: "ReduceProd",
    aten.amax.default: "ReduceMax",
    aten.amin.default: "ReduceMin",
    aten.logsumexp.default: "ReduceLogSumExp",
}


def _reduction(onnx_op: str) -> BoundConverterFn:
    def convert(ctx: ConversionContext, args: BoundArgs) -> str:
        axes, keepdim = _reduction_args(args)
        dtype = out_dtype(args.node)
        x = operand(ctx, args.self, dtype)
        if onnx_op in _NAN_AWARE:
            return _extreme_values(ctx, onnx_op, x, dtype, axes, keepdim)
        return _reduce(ctx, onnx_op, x, axes, keepdim)

    return convert


register_table(_REDUCTIONS, _reduction, outputs=NUMERIC, constants=("dim", "keepdim"), check=_reduction_ok, dynamic=True)


_BOOL_REDUCTIONS: dict[Any, str] = {
    aten.any.dim: "ReduceMax",
    aten.any.dims: "ReduceMax",
    aten.any.default: "ReduceMax",
    aten.all.dim: "ReduceMin",
    aten.all.dims: "ReduceMin",
    aten.all.default: "ReduceMin",
}


def _bool_reduction(onnx_op: str) -> BoundConverterFn:
    def convert(ctx: ConversionContext, args: BoundArgs) -> str:
        """any/all as max/min over 0/1 int32 values (ONNX reductions take no bools)."""
        axes, keepdim = _reduction_args(args)
        as_int = cast(ctx, operand(ctx, args.self, torch.bool), torch.bool, torch.int32)
        return cast(ctx, _reduce(ctx, onnx_op, as_int, axes, keepdim), torch.int32, torch.bool)

    return convert


register_table(_BOOL_REDUCTIONS, _bool_reduction, dtypes=TENSORRT_DTYPES, constants=("dim", "keepdim"),
               check=_reduction_ok, dynamic=True)


_ARG_REDUCTIONS: dict[Any, tuple[str, str | None]] = {
    aten.argmax.default: ("ArgMax", None),
    aten.argmin.default: ("ArgMin", None),
    aten.max.dim: ("ArgMax", "ReduceMax"),
    aten.min.dim: ("ArgMin", "ReduceMin"),
}


def _arg_reduction(entry: tuple[str, str | None]) -> BoundConverterFn:
    arg_op, value_op = entry

    def convert(ctx: ConversionContext, args: BoundArgs) -> str | list[str]:
        """Indices of the extreme value (first occurrence); max.dim/min.dim also return the values.

        A slice holding NaN gives NaN and the index of its first NaN, as PyTorch does: ONNX
        ArgMax/ReduceMax would skip it.
        """
        x = ctx.name(args.self)
        dtype = args.meta("self").dtype
        keepdim = bool(args.keepdim)
        if args.dim is None:  # argmax over the flattened tensor, reshaped to what PyTorch returns
            x, axis, keep = reshape(ctx, x, [-1]), 0, False
        else:  # the validator refused 0-d inputs
            axis, keep = args.dim % args.meta("self").dim(), keepdim
        indices = ctx.add(arg_op, [x], axis=axis, keepdims=int(keep), select_last_index=0)
        if dtype in FLOAT:
            is_nan, any_nan = _nan_mask(ctx, x, [axis], keep)
            first_nan = ctx.add("ArgMax", [is_nan], axis=axis, keepdims=int(keep), select_last_index=0)
            indices = ctx.add("Where", [any_nan, first_nan, indices])
        if args.dim is None:
            indices = reshape(ctx, indices, out_meta(args.node).shape)
        if value_op is None:
            return indices
        return [_extreme_values(ctx, value_op, x, dtype, [axis], keep), indices]

    return convert


register_table(_ARG_REDUCTIONS, _arg_reduction, dtypes=NUMERIC, constants=("dim", "keepdim"), check=_reduction_ok,
               dynamic=True)


@converter(aten.max.default, aten.min.default, dtypes=NUMERIC, check=_reduction_ok, dynamic=True)
def _extreme(ctx: ConversionContext, args: BoundArgs) -> str:
    onnx_op = "ReduceMax" if args.node.target == aten.max.default else "ReduceMin"
    axes = list(range(args.meta("self").dim()))
    return _extreme_values(ctx, onnx_op, ctx.name(args.self), args.meta("self").dtype, axes, False)


def _var_ok(args: BoundArgs) -> bool | Refusal:
    verdict = _reduction_ok(args)
    if verdict and not isinstance(_correction(args), (int, float)):
        return refuse(f"correction {args.correction!r} is not a number")
    return verdict


def _correction(args: BoundArgs) -> Any:
    return 1 if args.correction is None else args.correction


@converter(aten.var.correction, dtypes=frozenset(NUMERIC - {torch.int32, torch.int64}),
           constants=("dim", "keepdim"), check=_var_ok)
def _var(ctx: ConversionContext, args: BoundArgs) -> str:
    """sum((x - mean)^2) / (N - correction), N = number of reduced elements."""
    shape = args.meta("self").shape
    axes = norm_dims(args.dim, len(shape))
    count = 1
    for axis in axes:
        count *= shape[axis]
    dtype = out_dtype(args.node)
    x = ctx.name(args.self)
    centered = ctx.add("Sub", [x, _reduce(ctx, "ReduceMean", x, axes, True)])
    squares = _reduce(ctx, "ReduceSum", ctx.add("Mul", [centered, centered]), axes, bool(args.keepdim))
    divisor = max(count - _correction(args), 0)
    return ctx.add("Div", [squares, ctx.constant(divisor, dtype)])


def _cumsum_ok(args: BoundArgs) -> bool | Refusal:
    verdict = _reduction_ok(args)
    if verdict is not True or out_dtype(args.node) in FLOAT:
        return verdict
    axis = args.dim % args.meta("self").dim()
    refusal = dynamic_refusal(args, "self", [axis], "an integer cumsum takes one step per power of two of it")
    return True if refusal is None else refusal  # a Refusal is falsy: no ``or``


@converter(aten.cumsum.default, outputs=NUMERIC, constants=("dim",), check=_cumsum_ok, dynamic=True)
def _cumsum(ctx: ConversionContext, args: BoundArgs) -> str:
    """CumSum in floats; integers (PyTorch sums int32 and bool in int64) by :func:`_integer_cumsum`, as
    TensorRT's CumSum takes floats only, and a float sum would round past 2**24."""
    dtype = out_dtype(args.node)
    x = operand(ctx, args.self, dtype)
    axis = args.dim % args.meta("self").dim()
    if dtype in FLOAT:
        return ctx.add("CumSum", [x, ints(ctx, axis)])
    return _integer_cumsum(ctx, x, args.meta("self").shape, axis)


def _integer_cumsum(ctx: ConversionContext, x: str, shape: Any, axis: int) -> str:
    """An exact integer prefix sum (Hillis-Steele): for shift = 1, 2, 4, ... below the axis size, add ``x``
    shifted by ``shift`` along the axis, zeros shifted in (Slice + Pad + Add): log2(n) steps."""
    size, rank = shape[axis], len(shape)
    shift = 1
    while shift < size:
        kept = ctx.add("Slice", [x, ints(ctx, [0]), ints(ctx, [size - shift]), ints(ctx, [axis])])
        pads = [0] * (2 * rank)
        pads[axis] = shift
        x = ctx.add("Add", [x, ctx.add("Pad", [kept, ints(ctx, pads)])])
        shift *= 2
    return x
