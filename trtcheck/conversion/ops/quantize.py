"""Explicit quantization: trtcheck's quantize ops (ModelOpt's) as the Q/DQ graph TensorRT's ONNX parser builds.

``trtcheck.quantize_op`` (ModelOpt's ``tensorrt.quantize_op``) becomes QuantizeLinear/DequantizeLinear.

TensorRT 11 quantizes only where the graph holds a Q/DQ pair (no calibrator, no INT8/FP8 builder flag), and its ONNX
parser builds a strongly typed network from QuantizeLinear/DequantizeLinear: INT8 with an int8 zero point, FP8 with a
float8e4m3fn one (opset 19). The scale is ``amax / 127`` (INT8) or ``amax / 448`` (FP8), a constant made from the
quantizer's calibrated amax, as Torch-TensorRT's converter makes it; the arithmetic is ``trtcheck.qdq``'s.

What Torch-TensorRT's converter refuses is refused here too, with its reason, and runs in PyTorch: FP8 per channel,
INT8 per channel on an axis other than 0 or over several axes, an amax computed at run time. Where Torch-TensorRT
would silently compute something else (an unsigned or narrow-range quantizer, which its converter ignores), the node
is refused and says so, since a faithful engine cannot be built from it.

``trtcheck.dynamic_block_quantize_op`` (NVFP4) becomes what Torch-TensorRT's converter builds and ModelOpt's ONNX
export writes: TensorRT's ``trt::TRT_FP4DynamicQuantize`` (E2M1 codes and E4M3 block scales of 16, computed at run
time from a float32 double-quantization scale ``amax / (6 * 448)``), a DequantizeLinear of the block scales, and a
blocked DequantizeLinear of the codes (``block_size=16`` on the last axis; float4e2m1 codes need opset 23, which the
interpreter then declares). TensorRT's layer takes 2D or 3D inputs whose last axis is a static multiple of 16 in
float32/float16; anything else is refused, as Torch-TensorRT refuses it. ONNX Runtime has no FP4 kernel: its engine
computes this subgraph with ordinary ops, exactly (``engines.emulation.emulate_fp4``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import onnx
import torch
import torch.fx

from trtcheck import qdq
from trtcheck.conversion.arguments import BoundArgs
from trtcheck.conversion.context import onnx_dtype
from trtcheck.conversion.ops._common import converter, dtype_of, refuse
from trtcheck.conversion.registry import Refusal
from trtcheck.lowering.graph import constant_tensor
from trtcheck.onnx_format.tensorrt_parser import FP4_DYNAMIC_QUANTIZE, TENSORRT_DOMAIN

if TYPE_CHECKING:  # pragma: no cover - the context imports the registry, not vice versa
    from trtcheck.conversion.context import ConversionContext

_ZERO_POINT_TYPE = {"int8": onnx.TensorProto.INT8, "fp8": onnx.TensorProto.FLOAT8E4M3FN}
# What Torch-TensorRT quantizes, less bfloat16: ONNX Runtime 1.32 has no bfloat16 QuantizeLinear kernel to verify it on.
_QUANTIZED_INPUTS = frozenset({torch.float32, torch.float16})


def _channel_axis(amax: torch.Tensor) -> int | None:
    """The one axis an amax of keepdims shape (``[C, 1, 1, 1]``) varies along; None for one value per tensor."""
    varying = [axis for axis, size in enumerate(amax.shape) if size != 1]
    if not varying:
        return None
    return varying[0] if len(varying) == 1 else -1


def _quantize_ok(args: BoundArgs) -> bool | Refusal:
    fmt = qdq.format_of(args.num_bits, args.exponent_bits)
    if fmt is None:
        return refuse(f"num_bits={args.num_bits}, exponent_bits={args.exponent_bits}: TensorRT's quantize layer takes INT8 "
                      "(8, 0) or FP8 E4M3 (8, 4) only")
    if args.unsigned or args.narrow_range:
        which = "unsigned" if args.unsigned else "narrow_range"
        return refuse(f"{which}=True: TensorRT's INT8 is signed over [-128, 127] (Torch-TensorRT ignores {which} and "
                      "would compute another range); quantize with unsigned=False, narrow_range=False to build it")
    amax = constant_tensor(args.amax)
    if amax is None:
        return refuse("amax is computed at run time: TensorRT's quantize layer takes a constant scale made of a "
                      "calibrated amax (calibrate the quantizer, or keep it static)")
    if not bool((amax > qdq.TINY_AMAX).all()) or not bool((qdq.scale_of(amax, fmt, args.meta("input").dtype) > 0).all()):
        return refuse(f"amax holds a value at or below {qdq.TINY_AMAX:.3g}, or one whose scale rounds to 0 in "
                      f"{args.meta('input').dtype}: no scale can be made of it (ModelOpt quantizes such a tensor to zeros)")
    axis = _channel_axis(amax)
    if axis is not None and fmt is qdq.FP8:
        return refuse("FP8 per channel: Torch-TensorRT converts FP8 quantizers per tensor only")
    if axis is not None and (axis != 0 or amax.dim() != args.meta("input").dim()):
        return refuse(f"INT8 per channel along amax of shape {list(amax.shape)}: TensorRT quantizes per channel on "
                      "axis 0 only")
    return True


def _block_quantize_ok(args: BoundArgs) -> bool | Refusal:
    if qdq.block_format_of(args.block_size, args.num_bits, args.exponent_bits, args.scale_num_bits,
                           args.scale_exponent_bits) is None:
        return refuse(f"block_size={args.block_size}, num_bits={args.num_bits}, exponent_bits={args.exponent_bits}, scale "
                      f"bits ({args.scale_num_bits}, {args.scale_exponent_bits}): TensorRT's DynamicQuantize layer builds "
                      "NVFP4 only (E2M1 in blocks of 16 with E4M3 scales); MXFP8 and other block formats are not converted")
    if constant_tensor(args.amax) is None:
        return refuse("amax is computed at run time: NVFP4's double-quantization scale must be a build-time constant")
    shape = args.meta("input").shape
    if len(shape) not in (2, 3):
        return refuse(f"input is {len(shape)}D: TensorRT's DynamicQuantize layer takes 2D or 3D inputs (as Torch-TensorRT's "
                      "NVFP4 converter does)")
    if not isinstance(shape[-1], int) or shape[-1] % qdq.NVFP4.block_size:
        return refuse(f"the last axis is {shape[-1]}: NVFP4 blocks need a static size divisible by {qdq.NVFP4.block_size}")
    return True


@converter(torch.ops.trtcheck.dynamic_block_quantize_op.default, dtypes=_QUANTIZED_INPUTS, outputs=_QUANTIZED_INPUTS,
           check=_block_quantize_ok, dynamic=True)
def _block_quantize(ctx: ConversionContext, args: BoundArgs) -> str:
    amax = constant_tensor(args.amax)
    assert amax is not None  # the validator refused a computed one
    dtype = dtype_of(args.input)
    scale = ctx.constant(qdq.global_scale(amax), torch.float32)
    codes, block_scales = ctx.add(FP4_DYNAMIC_QUANTIZE, [ctx.name(args.input), scale], num_outputs=2, domain=TENSORRT_DOMAIN,
                                  axis=-1, block_size=qdq.NVFP4.block_size, scale_type=onnx.TensorProto.FLOAT8E4M3FN)
    shape = [size if isinstance(size, int) else None for size in args.meta("input").shape]
    ctx.value_infos += [
        onnx.helper.make_tensor_value_info(codes, onnx.TensorProto.FLOAT4E2M1, shape),
        onnx.helper.make_tensor_value_info(block_scales, onnx.TensorProto.FLOAT8E4M3FN,
                                           [*shape[:-1], shape[-1] // qdq.NVFP4.block_size]),
    ]
    scales = ctx.add("DequantizeLinear", [block_scales, scale], output_dtype=onnx_dtype(dtype))
    return ctx.add("DequantizeLinear", [codes, scales], axis=-1, block_size=qdq.NVFP4.block_size)


@converter(torch.ops.trtcheck.quantize_op.default, dtypes=_QUANTIZED_INPUTS, outputs=_QUANTIZED_INPUTS, check=_quantize_ok,
           dynamic=True)
def _quantize(ctx: ConversionContext, args: BoundArgs) -> str:
    fmt = qdq.format_of(args.num_bits, args.exponent_bits)
    assert fmt is not None  # the validator refused every other format
    amax = constant_tensor(args.amax)
    assert amax is not None
    dtype = dtype_of(args.input)
    scale = qdq.scale_of(amax, fmt, dtype)
    per_channel = _channel_axis(amax) is not None
    scale_name = ctx.constant(scale.reshape(-1) if per_channel else scale.reshape(()), dtype)
    zero = ctx.fresh("zero_point")
    ctx.initializers.append(onnx.helper.make_tensor(zero, _ZERO_POINT_TYPE[fmt.name], [scale.numel()] if per_channel else [],
                                                    [0] * (scale.numel() if per_channel else 1)))
    axis = {"axis": 0} if per_channel else {}
    quantized = ctx.add("QuantizeLinear", [ctx.name(args.input), scale_name, zero], **axis)
    return ctx.add("DequantizeLinear", [quantized, scale_name, zero], **axis)
