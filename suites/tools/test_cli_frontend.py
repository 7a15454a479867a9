"""``trtcheck verify|partition --frontend`` (issue 54): a model torch.export refuses, through torch.compile's graphs."""

from __future__ import annotations

from pathlib import Path

import pytest

from suites.dynamo.gated_source import GATED_MODEL
from trtcheck.tools.cli import main

GATED = GATED_MODEL + '''

def build():
    torch.manual_seed(0)
    return Gated().eval(), (torch.rand(2, 8),)
'''


@pytest.fixture
def gated(tmp_path: Path) -> Path:
    path = tmp_path / "gated.py"
    path.write_text(GATED)
    return path


def test_verify_goes_through_torch_compile_where_export_refuses(gated, capsys):
    assert main(["verify", f"{gated}:build", "--min-block-size", "1", "--backend", "onnxruntime"]) == 0
    out = capsys.readouterr().out
    assert "PASSED" in out and "graph(s) captured by torch.compile" in out and "gated.py:13" in out, out


def test_verify_with_the_export_frontend_refuses_it_with_its_line(gated, capsys):
    assert main(["verify", f"{gated}:build", "--backend", "onnxruntime", "--frontend", "export"]) == 2
    assert "torch.export could not trace Gated" in capsys.readouterr().err


def test_partition_prints_each_captured_graph(gated, capsys):
    assert main(["partition", f"{gated}:build", "--min-block-size", "1", "--frontend", "compile"]) == 0
    out = capsys.readouterr().out
    assert "gated.py:12 in forward); ended by a graph break at " in out and "gated.py:13 in forward" in out, out
    assert "graph 1 (" in out, out


def test_compare_reports_each_captured_graph_beside_its_segments(gated, capsys):
    assert main(["compare", f"{gated}:build", "--min-block-size", "1", "--partitioners", "dependency_aware"]) == 0
    out = capsys.readouterr().out
    assert "torch.export could not trace Gated" in out and "comparing torch.compile's graphs instead" in out, out
    assert "ended by a graph break at " in out and "gated.py:13 in forward" in out, out
    assert "gated.py:build graph 0" in out and "gated.py:build graph 1" in out and "dependency_aware" in out, out
