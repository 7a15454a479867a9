"""Engines run the finished ONNX graph of one TensorRT segment: ONNX Runtime anywhere, TensorRT on CUDA machines.

The graph carries its precision in its types (the compiler writes it); ``EngineOptions`` say the rest (TF32,
TensorRT's workspace and engine cache). Importing this package registers both backends and loads no converter;
``build_engine(..., backend="auto")`` picks the best one available here (see ``resolve_backend``).
"""

from trtcheck.engines.base import (
    BackendChoice,
    Engine,
    available_backends,
    backend_versions,
    build_engine,
    choose_backend,
    describe_backend,
    register_backend,
    registered_backends,
    resolve_backend,
)
from trtcheck.engines.onnxruntime import OnnxRuntimeEngine
from trtcheck.engines.specs import EngineOptions, ShapeRange, TensorSpec
from trtcheck.engines.tensorrt import TensorRTEngine
from trtcheck.errors import EngineBuildError

__all__ = [
    "BackendChoice",
    "Engine",
    "EngineBuildError",
    "EngineOptions",
    "OnnxRuntimeEngine",
    "ShapeRange",
    "TensorRTEngine",
    "TensorSpec",
    "available_backends",
    "backend_versions",
    "build_engine",
    "choose_backend",
    "describe_backend",
    "register_backend",
    "registered_backends",
    "resolve_backend",
]
