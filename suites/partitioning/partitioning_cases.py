"""Models and support predicates shared by the partitioning tests."""

from __future__ import annotations

import torch

from trtcheck_zoo.fallback_models import SeedLgamma as SeedModel

aten = torch.ops.aten

__all__ = ["SeedModel", "no_lgamma"]


def no_lgamma(node: torch.fx.Node) -> bool:
    """Support predicate: everything is convertible except lgamma, as in the seed."""
    return node.target not in (aten.lgamma.default, aten.digamma.default)
