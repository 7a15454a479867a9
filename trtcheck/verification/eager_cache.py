"""Eager's outputs on verify's input sets, kept for the next verify call of the same model.

The matrix verifies every zoo model under four presets, and eager computes the same outputs under all of them:
its determinism check, its autograd-on run and its run on each random input set are model-level work that the
presets repeated (on vit_b_16 about six eager calls per preset). ``EagerCache`` lets the later calls
reuse what the first computed, and nothing else: an entry is used only for the same model (class, structure,
training flags, hooks, and every parameter and buffer bitwise) and the same inputs (bitwise), in the same grad
mode, and only after eager, run once more on the examples, has given the kept outputs again bit for bit
(``verify``'s determinism check does that: whatever the binding cannot see, a plain attribute the forward reads,
a global flag, shows there and empties the cache).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from trtcheck.values import cloned, same_values
from trtcheck.verification.state import live_state, same_state


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
    sizes, eps, dropout p), every submodule's ``training`` flag and hooks, a GraphModule's code, and a snapshot of
    its parameters and buffers. A call whose model differs in any of them empties the cache first. What none of
    them shows (a plain attribute the forward reads) is caught by the caller's check on a hit: verify runs eager
    once more on the examples and requires the kept outputs bit for bit, else it calls ``clear``.
    """

    def __init__(self) -> None:
        self._identity: tuple | None = None
        self._state: Mapping[str, torch.Tensor] | None = None
        self._entries: list[_Entry] = []
        self.hits = 0

    def bind(self, model: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> None:
        """Tie the cache to ``model`` in ``state`` (``snapshot_state``'s copies, which the cache keeps)."""
        identity = _identity(model)
        if identity == self._identity and self._state is not None and same_state(self._state, state):
            return
        self._identity, self._state, self._entries = identity, state, []

    def clear(self) -> None:
        """Forget every output (the model computed something else than they say, in a way the binding cannot see)."""
        self._entries = []

    def get(self, input_set: tuple, kwargs: Mapping[str, Any] | None, grad: bool) -> tuple[bool, Any]:
        """``(True, outputs)`` where eager's outputs on these inputs in this grad mode are known, else ``(False, None)``."""
        for entry in self._entries:
            if entry.grad == grad and same_values(entry.inputs, tuple(input_set)) and same_values(entry.kwargs, dict(kwargs or {})):
                self.hits += 1
                return True, entry.outputs
        return False, None

    def put(self, input_set: tuple, kwargs: Mapping[str, Any] | None, grad: bool, outputs: Any, model: torch.nn.Module) -> bool:
        """Keep a copy of eager's (detached) ``outputs`` on ``input_set``, computed by ``model`` from the bound state; where the
        model's parameters and buffers are no longer that state (the run changed them), nothing is kept. Returns
        whether they were kept."""
        if self._identity is None or self._state is None:
            raise RuntimeError("EagerCache.put before bind: the cache must know which model the outputs are of")
        if _identity(model) != self._identity or not same_state(self._state, live_state(model)):
            return False
        self._entries.append(_Entry(cloned(tuple(input_set)), cloned(dict(kwargs or {})), grad, cloned(outputs)))
        return True


def _identity(model: torch.nn.Module) -> tuple:
    """What tells two models apart besides their parameters and buffers (see ``EagerCache``)."""
    modules = list(model.modules())
    return (
        type(model),
        repr(model),
        tuple(module.training for module in modules),
        tuple(tuple(map(id, hooks.values())) for module in modules for hooks in _hook_dicts(module)),
        getattr(model, "code", None),
    )


def _hook_dicts(module: torch.nn.Module) -> list[dict]:
    return [value for name, value in vars(module).items() if name.endswith("hooks") and isinstance(value, dict)]
