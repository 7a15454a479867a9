"""One converter case per overload of the op-family modules (padding, scatter, sorting, resize, embedding, quantize).

Plain ``(id, target, fn, inputs)`` tuples, so ``converter_cases.py`` can take them into ``CASES`` without an
import cycle (``for c in FAMILY_CASES: case(*c)``), which ``test_every_registered_overload_has_a_case``
needs; until then ``test_family_cases.py`` runs them. The ONNX ops TopK, Resize, GridSample and ScatterND
need their TensorRT types in ``trt_onnx_ops.TENSORRT_ONNX_TYPES`` first (``family_harness.EXTRA_TENSORRT_TYPES``).
"""

from __future__ import annotations

import torch

import trtcheck.qdq  # noqa: F401 - defines trtcheck.quantize_op
from suites.conversion.converter_harness import randint, randn

A = torch.ops.aten
F16 = torch.float16
Q = torch.ops.trtcheck.quantize_op.default
BLOCK_Q = torch.ops.trtcheck.dynamic_block_quantize_op.default


class Quantizer(torch.nn.Module):
    """``x`` through ``trtcheck.quantize_op`` with a constant ``amax`` (a buffer, as a calibrated quantizer's is)."""

    def __init__(self, amax: torch.Tensor, num_bits: int, exponent_bits: int) -> None:
        super().__init__()
        self.register_buffer("amax", amax)
        self.format = (num_bits, exponent_bits)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return Q(x, self.amax, *self.format, False, False)


class BlockQuantizer(torch.nn.Module):
    """``x`` through NVFP4's ``trtcheck.dynamic_block_quantize_op`` with a constant ``amax``."""

    def __init__(self, amax: float) -> None:
        super().__init__()
        self.register_buffer("amax", torch.tensor(amax))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return BLOCK_Q(x, 16, self.amax, 4, 2, 8, 4)


FAMILY_CASES = [
    ("reflection_pad1d-uneven", A.reflection_pad1d.default, lambda x: A.reflection_pad1d.default(x, [2, 1]),
     lambda: (randn(2, 3, 5),)),
    ("reflection_pad2d-int", A.reflection_pad2d.default, lambda x: A.reflection_pad2d.default(x, [1, 2, 0, 1]),
     lambda: (randint(1, 2, 3, 4),)),
    ("reflection_pad3d-f16", A.reflection_pad3d.default,
     lambda x: A.reflection_pad3d.default(x, [1, 0, 0, 2, 1, 1]), lambda: (randn(1, 1, 2, 3, 4, dtype=F16),)),
    ("replication_pad2d-unbatched", A.replication_pad2d.default,
     lambda x: A.replication_pad2d.default(x, [3, 0, 1, 2]), lambda: (randn(2, 3, 4),)),
    ("replication_pad3d", A.replication_pad3d.default, lambda x: A.replication_pad3d.default(x, [1, 2, 0, 1, 2, 0]),
     lambda: (randn(1, 2, 2, 3, 2),)),
    ("scatter.src-smaller-index", A.scatter.src, lambda x, i, s: A.scatter.src(x, 1, i, s),
     lambda: (randn(3, 5), torch.tensor([[4, 0], [1, 3]]), randn(3, 4, seed=1))),
    ("scatter.value-int", A.scatter.value, lambda x, i: A.scatter.value(x, 0, i, 7),
     lambda: (randint(3, 2), torch.tensor([[2, 0], [0, 1]]))),
    ("scatter_add-repeats", A.scatter_add.default, lambda x, i, s: A.scatter_add.default(x, -1, i, s),
     lambda: (randn(2, 3), torch.tensor([[0, 0, 2, 0], [1, 1, 1, 2]]), randn(2, 4, seed=1))),
    ("scatter_reduce.two-prod", A.scatter_reduce.two, lambda x, i, s: A.scatter_reduce.two(x, 0, i, s, "prod"),
     lambda: (randn(2, 3), torch.tensor([[0, 1, 1], [0, 0, 1]]), randn(2, 3, seed=1))),
    ("index_put-accumulate", A.index_put.default, lambda x, i, v: A.index_put.default(x, [i], v, True),
     lambda: (randn(4, 3), torch.tensor([3, -1, 0]), randn(3, 3, seed=1))),
    ("topk-values-smallest", A.topk.default, lambda x: A.topk.default(x, 2, 0, False)[0], lambda: (randn(4, 3),)),
    ("sort-values-descending", A.sort.default, lambda x: A.sort.default(x, -1, True)[0],
     lambda: (torch.tensor([[1.0, float("nan"), -2.0, 1.0]]),)),
    ("upsample_nearest2d.vec-sizes", A.upsample_nearest2d.vec, lambda x: A.upsample_nearest2d.vec(x, [5, 7], None),
     lambda: (randn(1, 2, 3, 4),)),
    ("upsample_bilinear2d.vec-scales", A.upsample_bilinear2d.vec,
     lambda x: A.upsample_bilinear2d.vec(x, None, False, [1.5, 2.0]), lambda: (randn(1, 2, 3, 4),)),
    ("grid_sampler_2d-nearest-border", A.grid_sampler_2d.default,
     lambda x, g: A.grid_sampler_2d.default(x, g, 1, 1, True),
     lambda: (randn(1, 2, 4, 5), torch.rand(1, 3, 3, 2, generator=torch.Generator().manual_seed(1)) * 2.4 - 1.2)),
    ("embedding-padding_idx", A.embedding.default, lambda w, i: A.embedding.default(w, i, 1),
     lambda: (randn(5, 3), torch.tensor([[1, 4], [0, 1]]))),
    # Explicit quantization (trtcheck.qdq): the amax a buffer, as a calibrated quantizer's is.
    ("quantize_op-fp8", Q, Quantizer(torch.tensor(2.5), 8, 4), lambda: (randn(3, 5) * 2,)),
    ("quantize_op-int8-per-channel-f16", Q, Quantizer(torch.tensor([[1.0], [2.0], [3.0]]), 8, 0),
     lambda: (randn(3, 5, dtype=F16) * 2,)),
    ("dynamic_block_quantize_op-nvfp4-3d-f16", BLOCK_Q, BlockQuantizer(1.5), lambda: (randn(2, 3, 32, dtype=F16) * 2,)),
]
