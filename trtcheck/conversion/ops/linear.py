"""Convolution and matrix products (float only: TensorRT has no integer GEMM/convolution layers).

All are ``dynamic``: batch, spatial and matrix sizes may be symbolic (ONNX Conv/MatMul/Gemm read them at
run time); only a convolution's weight must have a static shape, its kernel shape being an attribute.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from trtcheck.conversion.arguments import BoundArgs
from trtcheck.conversion.ops._common import (
    FLOAT,
    aten,
    cast,
    converter,
    dynamic_refusal,
    out_dtype,
    refuse,
)
from trtcheck.conversion.registry import Refusal

if TYPE_CHECKING:  # pragma: no cover - the context imports the registry, not vice versa
    from trtcheck.conversion.context import ConversionContext


def _spatial(values: Any, args: BoundArgs) -> list[int]:
    """A stride/padding/dilation/output_padding list per spatial dim: the schema lets one value stand for
    every dim (``padding='valid'`` lowers to ``padding=[0]``), which ATen broadcasts, and so does this."""
    count = args.meta("input").dim() - 2
    values = [values] if isinstance(values, int) else list(values)
    return values * count if len(values) == 1 else values


def _transposed_conv_pads(args: BoundArgs) -> tuple[list[int], list[int]] | Refusal:
    """``(end pads, output_padding)`` for ONNX ConvTranspose, or why there are none.

    PyTorch allows output_padding up to max(stride, dilation) - 1; ONNX Runtime (and the inverse shape
    rule ONNX implies) wants it below the stride. Where it is not, the extra rows it adds are still rows
    of the full transposed convolution when output_padding <= padding, so the end padding shrinks by
    output_padding instead (ONNX pads may differ at both ends); otherwise only the part above the padding
    is output_padding, and that must be below the stride.
    """
    ends, extra = [], []
    output_padding, strides, padding = (_spatial(args[name], args) for name in ("output_padding", "stride", "padding"))
    for op, stride, pad in zip(output_padding, strides, padding):
        if op < stride:  # the usual case, emitted as PyTorch states it
            ends.append(pad)
            extra.append(op)
        elif op <= pad:
            ends.append(pad - op)
            extra.append(0)
        elif op - pad < stride:
            ends.append(0)
            extra.append(op - pad)
        else:
            return refuse(
                f"output_padding {tuple(output_padding)} not below stride {tuple(strides)} (nor "
                f"within padding {tuple(padding)}): ONNX ConvTranspose cannot express it"
            )
    return ends, extra


def _conv_ok(args: BoundArgs) -> bool | Refusal:
    spatial = args.meta("input").dim() - 2
    if not 1 <= spatial <= 3:
        return refuse(f"input has {spatial} spatial dimensions; ONNX Conv here takes 1 to 3")
    dynamic_weight = dynamic_refusal(args, "weight", range(args.meta("weight").dim()), "the kernel shape is a Conv attribute")
    if dynamic_weight is not None:
        return dynamic_weight
    if args.transposed:
        pads = _transposed_conv_pads(args)
        if isinstance(pads, Refusal):
            return pads
    return True


_CONV_CONSTANTS = ("stride", "padding", "dilation", "transposed", "output_padding", "groups")


@converter(aten.convolution.default, dtypes=FLOAT, constants=_CONV_CONSTANTS, check=_conv_ok, dynamic=True)
def _convolution(ctx: ConversionContext, args: BoundArgs) -> str:
    """Conv / ConvTranspose; PyTorch and ONNX share weight layouts for both.

    ONNX's Conv and ConvTranspose (opset 11, current at 17) take float16/float/double only, so a bfloat16
    convolution computes in float32 between two Casts (as PyTorch's bfloat16 convolution accumulates in
    float32 and rounds once): a bfloat16 Conv would make the checker reject the whole segment.
    """
    dtype = out_dtype(args.node)
    compute = torch.float32 if dtype == torch.bfloat16 else dtype
    values = [args.input, args.weight] + ([args.bias] if args.bias is not None else [])  # one dtype, as PyTorch's
    inputs = [cast(ctx, ctx.name(value), dtype, compute) for value in values]
    padding = _spatial(args.padding, args)
    attrs: dict[str, Any] = {
        "strides": _spatial(args.stride, args),
        "pads": padding * 2,
        "dilations": _spatial(args.dilation, args),
        "group": int(args.groups),
        "kernel_shape": list(args.meta("weight").shape[2:]),
    }
    if args.transposed:
        ends, output_padding = _transposed_conv_pads(args)  # the validator made sure there are some
        attrs["pads"] = padding + ends
        result = ctx.add("ConvTranspose", inputs, output_padding=output_padding, **attrs)
    else:
        result = ctx.add("Conv", inputs, **attrs)
    return cast(ctx, result, compute, dtype)


def _broadcast_matrix(value: Any) -> torch.fx.Node | None:
    """The matrix that ``value`` (a ``bmm`` operand) broadcasts over the batch, or None.

    ``nn.Linear`` on a non-contiguous 3-D input lowers to ``bmm(x, view(expand(permute(W), [B, K, N])))`` rather than
    to ``mm``. Emitted as written, the engine constant-folds the Expand of each weight into a batch-sized copy (12 of
    BERT-base's linears: +37 MiB over ``torch.onnx.export``, against the target of compiling in no more memory than
    that exporter and one session: docs/performance.md#compile-time-and-memory). ONNX MatMul broadcasts a (K, N)
    operand itself, as TensorRT's matrix multiply does, so the matrix goes in whole. Only an expand that adds batch
    dims qualifies: the matrix's own (static) dims are kept, and the view, if any, must not reshape.
    """
    if not isinstance(value, torch.fx.Node) or value.op != "call_function":
        return None
    expanded = value
    if value.target in (aten.view.default, aten._unsafe_view.default, aten.reshape.default):
        expanded = value.args[0]
        if not isinstance(expanded, torch.fx.Node) or expanded.op != "call_function":
            return None
        viewed, before = value.meta.get("val"), expanded.meta.get("val")
        if viewed is None or before is None or list(viewed.shape) != list(before.shape):
            return None
    if expanded.target != aten.expand.default or getattr(expanded.meta.get("val"), "ndim", None) != 3:
        return None
    source = expanded.args[0]
    matrix = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
    if getattr(matrix, "ndim", None) != 2:
        return None
    rows, columns = matrix.shape
    batch, *target = expanded.meta["val"].shape
    if not all(isinstance(size, int) for size in (rows, columns, *target)) or target != [rows, columns]:
        return None
    return source


@converter(aten.mm.default, aten.bmm.default, aten.matmul.default, dtypes=FLOAT, dynamic=True)
def _matmul(ctx: ConversionContext, args: BoundArgs) -> str:
    second = args["mat2"] if "mat2" in args else args.other
    if args.node.target == aten.bmm.default:
        second = _broadcast_matrix(second) or second
    return ctx.add("MatMul", [ctx.name(args.self), ctx.name(second)])


def _scalar_factors(args: BoundArgs) -> bool | Refusal:
    for name in ("beta", "alpha"):
        if not isinstance(args[name], (int, float)):
            return refuse(f"{name} {args[name]!r} is not a number: it becomes a Gemm attribute")
    return True


def _addmm_ok(args: BoundArgs) -> bool | Refusal:
    """Gemm's C must broadcast to (M, N) one-directionally, and alpha/beta must be numbers."""
    bias_rank = args.meta("self").dim()
    if bias_rank > 2:
        return refuse(f"self has rank {bias_rank}; Gemm's C broadcasts from rank <= 2 only")
    return _scalar_factors(args)


def _transposed_matrix(value: Any) -> torch.fx.Node | None:
    """The matrix ``value`` is the 2-D transpose of (``t``/``permute [1, 0]``/``transpose``), or None."""
    if not isinstance(value, torch.fx.Node) or value.op != "call_function":
        return None
    source = value.args[0] if value.args else None
    if not isinstance(source, torch.fx.Node) or getattr(source.meta.get("val"), "ndim", None) != 2:
        return None
    if value.target == aten.t.default:
        return source
    if value.target == aten.permute.default and [d % 2 for d in value.args[1]] == [1, 0]:
        return source
    if value.target == aten.transpose.int and value.args[1] % 2 != value.args[2] % 2:
        return source
    return None


@converter(aten.addmm.default, dtypes=FLOAT, check=_addmm_ok, dynamic=True)
def _addmm(ctx: ConversionContext, args: BoundArgs) -> str:
    """Gemm; where mat2 is a transposed matrix (nn.Linear's ``permute(weight)``), Gemm reads the matrix
    itself with transB=1. That is TensorRT's own form of a linear layer, and it avoids a Transpose ->
    Gemm pair that ONNX Runtime's optimizer breaks when the Gemm's input is also a graph output
    ("Node input ... is not a graph input"). The Transpose, if nothing else uses it, is pruned."""
    attrs = {"alpha": float(args.alpha), "beta": float(args.beta)}
    source = _transposed_matrix(args.mat2)
    if source is not None:
        return ctx.add("Gemm", [ctx.name(args.mat1), ctx.name(source), ctx.name(args.self)], transB=1, **attrs)
    return ctx.add("Gemm", [ctx.name(args.mat1), ctx.name(args.mat2), ctx.name(args.self)], **attrs)


@converter(aten.baddbmm.default, dtypes=FLOAT, check=_scalar_factors, dynamic=True)
def _baddbmm(ctx: ConversionContext, args: BoundArgs) -> str:
    """beta * input + alpha * (batch1 @ batch2), without the scalings that are 1."""
    dtype = out_dtype(args.node)
    terms = []
    for value, scale in ((ctx.add("MatMul", [ctx.name(args.batch1), ctx.name(args.batch2)]), args.alpha),
                         (ctx.name(args.self), args.beta)):
        terms.append(value if scale == 1 else ctx.add("Mul", [value, ctx.constant(scale, dtype)]))
    return ctx.add("Add", terms)


def _matrix_weight(args: BoundArgs) -> bool | Refusal:
    rank = args.meta("weight").dim()
    return rank == 2 or refuse(f"weight has rank {rank}, not 2")


@converter(aten.linear.default, dtypes=FLOAT, check=_matrix_weight, dynamic=True)
def _linear(ctx: ConversionContext, args: BoundArgs) -> str:
    """A 2-D input is one Gemm on the stored weight (transB=1, see ``_addmm``); other ranks MatMul it."""
    x, weight = ctx.name(args.input), ctx.name(args.weight)
    if args.meta("input").dim() == 2:
        inputs = [x, weight] + ([ctx.name(args.bias)] if args.bias is not None else [])
        return ctx.add("Gemm", inputs, transB=1)
    product = ctx.add("MatMul", [x, ctx.add("Transpose", [weight], perm=[1, 0])])
    return product if args.bias is None else ctx.add("Add", [product, ctx.name(args.bias)])
