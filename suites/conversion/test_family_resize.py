"""upsample_nearest2d.vec, upsample_bilinear2d.vec and grid_sampler_2d (ops/resize.py) against eager PyTorch."""

from __future__ import annotations

import pytest
import torch

from suites.conversion.converter_harness import randn
from suites.conversion.family_harness import check, refused

A = torch.ops.aten
F16 = torch.float16


@pytest.mark.parametrize(("output_size", "scales", "shape"), [
    ([5, 7], None, (1, 2, 4, 5)),  # output_size, non-integer ratios
    ([12, 3], None, (2, 1, 4, 6)),  # upsample H, downsample W
    (None, [1.7, 2.0], (1, 2, 5, 3)),  # scale factors PyTorch uses as given
    (None, [3.0, 0.5], (1, 1, 7, 6)),
    ([37, 41], None, (1, 1, 13, 17)),  # ratios whose float reciprocal rounds
])
def test_upsample_nearest(output_size, scales, shape) -> None:
    check(lambda x: A.upsample_nearest2d.vec(x, output_size, scales), (randn(*shape),),
          targets=(A.upsample_nearest2d.vec,))


def test_upsample_nearest_float16() -> None:
    check(lambda x: A.upsample_nearest2d.vec(x, None, [2.5, 1.5]), (randn(1, 3, 4, 4, dtype=F16),),
          targets=(A.upsample_nearest2d.vec,))


@pytest.mark.parametrize(("output_size", "align_corners", "scales", "shape"), [
    ([7, 9], False, None, (1, 2, 4, 5)),
    ([7, 9], True, None, (1, 2, 4, 5)),
    (None, False, [1.7, 2.3], (2, 1, 5, 3)),  # PyTorch uses 1/scale, not in/out
    (None, True, [2.0, 1.5], (1, 2, 3, 4)),  # align_corners ignores the scale factors
    ([2, 3], False, None, (1, 1, 6, 7)),  # downsampling
    ([1, 4], False, None, (1, 1, 5, 3)),  # an output of size 1 (half_pixel, not pytorch_half_pixel)
])
def test_upsample_bilinear(output_size, align_corners, scales, shape) -> None:
    check(lambda x: A.upsample_bilinear2d.vec(x, output_size, align_corners, scales), (randn(*shape),),
          targets=(A.upsample_bilinear2d.vec,))


def test_upsample_bilinear_float16() -> None:
    check(lambda x: A.upsample_bilinear2d.vec(x, [6, 8], False, None), (randn(1, 2, 3, 4, dtype=F16),),
          targets=(A.upsample_bilinear2d.vec,))


def test_upsample_refusals() -> None:
    assert "align_corners=True" in refused(lambda x: A.upsample_bilinear2d.vec(x, [1, 4], True, None),
                                           (randn(1, 1, 3, 3),), A.upsample_bilinear2d.vec)
    assert "bfloat16" in refused(lambda x: A.upsample_bilinear2d.vec(x, [4, 4], False, None),
                                 (randn(1, 1, 3, 3, dtype=torch.bfloat16),), A.upsample_bilinear2d.vec)


def _grid(n: int, h: int, w: int, seed: int = 1) -> torch.Tensor:
    """Sample points in [-1.3, 1.3]: some outside, so the padding mode matters."""
    return (torch.rand(n, h, w, 2, generator=torch.Generator().manual_seed(seed)) * 2.6 - 1.3)


@pytest.mark.parametrize("interpolation", [0, 1, 2])
@pytest.mark.parametrize("padding", [0, 1, 2])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sampler_2d(interpolation, padding, align_corners) -> None:
    check(lambda x, g: A.grid_sampler_2d.default(x, g, interpolation, padding, align_corners),
          (randn(2, 3, 5, 6), _grid(2, 4, 7)), targets=(A.grid_sampler_2d.default,))


def test_grid_sampler_2d_float16_as_good_as_eager() -> None:
    """PyTorch's CPU kernel samples float16 in float16 arithmetic, ONNX Runtime in float32, so the two differ by
    float16 rounding; the converted result must be no further from the float64 result than eager's is."""
    x, g = randn(1, 2, 4, 4, dtype=F16), _grid(1, 3, 3).half()
    fn = lambda x, g: A.grid_sampler_2d.default(x, g, 0, 0, False)  # noqa: E731
    result = check(fn, (x, g), targets=(A.grid_sampler_2d.default,), rtol=0.5, atol=5e-3)
    reference = fn(x.double(), g.double())
    got = torch.from_numpy(result.actual[0]).double()
    eager = fn(x, g).double()
    assert (got - reference).abs().max() <= max(2 * (eager - reference).abs().max(), 1e-3)
