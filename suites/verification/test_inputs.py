"""The input sets ``verify`` generates: one policy (``draw_like``) for the same-size sets and the dynamic-size ones."""

from __future__ import annotations

import importlib

import pytest
import torch
from torch import nn

import trtcheck
from trtcheck import conversion as converters
from trtcheck.verification.inputs import EDGE_SHARE, draw_like, input_set_of_sizes, random_like

ONE = trtcheck.Settings(min_block_size=1)


def test_each_kind_of_leaf_is_drawn_like_its_example():
    generator = torch.Generator().manual_seed(0)
    floats = draw_like(torch.zeros(2, 3, dtype=torch.float16), (50, 40), generator)
    assert floats.shape == (50, 40) and floats.dtype == torch.float16 and 0.8 < float(floats.float().std()) < 1.2
    coins = draw_like(torch.tensor([True, True]), (1000,), generator)
    assert coins.dtype == torch.bool and 400 < int(coins.sum()) < 600
    indices = draw_like(torch.tensor([[3, 7], [5, 5]], dtype=torch.int32), (1000,), generator)
    assert indices.dtype == torch.int32 and set(indices.tolist()) == {3, 4, 5, 6, 7}  # the example's [min, max], ends included
    empty = draw_like(torch.zeros(0, dtype=torch.int64), (2, 3), generator)
    assert torch.equal(empty, torch.zeros(2, 3, dtype=torch.int64))  # nothing to observe: zeros
    assert draw_like(2.5, (), generator) == 2.5 and draw_like("mode", (), generator) == "mode"


class _AtExampleSizes:
    """A signature whose every input keeps the example's shape (``InputSignature.shape_for`` of a static model)."""

    def __init__(self, example):
        self.example = example

    def shape_for(self, index, values):
        return tuple(self.example[index].shape)


def test_same_size_and_sized_sets_are_drawn_alike():
    """At the example's sizes, a dynamic-size set is the same draw as a same-size set from the same seed."""
    example = (torch.randn(3, 4), torch.tensor([2, 9, 4]), torch.tensor([True, False]), 1.5)
    same_size = random_like(example, torch.Generator().manual_seed(3))
    sized = input_set_of_sizes(_AtExampleSizes(example), example, {}, torch.Generator().manual_seed(3))
    assert len(same_size) == len(sized) == 4 and same_size[3] == sized[3] == 1.5
    for drawn, again, original in zip(same_size[:3], sized[:3], example[:3]):
        assert torch.equal(drawn, again) and drawn.dtype == original.dtype and drawn.shape == original.shape
    assert not torch.equal(same_size[1], example[1]) and 2 <= int(same_size[1].min()) <= int(same_size[1].max()) <= 9


def test_random_like_draws_every_leaf_of_a_pytree():
    example = {"x": torch.randn(2), "ids": [torch.tensor([0, 4]), torch.tensor([1, 1])]}
    drawn = random_like(example, torch.Generator().manual_seed(0))
    assert drawn.keys() == example.keys() and len(drawn["ids"]) == 2
    assert torch.equal(drawn["ids"][1], torch.tensor([1, 1]))  # min == max: the only value the example shows


class Lookup(nn.Module):
    """An index input: drawn within the example's observed range, every generated index stays valid."""

    def __init__(self):
        super().__init__()
        self.table = nn.Embedding(6, 4)

    def forward(self, ids, x):
        return torch.relu(self.table(ids) + x)


def test_verify_compares_on_drawn_indices_that_stay_valid(monkeypatch):
    verifying = importlib.import_module("trtcheck.verification.comparisons")  # eager on every compared input set
    checking = importlib.import_module("trtcheck.verification.determinism")  # eager on the examples: twice, then
    modes = importlib.import_module("trtcheck.verification.modes")  # once with autograd on

    seen, checks = [], []
    run_eager = verifying.run_eager

    def recording(into):
        def run(model, input_set, *args, **kwargs):
            into.append((input_set[0].clone(), kwargs.get("grad", False)))
            return run_eager(model, input_set, *args, **kwargs)

        return run

    monkeypatch.setattr(verifying, "run_eager", recording(seen))
    monkeypatch.setattr(checking, "run_eager", recording(checks))
    monkeypatch.setattr(modes, "run_eager", recording(checks))
    ids = torch.tensor([[0, 5, 2], [3, 1, 4]])
    report = trtcheck.verify(Lookup(), (ids, torch.randn(2, 3, 4)), ONE, backend="onnxruntime", num_inputs=4)
    # Eager on the example: twice for its determinism, once with autograd on for the grad-mode check; its no_grad
    # outputs serve the grad-mode check and the example's two comparisons (issue 25). Then 3 generated sets.
    assert report.passed and len(report.comparisons) == 5
    assert [grad for _, grad in checks] == [False, False, True] and all(torch.equal(s, ids) for s, _ in checks)
    generated = [s for s, _ in seen]
    assert len(generated) == 3
    assert all(0 <= int(s.min()) and int(s.max()) <= 5 for s in generated)
    assert not any(torch.equal(s, ids) for s in generated), "the integer input must be redrawn, not kept"


# ---- integer edge values ------------------------------------------------------------------------------------------


def _counts(values: torch.Tensor) -> dict[int, int]:
    unique, counts = values.unique(return_counts=True)
    return dict(zip(unique.tolist(), counts.tolist()))


def test_integers_get_a_share_of_edge_values_within_the_observed_range():
    example = torch.tensor([[-5, 40], [100, 7]], dtype=torch.int32)
    drawn = draw_like(example, (8000,), torch.Generator().manual_seed(0))
    assert drawn.dtype == torch.int32 and -5 <= int(drawn.min()) and int(drawn.max()) <= 100
    counts = _counts(drawn)
    uniform = 8000 * (1 - EDGE_SHARE) / 106  # what each value gets from the uniform draw alone (~57)
    for edge in (-5, 100, 0, 1, -1):  # the example's min and max, 0 and +-1 (all within [-5, 100] here)
        assert counts.get(edge, 0) > uniform + 8000 * EDGE_SHARE / 5 / 2, (edge, counts.get(edge))
    assert counts.get(50, 0) < 2 * uniform  # any other value: the uniform draw only


def test_edge_values_never_leave_the_observed_range_so_indices_stay_valid():
    generator = torch.Generator().manual_seed(1)
    indices = draw_like(torch.tensor([2, 9, 4]), (5000,), generator)
    assert set(indices.tolist()) == set(range(2, 10))  # no 0, 1 or -1: they are not in [2, 9]
    assert _counts(indices)[2] > 5000 * EDGE_SHARE / 2 / 2 and _counts(indices)[9] > 5000 * EDGE_SHARE / 2 / 2
    positions = draw_like(torch.tensor([0, 5]), (5000,), generator)
    assert set(positions.tolist()) == set(range(6))  # 0 and 1 are edges, -1 is not in [0, 5]
    assert set(draw_like(torch.tensor([[0, 1], [1, 0]], dtype=torch.uint8), (100,), generator).tolist()) == {0, 1}


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=["int32", "int64"])
def test_the_dtype_extremes_are_drawn_only_where_the_example_holds_them(dtype):
    info = torch.iinfo(dtype)
    generator = torch.Generator().manual_seed(2)
    at_min = draw_like(torch.tensor([info.min, 3, 100], dtype=dtype), (2000,), generator)
    assert int(at_min.min()) == info.min and int(at_min.max()) <= 100  # min drawn, max not: it is out of range
    assert _counts(at_min)[info.min] > 2000 * EDGE_SHARE / 5 / 2
    wide = draw_like(torch.tensor([info.min // 2, info.max // 2], dtype=dtype), (2000,), generator)
    assert info.min // 2 <= int(wide.min()) and int(wide.max()) <= info.max // 2  # a wide range is not widened
    full = draw_like(torch.tensor([info.max, info.min, 0], dtype=dtype), (2000,), generator)  # int64: no randint overflow
    assert {info.min, info.max, 0, 1, -1} <= set(full.tolist())
    assert torch.equal(draw_like(torch.tensor([info.max], dtype=dtype), (3,), generator), torch.full((3,), info.max, dtype=dtype))


class FloorDivide(nn.Module):
    def forward(self, x, y):
        return x // y


def _overflowing_floor_divide(ctx, node):
    """The integer floor division trtcheck used to emit: (a - a mod b) / b, which overflows below INT_MIN."""
    a, b = ctx.name(node.args[0]), ctx.name(node.args[1])
    return ctx.add("Div", [ctx.add("Sub", [a, ctx.add("Mod", [a, b], fmod=0)]), b])


def _int_min_example():
    """x holds INT_MIN, paired in the example with a divisor of 1 (where the overflowing form is right), so only
    generated sets that put INT_MIN against 2 or 3 can tell a wrong converter; no divisor is ever 0."""
    x = torch.randint(-50, 50, (4, 64), generator=torch.Generator().manual_seed(0), dtype=torch.int32)
    y = torch.randint(1, 4, (4, 64), generator=torch.Generator().manual_seed(1), dtype=torch.int32)
    x[0, 0], y[0, 0] = torch.iinfo(torch.int32).min, 1
    return x, y


def test_verify_passes_an_int32_floor_division_whose_example_holds_int_min():
    report = trtcheck.verify(FloorDivide(), _int_min_example(), ONE, backend="onnxruntime")
    assert report.passed and len(report.comparisons) == 4


def test_verify_catches_a_floor_division_converter_wrong_only_near_int_min():
    """Uniform draws in [INT_MIN, 49] almost never hit INT_MIN or INT_MIN + 1, the values the planted converter
    gets wrong; the edge values put INT_MIN in every generated set."""
    x, y = _int_min_example()
    with torch.no_grad():
        assert FloorDivide()(x, y).tolist() == (x.long() // y.long()).tolist()  # eager is right: int64 says so
    target = torch.ops.aten.div.Tensor_mode  # what x // y lowers to (rounding_mode="floor")
    with converters.Snapshot():
        converters.register(target, validator=converters.get(target).validator, override=True)(_overflowing_floor_divide)
        with pytest.raises(trtcheck.VerificationError) as caught:
            trtcheck.verify(FloorDivide(), (x, y), ONE, backend="onnxruntime")
    comparisons = caught.value.report.comparisons
    assert [c.passed for c in comparisons[:2]] == [True, True]  # the example itself cannot tell
    assert not all(c.passed for c in comparisons[2:]), "a generated set must put INT_MIN against a divisor of 2 or 3"
