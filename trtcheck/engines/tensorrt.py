"""The TensorRT engine: builds a serialized TensorRT engine from a segment's ONNX model and runs it.

TensorRT is optional (``pip install 'trtcheck[tensorrt]'``) and needs a CUDA GPU, so this module must
import cleanly without it: the ``tensorrt`` package is imported only when an engine is built, and a
missing dependency becomes an ``EngineBuildError`` that says how to fix it.

The network is created *strongly typed* (when the installed TensorRT supports it) so TensorRT keeps
the ONNX model's dtypes instead of picking lower precisions itself: trtcheck exists to prove a split
model still computes what it did, and silent FP16 would make that check meaningless.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import onnx
import torch

from trtcheck.engines.base import (
    Engine,
    EngineBuildError,
    TensorSpec,
    check_model_signature,
    import_tensorrt,
    register_backend,
    tensorrt_import_error,
)

__all__ = ["MISSING_DEPENDENCY_MESSAGE", "TensorRTEngine"]

MISSING_DEPENDENCY_MESSAGE = (
    "TensorRT backend needs the `tensorrt` package and a CUDA GPU: pip install 'trtcheck[tensorrt]' "
    "on a CUDA machine, or use backend='onnxruntime'"
)

_WORKSPACE_BYTES = 1 << 30


class TensorRTEngine(Engine):
    """Runs one segment as a TensorRT engine on the CUDA device current at build time.

    Calls enqueue on ``torch.cuda.current_stream()`` so the engine is ordered with surrounding
    PyTorch work without host synchronisation. CPU inputs are copied to the GPU and the results
    copied back, so a CPU-resident partitioned model still works (slowly). One execution context is
    shared by all calls, so an engine must not be called from several threads at once.
    """

    backend: ClassVar[str] = "tensorrt"
    install_hint: ClassVar[str] = (
        "Fix: pip install 'trtcheck[tensorrt]' on a machine with an NVIDIA GPU and a CUDA build of torch"
    )

    def __init__(self, model: onnx.ModelProto, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]):
        trt = import_tensorrt()
        if trt is None or not torch.cuda.is_available():
            missing = "the `tensorrt` package" if trt is None else "a CUDA GPU (torch.cuda.is_available() is False)"
            raise EngineBuildError(f"{MISSING_DEPENDENCY_MESSAGE} (missing here: {missing})")
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        check_model_signature(self.backend, model, self.inputs, self.outputs)
        dynamic = [s.name for s in self.inputs if not s.is_static]
        if dynamic:
            raise EngineBuildError(
                f"tensorrt: inputs {dynamic} have unknown dimensions; this backend builds engines for "
                "static shapes only. Export with static shapes or use backend='onnxruntime'"
            )
        self._device = torch.device("cuda", torch.cuda.current_device())
        self._logger = trt.Logger(trt.Logger.WARNING)
        self._engine = self._build(trt, model)
        self._context = self._engine.create_execution_context()
        if self._context is None:
            raise EngineBuildError("tensorrt: could not create an execution context (out of GPU memory?)")
        self._input_names = tuple(s.name for s in self.inputs)
        # Output shapes: the specs' when static, else what TensorRT inferred for these static inputs.
        self._out = tuple(
            (s.name, s.shape if s.is_static else tuple(self._engine.get_tensor_shape(s.name)), s.dtype)
            for s in self.outputs
        )
        data_dependent = [name for name, shape, _ in self._out if any(d < 0 for d in shape)]
        if data_dependent:
            raise EngineBuildError(
                f"tensorrt: outputs {data_dependent} have data-dependent shapes, which this backend does "
                "not support yet; keep the op producing them in PyTorch or use backend='onnxruntime'"
            )

    def _build(self, trt: Any, model: onnx.ModelProto) -> Any:
        """Parse ``model`` and build a deserialized ``ICudaEngine``, turning every failure into a clear error."""
        builder = trt.Builder(self._logger)
        flags = 0
        strongly_typed = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
        if strongly_typed is not None:
            flags |= 1 << int(strongly_typed)
        network = builder.create_network(flags)
        parser = trt.OnnxParser(network, self._logger)
        if not parser.parse(model.SerializeToString()):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise EngineBuildError(
                f"tensorrt: the ONNX parser rejected the segment's model: {errors}. Keep the failing op "
                "in PyTorch (torch_executed_ops) or fix its converter"
            )
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, _WORKSPACE_BYTES)
        serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            raise EngineBuildError(
                "tensorrt: building the engine failed (see the TensorRT log above); common causes are "
                "ops without a TensorRT implementation for these dtypes, or too little GPU memory"
            )
        self._runtime = trt.Runtime(self._logger)  # must outlive the engines it deserializes
        engine = self._runtime.deserialize_cuda_engine(serialized)
        if engine is None:
            raise EngineBuildError("tensorrt: the serialized engine could not be deserialized")
        return engine

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """None when the ``tensorrt`` package imports and torch sees a CUDA device; else what is missing."""
        missing = []
        error = tensorrt_import_error()
        if error is not None:
            missing.append(f"the `tensorrt` package ({error})")
        if not torch.cuda.is_available():
            built = f"torch {torch.__version__}, built with CUDA {torch.version.cuda}" if torch.version.cuda else f"torch {torch.__version__}, built without CUDA"
            missing.append(f"a CUDA device (torch.cuda.is_available() is False; {built})")
        return " and ".join(missing) or None

    def __call__(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        home = tensors[0].device if tensors else self._device
        prepared = self.prepare_inputs(tensors, self._device)
        context = self._context
        for name, tensor in zip(self._input_names, prepared):
            context.set_tensor_address(name, tensor.data_ptr())
        results = []
        for name, shape, dtype in self._out:
            out = torch.empty(shape, dtype=dtype, device=self._device)
            context.set_tensor_address(name, out.data_ptr())
            results.append(out)
        stream = torch.cuda.current_stream(self._device)
        if not context.execute_async_v3(stream.cuda_stream):
            raise RuntimeError("tensorrt: execute_async_v3 failed (see the TensorRT log)")
        # Copies made by prepare_inputs were allocated on this stream, so freeing them after the
        # enqueue is safe: the caching allocator only reuses their memory for later work on it.
        if home != self._device:
            return tuple(r.to(home) for r in results)
        return tuple(results)


register_backend(TensorRTEngine.backend, TensorRTEngine)
