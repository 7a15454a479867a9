"""A downstream project benchmarks its own model with ``trtcheck_benchmark`` and reports it with ``trtcheck report``.

Its suite is not the zoo's: a temporary project with its own model and test, nothing installed, pytest run
there in a subprocess (as a user runs it), then the report read from its JSON exactly as the zoo's is.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suites.testing.downstream import ONNXRUNTIME, run_pytest
from trtcheck.report import load_run
from trtcheck.tools.cli import main

USER_TEST = '''
import torch


class TinyNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 8)

    def forward(self, x):
        return torch.relu(self.fc(x)) * 2


def test_tiny_net_speed(trtcheck_benchmark):
    torch.manual_seed(0)
    trtcheck_benchmark(TinyNet().eval(), (torch.randn(4, 16),), name="tiny_net")
'''


@pytest.mark.slow
def test_a_downstream_suite_benchmarks_its_model_and_the_report_reads_it(tmp_path: Path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_speed.py").write_text(USER_TEST)
    result = run_pytest(
        tmp_path, "-p", "no:xdist", *ONNXRUNTIME, "--trtcheck-settings", "min_block_size_1,torch_relu,torch_module",
        "--benchmark-json=out.json",
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "4 passed" in output, output  # two presets apply to a user's model, two variants each
    benchmarks = json.loads((tmp_path / "out.json").read_text())["benchmarks"]
    assert sorted(b["group"] for b in benchmarks) == ["tiny_net-min_block_size_1"] * 2 + ["tiny_net-torch_relu"] * 2
    run = load_run(tmp_path / "out.json")
    assert [g.key for g in run.groups] == [("tiny_net", "min_block_size_1"), ("tiny_net", "torch_relu")]
    for group in run.groups:
        assert group.eager_median and group.stitched_median and group.equivalence_passed is True
        assert group.fallbacks == 0 and group.compile_seconds and group.profile is not None
    assert (run.group("tiny_net", "torch_relu").segments_tensorrt, run.group("tiny_net", "torch_relu").segments_torch) == (2, 1)
    assert main(["report", str(tmp_path / "out.json"), "--out", str(tmp_path / "rep")]) == 0
    assert "tiny_net" in (tmp_path / "rep" / "report.md").read_text()
