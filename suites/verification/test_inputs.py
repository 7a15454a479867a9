"""The input sets ``verify`` generates: one policy (``draw_like``) for the same-size sets and the dynamic-size ones."""

from __future__ import annotations

import importlib

import torch
from torch import nn

import trtcheck
from trtcheck.verification.inputs import draw_like, input_set_of_sizes, random_like

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
    verifying = importlib.import_module("trtcheck.verification.verify")  # the module: the package exports verify()

    seen = []
    run_eager = verifying.run_eager

    def recording(model, input_set, *args, **kwargs):
        seen.append(input_set[0].clone())
        return run_eager(model, input_set, *args, **kwargs)

    monkeypatch.setattr(verifying, "run_eager", recording)
    ids = torch.tensor([[0, 5, 2], [3, 1, 4]])
    report = trtcheck.verify(Lookup(), (ids, torch.randn(2, 3, 4)), ONE, backend="onnxruntime", num_inputs=4)
    assert report.passed and len(seen) == 5  # example, example again, 3 generated sets
    assert all(torch.equal(s, ids) for s in seen[:2])
    generated = seen[2:]
    assert all(0 <= int(s.min()) and int(s.max()) <= 5 for s in generated)
    assert not any(torch.equal(s, ids) for s in generated), "the integer input must be redrawn, not kept"
