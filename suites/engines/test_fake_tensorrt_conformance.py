"""The fake ``tensorrt`` cannot lie about TensorRT 11.1's API: every name it offers is one the real 11.1 has.

``suites/engines/fake_tensorrt.py`` stands in for TensorRT in every test of the TensorRT backend (MOCK: TensorRT's
builder and parser need the full wheels and a CUDA GPU). Where it offered an API TensorRT no longer has, those tests
passed against TensorRT 10's ``BuilderFlag.FP16`` long after TensorRT 11 removed it. Two real references:

- **the runtime half, live**: ``tensorrt_lean`` 11.1.0.106 (``pip install tensorrt-lean-cu13==11.1.0.106``, a real
  TensorRT wheel that imports without a GPU) holds the real ``Runtime``, ``ICudaEngine``, ``IExecutionContext``,
  ``ILogger``/``Logger`` and the enums ``DataType``, ``TensorIOMode``, ``BuilderFlag``, ``MemoryPoolType``. Every
  member of a fake enum must exist there with the same value; every public method or property of a fake runtime
  class must exist on the real class, of the same kind, its keyword names those of one of the real overloads (a
  prefix: the fake may leave out trailing defaults). These tests skip, saying why, where ``tensorrt_lean`` 11.1 is
  not installed.
- **the builder half, from TensorRT 11.1's own declarations**: ``tensorrt_lean`` lacks ``Builder``,
  ``IBuilderConfig``, ``INetworkDefinition``, ``ILayer``, ``ITensor``, ``OnnxParser`` and
  ``NetworkDefinitionCreationFlag``. Their Python API is what TensorRT 11.1's pybind11 bindings declare
  (NVIDIA/TensorRT v11.1, ``python/src``: the source TensorRT's Python API reference documents), recorded in
  ``tensorrt_11_1_api`` by ``tensorrt_api_extract`` (reproducible from that tag). The fake's builder classes are
  checked against it the same way, and the recording against ``tensorrt_lean`` where both have a class, so that the
  recording is known to read the declarations right. TensorRT's migration guide ("Migrating from TensorRT 10.x to
  11.x", page "Removed Python APIs and Replacements") lists the weak-typing API removed in 11; neither the fake nor
  the recording may have any of it.

The fake's one name that is not TensorRT's is ``state`` (the tests' view into what it saw), exempted by name.
Checked failing once on purpose: a ``BuilderFlag.FP16 = 0`` planted in the fake failed
``test_every_fake_enum_member_is_real[BuilderFlag]`` (report of issue 40).
"""

from __future__ import annotations

import enum
import inspect
import re
from typing import Any

import pytest

from suites.engines import fake_tensorrt, tensorrt_11_1_api

REAL_VERSION = "11.1"
MOCK_CONTROL = {"state"}  # fake_tensorrt's test hook: the one public name that is not TensorRT's
RUNTIME_CLASSES = ("Runtime", "ICudaEngine", "IExecutionContext", "ILogger", "Logger")
BUILDER_CLASSES = ("Builder", "IBuilderConfig", "INetworkDefinition", "ILayer", "ITensor", "IOptimizationProfile", "IHostMemory",
                   "OnnxParser", "ParserError")
LEAN_ENUMS = ("DataType", "TensorIOMode", "BuilderFlag", "MemoryPoolType")
REMOVED_IN_11 = {
    "BuilderFlag": ("FP16", "BF16", "INT8", "FP8", "INT4", "FP4", "OBEY_PRECISION_CONSTRAINTS", "PREFER_PRECISION_CONSTRAINTS"),
    "NetworkDefinitionCreationFlag": ("EXPLICIT_BATCH",),
    "ILayer": ("precision", "precision_is_set", "reset_precision", "set_output_type", "output_type_is_set", "reset_output_type"),
    "IBuilderConfig": ("int8_calibrator", "set_quantization_flag", "get_quantization_flag", "clear_quantization_flag",
                       "quantization_flags", "set_calibration_profile", "get_calibration_profile"),
}
"""The weak-typing (and calibration) API TensorRT 11 removed: the migration guide's "Removed Python APIs and
Replacements" (BuilderFlag.FP16/BF16/INT8/FP8/INT4/FP4/OBEY_/PREFER_PRECISION_CONSTRAINTS, the IBuilderConfig
calibration and quantization-flag API), EXPLICIT_BATCH (gone from 11.1's NetworkDefinitionCreationFlag), and the
per-layer precision API of a weakly typed network. The guide lists BuilderFlag.DIRECT_IO as removed too, but 11.1's
bindings and tensorrt_lean 11.1 still have it (11.4.1's guide says "deprecated, not removed"), so it is not here."""


def _lean() -> Any:
    try:
        import tensorrt_lean
    except ImportError as error:
        pytest.skip(f"tensorrt_lean is not installed ({error}): pip install tensorrt-lean-cu13==11.1.0.106 to check the fake's "
                    "runtime half against the real TensorRT 11.1")
    if not str(tensorrt_lean.__version__).startswith(f"{REAL_VERSION}."):
        pytest.skip(f"tensorrt_lean {tensorrt_lean.__version__} is installed, not {REAL_VERSION}.x: the fake models {REAL_VERSION}")
    return tensorrt_lean


@pytest.fixture(scope="module")
def fake() -> Any:
    return fake_tensorrt.make_module()


def _public(cls: type) -> dict[str, Any]:
    """The members a fake class offers: its own and its fake bases' non-underscore attributes, as declared."""
    members: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if klass is object:
            continue
        for name, value in vars(klass).items():
            if not name.startswith("_"):
                members[name] = value
    return members


def _kind(value: Any) -> str:
    if isinstance(value, property) or type(value).__name__ in ("property", "pybind11_property"):
        return "property"
    if isinstance(value, (staticmethod, classmethod)) or inspect.isfunction(value) or inspect.isroutine(value):
        return "method"
    return "attribute"


def _fake_keywords(function: Any) -> tuple[str, ...]:
    parameters = list(inspect.signature(function).parameters.values())[1:]  # without self
    return tuple(p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"[": 1, "(": 1, "<": 1, "]": -1, ")": -1, ">": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current.strip())
    return parts


def _real_overloads(method: Any, name: str) -> list[tuple[str, ...]]:
    """The keyword names of each overload a pybind11 method's docstring states (``name(self: T, a: U, b: V = ...)``)."""
    overloads = []
    for match in re.finditer(rf"^\s*(?:\d+\.\s*)?{re.escape(name)}\((.*)\)\s*->", method.__doc__ or "", re.M):
        parameters = [part.split(":", 1)[0].split("=", 1)[0].strip() for part in _split_top_level(match.group(1))]
        if parameters[:1] == ["self"]:
            parameters = parameters[1:]
        if parameters != ["*args", "**kwargs"]:
            overloads.append(tuple(parameters))
    return overloads


def _check_class(fake_cls: type, real_members: dict[str, tuple[str, list[tuple[str, ...]] | None]], where: str) -> list[str]:
    """What ``fake_cls`` offers that the real class (``real_members``: name -> (kind, keyword overloads)) lacks."""
    problems = []
    for name, value in _public(fake_cls).items():
        if name not in real_members:
            problems.append(f"{fake_cls.__name__}.{name}: not in {where}")
            continue
        real_kind, overloads = real_members[name]
        kind = _kind(value)
        if kind != real_kind and not (kind == "attribute" and real_kind in ("attribute", "enum")):
            problems.append(f"{fake_cls.__name__}.{name}: a {kind} in the fake, a {real_kind} in {where}")
        elif kind == "method" and overloads is not None:
            keywords = _fake_keywords(value)
            if not any(overload[:len(keywords)] == keywords for overload in overloads):
                problems.append(f"{fake_cls.__name__}.{name}{keywords}: the real overloads take {overloads}")
    return problems


def _lean_members(real_cls: type) -> dict[str, tuple[str, list[tuple[str, ...]] | None]]:
    members = {}
    for name in dir(real_cls):
        if name.startswith("_"):
            continue
        value = inspect.getattr_static(real_cls, name)
        kind = _kind(value)
        members[name] = (kind, _real_overloads(getattr(real_cls, name), name) if kind == "method" else None)
    return members


def _recorded_members(name: str) -> dict[str, tuple[str, list[tuple[str, ...]] | None]]:
    return {member: ("property", None) if keywords is None else ("method", [tuple(keywords)])
            for member, keywords in tensorrt_11_1_api.CLASSES[name].items() if not member.startswith("_")}


def _fake_enums(fake: Any) -> dict[str, type[enum.Enum]]:
    enums = {name: value for name, value in vars(fake).items() if isinstance(value, type) and issubclass(value, enum.Enum)}
    enums["ILogger.Severity"] = fake.ILogger.Severity
    return enums


# -- enums ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [*LEAN_ENUMS, "ILogger.Severity"])
def test_every_fake_enum_member_is_real(fake, name):
    """Each member of the fake's enum exists in tensorrt_lean 11.1's, with the same value (code does arithmetic on
    them: ``1 << int(flag)``)."""
    lean = _lean()
    real = lean.ILogger.Severity if name == "ILogger.Severity" else getattr(lean, name)
    fake_enum = _fake_enums(fake)[name]
    real_members = {member: int(value) for member, value in real.__members__.items()}
    problems = [f"{name}.{member.name} = {int(member)}: real {real_members.get(member.name, 'has no such member')}"
                for member in fake_enum if real_members.get(member.name) != int(member)]
    assert not problems, problems


def test_network_creation_flags_are_tensorrt_11_1s(fake):
    """``NetworkDefinitionCreationFlag`` is builder-side (not in tensorrt_lean): its members and values are 11.1's
    declarations (bindings for the names, NvInfer.h for the values: STRONGLY_TYPED is 0 in 11.1, 1 in 10.x)."""
    recorded = tensorrt_11_1_api.NETWORK_FLAG_VALUES
    assert set(recorded) == set(tensorrt_11_1_api.ENUMS["NetworkDefinitionCreationFlag"])
    problems = [f"{m.name} = {int(m)}: 11.1 {recorded.get(m.name, 'has no such member')}"
                for m in fake.NetworkDefinitionCreationFlag if recorded.get(m.name) != int(m)]
    assert not problems, problems


def test_the_weak_typing_api_tensorrt_11_removed_is_nowhere(fake):
    """Neither the fake nor the recorded 11.1 API offers what the migration guide says 11.x removed (``REMOVED_IN_11``);
    tensorrt_lean's BuilderFlag agrees, where it is installed."""
    for owner, names in REMOVED_IN_11.items():
        fake_owner = getattr(fake, owner)
        recorded = tensorrt_11_1_api.ENUMS.get(owner) or tensorrt_11_1_api.CLASSES.get(owner, {})
        for removed in names:
            assert not hasattr(fake_owner, removed), f"the fake still offers {owner}.{removed}"
            assert removed not in recorded, f"the 11.1 recording has {owner}.{removed}: it is not 11.1's API"
    try:
        import tensorrt_lean
    except ImportError:
        return
    assert not set(REMOVED_IN_11["BuilderFlag"]) & set(tensorrt_lean.BuilderFlag.__members__)


# -- classes -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", RUNTIME_CLASSES)
def test_every_fake_runtime_member_is_real(fake, name):
    lean = _lean()
    problems = _check_class(getattr(fake, name), _lean_members(getattr(lean, name)), f"tensorrt_lean {lean.__version__}'s {name}")
    assert not problems, problems


@pytest.mark.parametrize("name", BUILDER_CLASSES)
def test_every_fake_builder_member_is_in_tensorrt_11_1s_bindings(fake, name):
    where = f"TensorRT {tensorrt_11_1_api.TAG}'s bindings ({tensorrt_11_1_api.COMMIT[:10]}) {name}"
    problems = _check_class(getattr(fake, name), _recorded_members(name), where)
    assert not problems, problems


@pytest.mark.parametrize("name", ["Runtime", "ICudaEngine", "IExecutionContext", "IOptimizationProfile", "IHostMemory"])
def test_the_recording_reads_the_bindings_as_the_real_wheel_has_them(name):
    """Where tensorrt_lean has a class the recording has too, their members agree: the recording's reading of the
    sources is the API that ships (so the builder half, which only the recording has, is read the same way)."""
    lean = _lean()
    real = set(_lean_members(getattr(lean, name)))
    recorded = set(_recorded_members(name))
    assert real <= recorded | {"__init__"}, sorted(real - recorded)
    assert recorded <= real, sorted(recorded - real)


def test_every_name_the_fake_module_offers_is_tensorrts(fake):
    lean = _lean()
    real = set(dir(lean)) | set(tensorrt_11_1_api.CLASSES) | set(tensorrt_11_1_api.ENUMS) | set(tensorrt_11_1_api.MODULE)
    offered = {name for name in vars(fake) if not name.startswith("_")} - MOCK_CONTROL
    assert offered <= real, sorted(offered - real)
    assert fake.__version__.startswith(f"{REAL_VERSION}.") and fake_tensorrt.VERSION == "11.1.0.106"
