"""A fake ``tensorrt`` module modelling TensorRT 11.1, for tests on machines where the real one cannot run.

MOCK: TensorRT's builder and ONNX parser ship only in the full ``tensorrt`` wheels, whose libraries need a CUDA GPU,
so the tests of ``trtcheck.engines.tensorrt`` inject this module as ``sys.modules["tensorrt"]``. It offers only what
TensorRT 11.1's Python API has, with its names, keyword names and enum values, and nothing 11.1 removed: no
``BuilderFlag.FP16``/``BF16``/``OBEY_PRECISION_CONSTRAINTS``, no ``NetworkDefinitionCreationFlag.EXPLICIT_BATCH``, no
``ILayer.precision`` or ``set_output_type`` (every class has ``__slots__``, so setting an attribute the real binding
lacks raises ``AttributeError`` as pybind11's classes do). ``suites/engines/test_fake_tensorrt_conformance.py`` checks
every public name here against the real API: ``tensorrt_lean`` 11.1 (runtime classes and enums) and TensorRT 11.1's
binding sources (``tensorrt_11_1_api``: builder and parser). The one thing it offers that TensorRT does not is
``state`` (below), the tests' view into what the fake saw.

- ``Builder`` / ``create_network(flags)`` / ``create_builder_config`` / ``create_optimization_profile`` /
  ``build_serialized_network`` (an ``IHostMemory`` holding the ONNX model behind a ``FAKEPLAN`` tag);
- ``OnnxParser``: ``parse``, ``num_errors``, ``get_error``, ``supports_model_v2``, ``num_subgraphs``,
  ``is_subgraph_supported``, ``get_subgraph_nodes``; it refuses ONNX ops listed in ``state.refuse_ops``, and, as a
  strongly typed network must, a node whose float inputs disagree in type;
- ``Runtime.deserialize_cuda_engine`` / ``ICudaEngine`` (``num_io_tensors``, ``get_tensor_name``,
  ``get_tensor_mode``, ``get_tensor_dtype``, ``get_tensor_shape``) / ``IExecutionContext`` (``set_input_shape``,
  ``get_tensor_shape``, ``set_tensor_address``, ``execute_async_v3``).

Execution is real arithmetic on CPU memory: ``execute_async_v3`` reads each input from the address bound to its
*name*, runs the built ONNX model in ONNX Runtime (its float16/bfloat16 layers through trtcheck's CPU emulation,
``trtcheck.engines.emulation.emulate``: the only fp16 arithmetic this machine has, not TensorRT's kernels; TF32 is
not applied), and writes each output to the address bound to its name. The engine lists its I/O tensors in
``state.io_order`` ("reversed" by default, unlike the ONNX graph), so code that binds by position instead of by name
computes wrong results. Nothing here says how real TensorRT computes: see ``suites/engines/test_tensorrt_gpu.py``.
"""

from __future__ import annotations

import ctypes
import enum
import importlib.machinery
import types
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from trtcheck.engines.emulation import emulate, needs_emulation

VERSION = "11.1.0.106"
PLAN_TAG = b"FAKEPLAN"
DEVICE_MEMORY = 80 << 30  # MOCK: the workspace limit an IBuilderConfig reports before one is set (the device's memory)

_NUMPY = {
    "FLOAT": np.float32, "HALF": np.float16, "INT32": np.int32, "INT64": np.int64, "BOOL": np.bool_, "INT8": np.int8, "UINT8": np.uint8,
}
_FROM_ONNX = {
    onnx.TensorProto.FLOAT: "FLOAT",
    onnx.TensorProto.FLOAT16: "HALF",
    onnx.TensorProto.BFLOAT16: "BF16",
    onnx.TensorProto.INT32: "INT32",
    onnx.TensorProto.INT64: "INT64",
    onnx.TensorProto.BOOL: "BOOL",
    onnx.TensorProto.INT8: "INT8",
    onnx.TensorProto.UINT8: "UINT8",
}


@dataclass
class State:
    """MOCK control, not TensorRT: what the fake saw and how it behaves; a fresh one per test (``make_module``)."""

    refuse_ops: set[str] = field(default_factory=set)
    io_order: str = "reversed"  # "reversed" or "graph": the order ICudaEngine lists its I/O tensors in
    output_dtype_override: dict[str, str] = field(default_factory=dict)  # output name -> DataType name
    fail_build: str | None = None  # build_serialized_network logs this as an ERROR and returns None
    builds: int = 0
    parses: int = 0
    deserialized: int = 0
    network_flags: list[int] = field(default_factory=list)  # create_network's flags, in order
    parsed: list[onnx.ModelProto] = field(default_factory=list)  # the models the parser accepted, in order
    configs: list[Any] = field(default_factory=list)  # the IBuilderConfig objects made, in order
    profiles: list[list[Any]] = field(default_factory=list)  # per config, the profiles added to it
    contexts: list[Any] = field(default_factory=list)  # the execution contexts made, in order
    streams: list[int] = field(default_factory=list)  # the stream handles execute_async_v3 was given, in order


# -- enums: TensorRT 11.1's members and values (tensorrt_lean 11.1; NetworkDefinitionCreationFlag: NvInfer.h) ---------


class DataType(enum.IntEnum):
    FLOAT = 0
    HALF = 1
    INT8 = 2
    INT32 = 3
    BOOL = 4
    UINT8 = 5
    FP8 = 6
    BF16 = 7
    INT64 = 8
    INT4 = 9
    FP4 = 10
    E8M0 = 11


class TensorIOMode(enum.IntEnum):
    NONE = 0
    INPUT = 1
    OUTPUT = 2


class NetworkDefinitionCreationFlag(enum.IntEnum):
    STRONGLY_TYPED = 0  # deprecated in 11.x and ignored: every network is strongly typed


class BuilderFlag(enum.IntEnum):
    TF32 = 6


class MemoryPoolType(enum.IntEnum):
    WORKSPACE = 0


class _Severity(enum.IntEnum):
    INTERNAL_ERROR = 0
    ERROR = 1
    WARNING = 2
    INFO = 3
    VERBOSE = 4


_Severity.__name__ = _Severity.__qualname__ = "Severity"


class ILogger:
    __slots__ = ()  # a subclass (trtcheck's logger) has its own attributes, as the real binding's trampoline allows
    Severity = _Severity
    INTERNAL_ERROR, ERROR, WARNING, INFO, VERBOSE = _Severity

    def __init__(self) -> None:
        pass

    def log(self, severity: Any, msg: str) -> None:  # pragma: no cover - overridden
        pass


class Logger(ILogger):
    __slots__ = ("_min_severity",)

    def __init__(self, min_severity: Any = _Severity.WARNING) -> None:
        self._min_severity = min_severity

    @property
    def min_severity(self) -> Any:
        return self._min_severity


# -- the network a parse makes ----------------------------------------------------------------------------------------


class ITensor:
    __slots__ = ("_name", "_dtype", "_shape")

    def __init__(self, name: str, dtype: DataType, shape: tuple[int, ...]) -> None:
        self._name, self._dtype, self._shape = name, dtype, shape

    @property
    def name(self) -> str:
        return self._name

    @property
    def dtype(self) -> DataType:
        return self._dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape


class ILayer:
    """One layer per ONNX node, named after it (the parser's naming), its tensors typed as the ONNX model types them:
    a strongly typed network computes in its model's types."""

    __slots__ = ("_name", "_inputs", "_outputs")

    def __init__(self, name: str, inputs: list[ITensor], outputs: list[ITensor]) -> None:
        self._name, self._inputs, self._outputs = name, inputs, outputs

    @property
    def name(self) -> str:
        return self._name

    @property
    def num_inputs(self) -> int:
        return len(self._inputs)

    @property
    def num_outputs(self) -> int:
        return len(self._outputs)

    def get_input(self, index: int) -> ITensor:
        return self._inputs[index]

    def get_output(self, index: int) -> ITensor:
        return self._outputs[index]

    def get_output_type(self, index: int) -> DataType:
        return self._outputs[index].dtype


class INetworkDefinition:
    __slots__ = ("_model", "_layers", "_inputs", "_outputs")

    def __init__(self) -> None:
        self._model: onnx.ModelProto | None = None
        self._layers: list[ILayer] = []
        self._inputs: list[ITensor] = []
        self._outputs: list[ITensor] = []

    @property
    def num_layers(self) -> int:
        return len(self._layers)

    def get_layer(self, index: int) -> ILayer:
        return self._layers[index]

    @property
    def num_inputs(self) -> int:
        return len(self._inputs)

    def get_input(self, index: int) -> ITensor:
        return self._inputs[index]

    @property
    def num_outputs(self) -> int:
        return len(self._outputs)

    def get_output(self, index: int) -> ITensor:
        return self._outputs[index]


class IOptimizationProfile:
    __slots__ = ("_shapes",)

    def __init__(self) -> None:
        self._shapes: dict[str, list[tuple[int, ...]]] = {}

    def set_shape(self, input: str, min: Any, opt: Any, max: Any) -> None:  # TensorRT's keyword names
        self._shapes[input] = [tuple(min), tuple(opt), tuple(max)]

    def get_shape(self, input: str) -> list[tuple[int, ...]]:
        return list(self._shapes.get(input, []))


class IBuilderConfig:
    __slots__ = ("_flags", "_pool_limits", "_profiles")

    def __init__(self, profiles: list[IOptimizationProfile]) -> None:
        self._flags: set[BuilderFlag] = {BuilderFlag.TF32}  # TensorRT's default
        self._pool_limits: dict[MemoryPoolType, int] = {}
        self._profiles = profiles

    def set_flag(self, flag: BuilderFlag) -> None:
        self._flags.add(BuilderFlag(flag))

    def clear_flag(self, flag: BuilderFlag) -> None:
        self._flags.discard(BuilderFlag(flag))

    def get_flag(self, flag: BuilderFlag) -> bool:
        return BuilderFlag(flag) in self._flags

    @property
    def flags(self) -> int:
        return sum(1 << int(flag) for flag in self._flags)

    def set_memory_pool_limit(self, pool: MemoryPoolType, pool_size: int) -> None:
        self._pool_limits[MemoryPoolType(pool)] = int(pool_size)

    def get_memory_pool_limit(self, pool: MemoryPoolType) -> int:
        return self._pool_limits.get(MemoryPoolType(pool), DEVICE_MEMORY)

    def add_optimization_profile(self, profile: IOptimizationProfile) -> int:
        self._profiles.append(profile)
        return len(self._profiles) - 1

    @property
    def num_optimization_profiles(self) -> int:
        return len(self._profiles)


class IHostMemory:
    """The serialized plan; real TensorRT exposes its bytes through the buffer protocol, which ``bytes()`` reads (here:
    ``__bytes__``, Python 3.11 having no ``__buffer__``)."""

    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        self._data = data

    def __bytes__(self) -> bytes:
        return self._data

    @property
    def nbytes(self) -> int:
        return len(self._data)

    @property
    def dtype(self) -> DataType:
        return DataType.UINT8


class ParserError:
    __slots__ = ("_node", "_operator", "_desc", "_name")

    def __init__(self, node: int, node_name: str, operator: str, desc: str) -> None:
        self._node, self._name, self._operator, self._desc = node, node_name, operator, desc

    def node(self) -> int:
        return self._node

    def node_name(self) -> str:
        return self._name

    def node_operator(self) -> str:
        return self._operator

    def desc(self) -> str:
        return self._desc

    def __str__(self) -> str:  # the real binding's format (pyOnnx.cpp parserErrorStr)
        return (f"In node {self._node} with name: {self._name} and operator: {self._operator} (importFallback): "
                f"UNSUPPORTED_NODE: {self._desc}")


def make_module(version: str = VERSION) -> types.ModuleType:
    """A fresh fake ``tensorrt`` module with its own ``state``."""
    state = State()
    module = types.ModuleType("tensorrt")
    module.__doc__ = "MOCK tensorrt 11.1 (suites/engines/fake_tensorrt.py): TensorRT cannot run on this machine"
    module.__version__ = version
    # torch.export asks importlib.util.find_spec("tensorrt"), which needs a spec on a module in sys.modules.
    module.__spec__ = importlib.machinery.ModuleSpec("tensorrt", None)
    module.state = state

    class OnnxParser:
        __slots__ = ("_network", "_logger", "_errors", "_subgraphs")

        def __init__(self, network: INetworkDefinition, logger: Any) -> None:
            self._network, self._logger = network, logger
            self._errors: list[ParserError] = []
            self._subgraphs: list[tuple[list[int], bool]] = []

        def _refused(self, model: onnx.ModelProto) -> dict[int, str]:
            """Node index -> why a strongly typed TensorRT refuses it: an op ``state.refuse_ops`` lists, or float
            inputs of different types (a strongly typed network has no implicit conversions)."""
            refused = {i: f"No importer registered for op: {node.op_type}" for i, node in enumerate(model.graph.node)
                       if node.op_type in state.refuse_ops}
            types_of = _float_types(model)
            for i, node in enumerate(model.graph.node):
                if node.op_type in ("Cast", "CastLike", "Shape", "Size", "Resize"):
                    continue
                kinds = {types_of[name] for name in node.input if name in types_of}
                if len(kinds) > 1 and i not in refused:
                    names = ", ".join(onnx.TensorProto.DataType.Name(k) for k in sorted(kinds))
                    refused[i] = f"strongly typed network: {node.op_type} inputs of types {names}"
            return refused

        def parse(self, model: bytes, path: str | None = None) -> bool:
            state.parses += 1
            proto = onnx.load_from_string(bytes(model))
            refused = self._refused(proto)
            for i, desc in sorted(refused.items()):
                node = proto.graph.node[i]
                self._errors.append(ParserError(i, node.name, node.op_type, desc))
            if refused:
                return False
            _populate(self._network, proto)
            state.parsed.append(proto)
            return True

        def supports_model_v2(self, model: bytes, path: str | None = None) -> bool:
            proto = onnx.load_from_string(bytes(model))
            refused = set(self._refused(proto))
            self._subgraphs = []
            for i in range(len(proto.graph.node)):
                supported = i not in refused
                if self._subgraphs and self._subgraphs[-1][1] == supported:
                    self._subgraphs[-1][0].append(i)
                else:
                    self._subgraphs.append(([i], supported))
            if not refused:
                _populate(self._network, proto)
            return not refused

        @property
        def num_subgraphs(self) -> int:
            return len(self._subgraphs)

        def is_subgraph_supported(self, index: int) -> bool:
            return self._subgraphs[index][1]

        def get_subgraph_nodes(self, index: int) -> list[int]:
            return list(self._subgraphs[index][0])

        @property
        def num_errors(self) -> int:
            return len(self._errors)

        def get_error(self, index: int) -> ParserError:
            return self._errors[index]

    class Builder:
        __slots__ = ("_logger",)

        def __init__(self, logger: Any) -> None:
            self._logger = logger

        def create_network(self, flags: int = 0) -> INetworkDefinition:
            state.network_flags.append(int(flags))
            return INetworkDefinition()

        def create_builder_config(self) -> IBuilderConfig:
            profiles: list[IOptimizationProfile] = []
            config = IBuilderConfig(profiles)
            state.configs.append(config)
            state.profiles.append(profiles)
            return config

        def create_optimization_profile(self) -> IOptimizationProfile:
            return IOptimizationProfile()

        def build_serialized_network(self, network: INetworkDefinition, config: IBuilderConfig) -> IHostMemory | None:
            state.builds += 1
            if state.fail_build is not None:
                self._logger.log(ILogger.ERROR, state.fail_build)
                return None
            if network._model is None:
                self._logger.log(ILogger.ERROR, "fake: the network is empty")
                return None
            return IHostMemory(PLAN_TAG + network._model.SerializeToString())

        @property
        def logger(self) -> Any:
            return self._logger

    class Runtime:
        __slots__ = ("_logger",)

        def __init__(self, logger: Any) -> None:
            self._logger = logger

        def deserialize_cuda_engine(self, serialized_engine: Any) -> ICudaEngine | None:
            plan = bytes(serialized_engine)
            if not plan.startswith(PLAN_TAG):
                self._logger.log(ILogger.ERROR, "fake: not a plan this TensorRT can read")
                return None
            try:
                model = onnx.load_from_string(plan[len(PLAN_TAG):])
            except Exception:  # noqa: BLE001
                self._logger.log(ILogger.ERROR, "fake: corrupt plan")
                return None
            state.deserialized += 1
            return ICudaEngine(model)

        @property
        def logger(self) -> Any:
            return self._logger

    class ICudaEngine:
        __slots__ = ("_model", "_io", "_order", "_session")

        def __init__(self, model: onnx.ModelProto) -> None:
            self._model = model
            initializers = {init.name for init in model.graph.initializer}
            self._io: dict[str, tuple[TensorIOMode, str, tuple[int, ...]]] = {}
            graph_inputs = [vi for vi in model.graph.input if vi.name not in initializers]
            for mode, infos in ((TensorIOMode.INPUT, graph_inputs), (TensorIOMode.OUTPUT, model.graph.output)):
                for vi in infos:
                    tensor_type = vi.type.tensor_type
                    dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor_type.shape.dim)
                    dtype = _FROM_ONNX[tensor_type.elem_type]
                    if mode is TensorIOMode.OUTPUT:
                        dtype = state.output_dtype_override.get(vi.name, dtype)
                    self._io[vi.name] = (mode, dtype, dims)
            names = list(self._io)
            self._order = names[::-1] if state.io_order == "reversed" else names
            runnable = emulate(model)[0] if needs_emulation(model) else model  # MOCK: CPU fp16/bf16 arithmetic
            self._session = ort.InferenceSession(runnable.SerializeToString(), providers=["CPUExecutionProvider"])

        @property
        def num_io_tensors(self) -> int:
            return len(self._order)

        def get_tensor_name(self, index: int) -> str:
            return self._order[index]

        def get_tensor_mode(self, name: str) -> TensorIOMode:
            return self._io[name][0] if name in self._io else TensorIOMode.NONE

        def get_tensor_dtype(self, name: str) -> DataType:
            return DataType[self._io[name][1]]

        def get_tensor_shape(self, name: str) -> tuple[int, ...]:
            return self._io[name][2]

        def create_execution_context(self) -> IExecutionContext:
            context = IExecutionContext(self)
            state.contexts.append(context)
            return context

    class IExecutionContext:
        __slots__ = ("_engine", "_shapes", "_addresses")

        def __init__(self, engine: ICudaEngine) -> None:
            self._engine = engine
            self._shapes: dict[str, tuple[int, ...]] = {}
            self._addresses: dict[str, int] = {}

        @property
        def engine(self) -> ICudaEngine:
            return self._engine

        def set_input_shape(self, name: str, shape: Any) -> bool:
            if self._engine.get_tensor_mode(name) is not TensorIOMode.INPUT:
                return False
            self._shapes[name] = tuple(shape)
            return True

        def get_tensor_shape(self, name: str) -> tuple[int, ...]:
            if self._engine.get_tensor_mode(name) is TensorIOMode.INPUT:
                return self._shapes.get(name, self._engine.get_tensor_shape(name))
            static = self._engine.get_tensor_shape(name)
            if all(d >= 0 for d in static):
                return static
            return self._output_shapes()[name]

        def get_tensor_address(self, name: str) -> int:
            return self._addresses.get(name, 0)

        def _output_shapes(self) -> dict[str, tuple[int, ...]]:
            """MOCK of TensorRT's shape inference after ``set_input_shape``: run the model on zeros of the
            current input shapes and read the output shapes (a dynamic output's size is known only then)."""
            feeds = {
                name: np.zeros(self.get_tensor_shape(name), dtype=_NUMPY[dtype])
                for name, (mode, dtype, _) in self._engine._io.items()
                if mode is TensorIOMode.INPUT
            }
            results = self._engine._session.run(None, feeds)
            return {info.name: tuple(value.shape) for info, value in zip(self._engine._model.graph.output, results)}

        def set_tensor_address(self, name: str, memory: int) -> bool:
            if name not in self._engine._io:
                return False
            self._addresses[name] = int(memory)
            return True

        def execute_async_v3(self, stream_handle: int) -> bool:
            state.streams.append(stream_handle)
            feeds = {}
            for name, (mode, dtype, _) in self._engine._io.items():
                if mode is TensorIOMode.INPUT:
                    feeds[name] = _read(self._addresses[name], self.get_tensor_shape(name), _NUMPY[dtype])
            results = self._engine._session.run(None, feeds)
            for info, value in zip(self._engine._model.graph.output, results):
                value = np.ascontiguousarray(value, dtype=_NUMPY[self._engine._io[info.name][1]])
                ctypes.memmove(self._addresses[info.name], value.ctypes.data, value.nbytes)
            return True

    module.DataType = DataType
    module.float32, module.float16, module.bfloat16 = DataType.FLOAT, DataType.HALF, DataType.BF16
    module.TensorIOMode = TensorIOMode
    module.NetworkDefinitionCreationFlag = NetworkDefinitionCreationFlag
    module.BuilderFlag = BuilderFlag
    module.MemoryPoolType = MemoryPoolType
    module.ILogger = ILogger
    module.Logger = Logger
    module.Builder = Builder
    module.IBuilderConfig = IBuilderConfig
    module.INetworkDefinition = INetworkDefinition
    module.ILayer = ILayer
    module.ITensor = ITensor
    module.IOptimizationProfile = IOptimizationProfile
    module.IHostMemory = IHostMemory
    module.OnnxParser = OnnxParser
    module.ParserError = ParserError
    module.Runtime = Runtime
    module.ICudaEngine = ICudaEngine
    module.IExecutionContext = IExecutionContext
    return module


def _float_types(model: onnx.ModelProto) -> dict[str, int]:
    """Every typed value's ONNX element type (what a strongly typed network's tensors are)."""
    inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
    graph = inferred.graph
    found = {v.name: v.type.tensor_type.elem_type for v in [*graph.value_info, *graph.input, *graph.output]
             if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type}
    found.update({init.name: init.data_type for init in graph.initializer})
    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}
    return {name: elem for name, elem in found.items() if elem in floats}


def _populate(network: INetworkDefinition, model: onnx.ModelProto) -> None:
    """The parsed network: one layer per ONNX node, named after it, its tensors typed as the model types them."""
    inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False).graph
    infos = {v.name: v for v in [*inferred.value_info, *inferred.input, *inferred.output]}
    initializers = {init.name: init for init in model.graph.initializer}

    def tensor(name: str) -> ITensor:
        if name in initializers:
            init = initializers[name]
            return ITensor(name, DataType[_FROM_ONNX.get(init.data_type, "FLOAT")], tuple(init.dims))
        info = infos.get(name)
        if info is None or not info.type.tensor_type.elem_type:
            return ITensor(name, DataType.FLOAT, ())
        tensor_type = info.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor_type.shape.dim)
        return ITensor(name, DataType[_FROM_ONNX.get(tensor_type.elem_type, "FLOAT")], dims)

    network._model = model
    network._layers = [ILayer(node.name, [tensor(i) for i in node.input if i], [tensor(o) for o in node.output])
                       for node in model.graph.node]
    network._inputs = [tensor(v.name) for v in model.graph.input if v.name not in initializers]
    network._outputs = [tensor(v.name) for v in model.graph.output]


def _read(address: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    count = int(np.prod(shape, dtype=np.int64))
    nbytes = count * np.dtype(dtype).itemsize
    raw = (ctypes.c_byte * max(nbytes, 1)).from_address(address) if nbytes else None
    if raw is None:
        return np.zeros(shape, dtype=dtype)
    return np.frombuffer(raw, dtype=np.uint8, count=nbytes).view(dtype).reshape(shape).copy()
