"""Normalizations: layer norm, inference-mode batch norm, group norm.

ATen's versions return (out, mean, rstd); TensorRT's layers only produce ``out``, so the validators
accept a node only when nothing but ``getitem(node, 0)`` uses it (true for eval-mode graphs).
Layer and batch norm are ``dynamic``: their statistics' shapes come from parameters, never from the input's
sizes; group norm reshapes by the input's shape and stays static-only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from trtcheck.conversion.arguments import BoundArgs
from trtcheck.conversion.ops._common import (
    FLOAT,
    aten,
    converter,
    dynamic_refusal,
    only_first_output_used,
    onnx_accepts,
    out_dtype,
    refuse,
)
from trtcheck.conversion.ops.shape import reshape
from trtcheck.conversion.registry import Refusal

if TYPE_CHECKING:  # pragma: no cover - the context imports the registry, not vice versa
    from trtcheck.conversion.context import ConversionContext


def _affine(ctx: ConversionContext, value: Any, fill: float, shape: list[int], dtype: torch.dtype) -> str:
    """The weight/bias node, or a constant of ``fill`` when the module has no affine parameters."""
    if value is None:
        return ctx.constant(torch.full(shape, fill), dtype)
    return ctx.name(value)


@converter(aten.native_layer_norm.default, dtypes=FLOAT, constants=("normalized_shape", "eps"),
           check=only_first_output_used, dynamic=True)
def _layer_norm(ctx: ConversionContext, args: BoundArgs) -> list[str]:
    shape, dtype = list(args.normalized_shape), out_dtype(args.node)
    scale = _affine(ctx, args.weight, 1.0, shape, dtype)
    y = ctx.add("LayerNormalization", [ctx.name(args.input), scale, _affine(ctx, args.bias, 0.0, shape, dtype)],
                axis=-len(shape), epsilon=float(args.eps))
    return [y, "", ""]


def _inference_batch_norm(args: BoundArgs) -> bool | Refusal:
    """_native_batch_norm_legit_no_training always; native_batch_norm only with training=False."""
    if "training" in args and args.training:
        return refuse("training=True updates the running statistics")
    if args.running_mean is None:
        return refuse("running_mean is None: batch statistics, not inference")
    dynamic = dynamic_refusal(args, "running_mean", [0], "it sizes the default weight and bias")
    return dynamic if dynamic is not None else only_first_output_used(args)


@converter(aten._native_batch_norm_legit_no_training.default, aten.native_batch_norm.default,
           dtypes=FLOAT, constants=("eps",), check=_inference_batch_norm, dynamic=True)
def _batch_norm(ctx: ConversionContext, args: BoundArgs) -> list[str]:
    channels = list(args.meta("running_mean").shape)  # static, unlike the input's sizes may be
    dtype = args.meta("running_mean").dtype
    inputs = [ctx.name(args.input), _affine(ctx, args.weight, 1.0, channels, dtype),
              _affine(ctx, args.bias, 0.0, channels, dtype), ctx.name(args.running_mean), ctx.name(args.running_var)]
    return [ctx.add("BatchNormalization", inputs, epsilon=float(args.eps)), "", ""]


@converter(aten.native_group_norm.default, dtypes=FLOAT & onnx_accepts("InstanceNormalization"), constants=("N", "C", "group", "eps"),
           check=only_first_output_used)
def _group_norm(ctx: ConversionContext, args: BoundArgs) -> list[str]:
    """Opset 17 has no GroupNormalization: InstanceNormalization over (N, groups, -1), then the
    per-channel affine transform."""
    x, weight, bias, n, channels = args.input, args.weight, args.bias, args.N, args.C
    groups, eps = args.group, args.eps
    shape = list(args.meta("input").shape)
    dtype = out_dtype(args.node)
    grouped = reshape(ctx, ctx.name(x), [n, groups, -1])
    ones, zeros = ctx.constant(torch.ones(groups), dtype), ctx.constant(torch.zeros(groups), dtype)
    normalized = reshape(ctx, ctx.add("InstanceNormalization", [grouped, ones, zeros], epsilon=float(eps)), shape)
    per_channel = [channels] + [1] * (len(shape) - 2)
    if weight is not None:
        normalized = ctx.add("Mul", [normalized, reshape(ctx, ctx.name(weight), per_channel)])
    if bias is not None:
        normalized = ctx.add("Add", [normalized, reshape(ctx, ctx.name(bias), per_channel)])
    return [normalized, "", ""]


