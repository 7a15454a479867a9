"""Scatters: scatter (src / value), scatter_add, scatter_reduce (sum / prod) and index_put.

``scatter*`` are ONNX ScatterElements along ``dim`` (``reduction="add"``/``"mul"`` from opset 16); PyTorch
lets ``index`` be smaller than ``src`` and reads ``src`` only where ``index`` has elements, while ONNX
wants ``updates`` of ``index``'s shape, so ``src`` is sliced to it.

``index_put`` with index tensors is ScatterND (``reduction="add"`` for ``accumulate=True``): the index
tensors are broadcast together, wrapped where negative (PyTorch counts them from the end) and stacked on a
last axis; the indexed dims are moved to the front (Transpose, and back after) when ``None`` entries (full
slices) come before or between them, and ``values`` is expanded to the shape ``self[indices]`` has (PyTorch's
rule: the index shape in place of adjacent indexed dims, in front when a full slice separates them) and
laid out as the rows ScatterND writes. Bool data is scattered as int32 (TensorRT's ScatterND takes no bool;
accumulating, any sum that is not 0 is True, PyTorch's ``|``). A bool mask that is the only index tensor
writes each True position at most once, so it is a Where over ``self``'s shape, when ``values`` does not
vary along the selection (the usual ``x[mask] = v``); values per True element need their run-time positions.

What is refused, each with its reason: scatter_reduce ``mean`` (ONNX has no mean reduction),
``amax``/``amin`` (not converted yet: ScatterElements' max/min reductions, from opset 18), and
``include_self=False`` (ONNX always reduces into the existing values); index_put with a bool mask beside
other index tensors or values per True element; 0-d inputs; any reduction (scatter_add, scatter_reduce,
index_put with int indices and ``accumulate=True``) of float16/bfloat16 data, which ONNX Runtime cannot
reduce and which PyTorch rounds at every update. Bool data is refused by scatter*: TensorRT's
ScatterElements takes no bool. As in PyTorch, where an index repeats without a reduction, which write wins
is unspecified in ONNX (and in TensorRT); PyTorch's CPU kernel and ONNX Runtime both keep the last one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.fx

from trtcheck.conversion.arguments import BoundArgs
from trtcheck.conversion.ops._common import (
    BOOL,
    INT,
    NUMERIC,
    aten,
    cast,
    converter,
    dtype_of,
    ints,
    onnx_accepts,
    out_meta,
    refuse,
)
from trtcheck.conversion.ops.indexing import index_list_refusal, index_tensors, indexed_shape, separated, wrapped
from trtcheck.conversion.ops.shape import reshape
from trtcheck.conversion.registry import Refusal

if TYPE_CHECKING:  # pragma: no cover - the context imports the registry, not vice versa
    from trtcheck.conversion.context import ConversionContext

_ELEMENTS_DTYPES = (NUMERIC | INT) & onnx_accepts("ScatterElements")
_ND_DTYPES = (NUMERIC | INT) & onnx_accepts("ScatterND")
# index_put also takes bool data: scattered as int32 (ScatterND takes no bool in TensorRT), or a Where (masks).
_PUT_DTYPES = _ND_DTYPES | BOOL
# ONNX Runtime's CPU ScatterElements/ScatterND reduce float32, int32 and int64 only (no float16/bfloat16);
# reducing half-precision data in float32 would round once where PyTorch rounds at every update.
_REDUCED_DTYPES = frozenset({torch.float32, torch.int32, torch.int64}) & _ELEMENTS_DTYPES & _ND_DTYPES
# scatter_reduce's reduce -> ScatterElements' reduction (include_self=True only)
_REDUCTIONS = {"sum": "add", "prod": "mul"}


def _rank_ok(args: BoundArgs) -> bool | Refusal:
    if args.meta("self").dim() == 0:
        return refuse("self is 0-d; ONNX ScatterElements takes rank >= 1")
    if args.meta("index").dim() != args.meta("self").dim():
        return refuse(f"index has rank {args.meta('index').dim()}, self {args.meta('self').dim()}")
    return True


def _scatter_reduce_ok(args: BoundArgs) -> bool | Refusal:
    if args.reduce not in _REDUCTIONS:
        why = ("ONNX has no mean reduction" if args.reduce == "mean"
               else "trtcheck converts ScatterElements' add and mul reductions only")
        return refuse(f"reduce={args.reduce!r}: {why}")
    if not args.include_self:
        return refuse("include_self=False: ONNX ScatterElements always reduces into self's values")
    return _rank_ok(args)


def _updates(ctx: ConversionContext, args: BoundArgs, dtype: torch.dtype) -> str:
    """``src`` sliced to ``index``'s shape (or ``value`` filled to it), as ``dtype``."""
    shape = list(args.meta("index").shape)
    if "value" in args:
        return ctx.add("Expand", [ctx.constant(args.value, dtype), ints(ctx, shape)])
    src = cast(ctx, ctx.name(args.src), dtype_of(args.src), dtype)
    if list(args.meta("src").shape) != shape:
        axes = list(range(len(shape)))
        src = ctx.add("Slice", [src, ints(ctx, [0] * len(shape)), ints(ctx, shape), ints(ctx, axes)])
    return src


def _scatter_elements(ctx: ConversionContext, args: BoundArgs, reduction: str) -> str:
    dtype = out_meta(args.node).dtype
    axis = args.dim % args.meta("self").dim()
    data = cast(ctx, ctx.name(args.self), dtype_of(args.self), dtype)
    return ctx.add("ScatterElements", [data, ctx.name(args.index), _updates(ctx, args, dtype)], axis=axis,
                   reduction=reduction)


@converter(aten.scatter.src, aten.scatter.value, dtypes=_ELEMENTS_DTYPES, outputs=_ELEMENTS_DTYPES,
           constants=("dim", "value"), check=_rank_ok)
def _scatter(ctx: ConversionContext, args: BoundArgs) -> str:
    return _scatter_elements(ctx, args, "none")


@converter(aten.scatter_add.default, dtypes=_REDUCED_DTYPES, outputs=_REDUCED_DTYPES, constants=("dim",),
           check=_rank_ok)
def _scatter_add(ctx: ConversionContext, args: BoundArgs) -> str:
    return _scatter_elements(ctx, args, "add")


@converter(aten.scatter_reduce.two, dtypes=_REDUCED_DTYPES, outputs=_REDUCED_DTYPES,
           constants=("dim", "reduce", "include_self"), check=_scatter_reduce_ok)
def _scatter_reduce(ctx: ConversionContext, args: BoundArgs) -> str:
    return _scatter_elements(ctx, args, _REDUCTIONS[args.reduce])


# ---- index_put ------------------------------------------------------------------------------------------


def _index_put_ok(args: BoundArgs) -> bool | Refusal:
    indices = list(args.indices)
    rank = args.meta("self").dim()
    if rank == 0:
        return refuse("self is 0-d")
    refusal = index_list_refusal(indices, rank)
    if refusal is not None:
        return refusal
    given = index_tensors(indices)
    masks = [(position, index) for position, index in given if index.meta["val"].dtype in BOOL]
    if masks:
        return _mask_put_ok(args, given, *masks[0])
    dtype = args.meta("self").dtype
    if args.accumulate and dtype not in _REDUCED_DTYPES | BOOL:
        return refuse(f"accumulate=True on {dtype} data: ScatterND's add reduction takes "
                      "float32, int32 and int64 only")
    try:
        torch.broadcast_shapes(*(index.meta["val"].shape for _, index in given))
    except RuntimeError:
        return refuse("the index tensors do not broadcast together")
    result = _indexed_shape(args)
    if list(torch.broadcast_shapes(args.meta("values").shape, result)) != result:
        return refuse(f"values {list(args.meta('values').shape)} does not broadcast to the indexed shape {result}")
    return True


def _mask_put_ok(args: BoundArgs, given: list[tuple[int, torch.fx.Node]], position: int, mask: torch.fx.Node
                 ) -> bool | Refusal:
    """A bool mask converts as a Where when it is the only index tensor and ``values`` does not vary along
    the selection (one value per True element, in order, needs the mask's positions: a run-time count)."""
    if len(given) > 1:
        return refuse(f"indices[{position}] is a bool mask beside other index tensors: its count of True elements "
                      "would broadcast against them")
    span = mask.meta["val"].dim()
    if span == 0:
        return refuse(f"indices[{position}] is a 0-d bool mask (it adds a dim of size 0 or 1)")
    values, result_rank = list(args.meta("values").shape), args.meta("self").dim() - span + 1
    if len(values) > result_rank:
        return refuse(f"values {values} has more dims than the indexed shape (rank {result_rank})")
    along = ([1] * (result_rank - len(values)) + values)[position]
    if along != 1:
        return refuse(f"values {values} has size {along} along the mask's selection: one value per True element, "
                      "in order, needs the positions of the True elements, known only at run time")
    return True


def _indexed_shape(args: BoundArgs) -> list[int]:
    """The shape of ``self[indices]`` (int indices), which ``values`` broadcasts to."""
    return indexed_shape(list(args.meta("self").shape), index_tensors(args.indices))


def _inverse(order: list[int]) -> list[int]:
    return sorted(range(len(order)), key=order.__getitem__)


@converter(aten.index_put.default, dtypes=_PUT_DTYPES, outputs=_PUT_DTYPES, constants=("accumulate",),
           check=_index_put_ok)
def _index_put(ctx: ConversionContext, args: BoundArgs) -> str:
    self_meta = args.meta("self")
    given = index_tensors(args.indices)
    if given[0][1].meta["val"].dtype in BOOL:
        return _masked_put(ctx, args, *given[0])
    dtype = out_meta(args.node).dtype
    compute = torch.int32 if dtype in BOOL else dtype  # ScatterND takes no bool: 0/1 in int32, any sum != 0 is True
    axes = [axis for axis, _ in given]
    order = axes + [axis for axis in range(self_meta.dim()) if axis not in axes]  # indexed dims first, as ScatterND wants
    batch = list(torch.broadcast_shapes(*(index.meta["val"].shape for _, index in given)))
    columns = []
    for axis, index in given:
        name = cast(ctx, ctx.name(index), index.meta["val"].dtype, torch.int64)
        name = wrapped(ctx, name, ctx.constant(self_meta.shape[axis], torch.int64))
        if list(index.meta["val"].shape) != batch:
            name = ctx.add("Expand", [name, ints(ctx, batch)])
        columns.append(ctx.add("Unsqueeze", [name, ints(ctx, [len(batch)])]))
    stacked = columns[0] if len(columns) == 1 else ctx.add("Concat", columns, axis=len(batch))
    result = _indexed_shape(args)
    values = cast(ctx, ctx.name(args["values"]), dtype_of(args["values"]), compute)
    if list(args.meta("values").shape) != result:
        values = ctx.add("Expand", [values, ints(ctx, result)])
    if not separated(axes) and axes[0] > 0:  # rows of the update: the index shape first, then the other dims
        first = axes[0]
        rows = [*range(first, first + len(batch)), *range(first), *range(first + len(batch), len(result))]
        values = ctx.add("Transpose", [values], perm=rows)
    data = cast(ctx, ctx.name(args.self), self_meta.dtype, compute)
    moved = order != sorted(order)
    if moved:
        data = ctx.add("Transpose", [data], perm=order)
    out = ctx.add("ScatterND", [data, stacked, values], reduction="add" if args.accumulate else "none")
    if moved:
        out = ctx.add("Transpose", [out], perm=_inverse(order))
    return cast(ctx, out, compute, dtype)


def _masked_put(ctx: ConversionContext, args: BoundArgs, position: int, mask: torch.fx.Node) -> str:
    """``self[..., mask, ...] = values`` (``+=`` when accumulating) as a Where over self's shape: the mask's
    True positions are distinct, so each element is written (or added to) once. Bool data is selected as 0/1
    int32 (ONNX Runtime's CPU Where has no bool kernel) and cast back: a sum that is not 0 is True."""
    self_meta, dtype = args.meta("self"), out_meta(args.node).dtype
    compute = torch.int32 if dtype in BOOL else dtype
    span = mask.meta["val"].dim()
    trailing = self_meta.dim() - position - span
    where = reshape(ctx, ctx.name(mask), [*mask.meta["val"].shape, *[1] * trailing])
    values = list(args.meta("values").shape)
    values = [1] * (self_meta.dim() - span + 1 - len(values)) + values  # as self[mask]'s shape
    spread = reshape(ctx, cast(ctx, ctx.name(args["values"]), dtype_of(args["values"]), compute),
                     [*values[:position], *[1] * span, *values[position + 1:]])
    x = cast(ctx, ctx.name(args.self), self_meta.dtype, compute)
    if args.accumulate:
        spread = ctx.add("Add", [x, spread])
    return cast(ctx, ctx.add("Where", [where, spread, x]), compute, dtype)
