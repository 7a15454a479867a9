"""Gathers: index_select, gather and advanced indexing (``aten.index.Tensor``).

All are ``dynamic``: they read axes, and what sizes they need (the indexed dims, to wrap negative positions
and to merge those dims) at run time. index_select of a 0-d tensor reshapes to its output, which a 0-d
input's at most one-element index makes static.

Advanced indexing follows PyTorch's rules (NumPy's): the index tensors broadcast together to one shape B,
and B replaces the dims they index, in place when they are adjacent (``x[:, i, j]``), at the front when a
``None`` (a full slice) separates them (``x[i, :, j]``). One index tensor is a Gather along its axis (ONNX
Gather wraps negative positions itself). Several: separated indexed dims are moved to the front first
(Transpose), the indexed dims are merged into one (Reshape), their positions into one row-major position
(each wrapped where negative: the dim's size added) and one Gather reads them, all ops on
TensorRT's list of types (GatherND is not on it).

A bool mask selects its True elements, whose number is known only at run time: export gives the output an
unbacked size (``u0``), which is refused (the output "may be empty"). Where export knows the count (a
``torch._check`` on the result's size makes the output shape static), a mask that is the only index tensor
converts: the flat positions of its True elements, ascending, are TopK's indices of ``mask * (M - p)`` for
the M positions p of the mask, and a Gather on the mask's dims merged reads them. A mask beside other index
tensors is refused (export cannot capture that either: the count broadcasts against their shapes).
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from trtcheck.conversion.arguments import BoundArgs
from trtcheck.conversion.ops._common import BOOL, INT, all_ints, aten, cast, converter, ints, out_meta, refuse
from trtcheck.conversion.ops.shape import reshape
from trtcheck.conversion.registry import Refusal

if TYPE_CHECKING:  # pragma: no cover - the context imports the registry, not vice versa
    from trtcheck.conversion.context import ConversionContext

_INDEX_DTYPES = INT
#: Mask positions are scored in float32, exact up to 2**24.
_MASK_ELEMENTS_LIMIT = 1 << 24
#: TensorRT's TopK takes k <= 3840.
_TOPK_LIMIT = 3840


def _index_dtype_ok(index: Any) -> bool:
    return isinstance(index, torch.fx.Node) and index.meta["val"].dtype in _INDEX_DTYPES


def _index_ok(args: BoundArgs) -> bool | Refusal:
    if _index_dtype_ok(args.index):
        return True
    return refuse(f"index {args.index!r} is not an int32/int64 tensor")


def _gather_ok(args: BoundArgs) -> bool | Refusal:
    if args.sparse_grad:
        return refuse("sparse_grad=True asks for a sparse gradient")
    return _index_ok(args)


@converter(aten.index_select.default, constants=("dim",), check=_index_ok, dynamic=True)
def _index_select(ctx: ConversionContext, args: BoundArgs) -> str:
    """Gather; a 0-d self (which PyTorch indexes as if it had one element) is viewed as 1-d first, and
    the result keeps the shape PyTorch gives it."""
    x = ctx.name(args.self)
    if args.meta("self").dim() == 0:
        gathered = ctx.add("Gather", [reshape(ctx, x, [1]), ctx.name(args.index)], axis=0)
        return reshape(ctx, gathered, out_meta(args.node).shape)
    axis = args.dim % args.meta("self").dim()
    return ctx.add("Gather", [x, ctx.name(args.index)], axis=axis)


@converter(aten.gather.default, constants=("dim",), check=_gather_ok, dynamic=True)
def _gather(ctx: ConversionContext, args: BoundArgs) -> str:
    """GatherElements; a 0-d self (PyTorch gathers its one element, the index 0-d or of one element) is viewed as
    1-d, as the index is, and the result keeps the index's shape (ONNX's GatherElements wants rank >= 1)."""
    if args.meta("self").dim() == 0:
        gathered = ctx.add("GatherElements", [reshape(ctx, ctx.name(args.self), [1]), reshape(ctx, ctx.name(args.index), [-1])],
                           axis=0)
        return reshape(ctx, gathered, out_meta(args.node).shape)
    axis = args.dim % args.meta("self").dim()
    return ctx.add("GatherElements", [ctx.name(args.self), ctx.name(args.index)], axis=axis)


# ---- advanced indexing ------------------------------------------------------------------------------------


def index_tensors(indices: Any) -> list[tuple[int, torch.fx.Node]]:
    """``(position in indices, index tensor)`` for every entry that is not ``None`` (a full slice)."""
    return [(position, index) for position, index in enumerate(indices) if index is not None]


def index_list_refusal(indices: Any, rank: int) -> Refusal | None:
    """Why ``indices`` (``index``'s or ``index_put``'s list: index tensors and ``None`` full slices) cannot convert
    against a rank-``rank`` self, or None: at least one index tensor, no more entries than dims, each an
    int32/int64 position tensor or a bool mask."""
    given = index_tensors(indices)
    if not given:
        return refuse("indices holds no index tensor, only full slices (None)")
    if len(indices) > rank:
        return refuse(f"{len(indices)} indices for a rank-{rank} self")
    for position, index in given:
        if not isinstance(index, torch.fx.Node) or index.meta["val"].dtype not in INT | BOOL:
            return refuse(f"indices[{position}] is {index!r}: index tensors are int32/int64 positions or bool masks")
    return None


def separated(positions: list[int]) -> bool:
    """True when a full slice lies between indexed dims: PyTorch then puts the broadcast index shape first."""
    return positions != list(range(positions[0], positions[-1] + 1))


def indexed_shape(shape: list[Any], given: list[tuple[int, torch.fx.Node]]) -> list[Any]:
    """The shape of ``self[indices]`` for int index tensors ``given`` (PyTorch's rule): their broadcast shape
    in place of the indexed dims when those are adjacent, in front of the other dims when a full slice
    separates them."""
    axes = [axis for axis, _ in given]
    batch = list(torch.broadcast_shapes(*(index.meta["val"].shape for _, index in given)))
    if separated(axes):
        return batch + [size for axis, size in enumerate(shape) if axis not in axes]
    return shape[:axes[0]] + batch + shape[axes[-1] + 1:]


def wrapped(ctx: ConversionContext, index: str, size: str) -> str:
    """int64 positions ``index`` with negative ones counted from the end (``size``, a 0-d int64, added), as
    PyTorch reads them; a valid position is unchanged. Where/Less/Add rather than Mod: plain elementwise ops
    whose integer semantics every engine shares."""
    zero = ctx.constant(0, torch.int64)
    return ctx.add("Where", [ctx.add("Less", [index, zero]), ctx.add("Add", [index, size]), index])


def dim_size(ctx: ConversionContext, name: str, meta: torch.Tensor, axis: int) -> str:
    """Size ``axis`` of ONNX value ``name`` as a 0-d int64: a constant when static, else read at run time."""
    size = meta.shape[axis]
    return ctx.constant(size, torch.int64) if isinstance(size, int) else ctx.dim_of(name, axis)


def _index_tensor_ok(args: BoundArgs) -> bool | Refusal:
    refusal = index_list_refusal(args.indices, args.meta("self").dim())
    if refusal is not None:
        return refusal
    given = index_tensors(args.indices)
    masks = [(position, index) for position, index in given if index.meta["val"].dtype in BOOL]
    if masks:
        return _mask_ok(args, given, masks[0])
    try:
        expected = indexed_shape(list(args.meta("self").shape), given)
    except RuntimeError:
        return refuse("the index tensors do not broadcast together")
    actual = list(out_meta(args.node).shape)
    if len(expected) != len(actual) or (all_ints(expected + actual) and expected != actual):
        # torch 2.14's meta function takes the index shape from the last index tensor, unbroadcast when 0-d.
        return refuse(f"the output's metadata says {actual} where PyTorch's indexing gives {expected} (torch's meta "
                      "function drops the index shape when the last index tensor is 0-d): the graph after this node "
                      "was traced with the wrong shape")
    return True


def _known(size: int | torch.SymInt) -> int | None:
    """A size as an int: a static one, or a SymInt export pinned to a number (``torch._check(n == 3)``)."""
    if isinstance(size, int):
        return size
    expr = size.node.expr
    return int(expr) if expr.is_Integer else None


def _mask_ok(args: BoundArgs, given: list[tuple[int, torch.fx.Node]], mask: tuple[int, torch.fx.Node]
             ) -> bool | Refusal:
    position, node = mask
    meta, shape = node.meta["val"], list(out_meta(args.node).shape)
    if len(given) > 1:
        return refuse(f"indices[{position}] is a bool mask beside other index tensors: its count of True elements "
                      "would broadcast against them")
    if meta.dim() == 0:
        return refuse(f"indices[{position}] is a 0-d bool mask (it adds a dim of size 0 or 1)")
    if any(_known(size) is None for size in [*shape, *meta.shape]):
        return refuse(f"indices[{position}] is a bool mask: the output's size at dim {position} is its number of "
                      f"True elements, known only at run time (output shape {shape}); a mask converts where the "
                      "result shape is static (export knows the count, e.g. after a torch._check)")
    if meta.numel() > _MASK_ELEMENTS_LIMIT:
        return refuse(f"indices[{position}] is a bool mask of {meta.numel()} elements: its positions are ranked in "
                      f"float32, exact up to {_MASK_ELEMENTS_LIMIT}")
    if _known(shape[position]) > _TOPK_LIMIT:
        return refuse(f"indices[{position}] selects {_known(shape[position])} elements: TensorRT's TopK takes k <= {_TOPK_LIMIT}")
    return True


@converter(aten.index.Tensor, check=_index_tensor_ok, dynamic=True)
def _index(ctx: ConversionContext, args: BoundArgs) -> str:
    """Advanced indexing: a Gather along the axis of one index tensor; several are merged into one (see the
    module docstring), a bool mask into the positions of its True elements."""
    given = index_tensors(args.indices)
    x, meta = ctx.name(args.self), args.meta("self")
    if given[0][1].meta["val"].dtype in BOOL:
        return _masked(ctx, args, x, *given[0])
    if len(given) == 1:
        axis, index = given[0]
        return ctx.add("Gather", [x, ctx.name(index)], axis=axis)
    axes = [axis for axis, _ in given]
    sizes = [dim_size(ctx, x, meta, axis) for axis in axes]
    shape = list(meta.shape)
    start = axes[0]
    if separated(axes):  # the indexed dims to the front, where PyTorch puts the broadcast index shape
        order = axes + [axis for axis in range(meta.dim()) if axis not in axes]
        x, shape, start = ctx.add("Transpose", [x], perm=order), [shape[axis] for axis in order], 0
    linear = ""
    for (_, index), size in zip(given, sizes):  # row-major: ((i0 * s1 + i1) * s2 + i2) ...; broadcasts as PyTorch
        position = wrapped(ctx, cast(ctx, ctx.name(index), index.meta["val"].dtype, torch.int64), size)
        linear = position if not linear else ctx.add("Add", [ctx.add("Mul", [linear, size]), position])
    merged = ctx.add("Reshape", [x, _merged_shape(ctx, x, shape, start, sizes)])
    return ctx.add("Gather", [merged, linear], axis=start)


def _merged_shape(ctx: ConversionContext, x: str, shape: list[Any], start: int, sizes: list[str]) -> str:
    """The shape of ``x`` (sizes ``shape``) with its dims ``start .. start + len(sizes) - 1`` merged into one."""
    stop = start + len(sizes)
    if all_ints(shape):
        return ints(ctx, [*shape[:start], math.prod(shape[start:stop]), *shape[stop:]])
    whole = ctx.shape_of(x)
    merged = functools.reduce(lambda a, b: ctx.add("Mul", [a, b]), sizes)
    pieces = [ctx.add("Slice", [whole, ints(ctx, [0]), ints(ctx, [start])])] if start else []
    pieces.append(ctx.add("Unsqueeze", [merged, ints(ctx, [0])]))
    if stop < len(shape):
        pieces.append(ctx.add("Slice", [whole, ints(ctx, [stop]), ints(ctx, [len(shape)])]))
    return ctx.add("Concat", pieces, axis=0)


def mask_positions(ctx: ConversionContext, mask: torch.fx.Node, count: int) -> str:
    """The flat positions of the ``count`` True elements of ``mask`` (static shape), ascending, as int64:
    TopK's indices of ``mask * (M - p)``, which is ``M - p`` >= 1 at a True position p, 0 elsewhere."""
    elements = mask.meta["val"].numel()
    flat = reshape(ctx, cast(ctx, ctx.name(mask), torch.bool, torch.float32), [elements])
    scores = ctx.add("Mul", [flat, ctx.add("Range", [ctx.constant(float(elements), torch.float32),
                                                     ctx.constant(0.0, torch.float32),
                                                     ctx.constant(-1.0, torch.float32)])])
    _, positions = ctx.add("TopK", [scores, ints(ctx, [count])], num_outputs=2, axis=0, largest=1, sorted=1)
    return positions


def _masked(ctx: ConversionContext, args: BoundArgs, x: str, position: int, mask: torch.fx.Node) -> str:
    """``x[..., mask, ...]`` with a static result shape: the mask's dims merged, the True positions gathered."""
    shape, span = [_known(size) for size in args.meta("self").shape], mask.meta["val"].dim()
    merged = reshape(ctx, x, [*shape[:position], math.prod(shape[position:position + span]), *shape[position + span:]])
    count = _known(out_meta(args.node).shape[position])
    return ctx.add("Gather", [merged, mask_positions(ctx, mask, count)], axis=position)
