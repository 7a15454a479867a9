"""Activations and (log-)softmax. Float-only: TensorRT's activation layers take no integers."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from trtcheck.converters._common import FLOAT, arg, aten, converter, out_dtype
from trtcheck.converters.registry import ConverterFn

if TYPE_CHECKING:  # pragma: no cover - the context imports the registry, not vice versa
    from trtcheck.conversion import ConversionContext

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


@converter(aten.gelu.default, dtypes=FLOAT,
           check=lambda n: n.kwargs.get("approximate", "none") in ("none", "tanh"))
def _gelu(ctx: ConversionContext, node: torch.fx.Node) -> str:
    """Opset 17 has no Gelu: x/2 * (1 + erf(x/sqrt2)), or the tanh approximation."""
    dtype = out_dtype(node)
    x = ctx.name(node.args[0])
    if node.kwargs.get("approximate", "none") == "tanh":
        cube = ctx.add("Mul", [ctx.add("Mul", [x, x]), x])
        inner = ctx.add("Add", [x, ctx.add("Mul", [cube, ctx.constant(0.044715, dtype)])])
        core = ctx.add("Tanh", [ctx.add("Mul", [inner, ctx.constant(_SQRT_2_OVER_PI, dtype)])])
    else:
        core = ctx.add("Erf", [ctx.add("Mul", [x, ctx.constant(math.sqrt(0.5), dtype)])])
    half_x = ctx.add("Mul", [x, ctx.constant(0.5, dtype)])
    return ctx.add("Mul", [half_x, ctx.add("Add", [core, ctx.constant(1.0, dtype)])])


@converter(aten.silu.default, dtypes=FLOAT)
def _silu(ctx: ConversionContext, node: torch.fx.Node) -> str:
    x = ctx.name(node.args[0])
    return ctx.add("Mul", [x, ctx.add("Sigmoid", [x])])


# aten overload -> (ONNX op, {ONNX attribute: (argument index, argument name, default)})
_PARAMETRIC: dict[Any, tuple[str, dict[str, tuple[int, str, float]]]] = {
    aten.hardswish.default: ("HardSwish", {}),
    aten.hardsigmoid.default: ("HardSigmoid", {}),
    aten.leaky_relu.default: ("LeakyRelu", {"alpha": (1, "negative_slope", 0.01)}),
    aten.elu.default: ("Elu", {"alpha": (1, "alpha", 1.0)}),
    aten.celu.default: ("Celu", {"alpha": (1, "alpha", 1.0)}),
    aten.selu.default: ("Selu", {}),
}


def _parametric(onnx_op: str, attributes: dict[str, tuple[int, str, float]]) -> ConverterFn:
    def convert(ctx: ConversionContext, node: torch.fx.Node) -> str:
        attrs = {key: float(arg(node, *spec)) for key, spec in attributes.items()}
        if onnx_op == "HardSigmoid":
            attrs = {"alpha": 1.0 / 6.0, "beta": 0.5}  # PyTorch's constants, not ONNX's defaults
        return ctx.add(onnx_op, [ctx.name(node.args[0])], **attrs)

    return convert


def _elu_plain(node: torch.fx.Node) -> bool:
    """aten.elu also carries scale/input_scale (used by SELU's decomposition); Elu has neither."""
    return node.target != aten.elu.default or (arg(node, 2, "scale", 1) == 1 and arg(node, 3, "input_scale", 1) == 1)


for _target, (_op, _attrs) in _PARAMETRIC.items():
    converter(_target, dtypes=FLOAT, check=_elu_plain)(_parametric(_op, _attrs))


@converter(aten.softplus.default, dtypes=FLOAT, check=lambda n: arg(n, 1, "beta", 1) == 1)
def _softplus(ctx: ConversionContext, node: torch.fx.Node) -> str:
    """ONNX Softplus has no threshold; past PyTorch's threshold (20) log1p(exp(x)) == x in fp32 anyway."""
    return ctx.add("Softplus", [ctx.name(node.args[0])])


def _slope_broadcasts(node: torch.fx.Node) -> bool:
    """ONNX PRelu broadcasts the slope to x one-directionally only (F.prelu already reshaped it)."""
    return tuple(node.meta["val"].shape) == tuple(node.args[0].meta["val"].shape)


@converter(aten._prelu_kernel.default, dtypes=FLOAT, check=_slope_broadcasts)
def _prelu(ctx: ConversionContext, node: torch.fx.Node) -> str:
    return ctx.add("PRelu", [ctx.name(node.args[0]), ctx.name(node.args[1])])


_SOFTMAX: dict[Any, str] = {
    aten._softmax.default: "Softmax",
    aten.softmax.int: "Softmax",
    aten._log_softmax.default: "LogSoftmax",
    aten.log_softmax.int: "LogSoftmax",
}


def _softmax_ok(node: torch.fx.Node) -> bool:
    """half_to_float / a dtype argument change the output type: left to PyTorch."""
    extra = node.args[2] if len(node.args) > 2 else node.kwargs.get("dtype", node.kwargs.get("half_to_float"))
    return extra in (None, False) or extra == node.args[0].meta["val"].dtype


def _softmax(onnx_op: str) -> ConverterFn:
    def convert(ctx: ConversionContext, node: torch.fx.Node) -> str:
        return ctx.add(onnx_op, [ctx.name(node.args[0])], axis=int(node.args[1]))

    return convert


for _target, _op in _SOFTMAX.items():
    converter(_target, dtypes=FLOAT, check=_softmax_ok)(_softmax(_op))
