"""Explicit quantization (Q/DQ) as TensorRT computes it, as ops that run on any device and in float64.

TensorRT 11 quantizes only where the graph says so: a QuantizeLinear/DequantizeLinear pair per quantizer, which
NVIDIA ModelOpt's exported graphs hold as ``torch.ops.tensorrt.quantize_op`` nodes (Torch-TensorRT converts them to
those layers). ModelOpt registers that op with kernels that need CUDA for INT8 and NVFP4, and overriding its
registration would change ModelOpt in the user's process behind their back. So lowering replaces each node by
trtcheck's own op of the same schema (``trtcheck::quantize_op``), whose kernel is TensorRT's arithmetic:

- INT8: ``scale = amax / 127``; ``q = clamp(round_half_even(x / scale), -128, 127)``; ``y = q * scale``
  (per tensor, or per channel on axis 0 with ``amax`` of shape ``[C, 1, ...]``);
- FP8 (E4M3): ``scale = amax / 448``; ``y = e4m3(clamp(x / scale, -448, 448)) * scale``, rounding to nearest even.

The kernel computes in float32 (float16/bfloat16 inputs too, their scale held in their dtype) or, for a float64 input,
in float64: the lowered graph run in float64 is the quantized model's exact reference (its INT8 codes decided in
float64; an FP8 value is cast from float64 through float32, as PyTorch casts to float8), and in float32 what a float32
engine computes. ``QuantFormat`` names
what a quantizer's ``(num_bits, exponent_bits)`` mean; ``steps_apart`` measures two outputs of one quantizer in its
own steps, which is how a quantizer's agreement with TensorRT's arithmetic is judged (``agree``).
"""

from __future__ import annotations

from dataclasses import dataclass

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

    @property
    def is_float(self) -> bool:
        return self.exponent_bits > 0


INT8 = QuantFormat("int8", 8, 0, 127.0)
FP8 = QuantFormat("fp8", 8, 4, 448.0)
FORMATS = {(f.num_bits, f.exponent_bits): f for f in (INT8, FP8)}


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


TIE_FRACTION = 1e-3
"""The share of a quantizer's outputs that may sit one step from TensorRT's arithmetic on the same input: inputs within
float32's rounding of a tie (measured: 0 of 4096 to 8192 on ModelOpt's INT8 and FP8 convolutions and MLPs)."""


APART = 1e-3
"""Steps two outputs of one quantizer must be apart to differ: their codes can only differ by whole steps, and a
float32 and a float64 run of one code differ by the scale's rounding (a few millionths of a step)."""


def steps_apart(value: torch.Tensor, other: torch.Tensor, amax: torch.Tensor, fmt: QuantFormat) -> torch.Tensor:
    """How many quantization steps apart two outputs of one quantizer are, element by element (float64): ``|a - b|``
    over the scale for INT8, over the scale times the E4M3 spacing at the smaller of the two for FP8. A value off the
    grid (a scale 2% off) is a fraction of a step away everywhere; a flipped tie is one step away in one place."""
    scale = scale_of(amax, fmt, torch.float64)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    a, b = value.detach().to(torch.float64) / scale, other.detach().to(torch.float64).to(value.device) / scale
    if fmt.is_float:
        smaller = torch.minimum(a.abs(), b.abs()).clamp(min=2.0**-6)  # E4M3's subnormals share the smallest normal spacing
        steps = (a - b).abs() / torch.exp2(torch.floor(torch.log2(smaller)) - 3)
    else:
        steps = (a - b).abs()
    return torch.where(a.isnan() & b.isnan(), torch.zeros_like(steps), steps)  # NaN in, NaN out: no step apart


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
    scale = scale_of(amax, fmt, torch.float64).expand_as(input).reshape(-1)
    scaled = (input.detach().to(torch.float64).reshape(-1) / torch.where(scale > 0, scale, torch.ones_like(scale))).clamp(
        -fmt.max_bound, fmt.max_bound)
    if fmt.is_float:
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
    "APART", "FORMATS", "FP8", "INT8", "TIE_FRACTION", "TINY_AMAX", "QuantFormat", "agree", "flip_nearest_tie", "format_of",
    "quantize_op", "scale_of", "steps_apart", "within_ties",
]
