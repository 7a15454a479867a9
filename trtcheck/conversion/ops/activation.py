"""Activations and (log-)softmax. Float-only: TensorRT's activation layers take no integers.

All but PReLU (whose check compares shapes) are ``dynamic``: they read no size.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from trtcheck.conversion.arguments import BoundArgs
from trtcheck.conversion.ops._common import (
    FLOAT,
    BoundConverterFn,
    aten,
    converter,
    ints,
    onnx_accepts,
    out_dtype,
    refuse,
    register_table,
)
from trtcheck.conversion.registry import Refusal

if TYPE_CHECKING:  # pragma: no cover - the context imports the registry, not vice versa
    from trtcheck.conversion.context import ConversionContext

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _approximation_ok(args: BoundArgs) -> bool | Refusal:
    return args.approximate in ("none", "tanh") or refuse(f"approximate {args.approximate!r} is neither 'none' nor 'tanh'")


@converter(aten.gelu.default, dtypes=FLOAT, check=_approximation_ok, dynamic=True)
def _gelu(ctx: ConversionContext, args: BoundArgs) -> str:
    """Opset 17 has no Gelu: x/2 * (1 + erf(x/sqrt2)), or the tanh approximation."""
    dtype = out_dtype(args.node)
    x = ctx.name(args.self)
    if args.approximate == "tanh":
        cube = ctx.add("Mul", [ctx.add("Mul", [x, x]), x])
        inner = ctx.add("Add", [x, ctx.add("Mul", [cube, ctx.constant(0.044715, dtype)])])
        core = ctx.add("Tanh", [ctx.add("Mul", [inner, ctx.constant(_SQRT_2_OVER_PI, dtype)])])
    else:
        core = ctx.add("Erf", [ctx.add("Mul", [x, ctx.constant(math.sqrt(0.5), dtype)])])
    half_x = ctx.add("Mul", [x, ctx.constant(0.5, dtype)])
    return ctx.add("Mul", [half_x, ctx.add("Add", [core, ctx.constant(1.0, dtype)])])


@converter(aten.silu.default, dtypes=FLOAT, dynamic=True)
def _silu(ctx: ConversionContext, args: BoundArgs) -> str:
    x = ctx.name(args.self)
    return ctx.add("Mul", [x, ctx.add("Sigmoid", [x])])


# aten overload -> (ONNX op, {ONNX attribute: schema argument name})
_PARAMETRIC: dict[Any, tuple[str, dict[str, str]]] = {
    aten.hardswish.default: ("HardSwish", {}),
    aten.hardsigmoid.default: ("HardSigmoid", {}),
    aten.leaky_relu.default: ("LeakyRelu", {"alpha": "negative_slope"}),
    aten.elu.default: ("Elu", {"alpha": "alpha"}),
    aten.celu.default: ("Celu", {"alpha": "alpha"}),
    aten.selu.default: ("Selu", {}),
}


def _parametric(entry: tuple[str, dict[str, str]]) -> BoundConverterFn:
    onnx_op, attributes = entry

    def convert(ctx: ConversionContext, args: BoundArgs) -> str:
        attrs = {key: float(args[name]) for key, name in attributes.items()}
        if onnx_op == "HardSigmoid":
            attrs = {"alpha": 1.0 / 6.0, "beta": 0.5}  # PyTorch's constants, not ONNX's defaults
        return ctx.add(onnx_op, [ctx.name(args.self)], **attrs)

    return convert


def _elu_plain(args: BoundArgs) -> bool | Refusal:
    """aten.elu also carries scale/input_scale (used by SELU's decomposition); Elu has neither."""
    if "scale" in args and (args.scale != 1 or args.input_scale != 1):
        return refuse(f"scale {args.scale} / input_scale {args.input_scale} are not 1: ONNX Elu has neither")
    return True


# The parameters become ONNX attributes, so they must be constants.
register_table(
    _PARAMETRIC, _parametric, check=_elu_plain, dynamic=True,
    per_entry=lambda target, entry: {"constants": tuple(entry[1].values()), "dtypes": FLOAT & onnx_accepts(entry[0])},
)


def _plain_softplus(args: BoundArgs) -> bool | Refusal:
    return args.beta == 1 or refuse(f"beta {args.beta!r} is not 1: ONNX Softplus has no beta")


@converter(aten.softplus.default, dtypes=FLOAT & onnx_accepts("Softplus"), check=_plain_softplus, dynamic=True)
def _softplus(ctx: ConversionContext, args: BoundArgs) -> str:
    """ONNX Softplus has no threshold; past PyTorch's threshold (20) log1p(exp(x)) == x in fp32 anyway."""
    return ctx.add("Softplus", [ctx.name(args.self)])


def _slope_broadcasts(args: BoundArgs) -> bool | Refusal:
    """ONNX PRelu broadcasts the slope to x one-directionally only (F.prelu already reshaped it)."""
    if tuple(args.node.meta["val"].shape) == tuple(args.meta("self").shape):
        return True
    return refuse(f"weight of shape {list(args.meta('weight').shape)} broadcasts x: ONNX PRelu cannot")


@converter(aten._prelu_kernel.default, dtypes=FLOAT, check=_slope_broadcasts)
def _prelu(ctx: ConversionContext, args: BoundArgs) -> str:
    return ctx.add("PRelu", [ctx.name(args.self), ctx.name(args.weight)])


_SOFTMAX: dict[Any, str] = {
    aten._softmax.default: "Softmax",
    aten.softmax.int: "Softmax",
    aten._log_softmax.default: "LogSoftmax",
    aten.log_softmax.int: "LogSoftmax",
}


def _softmax_ok(args: BoundArgs) -> bool | Refusal:
    """half_to_float / a dtype argument change the output type: left to PyTorch."""
    extra = args.half_to_float if "half_to_float" in args else args.dtype
    if extra in (None, False) or extra == args.meta("self").dtype:
        return True
    return refuse(f"{'half_to_float' if 'half_to_float' in args else 'dtype'} {extra!r} changes the output dtype")


def _softmax(onnx_op: str) -> BoundConverterFn:
    def convert(ctx: ConversionContext, args: BoundArgs) -> str:
        """A 0-d input (ATen takes dim 0 or -1 there) is one value: softmaxed as a vector of one (ONNX's Softmax
        wants rank >= 1), giving 1 (LogSoftmax: 0) as ATen does."""
        if args.meta("self").dim() == 0:
            axes = ints(ctx, [0])
            vector = ctx.add("Unsqueeze", [ctx.name(args.self), axes])
            return ctx.add("Squeeze", [ctx.add(onnx_op, [vector], axis=0), axes])
        return ctx.add(onnx_op, [ctx.name(args.self)], axis=int(args.dim))

    return convert


register_table(_SOFTMAX, _softmax, dtypes=FLOAT, constants=("dim",), check=_softmax_ok, dynamic=True)
