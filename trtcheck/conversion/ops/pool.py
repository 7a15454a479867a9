"""Pooling (2D/3D, as TensorRT's pooling layers): max, average, adaptive average.

PyTorch's ``ceil_mode`` differs from ONNX's (PyTorch drops a last window that would start in the
right padding), so max pooling instead pads the end explicitly to the output size PyTorch computed;
max pooling ignores padding, which makes this exact.

All are ``dynamic``: batch and channel sizes never matter, and spatial sizes may be symbolic except where
the converter needs them: ``ceil_mode=True`` (the end padding and average pooling's divisors depend on the size) and adaptive
pooling to an output other than 1x1 (its kernel is input size / output size; sizes no multiple of the output's
pool with constant averaging matrices). Those refuse, naming the dim.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from trtcheck.conversion.arguments import BoundArgs
from trtcheck.conversion.ops._common import (
    FLOAT,
    all_ints,
    aten,
    cast,
    converter,
    dynamic_refusal,
    ints,
    only_first_output_used,
    onnx_accepts,
    out_meta,
    refuse,
)
from trtcheck.conversion.registry import Refusal

if TYPE_CHECKING:  # pragma: no cover - the context imports the registry, not vice versa
    from trtcheck.conversion.context import ConversionContext


def _expand(value: Any, count: int, default: int) -> list[int]:
    if value is None or (isinstance(value, (list, tuple)) and not value):
        return [default] * count
    values = [value] if isinstance(value, int) else list(value)
    return values * count if len(values) == 1 else values


def _pool_args(args: BoundArgs) -> tuple[list[int], list[int], list[int], list[int], bool]:
    """(kernel, stride, padding, dilation, ceil_mode) of max_poolNd(_with_indices) / avg_poolNd."""
    spatial = args.meta("self").dim() - 2
    kernel = _expand(args.kernel_size, spatial, 1)
    stride = _expand(args.stride, spatial, 1) if args.stride else kernel
    padding = _expand(args.padding, spatial, 0)
    dilation = _expand(args.dilation, spatial, 1) if "dilation" in args else [1] * spatial
    return kernel, stride, padding, dilation, bool(args.ceil_mode)


def _pool_ok(args: BoundArgs) -> bool | Refusal:
    spatial = args.meta("self").dim() - 2
    pooled = 3 if "3d" in args.node.target._opname else 2 if "2d" in args.node.target._opname else spatial
    if spatial != pooled:  # an unbatched input: the op pools its last ``pooled`` dims, not ``spatial``
        return refuse(f"input has rank {spatial + 2} for a {pooled}-D pool: an unbatched input (pool a batch of one)")
    kernel, stride, padding, dilation, _ = _pool_args(args)
    if spatial not in (2, 3):
        return refuse(f"input has {spatial} spatial dimensions; TensorRT pools 2D and 3D only")
    if any(d != 1 for d in dilation):
        return refuse(f"dilation {tuple(dilation)} is not 1: TensorRT's pooling has no dilation")
    if any(p * 2 > k for p, k in zip(padding, kernel)):
        return refuse(f"padding {tuple(padding)} is more than half the kernel {tuple(kernel)}")
    return True


def _ceil_mode_sizes(args: BoundArgs) -> Refusal | None:
    """With ceil_mode, the output size depends on the input's: its spatial sizes must be static."""
    if not args.ceil_mode:
        return None
    rank = args.meta("self").dim()
    return dynamic_refusal(args, "self", range(2, rank), "ceil_mode=True needs the input size to pad to PyTorch's output size")


def _max_pool_ok(args: BoundArgs) -> bool | Refusal:
    """The indices output (TensorRT has none) must be unused."""
    verdict = _pool_ok(args)
    dynamic = _ceil_mode_sizes(args) if verdict else None
    if dynamic is not None:
        return dynamic
    if not verdict or "with_indices" not in args.node.target._opname:
        return verdict
    return only_first_output_used(args)


_POOL_CONSTANTS = ("kernel_size", "stride", "padding", "ceil_mode")


@converter(aten.max_pool2d_with_indices.default, aten.max_pool3d_with_indices.default,
           aten.max_pool2d.default, aten.max_pool3d.default, dtypes=FLOAT,
           constants=(*_POOL_CONSTANTS, "dilation"), check=_max_pool_ok, dynamic=True)
def _max_pool(ctx: ConversionContext, args: BoundArgs) -> str | list[str]:
    """MaxPool; bfloat16 pools in float32 between two Casts (opset 19's MaxPool takes no bfloat16), which
    is exact: the maximum is one of the inputs, and bfloat16 -> float32 -> bfloat16 round-trips."""
    kernel, stride, padding, _, ceil_mode = _pool_args(args)
    dtype = out_meta(args.node).dtype
    compute = torch.float32 if dtype == torch.bfloat16 else dtype
    ends = _ceil_mode_ends(args, kernel, stride, padding) if ceil_mode else padding
    x = cast(ctx, ctx.name(args.self), dtype, compute)
    y = ctx.add("MaxPool", [x], kernel_shape=kernel, strides=stride, pads=padding + ends)
    y = cast(ctx, y, compute, dtype)
    return y if "with_indices" not in args.node.target._opname else [y, ""]


def _ceil_mode_ends(args: BoundArgs, kernel: list[int], stride: list[int], padding: list[int]) -> list[int]:
    """End padding that makes ONNX's floor-mode output size equal PyTorch's ceil-mode one (static sizes:
    the validator made sure). Without ceil_mode it is the padding itself: ``(o - 1) * s + k - n - p <= p``."""
    sizes, outputs = args.meta("self").shape[2:], out_meta(args.node).shape[2:]
    return [max(p, (o - 1) * s + k - n - p) for n, o, k, s, p in zip(sizes, outputs, kernel, stride, padding)]


def _floor_output(n: int, k: int, s: int, p: int) -> int:
    return (n + 2 * p - k) // s + 1


def _avg_pool_ok(args: BoundArgs) -> bool | Refusal:
    """ceil_mode on static spatial sizes only (its divisors depend on them)."""
    verdict = _pool_ok(args)
    if not verdict:
        return verdict
    refusal = _ceil_mode_sizes(args)
    return True if refusal is None else refusal


def _pool_divisors(args: BoundArgs, kernel: list[int], stride: list[int], padding: list[int]) -> torch.Tensor:
    """``kernel area / PyTorch's divisor`` at each output position of an average pool (float64).

    A ``divisor_override`` is every position's divisor (a 0-d ratio: the sizes may be dynamic). Otherwise PyTorch
    clips a window to the padded input (``min(start + k, n + p)``) and, without ``count_include_pad``, to the input
    itself; the window ceil_mode adds past the padding counts neither. ONNX's AveragePool over the input padded
    with zeros to PyTorch's output size divides every window by the kernel area, so this ratio, per output
    position, makes it PyTorch's average."""
    sizes, outputs = args.meta("self").shape[2:], out_meta(args.node).shape[2:]
    if args.divisor_override is not None:
        return torch.tensor(math.prod(kernel) / args.divisor_override, dtype=torch.float64)
    per_dim = []
    for n, o, k, s, p in zip(sizes, outputs, kernel, stride, padding):
        starts = torch.arange(o, dtype=torch.float64) * s - p
        ends = torch.clamp(starts + k, max=n + p)
        if not args.count_include_pad:
            starts, ends = torch.clamp(starts, min=0), torch.clamp(ends, max=n)
        per_dim.append(ends - starts)
    divisor = per_dim[0]
    for counts in per_dim[1:]:
        divisor = divisor[..., None] * counts
    return math.prod(kernel) / divisor


# ONNX AveragePool (opset 19) takes no bfloat16, and an average in float32 would round differently
# from PyTorch's bfloat16 pooling, so bfloat16 average pooling stays in PyTorch.
_AVG_POOL_DTYPES = FLOAT & onnx_accepts("AveragePool") & onnx_accepts("GlobalAveragePool")


@converter(aten.avg_pool2d.default, aten.avg_pool3d.default, dtypes=_AVG_POOL_DTYPES,
           constants=(*_POOL_CONSTANTS, "count_include_pad", "divisor_override"), check=_avg_pool_ok, dynamic=True)
def _avg_pool(ctx: ConversionContext, args: BoundArgs) -> str:
    """AveragePool; with ``ceil_mode=True`` (timm's resnet10t) or a ``divisor_override``, an explicit zero Pad to
    PyTorch's output size, an AveragePool that divides by the kernel area, and a Mul by each position's
    ``area / divisor`` (``_pool_divisors``): ONNX's own ceil_mode keeps windows PyTorch drops and divides them
    differently, and ONNX has no divisor_override."""
    kernel, stride, padding, _, ceil_mode = _pool_args(args)
    x = ctx.name(args.self)
    if not ceil_mode and args.divisor_override is None:
        return ctx.add("AveragePool", [x], kernel_shape=kernel, strides=stride,
                       pads=padding + padding, count_include_pad=int(bool(args.count_include_pad)))
    dtype = out_meta(args.node).dtype
    ends = _ceil_mode_ends(args, kernel, stride, padding) if ceil_mode else padding
    rank = args.meta("self").dim()
    padded = ctx.add("Pad", [x, ints(ctx, [0, 0, *padding, 0, 0, *ends])], mode="constant")
    summed = ctx.add("AveragePool", [padded], kernel_shape=kernel, strides=stride, count_include_pad=1)
    ratio = _pool_divisors(args, kernel, stride, padding)
    if ratio.dim():
        ratio = ratio.reshape([1] * (rank - len(kernel)) + list(out_meta(args.node).shape[2:]))
    return ctx.add("Mul", [summed, ctx.constant(ratio.to(dtype), dtype)])


def _adaptive_dims(args: BoundArgs) -> tuple[list[int], list[int], bool]:
    """``(input sizes, output sizes, batched)`` over the op's own spatial dims: the last 2 (``_2d``) or 3
    (``_3d``). An unbatched input ((C, H, W) for 2-D) has one leading dim, not two; the output sizes come
    from the node's metadata, which has them where the call's output_size says None (keep that size)."""
    spatial = 3 if "3d" in args.node.target._opname else 2
    shape = list(args.meta("self").shape)
    return shape[-spatial:], list(out_meta(args.node).shape[-spatial:]), len(shape) == spatial + 2


def _global(outputs: list[Any]) -> bool:
    return all(isinstance(o, int) and o == 1 for o in outputs)


def _adaptive_ok(args: BoundArgs) -> bool | Refusal:
    """Static spatial sizes, except for an output of 1 per dim (a GlobalAveragePool, whatever the input size)."""
    rank = args.meta("self").dim()
    sizes, outputs, batched = _adaptive_dims(args)
    if rank not in (len(sizes) + 1, len(sizes) + 2):
        return refuse(f"input has rank {rank}; {args.node.target} takes {len(sizes) + 1} or {len(sizes) + 2}")
    if _global(outputs):
        return True
    refusal = dynamic_refusal(args, "self", range(rank - len(sizes), rank), f"the kernel is input size / output_size {outputs}")
    return True if refusal is None else refusal


def _averaging(size: int, output: int) -> torch.Tensor:
    """The ``[output, size]`` matrix adaptive average pooling applies along one dim: row ``i`` averages the inputs
    ``floor(i * size / output)`` to ``ceil((i + 1) * size / output)`` (ATen's windows, overlapping where
    ``size`` is no multiple of ``output``)."""
    matrix = torch.zeros(output, size, dtype=torch.float64)
    for i in range(output):
        start, end = (i * size) // output, -((-(i + 1) * size) // output)
        matrix[i, start:end] = 1.0 / (end - start)
    return matrix


@converter(aten._adaptive_avg_pool2d.default, aten.adaptive_avg_pool2d.default,
           aten._adaptive_avg_pool3d.default, dtypes=_AVG_POOL_DTYPES, check=_adaptive_ok, dynamic=True)
def _adaptive_avg_pool(ctx: ConversionContext, args: BoundArgs) -> str:
    """AveragePool with kernel = stride = input size / output size (GlobalAveragePool for output 1); where an input
    size is no multiple of its output size, MatMuls with the constant averaging matrices of ATen's windows
    (``_pool_by_matrices``); an unbatched input is pooled as a batch of one (Unsqueeze, Squeeze: no size is read)."""
    sizes, outputs, batched = _adaptive_dims(args)
    x = ctx.name(args.self)
    if all_ints(sizes) and sizes == outputs:
        return x
    if not batched:
        x = ctx.add("Unsqueeze", [x, ints(ctx, [0])])
    if _global(outputs):
        y = ctx.add("GlobalAveragePool", [x])
    elif all(n % o == 0 for n, o in zip(sizes, outputs)):
        kernel = [n // o for n, o in zip(sizes, outputs)]
        y = ctx.add("AveragePool", [x], kernel_shape=kernel, strides=kernel)
    else:  # sizes no multiple of the outputs (alexnet and vgg at small inputs): the averaging matrices, exact windows
        y = _pool_by_matrices(ctx, x, args.meta("self").dtype, sizes, outputs)
    return y if batched else ctx.add("Squeeze", [y, ints(ctx, [0])])


def _pool_by_matrices(ctx: ConversionContext, x: str, dtype: torch.dtype, sizes: list[int], outputs: list[int]) -> str:
    """Adaptive pooling of ``(N, C, *sizes)`` as ``Y = A_h X A_w^T`` over the last two dims; in 3-D the depth is
    pooled first, as ``A_d`` times the input viewed as ``(N, C, D, H * W)`` (Reshape's 0 keeps N and C, which
    may be dynamic). Each matrix is ``_averaging``'s, so every window is ATen's."""
    if len(sizes) == 3:
        depth, height, width = sizes
        flat = ctx.add("Reshape", [x, ints(ctx, [0, 0, depth, height * width])])
        pooled = ctx.add("MatMul", [ctx.constant(_averaging(depth, outputs[0]).to(dtype), dtype), flat])
        x = ctx.add("Reshape", [pooled, ints(ctx, [0, 0, outputs[0], height, width])])
    rows = ctx.constant(_averaging(sizes[-2], outputs[-2]).to(dtype), dtype)
    columns = ctx.constant(_averaging(sizes[-1], outputs[-1]).t().contiguous().to(dtype), dtype)
    return ctx.add("MatMul", [ctx.add("MatMul", [rows, x]), columns])
