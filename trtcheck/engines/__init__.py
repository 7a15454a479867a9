"""Engines run the ONNX model of one TensorRT segment: ONNX Runtime anywhere, TensorRT on CUDA machines.

Importing this package registers both backends; ``build_engine(..., backend="auto")`` picks the best
one available here (see ``resolve_backend``).
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
from trtcheck.engines.specs import ShapeRange, TensorSpec
from trtcheck.engines.tensorrt import TensorRTEngine
from trtcheck.errors import EngineBuildError

__all__ = [
    "BackendChoice",
    "Engine",
    "EngineBuildError",
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
