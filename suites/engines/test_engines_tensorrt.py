"""The TensorRT backend, driven against a fake ``tensorrt`` module.

MOCK: TensorRT cannot be installed on these machines (its wheels download from an unreachable host) and
needs a CUDA GPU, so every test here injects ``fake_tensorrt.make_module()`` as ``sys.modules["tensorrt"]``
and replaces ``TensorRTEngine.cuda`` (torch's CUDA queries) with a fake device that is the CPU. The fake
implements TensorRT 10's documented Python API and computes with ONNX Runtime on the memory bound to each
tensor name. What these tests prove is trtcheck's side: settings -> builder config, shape specs -> profile,
cache keys and invalidation, binding by name, dtypes, and the fallback on a parser refusal. Whether real
TensorRT behaves as documented is for ``suites/engines/test_tensorrt_gpu.py`` (marked ``tensorrt``, skipped here).
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path

import pytest
import torch
from onnx import helper

import trtcheck
from suites.engines import fake_tensorrt
from trtcheck import dtypes
from trtcheck.engines import EngineBuildError, TensorRTEngine, TensorSpec, build_engine
from trtcheck.engines.cache import (
    CACHE_DIR_ENV,
    CacheKey,
    EngineCache,
    default_cache_dir,
)
from trtcheck.engines.tensorrt import BuilderOptions, CudaRuntime, ShapeRange, optimization_profile, shape_ranges
from trtcheck.errors import ParserRefusedError, SettingsError

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
    assert profile.shapes == {"a": ((2, 3), (2, 3), (2, 3)), "x": ((1, 3), (8, 3), (32, 3))}


def test_the_engine_builds_one_profile_from_its_specs(trt, sub_model):
    TensorRTEngine(sub_model, [A, B], [OUT])
    (config,) = trt.state.configs
    assert [p.shapes for p in config.profiles] == [{"a": ((2, 3),) * 3, "b": ((2, 3),) * 3}]


# -- builder settings ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("precision", "flags", "strongly_typed"),
    [("fp32", set(), True), ("fp16", {"FP16", "TF32"}, False), ("bf16", {"BF16", "TF32"}, False)],
)
def test_precision_sets_the_builder_flag_and_typing(trt, sub_model, precision, flags, strongly_typed):
    settings = trtcheck.Settings(precision=precision, workspace_size=123 << 20)
    build_engine(sub_model, [A, B], [OUT], backend="tensorrt", settings=settings)
    (config,), (network, *_) = trt.state.configs, trt.state.networks
    assert {flag.name for flag in config.flags} == flags
    assert network.strongly_typed is strongly_typed
    assert config.pool_limits == {trt.MemoryPoolType.WORKSPACE: 123 << 20}


def test_workspace_zero_leaves_tensorrts_default(trt, sub_model):
    TensorRTEngine(sub_model, [A, B], [OUT], settings=trtcheck.Settings(workspace_size=0))
    assert trt.state.configs[0].pool_limits == {}


def test_defaults_are_fp32_and_one_gib():
    assert BuilderOptions.from_settings(None) == BuilderOptions.from_settings(trtcheck.Settings()) == BuilderOptions("fp32", 1 << 30, ())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"precision": "float16"}, r"precision must be one of 'fp32', 'fp16', 'bf16', got 'float16': write 'fp16'"),
        ({"precision": torch.bfloat16}, r"got torch.bfloat16: write 'bf16'"),
        ({"precision": "int8"}, r"precision must be one of .*got 'int8'$"),
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
    assert context.addresses["a"] == a.data_ptr() and context.addresses["b"] == b.data_ptr()
    assert context.addresses["out"] == result.data_ptr()


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
    assert trt.state.contexts[0].streams == [1234]
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


def test_a_failed_build_quotes_tensorrts_log(trt, sub_model, caplog):
    trt.state.fail_build = "could not find any implementation for node Sub"
    expected = r"building the engine failed.*TensorRT said: could not find any implementation for node Sub"
    with pytest.raises(EngineBuildError, match=expected):
        TensorRTEngine(sub_model, [A, B], [OUT])
    assert ("trtcheck.tensorrt", 40, "TensorRT ERROR: could not find any implementation for node Sub") in caplog.record_tuples


# -- the engine cache ----------------------------------------------------------------------------------------------


def key(**changes):
    base = {
        "tensorrt_version": "10.99.0",
        "device_name": "Fake GPU",
        "compute_capability": (9, 0),
        "builder": BuilderOptions().key({"a": ShapeRange.static((2, 3))}),
    }
    onnx_bytes = changes.pop("onnx_bytes", b"onnx")
    base.update(changes)
    return CacheKey.of(onnx_bytes, **base)


@pytest.mark.parametrize(
    "change",
    [
        {"onnx_bytes": b"onnx2"},
        {"tensorrt_version": "10.99.1"},
        {"device_name": "Other GPU"},
        {"compute_capability": (8, 9)},
        {"builder": BuilderOptions("fp16").key({"a": ShapeRange.static((2, 3))})},
        {"builder": BuilderOptions("bf16").key({"a": ShapeRange.static((2, 3))})},
        {"builder": BuilderOptions(workspace_size=1 << 31).key({"a": ShapeRange.static((2, 3))})},
        {"builder": BuilderOptions().key({"a": ShapeRange((1, 3), (2, 3), (4, 3))})},
        {"builder": BuilderOptions().key({"b": ShapeRange.static((2, 3))})},
    ],
    ids=["onnx", "version", "device", "capability", "fp16", "bf16", "workspace", "profile", "input name"],
)
def test_every_component_changes_the_key(change):
    assert key().digest == key().digest
    assert key(**change).digest != key().digest


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


def test_the_setting_names_the_directory_and_can_turn_the_cache_off(trt, sub_model, tmp_path):
    engine = build(sub_model, settings=trtcheck.Settings(engine_cache_dir=str(tmp_path / "mine")))
    assert entry(engine).parent == tmp_path / "mine" and entry(engine).exists()
    off = build(sub_model, settings=trtcheck.Settings(engine_cache=False))
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
    trt.__version__ = "10.100.0"
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
        engine = build(sub_model, settings=trtcheck.Settings(engine_cache_dir=str(blocker / "engines")))
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


def test_compile_passes_the_precision_setting_to_the_builder(trt):
    trtcheck.compile(ReluErfNeg(), (torch.randn(4, 5),), trtcheck.Settings(min_block_size=1, precision="fp16"), backend="tensorrt")
    assert len(trt.state.configs) == 2
    assert all({f.name for f in config.flags} == {"FP16", "TF32"} for config in trt.state.configs)


@pytest.mark.parametrize("keep", [["erf"], ["aten::erf"], ["aten.erf.default"]])
def test_fp32_nodes_constrain_their_layers_to_float32_and_the_builder_obeys(trt, keep):
    """MOCK (fake_tensorrt: no TensorRT here): the layers parsed from the kept node's ONNX nodes get float32
    precision and output types, the builder config OBEY_PRECISION_CONSTRAINTS; the other layers are untouched.
    Whether real TensorRT names its layers after the ONNX nodes is for test_tensorrt_gpu.py on a GPU."""
    settings = trtcheck.Settings(min_block_size=1, precision="fp16", fp32_nodes=keep)
    compiled = trtcheck.compile(ReluErfNeg(), (torch.randn(4, 5),), settings, backend="tensorrt")
    layers = [layer for network in trt.state.networks for layer in network.layers]  # both segments'
    kept = {layer.name for layer in layers if layer.precision == trt.float32}
    assert kept and all(name.startswith("erf/") for name in kept), [layer.name for layer in layers]
    assert all(layer.output_types == {0: trt.float32} for layer in layers if layer.name in kept)
    assert all(layer.precision is None and not layer.output_types for layer in layers if layer.name not in kept)
    assert trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS in trt.state.configs[-1].flags
    assert compiled.partition.settings.fp32_nodes == keep
