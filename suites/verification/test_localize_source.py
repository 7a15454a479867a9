"""A culprit names where in the user's code its op came from (issue 43: the module path and the file and line
torch.export kept), in the localization and in the failing verification's message a test shows."""

from __future__ import annotations

import pathlib

import pytest
import torch

import trtcheck
from suites.verification.planted import off_by, planted

aten = torch.ops.aten


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.fc(x))  # THE_TANH


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([Block(), Block()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def test_the_culprit_names_its_module_path_and_the_users_line():
    torch.manual_seed(0)
    line = next(n for n, text in enumerate(pathlib.Path(__file__).read_text().splitlines(), 1) if text.endswith("# THE_TANH"))
    with planted(aten.tanh.default, {"tanh_1"}, off_by(1.01)), pytest.raises(trtcheck.VerificationError) as caught:
        trtcheck.verify(Net().eval(), (torch.randn(2, 8),), trtcheck.Settings(min_block_size=1), backend="onnxruntime")
    culprit = caught.value.report.localization.culprit
    assert culprit is not None and culprit.node == "tanh_1", str(caught.value)
    assert culprit.source == f"layers.1 (Block), {__file__}:{line}"
    assert f"  from layers.1 (Block), {__file__}:{line}" in str(caught.value)
