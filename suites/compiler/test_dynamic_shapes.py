"""Dynamic shapes end to end: ``dynamic_shapes=`` (torch.export.Dim) through lowering, shape analysis, engines,
the compiled module's input check and ``verify``'s sized input sets."""

from __future__ import annotations

import sys

import pytest
import torch
from torch.export import Dim

import trtcheck
import trtcheck_zoo as models
from suites.engines import fake_tensorrt
from trtcheck.engines import OnnxRuntimeEngine, TensorRTEngine
from trtcheck.engines.cache import CACHE_DIR_ENV
from trtcheck.lowering.symbols import dim_names, symbol_ranges
from trtcheck.partitioning.reasons import Target
from trtcheck.shapes import partition_shapes

SETTINGS = trtcheck.Settings(min_block_size=1)


class Mlp(torch.nn.Module):
    """Linear, activations and a residual over a dynamic batch: every op converts with any batch size."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x))) * 0.5 + y


BATCH = Dim("batch", min=2, max=16)
MLP_DYNAMIC = ({0: BATCH}, {0: BATCH})


def mlp_inputs(n: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(n, 8), torch.randn(n, 8)


# -- lowering ------------------------------------------------------------------------------------------------


def test_lowering_records_each_symbols_range_and_dim_name():
    gm = trtcheck.lower(Mlp(), mlp_inputs(), dynamic_shapes=MLP_DYNAMIC)
    (placeholder, *_) = [n for n in gm.graph.nodes if n.op == "placeholder"]
    (symbol,) = {str(d) for d in placeholder.meta["val"].shape if isinstance(d, torch.SymInt)}
    assert symbol_ranges(gm) == {symbol: (2, 16)}
    assert dim_names(gm) == {symbol: "batch"}


def test_dim_names_follow_dynamic_shapes_given_by_parameter_name():
    gm = trtcheck.lower(Mlp(), mlp_inputs(), dynamic_shapes={"x": {0: BATCH}, "y": {0: BATCH}})
    assert list(dim_names(gm).values()) == ["batch"]


def test_a_dim_the_model_specializes_is_a_lowering_error_with_exports_suggestion():
    with pytest.raises(trtcheck.LoweringError, match=r"(?s)could not keep the dynamic dimensions of Mlp.*specialized.*Fix:"):
        trtcheck.lower(Mlp(), mlp_inputs(), dynamic_shapes=({1: Dim("features")}, None))


def test_dynamic_shapes_with_an_exported_program_is_refused():
    program = torch.export.export(Mlp(), mlp_inputs())
    with pytest.raises(trtcheck.LoweringError, match=r"(?s)dynamic_shapes was given with an ExportedProgram.*torch.export.export"):
        trtcheck.lower(program, mlp_inputs(), dynamic_shapes=MLP_DYNAMIC)


# -- shape analysis -----------------------------------------------------------------------------------------------


class Flatten(torch.nn.Module):
    """A derived size crosses a boundary: (s, 4) -> (2*s, 2) around a Torch op (lgamma has no converter)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.lgamma(x.reshape(-1, 2).abs() + 1.0).sin()


def test_every_boundary_value_gets_min_opt_max_from_the_ranges():
    partition = trtcheck.partition(Flatten(), (torch.randn(6, 4),), SETTINGS, dynamic_shapes=({0: Dim("n", min=2, max=10)},))
    shapes = [s for s in partition_shapes(partition) if s is not None]
    dims = {str(v) for shape in shapes for v in (*shape.input_ranges, *shape.output_ranges)}
    assert "[2..6..10, 4] float32" in dims  # the input: opt is the example's size
    assert "[4..12..20, 2] float32" in dims  # 2*s after the reshape
    printed = str(partition)  # the seed's printout shows each dynamic value's min..opt..max
    assert "graph(%x : Tensor[2..6..10, 4])" in printed and "%view : Tensor[4..12..20, 2] = aten::view(%x, [-1, 2])" in printed


def test_the_ranges_become_the_tensorrt_profile(monkeypatch, tmp_path):
    """MOCK: TensorRT cannot run here; the fake records the optimization profile each engine was built with
    and runs the engine with ONNX Runtime (see suites/engines/fake_tensorrt.py)."""
    trt = fake_tensorrt.make_module()
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    from suites.engines.test_engines_tensorrt import FakeCuda

    monkeypatch.setattr(TensorRTEngine, "cuda", FakeCuda())
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path))
    model = Mlp().eval()
    compiled = trtcheck.compile(model, mlp_inputs(4), SETTINGS, backend="tensorrt", dynamic_shapes=MLP_DYNAMIC)
    assert compiled.partition.fallbacks == [] and len(compiled.engines) == 1
    (_config,), ((profile,),) = trt.state.configs, trt.state.profiles  # the 11.1 fake keeps a config's profiles in its state
    assert [tuple(map(tuple, profile.get_shape(name))) for name in ("x", "y")] == [((2, 8), (4, 8), (16, 8))] * 2
    for n in (2, 5, 16):
        x, y = mlp_inputs(n)
        torch.testing.assert_close(compiled(x, y), model(x, y))


# -- engines and the compiled module ---------------------------------------------------------------------------


def test_one_engine_serves_every_size_in_range():
    model = Mlp().eval()
    compiled = trtcheck.compile(model, mlp_inputs(4), SETTINGS, dynamic_shapes=MLP_DYNAMIC)
    assert [s.target for s in compiled.partition.segments] == [Target.TENSORRT]
    (engine,) = compiled.engines.values()
    assert isinstance(engine, OnnxRuntimeEngine) and any(-1 in spec.shape for spec in engine.inputs)
    for n in (2, 3, 4, 11, 16):
        x, y = mlp_inputs(n)
        torch.testing.assert_close(compiled(x, y), model(x, y))


@pytest.mark.parametrize(
    ("inputs", "match"),
    [
        (mlp_inputs(17), r"input 'x': dim 0 is 17, outside the range of batch in \[2, 16\]"),
        (mlp_inputs(1), r"input 'x': dim 0 is 1, outside the range"),
        ((torch.randn(3, 8), torch.randn(4, 8)), r"input 'y': dim 0 is 4, but it is batch, which 'x' set to 3"),
        ((torch.randn(3, 9), torch.randn(3, 9)), r"input 'x': dim 1 is 9, but it is static: 8 in every call"),
        ((torch.randn(3, 8, dtype=torch.float64), torch.randn(3, 8)), r"input 'x': expected Tensor\[batch in 2..16, 8\] float32"),
    ],
)
def test_inputs_outside_the_compiled_ranges_are_input_mismatch_errors(inputs, match):
    compiled = trtcheck.compile(Mlp(), mlp_inputs(4), SETTINGS, dynamic_shapes=MLP_DYNAMIC)
    with pytest.raises(trtcheck.InputMismatchError, match=match):
        compiled(*inputs)


class Transposed(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.view(-1) * 2).sin()


@pytest.mark.parametrize("forced", [[], ["aten::view"]])
def test_the_examples_layout_is_restored_at_every_size(forced):
    """``view(-1)`` was traced on a contiguous example: a strided call of another size is made contiguous first,
    also when the view runs in PyTorch (where a strided input would make ``view`` fail)."""
    model = Transposed()
    settings = trtcheck.Settings(min_block_size=1, torch_executed_ops=forced)
    compiled = trtcheck.compile(model, (torch.randn(4, 6),), settings, dynamic_shapes=({0: Dim("n", min=2, max=12)},))
    strided = torch.randn(10, 6)[::2]  # (5, 6) with row stride 12
    assert not strided.is_contiguous()
    torch.testing.assert_close(compiled(strided), model(strided.contiguous()))
    transposed = torch.randn(6, 9).t()  # (9, 6), column-major
    torch.testing.assert_close(compiled(transposed), model(transposed.contiguous()))


def test_a_transposed_examples_layout_is_kept_at_every_size():
    class ViewOfTransposed(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.t().reshape(-1).cos()  # on a column-major x, x.t() is contiguous: reshape is a view

    model = ViewOfTransposed()
    example = torch.randn(6, 4).t()  # (4, 6) column-major
    compiled = trtcheck.compile(model, (example,), SETTINGS, dynamic_shapes=({0: Dim("n", min=2, max=12)},))
    for x in (torch.randn(9, 6), torch.randn(6, 9).t()):
        torch.testing.assert_close(compiled(x), model(x))


# -- verify -----------------------------------------------------------------------------------------------------


def test_verify_checks_min_max_and_random_sizes():
    report = trtcheck.verify(Mlp().eval(), mlp_inputs(4), SETTINGS, dynamic_shapes=MLP_DYNAMIC, num_inputs=3)
    kinds = [label.split(":")[0] for label in report.input_sets]
    assert kinds == ["example", "example again", "min", "max", "random size", "random size"]
    assert report.input_sets[2:4] == ["min: batch=2", "max: batch=16"]
    assert len(report.comparisons) == len(report.input_sets)


def test_verify_fails_a_module_that_is_right_only_at_the_example_size():
    """A user's sin converter right only at the example's size (24 values: 4 x 6 flattened): verify must catch it."""
    from onnx import helper

    def wrong_away_from_the_example(ctx, node):
        x = ctx.name(node.args[0])
        shape = ctx.add("Shape", [x])
        first = ctx.add("Gather", [shape, ctx.constant(0, torch.int64)], axis=0)
        is_example = ctx.add("Cast", [ctx.add("Equal", [first, ctx.constant(24, torch.int64)])], to=helper.TensorProto.FLOAT)
        return ctx.add("Mul", [ctx.add("Sin", [x]), is_example])

    with trtcheck.conversion.Snapshot():
        trtcheck.conversion.register(torch.ops.aten.sin.default, validator=lambda node: True, override=True)(wrong_away_from_the_example)
        model = Transposed()
        inputs = (torch.randn(4, 6),)
        dynamic = ({0: Dim("n", min=2, max=12)},)
        compiled = trtcheck.compile(model, inputs, SETTINGS, dynamic_shapes=dynamic)
        torch.testing.assert_close(compiled(*inputs), model(*inputs))  # right at the example
        with pytest.raises(trtcheck.VerificationError, match=r"input set 2 \(min: n=2\): outputs differ from eager"):
            trtcheck.verify(model, inputs, SETTINGS, dynamic_shapes=dynamic)


@pytest.mark.parametrize("preset", ["min_block_size_1", "torch_module"])
@pytest.mark.slow
def test_compiling_never_fixes_a_dynamic_size(preset):
    """Engine outputs with a transposed symbolic layout (the transformer's attention) used to be restrided with
    ``int(stride)``, which fixed ``seq`` to the example's 16 for every later user of the shared lowering."""
    from trtcheck.lowering.symbols import specialized_symbols
    from trtcheck.presets import PRESETS

    entry = models.get("transformer_encoder_dynamic_seq")
    model, inputs = entry.build()
    gm = trtcheck.lower(model, inputs, dynamic_shapes=entry.dynamic_shapes)
    report = trtcheck.verify(model, inputs, PRESETS[preset].settings_for(entry.fallback_module), lowered=gm, num_inputs=2)
    assert specialized_symbols(gm) == {} and report.passed
    (placeholder,) = [n for n in gm.graph.nodes if n.op == "placeholder"]
    assert isinstance(placeholder.meta["val"].shape[1], torch.SymInt)


@pytest.mark.slow
def test_what_reads_a_compiled_module_never_fixes_a_dynamic_size():
    """What the benchmarks and reports read after compiling must not guard either: ``boundary_traffic`` used
    ``int(size)`` for bytes, which fixed ``seq`` to 16 for every later test of the shared lowering (the
    matrix failed whenever a benchmark of the model ran before its verification), and ``optimal``'s byte
    costs used ``int(numel)``."""
    from trtcheck.benchmarking import extra_info
    from trtcheck.lowering.symbols import specialized_symbols, value_bytes
    from trtcheck.partitioning.partition import boundary_traffic

    entry = models.get("transformer_encoder_dynamic_seq")
    model, inputs = entry.build()
    gm = trtcheck.lower(model, inputs, dynamic_shapes=entry.dynamic_shapes)
    for segmentation in ("dependency_aware", "optimal"):
        settings = trtcheck.Settings(min_block_size=1, torch_executed_ops=["aten::relu"], segmentation=segmentation)
        compiled = trtcheck.compile(model, inputs, settings, "onnxruntime", lowered=gm)
        count, size = boundary_traffic(compiled.partition.segments)
        profile = trtcheck.profile(compiled, inputs).to_dict()
        info = extra_info(entry.name, "torch_relu", "stitched", "onnxruntime", compiled, profile=profile)
        compiled.partition.explain(), str(compiled.partition)
        assert count > 0 and info["boundary_bytes"] == size > 0
        assert specialized_symbols(gm) == {}, segmentation
    (placeholder,) = [n for n in gm.graph.nodes if n.op == "placeholder"]
    assert value_bytes(placeholder) == inputs[0].numel() * inputs[0].element_size()  # at the example's size
    assert specialized_symbols(gm) == {}


@pytest.mark.slow
def test_verify_reports_a_size_fixed_while_compiling(monkeypatch):
    """Put the bug back: a stitching step that compares a symbolic size makes verify fail, naming the size."""
    from trtcheck.runtime import stitch as stitching

    original = stitching.recorded_stride

    def comparing(value):
        meta = value.meta.get("val")
        if isinstance(meta, torch.Tensor):
            [int(size) for size in meta.shape]  # a guard: the symbol becomes the example's size
        return original(value)

    monkeypatch.setattr(stitching, "recorded_stride", comparing)
    with pytest.raises(trtcheck.VerificationError, match=r"compiling fixed the dynamic size s\d+ to 4"):
        trtcheck.verify(Mlp().eval(), mlp_inputs(4), SETTINGS, dynamic_shapes=MLP_DYNAMIC)
