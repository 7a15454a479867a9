"""Issue 54 on a real detector: torchvision's fasterrcnn_mobilenet_v3_large_320_fpn (random weights, 160x160), which
torch.export refuses, verifies through ``frontend="auto"``; a wrong converter planted in its box head is named with
its source line. Slow tier: about a minute each on two cores. The worked example of docs/graph-breaks.md
runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import trtcheck
from suites.verification.planted import off_by, planted
from trtcheck.errors import VerificationError
from trtcheck.verification.graph_breaks import GraphBreakReport

pytestmark = pytest.mark.slow
DOCS = Path(__file__).resolve().parents[2] / "docs" / "graph-breaks.md"


def _detector() -> tuple[torch.nn.Module, tuple]:
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None,
                                                                                num_classes=5).eval()
    return model, ([torch.rand(3, 160, 160)],)


def test_a_detector_export_refuses_verifies_through_its_graphs():
    model, args = _detector()
    report = trtcheck.verify(model, args, backend="onnxruntime", num_inputs=2)
    assert isinstance(report, GraphBreakReport) and report.passed, str(report)
    text = str(report)
    assert "torchvision/ops/boxes.py" in text and "graph break" in text, text
    assert len(report.capture.graphs) >= 10, text
    assert sum(verdict.report is not None for verdict in report.graphs) >= 10, text


def test_a_wrong_converter_in_the_box_head_is_named_with_its_source_line():
    """A random-weight backbone's activations are about 1e-8 here: a convolution 5% off stays within atol (1e-5) and
    passes, rightly by the tolerances. The box head's ``addmm`` 5% off fails its graph, and is the culprit."""
    model, args = _detector()
    with planted(torch.ops.aten.addmm.default, None, off_by(1.05)), pytest.raises(VerificationError) as failure:
        trtcheck.verify(model, args, backend="onnxruntime", num_inputs=1, frontend="compile")
    report = failure.value.report
    failed = [verdict for verdict in report.graphs if verdict.report is not None and not verdict.report.passed]
    assert failed, str(report)
    localization = failed[0].report.localization
    assert localization is not None and localization.culprit is not None, str(report)
    assert "addmm" in str(localization.culprit), str(localization)
    assert "box_head.fc6" in str(localization) and "torchvision/models/detection/faster_rcnn.py:" in str(localization), str(localization)


def test_the_docs_worked_example_runs_as_written():
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S)
    assert blocks, "docs/graph-breaks.md has no python example"
    exec(compile(blocks[0], str(DOCS), "exec"), {"__name__": "docs_example"})
