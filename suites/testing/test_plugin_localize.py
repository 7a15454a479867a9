"""The pytest plugin localizes a failing equivalence check by default (``--trtcheck-localize-budget``, 0: off):
the failing test's message names the culprit op and its converter, as a downstream user sees it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

WRONG_CONVERTER_TEST = '''
import torch
from torch import nn
from trtcheck import conversion as converters


def _relu_as_negation(ctx, node):  # wrong on purpose: the engine computes -x where eager computes relu(x)
    return ctx.add("Neg", [ctx.name(node.args[0])])


def test_wrong(trtcheck_verify):
    with converters.Snapshot():
        converters.register(torch.ops.aten.relu.default, override=True)(_relu_as_negation)
        torch.manual_seed(0)
        trtcheck_verify(nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4)).eval(), (torch.randn(2, 8),))
'''


def _env() -> dict[str, str]:
    """The environment a user's pytest runs in: none of this session's paths or options."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "TORCH_TRACE")}


def _run(project: Path, *options: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "--trtcheck",
         "--trtcheck-backend", "onnxruntime", "--trtcheck-settings", "min_block_size_1", *options],
        cwd=project, env=_env(), capture_output=True, text=True, timeout=600,
    )
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
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--trtcheck-localize-budget", "-1"],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600,
    )
    assert result.returncode != 0 and "--trtcheck-localize-budget" in result.stdout + result.stderr
