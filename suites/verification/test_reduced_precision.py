"""``verify`` with ``Settings.precision`` "fp16"/"bf16" (issue 24, item 2): each output is judged by its error against
float64 against eager's own error at that precision (``judge.Judge`` at fp16/bf16), and the ratio is
reported per output."""

from __future__ import annotations

import pytest
import torch

import trtcheck
from trtcheck import conversion as converters
from trtcheck.verification.equivalence import compare_outputs
from trtcheck.verification.judge import REDUCED_PRECISION_MULTIPLE, Judge
from trtcheck.verification.reference import reduced_precision_outputs

A = torch.ops.aten


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).eval()


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_a_float32_model_at_reduced_precision_passes_with_its_ratio(precision):
    """Under fp32's tolerances the fp16/bf16 engine fails (it rounds like fp16/bf16); against eager at that precision
    it is as close to float64 as eager, and every output says by how much."""
    model, x = mlp(), torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
    report = trtcheck.verify(model, (x,), trtcheck.Settings(min_block_size=1, precision=precision), localize_budget=0)
    assert report.passed
    outputs = [output for comparison in report.comparisons for output in comparison.outputs]
    assert all(output.eager_precision == precision and output.reference_ratio is not None for output in outputs)
    assert max(output.reference_ratio for output in outputs) <= REDUCED_PRECISION_MULTIPLE
    assert any(output.max_abs > output.atol for output in outputs)  # fp32's tolerances alone would have failed it
    assert f"to eager {precision}'s own error" in "\n".join(report.checked())


def test_a_wrong_converter_fails_at_reduced_precision():
    """relu converted as relu(x) * 1.05: 5% off, far beyond fp16 rounding (ratios in the tens)."""

    def skewed_relu(ctx, node):
        relu = ctx.add("Relu", [ctx.name(node.args[0])])
        return ctx.add("Mul", [relu, ctx.constant(1.05, node.meta["val"].dtype)])

    model, x = mlp(), torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
    with converters.Snapshot():
        converters.register(A.relu.default, override=True)(skewed_relu)
        with pytest.raises(trtcheck.VerificationError) as info:
            trtcheck.verify(model, (x,), trtcheck.Settings(min_block_size=1, precision="fp16"), localize_budget=0)
    assert "not fp16 rounding" in str(info.value)


def test_an_overflow_where_float64_is_finite_fails_even_when_eager_overflows_too():
    """An inf where eager in fp16 overflows too is still the model's range problem at that precision: it fails,
    and says that eager shares it and what keeps it in range (fp32_nodes); an inf float64 has too passes."""
    expected = torch.tensor([1.0, 70000.0])  # eager in float32
    exact = expected.double()
    low = torch.tensor([1.0, float("inf")], dtype=torch.float16)
    same = torch.tensor([1.0, float("inf")])
    comparison = Judge("fp16").judge_outputs(compare_outputs(expected, same), low, same, exact)
    assert not comparison.passed
    assert "1 element(s) are inf or NaN where float64 is finite (1 of them in eager in fp16 too)" in comparison.outputs[0].message
    assert "Settings.fp32_nodes" in comparison.outputs[0].message
    really = torch.tensor([1.0, float("inf")])  # the model's own overflow: float64 is inf there too
    assert Judge("fp16").judge_outputs(compare_outputs(really, same), low, same, really.double()).passed


def test_eager_at_reduced_precision_leaves_the_model_alone():
    model, x = mlp(), torch.randn(2, 16)
    before = model[0].weight.clone()
    out, why = reduced_precision_outputs(model, (x,), {}, "bf16")
    assert why == "" and out.dtype == torch.bfloat16
    assert model[0].weight.dtype == torch.float32 and torch.equal(model[0].weight, before)
    torch.testing.assert_close(out.float(), model(x), rtol=5e-2, atol=5e-2)



class _SolveWithDerivedBuffer(torch.nn.Module):
    """A Cholesky solve (CPU has no fp16 Cholesky) and a buffer made by an op that tracked gradients: a non-leaf
    tensor, which ``copy.deepcopy`` refuses."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4, 4))
        self.register_buffer("scale", self.weight.sum(0) * 0.1)  # not a graph leaf

    def forward(self, x):
        spd = x @ x.T + 4 * torch.eye(x.shape[0], dtype=x.dtype)
        return torch.cholesky_solve(self.weight[: x.shape[0]] * self.scale, torch.linalg.cholesky(spd))


def test_the_references_run_a_model_deepcopy_refuses_and_ops_without_a_low_precision_kernel():
    """Both yardsticks existed only for models ``copy.deepcopy`` takes and whose every op has an fp16 kernel; the zoo's
    ring_buffer and spd_solve then fell back to float32's tolerances and failed in fp16."""
    from trtcheck.verification.reference import float64_outputs

    torch.manual_seed(0)
    model, x = _SolveWithDerivedBuffer(), (torch.randn(4, 4),)
    with pytest.raises(RuntimeError, match="deepcopy"):
        import copy

        copy.deepcopy(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    exact, why = float64_outputs(model, x, {})
    assert why == "" and exact.dtype == torch.float64
    low, why = reduced_precision_outputs(model, x, {}, "fp16")
    assert why == "" and low.dtype == torch.float16  # cholesky in float32, rounded back; the rest in fp16
    with torch.no_grad():
        expected = model(*x)
    torch.testing.assert_close(exact.float(), expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(low.float(), expected, rtol=2e-2, atol=2e-2)
    assert all(torch.equal(v, before[k]) and v.dtype == torch.float32 for k, v in model.state_dict().items())


class NoFloat64(torch.nn.Module):
    """Refuses float64 inputs: no float64 reference can be made of it."""

    def forward(self, x):
        if x.dtype == torch.float64:
            raise TypeError("no float64 kernel here")
        return x * 3


def test_the_one_judge_says_why_it_could_not_judge_and_leaves_the_verdict_to_the_tolerances():
    """``Judge.judge_call`` is what verify (every input set, every varied scalar) and the timed benchmarks call: with a
    reference it judges in place; without one it changes nothing and returns the reason for the note."""
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
    model = mlp()
    expected = model(x)
    actual = expected.half().float()  # rounded as an fp16 engine rounds
    comparison = compare_outputs(expected, actual)
    assert not comparison.passed  # fp32's tolerances
    assert Judge("fp16").judge_call(comparison, model, (x,), {}, expected, actual) == ""
    assert comparison.passed and comparison.outputs[0].eager_precision == "fp16"

    wide = compare_outputs(NoFloat64()(x), actual)
    why = Judge("fp16").judge_call(wide, NoFloat64(), (x,), {}, NoFloat64()(x), actual)
    assert "float64" in why and "no float64 kernel here" in why
    assert not wide.passed and wide.outputs[0].eager_precision == ""


@pytest.mark.parametrize("name", ["cond_branches", "while_loop_body"])
@pytest.mark.parametrize("precision", ["fp16", pytest.param("bf16", marks=pytest.mark.slow)])
def test_a_model_with_cond_or_while_loop_gets_a_reduced_precision_reference(name, precision):
    """Issue 43, item 3: eager at fp16/bf16 runs under a dispatch mode; ``torch.cond``/``while_loop`` had no rule for
    it ("There was no rule registered for HigherOrderOperator cond"), so no reference, and fp32's tolerances judged
    the fp16 engine. The branches now run under the same mode."""
    import trtcheck_zoo

    case = trtcheck_zoo.get(name).build()
    model, args = case[0], case[1]
    out, why = reduced_precision_outputs(model, args, {}, precision)
    assert why == ""
    dtype = torch.float16 if precision == "fp16" else torch.bfloat16
    leaves = [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    assert leaves and all(t.dtype == dtype for t in leaves)
    report = trtcheck.verify(model, args, trtcheck.Settings(precision=precision), localize_budget=0)
    outputs = [output for comparison in report.comparisons for output in comparison.outputs]
    assert outputs and all(output.eager_precision == precision and output.reference_ratio is not None for output in outputs)
    assert report.passed, "\n".join(report.checked())


@pytest.mark.parametrize("name", ["cond_branches", "while_loop_body"])
def test_a_model_with_cond_or_while_loop_gets_a_tf32_yardstick(name):
    """Issue 43, item 3 at TF32: eager under TF32 rounding runs under ``Tf32RoundingMode``, which had no rule for
    ``torch.cond``/``while_loop`` either, so ``Settings(tf32=True)`` had no yardstick for these models (the zoo run of
    ``suites.benchmarks.zoo_precision --precisions tf32`` stopped at cond_branches with that NotImplementedError)."""
    import trtcheck_zoo

    case = trtcheck_zoo.get(name).build()
    model, args = case[0], case[1]
    out, why = reduced_precision_outputs(model, args, {}, "tf32")
    assert why == "", why
    leaves = [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    assert leaves and all(t.dtype == torch.float32 for t in leaves)
    report = trtcheck.verify(model, args, trtcheck.Settings(tf32=True), localize_budget=0)
    outputs = [output for comparison in report.comparisons for output in comparison.outputs]
    assert outputs and all(output.eager_precision == "tf32" and output.reference_ratio is not None for output in outputs)
    assert report.passed, "\n".join(report.checked())
