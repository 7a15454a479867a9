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

from trtcheck.conversion.context import weight_bytes
from trtcheck.conversion.origins import explain_node_names, node_origins
from trtcheck.engines.base import Engine, check_model_signature, onnx_elem_type, register_backend
from trtcheck.engines.mixed_precision import precision_graph
from trtcheck.engines.precision import emulate, emulate_tf32, needs_emulation
from trtcheck.engines.specs import TensorSpec
from trtcheck.errors import EngineBuildError

__all__ = ["OnnxRuntimeEngine", "SPIN_POLICIES", "session_options"]

_CPU = torch.device("cpu")
_CUDA_EP = "CUDAExecutionProvider"
_GLOBAL_POOLS = False  # set once a session was refused because this process uses ONNX Runtime's global pools


def _cuda_ep_usable() -> bool:
    """True when ONNX Runtime was built with CUDA *and* torch sees a GPU to allocate outputs on."""
    return _CUDA_EP in ort.get_available_providers() and torch.cuda.is_available()


SPIN_POLICIES = ("stop_after_run", "never", "always")
"""How a session's worker threads wait for work: ``never`` (the default: ``session.intra_op.allow_spinning``
and ``session.inter_op.allow_spinning`` "0", workers block), ``stop_after_run`` (spin while a run is in
progress, block once it returns: ``session.force_spinning_stop`` "1") or ``always`` (ONNX Runtime's own
default: idle workers keep spinning after a run, which made many-segment models 5-10x slower)."""


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

    The wrapper costs about 4 us a call on this path (each ``io_binding()`` asks the session for its
    providers, each ``bind_*`` makes a new ``OrtDevice``, each run checks for WebGPU graph capture): with
    18 engines, that is 0.07 ms of every resnet18 call. This relies on names onnxruntime does not promise
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
    the serialized model it parses holds none. Against a serialized model holding them, that saves the
    bytes, ONNX Runtime's parse of them and its ModelProto's copy (measured on a 128 MiB MatMul weight: peak
    +262 MiB, +135 MiB after, against +390 / +263 MiB). The values returned must outlive the session's creation:
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
    replaces the original, where over in-memory initializers it keeps both (issue 25, bert_base's 417 MiB of
    weights, ``python -m suites.benchmarks.ort_weights_memory``: +527 MiB kept, peak +583, in memory; +375 kept,
    peak +382, from the file)."""
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

    Threads (issue 10: engines share the machine). Each session has its own intra-op pool of
    ``min(torch.get_num_threads(), usable cores)`` threads (the caller's thread is one of them), one
    inter-op thread, and its workers never spin (``allow_spinning`` "0"): they block when idle. The rule
    is "engine threads + PyTorch threads *running* never above the cores": a stitched module runs its
    segments one after the other on the calling thread, so an engine's pool and PyTorch's pool never
    work at the same time, and each may use every core while the other waits, provided the waiting one
    does not spin. ONNX Runtime's default (idle workers spin after a run) broke that: with 18 engines,
    18 pools spun on 2 cores against each other and against PyTorch. The engine cannot stop PyTorch's
    OpenMP workers from spinning (``OMP_WAIT_POLICY``, read at start-up); ``trtcheck.profile`` shows it
    as Torch segment time.

    Options measured side by side (``python -m suites.benchmarks.bench_segments --options --repeat 10
    --rounds 7``; 2 cores shared with other jobs, load average 8-14, so absolute times are inflated and
    only same-run ratios mean anything; medians of interleaved rounds, ms):

    ==========================  ==================  ===================  ==================  ==================
    options                     resnet18 1 engine   resnet18 35 segs     mnv3s 1 engine      mnv3s 29 segs
    ==========================  ==================  ===================  ==================  ==================
    old: spin (ORT default)     118.7 / 117.5       1833                 7.54 / 7.43 / 15.9  500 / 632
    allow_spinning=0 (kept)     62.5 / 75.8         175                  15.4 / 7.13 / 51.7  51.7 / 72.3
    force_spinning_stop=1       122.3 / 101.2       322                  6.67 / 7.45 / 21.4  107 / 155
    1 thread, no spinning       72.0 / 73.3         245                  7.21 / 3.33 / 12.2  65.6 / 111
    global pool (child proc.)   55.0                186                  16.5                129
    ==========================  ==================  ===================  ==================  ==================

    (a/b/c: separate runs of the same variants; the second single-engine figure comes from a run of the
    single-engine variants alone, 9 rounds x 20 calls). On a quieter machine (load 1.9,
    ``python -m suites.benchmarks.bench_segments``, 5 rounds x 20 calls): resnet18 eager 29.3, 1 engine
    18.7 (old 18.1), 35 segments 34.8 (old 427.9); mobilenet_v3_small eager 8.27, 1 engine 4.57 (old
    2.47), 29 segments 8.27 (old 175.1). Spinning workers are the one clear loss (5-20x on many
    segments); ``allow_spinning=0`` was the best many-segment option in every run. It can cost a
    single small engine time (workers are woken per parallel op instead of spinning: mobilenet_v3_small
    4.57 vs 2.47 ms in the quiet run, not seen under load), an open point of issue 10. ``force_spinning_stop``
    was 2x worse than it on many segments. One thread wins under heavy load but gives up the second
    core of a quiet machine for a single big engine. ONNX Runtime's global pools
    (``set_global_thread_pool_sizes``) must be configured before the process's first session, exclude
    per-session pools in that process, and spin with no way to turn it off from Python, so they are not
    the default; an engine built in a process that configured them uses them (``use_per_session_threads``
    False) instead of failing.

    Many small engines (the last open target of issue 10: resnet18 with min_block_size 1 and relu forced
    to PyTorch, 18 engines of one conv + batch norm each, 35 segments). No session option brings it to
    eager's time on 2 cores; where the time goes, measured:

    * Splitting costs ONNX Runtime 2-4 ms. ORT's profiler (``enable_profiling``, 60 runs, load 1.8) over
      the 18 engines run back to back: 21.1 ms of runs against 19.0 ms for one engine holding everything;
      the convolutions take the same time (17.7 against 18.3 ms), the difference is the NCHWc layout
      reorder into and out of every engine (``ReorderInput`` 1.35 + ``ReorderOutput`` 0.95 ms, which one
      engine does once) and the residual ``Add`` no longer fused into its convolution (0.27 ms). The
      optimized model of a small engine (``optimized_model_filepath``) is exactly ReorderInput, Conv
      (batch norm folded in), ReorderOutput. Without the NCHWc transformer (``disabled_optimizers=
      ["NchwcTransformer"]``) there is no reorder, but every convolution runs about twice as long: one
      engine 26.3 against 19.3 ms, 18 engines 46.8 against 38.1 ms. It stays on.
    * Running between PyTorch segments costs the engines 11-12 ms more: after every Torch segment (a relu)
      PyTorch's OpenMP worker spins for about 10 ms (libgomp's default wait policy, measured as CPU time
      burnt while the process sleeps), so on 2 cores an engine's two threads share the cores with a
      spinning thread for the whole run. Measured in one run (``bench_segments``' "alone" row and a row
      running PyTorch on one thread): engines 35.2 ms in the stitched run, 22.8 ms back to back with no
      PyTorch in between, 22.9 ms in the stitched run when PyTorch runs its segments on one thread (the
      whole module then takes 26.6 ms, 0.83 of eager's 32.2). In a process started with
      ``OMP_WAIT_POLICY=PASSIVE`` (``bench_segments --models resnet18 --omp-passive --rounds 25``, load
      0.8 at the start) the engines took 19.6 ms in the stitched run and 19.7 ms alone, the module 22.0 ms
      against 34.4 ms for eager in that process and 28.5 ms for eager in the default parent process (1.19
      there: many segments 33.8 ms, engines 31.0 ms in the run, 22.2 ms alone). The engine can neither stop
      PyTorch's workers from spinning (``OMP_WAIT_POLICY``/``GOMP_SPINCOUNT`` are read once, at start-up)
      nor choose PyTorch's thread count for the Torch segments; the compiled module does: with
      ``compile(torch_threads="auto")`` (the default) PyTorch runs on one thread during a call of a module
      with engines whose PyTorch ops are all memory-bound (``stitching.auto_torch_threads``). Measured in
      one run of ``python -m suites.benchmarks.bench_segments`` (load 0.5, 40 shuffled rounds x 3 calls):
      resnet18 35 segments 24.03 ms against eager 27.30 (0.88x; 34.20 ms, 1.25x, with ``torch_threads=None``),
      its engines 21.89 ms in the run against 22.16 ms back to back; mobilenet_v3_small 7.00 against 9.63
      (0.73x; 7.57 with None).
    * Session options do not change that (``python -m suites.benchmarks.bench_segments --models resnet18
      --options``, load 0.7 rising to 4.3, 40 shuffled rounds x 3 calls, ms, many-segment / one engine):
      default 38.1 / 19.3 (eager 32.2); ``allow_spinning=0`` for the sole engine too 38.1 / 19.7;
      ``force_spinning_stop=1`` for every engine 63.5 / 19.2 (spinning pools fight PyTorch's spinning
      worker); ``spin_duration_us=20`` 37.4 / 19.3; one thread 43.2 / 35.1; three threads 45.8 / 25.0;
      NCHWc off 46.8 / 26.3; ``session.dynamic_block_base`` 4: 35.8 / 19.2, 8: 38.0 / 19.2; ONNX
      Runtime's global pool (child process) 65.9 / 18.4. ``dynamic_block_base`` (guided scheduling, so
      that a thread that lost its core hands over its share) looked 10-15% faster in rounds of 5-10 calls
      per variant, but alternating the variants call by call (150-200 calls each, three runs) gave 33.7 /
      34.3 / 32.9 ms with base 4 against 33.1 / 33.2 / 32.2 ms without: no effect, so it is not set.
      mobilenet_v3_small (load 0.8, same command): default 6.11 / 2.70 against eager 7.14; every option
      within 15% on many segments except three threads (11.3) and NCHWc off (7.85).

    What the engine did change is its own call path, paid at every crossing: static outputs on the CPU are
    bound through ONNX Runtime's pybind binding instead of ``onnxruntime.IOBinding``'s Python wrapper
    (``_direct_binding``): 9.9 against 13.9 us a call of an engine holding one 2x3 relu (medians of 40
    interleaved rounds of 500 calls, two runs alike; about 2.2 us of it is the run itself). In
    ``python -m suites.benchmarks.bench_segments`` (load 0.6 at the start), overhead per boundary of the
    many-segment modules: resnet18 21.9 us against 44.8 us through the wrapper, mobilenet_v3_small 17.6
    against 22.0 us (one profiled call each, the one with the median total: noisy, but on the same side).
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
                    self._session = ort.InferenceSession(source, options, providers=providers)
                except Exception as exc:
                    if "use_per_session_threads must be false" not in str(exc) or not options.use_per_session_threads:
                        raise
                    # This process configured ONNX Runtime's global thread pools (set_global_thread_pool_sizes):
                    # every session must then use them. Only pools are shared; the other options stay.
                    _GLOBAL_POOLS = True
                    options.use_per_session_threads = False
                    self._session = ort.InferenceSession(source, options, providers=providers)
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
        """Idle pybind bindings of ``_call_direct``, reused (issue 42: a new one per call cost about 0.6 us). A call
        takes one (``list.pop``, atomic under the GIL) and puts it back after its run, so concurrent calls never share
        one; every call binds every input and output again, so nothing of an earlier call is run."""
        self._static_inputs = (
            tuple((s.shape, s.dtype) for s in self.inputs) if all(s.is_static for s in self.inputs) else None
        )
        """Shape and dtype of every input when all are static: ``__call__``'s check of a CPU call in one pass."""

    @classmethod
    def build(
        cls, model: onnx.ModelProto, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], *, engines_in_model: int = 1,
        settings: object = None, shape_ranges: object = None, weights: Mapping[str, torch.Tensor] | None = None,
    ) -> OnnxRuntimeEngine:
        """The sole engine of a model spins while it runs and stops after (``stop_after_run``); one of several
        never spins (``never``), so that idle sessions leave the cores to the one running and to PyTorch.

        Measured (``python -m suites.benchmarks.bench_segments --options``, quiet machine): a single
        mobilenet_v3_small engine 2.33 ms with ``stop_after_run`` against 3.15 ms with ``never`` (2.28 with
        ONNX Runtime's spinning default), resnet18 18.2 against 18.6 ms; with 18 engines (resnet18, relu
        forced to PyTorch) ``stop_after_run`` was 43.8 ms against 31.5 ms for ``never``.

        ``settings.precision`` ("fp16", "bf16") runs the segment's mixed-precision graph, the one TensorRT builds
        (``mixed_precision.precision_graph``); ``settings.tf32`` rounds the float32 factors of every MatMul, Gemm and
        convolution to TF32 (``precision.emulate_tf32``); a model holding float16/bfloat16 values (that graph, or the
        model's own) computes them in float32, rounded to their type after every node (``precision.emulate``), since
        ONNX Runtime's CPU provider lacks or does not round such kernels. Inputs and outputs keep their dtypes.
        """
        precision = getattr(settings, "precision", None) or "fp32"
        model, weights = precision_graph(model, settings, weights)
        if getattr(settings, "tf32", False):
            model, weights = emulate_tf32(model, weights)
        if needs_emulation(model, precision):
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
    untouched, in one pass with no list built (issue 42: the check of every engine call of a stitched module);
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
