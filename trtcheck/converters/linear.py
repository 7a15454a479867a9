"""Convolution and matrix products (float only: TensorRT has no integer GEMM/convolution layers)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from trtcheck.converters._common import (
    FLOAT,
    all_ints,
    arg,
    aten,
    cast,
    converter,
    out_dtype,
)

if TYPE_CHECKING:  # pragma: no cover - the context imports the registry, not vice versa
    from trtcheck.conversion import ConversionContext


def _conv_ok(node: torch.fx.Node) -> bool:
    spatial = node.args[0].meta["val"].dim() - 2
    return 1 <= spatial <= 3 and all_ints(node.args[3:6], node.args[7:9])


@converter(aten.convolution.default, dtypes=FLOAT, check=_conv_ok)
def _convolution(ctx: ConversionContext, node: torch.fx.Node) -> str:
    """Conv / ConvTranspose; PyTorch and ONNX share weight layouts for both.

    ONNX's Conv and ConvTranspose (opset 11, current at 17) take float16/float/double only, so a bfloat16
    convolution computes in float32 between two Casts (as PyTorch's bfloat16 convolution accumulates in
    float32 and rounds once): a bfloat16 Conv would make the checker reject the whole segment.
    """
    x, weight, bias, stride, padding, dilation, transposed, output_padding, groups = node.args
    dtype = out_dtype(node)
    compute = torch.float32 if dtype == torch.bfloat16 else dtype
    operands = [x, weight] + ([bias] if bias is not None else [])  # one dtype: PyTorch's convolution says so
    inputs = [cast(ctx, ctx.name(value), dtype, compute) for value in operands]
    attrs: dict[str, Any] = {
        "strides": list(stride),
        "pads": list(padding) * 2,
        "dilations": list(dilation),
        "group": int(groups),
        "kernel_shape": list(weight.meta["val"].shape[2:]),
    }
    if transposed:
        result = ctx.add("ConvTranspose", inputs, output_padding=list(output_padding), **attrs)
    else:
        result = ctx.add("Conv", inputs, **attrs)
    return cast(ctx, result, compute, dtype)


@converter(aten.mm.default, aten.bmm.default, aten.matmul.default, dtypes=FLOAT)
def _matmul(ctx: ConversionContext, node: torch.fx.Node) -> str:
    return ctx.add("MatMul", [ctx.name(node.args[0]), ctx.name(node.args[1])])


def _scalar_factors(node: torch.fx.Node) -> bool:
    return all(isinstance(v, (int, float)) for v in (node.kwargs.get("beta", 1), node.kwargs.get("alpha", 1)))


def _addmm_ok(node: torch.fx.Node) -> bool:
    """Gemm's C must broadcast to (M, N) one-directionally, and alpha/beta must be numbers."""
    bias_shape = list(node.args[0].meta["val"].shape)
    return _scalar_factors(node) and len(bias_shape) <= 2


@converter(aten.addmm.default, dtypes=FLOAT, check=_addmm_ok)
def _addmm(ctx: ConversionContext, node: torch.fx.Node) -> str:
    bias, m1, m2 = (ctx.name(a) for a in node.args[:3])
    return ctx.add("Gemm", [m1, m2, bias], alpha=float(node.kwargs.get("alpha", 1)),
                   beta=float(node.kwargs.get("beta", 1)))


@converter(aten.baddbmm.default, dtypes=FLOAT, check=_scalar_factors)
def _baddbmm(ctx: ConversionContext, node: torch.fx.Node) -> str:
    """beta * input + alpha * (batch1 @ batch2), without the scalings that are 1."""
    dtype = out_dtype(node)
    terms = []
    for value, factor in ((ctx.add("MatMul", [ctx.name(node.args[1]), ctx.name(node.args[2])]), "alpha"),
                          (ctx.name(node.args[0]), "beta")):
        scale = node.kwargs.get(factor, 1)
        terms.append(value if scale == 1 else ctx.add("Mul", [value, ctx.constant(scale, dtype)]))
    return ctx.add("Add", terms)


@converter(aten.linear.default, dtypes=FLOAT, check=lambda n: n.args[1].meta["val"].dim() == 2)
def _linear(ctx: ConversionContext, node: torch.fx.Node) -> str:
    x, weight = node.args[:2]
    bias = arg(node, 2, "bias")
    product = ctx.add("MatMul", [ctx.name(x), ctx.add("Transpose", [ctx.name(weight)], perm=[1, 0])])
    return product if bias is None else ctx.add("Add", [product, ctx.name(bias)])
