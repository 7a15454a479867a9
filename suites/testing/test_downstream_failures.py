"""What a downstream user sees when their test fails: the report and the repro path, not trtcheck's insides.

A temporary project with one failing test (a deliberately wrong converter registered in the test itself),
pytest run there in a subprocess as a user runs it, then the written repro run as a user would run it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from suites.testing.downstream import ONNXRUNTIME, WRONG_CONVERTER_TEST, run_pytest, run_python


@pytest.mark.slow
def test_a_failure_shows_the_report_and_its_repro_reproduces_with_the_users_converter(tmp_path: Path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_wrong.py").write_text(WRONG_CONVERTER_TEST)
    result = run_pytest(tmp_path, *ONNXRUNTIME, "--trtcheck-settings", "min_block_size_1")
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "trtcheck verification of test_wrong[min_block_size_1]: FAILED" in output and "outputs differ from eager" in output
    # trtcheck's frames are hidden (no source of verify, no locals), and torch's trace log stays out
    assert "def verify(" not in output and "trtcheck/verification/verify.py" not in output, output
    assert "torch.__trace" not in output, output
    (repro,) = (tmp_path / "trtcheck-report").glob("*/repro.py")
    assert f"repro: python {repro}" in output

    rerun = run_python(tmp_path / "..", str(repro))
    rerun_output = rerun.stdout + rerun.stderr
    assert "converter: registered test_wrong._relu_as_negation for aten.relu.default" in rerun_output, rerun_output
    assert rerun.returncode != 0 and "VerificationError" in rerun_output and "did not reproduce" not in rerun_output, rerun_output
