"""The compiled module's input check (``InputSignature``) for sizes derived from others: ``2*s``, ``s+1``.

torch.export's own program refuses a call whose sizes disagree with the relations its ``Dim`` s state (a guard
``a.size()[0] == 2 * b.size()[0]``); lowering drops that guard, so the signature checks each relation itself.
Issue 43, defect 15: before the fix an input of ``2*s`` rows was checked only when ``s`` was set by an earlier
input, so with ``a`` (``2*s``) before ``b`` (``s``) a call with 11 or 12 rows and ``b`` of 5 ran and returned
numbers.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.export import Dim

import trtcheck

ONE = trtcheck.Settings(min_block_size=1)
S = Dim("s", min=2, max=64)


class Halves(nn.Module):
    """``a[:len(b)] * b`` and a sum over ``a``: any size of ``a`` computes numbers, so only the check refuses one."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a[: b.shape[0]] * b, a.sum(0)


def _compiled(dynamic_shapes, a_rows: int, b_rows: int):
    return trtcheck.compile(
        Halves(), (torch.randn(a_rows, 3), torch.randn(b_rows, 3)), ONE, backend="onnxruntime", dynamic_shapes=dynamic_shapes
    )


@pytest.mark.parametrize(
    ("dynamic_shapes", "example", "call", "message"),
    [
        (({0: 2 * S}, {0: S}), (8, 4), (11, 5), r"input 'a': dim 0 is 11, but it is 2\*s, and s is 5 \(set by 'b' dim 0\): 2\*s = 10"),
        (({0: 2 * S}, {0: S}), (8, 4), (12, 5), r"input 'a': dim 0 is 12, but it is 2\*s.*= 10"),
        (({0: S + 1}, {0: S}), (5, 4), (7, 5), r"input 'a': dim 0 is 7, but it is s \+ 1, and s is 5 \(set by 'b' dim 0\): s \+ 1 = 6"),
        (({0: 2 * S}, None), (8, 4), (11, 4), r"input 'a': dim 0 is 11, but it is 2\*s, and no whole s gives 11"),
        (({0: 2 * S}, None), (8, 4), (130, 4), r"input 'a': dim 0 is 130, but it is 2\*s, and s = 65 is outside s's range \[2, 64\]"),
        (({0: 2 * S}, {0: S}), (8, 4), (130, 65), r"input 'b': dim 0 is 65, outside the range of s in \[2, 64\]"),
    ],
    ids=["2s_odd", "2s_even", "s_plus_1", "2s_unsolvable", "2s_solved_out_of_range", "root_out_of_range"],
)
def test_a_derived_size_that_disagrees_with_its_symbols_is_refused_before_any_engine_runs(
    dynamic_shapes, example, call, message, engine_calls
):
    compiled = _compiled(dynamic_shapes, *example)
    engine_calls.clear()
    with pytest.raises(trtcheck.InputMismatchError, match=message):
        compiled(torch.randn(call[0], 3), torch.randn(call[1], 3))
    assert engine_calls == [], "a refused call must be refused before any engine runs"


@pytest.mark.parametrize(
    ("dynamic_shapes", "example", "calls"),
    [
        (({0: 2 * S}, {0: S}), (8, 4), [(10, 5), (4, 2), (128, 64)]),
        (({0: S + 1}, {0: S}), (5, 4), [(6, 5), (3, 2), (65, 64)]),
        (({0: 2 * S}, None), (8, 4), [(10, 4), (128, 4)]),
    ],
    ids=["2s", "s_plus_1", "2s_alone"],
)
def test_sizes_that_agree_with_their_symbols_run_and_match_eager(dynamic_shapes, example, calls):
    compiled = _compiled(dynamic_shapes, *example)
    for a_rows, b_rows in calls:
        a, b = torch.randn(a_rows, 3), torch.randn(b_rows, 3)
        torch.testing.assert_close(compiled(a, b), Halves()(a, b))
