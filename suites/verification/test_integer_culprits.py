"""Integer and boolean values are compared exactly in localization, so a wrong index names the op that made it
(issue 53, item 17: a wrong ``argmax`` feeding an ``Embedding`` was blamed on the embedding, "wrong" though it passed
alone, because integer outputs were never compared)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import trtcheck
from suites.verification.planted import planted
from trtcheck.verification.reduce import reduce_model

ONE = trtcheck.Settings(min_block_size=1)


class ArgmaxEmbedding(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.fc = nn.Embedding(10, 8), nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.emb(torch.argmax(x, dim=-1)))


def one_more(ctx, node, out):
    """Every index off by one: still a valid row of the embedding."""
    return ctx.add("Add", [out, ctx.constant(1, torch.int64)])


def test_a_wrong_integer_op_is_the_culprit_not_its_first_floating_reader(tmp_path):
    model, inputs = ArgmaxEmbedding().eval(), (torch.randn(3, 9, generator=torch.Generator().manual_seed(0)),)
    with planted(torch.ops.aten.argmax.default, None, one_more):
        with pytest.raises(trtcheck.VerificationError) as caught:
            trtcheck.verify(model, inputs, ONE, backend="onnxruntime")
        reduced = reduce_model(model, inputs, ONE, backend="onnxruntime", out_dir=tmp_path / "reduced")
    culprit = caught.value.report.localization.culprit
    assert culprit is not None and culprit.node == "argmax" and culprit.survives_isolation, str(caught.value.report.localization)
    assert "compared exactly" in culprit.diagnosis()
    assert [c.nodes[-1] for c in reduced.culprits] == ["argmax"], str(reduced)
