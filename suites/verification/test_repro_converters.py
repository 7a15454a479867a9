"""A repro carries the converters that were not trtcheck's own, or says which it cannot carry and why."""

from __future__ import annotations

import json

import torch

from trtcheck import conversion as converters
from trtcheck.lowering.export import lower
from trtcheck.verification.recorded_converters import register_recorded_converters, user_converters


def _relu_as_negation(ctx, node):  # a module-level converter: importable by the repro
    return ctx.add("Neg", [ctx.name(node.args[0])])


def _graph():
    return lower(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval(), (torch.randn(2, 4),))


def test_only_converters_not_trtchecks_own_are_recorded_and_registered_again(tmp_path):
    graph = _graph()
    assert user_converters(graph) == []  # every op here has a built-in converter
    with converters.Snapshot():
        converters.register(torch.ops.aten.relu.default, override=True)(_relu_as_negation)
        records = user_converters(graph)
    assert records == [{"target": "aten.relu.default", "validator": None,
                        "converter": {"module": __name__, "qualname": "_relu_as_negation", "file": __file__}}]
    (tmp_path / "converters.json").write_text(json.dumps(records))
    with converters.Snapshot():
        lines = register_recorded_converters(tmp_path / "converters.json")
        assert converters.get(torch.ops.aten.relu.default).fn is _relu_as_negation
    assert lines == [f"registered {__name__}._relu_as_negation for aten.relu.default (not one of trtcheck's own converters)"]


def test_a_converter_defined_inside_a_function_is_named_as_not_carried(tmp_path):
    def local_relu(ctx, node):
        return ctx.add("Relu", [ctx.name(node.args[0])])

    with converters.Snapshot():
        converters.register(torch.ops.aten.relu.default, override=True)(local_relu)
        (tmp_path / "converters.json").write_text(json.dumps(user_converters(_graph())))
    with converters.Snapshot():
        (line,) = register_recorded_converters(tmp_path / "converters.json")
        assert converters.get(torch.ops.aten.relu.default).builtin  # the built-in one stays
    assert line.startswith("NOT registered: the failure used ") and "local_relu" in line and "defined inside a function" in line


def test_an_override_keeping_the_built_in_validator_is_registered_again_in_a_fresh_process(tmp_path):
    """Issue 43, item 10: the README's ``register(op, override=True, validator=saved.validator)`` recorded the
    validator as trtcheck's ``converter.<locals>.validator``, which cannot be imported, so the repro said "define it
    at module level" and passed. It is now recorded as the built-in validator of its op, and re-attached at load."""
    import subprocess
    import sys

    relu = torch.ops.aten.relu.default
    saved = converters.get(relu)
    with converters.Snapshot():
        converters.register(relu, override=True, validator=saved.validator)(_relu_as_negation)
        records = user_converters(_graph())
    (record,) = records
    assert record["validator"]["builtin_of"] == "aten.relu.default"
    (tmp_path / "converters.json").write_text(json.dumps(records))
    with converters.Snapshot():
        lines = register_recorded_converters(tmp_path / "converters.json")
        again = converters.get(relu)
        assert again.fn is _relu_as_negation and again.validator is saved.validator and not again.builtin
    assert lines == [f"registered {__name__}._relu_as_negation for aten.relu.default (not one of trtcheck's own converters)"]
    script = (
        "import sys, torch\n"
        "from trtcheck import conversion\n"
        "from trtcheck.verification.recorded_converters import register_recorded_converters\n"
        "builtin = conversion.get(torch.ops.aten.relu.default)\n"
        "print(register_recorded_converters(sys.argv[1]))\n"
        "now = conversion.get(torch.ops.aten.relu.default)\n"
        "print(now.fn.__name__, now.validator is builtin.validator, now.builtin)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "converters.json")], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "_relu_as_negation True False", done.stdout
