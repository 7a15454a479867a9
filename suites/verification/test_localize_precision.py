"""Issue 43, "Close the gaps": localization and reduction build their sub-engines at the precision verified.

Under ``Settings(precision="fp16")`` every sub-engine is built with the compiled partition's settings and judged by
the one reduced-precision judge (``judge.Judge`` at fp16: float64 of the cut, eager in fp16 its yardstick,
the rounding bound over its depth): a planted converter error is named at fp16, a correct model whose fp16 failure
is a range problem blames no converter, and ``fp32_nodes`` still match the nodes of a cut (they keep their names).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

import trtcheck
from suites.verification.planted import off_by, planted
from suites.verification.test_reduced_precision_broken import RMSNorm300
from trtcheck.lowering.graph import flat_inputs
from trtcheck.verification.localize import localize
from trtcheck.verification.probes import check_nodes
from trtcheck.verification.recording import record_eager
from trtcheck.verification.reduce import reduce_compiled, reduce_model

aten = torch.ops.aten
ORT = "onnxruntime"
FP16 = trtcheck.Settings(min_block_size=1, precision="fp16")
# sigmoid runs in PyTorch: two engines, the first one correct, which float32's rule failed at fp16
SPLIT = dataclasses.replace(FP16, torch_executed_ops=["aten::sigmoid"])


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(32, 64), nn.Linear(64, 64), nn.Linear(64, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        h = torch.sigmoid(h) * h
        h = torch.relu(self.b(h))
        return self.c(h)


def _mlp() -> tuple[nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(0)
    return MLP().eval(), (torch.randn(8, 32),)


def _rms_norm() -> tuple[nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(0)
    return RMSNorm300().eval(), (torch.randn(8, 64, generator=torch.Generator().manual_seed(0)),)


def _localized(model, inputs, settings):
    compiled = trtcheck.compile(model, inputs, settings, backend=ORT)
    return compiled, localize(compiled, flat_inputs(compiled.partition.graph_module, inputs, {}), ORT)


def test_a_planted_converter_error_is_named_at_fp16_in_the_engine_it_is_in():
    """Before: segment @0 (correct, in fp16) failed float32's rule and was taken for the culprit segment, and the
    localization ended in a note that its float32 sub-engines judge nothing at fp16."""
    with planted(aten.relu.default, {"relu_1"}, off_by(1.1)):
        compiled, found = _localized(*_mlp(), SPLIT)
    assert len([s for s in compiled.partition.segments if s.target.value == "tensorrt"]) == 2
    assert [check.local_passed for check in found.segments] == [True, False], str(found)
    culprit = found.culprit
    assert culprit is not None and (culprit.node, culprit.op, culprit.segment) == ("relu_1", "aten.relu.default", 2), str(found)
    assert culprit.converter.startswith("suites.verification.planted.planted.")
    assert culprit.precision == "fp16" and culprit.survives_isolation and not culprit.ill_conditioned
    text = str(found)
    assert "this op's converter is wrong: the engine, built in fp16" in text and "eager in fp16's own" in text
    assert "and so were this localization's sub-engines built" in text
    assert "builds its sub-engines in float32" not in text


def test_a_planted_converter_error_is_reduced_at_fp16():
    model, inputs = _mlp()
    with planted(aten.relu.default, {"relu_1"}, off_by(1.1)):
        compiled = trtcheck.compile(model, inputs, SPLIT, backend=ORT)
        found = reduce_compiled(compiled, flat_inputs(compiled.partition.graph_module, inputs, {}), ORT, budget=60)
    assert len(found.culprits) == 1 and found.culprits[0].nodes == ["relu_1"], str(found)
    assert "eager in fp16's own" in found.culprits[0].failure and "a conversion error, not fp16 rounding" in found.culprits[0].failure


def test_reduce_model_finds_nothing_to_reduce_in_a_correct_fp16_model():
    """``reduce_model`` decides which input set mismatches as ``verify`` does (``comparisons.judge_input_set``): a
    correct model at fp16 is outside float32's tolerances on every set, and was reported as a mismatch of 112 of 128
    elements with no culprit and "rounding accumulated across engines"."""
    torch.manual_seed(0)
    model, inputs = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16)).eval(), (torch.randn(8, 32),)
    assert trtcheck.verify(model, inputs, FP16, backend=ORT).passed
    reduction = reduce_model(model, inputs, FP16, backend=ORT, budget=30)
    assert reduction.mismatch is None and not reduction.culprits, str(reduction)
    assert "nothing to reduce" in str(reduction)


def test_a_range_problem_reduces_to_the_nodes_fp16_cannot_hold_and_says_so():
    """Before: float32 sub-engines of a correct model reduce to nothing. At fp16 the square that overflows and the mean
    of its infinities fail on their own, each said to be fp16's range, with ``fp32_nodes`` the fix."""
    model, inputs = _rms_norm()
    compiled = trtcheck.compile(model, inputs, FP16, backend=ORT)
    found = reduce_compiled(compiled, flat_inputs(compiled.partition.graph_module, inputs, {}), ORT, budget=60)
    assert [culprit.nodes for culprit in found.culprits] == [["mul_1"], ["mean"]], str(found)
    for culprit in found.culprits:
        assert "fp16's range or rounding" in culprit.failure and "Settings.fp32_nodes" in culprit.failure, str(found)
        assert "a conversion error" not in culprit.failure


def test_each_reduced_fp16_culprits_repro_replays_at_fp16_and_fails_alone(tmp_path):
    """Issue 53, item 8: ``trtcheck reduce --precision fp16`` wrote culprits whose ``repro.py`` replayed in float32
    and printed PASS. A repro folder records the failure's settings and builds and judges at them."""
    import json
    import subprocess
    import sys

    model, inputs = _rms_norm()
    found = reduce_model(model, inputs, FP16, backend=ORT, budget=60, out_dir=tmp_path)
    assert found.culprits, str(found)
    for culprit in found.culprits:
        assert json.loads((culprit.repro / "settings.json").read_text())["settings"]["precision"] == "fp16"
        done = subprocess.run([sys.executable, str(culprit.repro / "repro.py")], capture_output=True, text=True, timeout=300)
        assert done.returncode == 1 and done.stdout.strip().endswith("FAIL"), done.stdout[-2000:] + done.stderr[-2000:]


def test_a_correct_model_whose_fp16_failure_is_its_range_blames_no_converter():
    """RMSNorm300's ``h * h`` passes 65504 in fp16: eager in fp16 is as wrong as the engine, so the op found is
    fp16's range, not a converter, and the fix named is ``fp32_nodes``. Before: no culprit, only the float32 note."""
    _, found = _localized(*_rms_norm(), FP16)
    culprit = found.culprit
    assert culprit is not None and culprit.op == "aten.mul.Tensor", str(found)
    assert culprit.precision == "fp16" and culprit.ill_conditioned, str(found)
    text = str(found)
    assert "this op's converter is wrong" not in text
    assert "fp16's rounding or range on these inputs, not the converter" in text
    assert f"keep {culprit.node!r} in float32, with what its value reaches" in text  # the checked set: the report's line


@torch.no_grad()
@pytest.mark.parametrize("keep, fails", [((), True), (("mul_1", "mean"), False)])
def test_fp32_nodes_match_the_nodes_of_a_cut(keep, fails):
    """A sub-engine of the square and its mean, built with the compiled settings: kept in float32 by their names in
    the whole graph, the cut keeps them (no overflow), else fp16 overflows and the judge fails it."""
    model, inputs = _rms_norm()
    settings = dataclasses.replace(FP16, fp32_nodes=list(keep)) if keep else FP16
    compiled = trtcheck.compile(model, inputs, FP16, backend=ORT)
    gm = compiled.partition.graph_module
    values = record_eager(gm, flat_inputs(gm, inputs, {}))
    nodes = [node for node in gm.graph.nodes if node.name in ("mul_1", "mean")]
    check = check_nodes(gm, nodes, values, ORT, settings=settings)
    assert check.error == "" and check.comparison is not None
    assert check.failed is fails, str(check.comparison)
