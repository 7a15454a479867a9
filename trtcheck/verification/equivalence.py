"""Equivalence: how far a stitched module's outputs are from eager PyTorch's, in a report a human can act on.

A bare "not close" says nothing about *how* wrong an output is. In the spirit of Polygraphy's comparison
report, ``compare_outputs`` gives, per output, the error statistics (max/mean absolute and relative error, cosine
similarity), the tolerance that *would* have passed (so a reviewer can tell a rounding difference from a
wrong result), the worst elements, and NaN/Inf disagreements.

The first pass rule is exactly ``torch.isclose(actual, expected, rtol, atol, equal_nan=True)`` evaluated on
the tensors as they are, which is ``torch.testing.assert_close``'s rule (with ``equal_nan=True``): what passes
torch's own check passes here. The statistics, which only describe, are computed in float64 so that fp16
differences cannot overflow.

Fixed tolerances misjudge outputs whose rounding error grows with the model, and a reduced-precision engine cannot
meet float32's at all: how far is acceptable beyond them is the judge's to say (``verification.judge``), which
fills each output's ``distance`` (its errors against float64) and ``verdict``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree

ROOT = "out"


def default_tolerances(dtype: torch.dtype) -> tuple[float, float]:
    """The ``(rtol, atol)`` an output of ``dtype`` is held to when the caller gives none.

    float32/complex64 ``(1.3e-6, 1e-5)`` and float64/complex128 ``(1e-7, 1e-7)`` are
    ``torch.testing.assert_close``'s defaults, so a model that passes trtcheck passes torch's own check.
    float16 ``(1e-3, 1e-3)`` and bfloat16 ``(1.6e-2, 1e-2)``: the rtol is torch.testing's (about one unit in
    the last place: 2**-10 and 2**-7), but its atol (1e-5) is looser here, because an engine that sums in a
    different order leaves an *absolute* error of about eps times the magnitude of the summed terms, which
    on outputs near zero (after a subtraction or a normalization) is far above 1e-5 though the result is
    right. Integers and bool must match exactly ``(0, 0)``: there is no rounding to forgive. Other floating
    types (float8) get one epsilon of their type for both.
    """
    if dtype.is_complex:
        dtype = {torch.complex32: torch.float16, torch.complex64: torch.float32}.get(dtype, torch.float64)
    known = {
        torch.float64: (1e-7, 1e-7),
        torch.float32: (1.3e-6, 1e-5),
        torch.float16: (1e-3, 1e-3),
        torch.bfloat16: (1.6e-2, 1e-2),
    }
    if dtype in known:
        return known[dtype]
    if dtype.is_floating_point:
        eps = torch.finfo(dtype).eps
        return eps, eps
    return 0.0, 0.0


@dataclass
class OutputComparison:
    """One output (one pytree leaf) compared.

    Statistics (``max_abs`` ... ``cosine``) cover the elements where both values are finite; NaN/Inf
    disagreements are counted in ``nan_mismatch``/``inf_mismatch`` instead, since an infinite "error" would
    hide the size of every other error. NaN against NaN and an infinity against the same infinity are equal.
    The relative error of an element is ``|actual - expected| / |expected|``; where ``expected == 0`` it is
    0 when ``actual`` is 0 too and ``inf`` otherwise (no relative tolerance can excuse it).

    ``min_atol_to_pass`` / ``min_rtol_to_pass``: the smallest atol (at this rtol) and rtol (at this atol)
    with which ``torch.isclose`` accepts every element, to within the rounding of the tensor's dtype (the
    value is nudged up until ``isclose`` itself agrees, so ``compare_outputs(..., atol=min_atol_to_pass)`` passes).
    ``inf`` when no such tolerance exists (a NaN/Inf mismatch; for rtol, also an error above atol where
    ``expected == 0``).

    ``worst``: up to ``worst_k`` elements as ``(index, expected, actual, abs error)``: NaN/Inf mismatches, then the
    elements failing the tolerances by how far their error exceeds ``atol + rtol*|expected|``, then the largest
    errors. For a non-Tensor leaf ``shape`` is ``()`` and ``dtype`` None.
    """

    path: str
    shape: tuple[int, ...]
    dtype: torch.dtype | None
    rtol: float
    atol: float
    passed: bool
    max_abs: float = 0.0
    mean_abs: float = 0.0
    max_rel: float = 0.0
    mean_rel: float = 0.0
    cosine: float = 1.0
    min_atol_to_pass: float = 0.0
    min_rtol_to_pass: float = 0.0
    worst: list[tuple[tuple[int, ...], Any, Any, float]] = field(default_factory=list)
    nan_mismatch: int = 0
    inf_mismatch: int = 0
    message: str = ""
    # Filled by the judge (``verification.judge``) where it consulted float64: the output's ``Distance`` (its and the
    # yardstick's largest errors against float64), its ``Verdict`` where it failed the tolerances, and the precision
    # the yardstick ran at ("fp16"/"bf16"/"tf32"; "" for eager in the model's dtype).
    distance: Any = None
    verdict: Any = None
    eager_precision: str = ""

    @property
    def reference_error(self) -> float | None:
        """The compiled output's largest finite error against float64 (None: no reference was consulted)."""
        return None if self.distance is None else self.distance.compiled

    @property
    def eager_reference_error(self) -> float | None:
        """The yardstick's (eager's) largest finite error against float64 (None: no reference was consulted)."""
        return None if self.distance is None else self.distance.eager

    @property
    def reference_ratio(self) -> float | None:
        """Compiled error over eager's error, both against float64 (None: no reference was consulted)."""
        return None if self.distance is None else self.distance.ratio


@dataclass
class Comparison:
    """Every output compared; ``passed`` only when the structures match and every output passes."""

    outputs: list[OutputComparison]
    passed: bool
    structure_error: str | None = None

    def failures(self) -> list[OutputComparison]:
        """The outputs that did not pass, in output order."""
        return [output for output in self.outputs if not output.passed]

    def __str__(self) -> str:
        failed = self.failures()
        if self.passed:
            lines = [f"trtcheck comparison: PASS ({len(self.outputs)} outputs)"]
        else:
            lines = [f"trtcheck comparison: FAIL ({len(failed)} of {len(self.outputs)} outputs failed)"]
        if self.structure_error:
            lines.append(f"structure differs: {self.structure_error}")
        lines.extend(_table(self.outputs))
        for output in failed:
            lines.append(f"FAIL {output.path}: {output.message}")
            if output.worst:
                lines.extend(_table_rows(
                    ["index", "expected", "actual", "abs error"],
                    [[str(index), _num(e), _num(a), _num(err)] for index, e, a, err in output.worst],
                    indent="    ",
                ))
        return "\n".join(lines)


def compare_outputs(
    expected: Any,
    actual: Any,
    rtol: float | None = None,
    atol: float | None = None,
    worst_k: int = 5,
) -> Comparison:
    """Compare ``actual`` (the stitched module's outputs) with ``expected`` (eager PyTorch's).

    Both may be a Tensor or any pytree of them (tuple, list, dict, namedtuple, nested) with non-Tensor
    leaves (ints, None, ...) compared with ``==``. A ``rtol``/``atol`` left ``None`` takes the expected
    output's ``default_tolerances`` (unlike ``assert_close``, which wants both or neither: giving one is the
    natural way to ask "does it pass with this atol?"). Leaves are matched by their path, so where the
    structures differ (reported in ``structure_error``, and the comparison fails) the leaves both have are
    still compared. Dicts match by key set, whatever their order. ``actual`` is moved to ``expected``'s
    device: where an output lives is not a numerical difference.
    """
    expected_leaves, expected_spec = pytree.tree_flatten_with_path(expected)
    actual_leaves, actual_spec = pytree.tree_flatten_with_path(actual)
    structure_error = _structure_difference(expected_spec, actual_spec, ROOT)
    actual_by_path = {render_path(path): value for path, value in actual_leaves}
    outputs = [
        compare_leaf(render_path(path), value, actual_by_path[render_path(path)], rtol, atol, worst_k)
        for path, value in expected_leaves
        if render_path(path) in actual_by_path
    ]
    passed = structure_error is None and all(output.passed for output in outputs)
    return Comparison(outputs, passed, structure_error)


def compare_leaf(
    path: str, expected: Any, actual: Any, rtol: float | None, atol: float | None, worst_k: int = 5
) -> OutputComparison:
    """Compare one pair of leaves (Tensors, or other values compared with ``==``)."""
    if isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor):
        return _compare_tensors(path, expected.detach(), actual.detach(), rtol, atol, worst_k)
    if isinstance(expected, torch.Tensor) or isinstance(actual, torch.Tensor):
        shape = tuple(expected.shape) if isinstance(expected, torch.Tensor) else ()
        dtype = expected.dtype if isinstance(expected, torch.Tensor) else None
        return _failed(path, shape, dtype, rtol or 0.0, atol or 0.0,
                       f"expected a {type(expected).__name__}, got a {type(actual).__name__}")
    passed = _values_equal(expected, actual)
    return OutputComparison(
        path, (), None, 0.0, 0.0, passed,
        message="" if passed else f"value {actual!r} != expected {expected!r}",
        **({} if passed else _UNKNOWN_STATS),
    )


_UNKNOWN_STATS = dict(max_abs=math.nan, mean_abs=math.nan, max_rel=math.nan, mean_rel=math.nan, cosine=math.nan,
                      min_atol_to_pass=math.inf, min_rtol_to_pass=math.inf)


def _failed(path: str, shape: tuple[int, ...], dtype: torch.dtype | None, rtol: float, atol: float,
            message: str) -> OutputComparison:
    return OutputComparison(path, shape, dtype, rtol, atol, False, message=message, **_UNKNOWN_STATS)


def _values_equal(expected: Any, actual: Any) -> bool:
    if isinstance(expected, float) and isinstance(actual, float) and math.isnan(expected) and math.isnan(actual):
        return True  # NaN == NaN, as for tensors
    try:
        return bool(expected == actual)
    except Exception:  # noqa: BLE001 - an == that cannot give one bool means "not equal" here
        return False


def _compare_tensors(path: str, expected: torch.Tensor, actual: torch.Tensor, rtol: float | None,
                     atol: float | None, worst_k: int) -> OutputComparison:
    default_rtol, default_atol = default_tolerances(expected.dtype)
    rtol = default_rtol if rtol is None else float(rtol)
    atol = default_atol if atol is None else float(atol)
    shape = tuple(expected.shape)
    if actual.shape != expected.shape:
        return _failed(path, shape, expected.dtype, rtol, atol,
                       f"shape {tuple(actual.shape)} != expected {shape}")
    if actual.dtype != expected.dtype:
        return _failed(path, shape, expected.dtype, rtol, atol,
                       f"dtype {actual.dtype} != expected {expected.dtype}")
    actual = actual.to(expected.device)
    if expected.numel() == 0:
        return OutputComparison(path, shape, expected.dtype, rtol, atol, True)

    close = torch.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)  # THE pass rule
    wide = torch.complex128 if expected.dtype.is_complex else torch.float64
    e = expected.to(wide).reshape(-1)
    a = actual.to(wide).reshape(-1)
    error, magnitude = (a - e).abs(), e.abs()
    result = OutputComparison(path, shape, expected.dtype, rtol, atol, passed=bool(close.all()))
    finite = e.isfinite() & a.isfinite()
    if bool(finite.all()):  # the usual case: no masks, no copies
        err, mag, order = error, magnitude, error
        result.cosine = _cosine(e, a)
    else:
        e_nan, a_nan = e.isnan(), a.isnan()
        nan_mismatch = e_nan ^ a_nan
        inf_mismatch = (e.isinf() | a.isinf()) & ~(e_nan | a_nan) & (e != a)
        result.nan_mismatch, result.inf_mismatch = int(nan_mismatch.sum()), int(inf_mismatch.sum())
        err, mag = error[finite], magnitude[finite]
        order = torch.where(nan_mismatch | inf_mismatch, math.inf, torch.where(finite, error, 0.0))
        result.cosine = _cosine(torch.where(finite, e, 0), torch.where(finite, a, 0))
    tiny = torch.finfo(torch.float64).tiny
    rel = torch.where(mag > 0, err / mag.clamp_min(tiny), torch.where(err == 0, 0.0, math.inf))
    result.max_abs, result.mean_abs, result.max_rel, result.mean_rel = _max(err), _mean(err), _max(rel), _mean(rel)

    if result.nan_mismatch + result.inf_mismatch:  # no tolerance excuses a NaN or an infinity
        result.min_atol_to_pass = result.min_rtol_to_pass = math.inf
    else:
        flat_a, flat_e = actual.reshape(-1), expected.reshape(-1)
        margin = _rounding_margin(expected.dtype, rtol, atol, err, mag)
        needed = _max((error - rtol * magnitude).clamp_min(0))
        result.min_atol_to_pass = _settle(
            needed, error - needed - rtol * magnitude, margin,
            lambda i, t: torch.isclose(flat_a[i], flat_e[i], rtol=rtol, atol=t, equal_nan=True))
        needed = _needed_rtol(err, mag, atol)
        result.min_rtol_to_pass = _settle(
            needed, error - atol - needed * magnitude, margin,
            lambda i, t: torch.isclose(flat_a[i], flat_e[i], rtol=t, atol=atol, equal_nan=True))

    top = _worst(order, (~close).reshape(-1), magnitude, rtol, atol, max(worst_k, 0))
    indices = _unravel(top, shape)
    result.worst = [(index, e[i].item(), a[i].item(), error[i].item()) for index, i in zip(indices, top.tolist())]
    if not result.passed:
        result.message = _failure_message(result, int((~close).sum()), expected.numel())
    return result


def _worst(order: torch.Tensor, failing: torch.Tensor, magnitude: torch.Tensor, rtol: float, atol: float, k: int) -> torch.Tensor:
    """The flat indices of up to ``k`` elements to show: those failing the tolerances first, by how far their error
    exceeds ``atol + rtol*|expected|`` (NaN/Inf mismatches before all), then the largest errors of the rest. Largest
    error alone listed 1-ulp differences of values near 4e4 (each within rtol) above the elements that failed: near
    0, where products cancelled, a smaller error exceeds atol."""
    if k == 0:
        return order.new_empty(0, dtype=torch.long)
    excess = torch.where(failing, torch.where(order == math.inf, math.inf, order - (atol + rtol * magnitude)), -math.inf)
    shown = torch.topk(excess, min(k, int(failing.sum()))).indices
    rest = torch.where(failing, -math.inf, order)
    more = torch.topk(rest, min(k - shown.numel(), order.numel()))
    return torch.cat([shown, more.indices[more.values > 0]])  # equal elements are no one's "worst"


def _needed_rtol(err: torch.Tensor, mag: torch.Tensor, atol: float) -> float:
    """max over elements of ``(|a-e| - atol) / |e|`` where that is positive; inf if ``e == 0`` there."""
    over = err - atol
    needs = over > 0
    if not bool(needs.any()):
        return 0.0
    if bool((needs & (mag == 0)).any()):
        return math.inf
    return _max(over[needs] / mag[needs])


def _rounding_margin(dtype: torch.dtype, rtol: float, atol: float, err: torch.Tensor, mag: torch.Tensor) -> float:
    """A bound on how far ``isclose``'s arithmetic in ``dtype`` can move an element's verdict from the exact one.

    ``isclose`` computes ``|a - e| <= atol + rtol*|e|`` with a few roundings in the tensor's dtype (in the
    default float dtype for integers), each off by at most half an epsilon of the values involved, or by
    half the smallest normal number near zero. Elements whose exact slack exceeds this bound get the exact
    verdict, so only the others need ``isclose``'s own opinion.
    """
    compute = dtype.to_real() if dtype.is_floating_point or dtype.is_complex else torch.get_default_dtype()
    info = torch.finfo(compute)
    scale = _max(err) + atol + abs(rtol) * _max(mag)
    return 8 * info.eps * scale + 8 * info.smallest_normal


def _settle(tolerance: float, slack: torch.Tensor, margin: float, passes) -> float:
    """Nudge a tolerance computed in float64 up until ``torch.isclose`` (in the tensor's dtype) accepts it.

    ``isclose`` rounds in the tensor's dtype, so the exact float64 threshold may miss by an ulp. ``slack``
    is each element's exact ``error - allowed`` at ``tolerance`` (``<= 0`` everywhere); only the elements
    within ``margin`` of failing are checked with ``isclose``, so this costs next to nothing on large
    outputs. Growing the step geometrically ends within a few tries even for float16.
    """
    if not math.isfinite(tolerance):
        return tolerance
    near = (slack > -margin).nonzero().reshape(-1)
    if near.numel() == 0:
        return tolerance
    step = max(tolerance * 2.0**-24, 1e-300)
    for _ in range(64):
        if bool(passes(near, tolerance).all()):
            return tolerance
        tolerance += step
        step *= 2.0
    return tolerance


def _failure_message(result: OutputComparison, bad: int, total: int) -> str:
    parts = []
    if result.nan_mismatch:
        parts.append(f"{result.nan_mismatch} NaN mismatch{'es' if result.nan_mismatch != 1 else ''}")
    if result.inf_mismatch:
        parts.append(f"{result.inf_mismatch} Inf mismatch{'es' if result.inf_mismatch != 1 else ''}")
    numeric = bad - result.nan_mismatch - result.inf_mismatch
    if numeric > 0:
        parts.append(
            f"{numeric} of {total} elements exceed atol + rtol*|expected| "
            f"(rtol={result.rtol:g}, atol={result.atol:g}): "
            f"max abs error {result.max_abs:.3g} > tolerance"
        )
        would_pass = [f"{name} >= {value:.3g}" for name, value in
                      (("atol", result.min_atol_to_pass), ("rtol", result.min_rtol_to_pass)) if math.isfinite(value)]
        if would_pass:
            parts[-1] += f" (passes with {' or '.join(would_pass)})"
    return "; ".join(parts)


def _max(values: torch.Tensor) -> float:
    return float(values.max()) if values.numel() else 0.0


def _mean(values: torch.Tensor) -> float:
    return float(values.mean()) if values.numel() else 0.0


def _cosine(e: torch.Tensor, a: torch.Tensor) -> float:
    """Cosine similarity of the flattened values: 1.0 for two all-zero tensors, 0.0 when only one is.

    Each vector is first divided by its largest magnitude (cosine does not depend on scale), so that the
    norms of float64 values near the top of their range cannot overflow.
    """
    scale_e, scale_a = e.abs().max(), a.abs().max()
    if scale_e == 0 or scale_a == 0:
        return 1.0 if scale_e == scale_a else 0.0
    e, a = e / scale_e, a / scale_a
    dot = torch.vdot(e, a).real if e.is_complex() else torch.dot(e, a)
    return max(-1.0, min(1.0, float(dot / (e.abs().norm() * a.abs().norm()))))


def _unravel(flat: torch.Tensor, shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    if not shape:
        return [() for _ in range(flat.numel())]
    coordinates = torch.unravel_index(flat.cpu(), shape)
    return [tuple(int(c) for c in index) for index in zip(*(c.tolist() for c in coordinates))]


def render_path(path: tuple[Any, ...]) -> str:
    """A pytree key path as ``out[1]['logits']``: how the user would index the output to find it."""
    return ROOT + pytree.keystr(path)


def _structure_difference(expected: pytree.TreeSpec, actual: pytree.TreeSpec, path: str) -> str | None:
    """The first place where two pytree structures differ, in words; None when they match."""
    if expected.is_leaf() or actual.is_leaf():
        if expected.is_leaf() and actual.is_leaf():
            return None
        return f"{path}: expected {_describe(expected)}, got {_describe(actual)}"
    if expected.type is not actual.type:
        return f"{path}: expected {_describe(expected)}, got {_describe(actual)}"
    if isinstance(expected.type, type) and issubclass(expected.type, Mapping):
        expected_keys, actual_keys = list(expected.context), list(actual.context)
        missing = [k for k in expected_keys if k not in actual_keys]
        extra = [k for k in actual_keys if k not in expected_keys]
        if missing or extra:
            said = ([f"missing keys {missing}"] if missing else []) + ([f"unexpected keys {extra}"] if extra else [])
            return f"{path}: {', '.join(said)}"
        children = dict(zip(actual_keys, actual.children()))
        pairs = [(f"{path}[{key!r}]", child, children[key]) for key, child in zip(expected_keys, expected.children())]
    elif expected.num_children != actual.num_children:
        return f"{path}: expected length {expected.num_children}, got {actual.num_children}"
    elif expected.context != actual.context:
        contexts = f"{expected.context!r} != {actual.context!r}"
        return f"{path}: expected {_describe(expected)}, got {_describe(actual)} ({contexts})"
    else:  # a namedtuple's spec has its class as context; render its children as attributes
        fields = getattr(expected.context, "_fields", None)
        keys = [f".{name}" for name in fields] if fields else [f"[{i}]" for i in range(expected.num_children)]
        pairs = [(path + key, e, a) for key, e, a in zip(keys, expected.children(), actual.children())]
    for child_path, e, a in pairs:
        difference = _structure_difference(e, a, child_path)
        if difference:
            return difference
    return None


def _describe(spec: pytree.TreeSpec) -> str:
    if spec.is_leaf():
        return "a single value"
    kind = spec.context if isinstance(spec.context, type) else spec.type
    return f"a {getattr(kind, '__name__', kind)} of {spec.num_children}"


def _num(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, (float, int)) and not isinstance(value, bool) else str(value)


def _table(outputs: list[OutputComparison]) -> list[str]:
    header = ["output", "shape", "dtype", "max abs", "mean abs", "max rel", "mean rel", "cosine",
              "atol to pass", "rtol to pass", "vs float64", "result"]
    rows = [
        [o.path, str(o.shape), str(o.dtype).removeprefix("torch.") if o.dtype is not None else "-",
         *(f"{v:.3g}" for v in (o.max_abs, o.mean_abs, o.max_rel, o.mean_rel)), f"{o.cosine:.6f}",
         f"{o.min_atol_to_pass:.3g}", f"{o.min_rtol_to_pass:.3g}",
         "-" if o.reference_ratio is None else f"{o.reference_ratio:.3g}x eager" + (f" {o.eager_precision}" if o.eager_precision else ""),
         "PASS" if o.passed else "FAIL"]
        for o in outputs
    ]
    return _table_rows(header, rows)


def _table_rows(header: list[str], rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return [indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *rows]]
