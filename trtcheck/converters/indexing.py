"""Gathers: index_select, gather and the single-tensor case of advanced indexing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from trtcheck.converters._common import INT, aten, converter

if TYPE_CHECKING:  # pragma: no cover - the context imports the registry, not vice versa
    from trtcheck.conversion import ConversionContext

_INDEX_DTYPES = INT


def _index_dtype_ok(index: Any) -> bool:
    return isinstance(index, torch.fx.Node) and index.meta["val"].dtype in _INDEX_DTYPES


@converter(aten.index_select.default, check=lambda n: _index_dtype_ok(n.args[2]))
def _index_select(ctx: ConversionContext, node: torch.fx.Node) -> str:
    axis = node.args[1] % max(node.args[0].meta["val"].dim(), 1)
    return ctx.add("Gather", [ctx.name(node.args[0]), ctx.name(node.args[2])], axis=axis)


@converter(aten.gather.default,
           check=lambda n: _index_dtype_ok(n.args[2]) and not n.kwargs.get("sparse_grad", False))
def _gather(ctx: ConversionContext, node: torch.fx.Node) -> str:
    axis = node.args[1] % max(node.args[0].meta["val"].dim(), 1)
    return ctx.add("GatherElements", [ctx.name(node.args[0]), ctx.name(node.args[2])], axis=axis)


def _single_index(node: torch.fx.Node) -> tuple[int, torch.fx.Node] | None:
    """(axis, index) when exactly one integer index tensor is given, e.g. ``x[:, idx]``."""
    given = [(axis, index) for axis, index in enumerate(node.args[1]) if index is not None]
    if len(given) != 1 or not _index_dtype_ok(given[0][1]):
        return None
    return given[0]


@converter(aten.index.Tensor, check=lambda n: _single_index(n) is not None)
def _index(ctx: ConversionContext, node: torch.fx.Node) -> str:
    """With one index tensor, advanced indexing is a Gather along that axis (negative indices wrap in
    both). Several index tensors, or boolean masks, are left to PyTorch."""
    axis, index = _single_index(node)
    return ctx.add("Gather", [ctx.name(node.args[0]), ctx.name(index)], axis=axis)
