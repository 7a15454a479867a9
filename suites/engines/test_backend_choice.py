"""An explicit backend that cannot run here is an error before anything is built; ``auto`` says what it chose.

(Issue 8: ``backend='tensorrt'`` on a machine without TensorRT used to compile with every segment in
PyTorch, and verification then passed having converted nothing.)
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

from trtcheck.engines import (
    BackendChoice,
    Engine,
    TensorSpec,
    backend_versions,
    base,
    build_engine,
    choose_backend,
    describe_backend,
    register_backend,
    resolve_backend,
)
from trtcheck.errors import BackendError, BackendUnavailableError, TrtcheckError

X, Y = TensorSpec("x", (2,), torch.float32), TensorSpec("y", (2,), torch.float32)


@pytest.fixture
def no_tensorrt(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", None)


@pytest.fixture
def fake_tensorrt(monkeypatch):
    module = types.ModuleType("tensorrt")
    module.__version__ = "11.1.0.106"
    monkeypatch.setitem(sys.modules, "tensorrt", module)


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def fake_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(base, "_device", lambda: "cuda:0 Fake GPU (CUDA 13.0)")


def test_explicit_tensorrt_without_the_package_names_it_and_the_fix(no_tensorrt, fake_cuda):
    with pytest.raises(BackendUnavailableError) as info:
        resolve_backend("tensorrt")
    message = str(info.value)
    assert "engine backend 'tensorrt' was requested but cannot run on this machine" in message
    assert "missing the `tensorrt` package" in message and "CUDA device" not in message
    assert "pip install 'trtcheck[tensorrt]'" in message and "backend='onnxruntime'" in message
    assert isinstance(info.value, (BackendError, TrtcheckError, ValueError))


def test_explicit_tensorrt_without_cuda_names_the_device(fake_tensorrt, no_cuda):
    with pytest.raises(BackendUnavailableError, match=r"missing a CUDA device \(torch.cuda.is_available\(\) is False") as info:
        resolve_backend("tensorrt")
    assert "`tensorrt` package" not in str(info.value)


def test_explicit_tensorrt_missing_both_names_both(no_tensorrt, no_cuda):
    with pytest.raises(BackendUnavailableError, match=r"missing the `tensorrt` package \(.*\) and a CUDA device"):
        resolve_backend("tensorrt")


def test_build_engine_refuses_an_unavailable_backend_before_building(no_tensorrt, make_model):
    from onnx import helper

    model = make_model([helper.make_node("Identity", ["x"], ["y"])], [X], [Y])
    with pytest.raises(BackendUnavailableError, match="tensorrt"):
        build_engine(model, [X], [Y], backend="tensorrt")


def test_unknown_backend_is_a_backend_error_and_still_a_value_error():
    with pytest.raises(BackendError, match=r"did you mean 'tensorrt'\?") as info:
        resolve_backend("tensorrtt")
    assert isinstance(info.value, ValueError) and not isinstance(info.value, BackendUnavailableError)


def test_auto_says_why_tensorrt_was_not_chosen(no_tensorrt, no_cuda):
    choice = choose_backend("auto")
    assert choice == BackendChoice("auto", "onnxruntime", choice.why)
    assert choice.why.startswith("auto: tensorrt cannot run here, missing the `tensorrt` package")
    assert choice.why.endswith("; using onnxruntime")
    text = describe_backend("auto")
    first, second = text.splitlines()
    assert first == f"engine backend: onnxruntime ({choice.why})"
    assert second.startswith(f"versions: torch {torch.__version__}, onnxruntime ")
    assert "tensorrt not installed; device: cpu (no CUDA device" in second
    assert describe_backend() == text  # "auto" is the default


def test_auto_picks_tensorrt_where_it_can_run(fake_tensorrt, fake_cuda):
    assert resolve_backend("auto") == "tensorrt"
    text = describe_backend("auto")
    assert text.startswith("engine backend: tensorrt (auto: TensorRT and a CUDA device are present)\n")
    assert text.endswith("tensorrt 11.1.0.106; device: cuda:0 Fake GPU (CUDA 13.0)")


def test_explicit_choice_says_so():
    assert describe_backend("onnxruntime").startswith("engine backend: onnxruntime (requested explicitly)\nversions: ")


def test_describe_raises_like_resolve(no_tensorrt):
    with pytest.raises(BackendUnavailableError):
        describe_backend("tensorrt")
    with pytest.raises(BackendError, match="unknown engine backend 'nope'"):
        describe_backend("nope")


def test_versions_name_every_package_and_the_device():
    versions = backend_versions()
    assert list(versions) == ["torch", "onnxruntime", "tensorrt", "device"]
    assert versions["torch"] == torch.__version__


def test_a_custom_backend_says_why_it_is_unavailable(monkeypatch):
    monkeypatch.setattr(base, "_BACKENDS", dict(base._BACKENDS))

    class Remote(Engine):
        backend = "remote"
        install_hint = "Fix: start the inference server"

        @classmethod
        def unavailable_reason(cls):
            return "a reachable inference server"

        def __call__(self, *tensors):
            raise NotImplementedError

    class Legacy(Remote):  # an older backend overriding only is_available still gets a reason
        backend = "legacy"
        install_hint = ""

        @classmethod
        def unavailable_reason(cls):
            return None

        @classmethod
        def is_available(cls):
            return False

    register_backend("remote", Remote)
    register_backend("legacy", Legacy)
    expected = r"missing a reachable inference server\. Fix: start the inference server, or use backend="
    with pytest.raises(BackendUnavailableError, match=expected):
        resolve_backend("remote")
    with pytest.raises(BackendUnavailableError, match=r"missing Legacy\.is_available\(\) returned False"):
        resolve_backend("legacy")
    assert Remote.is_available() is False
