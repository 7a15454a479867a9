"""The pytest plugin localizes a failing equivalence check by default (``--trtcheck-localize-budget``, 0: off):
the failing test's message names the culprit op and its converter, as a downstream user sees it."""

from __future__ import annotations

from pathlib import Path

import pytest

from suites.testing.downstream import ONNXRUNTIME, WRONG_CONVERTER_TEST, run_pytest


def _run(project: Path, *options: str) -> str:
    result = run_pytest(project, *ONNXRUNTIME, "--trtcheck-settings", "min_block_size_1", *options)
    assert result.returncode == 1, result.stdout + result.stderr
    return result.stdout + result.stderr


@pytest.mark.slow
def test_a_failing_test_names_the_culprit_op_unless_the_budget_is_zero(tmp_path: Path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_wrong.py").write_text(WRONG_CONVERTER_TEST)
    output = _run(tmp_path)
    assert "localization (" in output and "culprit: relu = aten.relu.default" in output, output
    assert "converted by test_wrong._relu_as_negation" in output and "this op's converter is wrong" in output, output
    assert "culprit:" not in _run(tmp_path, "--trtcheck-localize-budget", "0")


@pytest.mark.slow
def test_a_negative_budget_is_a_usage_error(tmp_path: Path):
    (tmp_path / "test_nothing.py").write_text("def test_nothing(trtcheck_config):\n    pass\n")
    result = run_pytest(tmp_path, "--trtcheck-localize-budget", "-1")
    assert result.returncode != 0 and "--trtcheck-localize-budget" in result.stdout + result.stderr
