"""Whole torchvision models converted as ONE segment and run in ONNX Runtime: every zoo overload in
its real context (real argument values, dead getitems, lifted constants, parameters).

All but resnet18 are in the slow tier (``--slow`` or ``-m slow`` runs them; all 17 take ~2 min on 2 cores).
"""

from __future__ import annotations

import pytest
import torch

import trtcheck_zoo as models
from suites.conversion.converter_harness import check

# Every zoo overload also has unit cases; the default tier keeps resnet18, the slow tier (``--slow``)
# every one (swin_t alone has 34 distinct overloads).
_FAST = {"resnet18"}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n not in _FAST else n for n in models.TORCHVISION_ZOO]
)
def test_zoo_model_as_one_segment(name: str) -> None:
    model, inputs = models.get(name).build()
    with torch.no_grad():
        scale = float(model(*inputs).abs().max())
    assert scale > 0
    # fp32 accumulation-order differences across ~50 layers: relative to the output's magnitude.
    check(model, inputs, decompose=True, rtol=1.3e-6, atol=1e-4 * scale)  # fp32 rtol; the zoo matrix's policy (suites/matrix)
