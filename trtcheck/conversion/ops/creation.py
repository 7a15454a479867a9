"""Tensor factories: full/zeros/ones(_like), scalar_tensor, arange.

Their values are known when converting, so they become a broadcast scalar constant (one element in
the model, not a full-size initializer) or, for arange, the constant itself. All are ``dynamic``: a
size may be a SymInt node (``full([sym_size_int, 2], 3.0)``) or, for the ``*_like`` ones, the input's
run-time shape, which Expand takes as a computed shape; an arange with a SymInt bound is an ONNX Range.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from trtcheck.conversion.arguments import BoundArgs, bind
from trtcheck.conversion.ops._common import aten, cast, converter, out_meta, refuse
from trtcheck.conversion.ops.shape import shape_like
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


def _strided(args: BoundArgs) -> bool | Refusal:
    """A dense tensor. (Sizes are ints or SymInt nodes: the shared check refused anything else.)"""
    if args.layout not in (None, torch.strided):
        return refuse(f"layout {args.layout} is not torch.strided")
    return True


def _factory_ok(args: BoundArgs) -> bool | Refusal:
    """Strided layout, plain-number fill values."""
    verdict = _strided(args)
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


@converter(*_FACTORIES, check=_factory_ok, dynamic=True)
def _full(ctx: ConversionContext, args: BoundArgs) -> str:
    meta = out_meta(args.node)
    value = ctx.constant(_fill_value(args), meta.dtype)
    if meta.dim() == 0:
        return value
    shape = ctx.shape_list(args.size) if "size" in args else shape_like(ctx, args.self)
    return ctx.add("Expand", [value, shape])


def fill_of(value: Any) -> torch.Tensor | None:
    """The value a factory node (``full_like(x, 0)``...) fills its tensor with, as a 0-d tensor of its dtype; None
    for anything else. Where an op broadcasts its operands anyway, the 0-d value serves as well as the full-size
    tensor, which an engine would otherwise fold into a full-size constant (bert_base's attention mask,
    ``where(mask, full_like(scores, 0), scores)``: 1.5 MiB of ONNX Runtime's memory per session)."""
    if not isinstance(value, torch.fx.Node) or value.op != "call_function" or value.target not in _FACTORIES:
        return None
    fill = _fill_value(bind(value))
    if not isinstance(fill, (int, float, bool)):
        return None
    return torch.full((), fill, dtype=out_meta(value).dtype)


# What ONNX Range computes in that TensorRT's Range layer takes too.
_RANGE_DTYPES = frozenset({torch.int32, torch.int64, torch.float32})


def _bounds(args: BoundArgs) -> list[Any]:
    return [args[name] for name in ("start", "end", "step") if name in args]


def _arange_ok(args: BoundArgs) -> bool | Refusal:
    verdict = _strided(args)
    if not verdict:
        return verdict
    for name in ("start", "end", "step"):  # a Node here is a SymInt: the shared check refused anything else
        if name in args and not isinstance(args[name], (int, float, torch.fx.Node)):
            return refuse(f"{name} {args[name]!r} is not a number")
    dtype = out_meta(args.node).dtype
    if any(isinstance(b, torch.fx.Node) for b in _bounds(args)) and dtype not in _RANGE_DTYPES:
        return refuse(f"a SymInt bound makes it an ONNX Range, which TensorRT computes in int32/int64/float32, not {dtype}")
    return True


@converter(aten.arange.default, aten.arange.start, aten.arange.start_step, check=_arange_ok, dynamic=True)
def _arange(ctx: ConversionContext, args: BoundArgs) -> str:
    """The values as a constant; with a SymInt bound, a Range computed at run time (same count and values:
    ``ceil((end - start) / step)`` elements ``start + i * step``)."""
    dtype = out_meta(args.node).dtype
    bounds = _bounds(args)
    if not any(isinstance(b, torch.fx.Node) for b in bounds):
        values = torch.arange(*bounds, dtype=dtype)
        return ctx.constant(values, values.dtype)
    start, end, step = ([0] if len(bounds) == 1 else []) + bounds + ([1] if len(bounds) < 3 else [])
    values = [cast(ctx, ctx.int_value(b), torch.int64, dtype) if isinstance(b, torch.fx.Node) else ctx.constant(b, dtype)
              for b in (start, end, step)]
    return ctx.add("Range", values)
