"""Models compiled with dynamic sizes (``torch.export.Dim``): one engine must serve every size in range.

Each entry declares ``dynamic_shapes`` for its example inputs; the matrix compiles it once with them and
verifies it at the smallest, the largest and random sizes in range, not only at the example's.
"""

from __future__ import annotations

import torch
import torchvision.models
from torch import nn
from torch.export import Dim

from .registry import ZooEntry, make_nontrivial, register, seeded

__all__ = ["DYNAMIC_ZOO"]

# 112 x 112 images keep the largest batch (32) cheap enough for the default matrix on 2 cores; resnet18's
# adaptive pooling makes the layer mix the same as at 224.
_IMAGE = 112


@seeded()
def _resnet18_dynamic_batch() -> tuple[nn.Module, tuple[torch.Tensor]]:
    model = torchvision.models.resnet18(weights=None)
    make_nontrivial(model, (torch.randn(4, 3, _IMAGE, _IMAGE),))
    return model, (torch.randn(4, 3, _IMAGE, _IMAGE),)


@seeded()
def _transformer_encoder_dynamic_seq() -> tuple[nn.Module, tuple[torch.Tensor]]:
    layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True)
    make_nontrivial(layer, (torch.randn(2, 16, 64),))
    return layer, (torch.randn(2, 16, 64),)


_ENTRIES = (
    ZooEntry(
        "resnet18_dynamic_batch",
        _resnet18_dynamic_batch,
        ("dynamic", "cnn"),
        fallback_module="layer1.0",
        dynamic_shapes=({0: Dim("batch", min=1, max=32)},),
    ),
    ZooEntry(
        "transformer_encoder_dynamic_seq",
        _transformer_encoder_dynamic_seq,
        ("dynamic", "transformer"),
        fallback_module="linear1",
        dynamic_shapes=({1: Dim("seq", min=2, max=128)},),
    ),
)

DYNAMIC_ZOO: tuple[str, ...] = tuple(register(entry).name for entry in _ENTRIES)
