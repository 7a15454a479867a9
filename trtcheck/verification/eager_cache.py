"""Eager's outputs on verify's input sets, kept for the next verify call of the same model.

The matrix verifies every zoo model under four presets, and eager computes the same outputs under all of them:
its determinism check, its autograd-on run and its run on each random input set are model-level work that the
presets repeated (issue 25: on vit_b_16 about six eager calls per preset). ``EagerCache`` lets the later calls
reuse what the first computed, and nothing else: an entry is used only for the same model (class, structure,
and every parameter and buffer bitwise) and the same inputs (bitwise), in the same grad mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from trtcheck.verification.state import same_state


@dataclass(frozen=True)
class _Entry:
    inputs: tuple
    kwargs: dict
    grad: bool
    outputs: Any


class EagerCache:
    """Eager's outputs per input set for one model, shared by the ``verify`` calls given the same cache
    (``verify(..., eager_cache=)``; the plugin's ``trtcheck_verify`` passes one per zoo model).

    ``bind`` ties the cache to a model: its class, its ``repr`` (the structure and the arguments modules show:
    sizes, eps, dropout p) and a snapshot of its parameters and buffers. A call whose model differs in any of them
    empties the cache first, so a stale output is never returned. What neither the repr nor the state shows
    (a plain attribute the forward reads, changed between two calls) is not seen: give such calls separate
    caches, or none.
    """

    def __init__(self) -> None:
        self._identity: tuple[type, str] | None = None
        self._state: Mapping[str, torch.Tensor] | None = None
        self._entries: list[_Entry] = []
        self.hits = 0

    def bind(self, model: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> None:
        """Tie the cache to ``model`` in ``state`` (``snapshot_state``'s copies, which the cache keeps)."""
        identity = (type(model), repr(model))
        if identity == self._identity and self._state is not None and same_state(self._state, state):
            return
        self._identity, self._state, self._entries = identity, state, []

    def get(self, input_set: tuple, kwargs: Mapping[str, Any] | None, grad: bool) -> tuple[bool, Any]:
        """``(True, outputs)`` where eager's outputs on these inputs in this grad mode are known, else ``(False, None)``."""
        for entry in self._entries:
            if entry.grad == grad and _same_values(entry.inputs, tuple(input_set)) and _same_values(entry.kwargs, dict(kwargs or {})):
                self.hits += 1
                return True, entry.outputs
        return False, None

    def put(self, input_set: tuple, kwargs: Mapping[str, Any] | None, grad: bool, outputs: Any) -> None:
        """Keep eager's ``outputs`` (detached, never changed afterwards) on ``input_set`` computed from the bound state."""
        if self._identity is None:
            raise RuntimeError("EagerCache.put before bind: the cache must know which model the outputs are of")
        self._entries.append(_Entry(_copied(tuple(input_set)), _copied(dict(kwargs or {})), grad, outputs))


def _copied(value: Any) -> Any:
    return torch.utils._pytree.tree_map(lambda x: x.detach().clone() if isinstance(x, torch.Tensor) else x, value)


def _same_values(a: Any, b: Any) -> bool:
    """Bitwise equal leaves in the same structure (a NaN never equals itself: such inputs are simply not reused)."""
    leaves_a, spec_a = tree_flatten(a)
    leaves_b, spec_b = tree_flatten(b)
    if spec_a != spec_b:
        return False
    for x, y in zip(leaves_a, leaves_b):
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
                return False
            if x.dtype != y.dtype or x.shape != y.shape or x.layout != y.layout or not torch.equal(x, y):
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True
