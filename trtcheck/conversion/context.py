"""What a converter sees while it turns one fx node into ONNX nodes: :class:`ConversionContext`.

The context is the small API converters emit through (fresh value names, shared constants,
parameters, dtypes), so that naming, constants and dtypes are handled in one place. It imports no
converter and no registry: the registry, the op modules and the interpreter all import it, never the
other way round, which is what keeps the conversion package free of import cycles.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import onnx
import torch
import torch.fx
from onnx import TensorProto, helper, numpy_helper

from trtcheck import dtypes

#: The one ONNX opset trtcheck's converters emit (e.g. Reduce* axes are attributes there).
OPSET = 17

_SHARED_CONSTANT_LIMIT = 1024


def _tensor_proto(tensor: torch.Tensor, name: str) -> onnx.TensorProto:
    if tensor.dtype == torch.bfloat16:  # numpy has no bfloat16: onnx converts float32 values itself
        return helper.make_tensor(name, TensorProto.BFLOAT16, list(tensor.shape), tensor.float().flatten().tolist())
    return numpy_helper.from_array(tensor.numpy().copy(order="C"), name)  # copy(): keeps 0-dim shapes


class ConversionError(Exception):
    """A node of a segment could not be converted to ONNX (no converter, or its validator said no)."""


def onnx_dtype(dtype: torch.dtype) -> int:
    """The ONNX element type of a dtype a TensorRT segment may hold; ConversionError for any other."""
    try:
        return dtypes.engine_onnx_type(dtype)
    except dtypes.UnsupportedDtypeError as error:
        raise ConversionError(str(error)) from None


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


__all__ = ["OPSET", "ConversionContext", "ConversionError", "onnx_dtype"]
