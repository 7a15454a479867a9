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


class ShiftedWindowMask(nn.Module):
    """swin3d's attention mask: regions of a zero map numbered by sliced assignment, where a window as large as the
    input makes some of the slices, their fill (``copy``) and their write back (``slice_scatter``) empty."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask, count = torch.zeros(4, 6, 6), 0
        for depth in ((0, -4), (-4, None), (None, None)):  # a window of 4 over a depth of 4: two empty regions
            for height in ((0, -2), (-2, -1), (-1, None)):
                mask[depth[0]:depth[1], height[0]:height[1], :] = count
                count += 1
        return x * 2 + mask


def test_a_mask_filled_through_empty_slices_is_one_engine():
    model, inputs = ShiftedWindowMask(), (torch.randn(4, 6, 6),)
    report = trtcheck.verify(model, inputs, ONE, backend="onnxruntime")
    torch_nodes = [n.name for s in report.partition.segments if s.target is Target.TORCH for n in s.nodes]
    assert report.passed and torch_nodes == [], report.partition.explain()


@pytest.mark.parametrize("where", ["empty-source", "non-empty"])
def test_slice_scatter_and_copy_of_an_empty_slice_equal_eager(where):
    stop = 0 if where == "empty-source" else 2

    class Fill(nn.Module):
        def forward(self, x):
            out = x.clone()
            out[:, 1:1 + stop] = 3.0  # slice, copy (a fill), slice_scatter
            return out + 1

    report = trtcheck.verify(Fill(), (torch.randn(3, 5),), ONE, backend="onnxruntime")
    assert report.passed and report.partition.summary().startswith("1 segment: 1 TensorRT"), report.partition.explain()
