"""The model's parameters and buffers: snapshots, restores, and what changed.

``verify`` runs the user's model several times; a model that updates a buffer in ``forward`` must start
each comparison from the same state, and compiling must leave the model as it found it.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

import torch
import torch.fx

from trtcheck.lowering.graph import is_mutable_state
from trtcheck.verification.invariants import Violation


def snapshot_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Copies of every parameter and buffer of ``model``, by name."""
    with torch.no_grad():
        return {name: tensor.detach().clone() for name, tensor in _state(model).items()}


def live_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``model``'s parameters and buffers themselves, by name (detached): to compare with a snapshot without
    copying the weights once more."""
    return {name: tensor.detach() for name, tensor in _state(model).items()}


def restore_state(model: torch.nn.Module, snapshot: Mapping[str, torch.Tensor]) -> None:
    """Write ``snapshot`` back into ``model``'s parameters and buffers (the same tensors, updated in place)."""
    with torch.no_grad():
        for name, tensor in _state(model).items():
            if name in snapshot and tensor.shape == snapshot[name].shape:
                tensor.copy_(snapshot[name])


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    state = dict(model.named_parameters(remove_duplicate=False))
    state.update(model.named_buffers(remove_duplicate=False))
    return state


def state_violations(before: Mapping[str, torch.Tensor], after: Mapping[str, torch.Tensor], what: str) -> list[Violation]:
    """The parameters and buffers ``what`` changed (compile must leave the user's model as it found it)."""
    changed = [
        name
        for name in before.keys() | after.keys()
        if name not in before or name not in after or not _same_tensor(before[name], after[name])
    ]
    return [Violation("model_state", f"{what} changed the model's {name}") for name in sorted(changed)]


def same_state(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> bool:
    """Two snapshots with the same names and bitwise the same tensors (a NaN equals a NaN where it stands)."""
    return a.keys() == b.keys() and all(_same_tensor(a[name], b[name]) for name in a)


def _same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        return False
    return torch.equal(a, b) or (a.is_floating_point() and bool(((a == b) | (a.isnan() & b.isnan())).all()))


def compiled_state(compiled: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Copies of a compiled module's mutable state (the buffers its ``forward`` writes), with the tensors
    themselves: an extra call of it in a check must leave the state the next comparison starts from."""
    graph_module = compiled.conversion.graph_module
    with torch.no_grad():
        return [
            (tensor, tensor.detach().clone())
            for tensor in (operator.attrgetter(node.target)(graph_module) for node in graph_module.graph.nodes if is_mutable_state(node))
        ]


def restore_compiled_state(compiled: Any, state: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    with torch.no_grad():
        for tensor, saved in state:
            tensor.copy_(saved)
