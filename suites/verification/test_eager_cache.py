"""``verify(eager_cache=)``: the verify calls of one model under several settings share eager's outputs, and only
while the model and the inputs are the same (issue 25: the matrix ran eager about six times per preset)."""

from __future__ import annotations

import importlib

import pytest
import torch
from torch import nn

import trtcheck
from trtcheck.verification.eager_cache import EagerCache
from trtcheck.verification.state import snapshot_state

ONE = trtcheck.Settings(min_block_size=1)
RELU_IN_TORCH = trtcheck.Settings(min_block_size=1, torch_executed_ops=["aten.relu.default"])


class Net(nn.Module):
    def __init__(self, slope: float = 0.1) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.act = nn.LeakyReLU(slope)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.act(self.lin(x))) - 0.5


def _built(slope: float = 0.1) -> Net:
    torch.manual_seed(0)  # every Net alike but for its slope: the same weights
    return Net(slope).eval()


@pytest.fixture
def eager_calls(monkeypatch) -> list[bool]:
    """Every eager run verify makes (its grad mode), in verify itself and in its determinism checks."""
    calls: list[bool] = []
    # every module that runs eager for verify: its comparisons, its determinism check, its autograd-on run
    for module in ("trtcheck.verification.comparisons", "trtcheck.verification.determinism", "trtcheck.verification.modes"):
        namespace = importlib.import_module(module)
        run_eager = namespace.run_eager

        def recording(*args, _run=run_eager, **kwargs):
            calls.append(kwargs.get("grad", False))
            return _run(*args, **kwargs)

        monkeypatch.setattr(namespace, "run_eager", recording)
    return calls


X = torch.randn(2, 4)


def test_a_second_setting_runs_eager_once(eager_calls) -> None:
    cache = EagerCache()
    first = trtcheck.verify(_built(), (X,), ONE, backend="onnxruntime", eager_cache=cache)
    assert eager_calls == [False, False, True, False, False]  # determinism twice, autograd on, 2 random sets
    eager_calls.clear()
    second = trtcheck.verify(_built(), (X,), RELU_IN_TORCH, backend="onnxruntime", eager_cache=cache)  # a fresh build
    assert eager_calls == [False] and cache.hits == 4  # the examples once more: the kept outputs proven still right
    assert first.passed and second.passed and len(second.comparisons) == 4
    assert [c.outputs[0].max_abs for c in second.comparisons] == [c.outputs[0].max_abs for c in first.comparisons]


def test_changed_weights_are_computed_again_and_judged_on_them(eager_calls) -> None:
    """Stale outputs would fail this: the compiled module computes with the new weights."""
    cache, model = EagerCache(), _built()
    trtcheck.verify(model, (X,), ONE, backend="onnxruntime", eager_cache=cache)
    with torch.no_grad():
        model.lin.bias.add_(3.0)
    eager_calls.clear()
    # reference=False: a stale eager output is then a failed comparison (float64 would side with the compiled module)
    report = trtcheck.verify(model, (X,), ONE, backend="onnxruntime", eager_cache=cache, reference=False)
    assert report.passed and len(eager_calls) == 5 and cache.hits == 0


def test_same_weights_in_another_structure_are_computed_again(eager_calls) -> None:
    cache = EagerCache()
    trtcheck.verify(_built(0.1), (X,), ONE, backend="onnxruntime", eager_cache=cache)
    eager_calls.clear()
    report = trtcheck.verify(_built(0.7), (X,), ONE, backend="onnxruntime", eager_cache=cache)  # LeakyReLU's slope only
    assert report.passed and len(eager_calls) == 5 and cache.hits == 0


def test_other_input_sets_are_computed_again_and_the_examples_reused(eager_calls) -> None:
    cache = EagerCache()
    trtcheck.verify(_built(), (X,), ONE, backend="onnxruntime", eager_cache=cache, seed=0)
    eager_calls.clear()
    report = trtcheck.verify(_built(), (X,), ONE, backend="onnxruntime", eager_cache=cache, seed=1)
    assert report.passed and eager_calls == [False, False, False] and cache.hits == 2  # the examples: no_grad, autograd on


class Counter(nn.Module):
    """Stateful: each call adds its input's sum to a buffer and returns the running total."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.total.add_(x.sum())
        return x * self.total


def test_a_stateful_model_shares_only_what_starts_from_the_same_state(eager_calls) -> None:
    cache = EagerCache()
    trtcheck.verify(Counter(), (X,), ONE, backend="onnxruntime", eager_cache=cache)
    first = len(eager_calls)
    eager_calls.clear()
    report = trtcheck.verify(Counter(), (X,), ONE, backend="onnxruntime", eager_cache=cache)
    # the examples run from the state verify started from: reused (after one run proving them); every later set runs
    # from the state the calls before it left, so each is computed again
    assert report.passed and len(eager_calls) == first - 2 and cache.hits == 2


class Scaled(nn.Module):
    """Its forward reads a plain attribute: neither its repr nor its state shows ``factor``."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.factor = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.factor


def test_what_the_binding_cannot_see_shows_in_the_examples_run_again(eager_calls) -> None:
    """A plain attribute changed between two calls: the examples' run again differs from the kept outputs, so the
    cache is emptied and every output computed again; stale ones would fail this (reference=False)."""
    cache, model = EagerCache(), Scaled().eval()
    trtcheck.verify(model, (X,), ONE, backend="onnxruntime", eager_cache=cache)
    model.factor = 3.0
    eager_calls.clear()
    report = trtcheck.verify(model, (X,), ONE, backend="onnxruntime", eager_cache=cache, reference=False)
    assert report.passed and len(eager_calls) == 5 and cache.hits == 1  # found, disproved, emptied


class Dropped(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.lin(x))


def test_train_mode_and_hooks_are_part_of_the_binding() -> None:
    model = Dropped().eval()
    cache = EagerCache()
    cache.bind(model, snapshot_state(model))
    assert cache.put((X,), None, False, "outputs", model)
    model.drop.train()  # dropout on: eager no longer computes what was kept, and the repr does not say so
    cache.bind(model, snapshot_state(model))
    assert cache.get((X,), None, False) == (False, None)
    model.eval()
    cache.put((X,), None, False, "outputs", model)
    model.lin.register_forward_hook(lambda module, args, out: out * 2)
    cache.bind(model, snapshot_state(model))
    assert cache.get((X,), None, False) == (False, None)
    with pytest.raises(trtcheck.NondeterministicModelError):  # and verify says why it cannot compare a dropout
        trtcheck.verify(Dropped().train(), (X,), ONE, backend="onnxruntime", eager_cache=cache)


class Aliasing(nn.Module):
    """Returns its own buffer, which each call advances: an output kept by reference would change under the cache."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("steps", torch.zeros(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.steps.add_(1)
        return self.steps


def test_outputs_are_kept_as_copies_and_not_kept_when_the_run_changed_the_state() -> None:
    model = Aliasing()
    cache = EagerCache()
    cache.bind(model, snapshot_state(model))
    with torch.no_grad():
        out = model(X)
    assert not cache.put((X,), None, False, out, model)  # the run moved the buffer: not the bound state any more
    model.steps.zero_()
    cache.put((X,), None, False, model.steps, model)
    model.steps.add_(5)
    assert torch.equal(cache.get((X,), None, False)[1], torch.zeros(3))


def test_a_nondeterministic_model_is_never_cached() -> None:
    class Noisy(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.rand_like(x)

    cache = EagerCache()
    for _ in range(2):  # raised both times: no agreed outputs were kept from the first
        with pytest.raises(trtcheck.NondeterministicModelError):
            trtcheck.verify(Noisy(), (X,), ONE, backend="onnxruntime", eager_cache=cache)
    assert cache.hits == 0


def test_lookups_compare_inputs_bitwise_and_the_grad_mode() -> None:
    cache, model = EagerCache(), _built()
    cache.bind(model, snapshot_state(model))
    ids = torch.tensor([1, 2])
    cache.put((X, ids), {"scale": 2.0}, False, "outputs", model)
    assert cache.get((X.clone(), ids.clone()), {"scale": 2.0}, False) == (True, "outputs")
    assert cache.get((X, ids), {"scale": 2.0}, True) == (False, None)
    assert cache.get((X, ids.to(torch.int32)), {"scale": 2.0}, False) == (False, None)  # same values, other dtype
    assert cache.get((X + 1e-7, ids), {"scale": 2.0}, False) == (False, None)
    assert cache.get((X, ids), {"scale": 3.0}, False) == (False, None)
    assert cache.get((X, ids), None, False) == (False, None)
    assert cache.get((X, [1, 2]), {"scale": 2.0}, False) == (False, None)
    zero = torch.zeros(2)
    cache.put((zero,), None, False, "at +0", model)
    assert cache.get((-zero,), None, False) == (False, None)  # -0.0 == 0.0, yet 1 / x differs
    with pytest.raises(RuntimeError, match="before bind"):
        EagerCache().put((X,), None, False, "outputs", model)
