"""Outputs that fail the fixed tolerances are judged again against eager in float64 (``verify(reference=True)``).

Both directions are tested: an ill-conditioned model whose compiled output is as far from float64 as eager's
own passes (and fails with the fixed tolerances alone), and a converter off by 1e-3 relative fails however
deep the model (its error against float64 is hundreds of times eager's).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import trtcheck
from trtcheck import conversion
from trtcheck.verification.judge import REFERENCE_MULTIPLE
from trtcheck.verification.reference import float64_outputs

SETTINGS = trtcheck.Settings(min_block_size=1)


class OffCenterNorm(nn.Module):
    """A LayerNorm of ``3000 + x``: its mean cancels 3000 in float32, so eager and any engine both lose digits
    (eager 3.5e-4 from float64 in the issue's measurement): ill-conditioned, not wrong."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(256)
        self.proj = nn.Linear(256, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.norm(x + 3000.0)) * 50


def _inputs(seed: int = 0) -> tuple[torch.Tensor]:
    return (torch.randn(8, 256, generator=torch.Generator().manual_seed(seed)),)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return OffCenterNorm().eval()


@pytest.mark.slow
def test_an_ill_conditioned_model_passes_against_float64_and_fails_the_fixed_tolerances():
    model, example = _model(), _inputs()
    with pytest.raises(trtcheck.VerificationError):
        trtcheck.verify(model, example, SETTINGS, backend="onnxruntime", reference=False)
    report = trtcheck.verify(model, example, SETTINGS, backend="onnxruntime")
    ratios = [o.reference_ratio for c in report.comparisons for o in c.outputs if o.reference_ratio is not None]
    assert ratios, "the fixed tolerances failed, so float64 must have been consulted"
    assert max(ratios) <= REFERENCE_MULTIPLE
    assert "judged against float64: ratio" in str(report)


@pytest.fixture
def addmm_off_by_1e_3():
    """``aten.addmm`` scaled by 1.001 at its output, through the public registry API."""
    with conversion.Snapshot():
        original = conversion.get(torch.ops.aten.addmm.default)

        def wrong(ctx, node, fn=original.fn):
            return ctx.add("Mul", [fn(ctx, node), ctx.constant(1.001, node.meta["val"].dtype)])

        conversion.register(torch.ops.aten.addmm.default, validator=original.validator, override=True)(wrong)
        yield


class Mlp(nn.Module):
    """Well-conditioned: eager is within float32's rounding of float64, so a 1e-3 error stands out."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def test_a_converter_off_by_1e_3_fails_against_float64(addmm_off_by_1e_3):
    torch.manual_seed(0)
    model, example = Mlp().eval(), _inputs()
    with pytest.raises(trtcheck.VerificationError) as failure:
        trtcheck.verify(model, example, SETTINGS, backend="onnxruntime")
    ratios = [o.reference_ratio for c in failure.value.report.comparisons for o in c.outputs if o.reference_ratio is not None]
    assert ratios and min(ratios) > 10 * REFERENCE_MULTIPLE
    assert "a conversion error, not rounding" in str(failure.value.report)


def test_float64_outputs_computes_in_float64_and_leaves_the_model_alone():
    model, example = _model(), _inputs()
    reference, why = float64_outputs(model, example, {})
    assert why == "" and reference.dtype == torch.float64
    assert next(model.parameters()).dtype == torch.float32  # a copy was widened, not the model
    exact = model.double()(example[0].double())
    torch.testing.assert_close(reference, exact, rtol=0, atol=0)


def test_float64_outputs_widens_a_graphs_dtype_arguments():
    class Casts(nn.Module):
        def forward(self, x):
            return (x.to(torch.float16) * 3).to(torch.float32) + torch.full((2,), 0.1, dtype=torch.float32)

    graph = torch.export.export(Casts(), (torch.randn(2),)).module()
    lowered = torch.fx.symbolic_trace(graph) if not isinstance(graph, torch.fx.GraphModule) else graph
    x = torch.tensor([1 / 3, 2 / 3])
    reference, why = float64_outputs(lowered, (x,), {})
    assert why == "" and reference.dtype == torch.float64
    # The model's own cast to float16 is a rounding of x (issue 43, item 2), then float64 on: no float16 rounding of
    # x * 3, no float32 rounding at the cast back nor of 0.1.
    torch.testing.assert_close(reference, x.half().double() * 3 + 0.1, rtol=1e-15, atol=1e-15)


def test_float64_outputs_widens_the_dtype_arguments_of_graphs_a_graph_calls():
    """The dynamic fuzz's graphs wrap their body graph in an outer one (``build_dynamic_graph``): a float32 cast in the
    body kept the "float64" reference in float32, eager then erred by 0 against it, and a float32 bmm whose products
    cancel (its engine 1 ulp from eager) was called a conversion error (nightly fuzz, seed
    111087217277767453169700038397746668426)."""
    class Casts(nn.Module):
        def forward(self, x):
            return (x.to(torch.float16) * 3).to(torch.float32) + torch.full((2,), 0.1, dtype=torch.float32)

    body = torch.export.export(Casts(), (torch.randn(2),)).module()
    outer = torch.fx.Graph()
    outer.output(outer.call_module("body", (outer.placeholder("x"),)))
    holder = nn.Module()
    holder.body = body
    wrapped = torch.fx.GraphModule(holder, outer)
    x = torch.tensor([1 / 3, 2 / 3])
    reference, why = float64_outputs(wrapped, (x,), {})
    assert why == "" and reference.dtype == torch.float64
    torch.testing.assert_close(reference, x.half().double() * 3 + 0.1, rtol=1e-15, atol=1e-15)
    torch.testing.assert_close(wrapped(x), Casts()(x), rtol=0, atol=0)  # the model itself still rounds to float16
