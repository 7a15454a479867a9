"""scatter.src/.value, scatter_add, scatter_reduce.two and index_put (ops/scatter.py) against eager PyTorch.

Indices are permutations (no position written twice) except in the reduction cases, where repeats are
the point: sum/prod/accumulate must add up every update of a position.
"""

from __future__ import annotations

import pytest
import torch

from suites.conversion.converter_harness import randint, randn
from suites.conversion.family_harness import accepted, check, refused

A = torch.ops.aten
F16 = torch.float16
I32 = torch.int32


def _perm_index(shape: tuple[int, ...], dim: int, size: int, seed: int = 0) -> torch.Tensor:
    """Distinct positions along ``dim`` (each of ``shape[dim] <= size`` taken from a permutation of ``size``)."""
    generator = torch.Generator().manual_seed(seed)
    moved = list(shape)
    moved.append(moved.pop(dim))
    rows = [torch.randperm(size, generator=generator)[: shape[dim]] for _ in range(int(torch.tensor(moved[:-1]).prod()))]
    return torch.stack(rows).reshape(moved).movedim(-1, dim)


def _repeat_index(shape: tuple[int, ...], size: int, seed: int = 0) -> torch.Tensor:
    return randint(*shape, low=0, high=size, seed=seed)


# ---- scatter ----------------------------------------------------------------------------------------------


def test_scatter_src_dim0_float() -> None:
    check(lambda x, i, s: A.scatter.src(x, 0, i, s), (randn(4, 3), _perm_index((4, 3), 0, 4), randn(4, 3, seed=1)),
          targets=(A.scatter.src,))


def test_scatter_src_negative_dim_smaller_index_than_src_int() -> None:
    """dim=-1; index (2, 2) smaller than src (3, 4) and self (3, 5): src is read only where index has elements."""
    check(lambda x, i, s: A.scatter.src(x, -1, i, s),
          (randint(3, 5), _perm_index((2, 2), 1, 5), randint(3, 4, seed=1)), targets=(A.scatter.src,))


def test_scatter_value_float16_middle_dim() -> None:
    check(lambda x, i: A.scatter.value(x, 1, i, -2.5), (randn(2, 4, 3, dtype=F16), _perm_index((2, 3, 3), 1, 4)),
          targets=(A.scatter.value,))


def test_scatter_value_int32() -> None:
    check(lambda x, i: A.scatter.value(x, 0, i, 7), (randint(3, 2, dtype=I32), _perm_index((2, 2), 0, 3)),
          targets=(A.scatter.value,))


# ---- scatter_add / scatter_reduce --------------------------------------------------------------------------


def test_scatter_add_repeated_positions_float() -> None:
    check(lambda x, i, s: A.scatter_add.default(x, 1, i, s),
          (randn(3, 4), _repeat_index((3, 6), 4), randn(3, 6, seed=1)), targets=(A.scatter_add.default,))


def test_scatter_add_int64_smaller_src() -> None:
    check(lambda x, i, s: A.scatter_add.default(x, 0, i, s),
          (randint(2, 3), _repeat_index((4, 2), 2), randint(5, 3, seed=1)), targets=(A.scatter_add.default,))


@pytest.mark.parametrize(("reduce", "dtype"), [("sum", torch.float32), ("sum", I32), ("prod", torch.float32),
                                                ("prod", torch.int64)])
def test_scatter_reduce_include_self(reduce, dtype) -> None:
    x, s = randn(3, 4, dtype=dtype), randn(3, 5, seed=1, dtype=dtype)
    if not dtype.is_floating_point:
        x, s = randint(3, 4, low=-3, high=4, dtype=dtype), randint(3, 5, low=-3, high=4, dtype=dtype, seed=1)
    check(lambda x, i, s: A.scatter_reduce.two(x, -1, i, s, reduce, include_self=True),
          (x, _repeat_index((3, 5), 4), s), targets=(A.scatter_reduce.two,))


@pytest.mark.parametrize(("reduce", "include_self", "reason"), [
    ("mean", True, "reduce='mean'"),
    ("amax", True, "reduce='amax'"),
    ("amin", True, "reduce='amin'"),
    ("sum", False, "include_self=False"),
])
def test_scatter_reduce_refusals(reduce, include_self, reason) -> None:
    args = (randn(3, 4), _repeat_index((3, 5), 4), randn(3, 5, seed=1))
    assert reason in refused(lambda x, i, s: A.scatter_reduce.two(x, 1, i, s, reduce, include_self=include_self),
                             args, A.scatter_reduce.two)


def test_reductions_refuse_half_precision() -> None:
    args = (randn(3, 4, dtype=F16), _repeat_index((3, 5), 4), randn(3, 5, seed=1, dtype=F16))
    assert "float16" in refused(lambda x, i, s: A.scatter_add.default(x, 1, i, s), args, A.scatter_add.default)
    assert "float16" in refused(lambda x, i, s: A.scatter_reduce.two(x, 1, i, s, "sum"), args, A.scatter_reduce.two)
    assert "accumulate=True on torch.float16" in refused(
        lambda x, i, v: A.index_put.default(x, [i], v, True),
        (randn(3, 4, dtype=F16), torch.tensor([0, 0]), randn(2, 4, dtype=F16)), A.index_put.default)
    assert accepted(lambda x, i, s: A.scatter.src(x, 1, i, s), args, A.scatter.src)  # no reduction: fine


def test_scatter_refuses_bool_and_0d() -> None:
    assert "bool" in refused(lambda x, i, s: A.scatter.src(x, 0, i, s),
                             (torch.ones(3, dtype=torch.bool), torch.tensor([2, 0]), torch.zeros(2, dtype=torch.bool)),
                             A.scatter.src)
    assert "0-d" in refused(lambda x, i: A.scatter.value(x, 0, i, 1.0), (torch.tensor(1.0), torch.tensor(0)),
                            A.scatter.value)


# ---- index_put ---------------------------------------------------------------------------------------------


def test_index_put_one_index_rows() -> None:
    """One index for dim 0, negative positions, values broadcast over the rows."""
    check(lambda x, i, v: A.index_put.default(x, [i], v),
          (randn(5, 3), torch.tensor([-1, 0, 2]), randn(3, seed=1)), targets=(A.index_put.default,))


def test_index_put_two_broadcast_indices_int32_positions() -> None:
    """Two index tensors that broadcast ((2, 1) with (3,)), int32 positions, a float16 self."""
    i = torch.tensor([[0], [3]], dtype=I32)
    j = torch.tensor([1, -2, 0], dtype=I32)
    check(lambda x, i, j, v: A.index_put.default(x, [i, j], v),
          (randn(4, 5, 2, dtype=F16), i, j, randn(2, 3, 2, dtype=F16, seed=1)), targets=(A.index_put.default,))


def test_index_put_accumulate_adds_repeated_positions() -> None:
    check(lambda x, i, v: A.index_put.default(x, [i], v, True),
          (randint(4, 2), torch.tensor([1, 3, 1, 1]), randint(4, 2, seed=1)), targets=(A.index_put.default,))


def test_index_put_accumulate_float_scalar_values() -> None:
    check(lambda x, i, j, v: A.index_put.default(x, [i, j], v, accumulate=True),
          (randn(3, 4), torch.tensor([0, 2, 0]), torch.tensor([1, 1, 1]), torch.tensor(0.5)),
          targets=(A.index_put.default,))


def test_index_put_refusals() -> None:
    """What still stays in PyTorch (test_advanced_indexing.py has the rest): a mask with one value per True
    element; values that do not broadcast to the indexed shape is PyTorch's own error, so export never gets one."""
    x = randn(3, 4)
    assert "one value per True element" in refused(
        lambda x, m, v: A.index_put.default(x, [m], v),
        (x, torch.tensor([True, False, True]), randn(2, 4)), A.index_put.default)
    # Once refused, now converted: a full slice before the index, a bool mask, bool data.
    assert accepted(lambda x, i, v: A.index_put.default(x, [None, i], v), (x, torch.tensor([0, 1, 3]), randn(3)),
                    A.index_put.default)
    assert accepted(lambda x, m, v: A.index_put.default(x, [m], v),
                    (randn(3), torch.tensor([True, False, True]), randn(1)), A.index_put.default)
    assert accepted(lambda x, i, v: A.index_put.default(x, [i], v),
                    (torch.ones(3, dtype=torch.bool), torch.tensor([1]), torch.zeros(1, dtype=torch.bool)),
                    A.index_put.default)
    assert accepted(lambda x, i, v: A.index_put.default(x, [i], v), (x, torch.tensor([0]), randn(1, 4)),
                    A.index_put.default)
