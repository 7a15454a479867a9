"""The ONNX Runtime engine: the default backend, and the only one on machines without a CUDA GPU.

It stands in for TensorRT so that partitioning and conversion can be checked anywhere. Every engine
boundary is crossed on each forward pass of a partitioned model, so the call path avoids copies:
torch tensors are handed to ONNX Runtime by pointer through I/O binding (ONNX Runtime's pybind binding
directly where it can: see ``_direct_binding``), and outputs are written straight into torch tensors
allocated beforehand from the (static) output specs.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import ClassVar

import onnx
import onnxruntime as ort
import torch
from onnx import TensorProto

from trtcheck.engines.base import Engine, check_model_signature, onnx_elem_type, register_backend
from trtcheck.engines.emulation import emulate, emulate_fp4, emulate_tf32, needs_emulation
from trtcheck.engines.specs import EngineOptions, TensorSpec
from trtcheck.errors import EngineBuildError
from trtcheck.onnx_format.origins import explain_node_names, node_origins
from trtcheck.onnx_format.weights import weight_bytes

__all__ = ["OnnxRuntimeEngine", "SPIN_POLICIES", "session_options"]

_CPU = torch.device("cpu")
_CUDA_EP = "CUDAExecutionProvider"
_GLOBAL_POOLS = False  # set once a session was refused because this process uses ONNX Runtime's global pools


def _cuda_ep_usable() -> bool:
    """True when ONNX Runtime was built with CUDA *and* torch sees a GPU to allocate outputs on."""
    return _CUDA_EP in ort.get_available_providers() and torch.cuda.is_available()


WRONG_REWRITES = ["ReluQuantRewrite"]
"""ONNX Runtime's graph rewrites that change what a graph computes, off in every session whatever its options.
``ReluQuantRewrite`` (class ``ReluQuantFusion``, ONNX Runtime 1.32, level 2) drops a Relu that feeds a
QuantizeLinear unless the zero point is int8/uint8/int16: with TensorRT 11's FP8 (a float8e4m3fn zero point), or
int4, the negatives then pass through, where TensorRT's Relu zeroes them (a two-conv FP8 net errs by 14.5% instead
of 0.56%). Every other optimization stays on; suites/engines/test_ort_rewrites.py fails if the guard goes."""

SPIN_POLICIES = ("stop_after_run", "never", "always")
"""How a session's worker threads wait for work: ``never`` (the default: ``session.intra_op.allow_spinning``
and ``session.inter_op.allow_spinning`` "0", workers block), ``stop_after_run`` (spin while a run is in
progress, block once it returns: ``session.force_spinning_stop`` "1") or ``always`` (ONNX Runtime's own
default: idle workers keep spinning after a run, which makes many-segment models 5-10x slower: docs/performance.md,
section "ONNX Runtime engines: threads, spinning and the call path")."""


def session_options(threads: int | None = None, spin: str = "never") -> ort.SessionOptions:
    """The ``SessionOptions`` every ``OnnxRuntimeEngine`` gets unless it is given its own.

    ``threads`` (intra-op) defaults to ``torch.get_num_threads()`` capped at the cores this process may use;
    ``spin`` is one of ``SPIN_POLICIES``. Each session keeps its own thread pool (ONNX Runtime's global pools
    must be configured before the first session of the process, and their spinning cannot be turned off
    from Python), one inter-op thread, and all graph optimizations.
    """
    if spin not in SPIN_POLICIES:
        raise ValueError(f"spin must be one of {', '.join(SPIN_POLICIES)}, got {spin!r}")
    options = ort.SessionOptions()
    options.intra_op_num_threads = default_threads() if threads is None else max(1, int(threads))
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # warnings about unused initializers etc. are noise here
    if spin == "stop_after_run":
        options.add_session_config_entry("session.force_spinning_stop", "1")
    elif spin == "never":
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    return options


def _reduces_by_scatter(model: onnx.ModelProto) -> bool:
    """Whether ``model`` holds a ScatterND or ScatterElements that reduces (``reduction`` other than "none"): ONNX
    Runtime 1.32's CPU kernels for them give different results from run to run with more than one intra-op thread
    where indices repeat (timm's volo_d1_224, whose ``F.fold`` is an accumulating index_put: up to 0.03 off eager on
    one run in four, with 2 threads; deterministic and within float32's tolerances with 1), so such an engine runs
    on one thread: what a CPU engine computes must be what TensorRT computes, every time."""
    return any(
        node.op_type in ("ScatterND", "ScatterElements")
        and any(a.name == "reduction" and a.s not in (b"", b"none") for a in node.attribute)
        for node in model.graph.node
    )


def default_threads() -> int:
    """Intra-op threads of an engine: PyTorch's intra-op thread count, never more than the usable cores."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(torch.get_num_threads(), cores))


def _direct_binding(session: ort.InferenceSession):
    """``(new_binding, run, cpu)``: ONNX Runtime's own (pybind) I/O binding type, run method and CPU device,
    for calls that skip the Python wrapper of ``onnxruntime.IOBinding``; None where this onnxruntime has none.

    The wrapper costs microseconds a call on this path, paid at every crossing (docs/performance.md, section
    "ONNX Runtime engines: threads, spinning and the call path"). This relies on names onnxruntime does not promise
    to keep (``capi._pybind_state``, ``InferenceSession._sess``, ``OrtDevice._get_c_device``): where one
    is missing, the engine falls back to the public ``io_binding()`` path.
    """
    try:
        from onnxruntime.capi import _pybind_state

        new_binding = _pybind_state.SessionIOBinding
        sess = session._sess
        cpu = ort.OrtDevice.make("cpu", 0)._get_c_device()
        run = sess.run_with_iobinding
    except (ImportError, AttributeError):
        return None
    return (lambda: new_binding(sess)), run, cpu


WEIGHTS_FILE_BYTES = 1 << 20
"""Weights of at least this many bytes in all reach ONNX Runtime in an external-data file (``_weights_file``);
fewer, as in-memory external initializers (``_add_weights``), which skips the file for the thousands of small
engines a test run builds."""

_WEIGHTS_ALIGNMENT = 4096  # each weight starts on a page of the data file, so that ONNX Runtime can map it


def _add_weights(options: ort.SessionOptions, weights: Mapping[str, torch.Tensor]) -> list[ort.OrtValue]:
    """Hand ``weights`` (the model's weight placeholders' tensors, CPU and contiguous) to the session as in-memory
    external initializers, without a copy here: ONNX Runtime copies each into the session while it is created, so
    the engine owns its weights (changing the tensors afterwards changes no engine: ``suites/engines``) and
    the serialized model it parses holds none, which saves the bytes, ONNX Runtime's parse of them and its
    ModelProto's copy (docs/performance.md, section "ONNX Runtime engines: threads, spinning and the call path").
    The values returned must outlive the session's creation:
    each holds its memory (a permuted weight's contiguous copy), which the options only point to."""
    names, values = [], []
    for name, tensor in weights.items():
        tensor = tensor.detach().contiguous()  # a view of a weight (a permuted one) is copied, the others not
        if tensor.dtype == torch.bfloat16:  # numpy has no bfloat16: the same bytes as int16, typed by ONNX's enum
            value = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(tensor.view(torch.int16).numpy(), onnx_elem_type(tensor.dtype))
        else:
            value = ort.OrtValue.ortvalue_from_numpy(tensor.numpy())
        names.append(name)
        values.append(value)
    options.add_external_initializers(names, values)
    return values


def _weights_file(model: onnx.ModelProto, weights: Mapping[str, torch.Tensor], folder: str) -> str:
    """Save ``model`` in ``folder`` with ``weights`` in one external-data file beside it, written straight from the
    tensors' memory (no serialized copy), and return the model's path: what ``torch.onnx.export`` hands ONNX
    Runtime. Over a file, the session keeps each weight once: the pre-packed copy of a MatMul or Conv weight
    replaces the original, where over in-memory initializers it keeps both (docs/performance.md, section "ONNX
    Runtime engines: threads, spinning and the call path")."""
    saved = onnx.ModelProto()
    saved.CopyFrom(model)  # holds no weight data: cheap
    data_name = "weights.bin"
    offset = 0
    with open(os.path.join(folder, data_name), "wb") as data:
        for proto in saved.graph.initializer:
            tensor = weights.get(proto.name) if proto.data_location == TensorProto.EXTERNAL else None
            if tensor is None:
                continue
            offset += -offset % _WEIGHTS_ALIGNMENT
            data.seek(offset)
            raw = weight_bytes(tensor)
            data.write(raw)
            del proto.external_data[:]
            for key, value in (("location", data_name), ("offset", str(offset)), ("length", str(raw.nbytes))):
                proto.external_data.add(key=key, value=value)
            offset += raw.nbytes
    path = os.path.join(folder, "segment.onnx")
    with open(path, "wb") as file:
        file.write(saved.SerializeToString())
    return path


@contextlib.contextmanager
def _session_source(
    model: onnx.ModelProto, options: ort.SessionOptions, weights: Mapping[str, torch.Tensor] | None
) -> Iterator[str | bytes]:
    """What ``ort.InferenceSession`` is given: a path into a temporary folder holding the model and its weights'
    file (``_weights_file``, ``WEIGHTS_FILE_BYTES`` or more), or the weight-free model's bytes with the weights
    added to ``options``. The folder is removed once the session exists: ONNX Runtime has read or mapped the data by
    then, and an unlinked file stays readable through a mapping."""
    if weights and sum(t.numel() * t.element_size() for t in weights.values()) >= WEIGHTS_FILE_BYTES:
        with tempfile.TemporaryDirectory(prefix="trtcheck-weights-", ignore_cleanup_errors=True) as folder:
            yield _weights_file(model, weights, folder)
        return
    held = _add_weights(options, weights) if weights else []
    yield model.SerializeToString()
    del held  # the session exists: it copied what these values hold


def _has_data(spec: TensorSpec) -> bool:
    """True when ``spec`` is static and non-empty: only such outputs get a pre-allocated buffer."""
    return spec.is_static and math.prod(spec.shape) > 0


class OnnxRuntimeEngine(Engine):
    """Runs one segment's ONNX model in an ``onnxruntime.InferenceSession``.

    Calls are thread-safe: each call uses its own I/O binding and output buffers. CUDA inputs run on the
    CUDA execution provider when ONNX Runtime has one; otherwise they are copied to the CPU and the
    results moved back to the inputs' device. ``options`` replaces the default ``session_options()``.

    Threads: engines share the machine. Each session has its own intra-op pool of
    ``min(torch.get_num_threads(), usable cores)`` threads (the caller's thread is one of them), one
    inter-op thread, and its workers never spin (``allow_spinning`` "0"): they block when idle. The rule
    is "engine threads + PyTorch threads *running* never above the cores": a stitched module runs its
    segments one after the other on the calling thread, so an engine's pool and PyTorch's pool never
    work at the same time, and each may use every core while the other waits, provided the waiting one
    does not spin. The engine cannot stop PyTorch's OpenMP workers from spinning (``OMP_WAIT_POLICY``,
    read at start-up); ``trtcheck.profile`` shows it as Torch segment time, and ``compile(torch_threads=)``
    decides PyTorch's thread count. The call path binds static CPU outputs through ONNX Runtime's pybind
    binding (``_direct_binding``), reused from call to call.

    Why these choices, with the options measured side by side and where many small engines lose their time:
    docs/performance.md, section "ONNX Runtime engines: threads, spinning and the call path".
    """

    backend: ClassVar[str] = "onnxruntime"
    takes_weights: ClassVar[bool] = True

    def __init__(
        self,
        model: onnx.ModelProto,
        inputs: Sequence[TensorSpec],
        outputs: Sequence[TensorSpec],
        *,
        options: ort.SessionOptions | None = None,
        weights: Mapping[str, torch.Tensor] | None = None,
    ):
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        check_model_signature(self.backend, model, self.inputs, self.outputs)
        self.node_origins = node_origins(model)
        """``{ONNX node name: what it was converted from}``, for error messages (``explain_node_names``)."""
        options = session_options() if options is None else options
        if _reduces_by_scatter(model):
            options.intra_op_num_threads = 1  # ONNX Runtime's CPU scatter reductions race over threads
        self.run_times: list[int] | None = None
        """None, or a list that every call appends its nanoseconds inside ``run_with_iobinding`` to (``trtcheck.profile``)."""
        self._cuda = _cuda_ep_usable()
        providers = [_CUDA_EP, "CPUExecutionProvider"] if self._cuda else ["CPUExecutionProvider"]
        global _GLOBAL_POOLS
        if _GLOBAL_POOLS:
            options.use_per_session_threads = False
        try:
            with _session_source(model, options, weights) as source:
                try:
                    self._session = ort.InferenceSession(source, options, providers=providers,
                                                         disabled_optimizers=WRONG_REWRITES)
                except Exception as exc:
                    if "use_per_session_threads must be false" not in str(exc) or not options.use_per_session_threads:
                        raise
                    # This process configured ONNX Runtime's global thread pools (set_global_thread_pool_sizes):
                    # every session must then use them. Only pools are shared; the other options stay.
                    _GLOBAL_POOLS = True
                    options.use_per_session_threads = False
                    self._session = ort.InferenceSession(source, options, providers=providers,
                                                         disabled_optimizers=WRONG_REWRITES)
        except Exception as exc:  # ORT raises several pybind exception types (Fail, InvalidGraph, ...)
            origin = explain_node_names(str(exc), self.node_origins)
            raise EngineBuildError(
                f"onnxruntime: could not create a session for the segment's ONNX model: {exc}. "
                + (f"{origin}. " if origin else "")
                + "Models from trtcheck's converters pass onnx.checker's full check first, so this is ONNX "
                "Runtime refusing a valid model (a missing kernel for a dtype, an optimizer bug): keep "
                "the op in PyTorch (torch_executed_ops), or, if onnx.checker.check_model(model, "
                "full_check=True) does fail on it, fix that op's converter"
            ) from exc
        # Per-call constants, precomputed so the hot path is a few attribute reads per tensor.
        self._in = tuple((s.name, onnx_elem_type(s.dtype)) for s in self.inputs)
        self._out = tuple(
            (s.name, s.shape if s.is_static else None, s.dtype, onnx_elem_type(s.dtype), _has_data(s))
            for s in self.outputs
        )
        self._has_dynamic_outputs = not all(s.is_static for s in self.outputs)
        self._direct = None if self._has_dynamic_outputs else _direct_binding(self._session)
        self._bindings: list = []
        """Idle pybind bindings of ``_call_direct``, reused (a new one per call costs time at every crossing). A call
        takes one (``list.pop``, atomic under the GIL) and puts it back after its run, so concurrent calls never share
        one; every call binds every input and output again, so nothing of an earlier call is run."""
        self._static_inputs = (
            tuple((s.shape, s.dtype) for s in self.inputs) if all(s.is_static for s in self.inputs) else None
        )
        """Shape and dtype of every input when all are static: ``__call__``'s check of a CPU call in one pass."""

    @classmethod
    def build(
        cls, model: onnx.ModelProto, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], *, engines_in_model: int = 1,
        options: EngineOptions | None = None, shape_ranges: object = None, weights: Mapping[str, torch.Tensor] | None = None,
    ) -> OnnxRuntimeEngine:
        """The engine of the finished graph ``model``, emulating on the CPU what ONNX Runtime's CPU provider lacks
        (``trtcheck.engines.emulation``). ``options.tf32`` rounds the float32 factors of every MatMul, Gemm and
        convolution to TF32 (``emulate_tf32``); a graph holding float16/bfloat16 values (a mixed-precision graph, or
        a model that is float16 itself) computes them in float32, rounded to their type after every node
        (``emulate``), decided from the graph's own types; NVFP4 quantization, which ONNX Runtime has no kernel for,
        is computed with ordinary ops (``emulate_fp4``). Inputs and outputs keep their dtypes.

        The sole engine of a model spins while it runs and stops after (``stop_after_run``); one of several never
        spins (``never``), so that idle sessions leave the cores to the one running and to PyTorch (docs/performance.md,
        section "ONNX Runtime engines: threads, spinning and the call path").
        """
        model = emulate_fp4(model)
        if options is not None and options.tf32:
            model, weights = emulate_tf32(model, weights)
        if needs_emulation(model):
            model, weights = emulate(model, weights)
        spin = "stop_after_run" if engines_in_model <= 1 else "never"
        return cls(model, inputs, outputs, options=session_options(spin=spin), weights=weights)

    @classmethod
    def is_available(cls) -> bool:
        """ONNX Runtime is a hard dependency of trtcheck, so this backend is always available."""
        return True

    @property
    def session(self) -> ort.InferenceSession:
        """The underlying session (its options, providers and profiling are useful for diagnosis)."""
        return self._session

    def __call__(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self._direct is not None and _ready_on_cpu(tensors, self._static_inputs):
            return self._call_direct(tensors, _CPU)  # the stitched module's usual call: nothing to check further
        home = tensors[0].device if tensors else _CPU
        if home.type == "cuda" and self._cuda:
            device, device_type, device_id = home, "cuda", home.index or 0
            torch.cuda.current_stream(home).synchronize()  # ORT runs on its own stream
        else:
            device, device_type, device_id = _CPU, "cpu", 0
        prepared = self.prepare_inputs(tensors, device)
        if self._direct is not None and device_type == "cpu":
            return self._call_direct(prepared, home)
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
        if self.run_times is None:
            self._session.run_with_iobinding(binding)
        else:
            start = time.perf_counter_ns()
            self._session.run_with_iobinding(binding)
            self.run_times.append(time.perf_counter_ns() - start)
        if self._has_dynamic_outputs:
            # DLPack hands ORT's buffer to torch without a copy and keeps it alive with the tensor.
            values = binding.get_outputs()
            results = [torch.from_dlpack(v) if r is None else r for r, v in zip(results, values)]
        if device != home:
            return tuple(r.to(home) for r in results)
        return tuple(results)

    def _call_direct(self, prepared: Sequence[torch.Tensor], home: torch.device) -> tuple[torch.Tensor, ...]:
        """``__call__`` on the CPU with static outputs, through ONNX Runtime's pybind binding (``_direct_binding``)."""
        new_binding, run, cpu = self._direct
        try:
            binding = self._bindings.pop()  # no other call holds it: calls stay thread-safe
        except IndexError:
            binding = new_binding()
        for (name, elem), tensor in zip(self._in, prepared):
            binding.bind_input(name, cpu, elem, tensor.shape, tensor.data_ptr())
        results = []
        for name, shape, dtype, elem, preallocate in self._out:
            out = torch.empty(shape, dtype=dtype, device=_CPU)
            if preallocate:
                binding.bind_output(name, cpu, elem, shape, out.data_ptr())
            else:  # zero-size: ORT rejects a null buffer pointer and there is nothing to fetch
                binding.bind_output(name, cpu)
            results.append(out)
        if self.run_times is None:
            run(binding, None)
        else:
            start = time.perf_counter_ns()
            run(binding, None)
            self.run_times.append(time.perf_counter_ns() - start)
        self._bindings.append(binding)
        if home != _CPU:
            return tuple(r.to(home) for r in results)
        return tuple(results)


def _ready_on_cpu(tensors: tuple, specs: tuple[tuple[tuple[int, ...], torch.dtype], ...] | None) -> bool:
    """True when ``tensors`` are what an engine with static input ``specs`` ((shape, dtype) each) takes as they are:
    one per spec, of its shape and dtype, contiguous CPU tensors. What ``Engine.prepare_inputs`` would pass through
    untouched, in one pass with no list built (the check of every engine call of a stitched module);
    anything else (None specs: a dynamic input) takes the general path, which copies, moves or raises."""
    if specs is None or len(tensors) != len(specs):
        return False
    try:
        for (shape, dtype), tensor in zip(specs, tensors):
            if tensor.shape != shape or tensor.dtype != dtype or tensor.device.type != "cpu" or not tensor.is_contiguous():
                return False
    except AttributeError:  # not a tensor: the general path names it
        return False
    return True


register_backend(OnnxRuntimeEngine.backend, OnnxRuntimeEngine)
