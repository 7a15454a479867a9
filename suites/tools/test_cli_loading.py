"""``load_model`` and ``trtcheck partition MODEL``: every form of MODEL, and every way one can be wrong.

Each wrong target must give exit 2 and one message naming the problem and the fix, never a traceback.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trtcheck.tools.cli import main
from trtcheck.tools.loading import load_model

# --- the forms of MODEL --------------------------------------------------------------------------------


def test_a_zoo_name_loads_the_zoo_entry():
    target = load_model("seed_lgamma")
    assert target.name == "seed_lgamma" and isinstance(target.model_or_program, torch.nn.Module)
    assert isinstance(target.example_inputs, tuple) and target.example_inputs


def test_a_zoo_entry_with_its_own_input_sets_brings_them():
    assert load_model("spd_solve").input_sets  # random inputs would make eager's cholesky fail


def test_a_file_factory_loads(factories):
    target = load_model(f"{factories}:build")
    assert type(target.model_or_program).__name__ == "Net" and target.example_inputs[0].shape == (2, 8)
    assert target.name == f"{factories}:build"


def test_lists_are_accepted_for_the_pair_and_the_inputs(factories):
    target = load_model(f"{factories}:as_list")
    assert isinstance(target.example_inputs, tuple) and len(target.example_inputs) == 1


def test_a_module_factory_loads(factories, monkeypatch):
    monkeypatch.syspath_prepend(str(factories.parent))
    monkeypatch.delitem(sys.modules, "mine", raising=False)
    target = load_model("mine:build")
    assert type(target.model_or_program).__name__ == "Net"


def test_a_relative_file_path_is_read_from_the_working_directory(factories, monkeypatch):
    monkeypatch.chdir(factories.parent)
    assert type(load_model("./mine.py:build").model_or_program).__name__ == "Net"


def test_a_pt2_file_loads_the_program_with_its_stored_example_inputs(program):
    target = load_model(str(program))
    assert target.is_program and isinstance(target.model_or_program, torch.export.ExportedProgram)
    assert target.example_inputs[0].shape == (2, 8)


def test_partition_of_each_form_prints_the_summary(factories, program, capsys):
    for spec in ("seed_lgamma", f"{factories}:build", str(program)):
        assert main(["partition", spec, "--min-block-size", "1"]) == 0, spec
        out = capsys.readouterr().out
        assert "op coverage:" in out and "engines:" in out and "Torch nodes by reason" in out, out


def test_a_pt2_program_partitions_like_the_model_it_was_exported_from(factories, program, capsys):
    main(["partition", f"{factories}:build", "--min-block-size", "1", "--explain"])
    from_model = capsys.readouterr().out
    main(["partition", str(program), "--min-block-size", "1", "--explain"])
    assert capsys.readouterr().out == from_model
    assert "lgamma (aten::lgamma): Torch - no_converter: no converter for aten.lgamma.default" in from_model


# --- wrong targets: exit 2 and a message with the fix ---------------------------------------------------


def _error(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("trtcheck: error: ") and "Traceback" not in captured.err
    return captured.err


@pytest.mark.parametrize(
    ("factory", "expected"),
    [
        ("buidl", r"has no attribute 'buidl'; did you mean 'build'\?"),
        ("broken", r"the factory raised ValueError: cannot build today \(at .*mine\.py:\d+\)"),
        ("bare", r"the factory returned a Net, not \(model, example_inputs\)"),
        ("three", r"the factory returned 3 values, not \(model, example_inputs\)"),
        ("tensor_inputs", r"example_inputs is a Tensor, not a tuple of inputs: return model, \(x,\)"),
        ("not_a_model", r"the factory's model is a str, not a torch.nn.Module"),
        ("model", r"is a Net, not a factory: point at a function"),
    ],
)
def test_a_wrong_factory_is_named_with_the_fix(factories, capsys, factory, expected):
    import re

    err = _error(["partition", f"{factories}:{factory}"], capsys)
    assert re.search(expected, err), err


def test_a_missing_file_is_named(tmp_path, capsys):
    err = _error(["partition", f"{tmp_path}/nope.py:build"], capsys)
    assert "nope.py: no such file" in err


def test_a_file_without_its_factory_says_how_to_name_it(factories, capsys):
    assert "is a file, but the factory is missing" in _error(["partition", str(factories)], capsys)


def test_a_file_that_fails_to_import_points_at_the_line(tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\n\ndef build(:\n    pass\n")
    err = _error(["partition", f"{bad}:build"], capsys)
    assert "importing it raised SyntaxError" in err and f"{bad}:3" in err


def test_a_missing_module_is_named(capsys):
    assert "no module named 'no_such_package_xyz'" in _error(["partition", "no_such_package_xyz.models:build"], capsys)


def test_an_unknown_zoo_name_suggests_close_ones(capsys):
    err = _error(["partition", "resnet81"], capsys)
    assert "no zoo model named 'resnet81' (did you mean 'resnet18'" in err and "path/to/file.py:factory" in err


def test_a_missing_pt2_file_is_named(tmp_path, capsys):
    assert "nope.pt2: no such file" in _error(["partition", str(tmp_path / "nope.pt2")], capsys)


def test_a_pt2_file_that_is_no_program_is_named(tmp_path, capsys):
    fake = tmp_path / "fake.pt2"
    fake.write_bytes(b"not a zip archive")
    assert "fake.pt2: not a program saved by torch.export.save" in _error(["partition", str(fake)], capsys)


def test_a_program_without_example_inputs_is_named(tmp_path, monkeypatch, capsys):
    class Program:  # what torch.export.load returns for a program saved without example inputs
        example_inputs = None

    (tmp_path / "old.pt2").write_bytes(b"")
    monkeypatch.setattr(torch.export, "load", lambda path: Program())
    err = _error(["partition", str(tmp_path / "old.pt2")], capsys)
    assert "the program stores no example inputs" in err and "file.py:factory" in err


def test_bad_settings_are_a_usage_error_before_the_model_is_built(factories, capsys):
    err = _error(["partition", f"{factories}:broken", "--torch-executed-ops", "aten::rleu"], capsys)
    assert "aten::rleu" in err and "factory raised" not in err


def test_the_installed_command_exits_2_on_a_bad_target_and_on_bad_usage(tmp_path):
    script = Path(sys.executable).with_name("trtcheck")
    done = subprocess.run([script, "partition", "resnet81"], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2 and "did you mean 'resnet18'" in done.stderr and "Traceback" not in done.stderr
    done = subprocess.run([script, "verify"], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2 and "MODEL" in done.stderr
