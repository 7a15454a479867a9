"""``trtcheck/tools/gpu_check.py`` where it can run here: without CUDA it says so and runs nothing; ``--device cpu``
runs its whole pipeline (compile, compare, time, pytest-benchmark JSON, report) on ONNX Runtime's CPU provider,
which checks the script itself, not any GPU. Its GPU path runs on a CUDA machine only (the nightly workflow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trtcheck import report

CHECK = ["-m", "trtcheck.tools.gpu_check"]


def run_check(*args: str, out: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    return subprocess.run(
        [sys.executable, *CHECK, "--out", str(out), *args], capture_output=True, text=True, timeout=300, env=env, check=False
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the check would run the whole zoo")
def test_without_cuda_it_reports_what_it_found_and_exits_0(tmp_path):
    result = run_check(out=tmp_path / "out")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1].startswith("gpu check: no CUDA device here (torch.cuda.is_available() is False; torch ")
    assert lines[-1].endswith("): nothing run.")
    for what in ("GPU: none", "CUDA: not available", f"torch {torch.__version__}", "TensorRT: ", "ONNX Runtime ", "trtcheck "):
        assert any(line.startswith(f"gpu check: {what}") for line in lines), (what, lines)
    assert not (tmp_path / "out").exists()  # nothing run, nothing written


@pytest.mark.slow
def test_the_cpu_smoke_run_writes_benchmark_json_and_the_report(tmp_path):
    out = tmp_path / "out"
    result = run_check("--device", "cpu", "--models", "seed_lgamma,counter", "--modes", "fp32", "--rounds", "2", out=out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "gpu check: 2 passed, 0 failed, 0 skipped, 0 not run" in result.stdout
    data = json.loads((out / "benchmark.json").read_text())
    assert {"machine_info", "commit_info", "benchmarks", "datetime", "version"} <= set(data)
    assert data["machine_info"]["trtcheck_environment"]["torch"] == torch.__version__
    run = report.load_run(out / "benchmark.json")  # what `trtcheck report` reads
    assert [g.key for g in run.groups] == [("seed_lgamma", "onnxruntime-fp32"), ("counter", "onnxruntime-fp32")]
    assert all(g.eager_median and g.stitched_median and g.equivalence_passed for g in run.groups)
    assert all(b["stats"]["rounds"] == 2 and b["extra_info"]["precision"] == "fp32" for b in data["benchmarks"])
    for name in ("report.md", "report.html", "environment.json", "summary.txt"):
        assert (out / name).is_file(), name


@pytest.mark.slow
def test_what_the_budget_does_not_reach_is_listed_not_dropped(tmp_path):
    out = tmp_path / "out"
    result = run_check("--device", "cpu", "--models", "seed_lgamma,counter", "--modes", "fp32", "--budget", "0.001", out=out)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = (out / "summary.txt").read_text()
    assert summary.count("not run (time budget)") == 2
    assert "0 passed, 0 failed, 0 skipped, 2 not run (time budget 0 s)" in summary
    assert json.loads((out / "benchmark.json").read_text())["benchmarks"] == []


def test_the_default_modes_run_fp16_and_tf32_through_the_strongly_typed_path():
    """Issue 40: TensorRT 11 computes reduced precision only from the graph; the nightly run checks it (mixed-fp16: a
    float32 model's mixed-precision graph) and TF32 (Torch-TensorRT's default for float32) besides fp32 and fp16."""
    from trtcheck.tools import gpu_check

    args = gpu_check.parse_args([])
    assert args.modes.split(",") == ["fp32", "fp16", "mixed-fp16", "tf32"]
    assert gpu_check.MODES["mixed-fp16"] == ("float32", "fp16", False) and gpu_check.MODES["tf32"] == ("float32", "fp32", True)


@pytest.mark.slow
def test_the_cpu_smoke_run_checks_mixed_fp16_and_tf32(tmp_path):
    out = tmp_path / "out"
    result = run_check("--device", "cpu", "--models", "seed_lgamma", "--modes", "mixed-fp16,tf32", "--rounds", "2", out=out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "gpu check: 2 passed, 0 failed, 0 skipped, 0 not run" in result.stdout
    infos = [b["extra_info"] for b in json.loads((out / "benchmark.json").read_text())["benchmarks"]]
    assert {(i["precision"], i["tf32"]) for i in infos} == {("fp16", False), ("fp32", True)}


@pytest.mark.slow
def test_the_cpu_smoke_run_builds_the_quantized_engines_and_judges_them_by_the_quantized_rule(tmp_path):
    pytest.importorskip("modelopt.torch.quantization", reason="needs nvidia-modelopt: pip install -e '.[quant]'")
    out = tmp_path / "out"
    result = run_check("--device", "cpu", "--models", "quantized_hf_llama_*", "--modes", "fp32,tf32", "--rounds", "2",
                       "--min-block-size", "1", out=out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "gpu check: 2 passed, 0 failed, 2 skipped, 0 not run" in result.stdout, result.stdout
    assert "fp32 mode only" in (out / "summary.txt").read_text()
    run = report.load_run(out / "benchmark.json")
    assert {g.key for g in run.groups} == {("quantized_hf_llama_fp8", "onnxruntime-fp32"), ("quantized_hf_llama_nvfp4", "onnxruntime-fp32")}
    assert all(g.equivalence_passed for g in run.groups)
    assert "quantized_hf_llama_nvfp4" in (out / "report.md").read_text()  # `trtcheck report` carries them
