"""``--trtcheck-frontend`` (issue 54): a downstream suite verifies a model torch.export refuses through the
``trtcheck_verify`` fixture, as torch.compile deploys it; ``export`` refuses it with the line; a bad value is a usage
error."""

from __future__ import annotations

from pathlib import Path

import pytest

from suites.dynamo.gated_source import GATED_MODEL
from suites.testing.downstream import ONNXRUNTIME, run_pytest

GATED_TEST = GATED_MODEL + '''

def test_gated(trtcheck_verify):
    torch.manual_seed(0)
    report = trtcheck_verify(Gated().eval(), (torch.rand(2, 8),))
    print(report)
'''


@pytest.mark.slow
@pytest.mark.parametrize("frontend, passes", [("compile", True), ("auto", True), ("export", False)])
def test_the_frontend_option_reaches_the_fixture(tmp_path: Path, frontend: str, passes: bool):
    (tmp_path / "test_gated.py").write_text(GATED_TEST)
    result = run_pytest(tmp_path, *ONNXRUNTIME, "--trtcheck-settings", "min_block_size_1", "--trtcheck-frontend", frontend, "-s")
    output = result.stdout + result.stderr
    assert result.returncode == (0 if passes else 1), output
    if passes:
        assert "graph(s) captured by torch.compile" in output and "PASSED" in output, output
    else:
        assert "torch.export could not trace Gated" in output and "test_gated.py:13" in output, output


@pytest.mark.slow
def test_a_bad_frontend_is_a_usage_error(tmp_path: Path):
    (tmp_path / "test_nothing.py").write_text("def test_nothing(trtcheck_config):\n    pass\n")
    result = run_pytest(tmp_path, "--trtcheck", "--trtcheck-frontend", "graph")
    assert result.returncode != 0 and "--trtcheck-frontend: 'graph'" in result.stdout + result.stderr
