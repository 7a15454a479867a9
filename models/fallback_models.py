"""Small hand-written models built to exercise PyTorch fallback and the edges of a partition.

``torch.lgamma`` stands in for "an op TensorRT cannot run": it has no ONNX/TensorRT converter, so
each lgamma forces a cut. The models place such cuts where partitioners go wrong: between
independent branches, inside a residual block, next to multi-output ops, and behind non-tensor
inputs/outputs (tuples, dicts, lists). Inputs are positive wherever lgamma reads them, so results
stay finite and comparable.
"""

from __future__ import annotations

import torch
from torch import nn

from .registry import ZooEntry, make_nontrivial, register, seeded

__all__ = [
    "DictOutput",
    "FALLBACK_ZOO",
    "ListInput",
    "ModuleFallback",
    "MultiOutputOps",
    "ResidualUnsupported",
    "SeedLgamma",
    "TupleOutput",
]


def _positive(*shape: int) -> torch.Tensor:
    """Values in [0.5, 2.5): safe for lgamma and for division."""
    return torch.rand(*shape) * 2 + 0.5


def _conv_bn_relu(channels: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels), nn.ReLU())


class SeedLgamma(nn.Module):
    """Supported and unsupported ops interleaved, all feeding one ``cat``.

    A naive partitioner makes five segments here; a good one groups the three supported ops.
    """

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        add = x + y
        xl = torch.lgamma(x)
        mul = x * y
        yl = torch.lgamma(y)
        div = x / y
        dl = torch.lgamma(div)
        return torch.cat([xl, yl, dl, add, mul], 0)


class ResidualUnsupported(nn.Module):
    """conv-bn-relu residual block with an unsupported op between its two convolutions.

    The skip connection crosses the fallback region, so the tensor ``x`` must flow from the first
    TensorRT segment, around the PyTorch segment, into the second.
    """

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.stem = _conv_bn_relu(channels)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        h = torch.relu(self.bn1(self.conv1(x)))
        h = torch.lgamma(h + 1.0)  # relu output >= 0, so the argument is >= 1
        h = self.bn2(self.conv2(h))
        return torch.relu(h + x)


class TupleOutput(nn.Module):
    """Returns a tuple whose elements come from different sides of the fallback op."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.linear(x)
        g = torch.lgamma(torch.sigmoid(h) + 0.5)
        return h, g, h * g


class DictOutput(nn.Module):
    """Returns a dict (the output pytree must survive partitioning with its keys)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Linear(16, 32)
        self.head = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        features = torch.relu(self.features(x))
        logits = self.head(torch.lgamma(features + 1.0))
        return {"logits": logits, "features": features}


class ListInput(nn.Module):
    """``forward`` takes a list of tensors (the input pytree must be flattened and rebuilt)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, xs: list[torch.Tensor]) -> torch.Tensor:
        total = self.proj(xs[0]) + xs[1]
        return torch.lgamma(xs[2]) * total + xs[1]


class MultiOutputOps(nn.Module):
    """Multi-output ops (max with dim, topk, split) whose results are used on both sides of a cut.

    Some results (indices) are int64, so int64 tensors cross segment boundaries as well.
    """

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        values, indices = torch.max(x, dim=1)
        top_values, top_indices = torch.topk(x, k=3, dim=1)
        first, second = torch.split(x, [2, x.shape[1] - 2], dim=1)
        unsupported = torch.lgamma(values + top_values[:, 0]) + first.sum(dim=1)
        mixed = unsupported * second.mean(dim=1) + indices.to(x.dtype)
        return mixed, top_indices + indices.unsqueeze(1), torch.lgamma(second) + top_values.mean()


class ModuleFallback(nn.Module):
    """A conv net whose middle submodule ``block`` is meant to be forced to PyTorch by name."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, channels, 3, padding=1), nn.ReLU())
        self.block = nn.Sequential(_conv_bn_relu(channels), _conv_bn_relu(channels))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        stem = self.stem(x)
        return self.head(self.block(stem) + stem)


@seeded()
def _seed_lgamma():
    return SeedLgamma(), (_positive(3, 4), _positive(3, 4))


@seeded()
def _residual_unsupported():
    inputs = (torch.randn(1, 8, 16, 16),)
    return make_nontrivial(ResidualUnsupported(), inputs), inputs


@seeded()
def _tuple_output():
    inputs = (torch.randn(2, 16),)
    return make_nontrivial(TupleOutput(), inputs), inputs


@seeded()
def _dict_output():
    inputs = (torch.randn(2, 16),)
    return make_nontrivial(DictOutput(), inputs), inputs


@seeded()
def _list_input():
    inputs = ([torch.randn(2, 8), torch.randn(2, 8), _positive(2, 8)],)
    return make_nontrivial(ListInput(), inputs), inputs


@seeded()
def _multi_output_ops():
    return MultiOutputOps(), (_positive(4, 6),)


@seeded()
def _module_fallback():
    inputs = (torch.randn(1, 3, 16, 16),)
    return make_nontrivial(ModuleFallback(), inputs), inputs


_ENTRIES = (
    ZooEntry(
        "seed_lgamma", _seed_lgamma, ("fallback",), fp32_nodes={"bf16": ["div"]},
        precision_notes="bf16: x / y rounded to bf16 lands on a pole of the lgamma that reads it (inf where float64 is "
                        "finite, eager in bf16 too); found by `trtcheck precision seed_lgamma --precision bf16`",
    ),
    ZooEntry("residual_unsupported", _residual_unsupported, ("fallback",)),
    ZooEntry("tuple_output", _tuple_output, ("fallback", "pytree")),
    ZooEntry("dict_output", _dict_output, ("fallback", "pytree")),
    ZooEntry("list_input", _list_input, ("fallback", "pytree")),
    ZooEntry("multi_output_ops", _multi_output_ops, ("fallback",)),
    ZooEntry("module_fallback", _module_fallback, ("fallback", "module_fallback"), fallback_module="block"),
)

FALLBACK_ZOO: tuple[str, ...] = tuple(register(entry).name for entry in _ENTRIES)
