"""A model's own dtypes are the user's at every precision (issue 53, items 1 and 2).

1. A float16 model with a deliberate float32 part (a Llama-style RMSNorm that upcasts, computes in float32 and casts
   back) passed at ``precision="fp32"`` and failed at ``"fp16"`` as "a conversion error": the fp16 rewrite cast the
   model's own float32 computation down. The nodes a float16/bfloat16 model computes in float32 stay float32.
2. A float32 model with a ``.half()`` submodule at ``"fp16"``/``"bf16"`` had no reduced-precision reference ("mat1
   and mat2 must have the same dtype") and failed on ordinary rounding. A model holding low-precision values of its
   own is its own yardstick at a reduced precision.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import trtcheck
from suites.verification.test_reference_casts import HalfInside
from trtcheck.verification.reference import reduced_precision_outputs


class RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()  # the model's own float32: the squares of 300s pass fp16's range
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * h.to(x.dtype)


class HalfWithFloat32Norm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc, self.norm, self.out = nn.Linear(64, 64), RMSNorm(64), nn.Linear(64, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(self.fc(x) * 300))


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_a_float16_models_own_float32_part_stays_float32_and_the_verdict_agrees(precision):
    model = HalfWithFloat32Norm().half().eval()
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(0)).half()
    trtcheck.verify(model, (x,), trtcheck.Settings(min_block_size=1, precision=precision), backend="onnxruntime")


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_a_float32_model_with_a_half_submodule_gets_its_reduced_precision_reference_and_passes(precision):
    torch.manual_seed(0)
    model, x = HalfInside().eval(), torch.randn(8, 256, generator=torch.Generator().manual_seed(0))
    out, why = reduced_precision_outputs(model, (x,), {}, precision)
    assert why == "" and out is not None, why
    report = trtcheck.verify(model, (x,), trtcheck.Settings(min_block_size=1, precision=precision), backend="onnxruntime")
    assert not any("reference" in note for note in report.notes), report.notes
