"""The ``trtcheck`` command as a downstream user meets it: run from their project folder, options before MODEL.

A console script starts with its own folder on the import path, not the current one, and a list option that
took every word after it swallowed MODEL; both failed before any model was loaded.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trtcheck.tools.cli import main

NETS = '''
import torch


def build():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval(), (torch.randn(2, 4),)
'''


@pytest.mark.slow
def test_the_command_and_python_m_import_the_users_package_from_the_current_directory(tmp_path: Path):
    """``trtcheck partition mymodels.nets:build`` from the folder holding ``mymodels``, as ``python -m`` would."""
    (tmp_path / "mymodels").mkdir()
    (tmp_path / "mymodels" / "__init__.py").write_text("")
    (tmp_path / "mymodels" / "nets.py").write_text(NETS)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    script = Path(sys.executable).parent / "trtcheck"
    for command in ([str(script)], [sys.executable, "-m", "trtcheck"]):
        result = subprocess.run(
            [*command, "partition", "mymodels.nets:build", "--min-block-size", "1"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
        )
        assert result.returncode == 0, (command, result.stdout + result.stderr)
        assert "op coverage: 100.0% (3 of 3 compute nodes in TensorRT)" in result.stdout, result.stdout


@pytest.mark.parametrize("ops", [["--torch-executed-ops", "aten::relu"], ["--torch-executed-ops", "aten::relu,aten::add"],
                                 ["--torch-executed-ops", "aten::relu", "--torch-executed-ops", "aten::add"]])
def test_a_list_option_before_model_does_not_swallow_it(factories: Path, ops: list[str], capsys):
    code = main(["partition", *ops, f"{factories}:build", "--min-block-size", "1"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "aten.relu.default is in torch_executed_ops: relu" in out, out


def test_module_option_before_model_does_not_swallow_it(factories: Path, capsys):
    code = main(["partition", "--torch-executed-modules", "Linear", f"{factories}:build", "--min-block-size", "1"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "torch_executed_modules" in out, out


@pytest.mark.slow
def test_an_unwritable_report_dir_is_one_warning_line_naming_the_commands_option(tmp_path: Path, wrong_relu, capsys):
    """Not pytest's --trtcheck-report, and not a Python warning with its source line."""
    (tmp_path / "a_file").write_text("")
    code = main(["verify", f"{wrong_relu}:build", "--min-block-size", "1", "--backend", "onnxruntime",
                 "--report-dir", str(tmp_path / "a_file" / "reports")])
    captured = capsys.readouterr()
    assert code == 1 and "outputs differ from eager" in captured.out
    warning_lines = [line for line in captured.err.splitlines() if "repro" in line]
    assert len(warning_lines) == 1, captured.err
    assert warning_lines[0].startswith("trtcheck: warning: could not write the repro to ") and "--report-dir" in warning_lines[0]
    assert "--trtcheck-report" not in captured.err and "warnings.warn" not in captured.err and "Warning:" not in captured.err


def test_compare_prints_the_whole_graph_name_and_each_note_once(factories: Path, capsys):
    spec = f"{factories}:build"  # a tmp path: far longer than the table's 24-character default column
    assert main(["compare", spec, "--min-block-size", "1", "--partitioners", "optimal,torch_tensorrt"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[1:]] == [spec, spec], lines
    assert sum("torch_tensorrt" in line and "skipped" in line for line in lines) == 1, lines


def test_a_passing_verify_says_what_it_checked_and_that_it_is_still_working(factories: Path, monkeypatch, capsys):
    import trtcheck.tools.cli as cli

    monkeypatch.setattr(cli, "PROGRESS_EVERY_S", 0.2)  # a large model's minutes, in a small model's seconds
    assert main(["verify", f"{factories}:build", "--min-block-size", "1", "--backend", "onnxruntime"]) == 0
    captured = capsys.readouterr()
    assert "compared 4 input sets with eager: example, example again, random values x2" in captured.out
    assert "output out [2, 8] float32: worst max abs error " in captured.out and "lowest cosine " in captured.out
    assert "engine @0: 4 compute nodes on onnxruntime" in captured.out and "engine @2: 1 compute node on onnxruntime" in captured.out
    assert f"trtcheck: verifying {factories}:build: still working (" in captured.err and "still working" not in captured.out
