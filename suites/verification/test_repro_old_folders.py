"""A repro folder written before the graph format moved to ``trtcheck.lowering.graph_file`` still loads and runs.

``data/old_repro/`` was written by ``write_repro`` when the format lived in ``trtcheck.verification.repro`` (its
``graph.py``, for reading only, left out): its ``model.pt`` names the format's classes at that path, and its
``repro.py`` imports ``load_repro`` and ``register_recorded_converters`` from there. The model it holds is
``Linear(2, 2)``, a ``clone`` with a ``memory_format``, ``topk`` (``getitem`` nodes) and ``+ 1``.
"""

from __future__ import annotations

import operator
import pathlib
import runpy
import zipfile

import torch

from trtcheck.lowering.graph_file import load_graph_module
from trtcheck.verification.repro import load_repro

OLD = pathlib.Path(__file__).parent / "data" / "old_repro"
aten = torch.ops.aten


def _expected(model: torch.fx.GraphModule, x: torch.Tensor) -> torch.Tensor:
    return torch.topk(torch.nn.functional.linear(x, model.proj.weight, model.proj.bias), 1)[0] + 1


def test_the_old_file_names_the_former_path():
    """The fixture is what it says: its pickle names the reducer at the former path, not the new one."""
    with zipfile.ZipFile(OLD / "model.pt") as archive:
        pickled = archive.read(next(name for name in archive.namelist() if name.endswith("data.pkl")))
    assert b"trtcheck.verification.repro\n_rebuild_graph_module" in pickled
    assert b"trtcheck.lowering" not in pickled


def test_a_model_pt_of_the_former_path_loads_with_its_node_metadata():
    model = load_graph_module(OLD / "model.pt")
    (x,) = torch.load(OLD / "inputs.pt", weights_only=False)
    nodes = {node.name: node for node in model.graph.nodes}
    assert nodes["clone"].target is aten.clone.default and nodes["clone"].kwargs["memory_format"] is torch.contiguous_format
    assert nodes["getitem"].target is operator.getitem and nodes["getitem"].args[0] is nodes["topk"]
    assert nodes["linear"].meta["nn_module_stack"] and "stack_trace" in nodes["linear"].meta
    value = nodes["add"].meta["val"]
    assert isinstance(value, torch._subclasses.fake_tensor.FakeTensor) and value.shape == (3, 1)
    torch.testing.assert_close(model(x), _expected(model, x))


def test_load_repro_reads_an_old_folder():
    case = load_repro(OLD)
    (x,) = case.example_inputs
    assert case.failure.startswith("planted: a tiny model") and case.input_sets is None and case.options == {}
    torch.testing.assert_close(case.model(x), _expected(case.model, x))


def test_an_old_folders_repro_py_still_runs(capsys):
    """Its imports from ``trtcheck.verification.repro`` resolve, and ``--dry-run`` loads and describes the folder."""
    script = runpy.run_path(str(OLD / "repro.py"), run_name="old_repro")
    assert script["main"](["--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "recorded failure: planted: a tiny model" in out and "input 0: Tensor(shape=(3, 2)" in out
    assert "dry run: trtcheck.verify not called" in out
