"""embedding (ops/embedding.py) against eager PyTorch, with every argument at a non-default value."""

from __future__ import annotations

import pytest
import torch

from suites.conversion.converter_harness import randint, randn
from suites.conversion.family_harness import check, refused

A = torch.ops.aten


@pytest.mark.parametrize(("padding_idx", "scale_grad_by_freq", "sparse"),
                         [(-1, False, False), (2, False, False), (0, True, False), (3, True, True)])
def test_embedding_training_arguments_do_not_change_the_forward(padding_idx, scale_grad_by_freq, sparse) -> None:
    check(lambda w, i: A.embedding.default(w, i, padding_idx, scale_grad_by_freq, sparse),
          (randn(6, 4), randint(2, 3, low=0, high=6)), targets=(A.embedding.default,))


@pytest.mark.parametrize(("weight", "indices"), [
    (randn(5, 3, dtype=torch.float16), randint(7, low=0, high=5)),
    (randint(4, 2), randint(2, 2, 2, low=0, high=4, dtype=torch.int32)),  # int weight, int32 indices, 3-D
    (torch.rand(4, 3) > 0.5, randint(3, low=0, high=4)),  # bool weight
    (randn(5, 3), torch.tensor(4)),  # 0-d indices: one row
])
def test_embedding_dtypes_and_index_shapes(weight, indices) -> None:
    check(lambda w, i: A.embedding.default(w, i), (weight, indices), targets=(A.embedding.default,))


def test_embedding_refuses_float64() -> None:
    assert "float64" in refused(lambda w, i: A.embedding.default(w, i),
                                (torch.randn(4, 2, dtype=torch.float64), torch.tensor([1])), A.embedding.default)
