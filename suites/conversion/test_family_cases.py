"""The op-family cases (family_cases.py) through the converter harness, and that they cover every overload."""

from __future__ import annotations

import pytest
import torch

from suites.conversion.family_cases import FAMILY_CASES
from suites.conversion.family_harness import check

A = torch.ops.aten
FAMILY_OVERLOADS = {
    A.reflection_pad1d.default, A.reflection_pad2d.default, A.reflection_pad3d.default, A.replication_pad2d.default,
    A.replication_pad3d.default, A.scatter.src, A.scatter.value, A.scatter_add.default, A.scatter_reduce.two,
    A.index_put.default, A.topk.default, A.sort.default, A.upsample_nearest2d.vec, A.upsample_bilinear2d.vec,
    A.grid_sampler_2d.default, A.embedding.default, torch.ops.trtcheck.quantize_op.default,
    torch.ops.trtcheck.dynamic_block_quantize_op.default,
}


@pytest.mark.parametrize("entry", FAMILY_CASES, ids=[c[0] for c in FAMILY_CASES])
def test_family_case_matches_eager(entry) -> None:
    _, target, fn, inputs = entry
    check(fn, inputs(), targets=(target,))


def test_every_family_overload_has_a_case() -> None:
    assert {c[1] for c in FAMILY_CASES} == FAMILY_OVERLOADS
