"""Hand-written models that a compiled module gets wrong when it is right only for its example.

Each one is a kind of model users write and a way the compiled module once went wrong for it: a buffer
that ``forward`` updates (state), a Python scalar input (specialized away by export), a Torch segment
that depends on the strides an engine produced (layout), a ``ModuleList`` forced to PyTorch by its
container name, and an input domain that random inputs leave (a Cholesky factor). ``pytest --trtcheck``
runs each under every preset; ``suites/runtime/test_compiled_module.py`` pins the single failures.
"""

from __future__ import annotations

import torch
from torch import nn

from .registry import ZooEntry, make_nontrivial, register, seeded

__all__ = ["CORRECTNESS_ZOO", "Counter", "LayoutSensitive", "ModuleListBlocks", "ScalarInput", "SpdSolve"]


class Counter(nn.Module):
    """Counts its calls in a buffer and scales by the count: eager returns 1x, 2x, 3x on three calls."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1)
        return torch.relu(self.linear(x)) * self.calls + self.calls


class ScalarInput(nn.Module):
    """A float and a keyword-only int among the inputs, both feeding engine-side arithmetic."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, scale: float, *, shift: int = 1) -> torch.Tensor:
        return torch.relu(self.linear(x) * scale) + shift


class _Tail(nn.Module):
    def forward(self, y: torch.Tensor) -> torch.Tensor:
        return y.t().reshape(-1) * 2  # a view of the transposed layout the producer left


class LayoutSensitive(nn.Module):
    """An engine-side ``relu`` of a transposed input feeding a Torch ``view`` that needs its strides."""

    def __init__(self) -> None:
        super().__init__()
        self.tail = _Tail()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x.t() + 1.0)
        return self.tail(torch.sigmoid(y))


class ModuleListBlocks(nn.Module):
    """Blocks in an ``nn.ModuleList``: forcing ``"blocks"`` must force every block, not none."""

    def __init__(self, width: int = 16, depth: int = 3) -> None:
        super().__init__()
        self.stem = nn.Linear(8, width)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(depth))
        self.head = nn.Linear(width, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.stem(x))
        for block in self.blocks:
            h = h + block(h)
        return self.head(h)


class SpdSolve(nn.Module):
    """Solves with the Cholesky factor of its input, which must be symmetric positive-definite.

    Random normal inputs are not, so eager itself raises on them: the entry brings its own input sets.
    """

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(6, 6)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        factor = torch.linalg.cholesky(a)
        return torch.relu(self.linear(factor @ b.mT)) + factor.sum()


def _spd(n: int = 6, generator: torch.Generator | None = None) -> torch.Tensor:
    m = torch.randn(n, n, generator=generator)
    return m @ m.T + n * torch.eye(n)


@seeded()
def _counter():
    inputs = (torch.randn(2, 8),)
    return make_nontrivial(Counter(), inputs), inputs


@seeded()
def _scalar_input():
    return ScalarInput(), (torch.randn(2, 8), 2.5)


@seeded()
def _layout_sensitive():
    return LayoutSensitive(), (torch.randn(4, 6),)


@seeded()
def _module_list_blocks():
    return ModuleListBlocks(), (torch.randn(2, 8),)


@seeded()
def _spd_solve():
    return SpdSolve(), (_spd(), torch.randn(6, 6))


def _spd_solve_input_sets() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [(_spd(generator=generator), torch.randn(6, 6, generator=generator)) for _ in range(2)]


_ENTRIES = (
    ZooEntry("counter", _counter, ("correctness", "state")),
    ZooEntry("scalar_input", _scalar_input, ("correctness", "scalar")),
    ZooEntry("layout_sensitive", _layout_sensitive, ("correctness", "layout"), fallback_module="tail"),
    ZooEntry("module_list_blocks", _module_list_blocks, ("correctness", "module_fallback"), fallback_module="blocks"),
    ZooEntry("spd_solve", _spd_solve, ("correctness", "constrained"), input_sets=_spd_solve_input_sets),
)

CORRECTNESS_ZOO: tuple[str, ...] = tuple(register(entry).name for entry in _ENTRIES)
