"""``--trtcheck-precision tf32``: each preset at ``Settings(precision="fp32", tf32=True)``, ids and report groups
ending ``-tf32``, and its engines judged against eager under TF32 rounding."""

from __future__ import annotations

import dataclasses
import json

from trtcheck import Settings
from trtcheck.testing.fixtures import settings_at

SETTINGS_ONLY = """
def test_settings(trtcheck_settings, trtcheck_precision):
    tf32 = trtcheck_precision == "tf32"
    assert trtcheck_settings.precision == ("fp32" if tf32 else trtcheck_precision)
    assert trtcheck_settings.tf32 is tf32
    assert trtcheck_settings.min_block_size == 1  # the preset's own settings stay
"""


def test_tf32_is_fp32_with_tf32_on_every_preset_and_its_ids_end_in_tf32(pytester):
    pytester.makepyfile(test_down=SETTINGS_ONLY)
    options = ("--trtcheck-settings", "min_block_size_1,torch_relu", "--trtcheck-precision", "fp32,fp16,tf32")
    result = pytester.runpytest("--trtcheck", *options, "-v")
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(["*test_settings?min_block_size_1-tf32? PASSED*", "*test_settings?torch_relu-tf32? PASSED*"])
    result.stdout.fnmatch_lines(["trtcheck: precisions: fp32, fp16, tf32*"])


def test_settings_at_tf32_keeps_the_preset_and_drops_reduced_precision_options():
    preset = Settings(min_block_size=3, torch_executed_ops=["aten::relu"])
    tf32 = settings_at(preset, "tf32", ["native_layer_norm"])  # a zoo entry's fp32_nodes mean nothing at fp32
    assert tf32 == dataclasses.replace(preset, tf32=True)
    tf32.validate()
    assert settings_at(preset, "fp16", ["native_layer_norm"]) == dataclasses.replace(
        preset, precision="fp16", fp32_nodes=["native_layer_norm"])
    assert settings_at(preset, "fp32") is preset and preset.tf32 is False


LARGE_K = """
import torch


def test_large_k(trtcheck_verify):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64)).eval()
    report = trtcheck_verify(model, (torch.randn(8, 1024),), num_inputs=2, localize_budget=0)
    outputs = [o for c in report.comparisons for o in c.outputs]
    assert all(o.eager_precision == "tf32" and o.max_abs > 10 * o.atol for o in outputs)
"""


def test_a_tf32_run_verifies_a_model_fp32_tolerances_would_fail(pytester):
    """TF32 rounding over K=1024 misses fp32's tolerances 30-fold; judged against eager under TF32 it passes."""
    pytester.makepyfile(test_down=LARGE_K)
    result = pytester.runpytest("--trtcheck", "--trtcheck-backend", "onnxruntime", "--trtcheck-settings", "min_block_size_1",
                                "--trtcheck-precision", "tf32", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_large_k?min_block_size_1-tf32? PASSED*"])


LARGE_K_BENCHMARK = """
import torch


def test_large_k_speed(trtcheck_benchmark):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64)).eval()
    trtcheck_benchmark(model, (torch.randn(8, 1024),), name="large_k")
"""


def test_tf32_benchmarks_are_their_own_group_and_judged_at_tf32(pytester, monkeypatch):
    """The benchmark's equivalence check (``timing.compile_once``) judges at tf32 as verify does, and its group and
    recorded precision say tf32 (``benchmarking.preset_label``): the report keeps it apart from fp32's. (Run in this
    process, the inner pytest would see this xdist worker's PYTEST_XDIST_WORKER, and pytest-benchmark, reading it,
    would time nothing and write no JSON: the default tier runs under -n 2.)"""
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    pytester.makepyfile(test_speed=LARGE_K_BENCHMARK)
    result = pytester.runpytest("-p", "no:xdist", "--trtcheck", "--trtcheck-backend", "onnxruntime", "--trtcheck-settings",
                                "min_block_size_1", "--trtcheck-precision", "tf32", "--benchmark-json=out.json",
                                "--benchmark-min-rounds=1")
    result.assert_outcomes(passed=2)
    benchmarks = json.loads((pytester.path / "out.json").read_text())["benchmarks"]
    assert sorted(b["group"] for b in benchmarks) == ["large_k-min_block_size_1-tf32"] * 2
    assert {b["extra_info"]["precision"] for b in benchmarks} == {"tf32"}
