"""The reduced-precision judge: a module compiled with ``Settings.precision`` "fp16"/"bf16" against eager.

Such a module cannot match eager in float32 within float32's tolerances, and need not: it is right when it is
about as far from the exact result (eager in float64) as eager itself is when run at that precision
(``equivalence.judge_reduced_precision``'s rule). ``judge_at_precision`` is the one entry point: it runs both
references and judges the comparison, for ``verify``'s input sets, its varied scalar inputs, and the timed
benchmarks (``trtcheck.testing.timing``), which must all give one verdict for one output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from trtcheck.verification.equivalence import Comparison, judge_reduced_precision
from trtcheck.verification.inputs import detached
from trtcheck.verification.reference import float64_outputs_and_depth, reduced_precision_outputs


def judge_at_precision(
    comparison: Comparison,
    model: torch.nn.Module,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    actual: Any,
    precision: str,
    state: Mapping[str, torch.Tensor] | None = None,
) -> str:
    """Judge ``comparison`` (eager's outputs on ``args``/``kwargs`` against the compiled module's, ``actual``) by
    eager's own error at ``precision``: ``comparison`` is changed in place and ``""`` returned. Where eager cannot run
    in float64 or in ``precision`` nothing is judged (the tolerances' verdict stands) and the reason is returned, for
    a report's note. ``state`` (a ``snapshot_state``) is the state eager started the call from; the model is copied
    for both references, never changed. The output is held to float64 on its own too, within what the
    precision's rounding allows over the model's depth (``equivalence.rounding_bound``): eager at that precision is no
    yardstick for a model that does not work there (issue 43, item 1)."""
    exact, why, depth = float64_outputs_and_depth(model, args, kwargs, state)
    low, why_low = reduced_precision_outputs(model, args, kwargs, precision, state) if exact is not None else (None, "")
    if exact is None or low is None:
        return why or why_low
    judge_reduced_precision(comparison, detached(low), actual, exact, precision, depth)
    return ""
