"""Export refusals name the line that caused them and a fix that fits the cause (issue 52, "What refusals say").

The torchvision detectors are refused over one Python ``if`` in ``torchvision/ops/boxes.py``; the refusal kept only
the guard's first line, so the user could not tell where to look. Eager-mode quantized models (packed parameters)
were refused with an internal ``AttributeError`` and the advice "no data-dependent Python control flow".
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import trtcheck
from trtcheck.errors import LoweringError


class KeepsPositives(nn.Module):
    def forward(self, x):
        rows = torch.nonzero(x.sum(-1) > 0)[:, 0]
        if rows.numel() == 0:  # a Python branch on a size that depends on values: export refuses it here
            return x
        return x[rows] * 2


def test_a_data_dependent_branch_is_refused_naming_its_line_and_a_fix_for_it():
    with pytest.raises(LoweringError) as caught:
        trtcheck.partition(KeepsPositives(), (torch.randn(6, 4),), frontend="export")  # "auto": torch.compile's graphs
    text = str(caught.value)
    assert "depends on a tensor's values" in text and "torch.cond" in text and "torch._check" in text, text
    assert f"{__file__.rsplit('/', 1)[-1]}:" in text, text  # the line of the `if` (or of the code that reached it)


def test_an_eager_mode_quantized_model_is_refused_for_its_packed_parameters_with_the_explicit_qdq_way():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.quant, self.conv, self.dequant = torch.ao.quantization.QuantStub(), nn.Conv2d(3, 8, 3), torch.ao.quantization.DeQuantStub()

        def forward(self, x):
            return self.dequant(self.conv(self.quant(x)))

    model = Net().eval()
    model.qconfig = torch.ao.quantization.get_default_qconfig("fbgemm")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.ao.quantization.prepare(model, inplace=True)
        model(torch.rand(1, 3, 16, 16))
        torch.ao.quantization.convert(model, inplace=True)
    with pytest.raises(LoweringError) as caught:
        trtcheck.partition(model, (torch.rand(1, 3, 16, 16),))
    text = str(caught.value)
    assert "packed parameters" in text and "mtq.quantize" in text, text
    assert "no data-dependent Python control flow" not in text
