"""Shape and layout ops: views, permutations, concatenation, splitting, slicing, padding, scatters.

Shapes are static (the shared validator guarantees it), so every view-like op becomes one Reshape to
the shape recorded in the node's metadata, whatever mix of -1s, squeezes or flattens produced it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.fx

from trtcheck.converters._common import (
    NUMERIC,
    all_ints,
    arg,
    aten,
    converter,
    ints,
    norm_dims,
    operand,
    operands,
    out_dtype,
    out_meta,
)

if TYPE_CHECKING:  # pragma: no cover - the context imports the registry, not vice versa
    from trtcheck.conversion import ConversionContext


def reshape(ctx: ConversionContext, name: str, shape: Any) -> str:
    """``name`` reshaped to a static shape."""
    return ctx.add("Reshape", [name, ints(ctx, [int(d) for d in shape])])


_VIEWS = (
    aten.view.default,
    aten._unsafe_view.default,
    aten.reshape.default,
    aten.squeeze.default,
    aten.squeeze.dim,
    aten.squeeze.dims,
    aten.unsqueeze.default,
    aten.flatten.using_ints,
    aten.view_copy.default,
)


@converter(*_VIEWS)
def _view(ctx: ConversionContext, node: torch.fx.Node) -> str:
    return reshape(ctx, ctx.name(node.args[0]), out_meta(node).shape)


def _eval_dropout(node: torch.fx.Node) -> bool:
    return node.target != aten.dropout.default or not arg(node, 2, "train", False)


@converter(aten.clone.default, aten.alias.default, aten.detach.default, aten.lift_fresh_copy.default,
           aten.dropout.default, check=_eval_dropout)
def _passthrough(ctx: ConversionContext, node: torch.fx.Node) -> str:
    """Copies and aliases have no meaning in a functional ONNX graph: reuse the input value."""
    return ctx.name(node.args[0])


def _permutation(node: torch.fx.Node) -> list[int]:
    rank = node.args[0].meta["val"].dim()
    if node.target == aten.permute.default:
        return [d % rank for d in node.args[1]]
    perm = list(range(rank))
    if rank >= 2:
        a, b = (node.args[1], node.args[2]) if node.target == aten.transpose.int else (0, 1)
        perm[a % rank], perm[b % rank] = perm[b % rank], perm[a % rank]
    return perm


@converter(aten.permute.default, aten.transpose.int, aten.t.default)
def _transpose(ctx: ConversionContext, node: torch.fx.Node) -> str:
    return ctx.add("Transpose", [ctx.name(node.args[0])], perm=_permutation(node))


@converter(aten.expand.default, check=lambda n: all_ints(n.args[1]))
def _expand(ctx: ConversionContext, node: torch.fx.Node) -> str:
    return ctx.add("Expand", [ctx.name(node.args[0]), ints(ctx, out_meta(node).shape)])


@converter(aten.cat.default)
def _cat(ctx: ConversionContext, node: torch.fx.Node) -> str:
    """Concat; inputs of different dtypes are promoted to the output dtype first, as aten.cat does."""
    axis = arg(node, 1, "dim", 0) % out_meta(node).dim()
    return ctx.add("Concat", operands(ctx, node.args[0], out_dtype(node)), axis=axis)


@converter(aten.stack.default)
def _stack(ctx: ConversionContext, node: torch.fx.Node) -> str:
    rank = out_meta(node).dim()
    axis = arg(node, 1, "dim", 0) % rank
    pieces = [ctx.add("Unsqueeze", [x, ints(ctx, [axis])]) for x in operands(ctx, node.args[0], out_dtype(node))]
    return ctx.add("Concat", pieces, axis=axis)


def _split_sizes(node: torch.fx.Node) -> tuple[int, list[int]]:
    meta = node.args[0].meta["val"]
    axis = arg(node, 2, "dim", 0) % meta.dim()
    if node.target == aten.split_with_sizes.default:
        return axis, list(node.args[1])
    if node.target == aten.unbind.int:
        axis = arg(node, 1, "dim", 0) % meta.dim()
        return axis, [1] * meta.shape[axis]
    size, total = node.args[1], meta.shape[axis]
    return axis, [min(size, total - start) for start in range(0, total, size)]


@converter(aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int,
           check=lambda n: all(size > 0 for size in _split_sizes(n)[1]))
def _split(ctx: ConversionContext, node: torch.fx.Node) -> list[str]:
    axis, sizes = _split_sizes(node)
    x = ctx.name(node.args[0])
    pieces = ctx.add("Split", [x, ints(ctx, sizes)], num_outputs=len(sizes), axis=axis) if len(sizes) > 1 else [x]
    if node.target == aten.unbind.int:
        return [ctx.add("Squeeze", [piece, ints(ctx, [axis])]) for piece in pieces]
    return list(pieces)


def _slice_range(node: torch.fx.Node, size: int) -> range:
    """The positions aten.slice/slice_scatter select along their dim (Python slice semantics)."""
    start = arg(node, 2 + (node.target == aten.slice_scatter.default), "start")
    end = arg(node, 3 + (node.target == aten.slice_scatter.default), "end")
    step = arg(node, 4 + (node.target == aten.slice_scatter.default), "step", 1)
    return range(size)[slice(start, end, step)]


def _slice_ok(node: torch.fx.Node) -> bool:
    values = [a for a in node.args[1:] if not isinstance(a, torch.fx.Node)]
    return all(v is None or isinstance(v, int) for v in values)


@converter(aten.slice.Tensor, check=_slice_ok)
def _slice(ctx: ConversionContext, node: torch.fx.Node) -> str:
    meta = node.args[0].meta["val"]
    axis = arg(node, 1, "dim", 0) % meta.dim()
    positions = _slice_range(node, meta.shape[axis])
    bounds = [positions.start, positions.stop, axis, positions.step]
    return ctx.add("Slice", [ctx.name(node.args[0]), *(ints(ctx, [b]) for b in bounds)])


@converter(aten.select.int, check=lambda n: all_ints(n.args[1:]))
def _select(ctx: ConversionContext, node: torch.fx.Node) -> str:
    meta = node.args[0].meta["val"]
    axis = node.args[1] % meta.dim()
    index = node.args[2] % meta.shape[axis]
    return ctx.add("Gather", [ctx.name(node.args[0]), ints(ctx, index)], axis=axis)


def _scatter_indices(shape: list[int], axis: int, positions: list[int]) -> np.ndarray:
    """Indices for ScatterElements writing a ``shape`` tensor into ``positions`` along ``axis``."""
    view = [1] * len(shape)
    view[axis] = len(positions)
    return np.broadcast_to(np.asarray(positions, dtype=np.int64).reshape(view), shape).copy()


# ScatterElements, Pad and DepthToSpace take no bools in TensorRT.
@converter(aten.slice_scatter.default, aten.select_scatter.default, dtypes=NUMERIC,
           check=lambda n: _slice_ok(n) and n.args[1].meta["val"].dtype == n.args[0].meta["val"].dtype)
def _slice_scatter(ctx: ConversionContext, node: torch.fx.Node) -> str:
    """Writes ``src`` over the selected positions with one ScatterElements (static index tensor)."""
    meta = node.args[0].meta["val"]
    axis = arg(node, 2, "dim", 0) % meta.dim()
    src = ctx.name(node.args[1])
    src_shape = list(node.args[1].meta["val"].shape)
    if node.target == aten.select_scatter.default:
        positions = [node.args[3] % meta.shape[axis]]
        src_shape.insert(axis, 1)
        src = reshape(ctx, src, src_shape)
    else:
        positions = list(_slice_range(node, meta.shape[axis]))
    indices = ctx.constant(_scatter_indices(src_shape, axis, positions), torch.int64)
    return ctx.add("ScatterElements", [ctx.name(node.args[0]), indices, src], axis=axis)


def _pads_ok(node: torch.fx.Node) -> bool:
    return all_ints(node.args[1]) and all(p >= 0 for p in node.args[1])


@converter(aten.constant_pad_nd.default, dtypes=NUMERIC, check=_pads_ok)
def _constant_pad(ctx: ConversionContext, node: torch.fx.Node) -> str:
    """aten pads are (begin, end) pairs from the last dim backwards; ONNX wants all begins, then ends."""
    x = ctx.name(node.args[0])
    pad = list(node.args[1])
    if not any(pad):
        return x
    rank = node.args[0].meta["val"].dim()
    begins, ends = [0] * rank, [0] * rank
    for i in range(len(pad) // 2):
        begins[rank - 1 - i], ends[rank - 1 - i] = pad[2 * i], pad[2 * i + 1]
    value = ctx.constant(arg(node, 2, "value", 0), out_dtype(node))
    return ctx.add("Pad", [x, ints(ctx, begins + ends), value], mode="constant")


@converter(aten.copy.default, check=lambda n: not arg(n, 2, "non_blocking", False))
def _copy(ctx: ConversionContext, node: torch.fx.Node) -> str:
    """Functional copy_: ``src`` cast to ``self``'s dtype and broadcast to its shape."""
    source = operand(ctx, node.args[1], out_dtype(node))
    return ctx.add("Expand", [source, ints(ctx, out_meta(node).shape)])


def _strided_indices(node: torch.fx.Node) -> np.ndarray:
    size, stride = node.args[1], node.args[2]
    offset = arg(node, 3, "storage_offset") or 0
    index = np.full([int(s) for s in size], offset, dtype=np.int64)
    for axis, (n, s) in enumerate(zip(size, stride)):
        view = [1] * len(size)
        view[axis] = n
        index = index + (np.arange(n, dtype=np.int64) * s).reshape(view)
    return index


def _as_strided_ok(node: torch.fx.Node) -> bool:
    """Only over a contiguous input whose storage holds exactly its elements (what functional graphs
    give), so that "storage" is the flattened input."""
    meta = node.args[0].meta["val"]
    if not (all_ints(node.args[1:]) and meta.is_contiguous() and meta.storage_offset() == 0):
        return False
    index = _strided_indices(node)
    return index.size == 0 or (index.min() >= 0 and index.max() < meta.numel())


@converter(aten.as_strided.default, check=_as_strided_ok)
def _as_strided(ctx: ConversionContext, node: torch.fx.Node) -> str:
    """A Reshape when the strided view is the contiguous layout, else a Gather on the flat input."""
    index = _strided_indices(node)
    flat = reshape(ctx, ctx.name(node.args[0]), [-1])
    if np.array_equal(index.reshape(-1), np.arange(index.size)):
        return reshape(ctx, flat, index.shape)
    return ctx.add("Gather", [flat, ctx.constant(index, torch.int64)], axis=0)


@converter(aten.repeat.default, check=lambda n: all_ints(n.args[1]))
def _repeat(ctx: ConversionContext, node: torch.fx.Node) -> str:
    repeats = list(node.args[1])
    meta = node.args[0].meta["val"]
    x = ctx.name(node.args[0])
    if len(repeats) > meta.dim():
        x = reshape(ctx, x, [1] * (len(repeats) - meta.dim()) + list(meta.shape))
    return ctx.add("Tile", [x, ints(ctx, repeats)])


@converter(aten.flip.default)
def _flip(ctx: ConversionContext, node: torch.fx.Node) -> str:
    """Slices with step -1 from the last element past the first."""
    axes = norm_dims(node.args[1], node.args[0].meta["val"].dim()) if node.args[1] else []
    x = ctx.name(node.args[0])
    if not axes:
        return x
    n = len(axes)
    lowest = -(2**63) + 1
    return ctx.add("Slice", [x, ints(ctx, [-1] * n), ints(ctx, [lowest] * n), ints(ctx, axes), ints(ctx, [-1] * n)])


@converter(aten.pixel_shuffle.default, dtypes=NUMERIC, check=lambda n: n.args[0].meta["val"].dim() == 4)
def _pixel_shuffle(ctx: ConversionContext, node: torch.fx.Node) -> str:
    """PyTorch's channel order is ONNX DepthToSpace's CRD mode."""
    return ctx.add("DepthToSpace", [ctx.name(node.args[0])], blocksize=int(node.args[1]), mode="CRD")

