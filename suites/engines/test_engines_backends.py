"""Backend selection and the TensorRT backend's behaviour where TensorRT cannot exist (no GPU here)."""

from __future__ import annotations

import sys
import types

import pytest
import torch
from onnx import helper

from trtcheck.engines import (
    Engine,
    EngineBuildError,
    OnnxRuntimeEngine,
    TensorRTEngine,
    TensorSpec,
    available_backends,
    base,
    build_engine,
    register_backend,
    registered_backends,
    resolve_backend,
)

X, Y = TensorSpec("x", (2,), torch.float32), TensorSpec("y", (2,), torch.float32)


@pytest.fixture
def identity_model(make_model):
    return make_model([helper.make_node("Identity", ["x"], ["y"])], [X], [Y])


@pytest.fixture
def no_tensorrt(monkeypatch):
    """Make ``import tensorrt`` fail, whatever is installed."""
    monkeypatch.setitem(sys.modules, "tensorrt", None)


@pytest.fixture
def fake_tensorrt(monkeypatch):
    """Pretend the ``tensorrt`` package (of a supported version) is importable (it never is on this CPU-only machine)."""
    module = types.ModuleType("tensorrt")
    module.__version__ = "11.1.0.106"
    monkeypatch.setitem(sys.modules, "tensorrt", module)


def test_both_backends_registered():
    assert registered_backends() == ["onnxruntime", "tensorrt"]
    assert "onnxruntime" in available_backends()


def test_resolve_known_names(fake_tensorrt, monkeypatch):
    assert resolve_backend("onnxruntime") == "onnxruntime"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_backend("tensorrt") == "tensorrt"  # only where it can run: see test_backend_choice.py


def test_auto_is_onnxruntime_without_tensorrt(no_tensorrt):
    assert resolve_backend("auto") == "onnxruntime"
    assert available_backends() == ["onnxruntime"]


def test_auto_is_onnxruntime_without_cuda(fake_tensorrt, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_backend("auto") == "onnxruntime"


def test_auto_is_tensorrt_with_tensorrt_and_cuda(fake_tensorrt, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_backend("auto") == "tensorrt"
    assert "tensorrt" in available_backends()


@pytest.mark.parametrize(
    ("name", "match"),
    [
        (
            "onnxrutime",
            r"unknown engine backend 'onnxrutime' \(did you mean 'onnxruntime'\?\); valid backends: auto, onnxruntime, tensorrt",
        ),
        ("tvm", r"unknown engine backend 'tvm'; valid backends: auto, onnxruntime, tensorrt"),
        ("", r"unknown engine backend ''"),
    ],
)
def test_unknown_backend_lists_valid_names(name, match):
    with pytest.raises(ValueError, match=match):
        resolve_backend(name)


def test_build_engine_auto_uses_onnxruntime_here(identity_model, no_tensorrt):
    engine = build_engine(identity_model, [X], [Y])
    assert isinstance(engine, OnnxRuntimeEngine) and engine.backend == "onnxruntime"
    assert "OnnxRuntimeEngine(inputs=[x: float32[2]], outputs=[y: float32[2]])" == repr(engine)


def test_tensorrt_missing_package_is_a_clear_build_error(identity_model, no_tensorrt):
    with pytest.raises(EngineBuildError) as info:  # build_engine refuses earlier: see test_backend_choice.py
        TensorRTEngine(identity_model, [X], [Y])
    message = str(info.value)
    assert message.startswith(
        "TensorRT backend needs the `tensorrt` package and a CUDA GPU: pip install 'trtcheck[tensorrt]' "
        "on a CUDA machine, or use backend='onnxruntime'"
    )
    assert "missing here: the `tensorrt` package" in message


def test_tensorrt_without_cuda_is_a_clear_build_error(identity_model, fake_tensorrt, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(EngineBuildError, match=r"missing here: a CUDA GPU"):
        TensorRTEngine(identity_model, [X], [Y])


def test_register_custom_backend(identity_model, monkeypatch):
    monkeypatch.setattr(base, "_BACKENDS", dict(base._BACKENDS))  # leave the real registry untouched

    class Doubling(Engine):
        """A toy backend: proves a new backend plugs in by name alone."""

        backend = "doubling"

        def __init__(self, model, inputs, outputs):
            self.inputs, self.outputs = tuple(inputs), tuple(outputs)

        def __call__(self, *tensors):
            return tuple(t * 2 for t in self.prepare_inputs(tensors, torch.device("cpu")))

    register_backend("doubling", Doubling)
    engine = build_engine(identity_model, [X], [Y], backend="doubling")
    torch.testing.assert_close(engine(torch.ones(2))[0], torch.full((2,), 2.0))
    with pytest.raises(ValueError, match="expected shape"):
        engine(torch.ones(3))
    with pytest.raises(ValueError, match="already registered"):
        register_backend("doubling", OnnxRuntimeEngine)
    with pytest.raises(ValueError, match="reserved"):
        register_backend("auto", Doubling)


def test_tensor_spec_normalises_shape():
    spec = TensorSpec("t", torch.Size([1, 2]), torch.float32)
    assert spec.shape == (1, 2) and type(spec.shape) is tuple
    assert spec == TensorSpec.like("t", torch.empty(1, 2))
    assert spec.is_static and not TensorSpec("t", (-1, 2), torch.float32).is_static
    assert TensorSpec("t", (-1, 2), torch.float32).matches_shape((7, 2))
    assert not spec.matches_shape((1, 2, 1))
