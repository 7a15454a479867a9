"""A model that does not work at the precision verified fails, whatever eager at that precision does (issue 43,
item 1).

RMS-style normalisation at fp16: ``h = fc(x) * 300``, ``mean(h * h)`` overflows fp16, ``h / sqrt(v + 1)`` is 0, and
the output is ``out``'s bias alone (cosine about 0.08 to float32). Eager in fp16 breaks the same way, so "ratio 1 to
eager fp16's own error" passed it. The engine is now judged against float64 on its own too: its error relative to
the output's scale must stay within the bound the precision's unit roundoff allows over the model's depth.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import trtcheck
from trtcheck.errors import VerificationError
from trtcheck.verification.equivalence import compare_outputs, judge_reduced_precision, rounding_bound


class RMSNorm300(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 64)
        self.out = nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x) * 300
        v = (h * h).mean(-1, keepdim=True)
        return self.out(h / torch.sqrt(v + 1))


def _model() -> nn.Module:
    torch.manual_seed(0)
    return RMSNorm300().eval()


def test_an_fp16_model_whose_normalisation_overflows_inside_fails():
    model, x = _model(), torch.randn(8, 64, generator=torch.Generator().manual_seed(0))
    with pytest.raises(VerificationError) as failure:
        trtcheck.verify(model, (x,), trtcheck.Settings(precision="fp16"), localize_budget=0)
    text = str(failure.value)
    assert "relative to the output's scale" in text and "fp32_nodes" in text, text


def test_the_same_normalisation_without_the_overflow_passes_at_fp16():
    class Tame(RMSNorm300):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.fc(x) * 3
            return self.out(h / torch.sqrt((h * h).mean(-1, keepdim=True) + 1))

    torch.manual_seed(0)
    model, x = Tame().eval(), torch.randn(8, 64, generator=torch.Generator().manual_seed(0))
    trtcheck.verify(model, (x,), trtcheck.Settings(precision="fp16"), localize_budget=0)


def test_the_bound_fails_an_output_eager_at_that_precision_gets_as_wrong():
    """The judge alone: eager at fp16 as wrong as the engine (ratio 1) no longer excuses an output far from float64."""
    exact = torch.linspace(-1, 1, 64, dtype=torch.float64)
    broken = torch.full((64,), 0.05)  # a bias alone, finite
    comparison = judge_reduced_precision(compare_outputs(exact.float(), broken), broken, broken, exact, "fp16", depth=10)
    assert not comparison.passed
    assert comparison.outputs[0].reference_ratio == 1.0
    # and a right output within a few roundings passes the same judge
    right = exact.half().float()
    assert judge_reduced_precision(compare_outputs(exact.float(), right), right, right, exact, "fp16", depth=10).passed


@pytest.mark.parametrize("precision, unit", [("fp16", 2.0**-11), ("bf16", 2.0**-8)])
def test_the_bound_grows_with_the_unit_roundoff_and_the_depth(precision, unit):
    assert rounding_bound(precision, 1) < rounding_bound(precision, 100)
    assert rounding_bound(precision, 100) == pytest.approx(min(0.5, 2 * 100 * unit))
    assert rounding_bound(precision, 10**6) == 0.5  # never an excuse for an output that is not even its sign's
