"""A model's own casts are roundings in the float64 reference (issue 43, item 2).

A float32 model with one ``.half()`` submodule had no float64 reference: the reference cast every parameter to
float64, and the model's own ``y.half()`` then met float64 weights ("mat1 and mat2 must have the same dtype"), so
fp32's fixed tolerances judged an output that went through fp16, and a right conversion FAILed.
"""

from __future__ import annotations

import torch
from torch import nn

import trtcheck
from trtcheck.verification.reference import float64_outputs


class HalfInside(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.f = nn.Linear(256, 256)
        self.h = nn.Linear(256, 256).half()
        self.g = nn.Linear(256, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.f(x))
        return self.g(self.h(y.half()).float())


def _model() -> nn.Module:
    torch.manual_seed(0)
    return HalfInside().eval()


def _inputs() -> tuple[torch.Tensor]:
    return (torch.randn(8, 256, generator=torch.Generator().manual_seed(0)),)


def test_the_float64_reference_takes_a_models_half_cast_as_a_rounding():
    model, (x,) = _model(), _inputs()
    exact, why = float64_outputs(model, (x,), {})
    assert why == "" and exact is not None and exact.dtype == torch.float64
    # By hand: float64 everywhere, rounded to fp16 exactly where the model casts (``y.half()``), not where it
    # computes in fp16 (``self.h``: its weights are fp16 values, exact in float64).
    with torch.no_grad():
        y = torch.relu(x.double() @ model.f.weight.double().T + model.f.bias.double())
        h = y.half().double() @ model.h.weight.double().T + model.h.bias.double()  # computed in float64
        expected = h @ model.g.weight.double().T + model.g.bias.double()
    torch.testing.assert_close(exact, expected, rtol=1e-12, atol=1e-12)
    with torch.no_grad():
        eager = model(x)
    assert (eager.double() - exact).abs().max() < 1e-2  # eager is that math, rounded: not a different function


def test_a_float32_model_with_a_half_submodule_passes_at_default_settings():
    model, inputs = _model(), _inputs()
    report = trtcheck.verify(model, inputs, localize_budget=0)  # raised VerificationError: no float64 reference
    assert report.passed, str(report)
    assert not any("no float64 reference" in note for note in report.notes), report.notes


def test_the_reference_of_a_lowered_graph_rounds_where_it_casts():
    model, inputs = _model(), _inputs()
    lowered = trtcheck.lower(model, inputs)
    exact, why = float64_outputs(lowered, inputs, {})
    direct, _ = float64_outputs(model, inputs, {})
    assert why == ""
    torch.testing.assert_close(exact.double(), direct, rtol=1e-9, atol=1e-9)


class MakesItsOwnFloat32(nn.Module):
    """What torchvision's RAFT and timm's rotary embeddings do: float32 tensors the model makes itself (an integer grid
    made float by ``.float()``, a table made with ``dtype=torch.float32``) fed to its own layers (issue 53, item 0:
    "Input type (float) and bias type (double)", no reference, and float32's tolerances then judged alone)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(2, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        grid = torch.stack([xs, ys]).float()[None].expand(x.shape[0], -1, -1, -1)
        freqs = 1.0 / (10000 ** (torch.arange(0, 8, 2, dtype=torch.float32) / 8))
        return (self.conv(grid) + x.repeat(1, 2, 1, 1)) * freqs.sum()


def test_float32_tensors_a_model_makes_itself_are_made_in_float64_by_the_reference():
    model, x = MakesItsOwnFloat32().eval(), torch.randn(2, 2, 5, 6, generator=torch.Generator().manual_seed(0))
    exact, why = float64_outputs(model, (x,), {})
    assert why == "" and exact is not None and exact.dtype == torch.float64, why
    wide = x.double()  # the same model written in float64 by hand
    ys, xs = torch.meshgrid(torch.arange(5), torch.arange(6), indexing="ij")
    grid = torch.stack([xs, ys]).double()[None].expand(2, -1, -1, -1)
    freqs = 1.0 / (10000 ** (torch.arange(0, 8, 2, dtype=torch.float64) / 8))
    conv = nn.functional.conv2d(grid, model.conv.weight.double(), model.conv.bias.double(), padding=1)
    by_hand = (conv + wide.repeat(1, 2, 1, 1)) * freqs.sum()
    assert torch.allclose(exact, by_hand, rtol=1e-13, atol=0)  # float64 throughout, not float32 made wide


def test_a_model_making_its_own_float32_tensors_is_judged_against_float64():
    """An engine nearer float64 than eager, beyond tolerances made tight enough to miss: the judge takes it for rounding
    because it has the reference (without one it returned "no float64 reference" and the tolerances' FAIL stood)."""
    from trtcheck.verification.judge import Judge

    model, x = MakesItsOwnFloat32().eval(), torch.randn(2, 2, 5, 6, generator=torch.Generator().manual_seed(0))
    judge = Judge.of(trtcheck.Settings(), rtol=1e-12, atol=1e-12)
    expected = model(x)
    actual = float64_outputs(model, (x,), {})[0].float()  # float64's answer, rounded once
    comparison = judge.compare(expected, actual)
    assert not comparison.passed  # the tolerances alone fail it
    assert judge.judge_call(comparison, model, (x,), {}, expected, actual) == "" and comparison.passed, str(comparison)
