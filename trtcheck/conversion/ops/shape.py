"""Shape and layout ops: views, permutations, concatenation, splitting, slicing, padding, scatters.

With static shapes every view-like op becomes one Reshape to the shape recorded in the node's metadata,
whatever mix of -1s, squeezes or flattens produced it. The ``dynamic`` converters take symbolic sizes too:
a view reshapes to its own size argument (ints and SymInt nodes, ``[sym_size_int_6, 2, 64]``, computed by
``ctx.shape_list``; ATen's -1 is ONNX Reshape's, and no 0 is ever emitted, since no converter takes an
empty tensor, so ONNX's "0 copies the input's dim" never applies), squeeze/unsqueeze use axes only,
expand maps ATen's -1 ("keep this size") to 1 (which ONNX Expand broadcasts to the input's size), and
slice/select on a dynamic dim leave the bounds to ONNX Slice/Gather at run time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.fx

from trtcheck.conversion.arguments import BoundArgs
from trtcheck.conversion.ops._common import (
    NUMERIC,
    all_ints,
    aten,
    converter,
    dynamic_refusal,
    ints,
    norm_dims,
    operand,
    operands,
    out_dtype,
    out_meta,
    refuse,
)
from trtcheck.conversion.registry import Refusal

if TYPE_CHECKING:  # pragma: no cover - the context imports the registry, not vice versa
    from trtcheck.conversion.context import ConversionContext


def reshape(ctx: ConversionContext, name: str, shape: Any) -> str:
    """``name`` reshaped to a static shape."""
    return ctx.add("Reshape", [name, ints(ctx, [int(d) for d in shape])])


def _same_static_shape(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """True when two shapes are the same ints: a view or expand to its input's own shape is no op. Dropping the
    node spares the engine's optimizer a node (bert_base's bmm-based linear layers left 97 such Reshapes and
    Expands; ONNX Runtime's peak while it built the session fell 4 MiB without them) and lets it fuse across."""
    return all_ints(*a, *b) and list(a) == list(b)


def shape_like(ctx: ConversionContext, node: torch.fx.Node) -> str:
    """The shape of tensor ``node`` as a 1-D int64: a constant when static, its run-time Shape when dynamic."""
    shape = node.meta["val"].shape
    return ints(ctx, list(shape)) if all_ints(shape) else ctx.shape_of(ctx.name(node))


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


_SQUEEZES = (aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims)


def _squeeze_axes(args: BoundArgs) -> list[int]:
    """The axes squeeze removes: those requested (all by default) whose size is a static 1."""
    shape = args.meta("self").shape
    rank = len(shape)
    if not rank:
        return []
    requested = range(rank) if "dim" not in args else ([args.dim] if isinstance(args.dim, int) else args.dim)  # .dims: a list
    return sorted({d % rank for d in requested if isinstance(shape[d % rank], int) and shape[d % rank] == 1})


def _view_ok(args: BoundArgs) -> bool | Refusal:
    """A squeeze must remove exactly the static size-1 axes: a dynamic size it might remove stays in PyTorch."""
    if args.node.target not in _SQUEEZES:
        return True
    rank, removed = args.meta("self").dim(), len(_squeeze_axes(args))
    if rank - removed == out_meta(args.node).dim():
        return True
    shape = list(args.meta("self").shape)
    return refuse(f"self has the dynamic shape {shape}: squeeze removes a dim whose size is only known at run time")


@converter(*_VIEWS, check=_view_ok, dynamic=True)
def _view(ctx: ConversionContext, args: BoundArgs) -> str:
    """A Reshape to the static output shape; with a dynamic one, squeeze/unsqueeze by axes, and a Reshape to
    the view's own size argument (or, for flatten, to the output's sizes rebuilt from the inputs)."""
    x = ctx.name(args.self)
    shape = out_meta(args.node).shape
    if all_ints(shape):
        return x if _same_static_shape(args.meta("self").shape, shape) else reshape(ctx, x, shape)
    if args.node.target == aten.unsqueeze.default:
        return ctx.add("Unsqueeze", [x, ints(ctx, [args.dim % len(shape)])])
    if args.node.target in _SQUEEZES:
        axes = _squeeze_axes(args)
        return ctx.add("Squeeze", [x, ints(ctx, axes)]) if axes else x
    return ctx.add("Reshape", [x, ctx.shape_list(args.size if "size" in args else shape)])


def _eval_dropout(args: BoundArgs) -> bool | Refusal:
    if "train" in args and args.train:
        return refuse("train=True: dropout in training mode draws random numbers")
    return True


@converter(aten.clone.default, aten.alias.default, aten.detach.default, aten.lift_fresh_copy.default,
           aten.dropout.default, check=_eval_dropout, dynamic=True)
def _passthrough(ctx: ConversionContext, args: BoundArgs) -> str:
    """Copies and aliases have no meaning in a functional ONNX graph: reuse the input value."""
    return ctx.name(args["input"] if "input" in args else args.self)


def _permutation(args: BoundArgs) -> list[int]:
    rank = args.meta("self").dim()
    if "dims" in args:  # permute
        return [d % max(rank, 1) for d in args.dims]
    perm = list(range(rank))
    if rank >= 2:
        a, b = (args.dim0, args.dim1) if "dim0" in args else (0, 1)
        perm[a % rank], perm[b % rank] = perm[b % rank], perm[a % rank]
    return perm


@converter(aten.permute.default, aten.transpose.int, aten.t.default, dynamic=True)
def _transpose(ctx: ConversionContext, args: BoundArgs) -> str:
    """Transpose; a 0-d tensor has nothing to permute (and ONNX cannot write an empty ``perm``); a weight's
    permutation is a permuted weight (``ConversionContext.permuted_weight``), which the engine need not fold."""
    x = ctx.name(args.self)
    if args.meta("self").dim() == 0:
        return x
    perm = _permutation(args)
    return ctx.permuted_weight(x, perm) or ctx.add("Transpose", [x], perm=perm)


@converter(aten.expand.default, dynamic=True)
def _expand(ctx: ConversionContext, args: BoundArgs) -> str:
    """Expand to the static output shape; to the size argument (SymInt nodes read as converted) when it is
    dynamic, ATen's -1 ("keep this size") becoming 1, which ONNX Expand broadcasts to the input's size."""
    shape = out_meta(args.node).shape
    if all_ints(shape):
        x = ctx.name(args.self)
        return x if _same_static_shape(args.meta("self").shape, shape) else ctx.add("Expand", [x, ints(ctx, shape)])
    sizes = [1 if isinstance(size, int) and size == -1 else size for size in args.size]
    return ctx.add("Expand", [ctx.name(args.self), ctx.shape_list(sizes)])


def _empty(value: Any) -> bool:
    """A tensor known, from its static shape, to hold nothing."""
    shape = value.meta["val"].shape if isinstance(value, torch.fx.Node) else ()
    return all(isinstance(size, int) for size in shape) and math.prod(shape) == 0 and len(shape) > 0


def _cat_ok(args: BoundArgs) -> bool | Refusal:
    """Empty inputs are dropped (a cat with one is the identity: a partial rotary embedding's pass-through half),
    but not all of them."""
    if all(_empty(tensor) for tensor in args.tensors):
        return refuse("every input is empty: the result holds nothing to compute")
    return True


@converter(aten.cat.default, constants=("dim",), check=_cat_ok, dynamic=True, empty=True)
def _cat(ctx: ConversionContext, args: BoundArgs) -> str:
    """Concat of the inputs that hold something; inputs of different dtypes are promoted to the output dtype first,
    as aten.cat does (an empty input still takes part in the promotion, as in aten.cat)."""
    axis = args.dim % out_meta(args.node).dim()
    kept = [tensor for tensor in args.tensors if not _empty(tensor)]
    values = operands(ctx, kept, out_dtype(args.node))
    return values[0] if len(values) == 1 else ctx.add("Concat", values, axis=axis)


@converter(aten.stack.default, constants=("dim",), dynamic=True)
def _stack(ctx: ConversionContext, args: BoundArgs) -> str:
    axis = args.dim % out_meta(args.node).dim()
    pieces = [ctx.add("Unsqueeze", [x, ints(ctx, [axis])]) for x in operands(ctx, args.tensors, out_dtype(args.node))]
    return ctx.add("Concat", pieces, axis=axis)


def _split_sizes(args: BoundArgs) -> tuple[int, list[int]]:
    meta = args.meta("self")
    axis = args.dim % meta.dim()
    if "split_sizes" in args:
        return axis, list(args.split_sizes)
    if "split_size" not in args:  # unbind
        return axis, [1] * meta.shape[axis]
    size, total = args.split_size, meta.shape[axis]
    return axis, [min(size, total - start) for start in range(0, total, size)]


def _split_ok(args: BoundArgs) -> bool | Refusal:
    """Static sizes along the split dim (other dims may be dynamic), no empty piece."""
    axis = args.dim % max(args.meta("self").dim(), 1)
    dynamic = dynamic_refusal(args, "self", [axis], "the pieces' sizes are Split's constant input")
    if dynamic is not None:
        return dynamic
    if "split_sizes" in args and not all_ints(args.split_sizes):
        return refuse(f"split_sizes {args.split_sizes!r} is not all plain ints")
    sizes = _split_sizes(args)[1]
    return all(size > 0 for size in sizes) or refuse(f"split sizes {sizes} hold an empty piece")


@converter(aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int, constants=("dim",), check=_split_ok,
           dynamic=True)
def _split(ctx: ConversionContext, args: BoundArgs) -> list[str]:
    axis, sizes = _split_sizes(args)
    x = ctx.name(args.self)
    pieces = ctx.add("Split", [x, ints(ctx, sizes)], num_outputs=len(sizes), axis=axis) if len(sizes) > 1 else [x]
    if args.node.target == aten.unbind.int:
        return [ctx.add("Squeeze", [piece, ints(ctx, [axis])]) for piece in pieces]
    return list(pieces)


def _slice_range(args: BoundArgs, size: int) -> range:
    """The positions aten.slice/slice_scatter select along their dim (Python slice semantics)."""
    return range(size)[slice(args.start, args.end, args.step)]


def _constant_int(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool))


def _slice_ok(args: BoundArgs) -> bool | Refusal:
    """Constant dim and step; start and end may also be SymInt nodes (``x[: x.shape[0] - 1]``)."""
    for name in ("dim", "start", "end", "step"):
        value = args[name]
        symint = name in ("start", "end") and isinstance(value, torch.fx.Node)  # the shared check saw a SymInt
        if not (_constant_int(value) or symint):
            return refuse(f"{name} {value!r} is not a constant int")
    if args.step is not None and args.step <= 0:
        return refuse(f"step {args.step} is not positive")
    return True


# ONNX Slice clamps an end past the dim to the dim, like Python: ATen's "to the end" is this.
_INT64_MAX = 2**63 - 1


@converter(aten.slice.Tensor, check=_slice_ok, dynamic=True, empty=True)
def _slice(ctx: ConversionContext, args: BoundArgs) -> str:
    """Static bounds when the dim's size is static; otherwise the bounds as given (negative ones count from
    the end and out-of-range ones clamp, in ONNX Slice as in Python), SymInt nodes read as converted."""
    meta = args.meta("self")
    axis = args.dim % meta.dim()
    size = meta.shape[axis]
    if isinstance(size, int) and _constant_int(args.start) and _constant_int(args.end):
        positions = _slice_range(args, size)
        bounds = [positions.start, positions.stop, axis, positions.step]
        return ctx.add("Slice", [ctx.name(args.self), *(ints(ctx, [b]) for b in bounds)])
    start = 0 if args.start is None else args.start
    end = _INT64_MAX if args.end is None else args.end
    step = 1 if args.step is None else args.step
    bounds = [ctx.shape_list([start]), ctx.shape_list([end]), ints(ctx, [axis]), ints(ctx, [step])]
    return ctx.add("Slice", [ctx.name(args.self), *bounds])


@converter(aten.select.int, constants=("dim", "index"), dynamic=True)
def _select(ctx: ConversionContext, args: BoundArgs) -> str:
    """Gather of one index; a negative index on a dynamic dim is made non-negative at run time (size + index)."""
    meta = args.meta("self")
    axis = args.dim % meta.dim()
    x = ctx.name(args.self)
    if isinstance(meta.shape[axis], int):
        return ctx.add("Gather", [x, ints(ctx, args.index % meta.shape[axis])], axis=axis)
    index = ints(ctx, args.index)
    if args.index < 0:
        index = ctx.add("Add", [index, ctx.dim_of(x, axis)])
    return ctx.add("Gather", [x, index], axis=axis)


def _scatter_indices(shape: list[int], axis: int, positions: list[int]) -> np.ndarray:
    """Indices for ScatterElements writing a ``shape`` tensor into ``positions`` along ``axis``."""
    view = [1] * len(shape)
    view[axis] = len(positions)
    return np.broadcast_to(np.asarray(positions, dtype=np.int64).reshape(view), shape).copy()


# ScatterElements, Pad and DepthToSpace take no bools in TensorRT.
def _scatter_ok(args: BoundArgs) -> bool | Refusal:
    if "start" in args:
        verdict = _slice_ok(args)
        if not verdict:
            return verdict
    if args.meta("src").dtype != args.meta("self").dtype:
        return refuse(f"src is {args.meta('src').dtype}, self is {args.meta('self').dtype}")
    return True


@converter(aten.slice_scatter.default, aten.select_scatter.default, dtypes=NUMERIC, constants=("dim",),
           check=_scatter_ok, empty=True)
def _slice_scatter(ctx: ConversionContext, args: BoundArgs) -> str:
    """Writes ``src`` over the selected positions with one ScatterElements (static index tensor); an empty ``src``
    (a slice that selects nothing: swin3d's shifted-window mask where the window is the whole input) writes
    nothing, so the result is ``self``."""
    meta = args.meta("self")
    axis = args.dim % meta.dim()
    if _empty(args.src):
        return ctx.name(args.self)
    src = ctx.name(args.src)
    src_shape = list(args.meta("src").shape)
    if "index" in args:  # select_scatter
        positions = [args.index % meta.shape[axis]]
        src_shape.insert(axis, 1)
        src = reshape(ctx, src, src_shape)
    else:
        positions = list(_slice_range(args, meta.shape[axis]))
    indices = ctx.constant(_scatter_indices(src_shape, axis, positions), torch.int64)
    return ctx.add("ScatterElements", [ctx.name(args.self), indices, src], axis=axis)


def _pads_ok(args: BoundArgs) -> bool | Refusal:
    if all_ints(args.pad):
        return True
    return refuse(f"pad {args.pad!r} is not all constant ints")


@converter(aten.constant_pad_nd.default, dtypes=NUMERIC, constants=("value",), check=_pads_ok, dynamic=True)
def _constant_pad(ctx: ConversionContext, args: BoundArgs) -> str:
    """aten pads are (begin, end) pairs from the last dim backwards; ONNX wants all begins, then ends. A negative pad
    crops (timm's volo: ``F.pad(x, (0, -1, 0, -1))``): a Slice first takes what the crops keep (a negative end counts
    from the end, so a dynamic size crops too), then Pad adds the positive pads."""
    x = ctx.name(args.self)
    pad = list(args.pad)
    if not any(pad):
        return x
    rank = args.meta("self").dim()
    begins, ends = [0] * rank, [0] * rank
    for i in range(len(pad) // 2):
        begins[rank - 1 - i], ends[rank - 1 - i] = pad[2 * i], pad[2 * i + 1]
    cropped = [axis for axis in range(rank) if begins[axis] < 0 or ends[axis] < 0]
    if cropped:
        starts = [max(-begins[axis], 0) for axis in cropped]
        stops = [ends[axis] if ends[axis] < 0 else _INT64_MAX for axis in cropped]
        x = ctx.add("Slice", [x, ints(ctx, starts), ints(ctx, stops), ints(ctx, cropped)])
        begins, ends = [max(b, 0) for b in begins], [max(e, 0) for e in ends]
        if not any(begins + ends):
            return x
    value = ctx.constant(args.value, out_dtype(args.node))
    return ctx.add("Pad", [x, ints(ctx, begins + ends), value], mode="constant")


def _blocking(args: BoundArgs) -> bool | Refusal:
    return not args.non_blocking or refuse("non_blocking=True: an asynchronous copy is PyTorch's business")


@converter(aten.copy.default, check=_blocking, dynamic=True, empty=True)
def _copy(ctx: ConversionContext, args: BoundArgs) -> str:
    """Functional copy_: ``src`` cast to ``self``'s dtype and broadcast to its (run-time, if dynamic) shape, which
    may hold nothing (a fill of an empty slice: Expand to a size-0 dim is numpy's broadcasting, as in ATen)."""
    source = operand(ctx, args.src, out_dtype(args.node))
    return ctx.add("Expand", [source, shape_like(ctx, args.self)])



def _strided_indices(args: BoundArgs) -> np.ndarray:
    size, stride = args.size, args.stride
    offset = args.storage_offset or 0
    index = np.full([int(s) for s in size], offset, dtype=np.int64)
    for axis, (n, s) in enumerate(zip(size, stride)):
        view = [1] * len(size)
        view[axis] = n
        index = index + (np.arange(n, dtype=np.int64) * s).reshape(view)
    return index


def _as_strided_ok(args: BoundArgs) -> bool | Refusal:
    """Only over a contiguous input whose storage holds exactly its elements (what functional graphs
    give), so that "storage" is the flattened input."""
    meta = args.meta("self")
    if not all_ints(args.size, args.stride, args.storage_offset or 0):
        return refuse(f"size {args.size!r} / stride {args.stride!r} / storage_offset are not all ints")
    if not (meta.is_contiguous() and meta.storage_offset() == 0):
        return refuse("self is not a contiguous tensor at storage offset 0")
    index = _strided_indices(args)
    if index.size == 0 or (index.min() >= 0 and index.max() < meta.numel()):
        return True
    return refuse(f"the strided view reads outside self's {meta.numel()} elements")


@converter(aten.as_strided.default, check=_as_strided_ok)
def _as_strided(ctx: ConversionContext, args: BoundArgs) -> str:
    """A Reshape when the strided view is the contiguous layout, else a Gather on the flat input."""
    index = _strided_indices(args)
    flat = reshape(ctx, ctx.name(args.self), [-1])
    if np.array_equal(index.reshape(-1), np.arange(index.size)):
        return reshape(ctx, flat, index.shape)
    return ctx.add("Gather", [flat, ctx.constant(index, torch.int64)], axis=0)


def _unfold_ok(args: BoundArgs) -> bool | Refusal:
    """The unfolded dim's size must be static (the windows are constant indices); the others may be dynamic."""
    rank = args.meta("self").dim()
    if rank == 0:  # a scalar is one window of size 1 (ATen allows no other)
        return True
    refusal = dynamic_refusal(args, "self", [args.dimension % rank], "the windows are a constant index tensor")
    return True if refusal is None else refusal


@converter(aten.unfold.default, constants=("dimension", "size", "step"), check=_unfold_ok, dynamic=True)
def _unfold(ctx: ConversionContext, args: BoundArgs) -> str:
    """``x.unfold(d, size, step)`` (timm's halonet): one Gather of the ``(windows, size)`` index table
    ``i * step + j`` along ``d``, then a Transpose that moves the window's own axis to the end, where ATen puts it."""
    meta = args.meta("self")
    rank = meta.dim()
    if rank == 0:
        return ctx.add("Unsqueeze", [ctx.name(args.self), ints(ctx, [0])])
    axis = args.dimension % rank
    windows = (meta.shape[axis] - args.size) // args.step + 1
    table = np.arange(windows, dtype=np.int64)[:, None] * args.step + np.arange(args.size, dtype=np.int64)
    taken = ctx.add("Gather", [ctx.name(args.self), ctx.constant(table, torch.int64)], axis=axis)
    perm = [*range(axis + 1), *range(axis + 2, rank + 1), axis + 1]
    return ctx.add("Transpose", [taken], perm=perm)


def _static_repeats(args: BoundArgs) -> bool | Refusal:
    return all_ints(args.repeats) or refuse(f"repeats {args.repeats!r} is not all plain ints")


@converter(aten.repeat.default, check=_static_repeats)
def _repeat(ctx: ConversionContext, args: BoundArgs) -> str:
    repeats = list(args.repeats)
    meta = args.meta("self")
    x = ctx.name(args.self)
    if len(repeats) > meta.dim():
        x = reshape(ctx, x, [1] * (len(repeats) - meta.dim()) + list(meta.shape))
    return ctx.add("Tile", [x, ints(ctx, repeats)])


@converter(aten.flip.default, constants=("dims",), dynamic=True)
def _flip(ctx: ConversionContext, args: BoundArgs) -> str:
    """Slices with step -1 from the last element past the first."""
    axes = norm_dims(args.dims, args.meta("self").dim()) if args.dims else []
    x = ctx.name(args.self)
    if not axes:
        return x
    n = len(axes)
    lowest = -(2**63) + 1
    return ctx.add("Slice", [x, ints(ctx, [-1] * n), ints(ctx, [lowest] * n), ints(ctx, axes), ints(ctx, [-1] * n)])


def _four_dims(args: BoundArgs) -> bool | Refusal:
    rank = args.meta("self").dim()
    return rank == 4 or refuse(f"self has rank {rank}; DepthToSpace takes rank 4")


@converter(aten.pixel_shuffle.default, dtypes=NUMERIC, constants=("upscale_factor",), check=_four_dims, dynamic=True)
def _pixel_shuffle(ctx: ConversionContext, args: BoundArgs) -> str:
    """PyTorch's channel order is ONNX DepthToSpace's CRD mode."""
    return ctx.add("DepthToSpace", [ctx.name(args.self)], blocksize=int(args.upscale_factor), mode="CRD")

