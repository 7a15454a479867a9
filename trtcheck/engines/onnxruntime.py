"""The ONNX Runtime engine: the default backend, and the only one on machines without a CUDA GPU.

It stands in for TensorRT so that partitioning and conversion can be checked anywhere. Every engine
boundary is crossed on each forward pass of a partitioned model, so the call path avoids copies:
torch tensors are handed to ONNX Runtime by pointer through I/O binding, and outputs are written
straight into torch tensors allocated beforehand from the (static) output specs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import onnx
import onnxruntime as ort
import torch

from trtcheck.engines.base import (
    Engine,
    EngineBuildError,
    TensorSpec,
    check_model_signature,
    onnx_elem_type,
    register_backend,
)

__all__ = ["OnnxRuntimeEngine"]

_CPU = torch.device("cpu")
_CUDA_EP = "CUDAExecutionProvider"


def _cuda_ep_usable() -> bool:
    """True when ONNX Runtime was built with CUDA *and* torch sees a GPU to allocate outputs on."""
    return _CUDA_EP in ort.get_available_providers() and torch.cuda.is_available()


def _has_data(spec: TensorSpec) -> bool:
    """True when ``spec`` is static and non-empty: only such outputs get a pre-allocated buffer."""
    return spec.is_static and math.prod(spec.shape) > 0


class OnnxRuntimeEngine(Engine):
    """Runs one segment's ONNX model in an ``onnxruntime.InferenceSession``.

    Intra-op threads follow ``torch.get_num_threads()`` at build time so the TensorRT-side and the
    PyTorch-side of a partitioned model compete for the same number of cores (fair timing, no
    oversubscription). Calls are thread-safe: each call uses its own I/O binding and output buffers.
    CUDA inputs run on the CUDA execution provider when ONNX Runtime has one; otherwise they are
    copied to the CPU and the results moved back to the inputs' device.
    """

    backend: ClassVar[str] = "onnxruntime"

    def __init__(self, model: onnx.ModelProto, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]):
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        check_model_signature(self.backend, model, self.inputs, self.outputs)
        options = ort.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3  # warnings about unused initializers etc. are noise here
        self._cuda = _cuda_ep_usable()
        providers = [_CUDA_EP, "CPUExecutionProvider"] if self._cuda else ["CPUExecutionProvider"]
        try:
            self._session = ort.InferenceSession(model.SerializeToString(), options, providers=providers)
        except Exception as exc:  # ORT raises several pybind exception types (Fail, InvalidGraph, ...)
            raise EngineBuildError(
                f"onnxruntime: could not create a session for the segment's ONNX model: {exc}. "
                "Run onnx.checker.check_model(model, full_check=True) on it to find the faulty node, "
                "then fix that op's converter or keep the op in PyTorch"
            ) from exc
        # Per-call constants, precomputed so the hot path is a few attribute reads per tensor.
        self._in = tuple((s.name, onnx_elem_type(s.dtype)) for s in self.inputs)
        self._out = tuple(
            (s.name, s.shape if s.is_static else None, s.dtype, onnx_elem_type(s.dtype), _has_data(s))
            for s in self.outputs
        )
        self._has_dynamic_outputs = not all(s.is_static for s in self.outputs)

    @classmethod
    def is_available(cls) -> bool:
        """ONNX Runtime is a hard dependency of trtcheck, so this backend is always available."""
        return True

    @property
    def session(self) -> ort.InferenceSession:
        """The underlying session (its options, providers and profiling are useful for diagnosis)."""
        return self._session

    def __call__(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        home = tensors[0].device if tensors else _CPU
        if home.type == "cuda" and self._cuda:
            device, device_type, device_id = home, "cuda", home.index or 0
            torch.cuda.current_stream(home).synchronize()  # ORT runs on its own stream
        else:
            device, device_type, device_id = _CPU, "cpu", 0
        prepared = self.prepare_inputs(tensors, device)
        binding = self._session.io_binding()
        for (name, elem), tensor in zip(self._in, prepared):
            binding.bind_input(name, device_type, device_id, elem, tuple(tensor.shape), tensor.data_ptr())
        results: list[torch.Tensor | None] = []
        for name, shape, dtype, elem, preallocate in self._out:
            if preallocate:
                out = torch.empty(shape, dtype=dtype, device=device)
                binding.bind_output(name, device_type, device_id, elem, shape, out.data_ptr())
                results.append(out)
            else:
                # Unknown shape (fetched below) or zero-size (ORT rejects a null buffer pointer, and
                # an empty tensor carries no data to fetch): let ORT allocate.
                binding.bind_output(name, device_type, device_id)
                results.append(None if shape is None else torch.empty(shape, dtype=dtype, device=device))
        self._session.run_with_iobinding(binding)
        if self._has_dynamic_outputs:
            # DLPack hands ORT's buffer to torch without a copy and keeps it alive with the tensor.
            values = binding.get_outputs()
            results = [torch.from_dlpack(v) if r is None else r for r, v in zip(results, values)]
        if device != home:
            return tuple(r.to(home) for r in results)
        return tuple(results)


register_backend(OnnxRuntimeEngine.backend, OnnxRuntimeEngine)
