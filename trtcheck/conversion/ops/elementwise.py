"""Elementwise math, comparisons, logic, where and clamp.

Type promotion: ATen ops promote mixed operands (``mul(float_tensor, int_tensor)``, ``add(x, 1)``,
``sub(1.0, x)``) while ONNX demands identical types, so every operand is cast to the op's compute
dtype first: the output dtype for arithmetic, the promoted input dtype for comparisons.

Every converter here is ``dynamic``: broadcasting is ONNX's own and none reads a size, so symbolic
shapes convert as they are, and a SymInt operand (``x * x.shape[0]``: ``mul.Tensor(x, sym_size_int)``)
is a 0-d int64 value cast to the compute dtype like any Python scalar.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from trtcheck.conversion.arguments import BoundArgs
from trtcheck.conversion.context import int_floor_divide
from trtcheck.conversion.ops._common import (
    BOOL,
    FLOAT,
    INT,
    NUMERIC,
    TENSORRT_DTYPES,
    BoundConverterFn,
    all_ints,
    aten,
    cast,
    converter,
    dtype_of,
    onnx_accepts,
    operand,
    operands,
    out_dtype,
    out_meta,
    promoted,
    refuse,
    register_table,
)
from trtcheck.conversion.ops.creation import fill_of
from trtcheck.conversion.registry import Refusal

if TYPE_CHECKING:  # pragma: no cover - the context imports the registry, not vice versa
    from trtcheck.conversion.context import ConversionContext

# ---- unary -------------------------------------------------------------------------------------
# aten overload -> (ONNX op, accepted input dtypes). Inputs are cast to the output dtype first, so
# e.g. sqrt of an int tensor computes in float32 like PyTorch does.
_UNARY: dict[Any, tuple[str, frozenset[torch.dtype]]] = {
    aten.abs.default: ("Abs", NUMERIC),
    aten.neg.default: ("Neg", NUMERIC),
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


def _unary(onnx_op: str) -> BoundConverterFn:
    def convert(ctx: ConversionContext, args: BoundArgs) -> str:
        compute = dtype_of(args.self) if onnx_op == "IsNaN" else out_dtype(args.node)
        return ctx.add(onnx_op, [operand(ctx, args.self, compute)])

    return convert


# Inputs reach the ONNX op in the output dtype (ints become float32), so only the op's own schema limits
# which float inputs it may be claimed for (opset 19's Sin, Round & co. have no bfloat16).
register_table(
    _UNARY, lambda entry: _unary(entry[0]), dynamic=True,
    per_entry=lambda target, entry: {"dtypes": entry[1] & (onnx_accepts(entry[0]) | INT | BOOL)},
)


@converter(aten.sign.default, dtypes=NUMERIC & (onnx_accepts("Sign") | INT), dynamic=True)
def _sign(ctx: ConversionContext, args: BoundArgs) -> str:
    """Sign as eager computes it: +0 for NaN (either sign bit) and for -0, +-1 for +-inf, in every float dtype.

    ONNX leaves NaN to the backend (ONNX Runtime's float32 Sign gives NaN, its float16 one 0), so floats say it:
    ``Where(IsNaN(x) or x == 0, +0, Sign(x))``. ``sgn`` of a real tensor lowers to this op. bfloat16 computes
    in float32 (exact both ways: the input widens, the result is -1, 0 or 1): ONNX Runtime's CPU provider has
    bfloat16 Sign and Cast kernels but no IsNaN, Equal or Where ones, so the claimed op would not run there.
    """
    dtype = out_dtype(args.node)
    if dtype not in FLOAT:
        return ctx.add("Sign", [operand(ctx, args.self, dtype)])
    compute = torch.float32 if dtype == torch.bfloat16 else dtype
    x = operand(ctx, args.self, compute)
    zero = ctx.constant(0.0, compute)
    nan_or_zero = ctx.add("Or", [ctx.add("IsNaN", [x]), _equal(ctx, x, zero)])
    return cast(ctx, ctx.add("Where", [nan_or_zero, zero, ctx.add("Sign", [x])]), compute, dtype)


@converter(aten.rsqrt.default, dtypes=NUMERIC, dynamic=True)
def _rsqrt(ctx: ConversionContext, args: BoundArgs) -> str:
    return ctx.add("Reciprocal", [ctx.add("Sqrt", [operand(ctx, args.self, out_dtype(args.node))])])


@converter(aten.log2.default, aten.log10.default, dtypes=NUMERIC, dynamic=True)
def _log_base(ctx: ConversionContext, args: BoundArgs) -> str:
    """log2/log10 as a scaled Log (no dedicated ONNX ops)."""
    dtype = out_dtype(args.node)
    x = operand(ctx, args.self, dtype)
    base = 2.0 if args.node.target == aten.log2.default else 10.0
    scale = 1.0 / torch.log(torch.tensor(base, dtype=torch.float64)).item()
    return ctx.add("Mul", [ctx.add("Log", [x]), ctx.constant(scale, dtype)])


def _equal(ctx: ConversionContext, a: str, b: str) -> str:
    return ctx.add("Equal", [a, b])


@converter(aten.log1p.default, dtypes=NUMERIC, dynamic=True)
def _log1p(ctx: ConversionContext, args: BoundArgs) -> str:
    """log(1 + x) without losing small x: Log(1 + x) alone gives 0 (or -inf after a Log) for |x| < eps.

    Goldberg's form: with u = 1 + x rounded, ``x`` where u == 1, else ``log(u) * x / (u - 1)``; the ratio
    x / (u - 1) corrects the rounding of u. Where u - 1 == u (u = inf, or huge), it is plain log(u).
    """
    dtype = out_dtype(args.node)
    x = operand(ctx, args.self, dtype)
    one = ctx.constant(1.0, dtype)
    u = ctx.add("Add", [x, one])
    u_minus_1 = ctx.add("Sub", [u, one])
    log_u = ctx.add("Log", [u])
    corrected = ctx.add("Mul", [log_u, ctx.add("Div", [x, u_minus_1])])
    result = ctx.add("Where", [_equal(ctx, u_minus_1, u), log_u, corrected])
    return ctx.add("Where", [_equal(ctx, u, one), x, result])


@converter(aten.expm1.default, dtypes=NUMERIC, dynamic=True)
def _expm1(ctx: ConversionContext, args: BoundArgs) -> str:
    """exp(x) - 1 without losing small x: Exp(x) - 1 alone gives 0 for |x| < eps.

    Kahan's form: with u = exp(x) rounded, ``x`` where u == 1, ``-1`` where u - 1 == -1, ``u`` where
    u - 1 == u (u = inf, or huge), else ``(u - 1) * x / log(u)``, which corrects the rounding of u.
    """
    dtype = out_dtype(args.node)
    x = operand(ctx, args.self, dtype)
    one = ctx.constant(1.0, dtype)
    u = ctx.add("Exp", [x])
    u_minus_1 = ctx.add("Sub", [u, one])
    corrected = ctx.add("Mul", [u_minus_1, ctx.add("Div", [x, ctx.add("Log", [u])])])
    result = ctx.add("Where", [_equal(ctx, u_minus_1, u), u, corrected])
    result = ctx.add("Where", [_equal(ctx, u_minus_1, ctx.constant(-1.0, dtype)), u_minus_1, result])
    return ctx.add("Where", [_equal(ctx, u, one), x, result])


@converter(aten.trunc.default, dtypes=FLOAT, dynamic=True)
def _trunc(ctx: ConversionContext, args: BoundArgs) -> str:
    return _truncate(ctx, ctx.name(args.self))


def _truncate(ctx: ConversionContext, x: str) -> str:
    """Round toward zero: ONNX 17 has no Trunc, so sign(x) * floor(|x|)."""
    return ctx.add("Mul", [ctx.add("Sign", [x]), ctx.add("Floor", [ctx.add("Abs", [x])])])


# ---- binary arithmetic ---------------------------------------------------------------------------
def _scaled(ctx: ConversionContext, args: BoundArgs, value: str, dtype: torch.dtype) -> str:
    """``value * alpha`` for add/sub/rsub's ``alpha`` argument (skipped when alpha == 1 or absent)."""
    alpha = args["alpha"] if "alpha" in args else 1
    return value if alpha == 1 else ctx.add("Mul", [value, ctx.constant(alpha, dtype)])


_ARITHMETIC: dict[Any, str] = {
    aten.add.Tensor: "Add",
    aten.add.Scalar: "Add",
    aten.sub.Tensor: "Sub",
    aten.sub.Scalar: "Sub",
    aten.mul.Tensor: "Mul",
    aten.mul.Scalar: "Mul",
    aten.div.Tensor: "Div",
    aten.div.Scalar: "Div",
    aten.pow.Tensor_Tensor: "Pow",
    aten.pow.Tensor_Scalar: "Pow",
    aten.pow.Scalar: "Pow",
    aten.fmod.Tensor: "Mod",
    aten.fmod.Scalar: "Mod",
}


def _binary(onnx_op: str) -> BoundConverterFn:
    def convert(ctx: ConversionContext, args: BoundArgs) -> str:
        dtype = out_dtype(args.node)
        second = args["exponent"] if "exponent" in args else args.other
        a, b = operands(ctx, (args.self, second), dtype)
        attrs = {"fmod": 1} if onnx_op == "Mod" else {}  # fmod = C's remainder, as torch.fmod
        result = ctx.add(onnx_op, [a, _scaled(ctx, args, b, dtype)], **attrs)
        return _integer_negative_powers(ctx, a, b, result, dtype) if onnx_op == "Pow" and dtype in INT else result

    return convert


def _integer_negative_powers(ctx: ConversionContext, a: str, b: str, power: str, dtype: torch.dtype) -> str:
    """``power`` where the exponent is negative made ATen's integer ``pow``: 1 for a base of 1, -1 or 1 for -1 (odd or
    even exponent), 0 for any other base (0 too). ONNX's Pow leaves it undefined (ONNX Runtime's int64 Pow gives
    int64's minimum for ``0 ** -9``: 1 / 0 in floating point, cast)."""
    one, minus_one, zero = (ctx.constant(v, dtype) for v in (1, -1, 0))
    odd = ctx.add("Not", [_equal(ctx, ctx.add("Mod", [b, ctx.constant(2, dtype)], fmod=1), zero)])
    of_minus_one = ctx.add("Where", [odd, minus_one, one])
    reciprocal = ctx.add("Where", [_equal(ctx, a, one), one, ctx.add("Where", [_equal(ctx, a, minus_one), of_minus_one, zero])])
    return ctx.add("Where", [ctx.add("Less", [b, zero]), reciprocal, power])


# alpha scales an operand by a constant: a tensor-valued alpha has no place in an ONNX attribute-free Mul
# of constants here, so it must be a number (declared for the overloads that have an alpha).
register_table(
    _ARITHMETIC, _binary, outputs=NUMERIC, dynamic=True,
    per_entry=lambda target, entry: {"constants": ("alpha",) if target._opname in ("add", "sub") else ()},
)


def _nan_propagating(ctx: ConversionContext, onnx_op: str, a: str, b: str, dtype: torch.dtype) -> str:
    """Max/Min that give NaN where either operand is NaN, as torch.maximum/minimum/clamp do (fmax/fmin
    would not). ONNX leaves NaN in Max/Min unspecified (ONNX Runtime propagates it; C's fmax and CUDA's
    fmaxf return the other operand), so floats say it explicitly and every backend computes the same."""
    result = ctx.add(onnx_op, [a, b])
    if dtype not in FLOAT:
        return result
    result = ctx.add("Where", [ctx.add("IsNaN", [b]), b, result])
    return ctx.add("Where", [ctx.add("IsNaN", [a]), a, result])


@converter(aten.maximum.default, aten.minimum.default, outputs=NUMERIC, dynamic=True)
def _maximum(ctx: ConversionContext, args: BoundArgs) -> str:
    dtype = out_dtype(args.node)
    a, b = operands(ctx, (args.self, args.other), dtype)
    return _nan_propagating(ctx, "Max" if args.node.target == aten.maximum.default else "Min", a, b, dtype)


@converter(aten.rsub.Tensor, aten.rsub.Scalar, outputs=NUMERIC, constants=("alpha",), dynamic=True)
def _rsub(ctx: ConversionContext, args: BoundArgs) -> str:
    """rsub(a, b, alpha) = b - alpha * a."""
    dtype = out_dtype(args.node)
    a, b = operands(ctx, (args.self, args.other), dtype)
    return ctx.add("Sub", [b, _scaled(ctx, args, a, dtype)])


def _sign_fix(ctx: ConversionContext, mod: str, b: str, dtype: torch.dtype) -> str:
    """Where fmod's result is non-zero and has the sign opposite to the divisor's (True there)."""
    zero = ctx.constant(0.0, dtype)
    signs_differ = ctx.add("Xor", [ctx.add("Less", [b, zero]), ctx.add("Less", [mod, zero])])
    return ctx.add("And", [ctx.add("Not", [_equal(ctx, mod, zero)]), signs_differ])


def _floor_divide(ctx: ConversionContext, a: str, b: str, dtype: torch.dtype) -> str:
    """Division rounded toward -inf, as PyTorch computes it.

    Integers: :func:`_int_divide` (``int_floor_divide``, exact over the whole range). Floats follow ATen's
    ``div_floor_floating`` (c10/util/generic_math.h): ``div = (a - fmod(a, b)) / b``, minus 1 where the
    fmod's sign differs from b's; then floor(div), rounded up where div - floor(div) > 0.5; b == 0
    gives a / b. (ATen also gives a zero result the sign of a / b; here it may be +0, which compares
    equal.) Floor(a / b) instead rounds the quotient first: floor(0.7 / 0.1) is 7, PyTorch's 0.7 // 0.1
    is 6.
    """
    if dtype in INT:
        return _int_divide(ctx, a, b, dtype, floor=True)
    one, half, zero = (ctx.constant(v, dtype) for v in (1.0, 0.5, 0.0))
    mod = ctx.add("Mod", [a, b], fmod=1)
    div = ctx.add("Div", [ctx.add("Sub", [a, mod]), b])
    div = ctx.add("Where", [_sign_fix(ctx, mod, b, dtype), ctx.add("Sub", [div, one]), div])
    floored = ctx.add("Floor", [div])
    round_up = ctx.add("Greater", [ctx.add("Sub", [div, floored]), half])
    floored = ctx.add("Where", [round_up, ctx.add("Add", [floored, one]), floored])
    return ctx.add("Where", [_equal(ctx, b, zero), ctx.add("Div", [a, b]), floored])


def _int_divide(ctx: ConversionContext, a: str, b: str, dtype: torch.dtype, floor: bool) -> str:
    """Integer division, floored (``//``, ``rounding_mode='floor'``) or truncated (``'trunc'``), exact over the
    dtype's whole range.

    ``min / -1`` does not fit: eager's floor division gives min (the two's complement wrap) and its truncating
    division traps (SIGFPE), as ONNX Runtime's int64 Div does, which would kill the process. So a divisor of -1
    divides by 1 instead and the result is -a, computed without overflow (``-max(a, min + 1)``, min itself
    kept): min for min, as eager's floor division gives. A zero divisor is left to the engine (ONNX Runtime
    fails the run, as eager raises; TensorRT promises nothing).
    """
    low = torch.iinfo(dtype).min
    minus_one, lowest = ctx.constant(-1, dtype), ctx.constant(low, dtype)
    by_minus_one = _equal(ctx, b, minus_one)
    divisor = ctx.add("Where", [by_minus_one, ctx.constant(1, dtype), b])
    quotient = int_floor_divide(ctx, a, divisor, dtype) if floor else ctx.add("Div", [a, divisor])
    negated = ctx.add("Neg", [ctx.add("Max", [a, ctx.constant(low + 1, dtype)])])
    negated = ctx.add("Where", [_equal(ctx, a, lowest), a, negated])
    return ctx.add("Where", [by_minus_one, negated, quotient])


def _rounding_mode_ok(args: BoundArgs) -> bool | Refusal:
    if args.rounding_mode in (None, "trunc", "floor"):
        return True
    return refuse(f"rounding_mode {args.rounding_mode!r} is none of None, 'trunc', 'floor'")


@converter(aten.div.Tensor_mode, aten.div.Scalar_mode, outputs=NUMERIC, check=_rounding_mode_ok, dynamic=True)
def _div_mode(ctx: ConversionContext, args: BoundArgs) -> str:
    dtype = out_dtype(args.node)
    a, b = operands(ctx, (args.self, args.other), dtype)
    if args.rounding_mode == "floor":
        return _floor_divide(ctx, a, b, dtype)
    if dtype in INT and args.rounding_mode == "trunc":
        return _int_divide(ctx, a, b, dtype, floor=False)  # ONNX integer Div truncates; min / -1 guarded
    quotient = ctx.add("Div", [a, b])
    return _truncate(ctx, quotient) if args.rounding_mode == "trunc" else quotient


@converter(aten.floor_divide.default, outputs=NUMERIC, dynamic=True)
def _floor_div(ctx: ConversionContext, args: BoundArgs) -> str:
    dtype = out_dtype(args.node)
    return _floor_divide(ctx, *operands(ctx, (args.self, args.other), dtype), dtype)


@converter(aten.remainder.Tensor, aten.remainder.Scalar, outputs=NUMERIC, dynamic=True)
def _remainder(ctx: ConversionContext, args: BoundArgs) -> str:
    """Python-style modulo (sign of the divisor). Integers: ONNX Mod with fmod=0 is exactly that.

    Floats as ATen's CPU kernel: ``fmod(a, b)``, plus b where it is non-zero and its sign differs from
    b's. Exact, unlike a - floor(a / b) * b, whose rounded quotient gives 0.0 for remainder(0.3, 0.1)
    where PyTorch gives ~7e-9 (0.3f is a hair above 3 * 0.1f).
    """
    dtype = out_dtype(args.node)
    a, b = operands(ctx, (args.self, args.other), dtype)
    if dtype in INT:
        return ctx.add("Mod", [a, b], fmod=0)
    mod = ctx.add("Mod", [a, b], fmod=1)
    return ctx.add("Where", [_sign_fix(ctx, mod, b, dtype), ctx.add("Add", [mod, b]), mod])


# ---- comparisons and logic -----------------------------------------------------------------------
_COMPARISONS: dict[str, str] = {
    "eq": "Equal",
    "ne": "Equal",  # negated below
    "lt": "Less",
    "le": "LessOrEqual",
    "gt": "Greater",
    "ge": "GreaterOrEqual",
}


def _compare(entry: tuple[str, bool]) -> BoundConverterFn:
    onnx_op, negate = entry

    def convert(ctx: ConversionContext, args: BoundArgs) -> str:
        """Compares in the promoted dtype (bool vs float compares floats); TensorRT compares no bools,
        so bool vs bool compares 0/1 int32s."""
        dtype = promoted(args.self, args.other)
        compute = torch.int32 if dtype == torch.bool else dtype
        result = ctx.add(onnx_op, operands(ctx, (args.self, args.other), compute))
        return ctx.add("Not", [result]) if negate else result

    return convert


register_table(
    {
        overload: (op, name == "ne")
        for name, op in _COMPARISONS.items()
        for overload in (getattr(aten, name).Tensor, getattr(aten, name).Scalar)
    },
    _compare,
    dynamic=True,
)


_LOGICAL: dict[Any, str] = {
    aten.logical_and.default: "And",
    aten.logical_or.default: "Or",
    aten.logical_xor.default: "Xor",
    aten.bitwise_and.Tensor: "And",
    aten.bitwise_or.Tensor: "Or",
    aten.bitwise_xor.Tensor: "Xor",
}


def _logical(onnx_op: str) -> BoundConverterFn:
    def convert(ctx: ConversionContext, args: BoundArgs) -> str:
        return ctx.add(onnx_op, operands(ctx, (args.self, args.other), torch.bool))

    return convert


# bitwise_* are logical only on bools; integer bitwise math has no TensorRT layer.
register_table(
    _LOGICAL, _logical, dynamic=True,
    per_entry=lambda target, entry: {"dtypes": BOOL if target._opname.startswith("bitwise") else TENSORRT_DTYPES},
)


@converter(aten.logical_not.default, dynamic=True)
@converter(aten.bitwise_not.default, dtypes=BOOL, dynamic=True)
def _logical_not(ctx: ConversionContext, args: BoundArgs) -> str:
    return ctx.add("Not", [operand(ctx, args.self, torch.bool)])


# ---- where / clamp -------------------------------------------------------------------------------
@converter(aten.where.self, dynamic=True)
def _where(ctx: ConversionContext, args: BoundArgs) -> str:
    """Where; bool data selects between 0/1 int32s, cast back to bool. ONNX Runtime's CPU provider has no
    bool Where kernel (its Where takes uint8, int8, int32, int64, float16, float, ...: tried on 1.32), while
    TensorRT's parser takes both: the int32 form runs on each, so no engine refuses what was claimed."""
    dtype = out_dtype(args.node)
    compute = torch.int32 if dtype == torch.bool else dtype
    values = operands(ctx, _fills_as_scalars(args, ("condition", "self", "other"), ("self", "other")), compute)
    return cast(ctx, ctx.add("Where", [operand(ctx, args.condition, torch.bool), *values]), compute, dtype)


def _fills_as_scalars(args: BoundArgs, names: tuple[str, ...], replaceable: tuple[str, ...]) -> list[Any]:
    """``args``' operands ``replaceable``, each factory-made one (``fill_of``) as its 0-d fill value wherever the
    op's other operands (of ``names``) broadcast to its output's static shape without it, so that its shape is
    not needed."""
    out_shape = list(out_meta(args.node).shape)
    shapes = {name: list(args.meta(name).shape) if isinstance(args[name], torch.fx.Node) else [] for name in names}
    values = []
    for name in replaceable:
        fill = fill_of(args[name])
        rest = [shape for other, shape in shapes.items() if other != name]
        if fill is not None and all_ints(out_shape, *rest) and list(torch.broadcast_shapes(*rest)) == out_shape:
            shapes[name] = []
            values.append(fill)
        else:
            values.append(args[name])
    return values


def _bounds(args: BoundArgs) -> tuple[Any, Any]:
    if "min_val" in args:  # hardtanh
        return args.min_val, args.max_val
    return (args["min"] if "min" in args else None), (args["max"] if "max" in args else None)


@converter(aten.clamp.default, aten.clamp.Tensor, aten.clamp_min.default, aten.clamp_max.default,
           aten.hardtanh.default, dtypes=NUMERIC, dynamic=True)
def _clamp(ctx: ConversionContext, args: BoundArgs) -> str:
    """Clip for float tensors with scalar bounds (TensorRT fuses it); NaN-propagating Max/Min otherwise.

    A NaN input stays NaN through Clip; a NaN scalar bound makes every element NaN in PyTorch, which Clip
    ignores, so that bound takes the Max/Min path, as tensor bounds (which may hold NaN) do."""
    dtype = out_dtype(args.node)
    x = operand(ctx, args.self, dtype)
    low, high = _bounds(args)
    tensor_bounds = any(isinstance(v, torch.fx.Node) for v in (low, high))
    nan_bound = any(isinstance(v, float) and math.isnan(v) for v in (low, high))
    if dtype in FLOAT and not tensor_bounds and not nan_bound:
        bounds = ["" if v is None else ctx.constant(v, dtype) for v in (low, high)]
        return ctx.add("Clip", [x, *bounds] if high is not None else [x, bounds[0]])
    if low is not None:
        x = _nan_propagating(ctx, "Max", x, operand(ctx, low, dtype), dtype)
    if high is not None:
        x = _nan_propagating(ctx, "Min", x, operand(ctx, high, dtype), dtype)
    return x


def _same_device_and_layout(args: BoundArgs) -> bool | Refusal:
    source = args.meta("self")
    if args.layout not in (None, torch.strided):
        return refuse(f"layout {args.layout} is not torch.strided: a layout change stays in PyTorch")
    if args.device is not None and torch.device(args.device) != source.device:
        return refuse(f"device {args.device} differs from the input's {source.device}: a copy between devices")
    if args.pin_memory:
        return refuse("pin_memory=True: pinning host memory is PyTorch's business")
    return True


@converter(aten._to_copy.default, check=_same_device_and_layout, dynamic=True)
def _to_copy(ctx: ConversionContext, args: BoundArgs) -> str:
    """A dtype conversion; device/layout changes are left to PyTorch by the validator."""
    return cast(ctx, ctx.name(args.self), dtype_of(args.self), out_dtype(args.node))
