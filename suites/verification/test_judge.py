"""The one judge: every output and every culprit is judged by one rule, chosen once per request.

A verdict (``Judge.judge_outputs``, what ``verify`` says of an output) and a localization's diagnosis of its culprit
(``Culprit.diagnosis``, what it says of the op) must never disagree on the same distance from float64: they once came
from two copies of the rule with different floors (a tenth of the atol against 1e-12 at float32) and a depth bound
one of them skipped below float32.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import trtcheck
from trtcheck.verification.equivalence import compare_outputs
from trtcheck.verification.findings import Culprit
from trtcheck.verification.judge import PRECISIONS, REFERENCE_MULTIPLE, Distance, Judge, Verdict
from trtcheck.verification.request import VerifyRequest


def _culprit(judge: Judge, distance: Distance) -> Culprit:
    return Culprit(node="op", op="aten.op", converter="-", segment=0, local_error=0.0, local_rel=0.0,
                   accumulated_error=0.0, inputs=[], survives_isolation=True, distance=distance, judge=judge)


def _diagnosed_as(diagnosis: str) -> str:
    """Which of the three conclusions a diagnosis draws."""
    if "converter is wrong" in diagnosis:
        return "converter"
    if "in float32, with what its value reaches" in diagnosis or "ill-conditioned" in diagnosis:
        return "rounding"
    return "unjudged"


_values = st.lists(st.floats(-1e3, 1e3, allow_nan=False, width=32), min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(precision=st.sampled_from(PRECISIONS), exact=_values, eager_noise=_values, compiled_noise=_values,
       scale=st.sampled_from([1e-8, 1e-6, 1e-4, 1e-2, 1.0]), depth=st.one_of(st.none(), st.integers(1, 200)),
       overflow=st.booleans())
def test_the_verdict_of_an_output_and_the_diagnosis_of_its_culprit_never_disagree(
    precision, exact, eager_noise, compiled_noise, scale, depth, overflow,
):
    """For any output (random values, errors, depths, an overflow or not), at every precision: the verdict
    ``judge_outputs`` gives it and the diagnosis a culprit with the same distance gets draw the same conclusion."""
    n = len(exact)
    exact_t = torch.tensor(exact, dtype=torch.float64)
    eager = (exact_t + scale * torch.tensor((eager_noise * n)[:n], dtype=torch.float64)).float()
    compiled = (exact_t + 7 * scale * torch.tensor((compiled_noise * n)[:n], dtype=torch.float64)).float()
    if overflow:
        compiled[0] = math.inf
    judge = Judge(precision)
    comparison = judge.judge_outputs(compare_outputs(eager, compiled), eager, compiled, exact_t, depth)
    output = comparison.outputs[0]
    if output.distance is None:  # within float32's tolerances: not judged again at float32
        assert precision == "fp32" and output.passed
        return
    verdict = judge.rule(output.distance)
    if output.verdict is not None:  # the output failed the tolerances: its verdict is the rule's
        assert output.verdict is verdict and output.passed is verdict.passed
    diagnosis = _culprit(judge, output.distance).diagnosis()
    assert _diagnosed_as(diagnosis) == ("rounding" if verdict.precision_cause else "converter"), (verdict, diagnosis)
    assert _culprit(judge, output.distance).ill_conditioned is verdict.precision_cause


@pytest.mark.parametrize("precision", PRECISIONS)
def test_one_floor_a_culprit_a_twentieth_of_an_atol_beyond_eager_is_rounding_as_its_verdict_says(precision):
    """The case two copies of the rule disagreed on: an engine 3x eager's error plus a twentieth of the atol from float64
    (within the verdict's floor of a tenth of the atol at float32) was 'this op's converter is wrong' to the culprit's
    rule (floor 1e-12). One floor now: the verdict passes and the diagnosis says rounding."""
    judge = Judge(precision)
    atol = 1e-5
    distance = Distance(compiled=REFERENCE_MULTIPLE * 1e-6 + atol / 20, eager=1e-6, scale=1.0, atol=atol, depth=10)
    assert judge.rule(distance) is Verdict.AS_EAGER
    culprit = _culprit(judge, distance)
    assert culprit.ill_conditioned and _diagnosed_as(culprit.diagnosis()) == "rounding"
    wrong = Distance(compiled=1e-2, eager=1e-6, scale=1.0, atol=atol, depth=10)
    assert judge.rule(wrong) is Verdict.CONVERSION and _diagnosed_as(_culprit(judge, wrong).diagnosis()) == "converter"


def test_below_float32_the_depth_bound_is_the_diagnosis_s_too():
    """At fp16, eager in fp16 as far from float64 as the engine but beyond what fp16's rounding allows over the depth:
    the verdict fails (the model does not compute in fp16), and the culprit says keep it in float32, not 'as close as
    eager' and not a wrong converter."""
    judge = Judge("fp16")
    distance = Distance(compiled=0.3, eager=0.3, scale=1.0, atol=1e-3, depth=2)
    assert judge.rule(distance) is Verdict.BEYOND_DEPTH and not judge.rule(distance).passed
    assert "in float32, with what its value reaches" in _culprit(judge, distance).diagnosis()


def test_a_request_chooses_its_judge_once_from_its_settings_and_tolerances():
    request = VerifyRequest(settings=trtcheck.Settings(precision="fp16"), rtol=1e-3, reference=False)
    assert request.judge == Judge("fp16", 1e-3, None, False)
    assert VerifyRequest(settings=trtcheck.Settings(tf32=True)).judge.precision == "tf32"
    assert VerifyRequest().judge == Judge()


class _Ill(nn.Module):
    """exp of large values: float32 itself is far from float64 there, within what any converter can do."""

    def forward(self, x):
        return torch.exp(x * 20.0)


def test_a_real_culprit_is_judged_by_the_judge_of_its_localization():
    """On a real localization the culprit carries the request's judge and its diagnosis is that judge's rule."""
    from trtcheck.lowering.graph import flat_inputs
    from trtcheck.verification.localize import localize

    torch.manual_seed(0)
    x = torch.rand(64) * 2
    compiled = trtcheck.compile(_Ill(), (x,), trtcheck.Settings(min_block_size=1), "onnxruntime")
    judge = Judge(rtol=0.0, atol=0.0)  # every output outside the tolerances: the float64 rule decides
    found = localize(compiled, flat_inputs(compiled.partition.graph_module, (x,), {}), "onnxruntime", judge=judge)
    culprit = found.culprit
    assert culprit is not None and culprit.distance is not None, str(found)
    assert (culprit.judge.precision, culprit.judge.rtol, culprit.judge.atol) == ("fp32", 0.0, 0.0)
    assert culprit.ill_conditioned is judge.rule(culprit.distance).precision_cause
