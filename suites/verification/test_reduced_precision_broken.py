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
from trtcheck.verification.equivalence import compare_outputs
from trtcheck.verification.fp32_search import search_fp32_nodes
from trtcheck.verification.judge import Judge, rounding_bound
from trtcheck.verification.reference import float64_outputs_and_depth


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
    comparison = Judge("fp16").judge_outputs(compare_outputs(exact.float(), broken), broken, broken, exact, depth=10)
    assert not comparison.passed
    assert comparison.outputs[0].reference_ratio == 1.0
    # and a right output within a few roundings passes the same judge
    right = exact.half().float()
    assert Judge("fp16").judge_outputs(compare_outputs(exact.float(), right), right, right, exact, depth=10).passed


@pytest.mark.parametrize("precision, unit", [("fp16", 2.0**-11), ("bf16", 2.0**-8)])
def test_the_bound_grows_with_the_unit_roundoff_and_the_depth(precision, unit):
    assert rounding_bound(precision, 1) < rounding_bound(precision, 100)
    assert rounding_bound(precision, 100) == pytest.approx(min(0.5, 2 * 100 * unit))
    assert rounding_bound(precision, 10**6) == 0.5  # never an excuse for an output that is not even its sign's


def test_the_fp32_search_keeps_the_overflowing_square_and_its_mean_in_float32():
    """Issue 43, item 1: ``trtcheck precision`` answered "verifies in fp16 with no node in float32" for this model.
    Now the search must find the nodes whose fp16 overflow breaks it, and verify must pass with them."""
    model, x = _model(), torch.randn(8, 64, generator=torch.Generator().manual_seed(0))
    found = search_fp32_nodes(model, (x,), "fp16", backend="onnxruntime", budget=120, timed=False)
    assert found.fp32_nodes, str(found)
    assert {"mul_1", "mean"} <= set(found.fp32_nodes), str(found)  # h * h overflows; its mean reads the infinities
    trtcheck.verify(model, (x,), trtcheck.Settings(precision="fp16", fp32_nodes=found.fp32_nodes), localize_budget=0)


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(x)


def test_the_depth_counts_the_ops_inside_a_fused_transformer_layer():
    """The float64 reference counts the ops eager runs, and ``nn.TransformerEncoder``'s inference fast path is one
    fused op to that count: the zoo's ``transformer_encoder_dynamic_seq`` got a depth of 1, a bound of 2u, and a false
    FAIL at fp16 (0.00101 of its scale against 0.000977). Attention now runs as its ops while the reference counts."""
    torch.manual_seed(0)
    model, x = Encoder().eval(), torch.randn(2, 8, 32)
    exact, why, depth = float64_outputs_and_depth(model, (x,), {})
    assert exact is not None, why
    assert depth >= 2 * 10, depth  # two layers, each of a dozen ops or more (projections, softmax, norms, feed-forward)
    assert torch.backends.mha.get_fastpath_enabled()  # left as it was
    trtcheck.verify(model, (x,), trtcheck.Settings(min_block_size=1, precision="fp16"), backend="onnxruntime", localize_budget=0)
