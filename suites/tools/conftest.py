"""Factory files for the command-line tests: the user's own models, as a user would write them."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from trtcheck import conversion as converters

FACTORIES = textwrap.dedent(
    '''
    import torch
    from torch import nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            return torch.lgamma(torch.relu(self.fc(x)) + 1) * 2


    def build():
        torch.manual_seed(0)
        return Net().eval(), (torch.randn(2, 8),)


    def as_list():
        torch.manual_seed(0)
        return [Net().eval(), [torch.randn(2, 8)]]


    def noisy():  # dropout in training mode: eager disagrees with itself
        return nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5)).train(), (torch.randn(4, 8),)


    def broken():
        raise ValueError("cannot build today")


    def bare():
        return Net()


    def three():
        return Net(), (torch.randn(2, 8),), {}


    def tensor_inputs():
        return Net(), torch.randn(2, 8)


    def not_a_model():
        return "Net", (torch.randn(2, 8),)


    def unfit():  # examples that do not fit the model: Net's Linear takes 8 features, not 5
        return Net().eval(), (torch.randn(2, 5),)


    model = Net()
    '''
)


WRONG_RELU = textwrap.dedent(
    '''
    import torch
    from torch import nn
    from trtcheck import conversion as converters


    def _relu_as_negation(ctx, node):  # wrong on purpose: the engine computes -x where eager computes relu(x)
        return ctx.add("Neg", [ctx.name(node.args[0])])


    converters.register(torch.ops.aten.relu.default, override=True)(_relu_as_negation)


    def build():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4)).eval(), (torch.randn(2, 8),)
    '''
)
BROKEN_RELU = WRONG_RELU.replace('return ctx.add("Neg", [ctx.name(node.args[0])])', 'raise RuntimeError("broken on purpose")')


@pytest.fixture
def wrong_relu(tmp_path: Path) -> Iterator[Path]:
    """``wrong.py``: a target whose import registers a relu converter that computes -x; undone after the test."""
    yield from _registering_target(tmp_path / "wrong.py", WRONG_RELU)


@pytest.fixture
def broken_relu(tmp_path: Path) -> Iterator[Path]:
    """``broken.py``: a target whose import registers a relu converter that raises; undone after the test."""
    yield from _registering_target(tmp_path / "broken.py", BROKEN_RELU)


def _registering_target(path: Path, text: str) -> Iterator[Path]:
    path.write_text(text)
    with converters.Snapshot():
        yield path


@pytest.fixture
def factories(tmp_path: Path) -> Path:
    """``mine.py`` with one factory per way a target can be right or wrong."""
    path = tmp_path / "mine.py"
    path.write_text(FACTORIES)
    return path


@pytest.fixture
def program(tmp_path: Path, factories: Path) -> Path:
    """``net.pt2``: mine.py's ``build`` saved with torch.export.save."""
    import torch

    from trtcheck.tools.targets import load_model

    loaded = load_model(f"{factories}:build")
    path = tmp_path / "net.pt2"
    torch.export.save(torch.export.export(loaded.model_or_program, loaded.example_inputs), path)
    return path
