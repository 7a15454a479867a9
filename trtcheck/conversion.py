"""Conversion of one TensorRT segment (a standalone fx GraphModule) to an ONNX model.

trtcheck does not trust an exporter it did not write: every ATen overload is lowered by a converter
from :mod:`trtcheck.converters`, and the resulting ONNX model is what TensorRT's ONNX parser (or
ONNX Runtime on machines without a GPU) executes. The :class:`ConversionContext` is the small API
converters use to emit ONNX nodes, so that naming, constants and dtypes are handled in one place.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import onnx
import torch
import torch.fx
from onnx import TensorProto, helper, numpy_helper

from trtcheck.converters import registry

OPSET = 17

# torch dtype -> ONNX element type. float64/complex are deliberately absent: TensorRT has neither,
# and validators reject them before conversion is ever attempted.
_ONNX_DTYPES: dict[torch.dtype, int] = {
    torch.float32: TensorProto.FLOAT,
    torch.float16: TensorProto.FLOAT16,
    torch.bfloat16: TensorProto.BFLOAT16,
    torch.int64: TensorProto.INT64,
    torch.int32: TensorProto.INT32,
    torch.int16: TensorProto.INT16,
    torch.int8: TensorProto.INT8,
    torch.uint8: TensorProto.UINT8,
    torch.bool: TensorProto.BOOL,
}


_SHARED_CONSTANT_LIMIT = 1024


def _tensor_proto(tensor: torch.Tensor, name: str) -> onnx.TensorProto:
    if tensor.dtype == torch.bfloat16:  # numpy has no bfloat16: onnx converts float32 values itself
        return helper.make_tensor(name, TensorProto.BFLOAT16, list(tensor.shape), tensor.float().flatten().tolist())
    return numpy_helper.from_array(tensor.numpy().copy(order="C"), name)  # copy(): keeps 0-dim shapes


class ConversionError(Exception):
    """A node of a segment could not be converted to ONNX (no converter, or its validator said no)."""


def onnx_dtype(dtype: torch.dtype) -> int:
    """The ONNX element type of a torch dtype; ConversionError for dtypes TensorRT cannot hold."""
    try:
        return _ONNX_DTYPES[dtype]
    except KeyError:
        raise ConversionError(f"dtype {dtype} has no ONNX/TensorRT equivalent") from None


def _static_shape(value: torch.Tensor) -> list[int | str]:
    """Shape for an ONNX value_info: ints for static dims, a symbolic name for dynamic ones."""
    return [d if isinstance(d, int) else str(d) for d in value.shape]


def _value_info(name: str, value: Any) -> onnx.ValueInfoProto:
    if not isinstance(value, torch.Tensor):
        raise ConversionError(f"segment value {name!r} is not a tensor (meta['val'] = {value!r})")
    try:
        dtype = onnx_dtype(value.dtype)
    except ConversionError as exc:
        raise ConversionError(f"segment value {name!r}: {exc}") from None
    return helper.make_tensor_value_info(name, dtype, _static_shape(value))


def _describe(node: torch.fx.Node) -> str:
    return f"node {node.name!r} ({node.op} {node.target})"


class ConversionContext:
    """What a converter sees: name lookup for fx nodes, constants, and an ONNX node emitter."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        self.gm = gm
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._values: dict[torch.fx.Node, str | list[str]] = {}
        # fx node names are taken up front so generated names can never collide with them.
        self._used: set[str] = {n.name for n in gm.graph.nodes}
        self._counter = itertools.count()
        self._constants: dict[tuple[Any, ...], str] = {}

    # ---- names ---------------------------------------------------------------------------------
    @property
    def taken_names(self) -> frozenset[str]:
        """fx node names and ONNX names generated so far."""
        return frozenset(self._used)

    def fresh(self, base: str) -> str:
        """A value name not used anywhere in the graph yet."""
        while True:
            name = f"{base}_{next(self._counter)}"
            if name not in self._used:
                self._used.add(name)
                return name

    def bind(self, node: torch.fx.Node, names: str | Sequence[str]) -> None:
        """Record the ONNX value name(s) produced for ``node``."""
        self._values[node] = names if isinstance(names, str) else list(names)

    def names(self, node: torch.fx.Node) -> str | list[str]:
        """ONNX value name(s) already produced for an fx node."""
        try:
            return self._values[node]
        except KeyError:
            raise ConversionError(f"{_describe(node)} is used before it was converted") from None

    def name(self, arg: Any, dtype: torch.dtype | None = None) -> str:
        """An fx Node's single ONNX name, or an initializer holding a Python scalar/list of ``dtype``."""
        if isinstance(arg, torch.fx.Node):
            names = self.names(arg)
            if not isinstance(names, str):
                raise ConversionError(f"{_describe(arg)} has several outputs; use getitem")
            return names
        if dtype is None:
            dtype = torch.tensor(arg).dtype
        return self.constant(arg, dtype)

    def constant(self, value: Any, dtype: torch.dtype) -> str:
        """An initializer holding ``value`` (numpy/torch/python) as ``dtype``.

        Small equal constants (scalars, shapes, axes) are shared; large ones are not hashed.
        """
        if isinstance(value, torch.Tensor):
            tensor = value.detach().to("cpu", dtype).contiguous()
        else:
            tensor = torch.as_tensor(value, dtype=dtype).contiguous()
        key = None
        if tensor.numel() <= _SHARED_CONSTANT_LIMIT:
            key = (dtype, tuple(tensor.shape), tensor.view(-1).view(torch.uint8).numpy().tobytes())
            if key in self._constants:
                return self._constants[key]
        name = self.fresh("const")
        self.initializers.append(_tensor_proto(tensor, name))
        if key is not None:
            self._constants[key] = name
        return name

    def parameter(self, node: torch.fx.Node) -> str:
        """The initializer for a get_attr node (a parameter, buffer or lifted constant), named after it."""
        obj: Any = self.gm
        for part in str(node.target).split("."):
            obj = getattr(obj, part)
        if not isinstance(obj, torch.Tensor):
            raise ConversionError(f"{_describe(node)} does not refer to a tensor")
        onnx_dtype(obj.dtype)  # a float64 buffer has no place in a TensorRT engine
        self.initializers.append(_tensor_proto(obj.detach().cpu().contiguous(), node.name))
        return node.name

    def add(self, op_type: str, inputs: list[str], num_outputs: int = 1, **attrs: Any) -> str | list[str]:
        """Emit one ONNX node with fresh output names; "" in ``inputs`` marks an omitted optional input."""
        outputs = [self.fresh(op_type.lower()) for _ in range(num_outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outputs, **attrs))
        return outputs[0] if num_outputs == 1 else outputs

    @staticmethod
    def meta(arg: Any) -> torch.Tensor | None:
        """``node.meta['val']`` (a FakeTensor) of an fx Node; None for non-nodes or missing metadata."""
        if isinstance(arg, torch.fx.Node):
            value = arg.meta.get("val")
            return value if isinstance(value, torch.Tensor) else None
        return None


def _convert_node(ctx: ConversionContext, node: torch.fx.Node) -> None:
    converter = registry.get(node.target)
    if converter is None:
        raise ConversionError(f"no converter for {_describe(node)}")
    if not converter.supports(node):
        raise ConversionError(f"the converter for {node.target} rejects {_describe(node)}")
    try:
        result = converter.fn(ctx, node)
    except ConversionError:
        raise
    except Exception as exc:  # a converter bug must name the node it failed on
        raise ConversionError(f"converting {_describe(node)} failed: {exc}") from exc
    ctx.bind(node, result)


def segment_to_onnx(gm: torch.fx.GraphModule, opset: int = OPSET) -> onnx.ModelProto:
    """Convert a standalone one-segment GraphModule to a checked ONNX model.

    Graph inputs are the placeholders (same names), outputs are ``output_0``, ``output_1``, ... in the
    order of the fx output node. Raises ConversionError for any node that cannot be converted.
    Converters target exactly opset 17 (e.g. Reduce* axes as attributes), so no other opset is accepted.
    """
    if opset != OPSET:
        raise ValueError(f"trtcheck's converters emit ONNX opset {OPSET} only, not {opset}")
    ctx = ConversionContext(gm)
    inputs: list[onnx.ValueInfoProto] = []
    outputs: list[onnx.ValueInfoProto] = []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            inputs.append(_value_info(node.name, node.meta.get("val")))
            ctx.bind(node, node.name)
        elif node.op == "get_attr":
            ctx.bind(node, ctx.parameter(node))
        elif node.op == "call_function":
            _convert_node(ctx, node)
        elif node.op == "output":
            results = node.args[0]
            if isinstance(results, torch.fx.Node) or not isinstance(results, (tuple, list)):
                results = (results,)
            for index, result in enumerate(results):
                if not isinstance(result, torch.fx.Node):
                    raise ConversionError(f"segment output {index} is {result!r}, not a tensor node")
                name = f"output_{index}"
                if name in ctx.taken_names:
                    raise ConversionError(f"segment value name {name!r} clashes with an ONNX output name")
                # Always an Identity: outputs may alias inputs, constants or each other.
                ctx.nodes.append(helper.make_node("Identity", [ctx.name(result)], [name]))
                outputs.append(_value_info(name, result.meta.get("val")))
        else:
            raise ConversionError(f"unsupported {_describe(node)} in a segment")
    graph = helper.make_graph(ctx.nodes, "trtcheck_segment", inputs, outputs, ctx.initializers)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="trtcheck"
    )
    model.ir_version = min(model.ir_version, 8)  # opset 17 pairs with IR 8: older runtimes load it
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise ConversionError(f"the ONNX model of this segment is invalid: {exc}") from exc
    return model


__all__ = ["ConversionContext", "ConversionError", "OPSET", "onnx_dtype", "segment_to_onnx"]
