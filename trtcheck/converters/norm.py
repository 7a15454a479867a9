"""Normalizations: layer norm, inference-mode batch norm, group norm.

ATen's versions return (out, mean, rstd); TensorRT's layers only produce ``out``, so the validators
accept a node only when nothing but ``getitem(node, 0)`` uses it (true for eval-mode graphs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from trtcheck.converters._common import FLOAT, aten, converter, only_first_output_used, out_dtype
from trtcheck.converters.shape import reshape

if TYPE_CHECKING:  # pragma: no cover - the context imports the registry, not vice versa
    from trtcheck.conversion import ConversionContext


def _affine(ctx: ConversionContext, value: Any, fill: float, shape: list[int], dtype: torch.dtype) -> str:
    """The weight/bias node, or a constant of ``fill`` when the module has no affine parameters."""
    if value is None:
        return ctx.constant(torch.full(shape, fill), dtype)
    return ctx.name(value)


@converter(aten.native_layer_norm.default, dtypes=FLOAT, check=only_first_output_used)
def _layer_norm(ctx: ConversionContext, node: torch.fx.Node) -> list[str]:
    x, normalized_shape, weight, bias, eps = node.args
    shape, dtype = list(normalized_shape), out_dtype(node)
    scale = _affine(ctx, weight, 1.0, shape, dtype)
    y = ctx.add("LayerNormalization", [ctx.name(x), scale, _affine(ctx, bias, 0.0, shape, dtype)],
                axis=-len(shape), epsilon=float(eps))
    return [y, "", ""]


def _inference_batch_norm(node: torch.fx.Node) -> bool:
    """_native_batch_norm_legit_no_training always; native_batch_norm only with training=False."""
    training = node.target == aten.native_batch_norm.default and node.args[5]
    return not training and node.args[3] is not None and only_first_output_used(node)


@converter(aten._native_batch_norm_legit_no_training.default, aten.native_batch_norm.default,
           dtypes=FLOAT, check=_inference_batch_norm)
def _batch_norm(ctx: ConversionContext, node: torch.fx.Node) -> list[str]:
    x, weight, bias, mean, var = node.args[:5]
    eps = node.args[-1]
    channels = [x.meta["val"].shape[1]]
    dtype = mean.meta["val"].dtype
    inputs = [ctx.name(x), _affine(ctx, weight, 1.0, channels, dtype), _affine(ctx, bias, 0.0, channels, dtype),
              ctx.name(mean), ctx.name(var)]
    return [ctx.add("BatchNormalization", inputs, epsilon=float(eps)), "", ""]


@converter(aten.native_group_norm.default, dtypes=FLOAT, check=only_first_output_used)
def _group_norm(ctx: ConversionContext, node: torch.fx.Node) -> list[str]:
    """Opset 17 has no GroupNormalization: InstanceNormalization over (N, groups, -1), then the
    per-channel affine transform."""
    x, weight, bias, n, channels, _, groups, eps = node.args
    shape = list(x.meta["val"].shape)
    dtype = out_dtype(node)
    grouped = reshape(ctx, ctx.name(x), [n, groups, -1])
    ones, zeros = ctx.constant(torch.ones(groups), dtype), ctx.constant(torch.zeros(groups), dtype)
    normalized = reshape(ctx, ctx.add("InstanceNormalization", [grouped, ones, zeros], epsilon=float(eps)), shape)
    per_channel = [channels] + [1] * (len(shape) - 2)
    if weight is not None:
        normalized = ctx.add("Mul", [normalized, reshape(ctx, ctx.name(weight), per_channel)])
    if bias is not None:
        normalized = ctx.add("Add", [normalized, reshape(ctx, ctx.name(bias), per_channel)])
    return [normalized, "", ""]


