"""Resampling: upsample_nearest2d, upsample_bilinear2d (ONNX Resize) and grid_sampler_2d (GridSample).

**Nearest** is two Gathers with constant source indices, not a Resize: PyTorch picks
``min(floor(dst * scale), in - 1)`` with ``scale`` a float32 (``1 / scale_factor`` when scale factors are
given, else ``in / out``), and Resize's ``asymmetric`` + ``floor`` computes ``floor(dst / scale')`` in its
own float arithmetic, which lands on the other side of an integer for some sizes. The indices are
computed at conversion time by PyTorch's own kernel (upsampling ``arange(in)``), so they are PyTorch's.

**Bilinear** is Resize ``mode="linear"``: ``align_corners=True`` is ``coordinate_transformation_mode=
"align_corners"`` (src = dst * (in - 1) / (out - 1)); ``align_corners=False`` is ``"half_pixel"``
(src = (dst + 0.5) / scale - 0.5, a negative src clamped to 0 as PyTorch clamps it; ``pytorch_half_pixel``
would instead put src = 0 for an output of size 1, where PyTorch does not). With ``scale_factors`` PyTorch
uses them (not in/out) in that formula, so the Resize gets ``scales``; with ``output_size`` it gets
``sizes``. Refused: ``align_corners=True`` with an output size 1 (ONNX divides by out - 1 = 0).

**grid_sampler_2d** is GridSample (opset 16): interpolation_mode 0/1/2 = bilinear/nearest/bicubic,
padding_mode 0/1/2 = zeros/border/reflection, align_corners as is; all 18 combinations are checked
against eager (``test_family_resize.py``), and TensorRT's GridSample layer has each (linear/nearest/cubic
interpolation, fill/clamp/reflect sampling). Other mode numbers are refused.

**Anti-aliased** bilinear and bicubic (``_upsample_*2d_aa``: ``F.interpolate(..., antialias=True)``, timm's
naflexvit) are ``Y = A_h X A_w`` with two constant MatMuls. ATen's filter is stretched by the downscaling factor,
clipped to the input and renormalized, which ONNX Resize's ``antialias`` does not define the same way, so the
matrices are PyTorch's own: its kernel applied to identity probes, one dim at a time (the op is separable).

Float data only (TensorRT's Resize and GridSample take FP; opset 19's GridSample has no bfloat16).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from trtcheck.conversion.arguments import BoundArgs
from trtcheck.conversion.ops._common import FLOAT, aten, converter, dynamic_refusal, ints, onnx_accepts, out_meta, refuse
from trtcheck.conversion.registry import Refusal

if TYPE_CHECKING:  # pragma: no cover - the context imports the registry, not vice versa
    from trtcheck.conversion.context import ConversionContext

_NEAREST_DTYPES = FLOAT & onnx_accepts("Gather")
# ONNX Runtime's CPU Resize has no bfloat16 kernel
_RESIZE_DTYPES = FLOAT & onnx_accepts("Resize") - {torch.bfloat16}
_GRID_DTYPES = FLOAT & onnx_accepts("GridSample")


def _rank4(args: BoundArgs, name: str) -> bool | Refusal:
    rank = args.meta(name).dim()
    return True if rank == 4 else refuse(f"{name} has rank {rank}; {args.node.target} takes (N, C, H, W)")


def _nearest_indices(args: BoundArgs, axis: int) -> torch.Tensor:
    """PyTorch's source index for every output position along ``axis`` (2 = H, 3 = W), by its own kernel."""
    size = args.meta("input").shape[axis]
    probe = torch.arange(size, dtype=torch.float32).reshape([1, 1, size, 1] if axis == 2 else [1, 1, 1, size])
    other = 3 if axis == 2 else 2
    output_size = None if args.output_size is None else list(args.output_size)
    scales = None if args.scale_factors is None else list(args.scale_factors)
    if output_size is not None:
        output_size[other - 2] = 1
    if scales is not None:
        scales[other - 2] = 1.0
    picked = aten.upsample_nearest2d.vec(probe, output_size, scales)
    assert picked.shape[axis] == out_meta(args.node).shape[axis]
    return picked.flatten().to(torch.int64)


@converter(aten.upsample_nearest2d.vec, dtypes=_NEAREST_DTYPES, outputs=_NEAREST_DTYPES,
           constants=("output_size", "scale_factors"), check=lambda args: _rank4(args, "input"))
def _upsample_nearest(ctx: ConversionContext, args: BoundArgs) -> str:
    x = ctx.name(args.input)
    for axis in (2, 3):
        indices = _nearest_indices(args, axis)
        if not torch.equal(indices, torch.arange(args.meta("input").shape[axis])):
            x = ctx.add("Gather", [x, ctx.constant(indices, torch.int64)], axis=axis)
    return x


def _bilinear_ok(args: BoundArgs) -> bool | Refusal:
    verdict = _rank4(args, "input")
    if not verdict:
        return verdict
    if args.align_corners and any(d == 1 for d in out_meta(args.node).shape[2:]):
        return refuse(f"align_corners=True with output size {list(out_meta(args.node).shape[2:])}: an output of "
                      "size 1 makes ONNX's align_corners divide by zero")
    return True


@converter(aten.upsample_bilinear2d.vec, dtypes=_RESIZE_DTYPES, outputs=_RESIZE_DTYPES,
           constants=("output_size", "align_corners", "scale_factors"), check=_bilinear_ok)
def _upsample_bilinear(ctx: ConversionContext, args: BoundArgs) -> str:
    mode = "align_corners" if args.align_corners else "half_pixel"
    if args.scale_factors is not None and not args.align_corners:
        scales = ctx.constant([1.0, 1.0, *map(float, args.scale_factors)], torch.float32)
        inputs = [ctx.name(args.input), "", scales]
    else:  # align_corners ignores the scale factors: (in - 1) / (out - 1) from the sizes
        inputs = [ctx.name(args.input), "", "", ints(ctx, list(out_meta(args.node).shape))]
    return ctx.add("Resize", inputs, mode="linear", coordinate_transformation_mode=mode)


def _antialiased_ok(args: BoundArgs) -> bool | Refusal:
    """Static spatial sizes, and no width of 1: there (input or output) ATen's anti-aliased kernel does not
    compute the separable filter it computes elsewhere (measured: up to 4.0 off the matrices' result on unit
    normal inputs, against 4e-6 over 1,365 random other cases), so no pair of matrices reproduces it."""
    verdict = _rank4(args, "self")
    if not verdict:
        return verdict
    refusal = dynamic_refusal(args, "self", [2, 3], "the resampling matrices are constants of the input size")
    if refusal is not None:
        return refusal
    width, out_width = args.meta("self").shape[3], out_meta(args.node).shape[3]
    if 1 in (width, out_width):
        return refuse(f"a width of 1 (from {width} to {out_width}): ATen's anti-aliased kernel is not separable there")
    return True


def _resampling_matrix(args: BoundArgs, axis: int) -> torch.Tensor:
    """The matrix ATen's anti-aliased kernel applies along ``axis`` (2: ``[out_h, in_h]``, to multiply from the
    left; 3: ``[in_w, out_w]``, from the right): the op on an identity, each probe row resampled alone along
    ``axis`` while the other dim stays 2 -> 2 (the identity for both filters; a 1 is not, see ``_antialiased_ok``).
    Computed in float32, the precision PyTorch's float32 kernel computes its weights in."""
    size, out = args.meta("self").shape[axis], out_meta(args.node).shape[axis]
    shape, sizes, scales = [size, 1, 2, 2], [2, 2], [None, None]
    shape[axis] = size
    sizes[axis - 2] = out
    scales[axis - 2] = args.scales_h if axis == 2 else args.scales_w
    identity = torch.eye(size, dtype=torch.float32)
    probe = (identity[:, None, :, None] if axis == 2 else identity[:, None, None, :]).expand(shape).contiguous()
    resampled = args.node.target(probe, sizes, args.align_corners, *scales)  # [i] = input i's weights, twice over
    rows = resampled[:, 0, :, 0] if axis == 2 else resampled[:, 0, 0, :]
    return rows.t().contiguous() if axis == 2 else rows.contiguous()


@converter(aten._upsample_bilinear2d_aa.default, aten._upsample_bicubic2d_aa.default, dtypes=_RESIZE_DTYPES,
           outputs=_RESIZE_DTYPES, constants=("output_size", "align_corners", "scales_h", "scales_w"),
           check=_antialiased_ok, dynamic=True)
def _upsample_antialiased(ctx: ConversionContext, args: BoundArgs) -> str:
    """Two MatMuls with PyTorch's resampling matrices; batch and channels may be dynamic (MatMul broadcasts)."""
    dtype = out_meta(args.node).dtype
    rows, columns = (ctx.constant(_resampling_matrix(args, axis).to(dtype), dtype) for axis in (2, 3))
    return ctx.add("MatMul", [rows, ctx.add("MatMul", [ctx.name(args.self), columns])])


# interpolation_mode, padding_mode -> ONNX names
_INTERPOLATION = {0: "bilinear", 1: "nearest", 2: "bicubic"}
_PADDING = {0: "zeros", 1: "border", 2: "reflection"}


def _grid_ok(args: BoundArgs) -> bool | Refusal:
    for name in ("input", "grid"):
        verdict = _rank4(args, name)
        if not verdict:
            return verdict
    if args.interpolation_mode not in _INTERPOLATION:
        return refuse(f"interpolation_mode {args.interpolation_mode!r} is not 0, 1 or 2")
    if args.padding_mode not in _PADDING:
        return refuse(f"padding_mode {args.padding_mode!r} is not 0, 1 or 2")
    return True


@converter(aten.grid_sampler_2d.default, dtypes=_GRID_DTYPES, outputs=_GRID_DTYPES,
           constants=("interpolation_mode", "padding_mode", "align_corners"), check=_grid_ok)
def _grid_sample(ctx: ConversionContext, args: BoundArgs) -> str:
    return ctx.add("GridSample", [ctx.name(args.input), ctx.name(args.grid)],
                   mode=_INTERPOLATION[args.interpolation_mode], padding_mode=_PADDING[args.padding_mode],
                   align_corners=int(bool(args.align_corners)))
