"""``--trtcheck-precision``: the matrix runs each preset at each precision; benchmarks record it, the report shows it."""

from __future__ import annotations

import json

import pytest

from suites.testing.downstream import ONNXRUNTIME, run_pytest
from trtcheck.benchmarking import extra_info
from trtcheck.report.analysis import summarize
from trtcheck.report.render import COLUMNS, table_rows
from trtcheck.report.runs import load_run

SETTINGS_ONLY = """
def test_settings(trtcheck_settings, trtcheck_precision):
    assert trtcheck_settings.precision == trtcheck_precision
    assert trtcheck_settings.min_block_size == 1  # the preset's own settings stay
"""


def test_precisions_parametrize_every_preset(pytester):
    pytester.makepyfile(test_down=SETTINGS_ONLY)
    options = ("--trtcheck-settings", "min_block_size_1,torch_relu", "--trtcheck-precision", "fp32,fp16,bf16")
    result = pytester.runpytest("--trtcheck", *options, "-v")
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(["*test_settings?min_block_size_1-fp16? PASSED*", "*test_settings?torch_relu-bf16? PASSED*"])
    result.stdout.fnmatch_lines(["trtcheck: precisions: fp32, fp16, bf16*"])


def test_fp32_alone_keeps_the_ids(pytester):
    pytester.makepyfile(test_down=SETTINGS_ONLY)
    result = pytester.runpytest("--trtcheck", "--trtcheck-settings", "min_block_size_1", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_settings?min_block_size_1? PASSED*"])


def test_an_unknown_precision_is_a_usage_error(pytester):
    pytester.makepyfile(test_down=SETTINGS_ONLY)
    result = pytester.runpytest("--trtcheck", "--trtcheck-precision", "fp32,half")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--trtcheck-precision: 'half'; choose from fp32, fp16, bf16*"])


def _benchmark(variant, preset, precision=None):
    info = extra_info("m", preset, variant, "onnxruntime", None)
    if precision is None:
        del info["precision"]  # a file written before benchmarks recorded it
    else:
        info["precision"] = precision
    return {"name": f"test_{variant}", "fullname": f"t::{variant}-{precision}", "stats": {"median": 0.01}, "extra_info": info}


def test_the_report_keeps_precisions_apart_and_shows_them(tmp_path):
    assert extra_info("m", "p", "eager", "onnxruntime", None, precision="bf16")["precision"] == "bf16"
    benchmarks = [_benchmark(v, "min_block_size_1", p) for p in (None, "fp16") for v in ("eager", "stitched")]
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"datetime": "2026-12-01T00:00:00+00:00", "machine_info": {}, "commit_info": {}, "benchmarks": benchmarks}))
    run = load_run(path)
    assert [(g.preset, g.precision) for g in run.groups] == [("min_block_size_1", "fp32"), ("min_block_size_1-fp16", "fp16")]
    assert "precision" in COLUMNS


USER_BENCHMARK = '''
import torch


def test_tiny_net_speed(trtcheck_benchmark):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).eval()
    trtcheck_benchmark(model, (torch.randn(4, 16),), name="tiny_net")
'''


@pytest.mark.slow
def test_benchmarks_at_each_precision_reach_the_report(tmp_path):
    """fp16 engines pass their equivalence check (judged against eager in fp16) and are their own report group."""
    (tmp_path / "test_speed.py").write_text(USER_BENCHMARK)
    result = run_pytest(
        tmp_path, "-p", "no:xdist", *ONNXRUNTIME, "--trtcheck-settings", "min_block_size_1", "--trtcheck-precision", "fp32,fp16",
        "--benchmark-json=out.json", "--benchmark-min-rounds=1",
    )
    assert result.returncode == 0 and "4 passed" in result.stdout, result.stdout + result.stderr
    groups = sorted(b["group"] for b in json.loads((tmp_path / "out.json").read_text())["benchmarks"])
    assert groups == ["tiny_net-min_block_size_1"] * 2 + ["tiny_net-min_block_size_1-fp16"] * 2
    run = load_run(tmp_path / "out.json")
    assert [(g.preset, g.precision, g.equivalence_passed) for g in run.groups] == [
        ("min_block_size_1", "fp32", True), ("min_block_size_1-fp16", "fp16", True)]
    cells = {row.cells[0] + "/" + row.cells[1]: row.cells[COLUMNS.index("precision")] for row in table_rows(summarize([run]))}
    assert cells == {"tiny_net/min_block_size_1": "fp32", "tiny_net/min_block_size_1-fp16": "fp16"}
