"""Elementwise math, comparisons, logic, where and clamp.

Type promotion: ATen ops promote mixed operands (``mul(float_tensor, int_tensor)``, ``add(x, 1)``,
``sub(1.0, x)``) while ONNX demands identical types, so every operand is cast to the op's compute
dtype first: the output dtype for arithmetic, the promoted input dtype for comparisons.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from trtcheck.converters._common import (
    BOOL,
    FLOAT,
    INT,
    NUMERIC,
    TENSORRT_DTYPES,
    arg,
    aten,
    cast,
    converter,
    dtype_of,
    operand,
    operands,
    out_dtype,
    promoted,
)
from trtcheck.converters.registry import ConverterFn

if TYPE_CHECKING:  # pragma: no cover - the context imports the registry, not vice versa
    from trtcheck.conversion import ConversionContext

# ---- unary -------------------------------------------------------------------------------------
# aten overload -> (ONNX op, accepted input dtypes). Inputs are cast to the output dtype first, so
# e.g. sqrt of an int tensor computes in float32 like PyTorch does.
_UNARY: dict[Any, tuple[str, frozenset[torch.dtype]]] = {
    aten.abs.default: ("Abs", NUMERIC),
    aten.neg.default: ("Neg", NUMERIC),
    aten.sign.default: ("Sign", NUMERIC),
    aten.relu.default: ("Relu", FLOAT),
    aten.sqrt.default: ("Sqrt", NUMERIC),
    aten.exp.default: ("Exp", NUMERIC),
    aten.log.default: ("Log", NUMERIC),
    aten.reciprocal.default: ("Reciprocal", NUMERIC),
    aten.sin.default: ("Sin", NUMERIC),
    aten.cos.default: ("Cos", NUMERIC),
    aten.tan.default: ("Tan", NUMERIC),
    aten.asin.default: ("Asin", NUMERIC),
    aten.acos.default: ("Acos", NUMERIC),
    aten.atan.default: ("Atan", NUMERIC),
    aten.sinh.default: ("Sinh", NUMERIC),
    aten.cosh.default: ("Cosh", NUMERIC),
    aten.asinh.default: ("Asinh", NUMERIC),
    aten.acosh.default: ("Acosh", NUMERIC),
    aten.atanh.default: ("Atanh", NUMERIC),
    aten.tanh.default: ("Tanh", NUMERIC),
    aten.sigmoid.default: ("Sigmoid", NUMERIC),
    aten.erf.default: ("Erf", NUMERIC),
    aten.floor.default: ("Floor", FLOAT),
    aten.ceil.default: ("Ceil", FLOAT),
    aten.round.default: ("Round", FLOAT),  # both round half to even
    aten.isnan.default: ("IsNaN", FLOAT),
}


def _unary(onnx_op: str) -> ConverterFn:
    def convert(ctx: ConversionContext, node: torch.fx.Node) -> str:
        source = node.args[0]
        compute = dtype_of(source) if onnx_op == "IsNaN" else out_dtype(node)
        return ctx.add(onnx_op, [operand(ctx, source, compute)])

    return convert


for _target, (_op, _dtypes) in _UNARY.items():
    converter(_target, dtypes=_dtypes)(_unary(_op))


@converter(aten.rsqrt.default, dtypes=NUMERIC)
def _rsqrt(ctx: ConversionContext, node: torch.fx.Node) -> str:
    return ctx.add("Reciprocal", [ctx.add("Sqrt", [operand(ctx, node.args[0], out_dtype(node))])])


@converter(aten.log2.default, aten.log10.default, aten.log1p.default, aten.expm1.default, dtypes=NUMERIC)
def _log_exp_variants(ctx: ConversionContext, node: torch.fx.Node) -> str:
    """log2/log10 as a scaled Log; log1p/expm1 as Log(1+x)/Exp(x)-1 (no dedicated ONNX ops)."""
    dtype = out_dtype(node)
    x = operand(ctx, node.args[0], dtype)
    name = node.target._opname
    if name == "log1p":
        return ctx.add("Log", [ctx.add("Add", [x, ctx.constant(1.0, dtype)])])
    if name == "expm1":
        return ctx.add("Sub", [ctx.add("Exp", [x]), ctx.constant(1.0, dtype)])
    scale = 1.0 / torch.log(torch.tensor(2.0 if name == "log2" else 10.0, dtype=torch.float64)).item()
    return ctx.add("Mul", [ctx.add("Log", [x]), ctx.constant(scale, dtype)])


@converter(aten.trunc.default, dtypes=FLOAT)
def _trunc(ctx: ConversionContext, node: torch.fx.Node) -> str:
    return _truncate(ctx, ctx.name(node.args[0]))


def _truncate(ctx: ConversionContext, x: str) -> str:
    """Round toward zero: ONNX 17 has no Trunc, so sign(x) * floor(|x|)."""
    return ctx.add("Mul", [ctx.add("Sign", [x]), ctx.add("Floor", [ctx.add("Abs", [x])])])


# ---- binary arithmetic ---------------------------------------------------------------------------
def _scaled(ctx: ConversionContext, node: torch.fx.Node, value: str, dtype: torch.dtype) -> str:
    """``value * alpha`` for add/sub/rsub's ``alpha`` argument (skipped when alpha == 1)."""
    alpha = node.kwargs.get("alpha", 1)
    return value if alpha == 1 else ctx.add("Mul", [value, ctx.constant(alpha, dtype)])


def _alpha_ok(node: torch.fx.Node) -> bool:
    return not isinstance(node.kwargs.get("alpha", 1), torch.fx.Node)


_ARITHMETIC: dict[Any, str] = {
    aten.add.Tensor: "Add",
    aten.add.Scalar: "Add",
    aten.sub.Tensor: "Sub",
    aten.sub.Scalar: "Sub",
    aten.mul.Tensor: "Mul",
    aten.mul.Scalar: "Mul",
    aten.div.Tensor: "Div",
    aten.div.Scalar: "Div",
    aten.maximum.default: "Max",
    aten.minimum.default: "Min",
    aten.pow.Tensor_Tensor: "Pow",
    aten.pow.Tensor_Scalar: "Pow",
    aten.pow.Scalar: "Pow",
    aten.fmod.Tensor: "Mod",
    aten.fmod.Scalar: "Mod",
}


def _binary(onnx_op: str) -> ConverterFn:
    def convert(ctx: ConversionContext, node: torch.fx.Node) -> str:
        dtype = out_dtype(node)
        a, b = operands(ctx, node.args[:2], dtype)
        attrs = {"fmod": 1} if onnx_op == "Mod" else {}  # fmod = C's remainder, as torch.fmod
        return ctx.add(onnx_op, [a, _scaled(ctx, node, b, dtype)], **attrs)

    return convert


for _target, _op in _ARITHMETIC.items():
    converter(_target, outputs=NUMERIC, check=_alpha_ok)(_binary(_op))


@converter(aten.rsub.Tensor, aten.rsub.Scalar, outputs=NUMERIC, check=_alpha_ok)
def _rsub(ctx: ConversionContext, node: torch.fx.Node) -> str:
    """rsub(a, b, alpha) = b - alpha * a."""
    dtype = out_dtype(node)
    a, b = operands(ctx, node.args[:2], dtype)
    return ctx.add("Sub", [b, _scaled(ctx, node, a, dtype)])


def _floor_divide(ctx: ConversionContext, a: str, b: str, dtype: torch.dtype) -> str:
    """Division rounded toward -inf. Integers: (a - a mod b) / b is exact, with Python-style mod."""
    if dtype in INT:
        return ctx.add("Div", [ctx.add("Sub", [a, ctx.add("Mod", [a, b], fmod=0)]), b])
    return ctx.add("Floor", [ctx.add("Div", [a, b])])


def _rounding_mode_ok(node: torch.fx.Node) -> bool:
    return _alpha_ok(node) and node.kwargs.get("rounding_mode") in (None, "trunc", "floor")


@converter(aten.div.Tensor_mode, aten.div.Scalar_mode, outputs=NUMERIC, check=_rounding_mode_ok)
def _div_mode(ctx: ConversionContext, node: torch.fx.Node) -> str:
    dtype = out_dtype(node)
    a, b = operands(ctx, node.args[:2], dtype)
    mode = node.kwargs.get("rounding_mode")
    if mode == "floor":
        return _floor_divide(ctx, a, b, dtype)
    quotient = ctx.add("Div", [a, b])  # ONNX integer Div truncates, like rounding_mode="trunc"
    return _truncate(ctx, quotient) if mode == "trunc" and dtype in FLOAT else quotient


@converter(aten.floor_divide.default, outputs=NUMERIC)
def _floor_div(ctx: ConversionContext, node: torch.fx.Node) -> str:
    dtype = out_dtype(node)
    return _floor_divide(ctx, *operands(ctx, node.args[:2], dtype), dtype)


@converter(aten.remainder.Tensor, aten.remainder.Scalar, outputs=NUMERIC)
def _remainder(ctx: ConversionContext, node: torch.fx.Node) -> str:
    """Python-style modulo (sign of the divisor). ONNX Mod needs fmod=1 for floats, so a - floor(a/b)*b."""
    dtype = out_dtype(node)
    a, b = operands(ctx, node.args[:2], dtype)
    if dtype in INT:
        return ctx.add("Mod", [a, b], fmod=0)
    return ctx.add("Sub", [a, ctx.add("Mul", [_floor_divide(ctx, a, b, dtype), b])])


# ---- comparisons and logic -----------------------------------------------------------------------
_COMPARISONS: dict[str, str] = {
    "eq": "Equal",
    "ne": "Equal",  # negated below
    "lt": "Less",
    "le": "LessOrEqual",
    "gt": "Greater",
    "ge": "GreaterOrEqual",
}


def _compare(onnx_op: str, negate: bool) -> ConverterFn:
    def convert(ctx: ConversionContext, node: torch.fx.Node) -> str:
        """Compares in the promoted dtype (bool vs float compares floats); TensorRT compares no bools,
        so bool vs bool compares 0/1 int32s."""
        a, b = node.args[:2]
        dtype = promoted(a, b)
        result = ctx.add(onnx_op, operands(ctx, (a, b), torch.int32 if dtype == torch.bool else dtype))
        return ctx.add("Not", [result]) if negate else result

    return convert


for _name, _op in _COMPARISONS.items():
    _packet = getattr(aten, _name)
    converter(_packet.Tensor, _packet.Scalar)(_compare(_op, _name == "ne"))


_LOGICAL: dict[Any, str] = {
    aten.logical_and.default: "And",
    aten.logical_or.default: "Or",
    aten.logical_xor.default: "Xor",
    aten.bitwise_and.Tensor: "And",
    aten.bitwise_or.Tensor: "Or",
    aten.bitwise_xor.Tensor: "Xor",
}


def _logical(onnx_op: str) -> ConverterFn:
    def convert(ctx: ConversionContext, node: torch.fx.Node) -> str:
        return ctx.add(onnx_op, operands(ctx, node.args[:2], torch.bool))

    return convert


for _target, _op in _LOGICAL.items():
    # bitwise_* are logical only on bools; integer bitwise math has no TensorRT layer.
    _dtypes = BOOL if _target._opname.startswith("bitwise") else TENSORRT_DTYPES
    converter(_target, dtypes=_dtypes)(_logical(_op))


@converter(aten.logical_not.default)
@converter(aten.bitwise_not.default, dtypes=BOOL)
def _logical_not(ctx: ConversionContext, node: torch.fx.Node) -> str:
    return ctx.add("Not", [operand(ctx, node.args[0], torch.bool)])


# ---- where / clamp -------------------------------------------------------------------------------
@converter(aten.where.self)
def _where(ctx: ConversionContext, node: torch.fx.Node) -> str:
    condition, a, b = node.args
    return ctx.add("Where", [operand(ctx, condition, torch.bool), *operands(ctx, (a, b), out_dtype(node))])


def _bounds(node: torch.fx.Node) -> tuple[Any, Any]:
    name = node.target._opname
    if name == "hardtanh":
        return arg(node, 1, "min_val", -1.0), arg(node, 2, "max_val", 1.0)
    if name == "clamp_min":
        return node.args[1], None
    if name == "clamp_max":
        return None, node.args[1]
    return arg(node, 1, "min"), arg(node, 2, "max")


@converter(aten.clamp.default, aten.clamp.Tensor, aten.clamp_min.default, aten.clamp_max.default,
           aten.hardtanh.default, dtypes=NUMERIC)
def _clamp(ctx: ConversionContext, node: torch.fx.Node) -> str:
    """Clip for float tensors with scalar bounds (TensorRT fuses it); Max/Min otherwise."""
    dtype = out_dtype(node)
    x = operand(ctx, node.args[0], dtype)
    low, high = _bounds(node)
    tensor_bounds = any(isinstance(v, torch.fx.Node) for v in (low, high))
    if dtype in FLOAT and not tensor_bounds:
        bounds = ["" if v is None else ctx.constant(v, dtype) for v in (low, high)]
        return ctx.add("Clip", [x, *bounds] if high is not None else [x, bounds[0]])
    if low is not None:
        x = ctx.add("Max", [x, operand(ctx, low, dtype)])
    if high is not None:
        x = ctx.add("Min", [x, operand(ctx, high, dtype)])
    return x


def _same_device_and_layout(node: torch.fx.Node) -> bool:
    source = node.args[0].meta["val"]
    device = node.kwargs.get("device")
    return (
        node.kwargs.get("layout") in (None, torch.strided)
        and (device is None or torch.device(device) == source.device)
        and not node.kwargs.get("pin_memory")
    )


@converter(aten._to_copy.default, check=_same_device_and_layout)
def _to_copy(ctx: ConversionContext, node: torch.fx.Node) -> str:
    """A dtype conversion; device/layout changes are left to PyTorch by the validator."""
    return cast(ctx, ctx.name(node.args[0]), dtype_of(node.args[0]), out_dtype(node))
