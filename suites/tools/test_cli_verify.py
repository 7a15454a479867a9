"""``trtcheck verify MODEL``: exit 0 on a pass, 1 on a failed check (as ``polygraphy run``), 2 on a usage error."""

from __future__ import annotations

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
