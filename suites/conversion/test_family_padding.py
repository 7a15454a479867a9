"""reflection_pad1d/2d/3d and replication_pad2d/3d (ops/padding.py) against eager PyTorch."""

from __future__ import annotations

import pytest
import torch

from suites.conversion.converter_harness import randint, randn
from suites.conversion.family_harness import check, refused

A = torch.ops.aten
F16 = torch.float16


# (overload, padding, input): every overload with uneven pads per side and dim, batched and unbatched,
# float32, float16 and int inputs
CASES = [
    (A.reflection_pad1d.default, [2, 1], randn(2, 3, 5)),
    (A.reflection_pad1d.default, [0, 3], randint(3, 5)),  # unbatched (C, W), int64
    (A.reflection_pad2d.default, [1, 2, 3, 0], randn(1, 2, 4, 5)),
    (A.reflection_pad2d.default, [2, 2, 1, 1], randn(2, 4, 3, dtype=F16)),  # unbatched
    (A.reflection_pad3d.default, [1, 0, 2, 1, 1, 2], randn(1, 2, 3, 4, 5)),
    (A.replication_pad2d.default, [3, 1, 0, 2], randn(1, 2, 3, 4)),
    (A.replication_pad2d.default, [1, 1, 2, 2], randint(2, 2, 3, dtype=torch.int32)),
    (A.replication_pad3d.default, [2, 1, 0, 1, 3, 0], randn(1, 1, 2, 3, 4, dtype=F16)),
    (A.replication_pad3d.default, [1, 1, 1, 1, 1, 1], randn(2, 3, 2, 2)),  # unbatched
]


@pytest.mark.parametrize(("target", "padding", "x"), CASES,
                         ids=[f"{t._opname}-{p}-{x.dtype}-{x.dim()}d" for t, p, x in CASES])
def test_padding_matches_eager(target, padding, x) -> None:
    check(lambda t: target(t, padding), (x,), targets=(target,))


@pytest.mark.parametrize(
    ("target", "padding", "x", "reason"),
    [
        (A.replication_pad2d.default, [-1, 1, 0, 0], randn(1, 1, 4, 4), "negative pad"),
        (A.replication_pad3d.default, [0, 0, 0, -2, 1, 1], randn(1, 1, 4, 4, 4), "negative pad"),
        (A.reflection_pad2d.default, [1, 1, 1, 1], torch.randn(1, 1, 3, 3, dtype=torch.float64), "float64"),
    ],
)
def test_padding_refusals_name_the_argument(target, padding, x, reason) -> None:
    assert reason in refused(lambda t: target(t, padding), (x,), target)
