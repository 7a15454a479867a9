"""topk and sort (ops/sorting.py): values only, with ties and NaN, against eager PyTorch."""

from __future__ import annotations

import pytest
import torch

from suites.conversion.converter_harness import randn
from suites.conversion.family_harness import check, refused

A = torch.ops.aten
F16 = torch.float16
NAN, INF = float("nan"), float("inf")


def _with_nans() -> torch.Tensor:
    """Rows with NaNs (some two), +inf, -inf and repeated values: where TopK and PyTorch could disagree."""
    return torch.tensor([
        [3.0, NAN, 1.0, INF, 1.0, -INF],
        [NAN, 2.0, NAN, 2.0, INF, 0.0],
        [0.5, -1.0, 4.0, -1.0, 2.0, 7.0],
    ])


@pytest.mark.parametrize(("dim", "descending"), [(-1, False), (1, True), (0, False), (0, True)])
def test_sort_values_with_nans_and_ties(dim, descending) -> None:
    check(lambda x: A.sort.default(x, dim, descending)[0], (_with_nans(),), targets=(A.sort.default,))


def test_sort_default_arguments_float16() -> None:
    check(lambda x: A.sort.default(x)[0], (randn(2, 3, 5, dtype=F16),), targets=(A.sort.default,))


@pytest.mark.parametrize(("k", "dim", "largest"), [(2, -1, True), (4, 1, False), (3, 0, True), (1, 0, False)])
def test_topk_values_with_nans_and_ties(k, dim, largest) -> None:
    check(lambda x: A.topk.default(x, k, dim, largest, True)[0], (_with_nans(),), targets=(A.topk.default,))


def test_topk_defaults_float16_3d() -> None:
    check(lambda x: A.topk.default(x, 3)[0], (randn(2, 4, 5, dtype=F16),), targets=(A.topk.default,))


def test_refusals_name_the_reason() -> None:
    x = randn(3, 5)
    assert "output 1" in refused(lambda x: A.topk.default(x, 2)[1], (x,), A.topk.default)
    assert "output 1" in refused(lambda x: A.sort.default(x), (x,), A.sort.default)
    assert "sorted=False" in refused(lambda x: A.topk.default(x, 2, -1, True, False)[0], (x,), A.topk.default)
    assert "int64" in refused(lambda x: A.sort.default(x)[0], (torch.arange(5),), A.sort.default)
    assert "0-d" in refused(lambda x: A.sort.default(x)[0], (torch.tensor(1.0),), A.sort.default)
