"""Normalizations: layer norm, inference-mode batch norm, batch norm on batch statistics, group norm.

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


def _batch_statistics_ok(args: BoundArgs) -> bool | Refusal:
    if args.meta("input").dim() < 2:
        return refuse(f"input has rank {args.meta('input').dim()}; batch norm normalizes per channel (dim 1)")
    return only_first_output_used(args)


@converter(aten._native_batch_norm_legit.no_stats, dtypes=FLOAT, constants=("eps",), check=_batch_statistics_ok,
           dynamic=True)
def _batch_norm_batch_statistics(ctx: ConversionContext, args: BoundArgs) -> list[str]:
    """Batch norm on the batch's own statistics (``F.batch_norm(training=True)`` without running ones: nfnet's weight
    standardization on constant weights, instance-norm-like uses): the biased mean and variance over every dim but
    the channels, ``(x - mean) / sqrt(var + eps)``, then the per-channel affine transform. No running statistic is
    updated (there is none), so it computes what eager computes."""
    x, rank = ctx.name(args.input), args.meta("input").dim()
    dtype = out_dtype(args.node)
    axes = ctx.constant([axis for axis in range(rank) if axis != 1], torch.int64)
    centered = ctx.add("Sub", [x, ctx.add("ReduceMean", [x, axes], keepdims=1)])
    variance = ctx.add("ReduceMean", [ctx.add("Mul", [centered, centered]), axes], keepdims=1)
    spread = ctx.add("Sqrt", [ctx.add("Add", [variance, ctx.constant(float(args.eps), dtype)])])
    y = ctx.add("Div", [centered, spread])
    per_channel = [-1] + [1] * (rank - 2)
    if args.weight is not None:
        y = ctx.add("Mul", [y, reshape(ctx, ctx.name(args.weight), per_channel)])
    if args.bias is not None:
        y = ctx.add("Add", [y, reshape(ctx, ctx.name(args.bias), per_channel)])
    return [y, "", ""]


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


