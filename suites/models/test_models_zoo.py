"""Every zoo entry builds, runs, is deterministic and exports the way downstream code needs.

Heavy entries are in the slow tier (``--slow`` or ``-m slow``), the default tier runs the others.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import trtcheck_zoo as models


def _params(names: tuple[str, ...] | list[str], slow_tags: frozenset[str] = frozenset({"heavy"})) -> list[Any]:
    return [
        pytest.param(name, id=name, marks=[pytest.mark.slow] if models.get(name).tags & slow_tags else [])
        for name in names
    ]


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors in a pytree of outputs or inputs, in a fixed order."""
    leaves, _ = torch.utils._pytree.tree_flatten(value)
    return [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]


def _run(model: nn.Module, inputs: tuple[Any, ...]) -> Any:
    with torch.no_grad():
        return model(*inputs)


def _run_checking_fallback_module(model: nn.Module, inputs: tuple[Any, ...], entry: models.ZooEntry) -> Any:
    """Run ``model``; the entry's ``fallback_module`` must exist and be called by that forward
    (a path that exists but is never called would make module fallback a silent no-op)."""
    if entry.fallback_module is None:
        return _run(model, inputs)
    submodule = model.get_submodule(entry.fallback_module)  # AttributeError when the path is wrong
    assert submodule is not model
    calls = []
    # A ModuleList or ModuleDict is never called itself: forward calls its members.
    hooked = list(submodule.children()) if isinstance(submodule, (nn.ModuleList, nn.ModuleDict)) else [submodule]
    handles = [module.register_forward_hook(lambda *_: calls.append(1)) for module in hooked]
    try:
        outputs = _run(model, inputs)
    finally:
        for handle in handles:
            handle.remove()
    assert calls, f"{entry.fallback_module} exists in {entry.name} but is not called by forward"
    return outputs


@pytest.mark.parametrize("name", _params(models.DEFAULT_ZOO, slow_tags=frozenset({"heavy", "torchvision"})))
def test_entry_builds_runs_and_is_deterministic(name):
    """One test per entry (building twice), because building is most of the cost of each check."""
    entry = models.get(name)
    model, inputs = entry.factory()
    again_model, again_inputs = entry.factory()
    assert isinstance(model, nn.Module) and isinstance(inputs, tuple)
    assert not any(module.training for module in model.modules()), "factory must return an eval-mode model"
    state, again_state = model.state_dict(), again_model.state_dict()  # before forward updates any buffer
    assert state.keys() == again_state.keys()
    assert all(torch.equal(state[k], again_state[k]) for k in state)
    for a, b in zip(_tensors(inputs), _tensors(again_inputs), strict=True):  # before forward updates any input in place
        assert torch.equal(a, b)
    first = _tensors(_run_checking_fallback_module(model, inputs, entry))
    assert first and all(torch.isfinite(t.float()).all() for t in first)
    magnitudes = [t.abs().max().item() for t in first if t.is_floating_point()]
    assert all(m > 0 for m in magnitudes), "an all-zero output would hide conversion bugs"
    assert all(m < 1e3 for m in magnitudes), "exploding activations make tolerance checks meaningless"

    for a, b in zip(first, _tensors(_run(again_model, again_inputs)), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("name", _params(models.TORCHVISION_ZOO, slow_tags=frozenset({"heavy", "torchvision"})))
def test_torchvision_entry_exports_with_fallback_module_in_stack(name):
    """torch.export works and the fallback module shows up in ``nn_module_stack``, which is what
    module fallback keys on."""
    entry = models.get(name)
    model, inputs = entry.factory()
    program = torch.export.export(model, inputs)
    paths = {
        path
        for node in program.graph.nodes
        for path, _ in (node.meta.get("nn_module_stack") or {}).values()
    }
    assert entry.fallback_module in paths


def test_every_torchvision_entry_has_a_fallback_module():
    assert all(models.get(name).fallback_module for name in models.TORCHVISION_ZOO)
