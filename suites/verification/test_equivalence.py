"""``compare_outputs``: the pass rule is torch's own, and the report says how far off each output is and where."""

from __future__ import annotations

import collections
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from trtcheck.verification.equivalence import compare_outputs, default_tolerances

nan, inf = math.nan, math.inf


def t(values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype)


# --- tolerances -------------------------------------------------------------------------------------------


def test_default_tolerances_follow_torch_testing_for_fp32_fp64_and_are_looser_for_half_types():
    assert default_tolerances(torch.float32) == (1.3e-6, 1e-5)
    assert default_tolerances(torch.float64) == (1e-7, 1e-7)
    assert default_tolerances(torch.float16) == (1e-3, 1e-3)
    assert default_tolerances(torch.bfloat16) == (1.6e-2, 1e-2)
    for dtype in (torch.int8, torch.int32, torch.int64, torch.uint8, torch.bool):
        assert default_tolerances(dtype) == (0.0, 0.0)
    fp32, fp16, bf16 = (default_tolerances(d) for d in (torch.float32, torch.float16, torch.bfloat16))
    assert fp16[0] > fp32[0] and fp16[1] > fp32[1] and bf16[0] > fp16[0] and bf16[1] > fp16[1]


def test_fp16_output_passes_an_error_that_fails_in_fp32():
    expected = t([1.0, 2.0, 0.0])
    actual = expected + t([5e-4, 0.0, 5e-4])
    assert not compare_outputs(expected, actual).passed
    result = compare_outputs(expected.half(), actual.half())
    assert result.passed, str(result)
    assert (result.outputs[0].rtol, result.outputs[0].atol) == (1e-3, 1e-3)


def test_integers_and_bools_must_match_exactly():
    assert compare_outputs(t([1, 2, 3], torch.int64), t([1, 2, 3], torch.int64)).passed
    off_by_one = compare_outputs(t([1, 2, 3], torch.int64), t([1, 2, 4], torch.int64))
    assert not off_by_one.passed
    assert off_by_one.outputs[0].worst == [((2,), 3.0, 4.0, 1.0)]
    assert not compare_outputs(t([True, False], torch.bool), t([True, True], torch.bool)).passed


# --- identical, perturbed, and the tolerance that would pass ----------------------------------------------


def test_identical_tensors_pass_with_zero_error():
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    result = compare_outputs(x, x.clone())
    assert result.passed and result.structure_error is None
    out = result.outputs[0]
    assert (out.path, out.shape, out.dtype) == ("out", (4, 5), torch.float32)
    assert out.max_abs == out.mean_abs == out.max_rel == out.min_atol_to_pass == out.min_rtol_to_pass == 0
    assert out.cosine == pytest.approx(1.0) and out.worst == [] and out.message == ""


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_perturbation_beyond_tolerance_fails_and_min_atol_round_trips(dtype):
    generator = torch.Generator().manual_seed(1)
    expected = torch.randn(64, generator=generator).to(dtype)
    actual = (expected.double() + 0.05 * torch.randn(64, generator=generator, dtype=torch.float64)).to(dtype)
    result = compare_outputs(expected, actual)
    assert not result.passed
    out = result.outputs[0]
    assert "exceed" in out.message and "max abs error" in out.message
    needed = out.min_atol_to_pass
    assert 0 < needed < math.inf
    assert compare_outputs(expected, actual, atol=needed).passed
    # "smallest" to within the rounding isclose does in the output's dtype
    shrink = 1 - max(1e-3, 8 * torch.finfo(dtype).eps)
    assert not compare_outputs(expected, actual, atol=needed * shrink).passed
    rtol_needed = out.min_rtol_to_pass
    assert compare_outputs(expected, actual, rtol=rtol_needed).passed
    assert not compare_outputs(expected, actual, rtol=rtol_needed * shrink).passed


def test_min_atol_is_the_largest_excess_over_the_relative_part():
    expected, actual = t([1.0, 10.0, -2.0]), t([1.1, 10.0, -2.5])
    out = compare_outputs(expected, actual, rtol=0.1).outputs[0]
    # |a-e| - rtol*|e| = 0.1-0.1, 0, 0.5-0.2 -> 0.3
    assert out.min_atol_to_pass == pytest.approx(0.3, rel=1e-6)
    assert out.max_abs == pytest.approx(0.5, rel=1e-6) and out.mean_abs == pytest.approx(0.2, rel=1e-6)
    assert out.max_rel == pytest.approx(0.25, rel=1e-6)


def test_relative_error_at_zero_expected_is_zero_or_inf_and_rtol_cannot_help():
    out = compare_outputs(t([0.0, 0.0, 1.0]), t([0.0, 0.5, 1.0])).outputs[0]
    assert out.max_rel == inf
    assert out.min_rtol_to_pass == inf
    assert out.min_atol_to_pass == pytest.approx(0.5)
    assert compare_outputs(t([0.0, 1.0]), t([0.0, 1.0])).outputs[0].max_rel == 0


def test_cosine_of_all_zero_tensors_is_one_and_of_opposites_minus_one():
    assert compare_outputs(torch.zeros(3), torch.zeros(3)).outputs[0].cosine == 1.0
    assert compare_outputs(t([1.0, 2.0]), t([-1.0, -2.0])).outputs[0].cosine == pytest.approx(-1.0)
    assert compare_outputs(t([1.0, 0.0]), t([0.0, 0.0])).outputs[0].cosine == 0.0


def test_zero_size_tensors_pass():
    result = compare_outputs(torch.empty(0, 3), torch.empty(0, 3))
    assert result.passed and result.outputs[0].shape == (0, 3)


# --- NaN and Inf ------------------------------------------------------------------------------------------


def test_nan_in_both_is_equal_and_nan_in_one_is_a_mismatch():
    assert compare_outputs(t([1.0, nan]), t([1.0, nan])).passed
    out = compare_outputs(t([1.0, nan, 3.0]), t([nan, nan, 3.0])).outputs[0]
    assert not out.passed and out.nan_mismatch == 1 and out.inf_mismatch == 0
    assert out.message == "1 NaN mismatch"
    assert out.min_atol_to_pass == inf and out.min_rtol_to_pass == inf
    assert out.worst[0][0] == (0,) and math.isnan(out.worst[0][2])
    assert out.max_abs == 0  # statistics cover the elements finite in both


def test_same_infinity_is_equal_and_opposite_or_finite_is_a_mismatch():
    assert compare_outputs(t([inf, -inf, 1.0]), t([inf, -inf, 1.0])).passed
    out = compare_outputs(t([inf, 2.0, -inf]), t([-inf, inf, -inf])).outputs[0]
    assert not out.passed and out.inf_mismatch == 2 and out.nan_mismatch == 0
    assert "2 Inf mismatches" in out.message
    mixed = compare_outputs(t([nan, inf]), t([inf, nan])).outputs[0]
    assert (mixed.nan_mismatch, mixed.inf_mismatch) == (2, 0)


# --- worst elements and the report ------------------------------------------------------------------------


def test_worst_elements_are_sorted_descending_with_their_indices():
    expected = torch.zeros(3, 4)
    actual = expected.clone()
    actual[0, 1], actual[2, 3], actual[1, 0], actual[2, 2] = 0.3, -0.9, 0.5, 0.1
    out = compare_outputs(expected, actual, worst_k=3).outputs[0]
    assert [w[0] for w in out.worst] == [(2, 3), (1, 0), (0, 1)]
    assert [w[3] for w in out.worst] == pytest.approx([0.9, 0.5, 0.3])
    assert out.worst[0][1:3] == (0.0, pytest.approx(-0.9))
    errors = [w[3] for w in compare_outputs(expected, actual, worst_k=10).outputs[0].worst]
    assert errors == sorted(errors, reverse=True) and len(errors) == 4  # equal elements are not "worst"


def test_the_elements_failing_the_tolerances_are_listed_before_larger_errors_that_pass():
    """The nightly fuzz's bmm: 1-ulp errors at 4e4 (within rtol) are larger than the errors near 0 that fail atol; the
    table listed only the former, so the elements that failed were nowhere in the report."""
    expected = torch.tensor([38590.7, 0.0, 21561.3, 1e-6, 5.0])
    actual = expected.clone()
    actual[0] += 0.0039  # 1e-7 relative: passes
    actual[2] += 0.00195
    actual[1], actual[3] = 1.6e-4, 1e-6 + 5e-5  # both over atol 1e-5, the first by more
    out = compare_outputs(expected, actual, worst_k=3).outputs[0]
    assert not out.passed
    assert [w[0] for w in out.worst] == [(1,), (3,), (0,)]  # failing by excess, then the largest passing error
    assert [w[0] for w in compare_outputs(expected, actual, worst_k=1).outputs[0].worst] == [(1,)]
    nan = compare_outputs(torch.tensor([0.0, 1.0]), torch.tensor([1.0, float("nan")]), worst_k=2).outputs[0]
    assert [w[0] for w in nan.worst] == [(1,), (0,)]  # a NaN mismatch before any numeric failure


def test_report_has_one_row_per_output_and_the_worst_elements_of_failures():
    x = torch.arange(6.0).reshape(2, 3)
    bad = x.clone()
    bad[1, 2] += 1
    result = compare_outputs((x, {"logits": x}), (x, {"logits": bad}))
    text = str(result)
    lines = text.splitlines()
    assert "FAIL" in lines[0]
    assert any(line.strip().startswith("out[0] ") and line.rstrip().endswith("PASS") for line in lines)
    assert any(line.strip().startswith("out[1]['logits']") and line.rstrip().endswith("FAIL") for line in lines)
    assert "FAIL out[1]['logits']:" in text and "(1, 2)" in text
    assert "max abs" in lines[1] and "cosine" in lines[1]
    assert str(compare_outputs(x, x)).startswith("trtcheck comparison: PASS")


# --- structure, shape, dtype, non-Tensor leaves -----------------------------------------------------------


@pytest.mark.parametrize(
    "expected, actual, says",
    [
        ((1, 2), [1, 2], "out: expected a tuple of 2, got a list of 2"),
        ({"a": 1, "b": 2}, {"a": 1, "c": 2}, "out: missing keys ['b'], unexpected keys ['c']"),
        ({"a": 1}, {"a": 1, "z": 3}, "out: unexpected keys ['z']"),
        ([1, 2, 3], [1, 2], "out: expected length 3, got 2"),
        ((1, (2, 3)), (1, (2,)), "out[1]: expected length 2, got 1"),
        ((1, {"k": [1]}), (1, {"k": 1}), "out[1]['k']: expected a list of 1, got a single value"),
    ],
)
def test_structure_mismatches_fail_and_say_where(expected, actual, says):
    result = compare_outputs(expected, actual)
    assert not result.passed
    assert result.structure_error == says
    assert f"structure differs: {says}" in str(result)


def test_common_leaves_are_still_compared_when_structures_differ():
    x = torch.ones(2)
    result = compare_outputs({"a": x, "b": x}, {"a": x + 1})
    assert [o.path for o in result.outputs] == ["out['a']"] and not result.outputs[0].passed


def test_dict_key_order_and_namedtuple_paths():
    x = torch.ones(2)
    assert compare_outputs({"a": x, "b": 1}, {"b": 1, "a": x}).passed
    Pair = collections.namedtuple("Pair", "first second")
    result = compare_outputs(Pair(x, x), Pair(x, x))
    assert result.passed and [o.path for o in result.outputs] == ["out.first", "out.second"]
    Other = collections.namedtuple("Other", "first second")
    assert "expected a Pair of 2, got a Other of 2" in compare_outputs(Pair(x, x), Other(x, x)).structure_error


def test_shape_and_dtype_mismatches_fail_with_a_message():
    shape = compare_outputs(torch.zeros(2, 3), torch.zeros(2, 4)).outputs[0]
    assert not shape.passed and shape.message == "shape (2, 4) != expected (2, 3)"
    dtype = compare_outputs(torch.zeros(2), torch.zeros(2, dtype=torch.float16)).outputs[0]
    assert not dtype.passed and dtype.message == "dtype torch.float16 != expected torch.float32"
    assert "FAIL out: shape" in str(compare_outputs(torch.zeros(2, 3), torch.zeros(2, 4)))


def test_non_tensor_leaves_compare_with_equality():
    x = torch.ones(1)
    assert compare_outputs((x, 3, None, "s"), (x, 3, None, "s")).passed
    result = compare_outputs((x, 3), (x, 4))
    assert not result.passed and result.outputs[1].message == "value 4 != expected 3"
    assert "expected a Tensor, got a int" in compare_outputs((x,), (1,)).outputs[0].message


# --- agreement with torch.testing.assert_close -------------------------------------------------------------

special = st.sampled_from([0.0, -0.0, nan, inf, -inf, 1.0, -1.0, 1e-8])
element = st.one_of(st.floats(-1e4, 1e4, allow_nan=False, width=32), special)


@st.composite
def close_pairs(draw):
    dtype = draw(st.sampled_from([torch.float32, torch.float64, torch.float16, torch.bfloat16]))
    n = draw(st.integers(0, 12))
    expected = draw(st.lists(element, min_size=n, max_size=n))
    noise = draw(st.lists(st.one_of(st.just(0.0), st.floats(-1.0, 1.0), special), min_size=n, max_size=n))
    scale = draw(st.sampled_from([0.0, 1e-7, 1e-5, 1e-3, 1e-1]))
    rtol = draw(st.sampled_from([0.0, 1e-7, 1.3e-6, 1e-3, 1e-1]) | st.floats(0, 0.5))
    atol = draw(st.sampled_from([0.0, 1e-7, 1e-5, 1e-3, 1e-1]) | st.floats(0, 0.5))
    actual = [e + scale * d if math.isfinite(d) else d for e, d in zip(expected, noise)]
    expected = torch.tensor(expected, dtype=torch.float64).to(dtype)
    actual = torch.tensor(actual, dtype=torch.float64).to(dtype)
    if draw(st.booleans()):  # atol right at the exact threshold, where rounding in the dtype decides
        e, a = expected.double(), actual.double()
        finite = e.isfinite() & a.isfinite()
        excess = ((a - e).abs() - rtol * e.abs())[finite]
        if excess.numel():
            atol = max(0.0, float(excess.max())) * draw(st.sampled_from([1 - 1e-9, 1.0, 1 + 1e-9]))
    return expected, actual, rtol, atol


@given(close_pairs())
def test_passed_agrees_with_torch_testing_assert_close(case):
    expected, actual, rtol, atol = case
    try:
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
        torch_passes = True
    except AssertionError:
        torch_passes = False
    result = compare_outputs(expected, actual, rtol=rtol, atol=atol)
    assert result.passed == torch_passes, str(result)
    out = result.outputs[0]
    if math.isfinite(out.min_atol_to_pass) and expected.numel():
        assert compare_outputs(expected, actual, rtol=rtol, atol=out.min_atol_to_pass).passed
