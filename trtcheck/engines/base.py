"""What every engine backend shares: tensor specs, the ``Engine`` interface, the backend registry.

A TensorRT segment of a partitioned model becomes one ONNX model; an *engine* is what runs that model.
Keeping the interface this small (torch tensors in, torch tensors out, static specs known up front)
lets the partitioned module treat ONNX Runtime and TensorRT interchangeably, and lets a new backend
be added by registering one class under a name.
"""

from __future__ import annotations

import abc
import difflib
import functools
import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import ClassVar

import onnx
import torch

from trtcheck import dtypes
from trtcheck.engines.specs import EngineOptions, ShapeRange, TensorSpec
from trtcheck.errors import BackendError, BackendUnavailableError, EngineBuildError
from trtcheck.onnx_format.weights import with_weights

__all__ = [
    "BackendChoice",
    "Engine",
    "EngineBuildError",
    "EngineOptions",
    "ShapeRange",
    "TensorSpec",
    "available_backends",
    "backend_versions",
    "build_engine",
    "check_model_signature",
    "choose_backend",
    "describe_backend",
    "import_tensorrt",
    "tensorrt_import_error",
    "onnx_elem_type",
    "register_backend",
    "registered_backends",
    "resolve_backend",
]

AUTO = "auto"


def onnx_elem_type(dtype: torch.dtype) -> int:
    """The ONNX element type of ``dtype``; ``EngineBuildError`` when an engine may not carry it.

    Both backends consume ONNX models and ORT's I/O binding accepts these integers directly (which,
    unlike numpy dtypes, also covers bfloat16). The one dtype table (``trtcheck.dtypes``) decides: a
    dtype outside ``ENGINE_DTYPES`` (float64, int8, int16, uint8) would run on ONNX Runtime and then
    not build on TensorRT, so neither backend takes it.
    """
    try:
        return dtypes.engine_onnx_type(dtype)
    except dtypes.UnsupportedDtypeError as error:
        raise EngineBuildError(f"{dtype} cannot cross an engine boundary: {error}") from None


def check_model_signature(
    backend: str, model: onnx.ModelProto, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]
) -> None:
    """Raise ``EngineBuildError`` when ``model``'s graph inputs/outputs disagree with the specs.

    Catching a converter/partitioner mismatch here, with both sides named, is far cheaper to debug
    than an opaque runtime failure (or silently wrong results) inside the engine.
    """
    initializers = {init.name for init in model.graph.initializer}
    declared = {
        "input": [vi for vi in model.graph.input if vi.name not in initializers],
        "output": list(model.graph.output),
    }
    for kind, specs in (("input", inputs), ("output", outputs)):
        spec_names = [s.name for s in specs]
        model_names = [vi.name for vi in declared[kind]]
        if sorted(spec_names) != sorted(model_names) or len(set(spec_names)) != len(spec_names):
            raise EngineBuildError(
                f"{backend}: the ONNX model's graph {kind}s {model_names} do not match the {kind} specs "
                f"{spec_names}; the segment's specs and its converted model must name the same tensors"
            )
        by_name = {vi.name: vi for vi in declared[kind]}
        for spec in specs:
            tensor_type = by_name[spec.name].type.tensor_type
            want = onnx_elem_type(spec.dtype)
            if tensor_type.elem_type and tensor_type.elem_type != want:
                got = onnx.TensorProto.DataType.Name(tensor_type.elem_type)
                raise EngineBuildError(
                    f"{backend}: {kind} {spec.name!r} is {got} in the ONNX model but the spec says "
                    f"{spec.dtype}; conversion must keep each boundary tensor's dtype (a converter bug)"
                )
            if tensor_type.HasField("shape"):
                dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor_type.shape.dim)
                if len(dims) != len(spec.shape) or any(
                    m >= 0 and s >= 0 and m != s for m, s in zip(dims, spec.shape)
                ):
                    raise EngineBuildError(
                        f"{backend}: {kind} {spec.name!r} has shape {dims} in the ONNX model but the spec "
                        f"says {spec.shape}; conversion must keep each boundary tensor's shape (a converter bug)"
                    )


class Engine(abc.ABC):
    """Built from one TensorRT segment's ONNX model; called with torch tensors, returns torch tensors.

    Inputs are positional, in the order of ``inputs``; results come back as a tuple in the order of
    ``outputs``. Each call returns freshly allocated tensors, so a caller may keep or mutate results
    of one call without affecting the next.
    """

    backend: ClassVar[str]
    takes_weights: ClassVar[bool] = False
    """True when ``build`` takes ``weights=`` (the data of the model's weight placeholders, tensors in memory);
    ``build_engine`` gives every other backend the self-contained model (``with_weights``)."""
    install_hint: ClassVar[str] = ""
    """How to make an unavailable backend available (shown after ``unavailable_reason``)."""
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    node_origins: Mapping[str, str] = {}
    """``{ONNX node name: what it was converted from}`` (``onnx_format.origins.node_origins``), which an error of the
    engine, raised at build or at run time, quotes (``explain_node_names``); empty for a backend that keeps none."""

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """None when this backend can run here; else what is missing (a package, a CUDA device), in words."""
        return None

    @classmethod
    def is_available(cls) -> bool:
        """True when this backend's dependencies (packages, devices) are present on this machine."""
        return cls.unavailable_reason() is None

    @classmethod
    def build(
        cls, model: onnx.ModelProto, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], *, engines_in_model: int = 1,
        options: EngineOptions | None = None, shape_ranges: Mapping[str, ShapeRange] | None = None,
    ) -> Engine:
        """An engine running ``model`` (the finished graph: its types are what it computes in), one of
        ``engines_in_model`` engines of a compiled model; backends that tune their threads to how many engines share
        the process override this (``OnnxRuntimeEngine``), backends with build options read ``options``
        (``TensorRTEngine``: TF32, workspace, cache; ``OnnxRuntimeEngine``: TF32), and backends that build for a
        shape profile read ``shape_ranges`` (input name -> (min, opt, max) of every dynamic input; a backend that
        runs any shape, like ONNX Runtime, may ignore it)."""
        return cls(model, inputs, outputs)

    @abc.abstractmethod
    def __call__(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Run the engine on ``tensors`` (one per input spec)."""

    def check_inputs(self, tensors: Sequence[torch.Tensor]) -> None:
        """Raise ``ValueError`` naming the first input whose count, shape or dtype differs from its spec.

        Backends call this only after their cheap per-call check failed, so the detailed comparison
        costs nothing on the hot path.
        """
        if len(tensors) != len(self.inputs):
            names = ", ".join(s.name for s in self.inputs)
            raise ValueError(
                f"{type(self).__name__} expects {len(self.inputs)} input(s) ({names}), got {len(tensors)}"
            )
        for spec, tensor in zip(self.inputs, tensors):
            if not isinstance(tensor, torch.Tensor):
                raise ValueError(f"input {spec.name!r}: expected a torch.Tensor, got {type(tensor).__name__}")
            if not spec.matches_shape(tensor.shape):
                raise ValueError(
                    f"input {spec.name!r}: expected shape {spec.shape}, got {tuple(tensor.shape)}"
                )
            if tensor.dtype != spec.dtype:
                raise ValueError(f"input {spec.name!r}: expected dtype {spec.dtype}, got {tensor.dtype}")

    def prepare_inputs(self, tensors: Sequence[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
        """Check ``tensors`` against the input specs and return them contiguous and on ``device``.

        Backends hand raw pointers to their runtime, which assumes dense row-major buffers on its own
        device; tensors already in that form pass through untouched (no copy). The returned list also
        keeps any copies alive until the backend's run has read them.
        """
        if len(tensors) != len(self.inputs):
            self.check_inputs(tensors)  # raises, naming the expected inputs
        prepared = []
        for spec, tensor in zip(self.inputs, tensors):
            try:
                ok = tensor.shape == spec.shape and tensor.dtype == spec.dtype
            except AttributeError:  # not a tensor
                ok = False
            if not ok:
                self.check_inputs(tensors)  # raises unless a negative (dynamic) spec dim matched
            if tensor.device != device:
                tensor = tensor.to(device)
            if not tensor.is_contiguous():
                tensor = tensor.contiguous()
            prepared.append(tensor)
        return prepared

    def __repr__(self) -> str:
        def fmt(specs: tuple[TensorSpec, ...]) -> str:
            return ", ".join(f"{s.name}: {str(s.dtype).removeprefix('torch.')}{list(s.shape)}" for s in specs)

        return f"{type(self).__name__}(inputs=[{fmt(self.inputs)}], outputs=[{fmt(self.outputs)}])"


EngineFactory = type[Engine]

# Backend name -> engine class. Each backend module registers itself when ``trtcheck.engines`` is
# imported; a dict (rather than an if/elif chain) is what lets a new backend plug in by name.
_BACKENDS: dict[str, EngineFactory] = {}


def register_backend(name: str, engine_cls: EngineFactory, *, override: bool = False) -> EngineFactory:
    """Register ``engine_cls`` as backend ``name``; its constructor must take (model, inputs, outputs)."""
    if name == AUTO:
        raise ValueError(f"{AUTO!r} is reserved for automatic backend selection")
    if name in _BACKENDS and not override and _BACKENDS[name] is not engine_cls:
        raise ValueError(f"backend {name!r} is already registered; pass override=True to replace it")
    _BACKENDS[name] = engine_cls
    return engine_cls


def registered_backends() -> list[str]:
    """Every registered backend name, usable on this machine or not."""
    return sorted(_BACKENDS)


def available_backends() -> list[str]:
    """The registered backends whose dependencies are present here (what ``build_engine`` can run)."""
    return [name for name in sorted(_BACKENDS) if _BACKENDS[name].is_available()]


def tensorrt_import_error() -> str | None:
    """Why ``import tensorrt`` fails here (the ImportError's message), or None when it imports."""
    try:
        importlib.import_module("tensorrt")
    except ImportError as error:
        return str(error) or type(error).__name__
    return None


def import_tensorrt() -> ModuleType | None:
    """The ``tensorrt`` module, or None when it is not installed (or fails to import)."""
    try:
        return importlib.import_module("tensorrt")
    except ImportError:
        return None


def _unavailable(name: str) -> str | None:
    """What backend ``name`` (registered) misses here; a class overriding only ``is_available`` still gets a reason."""
    engine_cls = _BACKENDS[name]
    reason = engine_cls.unavailable_reason()
    if reason is None and not engine_cls.is_available():
        reason = f"{engine_cls.__name__}.is_available() returned False"
    return reason


def _unknown(name: object) -> BackendError:
    valid = [AUTO, *sorted(_BACKENDS)]
    close = difflib.get_close_matches(str(name), valid, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return BackendError(f"unknown engine backend {name!r}{hint}; valid backends: {', '.join(valid)}")


@dataclass(frozen=True)
class BackendChoice:
    """Which backend a requested name resolves to here, and why (``str()`` of it is ``describe_backend``'s text)."""

    requested: str
    name: str
    why: str
    """``"requested explicitly"``, or for ``auto`` what was available (``"tensorrt cannot run here: ..."``)."""

    @property
    def versions(self) -> dict[str, str]:
        """torch / ONNX Runtime / TensorRT versions and the device (see ``backend_versions``)."""
        return backend_versions()

    def describe(self) -> str:
        versions = self.versions
        device = versions.pop("device")
        listing = ", ".join(f"{package} {version}" for package, version in versions.items())
        return f"engine backend: {self.name} ({self.why})\nversions: {listing}; device: {device}"

    def __str__(self) -> str:
        return self.describe()


def choose_backend(name: str = AUTO) -> BackendChoice:
    """Resolve ``name`` like ``resolve_backend`` (raising the same errors), saying why that backend was chosen."""
    if name == AUTO:
        if "tensorrt" in _BACKENDS:
            reason = _unavailable("tensorrt")
            if reason is None:
                return BackendChoice(AUTO, "tensorrt", "auto: TensorRT and a CUDA device are present")
            return BackendChoice(AUTO, "onnxruntime", f"auto: tensorrt cannot run here, missing {reason}; using onnxruntime")
        return BackendChoice(AUTO, "onnxruntime", "auto: no tensorrt backend registered; using onnxruntime")
    if not isinstance(name, str) or name not in _BACKENDS:
        raise _unknown(name)
    reason = _unavailable(name)
    if reason is not None:
        hint = _BACKENDS[name].install_hint
        fix = f"{hint}, or" if hint else "Fix: make it available, or"
        others = [n for n in available_backends() if n != name]
        alternatives = f"use backend={others[0]!r}" if others else "use another backend"
        raise BackendUnavailableError(
            f"engine backend {name!r} was requested but cannot run on this machine: missing {reason}. "
            f"{fix} {alternatives} ('auto' picks the best backend available). trtcheck stops here rather than "
            "run every segment in PyTorch, which would verify nothing"
        )
    return BackendChoice(name, name, "requested explicitly")


def resolve_backend(name: str) -> str:
    """Turn a user-facing backend name into a registered one that can run on this machine.

    ``"auto"`` picks TensorRT when both the ``tensorrt`` package and a CUDA device are present, and
    ONNX Runtime otherwise, so the same call works on a laptop and on a GPU box. An explicitly named
    backend that cannot run here is a ``BackendUnavailableError`` naming what is missing and the fix
    (never a silent fallback to PyTorch). An unknown name is a ``BackendError`` (a ``ValueError``)
    listing the valid names (and the closest one, for typos).
    """
    return choose_backend(name).name


def describe_backend(name: str = AUTO) -> str:
    """Two lines: the backend ``name`` resolves to here and why, then the torch / ONNX Runtime / TensorRT
    versions and the device. Raises like ``resolve_backend``.

    ``engine backend: onnxruntime (auto: tensorrt cannot run here, missing the `tensorrt` package (No module
    named 'tensorrt') and a CUDA device (...); using onnxruntime)`` /
    ``versions: torch 2.x, onnxruntime 1.x, tensorrt not installed; device: cpu (...)``
    """
    return choose_backend(name).describe()


def _package_version(module_name: str) -> str:
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return "not installed"
    return str(getattr(module, "__version__", "(unknown version)"))


def _device() -> str:
    if not torch.cuda.is_available():
        built = f"torch built with CUDA {torch.version.cuda}" if torch.version.cuda else "torch built without CUDA"
        return f"cpu (no CUDA device: torch.cuda.is_available() is False; {built})"
    try:
        index = torch.cuda.current_device()
        return f"cuda:{index} {torch.cuda.get_device_name(index)} (CUDA {torch.version.cuda})"
    except Exception as error:  # noqa: BLE001 - a header must not fail on a half-working driver
        return f"cuda (device query failed: {error})"


def backend_versions() -> dict[str, str]:
    """``{"torch": ..., "onnxruntime": ..., "tensorrt": ..., "device": ...}``: what a run's results depend on."""
    return {
        "torch": torch.__version__,
        "onnxruntime": _package_version("onnxruntime"),
        "tensorrt": _package_version("tensorrt"),
        "device": _device(),
    }


def build_engine(
    model: onnx.ModelProto,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    backend: str = AUTO,
    *,
    engines_in_model: int = 1,
    options: EngineOptions | None = None,
    shape_ranges: Mapping[str, ShapeRange] | None = None,
    weights: Mapping[str, torch.Tensor] | None = None,
) -> Engine:
    """Build an engine running ``model`` on ``backend`` (see ``resolve_backend``).

    ``model`` is the finished graph: a reduced precision is already in its types (the compiler writes it:
    ``trtcheck.compiler.engine_build.build_segment_engine`` builds a segment from ``Settings``).
    ``inputs``/``outputs`` give the call order and the static shapes/dtypes the engine checks and
    allocates; their names must be the ONNX graph's input/output names. ``engines_in_model`` says how
    many engines the compiled model will run one after another, for backends whose best thread settings
    depend on it (``Engine.build``). ``options``: TF32 and TensorRT's workspace and engine cache
    (``EngineOptions``); None means the defaults. ``shape_ranges``:
    the (min, opt, max) of every dynamic input (a negative dimension in its spec), from shape analysis.
    ``weights``: the tensors of ``model``'s weight placeholders by initializer name (a segment converted under
    ``held_weights``: the model holds no weight data); a backend that takes them (``Engine.takes_weights``)
    copies each once into its engine, any other gets the self-contained model.
    """
    engine_cls = _BACKENDS[resolve_backend(backend)]
    if weights and not engine_cls.takes_weights:
        model, weights = with_weights(model, weights), None
    build = functools.partial(engine_cls.build, model, tuple(inputs), tuple(outputs), engines_in_model=engines_in_model, options=options)
    if weights:
        build = functools.partial(build, weights=weights)
    return build(shape_ranges=shape_ranges) if shape_ranges else build()
