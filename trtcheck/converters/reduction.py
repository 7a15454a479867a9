"""Reductions: sum/mean/prod/amax/amin/logsumexp, max/min with indices, argmax/argmin, any/all, var,
cumsum.

Opset 17 is inconsistent about axes: ReduceSum takes them as an input, the other Reduce ops as an
attribute; :func:`_reduce` hides that. Inputs are cast to the output dtype first, as PyTorch
accumulates e.g. int32 and bool sums in int64.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from trtcheck.converters._common import (
    FLOAT,
    NUMERIC,
    TENSORRT_DTYPES,
    arg,
    aten,
    cast,
    converter,
    ints,
    norm_dims,
    operand,
    out_dtype,
    out_meta,
)
from trtcheck.converters.registry import ConverterFn
from trtcheck.converters.shape import reshape

if TYPE_CHECKING:  # pragma: no cover - the context imports the registry, not vice versa
    from trtcheck.conversion import ConversionContext


def _reduce(ctx: ConversionContext, onnx_op: str, x: str, axes: list[int], keepdim: bool) -> str:
    if onnx_op == "ReduceSum":
        return ctx.add(onnx_op, [x, ints(ctx, axes)], keepdims=int(keepdim))
    return ctx.add(onnx_op, [x], axes=axes, keepdims=int(keepdim))


def _reduction_args(node: torch.fx.Node) -> tuple[list[int], bool]:
    """(axes, keepdim) for both the ``.default`` (all axes) and ``.dim*`` overloads."""
    rank = node.args[0].meta["val"].dim()
    if "dim" not in {a.name for a in node.target._schema.arguments}:  # e.g. sum.default: every axis
        return list(range(rank)), False
    return norm_dims(arg(node, 1, "dim"), rank), bool(arg(node, 2, "keepdim", False))


def _reduction_ok(node: torch.fx.Node) -> bool:
    """Non-scalar input; an explicit ``dtype`` argument only if it is the output dtype anyway."""
    dtype = node.kwargs.get("dtype")
    return node.args[0].meta["val"].dim() > 0 and (dtype is None or dtype == out_dtype(node))


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


def _reduction(onnx_op: str) -> ConverterFn:
    def convert(ctx: ConversionContext, node: torch.fx.Node) -> str:
        axes, keepdim = _reduction_args(node)
        x = operand(ctx, node.args[0], out_dtype(node))
        return _reduce(ctx, onnx_op, x, axes, keepdim)

    return convert


for _target, _op in _REDUCTIONS.items():
    converter(_target, outputs=NUMERIC, check=_reduction_ok)(_reduction(_op))


_BOOL_REDUCTIONS: dict[Any, str] = {
    aten.any.dim: "ReduceMax",
    aten.any.dims: "ReduceMax",
    aten.any.default: "ReduceMax",
    aten.all.dim: "ReduceMin",
    aten.all.dims: "ReduceMin",
    aten.all.default: "ReduceMin",
}


def _bool_reduction(onnx_op: str) -> ConverterFn:
    def convert(ctx: ConversionContext, node: torch.fx.Node) -> str:
        """any/all as max/min over 0/1 int32 values (ONNX reductions take no bools)."""
        axes, keepdim = _reduction_args(node)
        as_int = cast(ctx, operand(ctx, node.args[0], torch.bool), torch.bool, torch.int32)
        return cast(ctx, _reduce(ctx, onnx_op, as_int, axes, keepdim), torch.int32, torch.bool)

    return convert


for _target, _op in _BOOL_REDUCTIONS.items():
    converter(_target, dtypes=TENSORRT_DTYPES, check=_reduction_ok)(_bool_reduction(_op))


_ARG_REDUCTIONS: dict[Any, tuple[str, str | None]] = {
    aten.argmax.default: ("ArgMax", None),
    aten.argmin.default: ("ArgMin", None),
    aten.max.dim: ("ArgMax", "ReduceMax"),
    aten.min.dim: ("ArgMin", "ReduceMin"),
}


def _arg_reduction(arg_op: str, value_op: str | None) -> ConverterFn:
    def convert(ctx: ConversionContext, node: torch.fx.Node) -> str | list[str]:
        """Indices of the extreme value (first occurrence); max.dim/min.dim also return the values."""
        x = ctx.name(node.args[0])
        dim, keepdim = arg(node, 1, "dim"), bool(arg(node, 2, "keepdim", False))
        if dim is None:  # argmax over the flattened tensor, reshaped to what PyTorch returns
            flat = reshape(ctx, x, [-1])
            return reshape(ctx, ctx.add(arg_op, [flat], axis=0, keepdims=0), out_meta(node).shape)
        axis = dim % node.args[0].meta["val"].dim()
        indices = ctx.add(arg_op, [x], axis=axis, keepdims=int(keepdim), select_last_index=0)
        if value_op is None:
            return indices
        return [_reduce(ctx, value_op, x, [axis], keepdim), indices]

    return convert


for _target, (_op, _value_op) in _ARG_REDUCTIONS.items():
    converter(_target, dtypes=NUMERIC, check=_reduction_ok)(_arg_reduction(_op, _value_op))


@converter(aten.max.default, aten.min.default, dtypes=NUMERIC, check=_reduction_ok)
def _extreme(ctx: ConversionContext, node: torch.fx.Node) -> str:
    onnx_op = "ReduceMax" if node.target == aten.max.default else "ReduceMin"
    return _reduce(ctx, onnx_op, ctx.name(node.args[0]), list(range(node.args[0].meta["val"].dim())), False)


def _correction(node: torch.fx.Node) -> Any:
    correction = node.kwargs.get("correction")
    return 1 if correction is None else correction


def _var_ok(node: torch.fx.Node) -> bool:
    return _reduction_ok(node) and isinstance(_correction(node), (int, float))


@converter(aten.var.correction, dtypes=frozenset(NUMERIC - {torch.int32, torch.int64}), check=_var_ok)
def _var(ctx: ConversionContext, node: torch.fx.Node) -> str:
    """sum((x - mean)^2) / (N - correction), N = number of reduced elements."""
    shape = node.args[0].meta["val"].shape
    axes = norm_dims(arg(node, 1, "dim"), len(shape))
    keepdim = bool(node.kwargs.get("keepdim", False))
    count = 1
    for axis in axes:
        count *= shape[axis]
    dtype = out_dtype(node)
    x = ctx.name(node.args[0])
    centered = ctx.add("Sub", [x, _reduce(ctx, "ReduceMean", x, axes, True)])
    squares = _reduce(ctx, "ReduceSum", ctx.add("Mul", [centered, centered]), axes, keepdim)
    divisor = max(count - _correction(node), 0)
    return ctx.add("Div", [squares, ctx.constant(divisor, dtype)])


@converter(aten.cumsum.default, dtypes=FLOAT, check=_reduction_ok)  # TensorRT's CumSum: floats only
def _cumsum(ctx: ConversionContext, node: torch.fx.Node) -> str:
    x = operand(ctx, node.args[0], out_dtype(node))
    axis = node.args[1] % node.args[0].meta["val"].dim()
    return ctx.add("CumSum", [x, ints(ctx, axis)])


