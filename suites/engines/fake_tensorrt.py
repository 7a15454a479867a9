"""A fake ``tensorrt`` module, for tests on machines where the real one cannot exist (no GPU, no TensorRT).

MOCK: TensorRT cannot be installed here (its wheels download from an unreachable host) and needs a CUDA
GPU, so the tests of ``trtcheck.engines.tensorrt`` inject this module as ``sys.modules["tensorrt"]``. It
implements only the TensorRT 10 Python API that trtcheck calls, with the documented names and shapes:

- ``Builder`` / ``create_network(flags)`` / ``create_builder_config`` / ``create_optimization_profile`` /
  ``build_serialized_network`` (returns bytes: the ONNX model behind a ``FAKEPLAN`` tag);
- ``OnnxParser``: ``parse``, ``num_errors``, ``get_error``, ``supports_model_v2``, ``num_subgraphs``,
  ``is_subgraph_supported``, ``get_subgraph_nodes``; it refuses ONNX ops listed in ``state.refuse_ops``;
- ``Runtime.deserialize_cuda_engine`` / ``ICudaEngine`` (``num_io_tensors``, ``get_tensor_name``,
  ``get_tensor_mode``, ``get_tensor_dtype``, ``get_tensor_shape``) / ``IExecutionContext``
  (``set_input_shape``, ``get_tensor_shape``, ``set_tensor_address``, ``execute_async_v3``).

Execution is real arithmetic on CPU memory: ``execute_async_v3`` reads each input from the address bound to
its *name*, runs the ONNX model in ONNX Runtime, and writes each output to the address bound to its name.
The engine lists its I/O tensors in ``state.io_order`` ("reversed" by default, unlike the ONNX graph), so
code that binds by position instead of by name computes wrong results. Nothing here says anything about
how real TensorRT behaves beyond the documented API: see ``suites/engines/test_tensorrt_gpu.py`` for that.
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

PLAN_TAG = b"FAKEPLAN"

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
    """What the fake saw and how it behaves; a fresh one per test (``make_module``)."""

    refuse_ops: set[str] = field(default_factory=set)
    io_order: str = "reversed"  # "reversed" or "graph": the order ICudaEngine lists its I/O tensors in
    output_dtype_override: dict[str, str] = field(default_factory=dict)  # output name -> DataType name
    fail_build: str | None = None  # build_serialized_network logs this as an ERROR and returns None
    builds: int = 0
    parses: int = 0
    deserialized: int = 0
    configs: list[Config] = field(default_factory=list)
    networks: list[Network] = field(default_factory=list)
    contexts: list[Any] = field(default_factory=list)  # the execution contexts made, in order


class DataType(enum.Enum):
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


class TensorIOMode(enum.Enum):
    NONE = 0
    INPUT = 1
    OUTPUT = 2


class NetworkDefinitionCreationFlag(enum.IntEnum):
    EXPLICIT_BATCH = 0
    STRONGLY_TYPED = 1


class BuilderFlag(enum.Enum):
    FP16 = 0
    TF32 = 6
    OBEY_PRECISION_CONSTRAINTS = 11
    BF16 = 17


class Tensor:
    def __init__(self, name: str, dtype: DataType) -> None:
        self.name, self.dtype = name, dtype


class Layer:
    """One ``ILayer`` per ONNX node, named after it, its outputs float32 (what a parsed fp32 model has):
    ``precision`` and ``set_output_type`` record what trtcheck constrained."""

    def __init__(self, name: str, outputs: list[str]) -> None:
        self.name = name
        self.precision: DataType | None = None
        self.output_types: dict[int, DataType] = {}
        self._outputs = [Tensor(output, DataType.FLOAT) for output in outputs]

    @property
    def num_outputs(self) -> int:
        return len(self._outputs)

    def get_output(self, index: int) -> Tensor:
        return self._outputs[index]

    def set_output_type(self, index: int, dtype: DataType) -> None:
        self.output_types[index] = dtype


class MemoryPoolType(enum.Enum):
    WORKSPACE = 0


class _Severity(enum.Enum):
    INTERNAL_ERROR = 0
    ERROR = 1
    WARNING = 2
    INFO = 3
    VERBOSE = 4


class ILogger:
    Severity = _Severity
    INTERNAL_ERROR, ERROR, WARNING, INFO, VERBOSE = _Severity

    def __init__(self) -> None:
        pass

    def log(self, severity: Any, msg: str) -> None:  # pragma: no cover - overridden
        pass


class Logger(ILogger):
    def __init__(self, min_severity: Any = _Severity.WARNING) -> None:
        self.min_severity = min_severity


class ParserError:
    def __init__(self, node: int, operator: str, desc: str) -> None:
        self._node, self._operator, self._desc = node, operator, desc

    def node(self) -> int:
        return self._node

    def node_operator(self) -> str:
        return self._operator

    def desc(self) -> str:
        return self._desc

    def __str__(self) -> str:  # the real binding's format (pyOnnx.cpp parserErrorStr)
        return f"In node {self._node} with name:  and operator: {self._operator} (importFallback): UNSUPPORTED_NODE: {self._desc}"


class Network:
    def __init__(self, flags: int) -> None:
        self.flags = flags
        self.model: onnx.ModelProto | None = None
        self.layers: list[Layer] = []

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def get_layer(self, index: int) -> Layer:
        return self.layers[index]

    @property
    def strongly_typed(self) -> bool:
        return bool(self.flags & (1 << int(NetworkDefinitionCreationFlag.STRONGLY_TYPED)))


class Profile:
    def __init__(self) -> None:
        self.shapes: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = {}

    def set_shape(self, input: str, min: Any, opt: Any, max: Any) -> None:
        self.shapes[input] = (tuple(min), tuple(opt), tuple(max))


class Config:
    def __init__(self) -> None:
        self.flags: set[Any] = {BuilderFlag.TF32}  # TensorRT's default
        self.pool_limits: dict[Any, int] = {}
        self.profiles: list[Profile] = []

    def set_flag(self, flag: Any) -> None:
        self.flags.add(flag)

    def clear_flag(self, flag: Any) -> None:
        self.flags.discard(flag)

    def set_memory_pool_limit(self, pool: Any, size: int) -> None:
        self.pool_limits[pool] = size

    def add_optimization_profile(self, profile: Profile) -> int:
        self.profiles.append(profile)
        return len(self.profiles) - 1


def make_module(version: str = "10.99.0") -> types.ModuleType:
    """A fresh fake ``tensorrt`` module with its own ``state``."""
    state = State()
    module = types.ModuleType("tensorrt")
    module.__doc__ = "MOCK tensorrt (suites/engines/fake_tensorrt.py): TensorRT cannot exist on this machine"
    module.__version__ = version
    # torch.export asks importlib.util.find_spec("tensorrt"), which needs a spec on a module in sys.modules.
    module.__spec__ = importlib.machinery.ModuleSpec("tensorrt", None)
    module.state = state

    class OnnxParser:
        def __init__(self, network: Network, logger: Any) -> None:
            self.network, self.logger = network, logger
            self._errors: list[ParserError] = []
            self._subgraphs: list[tuple[list[int], bool]] = []

        def _refused(self, model: onnx.ModelProto) -> list[int]:
            return [i for i, node in enumerate(model.graph.node) if node.op_type in state.refuse_ops]

        def parse(self, model: bytes, path: str | None = None) -> bool:
            state.parses += 1
            proto = onnx.load_from_string(bytes(model))
            refused = self._refused(proto)
            for i in refused:
                op = proto.graph.node[i].op_type
                self._errors.append(ParserError(i, op, f"No importer registered for op: {op}"))
            if refused:
                return False
            self.network.model = proto
            self.network.layers = [Layer(node.name, list(node.output)) for node in proto.graph.node]
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
                self.network.model = proto
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
        def __init__(self, logger: Any) -> None:
            self.logger = logger

        def create_network(self, flags: int = 0) -> Network:
            network = Network(flags)
            state.networks.append(network)
            return network

        def create_builder_config(self) -> Config:
            config = Config()
            state.configs.append(config)
            return config

        def create_optimization_profile(self) -> Profile:
            return Profile()

        def build_serialized_network(self, network: Network, config: Config) -> bytes | None:
            state.builds += 1
            if state.fail_build is not None:
                self.logger.log(ILogger.ERROR, state.fail_build)
                return None
            if network.model is None:
                self.logger.log(ILogger.ERROR, "fake: the network is empty")
                return None
            return PLAN_TAG + network.model.SerializeToString()

    class Runtime:
        def __init__(self, logger: Any) -> None:
            self.logger = logger

        def deserialize_cuda_engine(self, plan: Any) -> Engine | None:
            plan = bytes(plan)
            if not plan.startswith(PLAN_TAG):
                self.logger.log(ILogger.ERROR, "fake: not a plan this TensorRT can read")
                return None
            try:
                model = onnx.load_from_string(plan[len(PLAN_TAG):])
            except Exception:  # noqa: BLE001
                self.logger.log(ILogger.ERROR, "fake: corrupt plan")
                return None
            state.deserialized += 1
            return Engine(model)

    class Engine:
        def __init__(self, model: onnx.ModelProto) -> None:
            self.model = model
            initializers = {init.name for init in model.graph.initializer}
            self.io: dict[str, tuple[TensorIOMode, str, tuple[int, ...]]] = {}
            graph_inputs = [vi for vi in model.graph.input if vi.name not in initializers]
            for mode, infos in ((TensorIOMode.INPUT, graph_inputs), (TensorIOMode.OUTPUT, model.graph.output)):
                for vi in infos:
                    tensor_type = vi.type.tensor_type
                    dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor_type.shape.dim)
                    dtype = _FROM_ONNX[tensor_type.elem_type]
                    if mode is TensorIOMode.OUTPUT:
                        dtype = state.output_dtype_override.get(vi.name, dtype)
                    self.io[vi.name] = (mode, dtype, dims)
            names = list(self.io)
            self.order = names[::-1] if state.io_order == "reversed" else names
            self.session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])

        @property
        def num_io_tensors(self) -> int:
            return len(self.order)

        def get_tensor_name(self, index: int) -> str:
            return self.order[index]

        def get_tensor_mode(self, name: str) -> TensorIOMode:
            return self.io[name][0] if name in self.io else TensorIOMode.NONE

        def get_tensor_dtype(self, name: str) -> DataType:
            return DataType[self.io[name][1]]

        def get_tensor_shape(self, name: str) -> tuple[int, ...]:
            return self.io[name][2]

        def create_execution_context(self) -> Context:
            context = Context(self)
            state.contexts.append(context)
            return context

    class Context:
        def __init__(self, engine: Engine) -> None:
            self.engine = engine
            self.shapes: dict[str, tuple[int, ...]] = {}
            self.addresses: dict[str, int] = {}
            self.streams: list[int] = []

        def set_input_shape(self, name: str, shape: Any) -> bool:
            if self.engine.get_tensor_mode(name) is not TensorIOMode.INPUT:
                return False
            self.shapes[name] = tuple(shape)
            return True

        def get_tensor_shape(self, name: str) -> tuple[int, ...]:
            if self.engine.get_tensor_mode(name) is TensorIOMode.INPUT:
                return self.shapes.get(name, self.engine.get_tensor_shape(name))
            static = self.engine.get_tensor_shape(name)
            if all(d >= 0 for d in static):
                return static
            return self._output_shapes()[name]

        def _output_shapes(self) -> dict[str, tuple[int, ...]]:
            """MOCK of TensorRT's shape inference after ``set_input_shape``: run the model on zeros of the
            current input shapes and read the output shapes (a dynamic output's size is known only then)."""
            feeds = {
                name: np.zeros(self.get_tensor_shape(name), dtype=_NUMPY[dtype])
                for name, (mode, dtype, _) in self.engine.io.items()
                if mode is TensorIOMode.INPUT
            }
            results = self.engine.session.run(None, feeds)
            return {info.name: tuple(value.shape) for info, value in zip(self.engine.model.graph.output, results)}

        def set_tensor_address(self, name: str, address: int) -> bool:
            if name not in self.engine.io:
                return False
            self.addresses[name] = int(address)
            return True

        def execute_async_v3(self, stream_handle: int) -> bool:
            self.streams.append(stream_handle)
            feeds = {}
            for name, (mode, dtype, _) in self.engine.io.items():
                if mode is TensorIOMode.INPUT:
                    feeds[name] = _read(self.addresses[name], self.get_tensor_shape(name), _NUMPY[dtype])
            results = self.engine.session.run(None, feeds)
            for info, value in zip(self.engine.model.graph.output, results):
                value = np.ascontiguousarray(value, dtype=_NUMPY[self.engine.io[info.name][1]])
                ctypes.memmove(self.addresses[info.name], value.ctypes.data, value.nbytes)
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
    module.OnnxParser = OnnxParser
    module.Runtime = Runtime
    return module


def _read(address: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    count = int(np.prod(shape, dtype=np.int64))
    nbytes = count * np.dtype(dtype).itemsize
    raw = (ctypes.c_byte * max(nbytes, 1)).from_address(address) if nbytes else None
    if raw is None:
        return np.zeros(shape, dtype=dtype)
    return np.frombuffer(raw, dtype=np.uint8, count=nbytes).view(dtype).reshape(shape).copy()
