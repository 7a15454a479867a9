"""Explicit quantization (Q/DQ) as TensorRT computes it, as ops that run on any device and in float64.

TensorRT 11 quantizes only where the graph says so: a QuantizeLinear/DequantizeLinear pair per quantizer, which
NVIDIA ModelOpt's exported graphs hold as ``torch.ops.tensorrt.quantize_op`` nodes (Torch-TensorRT converts them to
those layers). ModelOpt registers that op with kernels that need CUDA for INT8 and NVFP4, and overriding its
registration would change ModelOpt in the user's process behind their back. So lowering replaces each node by
trtcheck's own op of the same schema (``trtcheck::quantize_op``), whose kernel is TensorRT's arithmetic:

- INT8: ``scale = amax / 127``; ``q = clamp(round_half_even(x / scale), -128, 127)``; ``y = q * scale``
  (per tensor, or per channel on axis 0 with ``amax`` of shape ``[C, 1, ...]``);
- FP8 (E4M3): ``scale = amax / 448``; ``y = e4m3(clamp(x / scale, -448, 448)) * scale``, rounding to nearest even;
- NVFP4 (``trtcheck::dynamic_block_quantize_op``, ModelOpt's ``tensorrt.dynamic_block_quantize_op``): blocks of 16
  along the last axis, each with its own FP8 E4M3 scale, itself scaled by one float32 ``global = amax / (6 * 448)``
  (TensorRT's DynamicQuantize layer and two DequantizeLinear, as Torch-TensorRT's converter builds it):
  ``block = e4m3(min(max|x_block| / (6 * global), 448)) * global``; ``y = e2m1(x / block) * block``, E2M1 rounding
  to nearest even and saturating at 6 (its values: 0, 0.5, 1, 1.5, 2, 3, 4, 6). A block whose scale is 0 gives zeros.

The kernel computes in float32 (float16/bfloat16 inputs too, their scale held in their dtype) or, for a float64 input,
in float64: the lowered graph run in float64 is the quantized model's exact reference (its INT8 codes decided in
float64; an FP8 value is cast from float64 through float32, as PyTorch casts to float8), and in float32 what a float32
engine computes. ``QuantFormat`` names
what a quantizer's ``(num_bits, exponent_bits)`` mean; ``steps_apart`` measures two outputs of one quantizer in its
own steps, which is how a quantizer's agreement with TensorRT's arithmetic is judged (``agree``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

TINY_AMAX = 2.0**-24
"""An amax at or below this quantizes to zeros (ModelOpt's rule): no scale can be made of it."""


@dataclass(frozen=True)
class QuantFormat:
    """A quantizer's format: ``name`` ("int8", "fp8"), its ``(num_bits, exponent_bits)`` as ModelOpt writes them,
    and ``max_bound``, the largest code's magnitude (the scale is ``amax / max_bound``)."""

    name: str
    num_bits: int
    exponent_bits: int
    max_bound: float
    block_size: int = 0
    """Elements sharing one scale along the last axis, a scale computed at run time; 0 for a calibrated scale."""

    @property
    def is_float(self) -> bool:
        return self.exponent_bits > 0


INT8 = QuantFormat("int8", 8, 0, 127.0)
FP8 = QuantFormat("fp8", 8, 4, 448.0)
NVFP4 = QuantFormat("nvfp4", 4, 2, 6.0, block_size=16)
FORMATS = {(f.num_bits, f.exponent_bits): f for f in (INT8, FP8)}
NVFP4_SCALE_BITS = (8, 4)
"""NVFP4's block scales: FP8 E4M3, as ``dynamic_block_quantize_op``'s ``(scale_num_bits, scale_exponent_bits)``."""
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
"""The magnitudes FP4 E2M1 holds."""


def format_of(num_bits: int, exponent_bits: int) -> QuantFormat | None:
    """The format ``quantize_op``'s ``num_bits``/``exponent_bits`` name, or None for one TensorRT has no layer for."""
    return FORMATS.get((int(num_bits), int(exponent_bits)))


def scale_of(amax: torch.Tensor, fmt: QuantFormat, dtype: torch.dtype, unsigned: bool = False) -> torch.Tensor:
    """The scale a quantizer of ``amax`` uses for values of ``dtype``: ``amax / max_bound`` computed in float32 (as
    Torch-TensorRT makes its scale constant) and held in ``dtype``; in float64 for a float64 input. An ``unsigned``
    INT8 quantizer (which only ModelOpt's own arithmetic has: TensorRT's INT8 is signed) divides by 255."""
    wide = torch.float64 if dtype == torch.float64 else torch.float32
    bound = 2.0 ** fmt.num_bits - 1 if unsigned and not fmt.is_float else fmt.max_bound
    return (amax.detach().to(wide) / bound).to(dtype)


def block_format_of(block_size: int, num_bits: int, exponent_bits: int, scale_num_bits: int,
                    scale_exponent_bits: int) -> QuantFormat | None:
    """The format ``dynamic_block_quantize_op``'s arguments name: NVFP4 (E2M1 values in blocks of 16, E4M3 scales), or
    None for one TensorRT's DynamicQuantize layer does not build (MXFP8's E8M0 scales, other block sizes)."""
    wanted = (NVFP4.block_size, NVFP4.num_bits, NVFP4.exponent_bits, *NVFP4_SCALE_BITS)
    found = (int(block_size), int(num_bits), int(exponent_bits), int(scale_num_bits), int(scale_exponent_bits))
    return NVFP4 if found == wanted else None


def round_e2m1(scaled: torch.Tensor) -> torch.Tensor:
    """``scaled`` rounded to the nearest FP4 E2M1 value, ties to even, saturating at +-6: E2M1's spacing is 0.5 below
    2, 1 below 4 and 2 above, so each range rounds as a multiple of its spacing (``torch.round`` rounds half to even,
    and the even multiple is the even code)."""
    magnitude = scaled.abs().clamp(max=NVFP4.max_bound)
    spacing = _e2m1_spacing(magnitude)
    return torch.copysign(torch.round(magnitude / spacing) * spacing, scaled)


def global_scale(amax: torch.Tensor) -> torch.Tensor:
    """NVFP4's float32 double-quantization scale, ``amax / (6 * 448)`` (1 where that is 0, as Torch-TensorRT makes it)."""
    scale = amax.detach().to(torch.float32).reshape(()) / (NVFP4.max_bound * FP8.max_bound)
    return torch.where(scale > 0, scale, torch.ones_like(scale))


def block_scales(input: torch.Tensor, amax: torch.Tensor, block_size: int) -> torch.Tensor:
    """Each block's NVFP4 scale (``[..., blocks, 1]``, float32): its largest magnitude over ``6 * global``, saturated
    at 448 and rounded to E4M3, times ``global``. Computed in float32 from the float32 block maxima whatever the
    input's dtype, as TensorRT computes it, so a float64 reference picks the scales a float32 engine picks."""
    shape = input.shape
    blocks = input.detach().reshape(*shape[:-1], shape[-1] // block_size, block_size)
    largest = blocks.abs().amax(dim=-1, keepdim=True).to(torch.float32)
    scale = global_scale(amax).to(input.device)
    return (largest / (NVFP4.max_bound * scale)).clamp(max=FP8.max_bound).to(torch.float8_e4m3fn).to(torch.float32) * scale


def _check(num_bits: int, exponent_bits: int) -> QuantFormat:
    fmt = format_of(num_bits, exponent_bits)
    if fmt is None:
        raise NotImplementedError(
            f"trtcheck::quantize_op: num_bits={num_bits}, exponent_bits={exponent_bits} is neither INT8 (8, 0) nor FP8 "
            "E4M3 (8, 4), the formats TensorRT's quantize layer takes"
        )
    return fmt


@torch.library.custom_op("trtcheck::quantize_op", mutates_args=())
def quantize_op(
    input: torch.Tensor, amax: torch.Tensor, num_bits: int, exponent_bits: int, unsigned: bool, narrow_range: bool
) -> torch.Tensor:
    """Quantize ``input`` and dequantize it again, as TensorRT's Q/DQ pair does (module docstring); ``unsigned`` and
    ``narrow_range`` narrow the INT8 range to ``[0, 255]`` / ``[-127, 127]`` as ModelOpt's own kernel does."""
    fmt = _check(num_bits, exponent_bits)
    if not input.is_floating_point():
        raise TypeError(f"trtcheck::quantize_op quantizes floating-point values, got {input.dtype}")
    amax = amax.to(input.device)
    wide = torch.float64 if input.dtype == torch.float64 else torch.float32  # fp16/bf16 quantize in float32, as ONNX Runtime does
    scale = scale_of(amax, fmt, input.dtype, unsigned).to(wide)  # the scale constant is held in the input's dtype
    tiny = (amax.to(wide) <= TINY_AMAX) | (scale == 0)  # a scale float16 cannot hold is no scale either
    safe = torch.where(tiny, torch.ones_like(scale), scale)
    if unsigned and not fmt.is_float:  # ModelOpt's alone (TensorRT's INT8 is signed): its own arithmetic, x * (255 / amax)
        factor = torch.where(tiny, torch.ones_like(scale), (2.0**num_bits - 1) / amax.to(wide))
        codes = torch.round(input.to(wide) * factor).clamp(0, 2.0**num_bits - 1)
        return torch.where(tiny, torch.zeros_like(codes), codes / factor).to(input.dtype)
    scaled = input.to(wide) / safe
    if fmt.is_float:
        codes = scaled.clamp(-fmt.max_bound, fmt.max_bound).to(torch.float8_e4m3fn).to(wide)
    else:
        high = 2.0 ** (num_bits - 1) - 1  # signed: the unsigned case returned above
        codes = torch.round(scaled).clamp(-high if narrow_range else -high - 1, high)  # torch.round rounds half to even, as TensorRT does
    return torch.where(tiny, torch.zeros_like(scaled), codes * safe).to(input.dtype)


@quantize_op.register_fake
def _(input: torch.Tensor, amax: torch.Tensor, num_bits: int, exponent_bits: int, unsigned: bool, narrow_range: bool) -> torch.Tensor:
    return torch.empty_like(input)


@torch.library.custom_op("trtcheck::dynamic_block_quantize_op", mutates_args=())
def dynamic_block_quantize_op(input: torch.Tensor, block_size: int, amax: torch.Tensor, num_bits: int, exponent_bits: int,
                              scale_num_bits: int, scale_exponent_bits: int) -> torch.Tensor:
    """NVFP4: quantize ``input`` in blocks of ``block_size`` along its last axis and dequantize it again, as TensorRT's
    DynamicQuantize layer and its two DequantizeLinear do (module docstring). In float32 (float16 inputs too, their
    block scales held in float16 as the dequantized scale is), in float64 for a float64 input."""
    if block_format_of(block_size, num_bits, exponent_bits, scale_num_bits, scale_exponent_bits) is None:
        raise NotImplementedError(
            f"trtcheck::dynamic_block_quantize_op: block_size={block_size}, num_bits={num_bits}, exponent_bits={exponent_bits}, "
            f"scale bits ({scale_num_bits}, {scale_exponent_bits}) is not NVFP4 (16, 4, 2, 8, 4), the block format "
            "TensorRT's DynamicQuantize layer builds"
        )
    if not input.is_floating_point() or input.dim() == 0 or input.shape[-1] % block_size:
        raise ValueError(f"trtcheck::dynamic_block_quantize_op quantizes floating-point values whose last axis is a multiple "
                         f"of {block_size}, got {input.dtype} of shape {list(input.shape)}")
    wide = torch.float64 if input.dtype == torch.float64 else torch.float32
    scale = block_scales(input, amax.to(input.device), block_size).to(input.dtype).to(wide)
    blocks = input.to(wide).reshape(*input.shape[:-1], input.shape[-1] // block_size, block_size)
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    codes = torch.where(scale > 0, round_e2m1(blocks / safe), torch.zeros_like(blocks))
    return (codes * scale).reshape(input.shape).to(input.dtype)


@dynamic_block_quantize_op.register_fake
def _(input: torch.Tensor, block_size: int, amax: torch.Tensor, num_bits: int, exponent_bits: int, scale_num_bits: int,
      scale_exponent_bits: int) -> torch.Tensor:
    return torch.empty_like(input)


@dataclass(frozen=True)
class QuantCall:
    """What a call of one of trtcheck's quantize ops quantizes: its ``input`` and ``amax`` (tensors, or the nodes
    that make them), its ``fmt`` (None for one TensorRT has no layer for) and whether it is ModelOpt's ``unsigned``
    INT8 (not TensorRT's arithmetic)."""

    fmt: QuantFormat | None
    input: Any
    amax: Any
    unsigned: bool = False


def quant_call(target: Any, args: Sequence[Any]) -> QuantCall | None:
    """``target(*args)`` read as a ``QuantCall``; None where ``target`` is not one of trtcheck's quantize ops."""
    if target is torch.ops.trtcheck.quantize_op.default:
        return QuantCall(format_of(args[2], args[3]), args[0], args[1], bool(args[4]))
    if target is torch.ops.trtcheck.dynamic_block_quantize_op.default:
        return QuantCall(block_format_of(args[1], *args[3:7]), args[0], args[2])
    return None


TIE_FRACTION = 1e-3
"""The share of a quantizer's outputs that may sit one step from TensorRT's arithmetic on the same input: inputs within
float32's rounding of a tie (measured: 0 of 4096 to 8192 on ModelOpt's INT8 and FP8 convolutions and MLPs)."""


APART = 1e-3
"""Steps two outputs of one quantizer must be apart to differ: their codes can only differ by whole steps, and a
float32 and a float64 run of one code differ by the scale's rounding (a few millionths of a step)."""


def steps_apart(value: torch.Tensor, other: torch.Tensor, amax: torch.Tensor, fmt: QuantFormat) -> torch.Tensor:
    """How many quantization steps apart two outputs of one quantizer are, element by element (float64): ``|a - b|``
    over the scale for INT8, over the scale times the E4M3 spacing at the smaller of the two for FP8, and for NVFP4
    over its block's scale times the E2M1 spacing (the block's scale read off ``other``, the reference: its largest
    magnitude is 6 scales, since a block's largest value lands on E2M1's largest code). A value off the grid (a scale
    2% off) is a fraction of a step away everywhere; a flipped tie is one step away in one place."""
    if fmt.block_size:
        return _block_steps(value, other, fmt)
    scale = scale_of(amax, fmt, torch.float64)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    a, b = value.detach().to(torch.float64) / scale, other.detach().to(torch.float64).to(value.device) / scale
    if fmt.is_float:
        smaller = torch.minimum(a.abs(), b.abs()).clamp(min=2.0**-6)  # E4M3's subnormals share the smallest normal spacing
        steps = (a - b).abs() / torch.exp2(torch.floor(torch.log2(smaller)) - 3)
    else:
        steps = (a - b).abs()
    return _nan_is_no_step(a, b, steps)


def _nan_is_no_step(a: torch.Tensor, b: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    return torch.where(a.isnan() & b.isnan(), torch.zeros_like(steps), steps)  # NaN in, NaN out: no step apart


def _e2m1_spacing(magnitude: torch.Tensor) -> torch.Tensor:
    return torch.where(magnitude < 2, 0.5, torch.where(magnitude < 4, 1.0, 2.0)).to(magnitude.dtype)


def _block_steps(value: torch.Tensor, other: torch.Tensor, fmt: QuantFormat) -> torch.Tensor:
    shape = other.shape
    if other.dim() == 0 or shape[-1] % fmt.block_size:
        return (value.detach().to(torch.float64) - other.detach().to(torch.float64)).abs()
    blocks = other.detach().to(torch.float64).reshape(*shape[:-1], shape[-1] // fmt.block_size, fmt.block_size)
    scale = blocks.abs().amax(dim=-1, keepdim=True).nan_to_num(0.0, posinf=0.0) / fmt.max_bound
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    a = value.detach().to(torch.float64).to(other.device).reshape(blocks.shape) / scale
    b = blocks / scale
    steps = (a - b).abs() / _e2m1_spacing(torch.minimum(a.abs(), b.abs()))
    return _nan_is_no_step(a, b, steps).reshape(shape)


def agree(steps: torch.Tensor) -> bool:
    """A quantizer's output agrees with TensorRT's arithmetic: no element more than one step away, and no more than
    ``TIE_FRACTION`` of them any distance away (``steps``: ``steps_apart``'s)."""
    if steps.numel() == 0:
        return True
    return within_ties(float(steps.max()), int((steps > APART).sum()), steps.numel())


def within_ties(largest: float, differing: int, elements: int) -> bool:
    """``agree``'s rule on its counts: the largest distance in steps, how many values differ, of how many."""
    return largest <= 1 + APART and differing <= max(1.0, TIE_FRACTION * elements)  # one tie even in a small tensor


def flip_nearest_tie(input: torch.Tensor, output: torch.Tensor, amax: torch.Tensor, fmt: QuantFormat | None) -> torch.Tensor:
    """``output`` (``quantize_op`` of ``input``) with the one element whose input lies nearest a rounding tie moved
    one step to the tie's other side: the code a float32 engine most likely rounds the other way. Unchanged for an
    unknown format or an empty tensor."""
    if fmt is None or output.numel() == 0:
        return output
    if fmt.block_size:
        if input.shape[-1] % fmt.block_size:
            return output
        scale = block_scales(input, amax, fmt.block_size).to(torch.float64).expand(
            *input.shape[:-1], input.shape[-1] // fmt.block_size, fmt.block_size).reshape(-1)
    else:
        scale = scale_of(amax, fmt, torch.float64).expand_as(input).reshape(-1)
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    scaled = (input.detach().to(torch.float64).reshape(-1) / safe).clamp(-fmt.max_bound, fmt.max_bound)
    if fmt.block_size:
        grid = torch.tensor(E2M1_VALUES, dtype=torch.float64, device=scaled.device)
        magnitude = scaled.abs()
        nearest = round_e2m1(magnitude)
        index = torch.bucketize(nearest, grid)  # exact: nearest is on the grid
        other = grid[torch.where(magnitude >= nearest, index + 1, index - 1).clamp(0, len(E2M1_VALUES) - 1)]
        gap = (other - nearest).abs()
        tie = torch.where((gap > 0) & (scale > 0), (magnitude - nearest).abs() / gap, torch.zeros_like(gap))
        flipped = other * torch.where(scaled < 0, -1.0, 1.0)
    elif fmt.is_float:
        bits = scaled.to(torch.float8_e4m3fn).view(torch.uint8).to(torch.int16)
        nearest = (bits & 0x7F).clamp(max=0x7E).to(torch.uint8).view(torch.float8_e4m3fn).to(torch.float64)
        above = (bits & 0x7F).add(1).clamp(max=0x7E).to(torch.uint8).view(torch.float8_e4m3fn).to(torch.float64)
        below = (bits & 0x7F).sub(1).clamp(min=0).to(torch.uint8).view(torch.float8_e4m3fn).to(torch.float64)
        magnitude = scaled.abs()
        other = torch.where(magnitude >= nearest, above, below)  # the grid's neighbour on the input's side
        gap = (other - nearest).abs()
        tie = torch.where(gap > 0, (magnitude - nearest).abs() / gap, torch.zeros_like(gap))
        flipped = other * torch.where(scaled < 0, -1.0, 1.0)
    else:
        nearest = scaled.round()
        tie = (scaled - nearest).abs()
        flipped = (nearest + torch.where(scaled >= nearest, 1.0, -1.0)).clamp(-fmt.max_bound - 1, fmt.max_bound)
    tie = torch.where(tie.isfinite(), tie, torch.full_like(tie, -1.0))  # a NaN or infinite input has no tie to flip
    if float(tie.max()) <= 0:
        return output
    index = int(tie.argmax())
    result = output.detach().clone().reshape(-1)
    result[index] = (flipped[index] * scale[index]).to(result.dtype)
    return result.reshape(output.shape)


__all__ = [
    "APART", "E2M1_VALUES", "FORMATS", "FP8", "INT8", "NVFP4", "NVFP4_SCALE_BITS", "TIE_FRACTION", "TINY_AMAX", "QuantCall",
    "QuantFormat", "agree", "block_format_of", "block_scales", "dynamic_block_quantize_op", "flip_nearest_tie",
    "format_of", "global_scale", "quant_call", "quantize_op", "round_e2m1", "scale_of", "steps_apart", "within_ties",
]
