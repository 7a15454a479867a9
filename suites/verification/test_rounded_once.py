"""An ATen op its converter writes as several elementwise ONNX nodes is rounded once at fp16, at its output, as eager
rounds it (issue 53, item 16: GELU's Div, Erf, Add, Mul, Mul were each rounded to fp16, so a correct MLP's engine erred
up to 8.8x eager's own error on an all-zeros input and failed; the emulation's rounding, not the conversion)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import trtcheck
from trtcheck.compiler.mixed_precision import to_mixed_precision
from trtcheck.conversion import segment_to_onnx
from trtcheck.lowering import lower

FP16 = trtcheck.Settings(min_block_size=1, precision="fp16")


def mlp(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 8)).eval()


@pytest.mark.parametrize("seed", range(4))
def test_a_gelu_mlp_at_fp16_errs_as_eager_in_fp16_does_on_zeros(seed):
    model = mlp(seed)
    report = trtcheck.verify(model, (torch.randn(4, 16),), FP16, backend="onnxruntime", inputs=[(torch.zeros(4, 16),)])
    ratios = [output.distance.ratio for comparison in report.comparisons for output in comparison.outputs
              if output.distance is not None]
    assert ratios and max(ratios) <= 1.0 + 1e-6, ratios  # rounded after each node: up to 1.87 here, 8.8 in the issue


def test_the_fp16_graph_keeps_geLUs_nodes_float32_saying_why():
    gm = lower(nn.GELU().eval(), (torch.randn(4, 16),))
    mixed = to_mixed_precision(segment_to_onnx(gm), "fp16")
    reasons = set(mixed.kept.values())
    assert any("elementwise ONNX nodes of gelu, computed in float32 and rounded once" in why for why in reasons), mixed.kept
    assert len(mixed.kept) >= 4
