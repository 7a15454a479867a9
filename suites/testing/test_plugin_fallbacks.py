"""A PASS must mean something: fallbacks to PyTorch fail unless allowed, and a missing backend stops the run."""

from __future__ import annotations

import sys

import pytest

# relu's converter raises: the TensorRT segment holding it cannot be converted and falls back to PyTorch.
BROKEN_RELU = """
import pytest
import torch
import trtcheck.conversion as converters

def broken_relu(ctx, node):
    raise RuntimeError("relu converter is broken on purpose")

@pytest.fixture(autouse=True)
def broken():
    with converters.Snapshot():  # the registry is restored afterwards (pytester runs in this process)
        converters.register(torch.ops.aten.relu.default, override=True)(broken_relu)
        yield
"""

DOWNSTREAM = """
import torch

class Small(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x * 2 + 1) - 3

def test_mine(trtcheck_verify):
    trtcheck_verify(Small().eval(), (torch.randn(2, 3),))
"""

ARGS = ("--trtcheck", "--trtcheck-settings", "min_block_size_1", "--trtcheck-backend", "onnxruntime")


@pytest.fixture
def broken_suite(pytester, tmp_path):
    pytester.makeconftest(BROKEN_RELU)
    pytester.makepyfile(test_down=DOWNSTREAM)
    return ("--trtcheck-report", str(tmp_path / "reports"))


def test_a_fallback_fails_the_test_and_names_it(pytester, broken_suite):
    result = pytester.runpytest(*ARGS, *broken_suite)
    result.assert_outcomes(failed=1)
    # The report's own fallback line (this once matched "fell back" in verify's docstring, in a traceback now hidden).
    result.stdout.fnmatch_lines(["*fallback: segment @0 (4 nodes) runs in PyTorch: ConversionError*relu converter is broken on purpose*"])


def test_allow_fallbacks_flag_lets_it_pass(pytester, broken_suite):
    result = pytester.runpytest(*ARGS, *broken_suite, "--trtcheck-allow-fallbacks")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["trtcheck: fallbacks to PyTorch allowed (--trtcheck-allow-fallbacks)"])


def test_allow_fallbacks_ini_key(pytester, broken_suite):
    pytester.makeini("[pytest]\ntrtcheck_allow_fallbacks = true\n")
    result = pytester.runpytest(*ARGS, *broken_suite)
    result.assert_outcomes(passed=1)


def test_allow_fallbacks_is_in_the_config(pytester):
    pytester.makepyfile(test_cfg="""
def test_cfg(trtcheck_config):
    assert trtcheck_config.allow_fallbacks is False
""")
    pytester.runpytest("--trtcheck").assert_outcomes(passed=1)


def test_an_unavailable_explicit_backend_is_a_usage_error_naming_what_is_missing(pytester, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # pytester runs in this process
    pytester.makepyfile(test_down=DOWNSTREAM)
    result = pytester.runpytest("--trtcheck", "--trtcheck-backend", "tensorrt")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "*--trtcheck-backend: engine backend 'tensorrt' was requested but cannot run on this machine: "
        "missing the `tensorrt` package*pip install 'trtcheck?tensorrt?'*backend='onnxruntime'*"
    ])
    assert "passed" not in result.stdout.str()


def test_an_unknown_backend_is_a_usage_error_with_a_suggestion(pytester):
    pytester.makepyfile(test_down=DOWNSTREAM)
    result = pytester.runpytest("--trtcheck", "--trtcheck-backend", "onnxrutime")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown engine backend 'onnxrutime' (did you mean 'onnxruntime'?)*"])


def test_a_missing_backend_in_the_ini_file_does_not_break_runs_without_the_flag(pytester, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    pytester.makeini("[pytest]\ntrtcheck_backend = tensorrt\n")
    pytester.makepyfile(test_down=DOWNSTREAM)
    result = pytester.runpytest()
    result.assert_outcomes(skipped=3)  # one per default preset that applies
