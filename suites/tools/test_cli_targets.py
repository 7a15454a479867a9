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
from trtcheck.tools.targets import load_model

# --- the forms of MODEL --------------------------------------------------------------------------------


def assert_same_inputs(got, expected) -> None:
    """``got`` holds the factory's tensors: a tuple of the same length, each equal in shape, dtype and values."""
    assert isinstance(got, tuple) and len(got) == len(expected)
    for value, reference in zip(got, expected):
        assert isinstance(value, torch.Tensor) and value.dtype == reference.dtype
        torch.testing.assert_close(value, reference, rtol=0, atol=0)


def defining_module(target):
    """The module the loaded model's class was defined in (the user's file, imported under a unique name)."""
    return sys.modules[type(target.model_or_program).__module__]


def assert_same_weights(model: torch.nn.Module, reference: torch.nn.Module) -> None:
    state, expected = model.state_dict(), reference.state_dict()
    assert state.keys() == expected.keys() and state
    for name in state:
        torch.testing.assert_close(state[name], expected[name], rtol=0, atol=0)


def test_a_zoo_name_loads_the_zoo_entry():
    import trtcheck_zoo as models

    target = load_model("seed_lgamma")
    model, inputs = models.get("seed_lgamma").build()  # seeded: the same model and inputs again
    assert target.name == "seed_lgamma" and not target.is_program
    assert type(target.model_or_program) is type(model) and type(model).__name__ == "SeedLgamma"
    assert_same_inputs(target.example_inputs, inputs)
    assert target.example_kwargs == {} and target.input_sets is None
    assert target.eager_model() is target.model_or_program


def test_a_zoo_entry_with_its_own_input_sets_brings_them():
    import trtcheck_zoo as models

    target = load_model("spd_solve")  # random inputs would make eager's cholesky fail
    entry = models.get("spd_solve")
    expected = entry.input_sets()
    assert isinstance(target.input_sets, list) and len(target.input_sets) == len(expected) == 2
    for got, reference in zip(target.input_sets, expected):
        assert_same_inputs(tuple(got), reference)
    assert_same_inputs(target.example_inputs, entry.build()[1])
    assert not torch.equal(target.input_sets[0][0], target.example_inputs[0])  # other inputs than the examples
    for inputs in (target.example_inputs, *target.input_sets):
        assert torch.isfinite(target.model_or_program(*inputs)).all()  # each set is valid: eager's cholesky accepts it


def test_a_file_factory_loads(factories):
    target = load_model(f"{factories}:build")
    module = defining_module(target)
    assert Path(module.__file__) == factories.resolve()
    assert type(target.model_or_program) is module.Net and not target.model_or_program.training
    model, inputs = module.build()  # the factory seeds: the same weights and inputs again
    assert_same_weights(target.model_or_program, model)
    assert_same_inputs(target.example_inputs, inputs)
    assert target.example_inputs[0].shape == (2, 8)
    assert target.name == f"{factories}:build" and target.input_sets is None and target.example_kwargs == {}


def test_the_factorys_own_objects_are_loaded_not_copies(tmp_path):
    path = tmp_path / "same.py"
    path.write_text(
        "import torch\n\nMODEL = torch.nn.Linear(3, 2)\nINPUTS = (torch.arange(6.0).reshape(2, 3), torch.ones(1))\n\n"
        "def build():\n    return MODEL, INPUTS\n"
    )
    target = load_model(f"{path}:build")
    (module,) = [m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == str(path.resolve())]
    assert target.model_or_program is module.MODEL
    assert len(target.example_inputs) == 2 and all(a is b for a, b in zip(target.example_inputs, module.INPUTS))
    assert target.name == f"{path}:build"


def test_lists_are_accepted_for_the_pair_and_the_inputs(factories):
    target = load_model(f"{factories}:as_list")
    module = defining_module(target)
    assert type(target.model_or_program) is module.Net
    model, (x,) = module.as_list()
    assert_same_inputs(target.example_inputs, (x,))
    assert_same_weights(target.model_or_program, model)
    assert target.name == f"{factories}:as_list"


def test_a_module_factory_loads(factories, monkeypatch):
    monkeypatch.syspath_prepend(str(factories.parent))
    monkeypatch.delitem(sys.modules, "mine", raising=False)
    target = load_model("mine:build")
    mine = sys.modules["mine"]
    assert type(target.model_or_program) is mine.Net and target.name == "mine:build"
    model, inputs = mine.build()
    assert_same_weights(target.model_or_program, model)
    assert_same_inputs(target.example_inputs, inputs)


def test_a_relative_file_path_is_read_from_the_working_directory(factories, monkeypatch):
    monkeypatch.chdir(factories.parent)
    target = load_model("./mine.py:build")
    module = defining_module(target)
    assert Path(module.__file__) == factories.resolve() and type(target.model_or_program) is module.Net
    assert target.name == "./mine.py:build"
    assert_same_inputs(target.example_inputs, module.build()[1])


def test_a_pt2_file_loads_the_program_with_its_stored_example_inputs(factories, program):
    target = load_model(str(program))
    assert target.is_program and isinstance(target.model_or_program, torch.export.ExportedProgram)
    assert target.name == "net.pt2" and target.input_sets is None and target.example_kwargs == {}
    built = load_model(f"{factories}:build")  # what the program was exported from
    assert_same_inputs(target.example_inputs, built.example_inputs)
    assert target.example_inputs[0].shape == (2, 8)
    eager = target.eager_model()
    assert isinstance(eager, torch.nn.Module) and eager is not target.model_or_program
    torch.testing.assert_close(eager(*target.example_inputs), built.model_or_program(*built.example_inputs))


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


@pytest.mark.slow
def test_the_installed_command_exits_2_on_a_bad_target_and_on_bad_usage(tmp_path):
    script = Path(sys.executable).with_name("trtcheck")
    done = subprocess.run([script, "partition", "resnet81"], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2 and "did you mean 'resnet18'" in done.stderr and "Traceback" not in done.stderr
    done = subprocess.run([script, "verify"], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2 and "MODEL" in done.stderr
