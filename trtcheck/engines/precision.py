"""What a precision means for a segment's numbers: its mantissa, one rounding's size, and TF32's rounding.

TensorRT 11 is strongly typed only: a reduced precision is no builder flag but the ONNX model's own types, which the
compiler writes (``trtcheck.compiler.mixed_precision``: float tensors in fp16/bf16, Casts at the boundaries, the
nodes kept in float32). TensorRT builds that graph; ONNX Runtime runs the same graph through its CPU emulation
(``trtcheck.engines.emulation``), so a CPU verdict at fp16 is a verdict on the graph TensorRT builds. This module
holds the arithmetic the emulation and the judge (``trtcheck.verification.judge``) share:

- ``MANTISSA_BITS``/``unit_roundoff``: how large one rounding is in each precision a setting computes in;
- ``round_tf32``: TF32, the float32 matmul and convolution mode TensorRT (and Torch-TensorRT by default) deploys:
  a float32 rounded exactly to 10 explicit mantissa bits (8-bit exponent, round to nearest even). ONNX Runtime's
  emulation rounds weights with it; the judge's TF32 yardstick (``verification.reference.tf32_rounding``) rounds
  eager's matmul and convolution factors with it.
"""

from __future__ import annotations

import torch

__all__ = [
    "MANTISSA_BITS",
    "TF32_DROPPED_BITS",
    "round_tf32",
    "unit_roundoff",
]

MANTISSA_BITS: dict[str, int] = {"fp32": 23, "tf32": 10, "fp16": 10, "bf16": 7}
"""Explicit mantissa bits of each precision a setting computes in (``verification.judge.judged_precision``'s names)."""


def unit_roundoff(precision: str) -> float:
    """The largest relative error of one rounding to nearest in ``precision`` (``verification.judge.judged_precision``'s names):
    ``2**-(mantissa bits + 1)``: fp32 ``2**-24``, tf32 and fp16 ``2**-11``, bf16 ``2**-8``. What the judge scales a
    precision's allowance by; tf32 rounds as finely as fp16 but keeps float32's range (no overflow to judge)."""
    try:
        return 2.0 ** -(MANTISSA_BITS[precision] + 1)
    except KeyError:
        raise ValueError(f"precision must be one of {', '.join(MANTISSA_BITS)}, got {precision!r}") from None


TF32_DROPPED_BITS = 13
"""float32's 23 explicit mantissa bits less TF32's 10."""


def round_tf32(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` (float32) rounded to TF32: the nearest float32 with 10 explicit mantissa bits, ties to even; inf and NaN
    kept. Exact bit arithmetic, what ONNX Runtime's ``emulation.emulate_tf32`` rounds weights with and what the judge's yardstick
    (``verification.reference.tf32_rounding``) rounds eager's matmul and convolution inputs with. Other dtypes are returned as they are."""
    if tensor.dtype != torch.float32:
        return tensor
    bits = tensor.detach().view(torch.int32).to(torch.int64) & 0xFFFFFFFF  # elementwise: the tensor's layout is kept
    low_bit = (bits >> TF32_DROPPED_BITS) & 1
    rounded = (bits + (1 << (TF32_DROPPED_BITS - 1)) - 1 + low_bit) & ~((1 << TF32_DROPPED_BITS) - 1)
    special = (bits & 0x7F800000) == 0x7F800000  # inf or NaN: rounding would carry into the sign
    rounded = torch.where(special, bits, rounded)
    return torch.where(rounded >= 2**31, rounded - 2**32, rounded).to(torch.int32).view(torch.float32)
