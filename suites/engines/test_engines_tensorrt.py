"""The TensorRT backend, driven against a fake ``tensorrt`` module modelling TensorRT 11.1.

MOCK: TensorRT's builder and parser need a CUDA GPU and the full TensorRT wheels, so every test here injects
``fake_tensorrt.make_module()`` as ``sys.modules["tensorrt"]`` and replaces ``TensorRTEngine.cuda`` (torch's CUDA
queries) with a fake device that is the CPU. The fake offers TensorRT 11.1's Python API and nothing it lacks (checked
against the real API by ``test_fake_tensorrt_conformance.py``) and computes with ONNX Runtime on the memory bound to
each tensor name. What these tests prove is trtcheck's side: settings -> precision graph (the compiler's), build
options -> builder config (strongly typed, no weak typing call), shape specs -> profile, cache keys and invalidation,
binding by name, dtypes, the version range, and the fallback on a parser refusal. Whether real TensorRT behaves as documented is for
``suites/engines/test_tensorrt_gpu.py`` (marked ``tensorrt``, skipped here).
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import onnx
import pytest
import torch
from onnx import TensorProto, helper

import trtcheck
from suites.engines import fake_tensorrt
from trtcheck import dtypes
from trtcheck.compiler.engine_build import build_segment_engine, engine_options
from trtcheck.engines import EngineBuildError, EngineOptions, TensorRTEngine, TensorSpec, build_engine, resolve_backend
from trtcheck.engines.cache import (
    CACHE_DIR_ENV,
    CacheKey,
    EngineCache,
    default_cache_dir,
)
from trtcheck.engines.tensorrt import (
    CudaRuntime,
    ShapeRange,
    builder_key,
    network_flags,
    optimization_profile,
    shape_ranges,
    unsupported_version,
)
from trtcheck.errors import BackendUnavailableError, ParserRefusedError, SettingsError
from trtcheck.settings import Autocast

A = TensorSpec("a", (2, 3), torch.float32)
B = TensorSpec("b", (2, 3), torch.float32)
OUT = TensorSpec("out", (2, 3), torch.float32)


class FakeCuda(CudaRuntime):
    """MOCK: a "CUDA device" that is the CPU, so the fake engine's buffers are readable host memory."""

    def __init__(self, name: str = "Fake GPU", capability: tuple[int, int] = (9, 0)) -> None:
        self.name, self.capability = name, capability

    def is_available(self) -> bool:
        return True

    def current_device(self) -> torch.device:
        return torch.device("cpu")

    def identity(self, device: torch.device) -> tuple[str, tuple[int, int]]:
        return self.name, self.capability

    def stream_handle(self, device: torch.device) -> int:
        return 1234


@pytest.fixture
def trt(monkeypatch, tmp_path):
    """MOCK: the fake ``tensorrt`` module and a fake CUDA device; the engine cache lives in ``tmp_path``."""
    module = fake_tensorrt.make_module()
    monkeypatch.setitem(sys.modules, "tensorrt", module)
    monkeypatch.setattr(TensorRTEngine, "cuda", FakeCuda())
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "engines"))
    return module


@pytest.fixture
def sub_model(make_model):
    """out = a - b: the order of the inputs matters, so binding by position instead of by name shows."""
    return make_model([helper.make_node("Sub", ["a", "b"], ["out"])], [A, B], [OUT])


def operands():
    torch.manual_seed(0)
    return torch.randn(2, 3), torch.randn(2, 3)


# -- dtypes -------------------------------------------------------------------------------------------------


def test_every_engine_dtype_has_a_tensorrt_member_and_maps_back(trt):
    for dtype in sorted(dtypes.ENGINE_DTYPES, key=str):
        member = getattr(trt.DataType, dtypes.to_tensorrt_name(dtype))  # the DataType member trtcheck names
        assert dtypes.from_tensorrt_name(member.name) is dtype


def test_outputs_are_allocated_with_the_engines_dtype(trt, make_model):
    x, y = TensorSpec("x", (4,), torch.float16), TensorSpec("y", (4,), torch.float16)
    engine = TensorRTEngine(make_model([helper.make_node("Relu", ["x"], ["y"])], [x], [y]), [x], [y])
    value = torch.tensor([-1.0, 0.5, 2.0, -0.25], dtype=torch.float16)
    (result,) = engine(value)
    assert result.dtype is torch.float16
    torch.testing.assert_close(result, torch.relu(value))


def test_an_engine_dtype_other_than_the_spec_is_a_build_error(trt, sub_model):
    trt.state.output_dtype_override["out"] = "HALF"
    with pytest.raises(EngineBuildError, match=r"tensor 'out' is HALF in the engine but torch.float32 in the segment's spec"):
        TensorRTEngine(sub_model, [A, B], [OUT])


def test_an_engine_dtype_trtcheck_does_not_know_is_a_build_error(trt, sub_model):
    trt.state.output_dtype_override["out"] = "FP8"
    with pytest.raises(EngineBuildError, match=r"tensor 'out': TensorRT dtype FP8 has no torch dtype"):
        TensorRTEngine(sub_model, [A, B], [OUT])


# -- optimization profiles ------------------------------------------------------------------------------------


def test_static_specs_give_min_opt_max_equal():
    ranges = shape_ranges([A, TensorSpec("i", (), torch.int64)])
    assert ranges == {"a": ShapeRange((2, 3), (2, 3), (2, 3)), "i": ShapeRange((), (), ())}
    assert all(r.is_static for r in ranges.values())


def test_a_given_range_plugs_in_for_a_dynamic_input():
    dynamic = TensorSpec("x", (-1, 3), torch.float32)
    ranges = shape_ranges([dynamic, A], {"x": ((1, 3), (8, 3), (32, 3))})
    assert ranges["x"] == ShapeRange((1, 3), (8, 3), (32, 3)) and not ranges["x"].is_static
    assert ranges["a"] == ShapeRange.static((2, 3))
    assert ranges["x"].contains((5, 3)) and not ranges["x"].contains((33, 3))


@pytest.mark.parametrize(
    ("given", "match"),
    [
        ({}, r"input 'x' has unknown dimensions \(-1, 3\) and no \(min, opt, max\) shape range"),
        ({"x": ((1, 3), (8, 3), (4, 3))}, r"need min <= opt <= max"),
        ({"x": ((1, 3), (2, 3))}, r"shape range of input 'x'"),
        ({"x": ((1, 4), (2, 4), (3, 4))}, r"does not fit its spec \(-1, 3\)"),
        ({"x": ((1,), (2,), (3,))}, r"does not fit its spec"),
        ({"y": ((1, 3), (1, 3), (1, 3))}, r"shape ranges given for \['y'\], which are not inputs"),
    ],
)
def test_bad_ranges_are_build_errors(given, match):
    with pytest.raises(EngineBuildError, match=match):
        shape_ranges([TensorSpec("x", (-1, 3), torch.float32)], given)


def test_the_profile_sets_min_opt_max_per_input(trt):
    builder = trt.Builder(trt.Logger())
    ranges = {"a": ShapeRange.static((2, 3)), "x": ShapeRange((1, 3), (8, 3), (32, 3))}
    profile = optimization_profile(builder, ranges)
    assert profile.get_shape("a") == [(2, 3), (2, 3), (2, 3)] and profile.get_shape("x") == [(1, 3), (8, 3), (32, 3)]


def test_the_engine_builds_one_profile_from_its_specs(trt, sub_model):
    TensorRTEngine(sub_model, [A, B], [OUT])
    (config,), (profiles,) = trt.state.configs, trt.state.profiles
    assert config.num_optimization_profiles == 1
    assert [[p.get_shape(name) for name in "ab"] for p in profiles] == [[[(2, 3)] * 3, [(2, 3)] * 3]]


# -- builder settings ----------------------------------------------------------------------------------------


def float_types(model: onnx.ModelProto) -> dict[str, int]:
    """Each computing node's float element types (inputs and outputs), by node name: what a strongly typed network computes."""
    inferred = onnx.shape_inference.infer_shapes(model).graph
    known = {v.name: v.type.tensor_type.elem_type for v in [*inferred.value_info, *inferred.input, *inferred.output]}
    known.update({i.name: i.data_type for i in inferred.initializer})
    floats = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16}
    return {node.name: {known[v] for v in [*node.input, *node.output] if known.get(v) in floats}
            for node in model.graph.node if node.op_type != "Cast"}


@pytest.mark.parametrize(("precision", "low"), [("fp32", TensorProto.FLOAT), ("fp16", TensorProto.FLOAT16), ("bf16", TensorProto.BFLOAT16)])
def test_every_precision_builds_strongly_typed_from_its_graph(trt, sub_model, precision, low):
    """TensorRT 11 has no FP16/BF16 builder flags: the network is strongly typed (STRONGLY_TYPED, 11.1's value 0) and
    the precision is the parsed graph's: the Sub computes in ``low`` between Casts that keep the engine's float32 I/O."""
    settings = trtcheck.Settings(precision=precision, workspace_size=123 << 20)
    engine = build_segment_engine(sub_model, [A, B], [OUT], backend="tensorrt", settings=settings)
    (config,), (flags,), (parsed,) = trt.state.configs, trt.state.network_flags, trt.state.parsed
    assert flags == 1 << 0 == 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    assert not config.get_flag(trt.BuilderFlag.TF32) and config.flags == 0  # cleared: fp32 means float32 products
    assert config.get_memory_pool_limit(trt.MemoryPoolType.WORKSPACE) == 123 << 20
    assert list(float_types(parsed).values()) == [{low}]  # the one computing node, Sub
    assert [v.type.tensor_type.elem_type for v in [*parsed.graph.input, *parsed.graph.output]] == [TensorProto.FLOAT] * 3
    assert parsed.SerializeToString() == engine.model.SerializeToString()  # the engine's model is what was parsed
    a, b = operands()
    expected = (a.to(LOW_DTYPES[precision]) - b.to(LOW_DTYPES[precision])).float()
    torch.testing.assert_close(engine(a, b)[0], expected, rtol=0, atol=0)


LOW_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def test_tf32_sets_the_builder_flag(trt, sub_model):
    build_engine(sub_model, [A, B], [OUT], backend="tensorrt", options=EngineOptions(tf32=True))
    (config,) = trt.state.configs
    assert config.get_flag(trt.BuilderFlag.TF32) and config.flags == 1 << int(trt.BuilderFlag.TF32)


def test_strongly_typed_is_the_enums_own_bit_and_nothing_where_it_has_none():
    """TensorRT 10 numbers STRONGLY_TYPED 1 (after EXPLICIT_BATCH 0), 11.1 numbers it 0: the bit is the enum's. A
    TensorRT whose enum lacks it gets no flags (11.x ignores the flag; every network is strongly typed)."""
    ten = types.SimpleNamespace(NetworkDefinitionCreationFlag=types.SimpleNamespace(STRONGLY_TYPED=1))
    assert network_flags(ten) == 2
    assert network_flags(types.SimpleNamespace()) == 0


def test_no_weak_typing_api_is_called(trt):
    """fp16 with fp32_nodes needs no layer precisions, output types or OBEY_PRECISION_CONSTRAINTS, none of which
    TensorRT 11 has: the fake's layers refuse any attribute the real ILayer lacks, as pybind11 does, and its
    BuilderFlag has only 11.1's members."""
    assert not hasattr(trt.BuilderFlag, "FP16") and not hasattr(trt.BuilderFlag, "OBEY_PRECISION_CONSTRAINTS")
    layer = trt.ILayer("x", [], [])
    with pytest.raises(AttributeError):
        layer.precision = trt.float32
    assert not hasattr(layer, "set_output_type")
    settings = trtcheck.Settings(min_block_size=1, precision="fp16", fp32_nodes=["erf"])
    compiled = trtcheck.compile(ReluErfNeg(), (torch.randn(4, 5),), settings, backend="tensorrt")
    assert compiled.partition.fallbacks == [] and len(compiled.engines) == 2


def test_workspace_zero_leaves_tensorrts_default(trt, sub_model):
    TensorRTEngine(sub_model, [A, B], [OUT], options=EngineOptions(workspace_size=0))
    assert trt.state.configs[0].get_memory_pool_limit(trt.MemoryPoolType.WORKSPACE) == fake_tensorrt.DEVICE_MEMORY


def test_defaults_are_fp32_and_one_gib():
    assert engine_options(None) == engine_options(trtcheck.Settings()) == EngineOptions()
    assert EngineOptions().precision == "fp32" and EngineOptions().workspace_size == 1 << 30 and EngineOptions().fp32_nodes == ()
    assert not EngineOptions().tf32 and not EngineOptions().use_fp32_acc and EngineOptions().autocast is None
    assert EngineOptions().engine_cache and EngineOptions().engine_cache_dir is None


def test_the_compiler_makes_the_options_from_settings():
    settings = trtcheck.Settings(precision="fp16", fp32_nodes=["erf", "add"], use_fp32_acc=True, autocast="torch_tensorrt",
                                 tf32=True, workspace_size=1 << 20, engine_cache=False, engine_cache_dir="engines-cache")
    assert engine_options(settings) == EngineOptions(
        tf32=True, workspace_size=1 << 20, engine_cache=False, engine_cache_dir="engines-cache", precision="fp16",
        fp32_nodes=("add", "erf"), use_fp32_acc=True, autocast=dataclasses.asdict(Autocast.of("torch_tensorrt")),
    )


# -- the TensorRT version ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["10.0.1", "10.13.3.9", "11.0.0.114", "11.1.0.106"])
def test_supported_versions(version):
    assert unsupported_version(version) is None


@pytest.mark.parametrize("version", ["8.6.1", "9.3.0", "11.2.1.2", "11.4.0.106", "12.0.0", "unknown"])
def test_another_version_is_refused_naming_it_and_the_range(trt, sub_model, version):
    trt.__version__ = version
    with pytest.raises(EngineBuildError, match=rf"TensorRT '?{re.escape(version)}'?.*supports TensorRT >=10\.0,<11\.2"):
        TensorRTEngine(sub_model, [A, B], [OUT])
    assert trt.state.builds == 0
    reason = TensorRTEngine.unavailable_reason()
    assert reason is not None and version in reason and ">=10.0,<11.2" in reason
    with pytest.raises(BackendUnavailableError, match=rf"{re.escape(version)}.*>=10\.0,<11\.2"):
        resolve_backend("tensorrt")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"precision": "float16"}, r"precision must be one of 'fp32', 'fp16', 'bf16', got 'float16': write 'fp16'"),
        ({"precision": torch.bfloat16}, r"got torch.bfloat16: write 'bf16'"),
        ({"precision": "int8"}, r"precision must be one of .*got 'int8'$"),
        ({"precision": "FP16"}, r"got 'FP16': write 'fp16'$"),
        ({"precision": "tf32"}, r"got 'tf32': TF32 is float32 .*Settings\(precision='fp32', tf32=True\)$"),
        ({"workspace_size": -1}, r"workspace_size must be a number of bytes >= 0"),
        ({"workspace_size": 1.5e9}, r"workspace_size must be a number of bytes >= 0 .*\(float\)"),
        ({"workspace_size": True}, r"workspace_size must be a number of bytes"),
        ({"engine_cache": "yes"}, r"engine_cache must be True or False"),
        ({"engine_cache_dir": ""}, r"engine_cache_dir must be a directory path or None"),
        ({"engine_cache_dir": 3}, r"engine_cache_dir must be a directory path or None"),
    ],
)
def test_bad_engine_settings_are_clear_errors(kwargs, match):
    with pytest.raises(SettingsError, match=match):
        trtcheck.Settings.coerce(trtcheck.Settings(**kwargs))


# -- running: binding by name, streams, layouts -------------------------------------------------------------------


def test_tensors_are_bound_by_name_not_position(trt, sub_model):
    assert trt.state.io_order == "reversed"  # the engine lists out, b, a: position would bind a to "out"
    engine = TensorRTEngine(sub_model, [A, B], [OUT])
    a, b = operands()
    (result,) = engine(a, b)
    torch.testing.assert_close(result, a - b)
    (context,) = trt.state.contexts
    assert context.get_tensor_address("a") == a.data_ptr() and context.get_tensor_address("b") == b.data_ptr()
    assert context.get_tensor_address("out") == result.data_ptr()


def test_spec_order_decides_the_call_convention(trt, make_model):
    # The segment's specs list b first: calls pass b first, whatever the ONNX graph or the engine lists.
    model = make_model([helper.make_node("Sub", ["a", "b"], ["out"])], [A, B], [OUT])
    engine = TensorRTEngine(model, [B, A], [OUT])
    a, b = operands()
    torch.testing.assert_close(engine(b, a)[0], a - b)


def test_runs_on_the_current_stream_and_makes_inputs_contiguous(trt, sub_model):
    engine = TensorRTEngine(sub_model, [A, B], [OUT])
    a, b = operands()
    strided = torch.randn(3, 2).t()  # (2, 3), not contiguous
    (result,) = engine(strided, b)
    torch.testing.assert_close(result, strided - b)
    assert trt.state.streams == [1234]
    with pytest.raises(ValueError, match=r"input 'a': expected dtype torch.float32, got torch.float64"):
        engine(a.double(), b)


# -- parser refusals and build failures ----------------------------------------------------------------------------


def test_a_parser_refusal_carries_the_parsers_errors_and_nodes(trt, make_model):
    x, y = TensorSpec("x", (3,), torch.float32), TensorSpec("y", (3,), torch.float32)
    model = make_model(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Erf", ["r"], ["e"]), helper.make_node("Neg", ["e"], ["y"])],
        [x],
        [y],
    )
    trt.state.refuse_ops = {"Erf"}
    with pytest.raises(ParserRefusedError) as info:
        TensorRTEngine(model, [x], [y])
    message = str(info.value)
    assert message.startswith("tensorrt: TensorRT's ONNX parser refused the segment's model: In node 1 with name:  and operator: Erf")
    assert "No importer registered for op: Erf" in message
    assert "Nodes TensorRT does not support (ONNX ops Erf): #1 Erf -> e." in message
    assert info.value.unsupported_nodes == ((1, "Erf", ("e",)),)
    assert trt.state.builds == 0


def test_a_parser_refusal_quotes_what_the_refused_node_was_converted_from(trt, make_model):
    """The engine keeps its model's node origins (``Engine.node_origins``) and its errors quote the nodes they name."""
    x, y = TensorSpec("x", (3,), torch.float32), TensorSpec("y", (3,), torch.float32)
    origin = "%erf (aten.erf.default), converter trtcheck.conversion.ops.activation._erf"
    model = make_model([helper.make_node("Erf", ["x"], ["y"], name="erf/Erf", doc_string=origin)], [x], [y])
    trt.state.refuse_ops = {"Erf"}
    with pytest.raises(ParserRefusedError, match=re.escape(f"ONNX node 'erf/Erf' is {origin}")):
        TensorRTEngine(model, [x], [y])
    trt.state.refuse_ops = set()
    assert TensorRTEngine(model, [x], [y]).node_origins == {"erf/Erf": origin}


def test_a_failed_build_quotes_tensorrts_log(trt, sub_model, caplog):
    trt.state.fail_build = "could not find any implementation for node Sub"
    expected = r"building the engine failed.*TensorRT said: could not find any implementation for node Sub"
    with pytest.raises(EngineBuildError, match=expected):
        TensorRTEngine(sub_model, [A, B], [OUT])
    assert ("trtcheck.tensorrt", 40, "TensorRT ERROR: could not find any implementation for node Sub") in caplog.record_tuples


# -- the engine cache ----------------------------------------------------------------------------------------------


def key(**changes):
    base = {
        "tensorrt_version": fake_tensorrt.VERSION,
        "device_name": "Fake GPU",
        "compute_capability": (9, 0),
        "builder": builder_key(EngineOptions(), {"a": ShapeRange.static((2, 3))}),
    }
    onnx_bytes = changes.pop("onnx_bytes", b"onnx")
    base.update(changes)
    return CacheKey.of(onnx_bytes, **base)


@pytest.mark.parametrize(
    "change",
    [
        {"onnx_bytes": b"onnx2"},
        {"tensorrt_version": "11.1.1.0"},
        {"device_name": "Other GPU"},
        {"compute_capability": (8, 9)},
        {"builder": builder_key(EngineOptions(precision="fp16"), {"a": ShapeRange.static((2, 3))})},
        {"builder": builder_key(EngineOptions(precision="bf16"), {"a": ShapeRange.static((2, 3))})},
        {"builder": builder_key(EngineOptions(tf32=True), {"a": ShapeRange.static((2, 3))})},
        {"builder": builder_key(EngineOptions(workspace_size=1 << 31), {"a": ShapeRange.static((2, 3))})},
        {"builder": builder_key(EngineOptions(), {"a": ShapeRange((1, 3), (2, 3), (4, 3))})},
        {"builder": builder_key(EngineOptions(), {"b": ShapeRange.static((2, 3))})},
    ],
    ids=["onnx", "version", "device", "capability", "fp16", "bf16", "tf32", "workspace", "profile", "input name"],
)
def test_every_component_changes_the_key(change):
    assert key().digest == key().digest
    assert key(**change).digest != key().digest


@pytest.mark.parametrize(
    "change",
    [{"fp32_nodes": ("erf",)}, {"use_fp32_acc": True}, {"autocast": dataclasses.asdict(Autocast())},
     {"autocast": dataclasses.asdict(Autocast(max_depth_of_reduction=64))}, {"tf32": True}],
    ids=["fp32_nodes", "use_fp32_acc", "autocast", "autocast rule", "tf32"],
)
def test_every_fp16_builder_setting_changes_the_key(change):
    """Against an fp16 key alike in all else: the settings that shape the precision graph are in the key themselves
    (the graph's digest is too), so that an entry says what it was built for."""
    fp16 = {"builder": builder_key(EngineOptions(precision="fp16"), {"a": ShapeRange.static((2, 3))})}
    changed = {"builder": builder_key(EngineOptions(precision="fp16", **change), {"a": ShapeRange.static((2, 3))})}
    assert key(**fp16).digest != key(**changed).digest


def test_the_cache_directory_setting_env_and_default(monkeypatch, tmp_path):
    monkeypatch.delenv(CACHE_DIR_ENV, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "trtcheck" / "engines"
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "env"))
    assert EngineCache().directory == tmp_path / "env"
    assert EngineCache(tmp_path / "setting").directory == tmp_path / "setting"


def build(sub_model, **kwargs):
    return TensorRTEngine(sub_model, [A, B], [OUT], **kwargs)


def entry(engine) -> Path:
    return engine.cache.path(engine.cache_key)


def test_a_second_build_is_a_cache_hit(trt, sub_model, tmp_path):
    first = build(sub_model)
    assert first.cache_event == "stored (no entry)" and entry(first).parent == tmp_path / "engines"
    second = build(sub_model)
    assert second.cache_event == "hit" and trt.state.builds == 1 and trt.state.parses == 1
    a, b = operands()
    torch.testing.assert_close(second(a, b)[0], a - b)


class Scaled(torch.nn.Module):
    """A weight (held by reference in the segment, as trtcheck.compile converts it), a matmul and an erf."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(5, 5, generator=torch.Generator().manual_seed(3)))

    def forward(self, x):
        return torch.erf(x @ self.weight) * 3


def compiled_engine(model, settings):
    compiled = trtcheck.compile(model, (torch.randn(4, 5, generator=torch.Generator().manual_seed(4)),), settings, backend="tensorrt")
    (engine,) = compiled.engines.values()
    return compiled, engine


BASE = {"min_block_size": 1, "precision": "fp16"}
NUMERICS = {
    "precision": {"precision": "bf16"},
    "tf32": {"tf32": True},
    "fp32_nodes": {"fp32_nodes": ["erf"]},
    "use_fp32_acc": {"use_fp32_acc": True},
    "autocast": {"autocast": Autocast(excluded_ops=("aten.erf.default",))},
}


@pytest.mark.parametrize("change", list(NUMERICS), ids=list(NUMERICS))
def test_every_setting_that_changes_numerics_misses_the_cache(trt, change):
    """The key follows the numerics: the same settings hit; each setting that changes what TensorRT computes (the
    precision, tf32, the float32 node set, use_fp32_acc, the autocast policy) misses and builds again."""
    model = Scaled().eval()
    _, first = compiled_engine(model, trtcheck.Settings(**BASE))
    assert first.cache_event == "stored (no entry)"
    assert compiled_engine(model, trtcheck.Settings(**BASE))[1].cache_event == "hit"
    _, changed = compiled_engine(model, trtcheck.Settings(**{**BASE, **NUMERICS[change]}))
    assert changed.cache_event == "stored (no entry)" and trt.state.builds == 2
    assert changed.cache_key.digest != first.cache_key.digest


def test_a_weight_changed_in_place_misses_the_cache(trt):
    """Torch-TensorRT once keyed engines without the weights; here the weights are in the precision graph's bytes."""
    model = Scaled().eval()
    _, first = compiled_engine(model, trtcheck.Settings(**BASE))
    with torch.no_grad():
        model.weight[0, 0] += 1.0
    compiled, changed = compiled_engine(model, trtcheck.Settings(**BASE))
    assert changed.cache_event == "stored (no entry)" and changed.cache_key.onnx_sha256 != first.cache_key.onnx_sha256
    x = torch.randn(4, 5)
    torch.testing.assert_close(compiled(x), (torch.erf(x.half() @ model.weight.detach().half()) * 3).float(), rtol=2e-3, atol=2e-3)


def test_a_hit_gives_the_outputs_of_a_fresh_build(trt):
    """The same outputs, the same number of them (Torch-TensorRT #4521: a hit changed the number of outputs)."""
    model, x = Scaled().eval(), torch.randn(4, 5)
    fresh, engine = compiled_engine(model, trtcheck.Settings(**BASE))
    hit, again = compiled_engine(model, trtcheck.Settings(**BASE))
    assert engine.cache_event.startswith("stored") and again.cache_event == "hit"
    assert len(again.outputs) == len(engine.outputs) and again.outputs == engine.outputs
    assert torch.equal(hit(x), fresh(x))


@pytest.mark.slow
def test_a_hit_in_a_new_process_gives_the_outputs_of_a_fresh_build(trt, tmp_path):
    """The key is the same in another process (no hash seed, no object identity in it) and its plan computes the same."""
    script = textwrap.dedent(f"""
        import sys, torch, trtcheck
        from suites.engines import fake_tensorrt
        from suites.engines.test_engines_tensorrt import BASE, FakeCuda, Scaled, compiled_engine
        from trtcheck.engines import TensorRTEngine
        sys.modules["tensorrt"] = fake_tensorrt.make_module()
        TensorRTEngine.cuda = FakeCuda()
        torch.manual_seed(0)
        compiled, engine = compiled_engine(Scaled().eval(), trtcheck.Settings(**BASE))
        torch.save({{"event": engine.cache_event, "digest": engine.cache_key.digest,
                    "out": compiled(torch.randn(4, 5, generator=torch.Generator().manual_seed(9)))}}, {str(tmp_path / "child.pt")!r})
    """)
    model = Scaled().eval()
    torch.manual_seed(0)
    fresh, engine = compiled_engine(model, trtcheck.Settings(**BASE))
    environment = {"PYTHONPATH": str(Path(__file__).resolve().parents[2]), CACHE_DIR_ENV: str(tmp_path / "engines"),
                   "PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", script], check=True, env=environment, timeout=300)
    child = torch.load(tmp_path / "child.pt")
    assert engine.cache_event.startswith("stored") and child["event"] == "hit" and child["digest"] == engine.cache_key.digest
    assert torch.equal(child["out"], fresh(torch.randn(4, 5, generator=torch.Generator().manual_seed(9))))


def test_the_setting_names_the_directory_and_can_turn_the_cache_off(trt, sub_model, tmp_path):
    engine = build(sub_model, options=EngineOptions(engine_cache_dir=str(tmp_path / "mine")))
    assert entry(engine).parent == tmp_path / "mine" and entry(engine).exists()
    off = build(sub_model, options=EngineOptions(engine_cache=False))
    assert off.cache is None and off.cache_event == "off" and trt.state.builds == 2


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda data: data[:-1] + bytes([data[-1] ^ 0xFF]), r"corrupt entry \(plan of \d+ bytes does not match"),
        (lambda data: data[: len(data) // 2], r"corrupt entry"),
        (lambda data: b"garbage", r"corrupt entry \(not a trtcheck engine file\)"),
        (lambda data: b"", r"corrupt entry"),
    ],
    ids=["flipped byte", "truncated", "garbage", "empty"],
)
def test_a_corrupt_entry_is_rebuilt_never_trusted(trt, sub_model, damage, reason):
    path = entry(build(sub_model))
    path.write_bytes(damage(path.read_bytes()))
    rebuilt = build(sub_model)
    assert trt.state.builds == 2
    assert rebuilt.cache_event.startswith("stored (corrupt entry")
    assert re.search(reason, rebuilt.cache_event), rebuilt.cache_event
    assert build(sub_model).cache_event == "hit"  # the rebuilt entry replaced the corrupt one


def test_a_stale_entry_is_rebuilt(trt, sub_model, tmp_path):
    """An entry written for another TensorRT version under this key's file name (copied caches, a format
    change) is refused by its header, not trusted by its name."""
    engine = build(sub_model)
    stale_key = dataclasses.replace(engine.cache_key, tensorrt_version="10.0.0")
    plan = fake_tensorrt.PLAN_TAG + sub_model.SerializeToString()
    engine.cache.store(stale_key, plan).replace(entry(engine))
    rebuilt = build(sub_model)
    assert trt.state.builds == 2
    assert rebuilt.cache_event == "stored (stale entry (built for another tensorrt_version); rebuilt)"


def test_another_tensorrt_version_misses_and_builds(trt, sub_model):
    build(sub_model)
    trt.__version__ = "11.0.0.114"
    upgraded = build(sub_model)
    assert upgraded.cache_event == "stored (no entry)" and trt.state.builds == 2


def test_an_entry_tensorrt_cannot_deserialize_is_rebuilt(trt, sub_model):
    engine = build(sub_model)
    engine.cache.store(engine.cache_key, b"a plan from an older driver")  # header and hash verify
    rebuilt = build(sub_model)
    assert rebuilt.cache_event == "stored (TensorRT could not deserialize the cached engine; rebuilt)"
    assert trt.state.builds == 2
    a, b = operands()
    torch.testing.assert_close(rebuilt(a, b)[0], a - b)


def test_the_header_records_the_key_and_the_plan_hash(trt, sub_model):
    engine = build(sub_model)
    data = entry(engine).read_bytes()
    assert data.startswith(b"TRTCHECK-ENGINE\n")
    length = int.from_bytes(data[16:24], "big")
    header = json.loads(data[24:24 + length])
    assert header["key"] == engine.cache_key.fields and header["digest"] == engine.cache_key.digest
    assert header["key"]["builder"]["profile"] == {"a": [[2, 3]] * 3, "b": [[2, 3]] * 3}
    assert header["key"]["device_name"] == "Fake GPU" and header["key"]["compute_capability"] == [9, 0]


def test_an_unwritable_cache_warns_and_keeps_the_engine(trt, sub_model, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.warns(RuntimeWarning, match=r"could not write the TensorRT engine cache entry"):
        engine = build(sub_model, options=EngineOptions(engine_cache_dir=str(blocker / "engines")))
    assert engine.cache_event.startswith("not stored (unreadable entry") and "Not a directory" in engine.cache_event
    a, b = operands()
    torch.testing.assert_close(engine(a, b)[0], a - b)


# -- through trtcheck.compile --------------------------------------------------------------------------------------


class ReluErfNeg(torch.nn.Module):
    """Two TensorRT segments around lgamma (no converter): relu, then erf and neg."""

    def forward(self, x):
        a = torch.relu(x) + 1.0
        b = torch.lgamma(a)
        return -torch.erf(b * 0.5)


SETTINGS = trtcheck.Settings(min_block_size=1)


def test_compile_with_tensorrt_runs_every_segment_in_engines(trt):
    model, x = ReluErfNeg(), torch.randn(4, 5)
    compiled = trtcheck.compile(model, (x,), SETTINGS, backend="tensorrt")
    assert compiled.partition.fallbacks == []
    assert len(compiled.engines) == 2 and all(isinstance(e, TensorRTEngine) for e in compiled.engines.values())
    torch.testing.assert_close(compiled(x), model(x))


@pytest.mark.slow
def test_a_parser_refusal_falls_back_to_pytorch_with_the_parsers_message(trt):
    trt.state.refuse_ops = {"Erf"}
    model, x = ReluErfNeg(), torch.randn(4, 5)
    compiled = trtcheck.compile(model, (x,), SETTINGS, backend="tensorrt")
    (fallback,) = compiled.partition.fallbacks
    assert "runs in PyTorch: ParserRefusedError: tensorrt: TensorRT's ONNX parser refused the segment's model" in fallback
    assert "No importer registered for op: Erf" in fallback and "(ONNX ops Erf)" in fallback
    assert len(compiled.engines) == 1  # the relu segment still runs in its engine
    torch.testing.assert_close(compiled(x), model(x))
    with pytest.raises(trtcheck.VerificationError, match=r"No importer registered for op: Erf"):
        trtcheck.verify(model, (x,), SETTINGS, backend="tensorrt")
    report = trtcheck.verify(model, (x,), SETTINGS, backend="tensorrt", allow_fallbacks=True)
    assert report.passed


def test_strict_compile_raises_on_a_parser_refusal(trt):
    trt.state.refuse_ops = {"Erf"}
    with pytest.raises(trtcheck.CompilationError, match=r"ParserRefusedError: .*Erf"):
        trtcheck.compile(ReluErfNeg(), (torch.randn(4, 5),), SETTINGS, backend="tensorrt", strict=True)


def test_compile_builds_every_segment_in_fp16_strongly_typed(trt):
    trtcheck.compile(ReluErfNeg(), (torch.randn(4, 5),), trtcheck.Settings(min_block_size=1, precision="fp16"), backend="tensorrt")
    assert len(trt.state.configs) == 2 and trt.state.network_flags == [1, 1]
    assert all(not config.get_flag(trt.BuilderFlag.TF32) for config in trt.state.configs)
    assert all(types == {TensorProto.FLOAT16} for model in trt.state.parsed for types in float_types(model).values())


@pytest.mark.parametrize("keep", [["erf"], ["aten::erf"], ["aten.erf.default"]])
def test_fp32_nodes_stay_float32_in_the_graph_tensorrt_parses(trt, keep):
    """MOCK (fake_tensorrt: no TensorRT here): the ONNX nodes of the kept fx node compute in float32 in the parsed
    graph, between Casts, and every other computing node in fp16; TensorRT 11 computes a strongly typed network in
    exactly those types. Whether it does on a GPU is for test_tensorrt_gpu.py."""
    settings = trtcheck.Settings(min_block_size=1, precision="fp16", fp32_nodes=keep)
    compiled = trtcheck.compile(ReluErfNeg(), (torch.randn(4, 5),), settings, backend="tensorrt")
    computing = {name: types for model in trt.state.parsed for name, types in float_types(model).items()}
    kept = {name for name, types in computing.items() if types == {TensorProto.FLOAT}}
    assert kept and all(name.startswith("erf/") for name in kept), computing
    assert all(types == {TensorProto.FLOAT16} for name, types in computing.items() if name not in kept), computing
    casts = [node for model in trt.state.parsed for node in model.graph.node if node.op_type == "Cast"]
    assert any("a float32 node reads it" in node.doc_string for node in casts)
    assert compiled.partition.settings.fp32_nodes == keep
