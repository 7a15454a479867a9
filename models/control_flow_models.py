"""Hand-written models with data-dependent control flow that torch.export keeps: ``torch.cond`` and ``while_loop``.

The control-flow node runs in PyTorch, in a segment of its own; its branches (a loop's condition and body)
are partitioned and compiled on their own, so engines sit inside them. Each branch and the loop body hold
a Linear and an activation chain of 5 ops or more, so even ``min_block_size=5`` leaves an engine in each.
The cond's predicate depends on the input's values, so the random input sets ``verify`` draws take both
branches; ``suites/compiler/test_control_flow_compile.py`` counts that they do.
"""

from __future__ import annotations

import torch
from torch import nn
from torch._higher_order_ops.while_loop import while_loop

from .registry import ZooEntry, register, seeded

__all__ = ["CONTROL_FLOW_ZOO", "CondBranches", "Gate", "LoopBody"]


class Gate(nn.Module):
    """One of two Linear + activation chains, chosen by the sign of the input's sum (a data-dependent cond)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.up = nn.Linear(width, width)
        self.down = nn.Linear(width, width)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        def positive(h: torch.Tensor) -> tuple[torch.Tensor]:
            return (torch.tanh(torch.relu(self.up(h)) * 0.5 + h),)  # permute, addmm, relu, mul, add, tanh

        def negative(h: torch.Tensor) -> tuple[torch.Tensor]:
            return (torch.sigmoid(self.down(h)) * 2.0 - torch.exp(h * 0.5),)  # permute, addmm, sigmoid, mul, mul, exp, sub

        return torch.cond(h.sum() > 0, positive, negative, (h,))[0]


class CondBranches(nn.Module):
    """stem -> gate (a torch.cond) -> head; ``fallback_module="gate"`` forces the cond and both branches."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.stem = nn.Linear(8, width)
        self.gate = Gate(width)
        self.head = nn.Linear(width, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.gate(torch.tanh(self.stem(x))))


class LoopBody(nn.Module):
    """stem -> a fixed number of recurrent steps (a while_loop, the counter an int64 0-d tensor) -> head."""

    def __init__(self, width: int = 16, steps: int = 3) -> None:
        super().__init__()
        self.stem = nn.Linear(8, width)
        self.cell = nn.Linear(width, width)
        self.head = nn.Linear(width, 4)
        self.steps = steps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def more(i: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
            return i < self.steps

        def step(i: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return i + 1, torch.tanh(torch.relu(self.cell(h)) + h)  # add; permute, addmm, relu, add, tanh

        _, h = while_loop(more, step, (torch.zeros((), dtype=torch.int64), self.stem(x)))
        return self.head(h)


@seeded()
def _cond_branches():
    return CondBranches(), (torch.randn(4, 8),)


@seeded()
def _while_loop_body():
    return LoopBody(), (torch.randn(4, 8),)


_ENTRIES = (
    ZooEntry("cond_branches", _cond_branches, ("control_flow", "cond"), fallback_module="gate"),
    ZooEntry("while_loop_body", _while_loop_body, ("control_flow", "loop"), fallback_module="head"),
)

CONTROL_FLOW_ZOO: tuple[str, ...] = tuple(register(entry).name for entry in _ENTRIES)
