"""``trtcheck verify MODEL``: exit 0 on a pass, 1 on a failed check (as ``polygraphy run``), 2 on a usage error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trtcheck.tools.cli import main

ORT = ["--backend", "onnxruntime"]


@pytest.mark.slow
def test_a_passing_factory_exits_0_with_the_report(factories, capsys):
    assert main(["verify", f"{factories}:build", "--min-block-size", "1", *ORT]) == 0
    out = capsys.readouterr().out
    assert f"trtcheck verification of {factories}:build: PASSED" in out and "backend=onnxruntime" in out


def test_a_pt2_program_verifies_against_itself(program, capsys):
    assert main(["verify", str(program), "--min-block-size", "1", *ORT]) == 0
    assert "net.pt2: PASSED" in capsys.readouterr().out


@pytest.mark.slow
def test_a_zoo_entry_uses_its_own_input_sets(capsys):
    assert main(["verify", "spd_solve", "--min-block-size", "1", *ORT]) == 0  # random inputs: cholesky fails
    assert "spd_solve: PASSED" in capsys.readouterr().out


def test_a_wrong_converter_fails_with_exit_1_and_the_differences(tmp_path, wrong_relu, capsys):
    path = wrong_relu
    report_dir = tmp_path / "report"
    argv = ["verify", f"{path}:build", "--min-block-size", "1", *ORT, "--report-dir", str(report_dir)]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "wrong.py:build: FAILED" in out and "outputs differ from eager" in out and "op coverage:" in out
    assert "repro: python" in out and list(report_dir.rglob("repro.py"))


@pytest.mark.slow
def test_a_nondeterministic_model_fails_with_exit_1_naming_its_random_ops(factories, capsys):
    assert main(["verify", f"{factories}:noisy", *ORT]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "nondeterministic" in out and "native_dropout" in out


@pytest.mark.slow
def test_a_fallback_fails_unless_allowed(broken_relu, capsys):
    path = broken_relu
    argv = ["verify", f"{path}:build", "--min-block-size", "1", *ORT]
    assert main(argv) == 1
    assert "[fallback]" in capsys.readouterr().out
    assert main([*argv, "--allow-fallbacks"]) == 0
    assert "broken on purpose" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--backend", "tensorrtx"], "tensorrtx"),
        (["--min-block-size", "0"], "min_block_size"),
        (["--torch-executed-modules", "layer9"], "layer9"),
    ],
)
def test_usage_errors_exit_2(factories, capsys, options, expected):
    assert main(["verify", f"{factories}:build", *options]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trtcheck: error: ") and expected in err and "Traceback" not in err


def test_a_missing_target_file_exits_2(tmp_path, capsys):
    assert main(["verify", f"{tmp_path}/nope.py:build", *ORT]) == 2
    assert "nope.py: no such file" in capsys.readouterr().err


def _traceback_lines(err: str) -> list[str]:
    """The lines of ``err`` that come from a Python traceback or torch's logger (``E1204 12:00:00 ... file.py:12]``)."""
    markers = ("Traceback", 'File "', "fake_tensor.py", "Error:", "^^^")
    return [line for line in err.splitlines() if any(m in line for m in markers) and not line.startswith("trtcheck: error: ")]


def test_examples_that_do_not_fit_print_only_trtchecks_message(factories, capfd):
    """Issue 43, defect 14: torch logged ~20 lines of a fake-tensor meta failure's traceback to stderr while
    exporting, before trtcheck's one-line error. They are kept on the error and printed with ``--verbose`` only."""
    assert main(["verify", f"{factories}:unfit", *ORT]) == 2
    err = capfd.readouterr().err
    assert err.startswith("trtcheck: error: the example inputs do not fit Net"), err
    assert _traceback_lines(err) == [], err
    assert "--verbose" in err  # says where torch's own log of the failure is
    assert main(["verify", f"{factories}:unfit", *ORT, "--verbose"]) == 2
    err = capfd.readouterr().err
    assert "failed while attempting to run meta for aten" in err and "trtcheck: error: the example inputs do not fit Net" in err


@pytest.mark.slow
def test_the_command_prints_no_traceback_for_examples_that_do_not_fit(factories):
    """The same, as a user runs it: a fresh process, whose torch logging is configured as torch configures it."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [sys.executable, "-m", "trtcheck", "verify", f"{factories}:unfit", *ORT],
        capture_output=True, text=True, timeout=300, check=False, env=env,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("trtcheck: error: the example inputs do not fit Net"), done.stderr
    assert _traceback_lines(done.stderr) == [], done.stderr
