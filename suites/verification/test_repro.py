"""``write_repro``: a folder that reloads the very graph that failed, and a script that runs from anywhere."""

from __future__ import annotations

import collections
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

import trtcheck
from suites.verification.planted import off_by, planted
from trtcheck.lowering.export import lower
from trtcheck.names import resolve_ops
from trtcheck.testing.random_graphs import Step, build_dynamic_graph
from trtcheck.verification.repro import (
    dynamic_shapes_from_json,
    dynamic_shapes_to_json,
    load_repro,
    options_from_json,
    options_to_json,
    safe_name,
    settings_to_json,
    write_repro,
)

aten = torch.ops.aten


class Net(torch.nn.Module):
    """Parameters, a buffer, a dict input, a tuple-returning op and a nested output: all a repro must keep."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(3, 4)
        self.register_buffer("offset", torch.linspace(-1, 1, 4))

    def forward(self, x, extra):
        y = self.proj(x) + self.offset + extra["bias"]
        values, indices = torch.max(y, dim=1)
        return torch.relu(y), {"scaled": y * 2, "max": values, "argmax": indices}


class FlatNet(Net):
    def forward(self, x, bias):
        return super().forward(x, {"bias": bias})


@pytest.fixture
def case():
    torch.manual_seed(0)
    inputs = (torch.randn(2, 3), {"bias": torch.randn(4)})
    gm = lower(Net().eval(), inputs)
    settings = trtcheck.Settings(
        min_block_size=1, torch_executed_ops=[aten.relu.default, "aten::mul"], torch_executed_modules=["proj"]
    )
    return gm, inputs, settings


def run_script(folder, *args):
    """``python repro.py`` as a user would run it: a fresh interpreter, in an unrelated directory."""
    elsewhere = folder.parent / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, str(folder / "repro.py"), *args], cwd=elsewhere, capture_output=True, text=True, timeout=300
    )


def test_repro_folder_has_every_file_and_the_failure(tmp_path, case):
    gm, inputs, settings = case
    folder = write_repro(tmp_path, gm, inputs, settings, "onnxruntime", "out[0]: 3 of 8 elements exceed\ndetails")
    assert folder == tmp_path / "repro"
    assert sorted(p.name for p in folder.iterdir()) == [
        "converters.json", "failure.txt", "graph.py", "inputs.pt", "model.pt", "repro.py", "settings.json", "verify.json"
    ]
    assert json.loads((folder / "converters.json").read_text()) == []  # only trtcheck's own converters here
    assert (folder / "failure.txt").read_text() == "out[0]: 3 of 8 elements exceed\ndetails\n"
    assert "aten.addmm.default" in (folder / "graph.py").read_text()
    assert json.loads((folder / "settings.json").read_text()) == {
        "min_block_size": 1,
        "torch_executed_ops": ["aten.relu.default", "aten::mul"],
        "torch_executed_modules": ["proj"],
        "segmentation": "dependency_aware",
        "require_full_compilation": False,
        "precision": "fp32",
        "fp32_nodes": [],
        "workspace_size": 1 << 30,
        "engine_cache": True,
        "engine_cache_dir": None,
        "tf32": False,
        "use_fp32_acc": False,
        "autocast": None,
    }


def test_settings_json_loads_back_into_equal_resolved_settings(case):
    _, _, settings = case
    again = trtcheck.Settings(**json.loads(json.dumps(settings_to_json(settings))))
    assert resolve_ops(again.torch_executed_ops) == resolve_ops(settings.torch_executed_ops)


@pytest.mark.slow
def test_script_dry_run_from_another_directory_loads_everything(tmp_path, case):
    gm, inputs, settings = case
    folder = write_repro(tmp_path / "deep" / "er", gm, inputs, settings, "onnxruntime", "mismatch in out[0]")
    result = run_script(folder, "--dry-run")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "recorded failure: mismatch in out[0]" in out
    assert "input 0: Tensor(shape=(2, 3), dtype=torch.float32" in out
    assert "input 1: {'bias': Tensor(shape=(4,)" in out
    assert "min_block_size=1" in out and "'aten.relu.default'" in out and "torch_executed_modules=['proj']" in out
    assert "backend: onnxruntime" in out and "trtcheck.verify not called" in out


@pytest.mark.slow
def test_script_without_dry_run_calls_verify(tmp_path, case):
    _, _, settings = case
    inputs = (torch.randn(2, 3), torch.randn(4))
    folder = write_repro(tmp_path, lower(FlatNet().eval(), inputs), inputs, settings, "onnxruntime", "boom")
    result = run_script(folder)
    assert "recorded failure: boom" in result.stdout
    # a correct model: the "failure" does not reproduce (verify has landed; no branch for its absence)
    assert result.returncode == 0, result.stderr
    assert "did not reproduce" in result.stdout


def test_model_pt_reloads_the_same_graph_with_its_metadata(tmp_path, case):
    gm, inputs, settings = case
    folder = write_repro(tmp_path, gm, inputs, settings, "onnxruntime", "x")
    loaded = torch.load(folder / "model.pt", weights_only=False)
    saved_inputs = torch.load(folder / "inputs.pt", weights_only=False)
    assert isinstance(loaded, torch.fx.GraphModule)
    torch.testing.assert_close(loaded(*saved_inputs), gm(*inputs), rtol=0, atol=0)
    assert [(n.op, n.name, n.target) for n in loaded.graph.nodes] == [(n.op, n.name, n.target) for n in gm.graph.nodes]
    for old, new in zip(gm.graph.nodes, loaded.graph.nodes):
        old_val, new_val = old.meta.get("val"), new.meta.get("val")
        if isinstance(old_val, torch.Tensor):
            assert (new_val.shape, new_val.dtype, new_val.stride()) == (old_val.shape, old_val.dtype, old_val.stride())
        assert [path for path, _ in new.meta.get("nn_module_stack", {}).values()] == [
            path for path, _ in old.meta.get("nn_module_stack", {}).values()
        ]
    # the same partition: module fallback (nn_module_stack) and shapes (meta["val"]) survived
    assert str(trtcheck.partition(loaded, saved_inputs, settings=settings)) == str(
        trtcheck.partition(gm, inputs, settings=settings)
    )


def test_reloaded_model_compiles_to_the_same_results(tmp_path, case):
    _, _, settings = case
    inputs = (torch.randn(2, 3), torch.randn(4))
    gm = lower(FlatNet().eval(), inputs)
    folder = write_repro(tmp_path, gm, inputs, settings, "onnxruntime", "x")
    loaded = torch.load(folder / "model.pt", weights_only=False)
    compiled = trtcheck.compile(loaded, inputs, settings, backend="onnxruntime")
    assert any(segment.target is trtcheck.Target.TENSORRT for segment in compiled.partition.segments)
    torch.testing.assert_close(compiled(*inputs), gm(*inputs))


def test_reloaded_model_with_a_dict_input_compiles(tmp_path, case):
    gm, inputs, settings = case
    folder = write_repro(tmp_path, gm, inputs, settings, "onnxruntime", "x")
    loaded = torch.load(folder / "model.pt", weights_only=False)
    compiled = trtcheck.compile(loaded, inputs, settings, backend="onnxruntime")
    assert any(segment.target is trtcheck.Target.TENSORRT for segment in compiled.partition.segments)
    torch.testing.assert_close(compiled(*inputs), gm(*inputs))


@pytest.mark.slow
def test_symbolic_trace_graph_of_aten_ops_and_a_leaf_module(tmp_path):
    class Traced(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = torch.nn.Linear(4, 4)
            self.scale = torch.nn.Parameter(torch.full((4,), 0.5))

        def forward(self, x):
            y = aten.mul.Tensor(self.inner(x), self.scale)
            return aten.add.Tensor(aten.tanh.default(y), 1.0), aten.sum.dim_IntList(y, [1])

    torch.manual_seed(1)
    gm = torch.fx.symbolic_trace(Traced())
    x = torch.randn(3, 4)
    folder = write_repro(tmp_path, gm, (x,), trtcheck.Settings(), "onnxruntime", "f", name="traced")
    loaded = torch.load(folder / "model.pt", weights_only=False)
    torch.testing.assert_close(loaded(x), gm(x), rtol=0, atol=0)
    assert isinstance(loaded.inner, torch.nn.Linear) and isinstance(loaded.scale, torch.nn.Parameter)
    assert run_script(folder, "--dry-run").returncode == 0


def test_exported_program_is_stored_as_its_module(tmp_path):
    inputs = (torch.randn(2, 3), {"bias": torch.randn(4)})
    program = torch.export.export(Net(), inputs)
    folder = write_repro(tmp_path, program, inputs, trtcheck.Settings(), "onnxruntime", "f")
    loaded = torch.load(folder / "model.pt", weights_only=False)
    assert all(node.op != "call_module" for node in loaded.graph.nodes)  # export's _guards_fn is dropped
    torch.testing.assert_close(loaded(*inputs), program.module()(*inputs), rtol=0, atol=0)


@pytest.mark.parametrize(
    "name, folder",
    [
        ("suites/x.py::test_y[resnet18-min_block_size=3]", "suites_x.py_test_y_resnet18-min_block_size_3"),
        ("..", "repro"),
        ("a b/c", "a_b_c"),
        ("x" * 300, "x" * 120),
    ],
)
def test_names_are_made_safe_for_the_filesystem(name, folder):
    assert safe_name(name) == folder


def test_a_class_name_setting_is_saved_as_the_paths_it_forced(tmp_path):
    """``torch_executed_modules=["ModuleList"]`` resolves through the model's module tree, which a saved
    graph no longer has: the repro saves the paths it forced, so it partitions the same way on its own."""
    import trtcheck_zoo as models

    model, inputs = models.get("module_list_blocks").build()
    settings = trtcheck.Settings(min_block_size=1, torch_executed_modules=["ModuleList"])
    original = trtcheck.partition(model, inputs, settings)
    folder = write_repro(tmp_path, original.graph_module, inputs, settings, "onnxruntime", "failure", name="classes")
    saved = json.loads((folder / "settings.json").read_text())
    assert saved["torch_executed_modules"] == ["blocks"]
    loaded = torch.load(folder / "model.pt", weights_only=False)
    again = trtcheck.partition(loaded, inputs, trtcheck.Settings(**saved))
    assert [(s.target, [n.name for n in s.nodes]) for s in again.segments] == [
        (s.target, [n.name for n in s.nodes]) for s in original.segments
    ]


def test_dynamic_shapes_round_trip_through_json():
    batch, seq = torch.export.Dim("batch", min=2, max=8), torch.export.Dim("seq")
    spec = ({0: batch, 1: seq}, [None, {0: 2 * batch + 1}], {"mask": {0: batch, 1: torch.export.Dim.AUTO}}, 7)
    stored = json.loads(json.dumps(dynamic_shapes_to_json(spec)))
    back = dynamic_shapes_from_json(stored)
    assert isinstance(back, tuple) and isinstance(back[1], list) and list(back[0]) == [0, 1]  # int keys stay ints
    assert back[0][0] is back[2]["mask"][0]  # one Dim object per name: inputs sharing a Dim still share it
    assert (back[0][0].__name__, back[0][0].min, back[0][0].max) == ("batch", 2, 8)
    assert back[0][1].__name__ == "seq" and stored["tuple"][0]["dict"][1][1]["max"] is None  # unbounded
    derived = back[1][1][0]
    assert derived.root is back[0][0] and (derived.fn(0), derived.fn(1)) == (1, 3)
    assert back[2]["mask"][1] is torch.export.Dim.AUTO and back[3] == 7
    options, missing = options_from_json(options_to_json({"dynamic_shapes": spec, "rtol": 1e-3, "atol": None}))
    assert missing == [] and options["rtol"] == 1e-3 and options["atol"] is None
    assert options_to_json({"rtol": object()})["not_recorded"][0].startswith("rtol: ")


@pytest.mark.slow
def test_a_failure_on_a_random_size_of_a_dynamic_model_reproduces(tmp_path):
    """The nightly fuzz's dynamic failure (``test_fuzz_regressions``' cancelling bmm): judged by the tolerances alone
    (``reference=False``) it fails only on the set of a random size verify drew. Its repro.py called verify without
    the Dims or that set: it compiled for the example's size, and printed "did not reproduce"."""
    graph = build_dynamic_graph(
        [Step("relu"), Step("matmul", 28, 44), Step("matmul"), Step("transpose"), Step("mean"), Step("relu"), Step("matmul", 2, 0)],
        batch=2, dim_range=(2, 3), dtype=torch.int64, seed=0,
    )
    with pytest.raises(trtcheck.VerificationError) as failure:
        trtcheck.verify(graph.model, graph.example_inputs, trtcheck.Settings(min_block_size=1), backend="onnxruntime",
                        num_inputs=2, dynamic_shapes=graph.dynamic_shapes, reference=False, report_dir=tmp_path, name="case")
    report = failure.value.report
    assert [c.passed for c in report.comparisons] == [True, True, True, True, False]
    assert report.input_sets[4].startswith("random size")
    result = run_script(tmp_path / "case")
    assert result.returncode == 1 and "VerificationError" in result.stderr, result.stdout + result.stderr
    assert "input set 4 (given): outputs differ from eager" in result.stderr


def test_load_repro_gives_back_the_input_sets_dims_and_tolerances_verify_recorded(tmp_path, case):
    """``trtcheck reduce repro_dir/`` searches what the failing verify compared, with its Dims and tolerances."""
    gm, inputs, settings = case
    drawn = [(torch.randn(2, 3), {"bias": torch.randn(4)})]
    batch = torch.export.Dim("batch", min=2, max=5)
    folder = write_repro(tmp_path, gm, inputs, settings, "onnxruntime", "boom", input_sets=drawn,
                         options={"dynamic_shapes": ({0: batch}, None), "rtol": 1e-3, "atol": 2e-4})
    loaded = load_repro(folder)
    assert len(loaded.input_sets) == 1 and torch.equal(loaded.input_sets[0][0], drawn[0][0])
    assert loaded.dynamic_shapes[0][0].__name__ == "batch" and loaded.dynamic_shapes[1] is None
    assert (loaded.rtol, loaded.atol) == (1e-3, 2e-4)
    assert loaded.options["rtol"] == 1e-3 and loaded.not_recorded == [] and loaded.failure == "boom\n"
    bare = load_repro(write_repro(tmp_path, gm, inputs, settings, "onnxruntime", "boom", name="bare"))
    assert bare.input_sets is None and bare.dynamic_shapes is None and bare.rtol is None
    with pytest.raises(trtcheck.TrtcheckError, match="not a trtcheck repro folder: it has no model.pt"):
        load_repro(tmp_path / "elsewhere")


def test_the_localization_is_a_file_of_the_folder_and_goes_with_the_failure_it_explains(tmp_path, case):
    """``write_repro`` writes every file of the folder, the localization too; a folder written again for a failure
    that was not localized loses the old one, which explained another failure."""
    gm, inputs, settings = case
    folder = write_repro(tmp_path, gm, inputs, settings, "onnxruntime", "boom", localization="culprit: relu")
    assert (folder / "localization.txt").read_text() == "culprit: relu\n"
    write_repro(tmp_path, gm, inputs, settings, "onnxruntime", "again")
    assert not (folder / "localization.txt").exists()


class Bilinear(torch.nn.Module):
    def forward(self, x, w):
        return (x @ w).relu() @ w


@pytest.mark.slow
def test_the_repro_of_a_dynamic_module_compiles_its_lowered_graph_for_the_dims(tmp_path):
    """A module's repro graph is its lowering, an ATen graph whose metadata fixes the example's sizes; with the
    recorded Dims, lowering exports it again (before, it refused: ``LoweringError``), and the recorded sets at other
    sizes run. Here the model is right, so the rerun passes on all of them."""
    example = (torch.randn(4, 8), torch.randn(8, 8))
    batch = torch.export.Dim("batch", min=2, max=16)
    dims = {"x": {0: batch}, "w": None}
    gm = lower(Bilinear(), example, dynamic_shapes=dims)
    sets = [(torch.randn(2, 8), example[1]), (torch.randn(16, 8), example[1])]
    folder = write_repro(tmp_path, gm, example, trtcheck.Settings(min_block_size=1), "onnxruntime", "boom",
                         input_sets=sets, options={"dynamic_shapes": dims})
    result = run_script(folder)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "compared 4 input sets with eager: example, example again, given x2" in result.stdout
    assert "did not reproduce" in result.stdout


def test_what_verify_json_cannot_hold_is_named_and_write_repro_never_raises(tmp_path, case):
    """numpy scalars where verify takes them (a tolerance, a Dim's bound), a namedtuple of Dims: recorded as plain
    values; what cannot be recorded at all is named under ``not_recorded``, never raised (a repro must not replace
    the failure it reproduces). A folder written again without input sets loses the old ``input_sets.pt``."""
    gm, inputs, settings = case
    Pair = collections.namedtuple("Pair", "x extra")
    dims = Pair({0: torch.export.Dim("b", min=np.int64(2), max=np.int64(9))}, {"bias": {0: torch.export.Dim.AUTO(min=np.int64(1))}})
    folder = write_repro(tmp_path, gm, inputs, settings, "onnxruntime", "boom", input_sets=[inputs],
                         options={"dynamic_shapes": dims, "rtol": np.float32(1e-3), "atol": object()})
    options, missing = options_from_json(json.loads((folder / "verify.json").read_text()))
    b = options["dynamic_shapes"][0][0]
    assert isinstance(options["dynamic_shapes"], tuple) and (b.min, b.max) == (2, 9)
    assert options["dynamic_shapes"][1]["bias"][0].min == 1
    assert options["rtol"] == pytest.approx(1e-3) and "atol" not in options and missing[0].startswith("atol: ")
    write_repro(tmp_path, gm, inputs, settings, "onnxruntime", "again")
    assert not (folder / "input_sets.pt").exists()


def test_the_repro_of_a_dynamic_exported_program_keeps_the_sets_its_saved_graph_can_take(tmp_path):
    """An ExportedProgram's Dims are in the program, not in ``dynamic_shapes``, and the saved graph does not keep
    them: the sets at other sizes would stop its rerun with an InputMismatchError, so they are left out and named."""
    example = (torch.randn(4, 8), torch.randn(8, 8))
    program = torch.export.export(Bilinear(), example, dynamic_shapes=({0: torch.export.Dim("batch", min=2, max=16)}, None))
    with planted(aten.relu.default, None, off_by(1.01)), pytest.raises(trtcheck.VerificationError) as failure:
        trtcheck.verify(program, example, trtcheck.Settings(min_block_size=1), backend="onnxruntime", num_inputs=2,
                        report_dir=tmp_path, name="case", localize_budget=0)
    assert [label.split(":")[0] for label in failure.value.report.input_sets[2:]] == ["min", "max", "random size"]
    kept = torch.load(tmp_path / "case" / "input_sets.pt", weights_only=False)
    assert kept == []  # none of the three has the example's batch of 4
    stored = json.loads((tmp_path / "case" / "verify.json").read_text())
    assert stored["not_recorded"][0].startswith("the input sets at sizes other than the example's (3)")
