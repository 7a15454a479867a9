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


@torch.library.custom_op("trtcheck_refusals::doubled", mutates_args=())
def _doubled(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@torch.library.custom_op("trtcheck_refusals::tripled", mutates_args=())
def _tripled(x: torch.Tensor) -> torch.Tensor:
    return x * 3


@_tripled.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


_LIBRARY = torch.library.Library("trtcheck_refusals_lib", "DEF")
_LIBRARY.define("halved(Tensor x) -> Tensor")
_LIBRARY.impl("halved", lambda x: x / 2, "CPU")


class Calls(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x) + 1


@pytest.mark.parametrize(("fn", "op"), [(_doubled, "trtcheck_refusals::doubled"),
                                        (torch.ops.trtcheck_refusals_lib.halved, "trtcheck_refusals_lib::halved")],
                         ids=["custom_op", "library-define"])
def test_a_custom_op_without_a_fake_kernel_is_refused_naming_it_and_how_to_register_one(fn, op):
    with pytest.raises(LoweringError) as caught:  # "auto" too: torch.compile cannot trace it either
        trtcheck.partition(Calls(fn), (torch.randn(3),))
    text = str(caught.value)
    assert f"the custom op {op} has no fake (meta) kernel" in text, text
    assert f'@torch.library.register_fake("{op}")' in text and "test_refusals_name_their_line.py:" in text, text


def test_a_custom_op_with_a_fake_kernel_is_one_node_that_runs_in_pytorch_saying_why():
    partition = trtcheck.partition(Calls(_tripled), (torch.randn(3),), trtcheck.Settings(min_block_size=1))
    node = next(n for n in partition.compute_nodes if "tripled" in str(n.target))
    assert partition.target_of(node).name == "TORCH" and "no converter" in str(partition.reasons[node]), partition.explain()


def test_numpy_inside_forward_is_refused_with_the_custom_op_way_out():
    class Sorts(nn.Module):
        def forward(self, x):
            return torch.from_numpy(x.numpy().copy()) + 1

    with pytest.raises(LoweringError) as caught:
        trtcheck.partition(Sorts(), (torch.randn(3),), frontend="export")
    text = str(caught.value)
    assert "leaves PyTorch" in text and "torch.library.custom_op" in text and "test_refusals_name_their_line.py:" in text, text
