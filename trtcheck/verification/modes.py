"""How users call a model and its compiled module: under ``torch.no_grad()``, with autograd on, under ``inference_mode``.

``verify`` compares under ``torch.no_grad()``, but eager may take another code path there than torch.export traced
(``grad_mode_violations``: ``nn.TransformerEncoder``'s fast path), and users call the compiled module in every mode
(``call_mode_violations``: it must run in each, and give what it gives under no_grad, ``mode_output_violations``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from trtcheck.verification.eager_cache import EagerCache
from trtcheck.verification.equivalence import compare_outputs
from trtcheck.verification.inputs import cloned, detached, run_eager
from trtcheck.verification.invariants import Violation
from trtcheck.verification.state import compiled_state, restore_compiled_state, restore_state

CALL_MODES: tuple[tuple[str, Any], ...] = (("autograd on", torch.enable_grad), ("inference_mode", torch.inference_mode))
"""How users call a compiled module besides ``torch.no_grad()`` (where the comparisons call it)."""


def grad_mode_violations(
    model: torch.nn.Module, example_inputs: Sequence[Any], kwargs: dict, state: Mapping[str, torch.Tensor],
    rtol: float | None = None, atol: float | None = None, inference: Any = None, cache: EagerCache | None = None,
) -> list[Violation]:
    """Eager under ``torch.no_grad()`` against eager with autograd on, on the examples from the same state,
    within the check's tolerances (``rtol``/``atol``).

    Some modules take another code path in inference (``nn.TransformerEncoder``'s fast path under no_grad
    turns padded positions to zeros); torch.export traces the other one, so the compiled module computes what
    eager computes with autograd on. A difference is a violation naming it and the fix, not an unexplained
    "outputs differ"; the comparisons then use eager with autograd on, which is what was compiled.
    ``inference``: eager's no_grad outputs on the examples from ``state`` where already computed
    (``check_eager_is_deterministic``'s). ``cache``: eager's autograd-on outputs there, reused and kept.
    """
    if inference is None:
        inference = run_eager(model, tuple(example_inputs), kwargs, 0, generated=False, grad=False)
        restore_state(model, state)
    known, training = cache.get(tuple(example_inputs), kwargs, grad=True) if cache is not None else (False, None)
    if not known:
        training = detached(run_eager(model, tuple(example_inputs), kwargs, 0, generated=False, grad=True))
        restore_state(model, state)
        if cache is not None:
            cache.put(tuple(example_inputs), kwargs, True, training, model)
    comparison = compare_outputs(inference, detached(training), rtol=rtol, atol=atol)  # other kernels: rounding differs
    if comparison.passed:
        return []
    worst = max((output.max_abs for output in comparison.outputs), default=float("nan"))
    return [Violation(
        "grad_mode",
        f"eager {type(model).__name__} computes other outputs under torch.no_grad() than with autograd on (max abs "
        f"difference {worst:.3g}): it takes another code path in inference, which torch.export does not trace. The "
        "compiled module computes what eager does with autograd on (the comparisons below use that); under no_grad "
        "it differs from eager by as much. Fix: turn the inference path off (nn.MultiheadAttention and "
        "nn.TransformerEncoder: torch.backends.mha.set_fastpath_enabled(False)), or call eager with autograd on",
    )]


def call_mode_violations(stitched: Any, input_set: tuple, kwargs: dict) -> tuple[list[Violation], dict[str, Any]]:
    """The compiled module called as users call it outside ``torch.no_grad()`` (``CALL_MODES``), on ``input_set``
    from its current state (restored after each call): it must run (engines carry no gradient, and an in-place
    update of a weight that requires grad, as ``nn.Embedding(max_norm=...)`` makes, raises with autograd on).
    Returns the violations and each mode's outputs, which must equal those under no_grad (``mode_output_violations``)."""
    found: list[Violation] = []
    outputs: dict[str, Any] = {}
    for mode, context in CALL_MODES:
        state = compiled_state(stitched)
        try:
            with context():
                outputs[mode] = detached(stitched(*cloned(input_set), **cloned(kwargs)))
        except Exception as error:  # noqa: BLE001 - any failure in a mode users call it in is what this reports
            found.append(Violation("grad_mode", f"calling the compiled module with {mode} failed: {type(error).__name__}: {error}"))
        finally:
            restore_compiled_state(stitched, state)
    return found, outputs


def mode_output_violations(
    in_modes: Mapping[str, Any], under_no_grad: Any, rtol: float | None = None, atol: float | None = None
) -> list[Violation]:
    """A ``grad_mode`` violation for each mode (``call_mode_violations``' outputs) in which the compiled module gives
    other outputs than ``under_no_grad`` (its outputs on the same input set, from the same state)."""
    return [
        Violation("grad_mode", f"the compiled module gives other outputs with {mode} than under no_grad")
        for mode, output in in_modes.items()
        if not compare_outputs(under_no_grad, output, rtol=rtol, atol=atol).passed
    ]
