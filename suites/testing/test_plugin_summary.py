"""What ``pytest --trtcheck`` tells a downstream user around the tests: the presets in use (and which apply to
zoo models only), what each passing verification compared, and, under ``-q``, the header and skip reasons."""

from __future__ import annotations

import pytest

DOWNSTREAM = """
import torch

def test_mine(trtcheck_verify):
    trtcheck_verify(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).eval(), (torch.randn(2, 4),))
"""

ORT = ("--trtcheck-backend", "onnxruntime")


def test_the_header_lists_the_presets_and_says_torch_module_is_for_zoo_models(pytester):
    pytester.makepyfile(test_down="def test_nothing():\n    pass\n")
    result = pytester.runpytest("--trtcheck", *ORT)
    result.stdout.fnmatch_lines([
        "trtcheck: presets: min_block_size_1, min_block_size_5, torch_relu, torch_module (torch_module: zoo models only, *"
    ])


def test_the_summary_says_what_each_passing_verification_compared(pytester):
    pytester.makepyfile(test_down=DOWNSTREAM)
    result = pytester.runpytest("--trtcheck", *ORT, "--trtcheck-settings", "min_block_size_1")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*= trtcheck: what passing verifications checked =*",
        "test_down.py::test_mine[[]min_block_size_1[]]",
        "  compared 4 input sets with eager: example, example again, random values x2",
        "  output out [[]2, 3[]] float32: worst max abs error *, lowest cosine 1.000000 (rtol 1.3e-06, atol 1e-05)",
        "  engine @0: 3 compute nodes on onnxruntime",
    ])


def test_quiet_runs_list_no_verification_but_say_how_to_see_them(pytester):
    """Under -q the per-verification section (1,500 lines for the matrix) gives way to one line; the five-second
    summary stays last."""
    pytester.makepyfile(test_down=DOWNSTREAM)
    result = pytester.runpytest("-q", "--trtcheck", *ORT, "--trtcheck-settings", "min_block_size_1")
    result.assert_outcomes(passed=1)
    assert "what passing verifications checked" not in result.stdout.str()
    result.stdout.no_fnmatch_line("  compared * input sets with eager: *")
    result.stdout.fnmatch_lines([
        "trtcheck: 1 passing verification: what each compared is listed without -q",
        "trtcheck: 1 verification passed, 0 failed, 0 skipped; fallbacks accepted: 0",
        "trtcheck: worst max abs error of a pass *",
    ])


@pytest.mark.slow
def test_quiet_runs_still_say_why_trtcheck_tests_were_skipped_and_what_ran(pytester):
    pytester.makepyfile(test_down=DOWNSTREAM)
    result = pytester.runpytest("-q")
    result.assert_outcomes(skipped=3)
    result.stdout.fnmatch_lines(["trtcheck: 3 skipped: trtcheck verification matrix: run with --trtcheck"])
    result = pytester.runpytest("-q", "--trtcheck", *ORT, "--trtcheck-settings", "min_block_size_1")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["trtcheck: engine backend: onnxruntime (requested explicitly)", "trtcheck: presets: min_block_size_1"])


@pytest.mark.slow
def test_a_run_ends_with_a_five_second_summary(pytester):
    """Issue 25: the matrix's last lines say how many verifications passed, failed and were skipped, the fallbacks,
    the worst error of a pass and the slowest test, whatever scrolled by above."""
    pytester.makepyfile(test_down=DOWNSTREAM + """

def test_broken(trtcheck_verify):
    trtcheck_verify(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).eval(), (torch.randn(2, 4),), atol=-1)
""")
    result = pytester.runpytest("-q", "--trtcheck", *ORT, "--trtcheck-settings", "min_block_size_1,torch_relu")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines([
        "trtcheck: 2 verifications passed, 2 failed, 0 skipped; fallbacks accepted: 0",
        "trtcheck: worst max abs error of a pass * (test_down.py::test_mine[[]*[]]); slowest * s (test_down.py::test_mine[[]*[]])",
    ])
