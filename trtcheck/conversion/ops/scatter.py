"""Scatters: scatter (src / value), scatter_add, scatter_reduce (sum / prod) and index_put.

``scatter*`` are ONNX ScatterElements along ``dim`` (``reduction="add"``/``"mul"`` from opset 16); PyTorch
lets ``index`` be smaller than ``src`` and reads ``src`` only where ``index`` has elements, while ONNX
wants ``updates`` of ``index``'s shape, so ``src`` is sliced to it. ``index_put`` with every index a tensor
for the leading dims is ScatterND (``reduction="add"`` for ``accumulate=True``): the index tensors are
broadcast together, wrapped where negative (PyTorch counts them from the end) and stacked on a last axis,
and ``values`` is expanded to the shape of the rows it writes.

What is refused, each with its reason: scatter_reduce ``mean`` (ONNX has no mean reduction),
``amax``/``amin`` (opset 17's ScatterElements reduces by add/mul only; max/min need opset 18), and
``include_self=False`` (ONNX always reduces into the existing values); index_put with a ``None`` index (a
full slice) or a boolean mask; 0-d inputs; any reduction (scatter_add, scatter_reduce, index_put with
``accumulate=True``) of float16/bfloat16 data, which ONNX Runtime cannot reduce and which PyTorch rounds
at every update. Bool data is refused too: TensorRT's ScatterElements and
ScatterND take no bool. As in PyTorch, where an index repeats without a reduction, which write wins is
unspecified in ONNX (and in TensorRT); PyTorch's CPU kernel and ONNX Runtime both keep the last one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from trtcheck.conversion.arguments import BoundArgs
from trtcheck.conversion.ops._common import (
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
from trtcheck.conversion.registry import Refusal

if TYPE_CHECKING:  # pragma: no cover - the context imports the registry, not vice versa
    from trtcheck.conversion.context import ConversionContext

_ELEMENTS_DTYPES = (NUMERIC | INT) & onnx_accepts("ScatterElements")
_ND_DTYPES = (NUMERIC | INT) & onnx_accepts("ScatterND")
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
               else "opset 17's ScatterElements reduces by add or mul only")
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
    if not indices or len(indices) > rank:
        return refuse(f"{len(indices)} indices for a rank-{rank} self")
    for position, index in enumerate(indices):
        if not isinstance(index, torch.fx.Node):
            return refuse(f"indices[{position}] is {index!r}: only index tensors for every leading dim convert")
        if index.meta["val"].dtype not in INT:
            return refuse(f"indices[{position}] is a {index.meta['val'].dtype} tensor, not int32/int64 positions")
    if args.accumulate and args.meta("self").dtype not in _REDUCED_DTYPES:
        return refuse(f"accumulate=True on {args.meta('self').dtype} data: ScatterND's add reduction takes "
                      "float32, int32 and int64 only")
    try:
        torch.broadcast_shapes(*(i.meta["val"].shape for i in indices))
    except RuntimeError:
        return refuse("the index tensors do not broadcast together")
    return True


def _wrapped(ctx: ConversionContext, index: str, size: int) -> str:
    """``index`` with negative positions counted from the end (``size`` added), as PyTorch does."""
    zero, size_ = ctx.constant(0, torch.int64), ctx.constant(size, torch.int64)
    return ctx.add("Where", [ctx.add("Less", [index, zero]), ctx.add("Add", [index, size_]), index])


@converter(aten.index_put.default, dtypes=_ND_DTYPES, outputs=_ND_DTYPES, constants=("accumulate",),
           check=_index_put_ok)
def _index_put(ctx: ConversionContext, args: BoundArgs) -> str:
    self_meta = args.meta("self")
    dtype = out_meta(args.node).dtype
    indices: list[Any] = list(args.indices)
    batch = list(torch.broadcast_shapes(*(i.meta["val"].shape for i in indices)))
    columns = []
    for axis, index in enumerate(indices):
        name = cast(ctx, ctx.name(index), index.meta["val"].dtype, torch.int64)
        name = _wrapped(ctx, name, self_meta.shape[axis])
        if list(index.meta["val"].shape) != batch:
            name = ctx.add("Expand", [name, ints(ctx, batch)])
        columns.append(ctx.add("Unsqueeze", [name, ints(ctx, [len(batch)])]))
    stacked = columns[0] if len(columns) == 1 else ctx.add("Concat", columns, axis=len(batch))
    rows = batch + list(self_meta.shape[len(indices):])
    values = cast(ctx, ctx.name(args["values"]), dtype_of(args["values"]), dtype)
    if list(args.meta("values").shape) != rows:
        values = ctx.add("Expand", [values, ints(ctx, rows)])
    data = cast(ctx, ctx.name(args.self), self_meta.dtype, dtype)
    return ctx.add("ScatterND", [data, stacked, values], reduction="add" if args.accumulate else "none")
