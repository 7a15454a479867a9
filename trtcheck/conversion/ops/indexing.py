"""Gathers: index_select, gather and the single-tensor case of advanced indexing.

All are ``dynamic``: they read axes only (index_select of a 0-d tensor reshapes to its output, which a
0-d input's at most one-element index makes static).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from trtcheck.conversion.arguments import BoundArgs
from trtcheck.conversion.ops._common import INT, aten, converter, out_meta, refuse
from trtcheck.conversion.ops.shape import reshape
from trtcheck.conversion.registry import Refusal

if TYPE_CHECKING:  # pragma: no cover - the context imports the registry, not vice versa
    from trtcheck.conversion.context import ConversionContext

_INDEX_DTYPES = INT


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
    axis = args.dim % max(args.meta("self").dim(), 1)
    return ctx.add("GatherElements", [ctx.name(args.self), ctx.name(args.index)], axis=axis)


def _single_index(args: BoundArgs) -> tuple[int, torch.fx.Node] | None:
    """(axis, index) when exactly one integer index tensor is given, e.g. ``x[:, idx]``."""
    given = [(axis, index) for axis, index in enumerate(args.indices) if index is not None]
    if len(given) != 1 or not _index_dtype_ok(given[0][1]):
        return None
    return given[0]


def _single_index_ok(args: BoundArgs) -> bool | Refusal:
    if _single_index(args) is not None:
        return True
    return refuse("indices are not exactly one int32/int64 index tensor (several, or a boolean mask)")


@converter(aten.index.Tensor, check=_single_index_ok, dynamic=True)
def _index(ctx: ConversionContext, args: BoundArgs) -> str:
    """With one index tensor, advanced indexing is a Gather along that axis (negative indices wrap in
    both). Several index tensors, or boolean masks, are left to PyTorch."""
    axis, index = _single_index(args)
    return ctx.add("Gather", [ctx.name(args.self), ctx.name(index)], axis=axis)
