"""``verify`` with ``Settings(tf32=True)`` (issue 40): a TF32 engine (ONNX Runtime's emulation here) is judged against
eager under TF32 rounding (``reference.reduced_precision_outputs(..., "tf32")``), not against plain float32 eager,
whose tolerances a large-K matmul chain in TF32 misses by far; a wrong converter still fails."""

from __future__ import annotations

import pytest
import torch

import trtcheck
from trtcheck import conversion as converters
from trtcheck.engines.precision import round_tf32, unit_roundoff
from trtcheck.verification.equivalence import compare_outputs
from trtcheck.verification.judge import REDUCED_PRECISION_FLOOR, REDUCED_PRECISION_MULTIPLE, Judge, rounding_bound
from trtcheck.verification.reference import reduced_precision_outputs, tf32_rounding

A = torch.ops.aten
TF32 = trtcheck.Settings(min_block_size=1, tf32=True)


class LargeK(torch.nn.Module):
    """Two linears reducing over 1024 and 256 elements: TF32's 10-bit factors leave errors of about 3e-4, thirty
    times float32's default atol, on outputs of magnitude 0.5."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(1024, 256), torch.nn.Linear(256, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


class CappedGainLargeK(LargeK):
    """``LargeK`` times a float ``gain`` capped at 1: every gain >= 1 gives the output of the example's (1.5), so a
    module compiled for 1.5 answers right for them too, to within TF32's rounding."""

    def forward(self, x: torch.Tensor, gain: float) -> torch.Tensor:
        return super().forward(x) * min(gain, 1.0)


def large_k() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return LargeK().eval(), torch.randn(8, 1024, generator=torch.Generator().manual_seed(1))


def test_a_tf32_engine_passes_against_eager_under_tf32_rounding():
    """Fails without the tf32 judge: against plain float32 eager the engine errs 2000 times eager's own error."""
    model, x = large_k()
    report = trtcheck.verify(model, (x,), TF32, backend="onnxruntime", num_inputs=2, localize_budget=0)
    outputs = [output for comparison in report.comparisons for output in comparison.outputs]
    assert all(output.eager_precision == "tf32" for output in outputs)
    assert max(output.reference_ratio for output in outputs) <= REDUCED_PRECISION_MULTIPLE
    assert all(output.max_abs > 10 * output.atol for output in outputs)  # fp32's tolerances alone would fail it
    assert "to eager tf32's own error" in "\n".join(report.checked())
    assert report.range_findings == []  # tf32 keeps float32's range: no overflow to look for


def test_a_varied_float_input_is_judged_at_tf32_too(monkeypatch):
    """``scalar_input_violations`` gets the judged precision: the module answers the varied gain (4.75) right, to
    within TF32's rounding, which fp32's tolerances alone call wrong (``scalar_input``). The input check, which
    refuses any gain but the example's, is let through, as ``suites/runtime``'s test of that family does."""
    from trtcheck.runtime.signature import InputSignature

    monkeypatch.setattr(InputSignature, "check", lambda self, args, kwargs: None)
    model = CappedGainLargeK().eval()
    x = torch.randn(8, 1024, generator=torch.Generator().manual_seed(1))
    report = trtcheck.verify(model, (x, 1.5), TF32, backend="onnxruntime", num_inputs=2, localize_budget=0)
    assert report.passed


def _relu_as_negation(ctx, node):
    return ctx.add("Neg", [ctx.name(node.args[0])])


def _relu_one_percent_high(ctx, node):
    relu = ctx.add("Relu", [ctx.name(node.args[0])])
    return ctx.add("Mul", [relu, ctx.constant(1.01, node.meta["val"].dtype)])


@pytest.mark.parametrize("converter", [_relu_as_negation, _relu_one_percent_high], ids=["negation", "one_percent"])
def test_a_wrong_converter_still_fails_under_tf32(converter):
    """The tf32 judge forgives TF32 rounding, not a conversion error: relu as -x, and relu 1% high (an error ten
    times TF32's on these outputs), both fail."""
    model, x = large_k()
    with converters.Snapshot():
        converters.register(A.relu.default, override=True)(converter)
        with pytest.raises(trtcheck.VerificationError) as info:
            trtcheck.verify(model, (x,), TF32, backend="onnxruntime", num_inputs=2, localize_budget=0)
    assert "not tf32 rounding" in str(info.value)


def test_the_tf32_yardstick_is_float32_eager_under_tf32_rounding():
    model, x = large_k()
    low, why = reduced_precision_outputs(model, (x,), {}, "tf32")
    assert why == "" and low.dtype == torch.float32
    with torch.no_grad(), tf32_rounding():
        assert torch.equal(low, model(x))
    with torch.no_grad():
        plain = model(x)
        assert not torch.equal(low, plain)  # the rounding is applied, not plain float32
        by_hand = torch.nn.functional.linear(
            round_tf32(torch.relu(torch.nn.functional.linear(round_tf32(x), round_tf32(model.a.weight), model.a.bias))),
            round_tf32(model.b.weight), model.b.bias)
    assert torch.equal(low, by_hand)


def test_tf32_rounds_like_fp16_in_the_bound_and_the_floor():
    assert unit_roundoff("tf32") == 2.0**-11
    assert rounding_bound("tf32", 100) == pytest.approx(2 * 100 * 2.0**-11)
    assert REDUCED_PRECISION_FLOOR["tf32"] == 1e-4
    with pytest.raises(ValueError, match="precision must be one of"):
        rounding_bound("fp8", 3)


def test_an_overflow_eager_in_float32_shares_is_the_models_own_at_tf32():
    """TF32 keeps float32's range: an inf where float64 is finite (1e39) but eager under TF32 overflows too is the
    model's, as at fp32; an inf eager under TF32 does not have still fails."""
    exact = torch.tensor([1e39, 0.5, -0.25], dtype=torch.float64)
    low = torch.tensor([float("inf"), 0.5 + 3e-4, -0.25 - 2e-4])  # eager under TF32: its own rounding, float32's inf
    expected = torch.tensor([float("inf"), 0.5, -0.25])  # eager in float32
    actual = torch.tensor([float("inf"), 0.5 + 4e-4, -0.25 - 1e-4])  # off by TF32 rounding: outside fp32's tolerances
    shared = Judge("tf32").judge_outputs(compare_outputs(expected, actual), low, actual, exact, depth=3)
    assert shared.passed, shared
    overflowed = torch.tensor([float("inf"), float("inf"), -0.25 - 1e-4])
    alone = Judge("tf32").judge_outputs(compare_outputs(expected, overflowed), low, overflowed, exact, depth=3)
    assert not alone.passed and "its NaN/Inf are not those of eager in tf32" in str(alone)


def test_a_tf32_localization_says_its_sub_engines_are_plain_float32():
    """A failure at tf32 is localized with float32 sub-engines; the localization says so, as it does at fp16, rather
    than present a TF32 rounding difference as a converter's error."""
    model, x = large_k()
    with converters.Snapshot():
        converters.register(A.relu.default, override=True)(_relu_as_negation)
        with pytest.raises(trtcheck.VerificationError) as info:
            trtcheck.verify(model, (x,), TF32, backend="onnxruntime", num_inputs=1)
    notes = info.value.report.localization.notes
    assert notes and notes[0].startswith("the engines run with TF32"), notes
