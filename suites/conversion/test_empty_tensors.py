"""An empty slice is a valid value and a ``cat`` with an empty input is the identity: both convert (issue 52: partial
rotary embeddings make an empty pass-through half when the rotary dimension is the whole head, and the refusal of
the empty ``slice`` and ``cat`` split Hugging Face phi3 into 5 segments and timm's deepseek_vit_412m into 65)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import trtcheck
from trtcheck.partitioning.reasons import Target

ONE = trtcheck.Settings(min_block_size=1)


class PartialRotary(nn.Module):
    """Rotate the first ``rotary`` features of each head, pass the rest through (phi3's, qwen3-vit's pattern)."""

    def __init__(self, rotary: int) -> None:
        super().__init__()
        self.rotary = rotary
        self.register_buffer("cos", torch.rand(16, rotary))
        self.register_buffer("sin", torch.rand(16, rotary))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rotated, passed = x[..., : self.rotary], x[..., self.rotary :]
        half = self.rotary // 2
        turned = torch.cat([-rotated[..., half:], rotated[..., :half]], dim=-1)
        return torch.cat([rotated * self.cos + turned * self.sin, passed], dim=-1)


@pytest.mark.parametrize("rotary", [64, 32], ids=["whole-head-empty-pass-through", "half-head"])
def test_a_partial_rotary_embedding_is_one_engine_whatever_its_rotary_dimension(rotary):
    model, inputs = PartialRotary(rotary).eval(), (torch.randn(2, 4, 16, 64),)
    report = trtcheck.verify(model, inputs, ONE, backend="onnxruntime")
    torch_nodes = [n.name for s in report.partition.segments if s.target is Target.TORCH for n in s.nodes]
    assert report.partition.summary().startswith("1 segment: 1 TensorRT") and torch_nodes == [], report.partition.explain()


def test_a_cat_of_empty_inputs_only_stays_refused_saying_why():
    class AllEmpty(nn.Module):
        def forward(self, x):
            return torch.cat([x[:, :0], x[:, 5:]], dim=1) + 1

    partition = trtcheck.partition(AllEmpty(), (torch.randn(3, 5),), ONE)
    assert "every input is empty" in partition.explain(), partition.explain()
