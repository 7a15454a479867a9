"""Models and support predicates shared by the partitioning tests."""

from __future__ import annotations

import torch

aten = torch.ops.aten


def no_lgamma(node: torch.fx.Node) -> bool:
    """Support predicate: everything is convertible except lgamma, as in the seed."""
    return node.target not in (aten.lgamma.default, aten.digamma.default)


class SeedModel(torch.nn.Module):
    """The seed's dependency-aware example (Partitioning.SegmentModelWithDependencyAwareness)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        add = x + y
        x_lgamma = torch.lgamma(x)
        mul = x * y
        y_lgamma = torch.lgamma(y)
        div = x / y
        div_lgamma = torch.lgamma(div)
        return torch.cat([x_lgamma, y_lgamma, div_lgamma, add, mul], 0)
