"""Pooling (2D/3D, as TensorRT's pooling layers): max, average, adaptive average.

PyTorch's ``ceil_mode`` differs from ONNX's (PyTorch drops a last window that would start in the
right padding), so max pooling instead pads the end explicitly to the output size PyTorch computed;
max pooling ignores padding, which makes this exact.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from trtcheck.converters._common import FLOAT, arg, aten, converter, only_first_output_used, out_meta

if TYPE_CHECKING:  # pragma: no cover - the context imports the registry, not vice versa
    from trtcheck.conversion import ConversionContext


def _expand(value: Any, count: int, default: int) -> list[int]:
    if value is None or (isinstance(value, (list, tuple)) and not value):
        return [default] * count
    values = [value] if isinstance(value, int) else list(value)
    return values * count if len(values) == 1 else values


def _pool_args(node: torch.fx.Node) -> tuple[list[int], list[int], list[int], list[int], bool]:
    """(kernel, stride, padding, dilation, ceil_mode) of max_poolNd(_with_indices) / avg_poolNd."""
    spatial = node.args[0].meta["val"].dim() - 2
    kernel = _expand(arg(node, 1, "kernel_size"), spatial, 1)
    stride = _expand(arg(node, 2, "stride"), spatial, 1) if arg(node, 2, "stride") else kernel
    padding = _expand(arg(node, 3, "padding", 0), spatial, 0)
    if "max_pool" in node.target._opname:
        dilation = _expand(arg(node, 4, "dilation", 1), spatial, 1)
        return kernel, stride, padding, dilation, bool(arg(node, 5, "ceil_mode", False))
    return kernel, stride, padding, [1] * spatial, bool(arg(node, 4, "ceil_mode", False))


def _pool_ok(node: torch.fx.Node) -> bool:
    spatial = node.args[0].meta["val"].dim() - 2
    kernel, stride, padding, dilation, _ = _pool_args(node)
    return spatial in (2, 3) and all(d == 1 for d in dilation) and all(p * 2 <= k for p, k in zip(padding, kernel))


def _max_pool_ok(node: torch.fx.Node) -> bool:
    """The indices output (TensorRT has none) must be unused."""
    if node.target == aten.max_pool2d.default or node.target == aten.max_pool3d.default:
        return _pool_ok(node)
    return _pool_ok(node) and only_first_output_used(node)


@converter(aten.max_pool2d_with_indices.default, aten.max_pool3d_with_indices.default,
           aten.max_pool2d.default, aten.max_pool3d.default, dtypes=FLOAT, check=_max_pool_ok)
def _max_pool(ctx: ConversionContext, node: torch.fx.Node) -> str | list[str]:
    kernel, stride, padding, _, _ = _pool_args(node)
    sizes = node.args[0].meta["val"].shape[2:]
    outputs = out_meta(node).shape[2:]
    # End padding that makes ONNX's floor-mode output size equal PyTorch's (ceil_mode or not).
    ends = [max(p, (o - 1) * s + k - n - p) for n, o, k, s, p in zip(sizes, outputs, kernel, stride, padding)]
    y = ctx.add("MaxPool", [ctx.name(node.args[0])], kernel_shape=kernel, strides=stride, pads=padding + ends)
    return y if "with_indices" not in node.target._opname else [y, ""]


def _floor_output(n: int, k: int, s: int, p: int) -> int:
    return (n + 2 * p - k) // s + 1


def _avg_pool_ok(node: torch.fx.Node) -> bool:
    """No divisor_override; ceil_mode only where it does not change the output size."""
    if not _pool_ok(node) or arg(node, 6, "divisor_override") is not None:
        return False
    kernel, stride, padding, _, _ = _pool_args(node)
    sizes = node.args[0].meta["val"].shape[2:]
    floor_sizes = [_floor_output(n, k, s, p) for n, k, s, p in zip(sizes, kernel, stride, padding)]
    return floor_sizes == list(out_meta(node).shape[2:])


@converter(aten.avg_pool2d.default, aten.avg_pool3d.default, dtypes=FLOAT, check=_avg_pool_ok)
def _avg_pool(ctx: ConversionContext, node: torch.fx.Node) -> str:
    kernel, stride, padding, _, _ = _pool_args(node)
    include_pad = arg(node, 5, "count_include_pad", True)
    return ctx.add("AveragePool", [ctx.name(node.args[0])], kernel_shape=kernel, strides=stride,
                   pads=padding + padding, count_include_pad=int(bool(include_pad)))


def _adaptive_ok(node: torch.fx.Node) -> bool:
    """Only when every input size is a multiple of the output size: then it is a plain AveragePool."""
    sizes = node.args[0].meta["val"].shape[2:]
    outputs = out_meta(node).shape[2:]
    return len(sizes) in (2, 3) and all(n % o == 0 for n, o in zip(sizes, outputs))


@converter(aten._adaptive_avg_pool2d.default, aten.adaptive_avg_pool2d.default,
           aten._adaptive_avg_pool3d.default, dtypes=FLOAT, check=_adaptive_ok)
def _adaptive_avg_pool(ctx: ConversionContext, node: torch.fx.Node) -> str:
    sizes = node.args[0].meta["val"].shape[2:]
    outputs = out_meta(node).shape[2:]
    x = ctx.name(node.args[0])
    if list(sizes) == list(outputs):
        return x
    if all(o == 1 for o in outputs):
        return ctx.add("GlobalAveragePool", [x])
    kernel = [n // o for n, o in zip(sizes, outputs)]
    return ctx.add("AveragePool", [x], kernel_shape=kernel, strides=kernel)
