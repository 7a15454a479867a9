"""Tensor factories with static arguments: full/zeros/ones(_like), scalar_tensor, arange.

Their values are known when converting, so they become a broadcast scalar constant (one element in
the model, not a full-size initializer) or, for arange, the constant itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from trtcheck.converters._common import all_ints, aten, converter, ints, out_meta

if TYPE_CHECKING:  # pragma: no cover - the context imports the registry, not vice versa
    from trtcheck.conversion import ConversionContext


def _fill_value(node: torch.fx.Node) -> Any:
    name = node.target._opname
    if name in ("zeros", "zeros_like", "new_zeros"):
        return 0
    if name in ("ones", "ones_like", "new_ones"):
        return 1
    if name in ("full", "new_full"):
        return node.args[2] if name == "new_full" else node.args[1]
    return node.args[1] if name == "full_like" else node.args[0]  # scalar_tensor


def _factory_ok(node: torch.fx.Node) -> bool:
    """Strided layout, plain-number fill values, static sizes."""
    size_args = [a for a in node.args if isinstance(a, (list, tuple))]
    return (
        node.kwargs.get("layout") in (None, torch.strided)
        and all_ints(size_args)
        and isinstance(_fill_value(node), (int, float, bool))
    )


_FACTORIES = (
    aten.full.default, aten.full_like.default, aten.zeros.default, aten.ones.default,
    aten.zeros_like.default, aten.ones_like.default, aten.new_zeros.default, aten.new_ones.default,
    aten.new_full.default, aten.scalar_tensor.default,
)


@converter(*_FACTORIES, check=_factory_ok)
def _full(ctx: ConversionContext, node: torch.fx.Node) -> str:
    meta = out_meta(node)
    value = ctx.constant(_fill_value(node), meta.dtype)
    if meta.dim() == 0:
        return value
    return ctx.add("Expand", [value, ints(ctx, meta.shape)])


@converter(aten.arange.default, aten.arange.start, aten.arange.start_step,
           check=lambda n: _factory_ok(n) and all(isinstance(a, (int, float)) for a in n.args))
def _arange(ctx: ConversionContext, node: torch.fx.Node) -> str:
    values = torch.arange(*node.args, dtype=out_meta(node).dtype)
    return ctx.constant(values, values.dtype)


