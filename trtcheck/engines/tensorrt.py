"""The TensorRT engine: a segment's ONNX model through TensorRT's ONNX parser, built, cached and run on CUDA.

TensorRT is optional (``pip install 'trtcheck[tensorrt]'``, which installs the TensorRT 11.1 that torch-tensorrt 2.14
pins) and needs a CUDA GPU, so this module must import cleanly without it: the ``tensorrt`` package is imported only
when an engine is built, and a missing dependency becomes an ``EngineBuildError`` that says how to fix it.

NOT YET RUN ON REAL TENSORRT. Every TensorRT call below is one TensorRT 11.1's Python API has: the suites drive this
module against a fake ``tensorrt`` module (``suites/engines/fake_tensorrt.py``) whose every class, method and enum
member is checked against the real 11.1 API (``suites/engines/test_fake_tensorrt_conformance.py``: the runtime
classes and enums against ``tensorrt_lean`` 11.1, the builder and parser against TensorRT 11.1's Python bindings).
The first run on a CUDA machine with TensorRT is ``trtcheck/tools/gpu_check.py`` (tests marked ``tensorrt`` in
``suites/engines/test_tensorrt_gpu.py`` too).

Build (``TensorRTEngine.__init__``):

1. The version: TensorRT 10.x and 11.0-11.1 (``SUPPORTED_TENSORRT``); any other is refused, naming both. TensorRT
   11 removed weak typing (``BuilderFlag.FP16``/``BF16``/``OBEY_PRECISION_CONSTRAINTS``, layer precisions): every
   network here is strongly typed (``NetworkDefinitionCreationFlag.STRONGLY_TYPED`` where the enum has it: TensorRT
   10 needs it, 11 ignores it), so TensorRT computes in the ONNX model's own types.
2. Precision lives in the graph: the compiler hands the engine the segment's finished graph, mixed precision for
   ``precision="fp16"``/``"bf16"`` (``trtcheck.compiler.mixed_precision``, the graph ONNX Runtime runs too), and the
   parser sees it as it is. ``EngineOptions.tf32`` sets ``BuilderFlag.TF32`` (float32 matmuls and convolutions on
   10-bit mantissas), else it is cleared (TensorRT sets it by default). ``workspace_size`` caps the workspace pool.
3. One optimization profile per segment, from a ``ShapeRange`` (min, opt, max) per input: static specs give
   min = opt = max; a dynamic input needs its range passed in (``shape_ranges=``).
4. The engine cache (``trtcheck.engines.cache``) is asked first, keyed by the graph's bytes (weights included),
   TensorRT's version, the device and every build option; a verified plan that TensorRT deserializes is used,
   anything else is rebuilt and stored.
5. Otherwise ``OnnxParser.parse``: when the parser refuses the model, the segment falls back to PyTorch
   (``trtcheck.compile`` catches the ``ParserRefusedError``) with the parser's own errors, what the nodes it names
   were converted from (``Engine.node_origins``) and, from ``supports_model_v2``, which ONNX nodes TensorRT does not
   support. This is where the parser's answer refines trtcheck's static converter table for that segment.
6. ``build_serialized_network``; the plan is deserialized with one ``trt.Runtime`` per engine.

Run: inputs are checked against their specs and made contiguous on the engine's device; each engine I/O tensor is
bound by *name* (``set_tensor_address``), never by position; outputs are allocated by torch with the shapes the
execution context reports and the dtypes the engine reports (``dtypes.from_tensorrt_name``); ``execute_async_v3``
enqueues on torch's current CUDA stream of the engine's device, so the engine is ordered with surrounding PyTorch
work without host synchronization.
"""

from __future__ import annotations

import collections
import logging
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import onnx
import torch

from trtcheck import dtypes
from trtcheck.engines.base import Engine, check_model_signature, import_tensorrt, register_backend, tensorrt_import_error
from trtcheck.engines.cache import CacheKey, EngineCache
from trtcheck.engines.specs import EngineOptions, ShapeRange, TensorSpec
from trtcheck.errors import EngineBuildError, ParserRefusedError
from trtcheck.onnx_format.origins import explain_node_names, node_origins

__all__ = [
    "MISSING_DEPENDENCY_MESSAGE",
    "SUPPORTED_TENSORRT",
    "CudaRuntime",
    "ParserRefusedError",
    "ShapeRange",
    "TensorRTEngine",
    "builder_config",
    "builder_key",
    "network_flags",
    "optimization_profile",
    "shape_ranges",
    "unsupported_version",
]

MISSING_DEPENDENCY_MESSAGE = (
    "TensorRT backend needs the `tensorrt` package and a CUDA GPU: pip install 'trtcheck[tensorrt]' "
    "on a CUDA machine, or use backend='onnxruntime'"
)

SUPPORTED_TENSORRT = ((10, 0), (11, 2))
"""The TensorRT versions trtcheck builds with, ``[low, high)`` as (major, minor): 10.x through its strongly typed
networks, 11.0 and 11.1 (the API ``suites/engines`` checks the fake against; 11.0's bindings differ from 11.1's only in
a build-route property trtcheck does not use). The ``tensorrt`` extra installs 11.1, which torch-tensorrt 2.14 pins."""


def unsupported_version(version: str) -> str | None:
    """None when TensorRT ``version`` is in ``SUPPORTED_TENSORRT``; else why not, naming it and the range."""
    found = re.match(r"^(\d+)\.(\d+)", str(version))
    (low, high) = SUPPORTED_TENSORRT
    span = f">={low[0]}.{low[1]},<{high[0]}.{high[1]}"
    if found is None:
        return f"TensorRT {version!r} (an unreadable version; trtcheck supports TensorRT {span})"
    major_minor = (int(found[1]), int(found[2]))
    if low <= major_minor < high:
        return None
    return (f"TensorRT {version}, which trtcheck does not support: it supports TensorRT {span} (10.x through strongly "
            f"typed networks, 11.0-11.1 as tested); pip install 'trtcheck[tensorrt]' installs tensorrt-cu13>=11.1,<11.2")


# ---------------------------------------------------------------------------------------------------------
# Optimization profiles


def shape_ranges(
    inputs: Sequence[TensorSpec], given: Mapping[str, ShapeRange | Sequence[Sequence[int]]] | None = None
) -> dict[str, ShapeRange]:
    """A ``ShapeRange`` per input, in input order: ``given[name]`` (a ``ShapeRange`` or a ``(min, opt, max)``
    triple) where present, else min = opt = max = the spec's static shape.

    ``EngineBuildError`` when an input has unknown dimensions and no range, a range for an input that does not
    exist, or a range that does not fit its spec (another rank, or a static dimension it does not keep).
    """
    given = dict(given or {})
    names = {spec.name for spec in inputs}
    unknown = sorted(set(given) - names)
    if unknown:
        raise EngineBuildError(f"tensorrt: shape ranges given for {unknown}, which are not inputs of the segment ({sorted(names)})")
    ranges: dict[str, ShapeRange] = {}
    for spec in inputs:
        value = given.get(spec.name)
        if value is None:
            if not spec.is_static:
                raise EngineBuildError(
                    f"tensorrt: input {spec.name!r} has unknown dimensions {spec.shape} and no (min, opt, max) shape "
                    "range; give every torch.export.Dim a max (trtcheck.compile passes the ranges export recorded), "
                    "pass one per dynamic input (shape_ranges=), or export with static shapes"
                )
            ranges[spec.name] = ShapeRange.static(spec.shape)
            continue
        try:
            shape_range = value if isinstance(value, ShapeRange) else ShapeRange(*value)
        except (TypeError, ValueError) as error:
            raise EngineBuildError(f"tensorrt: shape range of input {spec.name!r}: {error}") from None
        if not (spec.matches_shape(shape_range.min) and spec.matches_shape(shape_range.max)):
            raise EngineBuildError(
                f"tensorrt: shape range of input {spec.name!r} (min {shape_range.min}, max {shape_range.max}) does not fit "
                f"its spec {spec.shape} (a negative dimension is the only one a range may vary)"
            )
        ranges[spec.name] = shape_range
    return ranges


def optimization_profile(builder: Any, ranges: Mapping[str, ShapeRange]) -> Any:
    """A TensorRT optimization profile with ``set_shape(name, min, opt, max)`` for every input."""
    profile = builder.create_optimization_profile()
    for name, shape_range in ranges.items():
        profile.set_shape(name, shape_range.min, shape_range.opt, shape_range.max)
    return profile


# ---------------------------------------------------------------------------------------------------------
# Build options


def builder_key(options: EngineOptions, ranges: Mapping[str, ShapeRange]) -> dict[str, Any]:
    """The part of the engine cache key that the build options and the profile decide. The graph itself is the key's
    ONNX digest; how the compiler made it (precision, fp32_nodes, use_fp32_acc, autocast) is here too, so that an
    entry says what it was built for. No weak typing: the network is strongly typed, whatever the precision."""
    return {
        "precision": options.precision,
        "workspace_size": options.workspace_size,
        "strongly_typed": True,
        "tf32": options.tf32,
        "fp32_nodes": sorted(options.fp32_nodes),
        "use_fp32_acc": options.use_fp32_acc,
        "autocast": None if options.autocast is None else dict(options.autocast),
        "profile": {name: [list(r.min), list(r.opt), list(r.max)] for name, r in ranges.items()},
    }


def network_flags(trt: Any) -> int:
    """``STRONGLY_TYPED`` where the enum has it (TensorRT 10 needs it to keep the model's types; 11 has only strongly
    typed networks and ignores it), else nothing."""
    flag = getattr(getattr(trt, "NetworkDefinitionCreationFlag", None), "STRONGLY_TYPED", None)
    return 0 if flag is None else 1 << int(flag)


def builder_config(trt: Any, builder: Any, options: EngineOptions, ranges: Mapping[str, ShapeRange]) -> Any:
    """``builder.create_builder_config()`` with the workspace limit, TF32 set or cleared, and one profile."""
    config = builder.create_builder_config()
    if options.workspace_size:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, options.workspace_size)
    tf32 = getattr(trt.BuilderFlag, "TF32", None)
    if tf32 is not None:  # TensorRT allows TF32 by default; trtcheck says so only when the options do
        (config.set_flag if options.tf32 else config.clear_flag)(tf32)
    elif options.tf32:
        raise EngineBuildError(f"tensorrt: TensorRT {getattr(trt, '__version__', '?')} has no BuilderFlag.TF32, which tf32=True needs")
    if ranges:
        index = config.add_optimization_profile(optimization_profile(builder, ranges))
        if index is not None and index < 0:
            raise EngineBuildError(f"tensorrt: TensorRT refused the optimization profile {dict(ranges)}")
    return config


# ---------------------------------------------------------------------------------------------------------
# CUDA, through torch


class CudaRuntime:
    """What the engine asks of CUDA, through torch. Tests without a GPU replace ``TensorRTEngine.cuda``."""

    def is_available(self) -> bool:
        return torch.cuda.is_available()

    def current_device(self) -> torch.device:
        return torch.device("cuda", torch.cuda.current_device())

    def identity(self, device: torch.device) -> tuple[str, tuple[int, int]]:
        """The device's name and compute capability: what a serialized engine is tied to."""
        return torch.cuda.get_device_name(device), tuple(torch.cuda.get_device_capability(device))  # type: ignore[return-value]

    def stream_handle(self, device: torch.device) -> int:
        """torch's current CUDA stream on ``device``, as the integer handle ``execute_async_v3`` takes."""
        return torch.cuda.current_stream(device).cuda_stream


# ---------------------------------------------------------------------------------------------------------
# Logging: one logger per process (TensorRT treats the first logger as global and warns about others)


class _Log:
    """Keeps TensorRT's recent warnings and errors so build and run failures can quote them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.messages: collections.deque[tuple[int, str, str]] = collections.deque(maxlen=200)
        self.count = 0

    def add(self, severity: Any, message: str) -> None:
        name = getattr(severity, "name", str(severity)).upper()
        if name not in ("INTERNAL_ERROR", "ERROR", "WARNING"):
            return
        _PY_LOG.log(logging.WARNING if name == "WARNING" else logging.ERROR, "TensorRT %s: %s", name, message)
        with self.lock:
            self.count += 1
            self.messages.append((self.count, name, str(message)))

    def mark(self) -> int:
        return self.count

    def since(self, mark: int, limit: int = 8) -> str:
        """TensorRT's errors (else warnings) logged after ``mark``, for an error message; "" when none."""
        with self.lock:
            recent = [(severity, text) for count, severity, text in self.messages if count > mark]
        errors = [text for severity, text in recent if severity != "WARNING"] or [text for _, text in recent]
        if not errors:
            return ""
        shown = errors[-limit:]
        return " TensorRT said: " + " | ".join(shown)


_PY_LOG = logging.getLogger("trtcheck.tensorrt")  # TensorRT's warnings and errors, as trt.Logger(WARNING) printed them
_LOG = _Log()
_LOGGERS: dict[Any, Any] = {}  # tensorrt module -> its logger (a dict, not one global: tests swap modules)


def _logger(trt: Any) -> Any:
    """This process's TensorRT logger for module ``trt``: a ``trt.ILogger`` recording into ``_LOG``."""
    logger = _LOGGERS.get(trt)
    if logger is not None:
        return logger
    base = getattr(trt, "ILogger", None)
    if base is None:  # pragma: no cover - every TensorRT 10 has ILogger
        logger = trt.Logger(trt.Logger.WARNING)
    else:
        class _RecordingLogger(base):  # type: ignore[misc, valid-type]
            def __init__(self) -> None:
                base.__init__(self)

            def log(self, severity: Any, msg: str) -> None:
                _LOG.add(severity, msg)

        logger = _RecordingLogger()
    _LOGGERS[trt] = logger
    return logger


# ---------------------------------------------------------------------------------------------------------
# The engine


class TensorRTEngine(Engine):
    """Runs one segment as a TensorRT engine on the CUDA device current at build time.

    Calls enqueue on ``torch.cuda.current_stream()`` so the engine is ordered with surrounding
    PyTorch work without host synchronisation. CPU inputs are copied to the GPU and the results
    copied back, so a CPU-resident partitioned model still works (slowly). One execution context is
    shared by all calls, so an engine must not be called from several threads at once.

    ``cache_event`` says what the engine cache did: ``"hit"``, ``"stored (<why it missed>)"``,
    ``"not stored (...)"`` or ``"off"``.
    """

    backend: ClassVar[str] = "tensorrt"
    install_hint: ClassVar[str] = (
        "Fix: pip install 'trtcheck[tensorrt]' on a machine with an NVIDIA GPU and a CUDA build of torch"
    )
    cuda: ClassVar[CudaRuntime] = CudaRuntime()

    def __init__(
        self,
        model: onnx.ModelProto,
        inputs: Sequence[TensorSpec],
        outputs: Sequence[TensorSpec],
        *,
        options: EngineOptions | None = None,
        shape_ranges: Mapping[str, ShapeRange | Sequence[Sequence[int]]] | None = None,
        cache: EngineCache | None = None,
    ):
        trt = import_tensorrt()
        cuda = self.cuda
        if trt is None or not cuda.is_available():
            missing = "the `tensorrt` package" if trt is None else "a CUDA GPU (torch.cuda.is_available() is False)"
            raise EngineBuildError(f"{MISSING_DEPENDENCY_MESSAGE} (missing here: {missing})")
        refused = unsupported_version(getattr(trt, "__version__", "unknown"))
        if refused is not None:
            raise EngineBuildError(f"tensorrt: {refused}")
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        check_model_signature(self.backend, model, self.inputs, self.outputs)
        self.model = model
        """The ONNX model handed to TensorRT's parser: the finished graph, built in its own types, strongly typed."""
        self.node_origins = node_origins(model)
        self.options = EngineOptions() if options is None else options
        self.ranges = _shape_ranges(self.inputs, shape_ranges)
        self._device = cuda.current_device()
        self._logger = _logger(trt)
        self._runtime = trt.Runtime(self._logger)  # must outlive the engines it deserializes
        if self._runtime is None:
            raise EngineBuildError("tensorrt: trt.Runtime could not be created (see the TensorRT log)")
        onnx_bytes = model.SerializeToString()
        if cache is None and self.options.engine_cache:
            cache = EngineCache(self.options.engine_cache_dir)
        self.cache = cache
        self.cache_key = self._cache_key(trt, onnx_bytes) if cache is not None else None
        self.cache_event = "off"
        self._engine = self._load_cached() if cache is not None else None
        if self._engine is None:
            plan = self._build(trt, model, onnx_bytes)
            self._engine = self._deserialize(plan)
            if self._engine is None:
                raise EngineBuildError("tensorrt: the engine just built could not be deserialized" + _LOG.since(0, 4))
            if cache is not None:
                why = cache.last_miss or "no entry"
                self.cache_event = f"stored ({why})" if cache.store(self.cache_key, plan) else f"not stored ({why})"
        self._context = self._engine.create_execution_context()
        if self._context is None:
            raise EngineBuildError("tensorrt: could not create an execution context (out of GPU memory?)")
        self._bind_names(trt)

    # -- build ------------------------------------------------------------------------------------------

    @classmethod
    def build(
        cls, model: onnx.ModelProto, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], *, engines_in_model: int = 1,
        options: EngineOptions | None = None, shape_ranges: Mapping[str, ShapeRange] | None = None,
    ) -> TensorRTEngine:
        """The engine of the finished graph ``model``, built with ``options`` (TF32, workspace, engine cache) and one
        optimization profile from ``shape_ranges`` (every dynamic input's (min, opt, max))."""
        return cls(model, inputs, outputs, options=options, shape_ranges=shape_ranges)

    def _cache_key(self, trt: Any, onnx_bytes: bytes) -> CacheKey:
        name, capability = self.cuda.identity(self._device)
        return CacheKey.of(
            onnx_bytes,
            tensorrt_version=str(getattr(trt, "__version__", "unknown")),
            device_name=name,
            compute_capability=capability,
            builder=builder_key(self.options, self.ranges),
        )

    def _load_cached(self) -> Any:
        assert self.cache is not None and self.cache_key is not None
        plan = self.cache.load(self.cache_key)
        if plan is None:
            return None
        engine = self._deserialize(plan)
        if engine is None:  # verified bytes TensorRT still refuses (a driver change, say): never trusted
            self.cache.discard(self.cache_key, "TensorRT could not deserialize the cached engine")
            return None
        self.cache_event = "hit"
        return engine

    def _deserialize(self, plan: Any) -> Any:
        try:
            return self._runtime.deserialize_cuda_engine(plan)
        except Exception:  # noqa: BLE001 - some versions raise instead of returning None
            return None

    def _build(self, trt: Any, model: onnx.ModelProto, onnx_bytes: bytes) -> Any:
        """Parse ``model`` and build a serialized engine, turning every failure into a clear error."""
        mark = _LOG.mark()
        builder = trt.Builder(self._logger)
        network = builder.create_network(network_flags(trt))
        parser = trt.OnnxParser(network, self._logger)
        if not parser.parse(onnx_bytes):
            errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
            unsupported = _unsupported_nodes(trt, builder, self._logger, model, onnx_bytes)
            raise _refusal(errors, unsupported, self.node_origins)
        config = builder_config(trt, builder, self.options, self.ranges)
        serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            said = _LOG.since(mark)
            origin = explain_node_names(said, self.node_origins)
            raise EngineBuildError(
                "tensorrt: building the engine failed; common causes are ops without a TensorRT implementation "
                f"for these dtypes (precision={self.options.precision!r}), or too little GPU memory "
                f"(workspace_size={self.options.workspace_size}).{said}" + (f" ({origin})" if origin else "")
            )
        return bytes(serialized)  # IHostMemory has the buffer protocol; the cache hashes and writes bytes

    def _bind_names(self, trt: Any) -> None:
        """Map every engine I/O tensor to its spec by name, and check dtypes and (static) shapes against it."""
        engine, context = self._engine, self._context
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        modes = {name: engine.get_tensor_mode(name) for name in names}
        engine_inputs = sorted(n for n in names if modes[n] == trt.TensorIOMode.INPUT)
        engine_outputs = sorted(n for n in names if modes[n] == trt.TensorIOMode.OUTPUT)
        for kind, specs, found in (("input", self.inputs, engine_inputs), ("output", self.outputs, engine_outputs)):
            if sorted(s.name for s in specs) != found:
                raise EngineBuildError(
                    f"tensorrt: the engine's {kind}s {found} are not the segment's {kind}s {sorted(s.name for s in specs)}"
                )
        for spec in (*self.inputs, *self.outputs):
            name = engine.get_tensor_dtype(spec.name).name
            try:
                dtype = dtypes.from_tensorrt_name(name)
            except dtypes.UnsupportedDtypeError as error:
                raise EngineBuildError(f"tensorrt: tensor {spec.name!r}: {error}") from None
            if dtype != spec.dtype:
                raise EngineBuildError(
                    f"tensorrt: tensor {spec.name!r} is {name} in the engine but {spec.dtype} in the segment's spec; "
                    "the boundary dtype must survive the build (precision only changes layers inside the engine)"
                )
        self._dynamic = not all(r.is_static for r in self.ranges.values())
        for spec in self.inputs:
            if not context.set_input_shape(spec.name, self.ranges[spec.name].opt):
                raise EngineBuildError(f"tensorrt: the engine refused input {spec.name!r}'s shape {self.ranges[spec.name].opt}")
        self._input_names = tuple(s.name for s in self.inputs)
        self._out: tuple[tuple[str, tuple[int, ...] | None, torch.dtype], ...] = tuple(
            (s.name, None if self._dynamic else self._output_shape(s), s.dtype) for s in self.outputs
        )

    def _output_shape(self, spec: TensorSpec) -> tuple[int, ...]:
        shape = tuple(int(d) for d in self._context.get_tensor_shape(spec.name))
        if any(d < 0 for d in shape):
            raise EngineBuildError(
                f"tensorrt: output {spec.name!r} has a data-dependent shape {shape}, which this backend does not "
                "support yet; keep the op producing it in PyTorch or use backend='onnxruntime'"
            )
        if not spec.matches_shape(shape):
            raise EngineBuildError(
                f"tensorrt: output {spec.name!r} has shape {shape} in the engine but {spec.shape} in the segment's spec "
                "(a converter bug)"
            )
        return shape

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """None when the ``tensorrt`` package imports and torch sees a CUDA device; else what is missing."""
        missing = []
        error = tensorrt_import_error()
        if error is not None:
            missing.append(f"the `tensorrt` package ({error})")
        else:
            refused = unsupported_version(getattr(import_tensorrt(), "__version__", "unknown"))
            if refused is not None:
                missing.append(f"a supported TensorRT (this is {refused})")
        if not cls.cuda.is_available():
            with_cuda = f"with CUDA {torch.version.cuda}" if torch.version.cuda else "without CUDA"
            built = f"torch {torch.__version__}, built {with_cuda}"
            missing.append(f"a CUDA device (torch.cuda.is_available() is False; {built})")
        return " and ".join(missing) or None

    # -- run --------------------------------------------------------------------------------------------

    def __call__(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        home = tensors[0].device if tensors else self._device
        prepared = self.prepare_inputs(tensors, self._device)
        context = self._context
        for name, tensor in zip(self._input_names, prepared):
            if self._dynamic:
                shape = tuple(tensor.shape)
                if not self.ranges[name].contains(shape):
                    raise ValueError(f"input {name!r}: shape {shape} is outside the engine's range {self.ranges[name]}")
                context.set_input_shape(name, shape)
            context.set_tensor_address(name, tensor.data_ptr())
        results = []
        for name, shape, dtype in self._out:
            if shape is None:
                shape = tuple(int(d) for d in context.get_tensor_shape(name))
            out = torch.empty(shape, dtype=dtype, device=self._device)
            context.set_tensor_address(name, out.data_ptr())
            results.append(out)
        mark = _LOG.mark()
        if not context.execute_async_v3(self.cuda.stream_handle(self._device)):
            raise RuntimeError("tensorrt: execute_async_v3 failed." + (_LOG.since(mark) or " (TensorRT logged nothing)"))
        # Copies made by prepare_inputs were allocated on this stream, so freeing them after the
        # enqueue is safe: the caching allocator only reuses their memory for later work on it.
        if home != self._device:
            return tuple(r.to(home) for r in results)
        return tuple(results)


def _shape_ranges(inputs: Sequence[TensorSpec], given: Mapping[str, Any] | None) -> dict[str, ShapeRange]:
    """``shape_ranges``, under a name ``TensorRTEngine.__init__``'s ``shape_ranges`` argument does not shadow."""
    return shape_ranges(inputs, given)


def _unsupported_nodes(
    trt: Any, builder: Any, logger: Any, model: onnx.ModelProto, onnx_bytes: bytes
) -> list[tuple[int, str, tuple[str, ...]]]:
    """The ONNX nodes in subgraphs ``supports_model_v2`` marks unsupported (diagnostics only: [] on any trouble)."""
    try:
        network = builder.create_network(network_flags(trt))
        parser = trt.OnnxParser(network, logger)
        if parser.supports_model_v2(onnx_bytes):
            return []
        indices: list[int] = []
        for subgraph in range(parser.num_subgraphs):
            if not parser.is_subgraph_supported(subgraph):
                indices.extend(int(i) for i in parser.get_subgraph_nodes(subgraph))
    except Exception:  # noqa: BLE001 - a diagnostic must never hide the parser's refusal itself
        return []
    nodes = model.graph.node
    return [(i, nodes[i].op_type, tuple(nodes[i].output)) for i in sorted(set(indices)) if 0 <= i < len(nodes)]


def _refusal(
    errors: Sequence[str], unsupported: Sequence[tuple[int, str, tuple[str, ...]]], origins: Mapping[str, str] | None = None
) -> ParserRefusedError:
    said = "; ".join(errors) or "no error recorded"
    message = f"tensorrt: TensorRT's ONNX parser refused the segment's model: {said}."
    origin = explain_node_names(said, origins or {})
    if origin:
        message += f" {origin}."
    if unsupported:
        ops = sorted({op for _, op, _ in unsupported})
        listed = ", ".join(f"#{i} {op} -> {', '.join(outs)}" for i, op, outs in unsupported[:10])
        more = f" and {len(unsupported) - 10} more" if len(unsupported) > 10 else ""
        message += f" Nodes TensorRT does not support (ONNX ops {', '.join(ops)}): {listed}{more}."
    message += (
        " The segment runs in PyTorch instead; keep the failing op in PyTorch (torch_executed_ops) "
        "or fix its converter"
    )
    return ParserRefusedError(message, errors, unsupported)


register_backend(TensorRTEngine.backend, TensorRTEngine)
