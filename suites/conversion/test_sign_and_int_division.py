"""sign and integer division as eager computes them, at the values where ONNX's own ops differ.

- ``sign``: eager gives +0 for NaN (either sign bit) and for -0, where ONNX ``Sign`` gives NaN (ONNX Runtime's
  float32 kernel) or anything (the ONNX spec says nothing); ``sgn`` of a real tensor lowers to ``sign``.
- integer ``//``, ``div(rounding_mode='floor'|'trunc')``, ``remainder`` and ``fmod`` at each dtype's min and
  max: ``(a - a mod b) / b`` overflowed below INT_MIN (``-2147483648 // 3`` gave +715827882).
"""

from __future__ import annotations

import math

import onnxruntime as ort
import pytest
import torch

import trtcheck
from suites.conversion.converter_harness import check, export_graph, run_onnx
from trtcheck import conversion as converters
from trtcheck.conversion import segment_to_onnx
from trtcheck.conversion.ops._common import FLOAT

A = torch.ops.aten
ONE = trtcheck.Settings(min_block_size=1)

# ---- sign -------------------------------------------------------------------------------------------------------

_SIGN_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64)


def test_the_sign_cases_cover_every_dtype_the_converter_claims() -> None:
    claimed = converters.get(A.sign.default).validator.input_dtypes
    assert claimed <= set(_SIGN_DTYPES), f"sign claims {sorted(map(str, claimed - set(_SIGN_DTYPES)))} untested here"
    assert FLOAT & claimed, "sign claims no float dtype: the NaN cases below test nothing"


def _sign_values(dtype: torch.dtype) -> torch.Tensor:
    if dtype.is_floating_point:
        nan = torch.tensor(math.nan)
        values = [nan, -nan, math.inf, -math.inf, 0.0, -0.0, 2.5, -3.0, 1e-30, -1e-30, 65504.0, -1e-5]
        return torch.stack([torch.as_tensor(v, dtype=torch.float32) for v in values]).to(dtype)
    info = torch.iinfo(dtype)
    return torch.tensor([info.min, info.max, 0, 1, -1, 7, -7], dtype=dtype)


class _Signs(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.sign(x), torch.sgn(x)


def _same_bits(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Equal values and equal sign bits (+0 is not -0 here); no NaN is expected on either side."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    if not want.is_floating_point():
        return torch.equal(got, want)
    return torch.equal(got, want) and torch.equal(torch.signbit(got), torch.signbit(want))


@pytest.mark.parametrize("dtype", _SIGN_DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_sign_and_sgn_match_eager_on_nan_inf_and_signed_zeros(dtype) -> None:
    """Eager: sign(+-NaN) = +0, sign(+-0) = +0, sign(+-inf) = +-1, in every float dtype (checked here too)."""
    x = _sign_values(dtype)
    model = _Signs().eval()
    want = model(x)
    if dtype.is_floating_point:  # what eager really gives: the values the engine must reproduce
        assert not want[0].isnan().any() and not torch.signbit(want[0][[0, 1, 4, 5]]).any()
        assert want[0][:6].tolist() == [0.0, 0.0, 1.0, -1.0, 0.0, 0.0]
    compiled = trtcheck.compile(model, (x,), ONE, backend="onnxruntime")
    assert not compiled.partition.fallbacks
    targets = {n.target for n in compiled.partition.compute_nodes}
    assert A.sign.default in targets and targets <= {A.sign.default, A._to_copy.default}  # sgn: sign (in float32 for halves)
    assert all(s.target is trtcheck.Target.TENSORRT for s in compiled.partition.segments)
    got = compiled(x)
    for index, (g, w) in enumerate(zip(got, want)):
        assert _same_bits(g, w), f"output {index}: engine {g.tolist()} (signbit {torch.signbit(g).tolist()}), eager {w.tolist()}"


# ---- integer division at the dtype's extremes ---------------------------------------------------------------------

_INT_DTYPES = (torch.int32, torch.int64)


def _grid(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Every (dividend, divisor) pair of the dtype's min, max, 0, +-1 (and +-7) by +-1, +-3, min and max."""
    info = torch.iinfo(dtype)
    dividends = [info.min, info.min + 1, info.min + 2, info.max, info.max - 1, 0, 1, -1, 7, -7]
    divisors = [1, -1, 3, -3, info.min, info.max]
    pairs = [(a, b) for a in dividends for b in divisors]
    return torch.tensor([a for a, _ in pairs], dtype=dtype), torch.tensor([b for _, b in pairs], dtype=dtype)


def _without_min_by_minus_one(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The grid less (min, -1): eager's trunc division of it is a SIGFPE that kills the process."""
    keep = ~((a == torch.iinfo(a.dtype).min) & (b == -1))
    return a[keep], b[keep]


_DIVISIONS = {
    "floor_divide": (lambda a, b: A.floor_divide.default(a, b), A.floor_divide.default, False),
    "div_floor": (lambda a, b: A.div.Tensor_mode(a, b, rounding_mode="floor"), A.div.Tensor_mode, False),
    "div_trunc": (lambda a, b: A.div.Tensor_mode(a, b, rounding_mode="trunc"), A.div.Tensor_mode, True),
    "remainder": (lambda a, b: A.remainder.Tensor(a, b), A.remainder.Tensor, False),
    "fmod": (lambda a, b: A.fmod.Tensor(a, b), A.fmod.Tensor, False),
}


@pytest.mark.parametrize("dtype", _INT_DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("op", sorted(_DIVISIONS))
def test_integer_division_is_exact_at_the_dtype_extremes(op, dtype) -> None:
    """Exact over the whole range: no intermediate overflows (``-2147483648 // 3`` is -715827883)."""
    fn, target, eager_traps_on_min_by_minus_one = _DIVISIONS[op]
    a, b = _grid(dtype)
    if eager_traps_on_min_by_minus_one:
        a, b = _without_min_by_minus_one(a, b)
    check(fn, (a, b), targets=[target])


@pytest.mark.parametrize("dtype", _INT_DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_integer_floor_division_by_a_constant_near_min(dtype) -> None:
    low = torch.iinfo(dtype).min
    x = torch.tensor([low, low + 1, low + 2, low + 3, -7, 0, 7], dtype=dtype)
    check(lambda v: A.div.Tensor_mode(v, 3, rounding_mode="floor"), (x,), targets=[A.div.Tensor_mode])
    check(lambda v: v // -3, (x,), targets=[A.floor_divide.default])
    check(lambda v: A.div.Scalar_mode(v, -3, rounding_mode="floor"), (x,), targets=[A.div.Scalar_mode])


def test_int32_min_floor_divided_by_three_is_minus_715827883() -> None:
    """The issue's repro, through ``trtcheck.compile``."""
    x = torch.tensor([-2147483648, 2147483647], dtype=torch.int32)

    class FloorDiv(torch.nn.Module):
        def forward(self, v: torch.Tensor) -> torch.Tensor:
            return v // 3

    compiled = trtcheck.compile(FloorDiv().eval(), (x,), ONE, backend="onnxruntime")
    assert not compiled.partition.fallbacks
    assert compiled(x).tolist() == [-715827883, 715827882] == (x // 3).tolist()


@pytest.mark.parametrize("dtype", _INT_DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_min_divided_by_minus_one_wraps_as_eager_floor_divide_does(dtype) -> None:
    """min // -1 does not fit: eager's floor_divide gives min (two's complement wrap); eager's trunc division of
    it raises SIGFPE (x86's idiv traps), as ONNX Runtime's int64 Div would. The engine computes -a for a divisor
    of -1 instead of dividing, so it gives min for both and never traps; only floor_divide is compared with eager."""
    low = torch.iinfo(dtype).min
    a, b = torch.tensor([low, low, 5], dtype=dtype), torch.tensor([-1, -1, -1], dtype=dtype)
    assert A.floor_divide.default(a, b).tolist() == [low, low, -5]
    for mode in ("floor", "trunc"):
        gm = export_graph(lambda x, y, m=mode: A.div.Tensor_mode(x, y, rounding_mode=m), (a, b))
        (got,) = run_onnx(segment_to_onnx(gm), gm, (a, b))
        assert got.tolist() == [low, low, -5], mode


@pytest.mark.parametrize("dtype", _INT_DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("op", sorted(_DIVISIONS))
def test_integer_division_by_zero_raises_in_eager_and_in_onnx_runtime(op, dtype) -> None:
    """What happens today, documented, not a promise: eager raises ZeroDivisionError (a RuntimeError) for every
    integer division by zero, and ONNX Runtime fails the run ("Integer division by zero" / "modulo by zero").
    TensorRT gives no error for it (no integer trap on a GPU); nothing here claims what it returns."""
    fn, _, _ = _DIVISIONS[op]
    a, b = torch.tensor([5, -5, 0], dtype=dtype), torch.tensor([0, 2, 0], dtype=dtype)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        fn(a, b)
    gm = export_graph(fn, (a, torch.tensor([1, 2, 3], dtype=dtype)))
    model = segment_to_onnx(gm)
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.Fail, match="by zero"):
        run_onnx(model, gm, (a, b))
