"""Tensor factories with static arguments: full/zeros/ones(_like), scalar_tensor, arange.

Their values are known when converting, so they become a broadcast scalar constant (one element in
the model, not a full-size initializer) or, for arange, the constant itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from trtcheck.conversion.arguments import BoundArgs
from trtcheck.conversion.ops._common import all_ints, aten, converter, ints, out_meta, refuse
from trtcheck.conversion.registry import Refusal

if TYPE_CHECKING:  # pragma: no cover - the context imports the registry, not vice versa
    from trtcheck.conversion.context import ConversionContext


def _fill_value(args: BoundArgs) -> Any:
    name = args.node.target._opname
    if name in ("zeros", "zeros_like", "new_zeros"):
        return 0
    if name in ("ones", "ones_like", "new_ones"):
        return 1
    return args["s"] if "s" in args else args.fill_value  # scalar_tensor / full(_like) / new_full


def _strided_static(args: BoundArgs) -> bool | Refusal:
    if args.layout not in (None, torch.strided):
        return refuse(f"layout {args.layout} is not torch.strided")
    if "size" in args and not all_ints(args.size):
        return refuse(f"size {args.size!r} is not all plain ints")
    return True


def _factory_ok(args: BoundArgs) -> bool | Refusal:
    """Strided layout, plain-number fill values, static sizes."""
    verdict = _strided_static(args)
    if not verdict:
        return verdict
    if not isinstance(_fill_value(args), (int, float, bool)):
        return refuse(f"fill value {_fill_value(args)!r} is not a number")
    return True


_FACTORIES = (
    aten.full.default, aten.full_like.default, aten.zeros.default, aten.ones.default,
    aten.zeros_like.default, aten.ones_like.default, aten.new_zeros.default, aten.new_ones.default,
    aten.new_full.default, aten.scalar_tensor.default,
)


@converter(*_FACTORIES, check=_factory_ok)
def _full(ctx: ConversionContext, args: BoundArgs) -> str:
    meta = out_meta(args.node)
    value = ctx.constant(_fill_value(args), meta.dtype)
    if meta.dim() == 0:
        return value
    return ctx.add("Expand", [value, ints(ctx, meta.shape)])


def _arange_ok(args: BoundArgs) -> bool | Refusal:
    verdict = _strided_static(args)
    if not verdict:
        return verdict
    for name in ("start", "end", "step"):
        if name in args and not isinstance(args[name], (int, float)):
            return refuse(f"{name} {args[name]!r} is not a number")
    return True


@converter(aten.arange.default, aten.arange.start, aten.arange.start_step, check=_arange_ok)
def _arange(ctx: ConversionContext, args: BoundArgs) -> str:
    bounds = [args[name] for name in ("start", "end", "step") if name in args]
    values = torch.arange(*bounds, dtype=out_meta(args.node).dtype)
    return ctx.constant(values, values.dtype)
