"""Equivalence on every input set: eager against the compiled module, each output judged by the request's judge.

An output passes within the tolerances (``equivalence.compare_outputs``) or where the request's ``Judge`` accepts its
distance from float64 (``Judge.judge_call``: a deep network's rounding passes, a conversion error does not; below
float32 every output is judged against eager at that precision). Int and float inputs are varied too
(``scalar_input_violations``): the compiled module must match eager on them or refuse the call, never answer for the
example's value, judged by the same judge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from trtcheck.errors import InputMismatchError
from trtcheck.verification.eager_cache import EagerCache
from trtcheck.verification.equivalence import Comparison
from trtcheck.verification.inputs import cloned, detached, run_eager
from trtcheck.verification.invariants import Violation
from trtcheck.verification.judge import Judge
from trtcheck.verification.request import VerifyRequest
from trtcheck.verification.state import compiled_state, restore_state, snapshot_state


@dataclass
class Compared:
    """Every input set's comparison, in order, the notes on what could not be judged, and the compiled module's
    outputs on the first set (the example) under no_grad, which the other call modes must give too."""

    comparisons: list[Comparison] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    first: Any = None


def compare_on_input_sets(
    compiled: Any,
    model: torch.nn.Module,
    input_sets: Sequence[tuple],
    kwargs: Mapping[str, Any],
    request: VerifyRequest,
    cache: EagerCache,
    on_examples: Any,
    grad: bool,
) -> Compared:
    """Eager (``model``) against ``compiled`` on each of ``input_sets`` (the example, the example again, then the
    given or generated ones), every call from the state the calls before it left, each output judged (module
    docstring). ``on_examples``: eager's outputs on the examples, proved deterministic from the state verify started
    from, reused for the first two sets where no state changes between calls; ``grad``: eager computes other
    outputs under no_grad (``modes.grad_mode_violations``), so it runs with autograd on, as it was compiled.
    ``cache``: eager's outputs kept by an earlier verify, used where the model has no state."""
    found = Compared()
    judge = request.judge
    stateful = bool(compiled_state(compiled))  # eager's state before each call, for its float64 reference
    # Eager on the example and the example again, from the state it was checked from, is what the determinism
    # check computed (and proved twice alike): reused, where no state changes between the calls.
    known = None if stateful or grad else detached(on_examples)
    for index, input_set in enumerate(input_sets):
        state = snapshot_state(model) if stateful else None
        if index < 2 and known is not None:
            expected = known
        else:
            generated = request.inputs is None and index >= 2
            expected = _eager_outputs(model, input_set, kwargs, index, generated, grad, None if stateful else cache)
        with torch.no_grad():
            actual = compiled(*cloned(input_set), **cloned(kwargs))
        comparison = judge.compare(expected, actual)
        why = judge.judge_call(comparison, model, input_set, kwargs, expected, actual, state)
        if why:
            found.notes.append(f"input set {index}: {why}; the tolerances decide")
        found.comparisons.append(comparison)
        if index == 0:
            found.first = actual
    return found


def _eager_outputs(
    model: Any, input_set: tuple, kwargs: Mapping[str, Any], index: int, generated: bool, grad: bool, cache: EagerCache | None
) -> Any:
    """Eager's (detached) outputs on one input set, from ``cache`` where it holds them (a stateful model's calls
    start from another state each time: it passes none)."""
    known, outputs = cache.get(input_set, kwargs, grad) if cache is not None else (False, None)
    if not known:
        outputs = detached(run_eager(model, input_set, kwargs, index, generated=generated, grad=grad))
        if cache is not None:
            cache.put(input_set, kwargs, grad, outputs, model)
    return outputs


def scalar_input_violations(model, stitched, example_inputs, example_kwargs, judge: Judge) -> list[Violation]:
    """Each int/float input varied: the compiled module matches eager or refuses the call, never answers wrong, as
    ``judge`` judges it (where a reference cannot run, the tolerances decide)."""
    found: list[Violation] = []
    leaves, spec = tree_flatten((tuple(example_inputs), dict(example_kwargs)))
    names = stitched.signature.names
    for index, value in enumerate(leaves):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        varied = list(leaves)
        varied[index] = value * 2 + 3 if isinstance(value, int) else value * 2.5 + 1.0
        args, kwargs = tree_unflatten(varied, spec)
        state = snapshot_state(model)
        try:
            with torch.no_grad():
                expected = model(*cloned(args), **cloned(kwargs))
        except Exception:  # noqa: BLE001 - eager rejects the varied value: nothing to compare
            continue
        finally:
            restore_state(model, state)
        try:
            with torch.no_grad():
                actual = stitched(*cloned(args), **cloned(kwargs))
        except InputMismatchError:
            continue  # refusing a value it was not compiled for is sound
        comparison = judge.compare(expected, actual)
        judge.judge_call(comparison, model, args, kwargs, expected, actual, state)  # no reference: the tolerances decide
        if not comparison.passed:
            message = f"{names[index]}={varied[index]!r} (compiled with {value!r}): outputs differ from eager\n{comparison}"
            found.append(Violation("scalar_input", message))
    return found
