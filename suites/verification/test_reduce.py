"""Reduction: delta debugging to the smallest failing set of nodes, every independent culprit, standalone repros.

Planted converter bugs (``planted``) in zoo models must reduce to at most 3 nodes that hold the planted node, fail
in their repro while the bug is there, and pass once the built-in converter is back; two independent bugs must
give two culprits.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import trtcheck
from suites.verification.planted import off_above, off_by, planted, run_repro
from trtcheck.benchmarking import flush_denormals
from trtcheck.lowering.graph import flat_inputs
from trtcheck.verification.reduce import ddmin, reduce_compiled, reduce_model
from trtcheck_zoo import registry as zoo

aten = torch.ops.aten
ORT = "onnxruntime"


@pytest.fixture(autouse=True)
def _no_denormals():
    with flush_denormals():  # restores the state it found (set_flush_denormal returns support, not the state)
        yield


def test_ddmin_finds_a_one_minimal_failing_set_of_scattered_items():
    tests = []

    def fails(items):
        tests.append(len(items))
        return {3, 17, 40} <= set(items)  # fails only with all three: a non-contiguous set

    assert ddmin(list(range(64)), fails) == [3, 17, 40]


def test_ddmin_finds_a_single_failing_item_in_logarithmically_many_tests():
    tests = []

    def fails(items):
        tests.append(len(items))
        return 570 in items

    assert ddmin(list(range(1000)), fails) == [570]
    assert len(tests) <= 2 * 10  # halving: about log2(1000) chunks, each tried with its sibling


@pytest.mark.slow
def test_two_independent_wrong_ops_reduce_to_two_repros_that_fail_until_the_converters_are_restored(tmp_path):
    model, inputs = zoo.get("resnet18").build()
    with planted(aten.add.Tensor, {"add_3"}, off_by(1.001)), planted(aten.convolution.default, {"convolution_10"}, off_by(1.001)):
        compiled = trtcheck.compile(model, inputs, backend=ORT)
        reduction = reduce_compiled(compiled, flat_inputs(compiled.partition.graph_module, inputs, {}), ORT, out_dir=tmp_path)
        assert len(reduction.culprits) == 2, str(reduction)
        assert all(len(culprit.nodes) <= 3 for culprit in reduction.culprits)
        assert [culprit.nodes for culprit in reduction.culprits] == [["add_3"], ["convolution_10"]]
        assert all(run_repro(culprit.repro) == 1 for culprit in reduction.culprits)  # FAIL, exit 1, with the bug
    assert all(run_repro(culprit.repro) == 0 for culprit in reduction.culprits)  # PASS once restored
    folder = reduction.culprits[0].repro
    config = json.loads((folder / "settings.json").read_text())
    assert config["backend"] == ORT and config["nodes"] == ["add_3"] and "rtol" in config and "atol" in config
    files = ["converters.json", "graph.py", "inputs.pt", "repro.py", "settings.json", "subgraph.pt"]
    assert sorted(path.name for path in folder.iterdir()) == files
    done = subprocess.run([sys.executable, str(folder / "repro.py")], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip().endswith("PASS"), done.stdout + done.stderr  # no model code needed


@pytest.mark.slow
def test_an_op_wrong_on_some_inputs_in_a_transformer_reduces_to_at_most_three_nodes(tmp_path):
    model, inputs = zoo.get("padded_transformer").build()
    with planted(aten.relu.default, {"relu_1"}, off_above(0.5, 1.01)):
        reduction = reduce_model(model, inputs, backend=ORT, out_dir=tmp_path)
        assert len(reduction.culprits) == 1 and "relu_1" in reduction.culprits[0].nodes, str(reduction)
        assert len(reduction.culprits[0].nodes) <= 3
        assert run_repro(reduction.culprits[0].repro) == 1
    assert run_repro(reduction.culprits[0].repro) == 0


def test_a_model_without_a_mismatch_has_nothing_to_reduce():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    reduction = reduce_model(model, (torch.randn(2, 8),), trtcheck.Settings(min_block_size=1), backend=ORT)
    assert not reduction.culprits and "nothing to reduce" in str(reduction)


_WRONG_RELU_MODULE = '''
import torch
from trtcheck import conversion as converters


def relu_converter(ctx, node):  # the user's own relu converter, module-level: a repro can import it by file
    return ctx.add("{op}", [ctx.name(node.args[0])])
'''


def _fresh_repro(folder) -> subprocess.CompletedProcess:
    """``python repro.py`` in a new process, trtcheck importable from this checkout (PYTHONPATH passed through)."""
    import os
    import pathlib

    root = str(pathlib.Path(trtcheck.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, str(folder / "repro.py")], capture_output=True, text=True, cwd=folder.parent,
                          env=env, timeout=300, check=False)


@pytest.mark.slow  # two subprocess runs
def test_a_culprit_folder_carries_the_user_s_converters_and_fails_in_a_fresh_process(tmp_path):
    """Issue 43, item 8: the culprit folders ``reduce`` wrote did not carry the user's converters, so each repro.py
    printed PASS in a fresh process for the failure it was written for. Each folder now records them
    (``converters.json``), and its repro.py registers them: FAIL while the user's converter is wrong, PASS once the
    user's file is fixed."""
    import importlib.util

    from trtcheck import conversion as converters

    source = tmp_path / "my_converters.py"
    source.write_text(_WRONG_RELU_MODULE.format(op="Neg"))  # wrong on purpose: -x for relu(x)
    spec = importlib.util.spec_from_file_location("my_converters_for_reduce", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).eval()
    with converters.Snapshot():
        converters.register(aten.relu.default, override=True)(module.relu_converter)
        reduction = reduce_model(model, (torch.randn(2, 8),), trtcheck.Settings(min_block_size=1), backend=ORT,
                                 out_dir=tmp_path / "reduced")
    assert [culprit.nodes for culprit in reduction.culprits] == [["relu"]], str(reduction)
    folder = reduction.culprits[0].repro
    (record,) = json.loads((folder / "converters.json").read_text())
    assert record["target"] == "aten.relu.default" and record["converter"]["qualname"] == "relu_converter"
    done = _fresh_repro(folder)
    assert done.returncode == 1 and done.stdout.strip().endswith("FAIL"), done.stdout + done.stderr[-3000:]
    assert "converter: registered my_converters_for_reduce.relu_converter for aten.relu.default" in done.stdout
    source.write_text(_WRONG_RELU_MODULE.format(op="Relu"))  # the user fixes the converter
    done = _fresh_repro(folder)
    assert done.returncode == 0 and done.stdout.strip().endswith("PASS"), done.stdout + done.stderr[-3000:]


class _SoftmaxThenSub(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = torch.softmax(self.fc(x), dim=-1)
        return h - h.mean(dim=0, keepdim=True)


def test_a_culprit_of_a_dynamic_shape_model_reproduces_from_its_folder(tmp_path):
    """Issue 43, item 9: the reduced repros of a dynamic-shape model raised a raw ConversionError ("segment value
    ... is not a tensor (meta['val'] = None)"): the saved subgraph had lost its nodes' symbolic metadata. The folder
    now restores the metadata from the recorded values at the cut (and records the Dims), so repro.py FAILs while
    the bug is there and PASSes once the converter is restored."""
    from torch.export import Dim

    torch.manual_seed(0)
    model = _SoftmaxThenSub().eval()
    with planted(aten._softmax.default, None, off_by(1.01)):
        reduction = reduce_model(model, (torch.randn(4, 8),), trtcheck.Settings(min_block_size=1), backend=ORT,
                                 dynamic_shapes=({0: Dim("batch", min=2, max=32)},), out_dir=tmp_path)
        assert reduction.culprits and "_softmax" in reduction.culprits[0].nodes, str(reduction)
        folder = reduction.culprits[0].repro
        assert run_repro(folder) == 1  # FAIL with the bug, no ConversionError
    assert run_repro(folder) == 0  # PASS once restored
    config = json.loads((folder / "settings.json").read_text())
    assert config["dims"], config  # the symbolic sizes of the cut, by input


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.tanh(self.fc(x))  # THE_TANH


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([_Block(), _Block()])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def test_each_culprit_names_its_module_path_and_the_users_line():
    """Issue 43: every culprit names the user's source; reduce's say it as localization's culprit does
    (``from layers.1 (Block), file.py:23``), so that ``trtcheck reduce`` points at the user's code."""
    import pathlib

    line = next(n for n, text in enumerate(pathlib.Path(__file__).read_text().splitlines(), 1) if text.endswith("# THE_TANH"))
    torch.manual_seed(0)
    with planted(aten.tanh.default, {"tanh_1"}, off_by(1.01)):
        reduction = reduce_model(_Net().eval(), (torch.randn(2, 8),), trtcheck.Settings(min_block_size=1), backend=ORT)
    (culprit,) = reduction.culprits
    assert culprit.nodes == ["tanh_1"], str(reduction)
    assert culprit.sources == [f"layers.1 (_Block), {__file__}:{line}"]
    assert f"tanh_1 = aten.tanh.default (from layers.1 (_Block), {__file__}:{line}): " in str(reduction), str(reduction)
