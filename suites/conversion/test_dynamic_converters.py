"""Converters with dynamic (symbolic) shapes: each converter declared ``dynamic`` is exported with a
``torch.export.Dim``, converted once, and run by ONNX Runtime at the range's minimum, the example size, the
maximum and a random size, against eager PyTorch (``dynamic_harness.check_case``). Then SymInt arithmetic
inside an engine, the boundary rules for SymInts, the refusals a dynamic size still causes, the size
expressions rebuilt from inputs, the output check, and the two target models.
"""

from __future__ import annotations

import operator
import random
from collections.abc import Callable
from typing import Any

import onnx
import pytest
import torch
import torchvision
from torch.export import Dim

import trtcheck
from suites.conversion.converter_harness import Fn, bools, nonzero_int, positive, randint, randn, unit
from suites.conversion.dynamic_harness import (
    SYMINT_CASES,
    DynCase,
    check_case,
    convert_segment,
    eager,
    export,
    only_segment,
    run_segment,
    session,
)
from suites.conversion.family_cases import BLOCK_Q, BlockQuantizer, Q, Quantizer
from trtcheck import conversion as converters
from trtcheck.conversion import ConversionContext, ConversionError, segment_to_onnx
from trtcheck.conversion.context import value_info
from trtcheck.conversion.ops import _common
from trtcheck.conversion.registry import Snapshot
from trtcheck.lowering.graph import copy_graph_module
from trtcheck.partitioning.driver import partition_graph
from trtcheck.partitioning.reasons import ReasonKind, Target

A = torch.ops.aten
INT64_MAX = 2**63 - 1
CASES: list[DynCase] = []


def _row(axis: int = 0) -> Callable[[Any], tuple[Any, ...]]:
    return lambda d: ({axis: d},)


def _rows(count: int, axis: int = 0) -> Callable[[Any], tuple[Any, ...]]:
    return lambda d: tuple({axis: d} for _ in range(count))


def case(case_id: str, targets: Any, fn: Callable[..., Any], inputs: Callable[[int], tuple[Any, ...]],
         dims: Callable[[Any], tuple[Any, ...]] | None = None, **kw: Any) -> None:
    targets = targets if isinstance(targets, tuple) else (targets,)
    CASES.append(DynCase(case_id, targets, fn, inputs, dims or _row(), **kw))


def unary(case_id: str, target: Any, fn: Callable[..., Any], make: Callable[..., torch.Tensor] = randn) -> None:
    """``fn(x)`` on an (n, 3) tensor, n dynamic."""
    case(case_id, target, fn, lambda n: (make(n, 3),))


def binary(case_id: str, target: Any, fn: Callable[..., Any], make: Callable[..., torch.Tensor] = randn,
           other: Callable[..., torch.Tensor] | None = None) -> None:
    """``fn(x, y)`` on two (n, 3) tensors sharing the dynamic n."""
    other = other or make
    case(case_id, target, fn, lambda n: (make(n, 3), other(n, 3, seed=1)), _rows(2))


def _times4(*shape: int, seed: int = 0) -> torch.Tensor:
    return randn(*shape, seed=seed) * 4


def _small_ints(*shape: int, seed: int = 0) -> torch.Tensor:
    """Floats with repeated values, so that comparisons see equal operands too."""
    return randint(*shape, low=-2, high=3, seed=seed).float()


def _with_nan(*shape: int, seed: int = 0) -> torch.Tensor:
    x = randn(*shape, seed=seed)
    x[::2, 0] = float("nan")
    return x


# ---- elementwise ------------------------------------------------------------------------------------
_UNARY: list[tuple[Any, Callable[..., torch.Tensor]]] = [
    (A.abs.default, randn), (A.neg.default, randn), (A.sign.default, randn), (A.relu.default, randn),
    (A.sqrt.default, positive), (A.rsqrt.default, positive), (A.exp.default, randn), (A.log.default, positive),
    (A.log2.default, positive), (A.log10.default, positive), (A.log1p.default, positive), (A.expm1.default, randn),
    (A.reciprocal.default, positive), (A.sin.default, randn), (A.cos.default, randn), (A.tan.default, unit),
    (A.asin.default, unit), (A.acos.default, unit), (A.atan.default, randn), (A.sinh.default, randn),
    (A.cosh.default, randn), (A.asinh.default, randn), (A.acosh.default, lambda *s, seed=0: positive(*s, seed=seed) + 1),
    (A.atanh.default, unit), (A.tanh.default, randn), (A.sigmoid.default, randn), (A.erf.default, randn),
    (A.floor.default, _times4), (A.ceil.default, _times4), (A.round.default, _times4), (A.trunc.default, _times4),
    (A.isnan.default, _with_nan),
]
for _op, _make in _UNARY:
    unary(_op._opname, _op, _op, _make)

for _op, _make, _other in [
    (A.add.Tensor, randn, randn), (A.sub.Tensor, randn, randn), (A.mul.Tensor, randn, randn),
    (A.div.Tensor, randn, positive), (A.pow.Tensor_Tensor, positive, randn), (A.fmod.Tensor, randn, positive),
    (A.maximum.default, randn, randn), (A.minimum.default, randn, randn), (A.rsub.Tensor, randn, randn),
    (A.remainder.Tensor, _times4, positive), (A.floor_divide.default, nonzero_int, nonzero_int),
    (A.logical_and.default, bools, bools), (A.logical_or.default, bools, bools), (A.logical_xor.default, bools, bools),
    (A.bitwise_and.Tensor, bools, bools), (A.bitwise_or.Tensor, bools, bools), (A.bitwise_xor.Tensor, bools, bools),
]:
    binary(str(_op).removeprefix("aten."), _op, _op, _make, _other)
for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    _packet = getattr(A, _name)
    binary(f"{_name}.Tensor", _packet.Tensor, _packet.Tensor, _small_ints)
    unary(f"{_name}.Scalar", _packet.Scalar, lambda x, op=_packet.Scalar: op(x, 1.0), _small_ints)

binary("add.Tensor-alpha", A.add.Tensor, lambda x, y: A.add.Tensor(x, y, alpha=2))
unary("add.Scalar", A.add.Scalar, lambda x: A.add.Scalar(x, 2.5))
unary("sub.Scalar", A.sub.Scalar, lambda x: A.sub.Scalar(x, 2.5, alpha=3))
unary("mul.Scalar", A.mul.Scalar, lambda x: A.mul.Scalar(x, -1.5))
unary("div.Scalar", A.div.Scalar, lambda x: A.div.Scalar(x, 3.0))
unary("pow.Tensor_Scalar", A.pow.Tensor_Scalar, lambda x: A.pow.Tensor_Scalar(x, 3))
unary("pow.Scalar", A.pow.Scalar, lambda x: A.pow.Scalar(2.0, x))
unary("fmod.Scalar", A.fmod.Scalar, lambda x: A.fmod.Scalar(x, 0.7), _times4)
unary("rsub.Scalar", A.rsub.Scalar, lambda x: A.rsub.Scalar(x, 1.0, alpha=2))
unary("remainder.Scalar", A.remainder.Scalar, lambda x: A.remainder.Scalar(x, 0.7), _times4)
binary("div.Tensor_mode-floor", A.div.Tensor_mode, lambda x, y: A.div.Tensor_mode(x, y, rounding_mode="floor"),
       _times4, positive)
binary("div.Tensor_mode-trunc-int", A.div.Tensor_mode, lambda x, y: A.div.Tensor_mode(x, y, rounding_mode="trunc"),
       nonzero_int)
unary("div.Scalar_mode", A.div.Scalar_mode, lambda x: A.div.Scalar_mode(x, -2, rounding_mode="floor"), nonzero_int)
unary("logical_not", A.logical_not.default, A.logical_not.default, bools)
unary("bitwise_not", A.bitwise_not.default, A.bitwise_not.default, bools)
case("where.self", A.where.self, A.where.self, lambda n: (bools(n, 3), randn(n, 3, seed=1), randn(n, 3, seed=2)),
     _rows(3))
unary("clamp", A.clamp.default, lambda x: A.clamp.default(x, -0.5, 0.5))
case("clamp.Tensor", A.clamp.Tensor, A.clamp.Tensor, lambda n: (randn(n, 3), randn(n, 3, seed=1) - 1, randn(n, 3, seed=2) + 1),
     _rows(3))
unary("clamp_min", A.clamp_min.default, lambda x: A.clamp_min.default(x, 0.1))
unary("clamp_max", A.clamp_max.default, lambda x: A.clamp_max.default(x, 0.1))
unary("hardtanh", A.hardtanh.default, lambda x: A.hardtanh.default(x, -0.3, 0.4))
unary("_to_copy", A._to_copy.default, lambda x: A._to_copy.default(x, dtype=torch.int32), _times4)
# A SymInt operand of a tensor op: export writes mul.Tensor(x, sym_size_int), a 0-d int64 in ONNX.
unary("mul.Tensor-symint", (A.mul.Tensor, A.sym_size.int), lambda x: A.mul.Tensor(x, A.sym_size.int(x, 0)))
unary("lt.Scalar-symint", (A.lt.Scalar, A.sym_size.int), lambda x: A.lt.Scalar(x * 4, A.sym_size.int(x, 0)), _times4)

# ---- activations --------------------------------------------------------------------------------------
unary("gelu", A.gelu.default, A.gelu.default)
unary("gelu-tanh", A.gelu.default, lambda x: A.gelu.default(x, approximate="tanh"))
for _op, _call in [
    (A.silu.default, A.silu.default), (A.hardswish.default, A.hardswish.default),
    (A.hardsigmoid.default, A.hardsigmoid.default), (A.leaky_relu.default, lambda x: A.leaky_relu.default(x, 0.1)),
    (A.elu.default, lambda x: A.elu.default(x, 0.5)), (A.celu.default, lambda x: A.celu.default(x, 0.5)),
    (A.selu.default, A.selu.default), (A.softplus.default, A.softplus.default),
]:
    unary(_op._opname, _op, _call, _times4)
# Softmax over the dynamic dim itself.
unary("_softmax", A._softmax.default, lambda x: A._softmax.default(x, 0, False))
unary("softmax.int", A.softmax.int, lambda x: A.softmax.int(x, 1))
unary("_log_softmax", A._log_softmax.default, lambda x: A._log_softmax.default(x, 0, False))
unary("log_softmax.int", A.log_softmax.int, lambda x: A.log_softmax.int(x, -1))

# ---- matrix products, convolution -----------------------------------------------------------------------
_W = randn(4, 5, seed=7)
_B = randn(5, seed=8)
case("mm", A.mm.default, lambda x: A.mm.default(x, _W), lambda n: (randn(n, 4),))
case("addmm", A.addmm.default, lambda x: A.addmm.default(_B, x, _W, beta=0.5, alpha=2.0), lambda n: (randn(n, 4),))
case("bmm", A.bmm.default, lambda x, y: A.bmm.default(x, y), lambda n: (randn(2, n, 4), randn(2, 4, n, seed=1)),
     lambda d: ({1: d}, {2: d}))
case("matmul", A.matmul.default, lambda x: A.matmul.default(x, _W), lambda n: (randn(2, n, 4),), _row(1))
case("baddbmm", A.baddbmm.default, lambda b, x, y: A.baddbmm.default(b, x, y, beta=0.5),
     lambda n: (randn(2, n, n), randn(2, n, 4, seed=1), randn(2, 4, n, seed=2)), lambda d: ({1: d, 2: d}, {1: d}, {2: d}))
_WT = _W.t().contiguous()
case("linear", A.linear.default, lambda x: A.linear.default(x, _WT, _B), lambda n: (randn(2, n, 4),), _row(1))
_CONV_W = randn(4, 3, 3, 3, seed=3) * 0.3
_CONV_B = randn(4, seed=4)
case("convolution-batch", A.convolution.default,
     lambda x: A.convolution.default(x, _CONV_W, _CONV_B, [1, 1], [1, 1], [1, 1], False, [0, 0], 1),
     lambda n: (randn(n, 3, 8, 8),))
case("convolution-spatial-strided", A.convolution.default,
     lambda x: A.convolution.default(x, _CONV_W, None, [2, 2], [1, 1], [1, 1], False, [0, 0], 1),
     lambda n: (randn(2, 3, n, n + 1),), lambda d: ({2: d, 3: d + 1},), low=3)
case("convolution-transposed-spatial", A.convolution.default,
     lambda x: A.convolution.default(x, _CONV_W, None, [2, 2], [1, 1], [1, 1], True, [1, 1], 1),
     lambda n: (randn(2, 4, n, 5),), lambda d: ({2: d},))

# ---- normalizations ---------------------------------------------------------------------------------------
_LN_W, _LN_B = positive(8, seed=5), randn(8, seed=6)
case("native_layer_norm", (A.native_layer_norm.default, operator.getitem),
     lambda x: A.native_layer_norm.default(x, [8], _LN_W, _LN_B, 1e-5)[0], lambda n: (randn(2, n, 8),), _row(1))
_BN = (positive(3, seed=1), randn(3, seed=2), randn(3, seed=3), positive(3, seed=4))
case("_native_batch_norm_legit_no_training", A._native_batch_norm_legit_no_training.default,
     lambda x: A._native_batch_norm_legit_no_training.default(x, *_BN, 0.1, 1e-5)[0], lambda n: (randn(n, 3, 4, 4),))
case("native_batch_norm", A.native_batch_norm.default,
     lambda x: A.native_batch_norm.default(x, _BN[0], None, _BN[2], _BN[3], False, 0.1, 1e-5)[0],
     lambda n: (randn(2, 3, n, 4),), _row(2))

# ---- pooling: dynamic batch, and dynamic spatial sizes where the converter does not need them -----------
case("max_pool2d_with_indices-batch", A.max_pool2d_with_indices.default,
     lambda x: A.max_pool2d_with_indices.default(x, [2, 2], [2, 2])[0], lambda n: (randn(n, 3, 8, 8),))
case("max_pool2d_with_indices-spatial", A.max_pool2d_with_indices.default,
     lambda x: A.max_pool2d_with_indices.default(x, [3, 3], [2, 2], [1, 1])[0], lambda n: (randn(2, 3, n, n + 2),),
     lambda d: ({2: d, 3: d + 2},), low=3)
case("max_pool2d-ceil-static-spatial", A.max_pool2d.default,
     lambda x: A.max_pool2d.default(x, [3, 3], [2, 2], [0, 0], [1, 1], True), lambda n: (randn(n, 3, 8, 8),))
case("max_pool3d_with_indices", A.max_pool3d_with_indices.default,
     lambda x: A.max_pool3d_with_indices.default(x, [2, 2, 2], [2, 2, 2])[0], lambda n: (randn(2, 2, n, 4, 4),), _row(2),
     low=4)
case("max_pool3d", A.max_pool3d.default, lambda x: A.max_pool3d.default(x, [2, 2, 2]), lambda n: (randn(n, 2, 4, 4, 4),))
case("avg_pool2d-spatial", A.avg_pool2d.default, lambda x: A.avg_pool2d.default(x, [3, 3], [2, 2], [1, 1]),
     lambda n: (randn(2, 3, n, 6),), _row(2), low=3)
case("unfold", A.unfold.default, lambda x: A.unfold.default(x, 2, 3, 2), lambda n: (randn(n, 3, 8),))  # the batch dynamic
case("avg_pool2d-divisor-override-spatial", A.avg_pool2d.default,
     lambda x: A.avg_pool2d.default(x, [3, 3], [2, 2], [1, 1], False, False, 3), lambda n: (randn(2, 3, n, 6),), _row(2), low=3)
case("_upsample_bicubic2d_aa", A._upsample_bicubic2d_aa.default,  # the batch dynamic; the sizes make the matrices
     lambda x: A._upsample_bicubic2d_aa.default(x, [5, 7], False), lambda n: (randn(n, 3, 12, 9),))
case("_upsample_bilinear2d_aa", A._upsample_bilinear2d_aa.default,
     lambda x: A._upsample_bilinear2d_aa.default(x, [4, 6], False, 0.4, 0.7), lambda n: (randn(n, 2, 12, 9),))
case("avg_pool3d", A.avg_pool3d.default, lambda x: A.avg_pool3d.default(x, [2, 2, 2]), lambda n: (randn(n, 2, 4, 4, 4),))
case("_adaptive_avg_pool2d-global-spatial", A._adaptive_avg_pool2d.default,
     lambda x: A._adaptive_avg_pool2d.default(x, [1, 1]), lambda n: (randn(2, 3, n, n + 1),), lambda d: ({2: d, 3: d + 1},))
case("adaptive_avg_pool2d-unbatched", A.adaptive_avg_pool2d.default,
     lambda x: A.adaptive_avg_pool2d.default(x, [1, 1]), lambda n: (randn(3, n, 5),), _row(1))
case("_adaptive_avg_pool3d-static-spatial", A._adaptive_avg_pool3d.default,
     lambda x: A._adaptive_avg_pool3d.default(x, [2, 2, 2]), lambda n: (randn(n, 2, 4, 4, 4),))

# ---- reductions, over the dynamic dim ------------------------------------------------------------------------
for _op, _call in [
    (A.sum.dim_IntList, lambda x: A.sum.dim_IntList(x, [0])), (A.sum.default, A.sum.default),
    (A.mean.dim, lambda x: A.mean.dim(x, [0], True)), (A.mean.default, A.mean.default),
    (A.prod.dim_int, lambda x: A.prod.dim_int(x, 0)), (A.prod.default, lambda x: A.prod.default(x * 0.3 + 1)),
    (A.amax.default, lambda x: A.amax.default(x, [0])), (A.amin.default, lambda x: A.amin.default(x, [0, 1], True)),
    (A.logsumexp.default, lambda x: A.logsumexp.default(x, [0])), (A.argmax.default, A.argmax.default),
    (A.argmax.default, lambda x: A.argmax.default(x, 0)), (A.argmin.default, lambda x: A.argmin.default(x, 1, True)),
    (A.max.dim, lambda x: A.max.dim(x, 0)), (A.min.dim, lambda x: A.min.dim(x, 1)),
    (A.max.default, A.max.default), (A.min.default, A.min.default), (A.cumsum.default, lambda x: A.cumsum.default(x, 0)),
]:
    unary(f"{_op}-{len(CASES)}".removeprefix("aten."), _op, _call)
# An integer cumsum along a static dim (the shifted adds need its size) of a tensor with a dynamic one.
unary("cumsum-int-static-axis", A.cumsum.default, lambda x: A.cumsum.default(x, 1), randint)
for _op, _call in [
    (A.any.dim, lambda x: A.any.dim(x, 0)), (A.any.dims, lambda x: A.any.dims(x, [0, 1])), (A.any.default, A.any.default),
    (A.all.dim, lambda x: A.all.dim(x, 0, True)), (A.all.dims, lambda x: A.all.dims(x, [0])), (A.all.default, A.all.default),
]:
    unary(str(_op).removeprefix("aten."), _op, _call, bools)

# ---- views and layout ---------------------------------------------------------------------------------------
unary("view-minus-one", A.view.default, lambda x: A.view.default(x, [-1]))
unary("view-symint", (A.view.default, A.sym_size.int, operator.mul),
      lambda x: A.view.default(x, [A.sym_size.int(x, 0) * 3]))
unary("view-symint-and-minus-one", (A.view.default, A.sym_size.int), lambda x: A.view.default(x, [A.sym_size.int(x, 0), -1, 1]))
unary("_unsafe_view", A._unsafe_view.default, lambda x: A._unsafe_view.default(x, [1, A.sym_size.int(x, 0), -1]))
unary("view_copy", A.view_copy.default, lambda x: A.view_copy.default(x, [-1]))
unary("reshape", A.reshape.default, lambda x: A.reshape.default(x, [-1, 3, 1]))
case("squeeze.default", A.squeeze.default, A.squeeze.default, lambda n: (randn(n, 1, 3, 1),))
case("squeeze.dim", A.squeeze.dim, lambda x: A.squeeze.dim(x, -2), lambda n: (randn(n, 1, 3),))
case("squeeze.dims", A.squeeze.dims, lambda x: A.squeeze.dims(x, [1, 0]), lambda n: (randn(1, 1, n),), _row(2))
unary("unsqueeze", A.unsqueeze.default, lambda x: A.unsqueeze.default(x, -1))
case("flatten.using_ints", A.flatten.using_ints, lambda x: A.flatten.using_ints(x, 0, 1), lambda n: (randn(2, n, 3),),
     _row(1))
for _op, _call in [
    (A.clone.default, A.clone.default), (A.alias.default, A.alias.default), (A.detach.default, A.detach.default),
    (A.lift_fresh_copy.default, A.lift_fresh_copy.default), (A.dropout.default, lambda x: A.dropout.default(x, 0.5, False)),
    (A.permute.default, lambda x: A.permute.default(x, [1, 0])), (A.transpose.int, lambda x: A.transpose.int(x, 0, -1)),
    (A.t.default, A.t.default), (A.flip.default, lambda x: A.flip.default(x, [0, 1])),
    (A.constant_pad_nd.default, lambda x: A.constant_pad_nd.default(x, [1, 2, 0, 1], 0.5)),
]:
    unary(str(_op).removeprefix("aten."), _op, lambda x, f=_call: f(x) + 1)  # + 1: the output is no alias of the input
case("expand-minus-one", A.expand.default, lambda x: A.expand.default(x, [-1, 4]), lambda n: (randn(n, 1),))
case("expand-new-leading-dim", A.expand.default, lambda x: A.expand.default(x, [2, -1, -1]), lambda n: (randn(n, 3),))
case("expand-symint", (A.expand.default, A.sym_size.int), lambda x, y: A.expand.default(x, [A.sym_size.int(y, 0), -1]),
     lambda n: (randn(1, 3), randn(n, 2, seed=1)), lambda d: (None, {0: d}))
case("constant_pad_nd-crop-dynamic-dim", A.constant_pad_nd.default,
     lambda x: A.constant_pad_nd.default(x, [1, 0, -1, -1], 0.5) + 1, lambda n: (randn(n, 3),), low=4)  # crops the dynamic dim
case("_native_batch_norm_legit.no_stats", A._native_batch_norm_legit.no_stats,  # batch statistics over a dynamic batch
     lambda x: A._native_batch_norm_legit.no_stats(x, None, None, True, 0.1, 1e-5)[0], lambda n: (randn(n, 3, 4),))
binary("cat-dynamic-dim", A.cat.default, lambda x, y: A.cat.default([x, y * 2], 0))
binary("cat-static-dim", A.cat.default, lambda x, y: A.cat.default([x, y], 1))
binary("stack", A.stack.default, lambda x, y: A.stack.default([x, y], 1))
case("split.Tensor", (A.split.Tensor, operator.getitem), lambda x: A.split.Tensor(x, 2, 1), lambda n: (randn(n, 5),))
case("split_with_sizes", (A.split_with_sizes.default, operator.getitem),
     lambda x: A.split_with_sizes.default(x, [2, 4], 1), lambda n: (randn(n, 6),))
case("unbind", (A.unbind.int, operator.getitem), lambda x: A.unbind.int(x, 1), lambda n: (randn(n, 3),))
case("slice-to-end", A.slice.Tensor, lambda x: A.slice.Tensor(x, 0, 1, INT64_MAX), lambda n: (randn(n, 3),), low=3)
case("slice-negative-start-step", A.slice.Tensor, lambda x: A.slice.Tensor(x, 0, -5, None, 2), lambda n: (randn(n, 3),),
     low=5)
unary("slice-static-dim", A.slice.Tensor, lambda x: A.slice.Tensor(x, 1, -2))
case("slice-symint-end", (A.slice.Tensor, A.sym_size.int, operator.sub),
     lambda x: A.slice.Tensor(x, 0, 0, A.sym_size.int(x, 0) - 1), lambda n: (randn(n, 3),), low=3)
unary("select-negative-on-dynamic", A.select.int, lambda x: A.select.int(x, 0, -2))
unary("select-on-dynamic", A.select.int, lambda x: A.select.int(x, 0, 1))
unary("select-static-dim", A.select.int, lambda x: A.select.int(x, 1, -1))
binary("copy", A.copy.default, lambda x, y: A.copy.default(x, y * 2))
case("copy-broadcast", A.copy.default, lambda x, y: A.copy.default(x, y), lambda n: (randn(n, 3), randn(3, seed=1)),
     lambda d: ({0: d}, None))
case("pixel_shuffle", A.pixel_shuffle.default, lambda x: A.pixel_shuffle.default(x, 2), lambda n: (randn(n, 8, 3, 3),))

# ---- factories: sizes from SymInt nodes or the input's run-time shape ----------------------------------------
unary("full", A.full.default, lambda x: A.full.default([A.sym_size.int(x, 0), 2], 3.0))
unary("zeros", A.zeros.default, lambda x: A.zeros.default([2, A.sym_size.int(x, 0)]) + x.sum())
unary("ones", A.ones.default, lambda x: A.ones.default([A.sym_size.int(x, 0)], dtype=torch.int32))
for _op in (A.full_like.default, A.zeros_like.default, A.ones_like.default):
    unary(_op._opname, _op, (lambda x, op=_op: op(x, 2.0)) if _op._opname == "full_like" else _op)
unary("new_zeros", A.new_zeros.default, lambda x: A.new_zeros.default(x, [A.sym_size.int(x, 0), 2]))
unary("new_ones", A.new_ones.default, lambda x: A.new_ones.default(x, [A.sym_size.int(x, 0)]))
unary("new_full", A.new_full.default, lambda x: A.new_full.default(x, [1, A.sym_size.int(x, 0)], 7.0))
unary("scalar_tensor", A.scalar_tensor.default, lambda x: x + A.scalar_tensor.default(2.5))
unary("arange.default", A.arange.default, lambda x: A.arange.default(A.sym_size.int(x, 0)))
case("arange.start", A.arange.start, lambda x: A.arange.start(1, A.sym_size.int(x, 0), dtype=torch.float32),
     lambda n: (randn(n, 3),), low=3)
unary("arange.start_step", A.arange.start_step, lambda x: A.arange.start_step(0, A.sym_size.int(x, 0) * 3, 2))

# ---- gathers --------------------------------------------------------------------------------------------------
_INDEX = torch.tensor([2, 0, 2])
unary("index_select", A.index_select.default, lambda x: A.index_select.default(x, 1, _INDEX))
unary("quantize_op-int8", Q, Quantizer(torch.tensor(2.0), 8, 0), _times4)
case("dynamic_block_quantize_op-nvfp4", BLOCK_Q, BlockQuantizer(3.0), lambda n: (randn(n, 2, 32) * 2,))  # blocks: the last axis, static
case("embedding", A.embedding.default, lambda w, i: A.embedding.default(w, i),
     lambda n: (randn(10, 4), randint(2, n, low=0, high=10, seed=1)), lambda d: (None, {1: d}))
case("gather", A.gather.default, lambda x, i: A.gather.default(x, 1, i),
     lambda n: (randn(n, 3), randint(n, 2, low=0, high=3, seed=1)), _rows(2))
case("index.Tensor", A.index.Tensor, lambda x, i: A.index.Tensor(x, [None, i]),
     lambda n: (randn(n, 3), randint(n, low=-3, high=3, seed=1)), _rows(2))
# Several index tensors: a dynamic indexed dim (its size wraps the positions and merges the dims at run time),
# separated by a full slice (the index shape goes first).
case("index.Tensor-several-separated", A.index.Tensor, lambda x, i, j: A.index.Tensor(x, [i, None, j]),
     lambda n: (randn(n, 3, 4), randint(n, low=-2, high=2, seed=1), randint(n, low=-4, high=4, seed=2)), _rows(3))
# The attention-mask construction of Hugging Face models with a dynamic sequence length.
case("index.Tensor-hf-mask", A.index.Tensor, lambda m, b, s: A.index.Tensor(m, [b, s]),
     lambda n: (bools(2, n), torch.arange(2).view(2, 1, 1, 1), torch.arange(n).view(1, 1, 1, n)),
     lambda d: ({1: d}, None, {3: d}))

# ---- SymInt arithmetic: Python semantics (// floors, % takes the divisor's sign), in view/full sizes ---------
# The static case table's SymInt rows (dynamic_harness.SYMINT_CASES: n - 20 is negative over 2..16), across sizes.
for _id, _targets, _fn, _ in SYMINT_CASES:
    unary(_id, _targets, _fn)


@pytest.mark.parametrize("dyn", CASES, ids=[c.id for c in CASES])
def test_dynamic_converter(dyn: DynCase) -> None:
    check_case(dyn)


def test_every_dynamic_converter_has_a_dynamic_case() -> None:
    """A converter declared dynamic is run at several sizes here, or its declaration is untested."""
    dynamic = {t for t in converters.registered_targets() if getattr(converters.get(t).validator, "dynamic", False)}
    covered = {t for dyn in CASES for t in dyn.targets}
    assert len(dynamic) >= 150
    assert sorted(map(str, dynamic - covered)) == []


def test_ids_are_unique() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))


# ---- SymInts inside an engine, and across its boundary ---------------------------------------------------------
def _reshape_by_rows(x: torch.Tensor) -> torch.Tensor:
    """sym_size -> mul -> view: the shape arithmetic a dynamic graph does on its own."""
    return A.view.default(A.cos.default(x), [A.sym_size.int(x, 0) * 3, 1])


def _targets(nodes: list[torch.fx.Node]) -> set[Any]:
    return {n.target for n in nodes}


def test_symint_arithmetic_runs_inside_the_engine() -> None:
    gm = export(_reshape_by_rows, (randn(6, 3),), ({0: Dim("n", min=2, max=32)},))
    segment = only_segment(partition_graph(gm, trtcheck.Settings(min_block_size=1)))
    assert {A.sym_size.int, operator.mul, A.view.default} <= _targets(segment.nodes)
    model = convert_segment(gm, segment)
    ops = [node.op_type for node in model.graph.node]
    assert {"Shape", "Gather", "Mul", "Concat", "Reshape"} <= set(ops), ops
    sess = session(model)
    for n in (2, 7, 32):
        torch.testing.assert_close(run_segment(sess, gm, segment, (randn(n, 3),))[0], eager(_reshape_by_rows, (randn(n, 3),))[0])


def test_onnx_interface_names_the_dynamic_dims() -> None:
    """Inputs and outputs carry each dynamic size as a dim_param named after its symbol (2*s0 for 2*s0)."""
    gm = export(lambda x: A.cat.default([x, x], 0), (randn(6, 3),), ({0: Dim("n", min=2, max=32)},))
    model = segment_to_onnx(gm)
    symbol = str(next(n for n in gm.graph.nodes if n.op == "placeholder").meta["val"].shape[0])
    dims = [[d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in (*model.graph.input, *model.graph.output)]
    assert dims == [[symbol, 3], [f"2*{symbol}", 3]]
    onnx.checker.check_model(model, full_check=True)


def _partition_with(fn: Callable[..., Any], refused: Callable[[torch.fx.Node], bool]):
    gm = export(fn, (randn(6, 3),), ({0: Dim("n", min=2, max=32)},))
    support = lambda node: not refused(node) and converters.is_convertible(node)  # noqa: E731
    return gm, partition_graph(gm, trtcheck.Settings(min_block_size=1), support)


def test_symint_read_by_torch_is_recomputed_in_torch() -> None:
    """TensorRT producer, Torch consumer: a size computation (sym_size, mul) is copied into the Torch segment,
    like the copy rule between engines, instead of moving its producer and every other reader to Torch."""
    gm, partition = _partition_with(_reshape_by_rows, lambda node: node.target == A.view.default)
    view = next(n for n in gm.graph.nodes if n.target == A.view.default)
    torch_segment = partition.segment_of(view)
    assert torch_segment.target is Target.TORCH
    for target in (operator.mul, A.sym_size.int):
        (node,) = [n for n in gm.graph.nodes if n.target == target]  # the original, read by Torch only, is gone
        assert node in torch_segment.nodes
        assert partition.reasons[node].detail.startswith("copy of "), partition.reasons[node]
    assert partition.target_of(next(n for n in gm.graph.nodes if n.target == A.cos.default)) is Target.TENSORRT
    assert trtcheck.check_invariants(partition) == []


def _rows_for_both(x: torch.Tensor) -> torch.Tensor:
    rows = A.sym_size.int(x, 0) * 3
    a = A.view.default(A.cos.default(x), [rows, 1])  # an engine reads rows
    b = A.view.default(A.sin.default(x), [1, rows])  # so does a Torch view (refused by the test's support)
    return A.add.Tensor(a, A.permute.default(b, [1, 0]))


def test_symint_read_by_an_engine_and_by_torch_stays_in_the_engine() -> None:
    """The size computation stays in TensorRT for the engine's view and gets a Torch copy for the Torch view: the
    engine keeps its view (moving the producer to Torch would move every TensorRT reader with it)."""
    second_view = lambda node: node.target == A.view.default and node.args[1][0] == 1  # noqa: E731
    gm, partition = _partition_with(_rows_for_both, second_view)
    engine_view = next(n for n in gm.graph.nodes if n.target == A.view.default and not second_view(n))
    assert partition.target_of(engine_view) is Target.TENSORRT
    sizes = [n for n in gm.graph.nodes if n.target == A.sym_size.int]
    assert sorted(partition.target_of(n).value for n in sizes) == ["tensorrt", "torch"]
    assert trtcheck.check_invariants(partition) == []
    compiled = trtcheck.compile(Fn(_rows_for_both), (randn(6, 3),), trtcheck.Settings(min_block_size=1), lowered=gm,
                                support=lambda node: not second_view(node) and converters.is_convertible(node))
    for n in (2, 9, 32):
        x = randn(n, 3)
        torch.testing.assert_close(compiled.graph_module(x), _rows_for_both(x))


def test_symint_made_by_torch_moves_its_tensorrt_reader_to_torch() -> None:
    """Torch producer, TensorRT consumer: the consumer falls back (an engine takes no SymInt input)."""
    gm, partition = _partition_with(_reshape_by_rows, lambda node: node.target is operator.mul)
    view = next(n for n in gm.graph.nodes if n.target == A.view.default)
    assert partition.target_of(view) is Target.TORCH
    assert partition.reasons[view].kind is ReasonKind.NON_TENSOR_BOUNDARY
    assert "SymInt" in partition.reasons[view].detail


def _two_engines(x: torch.Tensor) -> torch.Tensor:
    rows = A.sym_size.int(x, 0) * 3
    y = A.sin.default(A.view.default(x, [rows]))  # engine 1 (sin is kept in Torch by the test's support)
    return A.view.default(A.cos.default(y), [rows, 1])  # engine 2 reads rows: a copy of its producers


def test_symint_shared_by_two_engines_is_recomputed_in_each() -> None:
    """TensorRT -> TensorRT: the second engine gets its own copy of sym_size and mul, and both engines,
    converted once, compute every size in range."""
    not_sin = lambda node: node.target != A.sin.default and converters.is_convertible(node)  # noqa: E731
    gm = export(_two_engines, (randn(6, 3),), ({0: Dim("n", min=2, max=32)},))
    partition = partition_graph(copy_graph_module(gm), trtcheck.Settings(min_block_size=1), not_sin)
    engines = partition.segments_of(Target.TENSORRT)
    assert len(engines) == 2
    for segment in engines:
        assert {A.sym_size.int, operator.mul} <= _targets(segment.nodes), segment.nodes
        assert all(isinstance(v.meta["val"], torch.Tensor) for v in (*segment.inputs, *segment.outputs))
    compiled = trtcheck.compile(Fn(_two_engines), (randn(6, 3),), trtcheck.Settings(min_block_size=1), lowered=gm,
                                support=not_sin)
    assert len(compiled.partition.segments_of(Target.TENSORRT)) == 2 and not compiled.partition.fallbacks
    for n in (2, 9, 32):
        torch.testing.assert_close(compiled.graph_module(randn(n, 3)), _two_engines(randn(n, 3)))


# ---- what stays refused, and says why ---------------------------------------------------------------------------
def _reason(fn: Callable[..., Any], inputs: tuple[Any, ...], dims: tuple[Any, ...], target: Any) -> str:
    gm = export(fn, inputs, dims)
    partition = partition_graph(gm, trtcheck.Settings(min_block_size=1))
    node = next(n for n in gm.graph.nodes if n.target == target)
    assert partition.target_of(node) is Target.TORCH
    return partition.reasons[node].detail


_N = Dim("n", min=4, max=32)


def test_a_converter_not_declared_dynamic_refuses_as_before() -> None:
    reason = _reason(lambda x: A.var.correction(x, [0]), (randn(6, 3),), ({0: _N},), A.var.correction)
    assert "has the dynamic shape" in reason and "converters need static shapes" in reason


def test_a_size_whose_range_holds_zero_is_refused() -> None:
    """No converter takes an empty tensor: a dim export lets be 0 is refused, though export traced it assuming
    sizes of at least 2 (the ranges it recorded decide, not its shape environment)."""
    for low, accepted in ((0, False), (1, True)):
        gm = export(lambda x: A.relu.default(x), (randn(6, 3),), ({0: Dim("n", min=low, max=32)},), decompose=True)
        relu = next(n for n in gm.graph.nodes if n.target == A.relu.default)
        judged = converters.get(A.relu.default).judge(relu)
        verdict, _, reason = judged.accepted, judged.error, judged.reason
        assert verdict is accepted, reason
        assert accepted or "may be empty: a size of [s" in reason


def test_max_pool_ceil_mode_refuses_a_dynamic_spatial_size() -> None:
    odd = 2 * Dim("half", min=3, max=16) - 1  # what export needs to keep ceil_mode's size dynamic
    reason = _reason(lambda x: A.max_pool2d.default(x, [3, 3], [2, 2], [0, 0], [1, 1], True), (randn(1, 2, 9, 9),),
                     ({2: odd},), A.max_pool2d.default)
    assert "self has the dynamic size" in reason and "at dim 2" in reason and "ceil_mode=True" in reason


def test_adaptive_pool_to_more_than_one_refuses_a_dynamic_spatial_size() -> None:
    reason = _reason(lambda x: A._adaptive_avg_pool2d.default(x, [2, 2]), (randn(1, 2, 8, 8),),
                     ({3: _N},), A._adaptive_avg_pool2d.default)
    assert "at dim 3" in reason and "output_size [2, 2]" in reason


def test_split_along_a_dynamic_dim_refuses() -> None:
    even = 2 * Dim("half", min=2, max=16)  # a split into halves: two pieces, whatever the size
    reason = _reason(lambda x: A.split.Tensor(x, A.sym_size.int(x, 0) // 2, 0)[1] * 2, (randn(6, 3),), ({0: even},),
                     A.split.Tensor)
    assert "self has the dynamic size" in reason and "at dim 0" in reason


def test_symfloat_stays_in_torch() -> None:
    """``x * (n / 2)``: the SymFloat has no converter, and the tensor op's own converter refuses it by name
    (not only the boundary rule: a SymFloat has no int64 form)."""
    fn = lambda x: A.mul.Tensor(x, A.sym_size.int(x, 0) / 2)  # noqa: E731
    assert "SymFloat" in _reason(fn, (randn(6, 3),), ({0: _N},), A.mul.Tensor)
    mul = next(n for n in export(fn, (randn(6, 3),), ({0: _N},)).graph.nodes if n.target == A.mul.Tensor)
    judged = converters.get(A.mul.Tensor).judge(mul)
    accepted, _, reason = judged.accepted, judged.error, judged.reason
    assert not accepted and "is a SymFloat" in reason
    assert converters.get(operator.truediv) is None


# ---- sizes rebuilt from the segment's inputs ---------------------------------------------------------------------
def _size_model(ctx: ConversionContext, names: list[str], placeholder: torch.fx.Node) -> onnx.ModelProto:
    outputs = [onnx.helper.make_tensor_value_info(f"size_{i}", onnx.TensorProto.INT64, []) for i in range(len(names))]
    nodes = [*ctx.nodes, *(onnx.helper.make_node("Identity", [n], [o.name]) for n, o in zip(names, outputs))]
    graph = onnx.helper.make_graph(nodes, "sizes", [value_info(placeholder.name, placeholder.meta["val"])], outputs,
                                   ctx.initializers)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def test_size_expressions_follow_python_integer_semantics() -> None:
    """Symbols come from the input's dims (here 2*s + 1: s = (dim - 1) / 2); // floors, % takes the divisor's
    sign, for negative numerators too."""
    gm = export(lambda x: A.cos.default(x), (randn(7, 3),), ({0: 2 * Dim("half", min=1, max=20) + 1},))
    placeholder = next(n for n in gm.graph.nodes if n.op == "placeholder")
    dim = placeholder.meta["val"].shape[0]
    s = (dim - 1) // 2
    expressions = [s, s * 3 + 2, (s - 9) // 4, (s - 9) % 4, torch.sym_max(s, 5), torch.sym_min(s, 5) - s, (9 - s) // s]
    python = [lambda v: v, lambda v: v * 3 + 2, lambda v: (v - 9) // 4, lambda v: (v - 9) % 4, lambda v: max(v, 5),
              lambda v: min(v, 5) - v, lambda v: (9 - v) // v]
    ctx = ConversionContext(gm)
    ctx.bind(placeholder, placeholder.name)
    sess = session(_size_model(ctx, [ctx.size_expr(e) for e in expressions], placeholder))
    for v in (1, 2, 5, 13, 20):
        got = sess.run(None, {placeholder.name: randn(2 * v + 1, 3).numpy()})
        assert [int(g) for g in got] == [f(v) for f in python], v


def test_a_symbol_no_input_has_is_a_conversion_error() -> None:
    gm = export(lambda x, y: A.cos.default(x) + A.sum.default(y), (randn(6, 3), randn(5)),
                ({0: Dim("a", min=2, max=9)}, {0: Dim("b", min=2, max=9)}))
    x, y = (n for n in gm.graph.nodes if n.op == "placeholder")
    graph = torch.fx.Graph()
    only_x = graph.placeholder(x.name)
    only_x.meta = dict(x.meta)
    graph.output(only_x)
    ctx = ConversionContext(torch.fx.GraphModule(torch.nn.Module(), graph))
    ctx.bind(only_x, x.name)
    ctx.size_expr(x.meta["val"].shape[0] + 1)
    with pytest.raises(ConversionError, match=r"is no dimension of this segment's inputs"):
        ctx.size_expr(y.meta["val"].shape[0] * 2)


# ---- the output check: a dynamic dim must not come out static ------------------------------------------------------
def _with_relu_converter(body: Callable[[Any, Any], str]):
    gm = export(lambda x: A.relu.default(x), (randn(6, 3),), ({0: Dim("n", min=2, max=32)},))
    with Snapshot():
        converters.unregister(A.relu.default)
        _common.converter(A.relu.default, dtypes=_common.FLOAT, dynamic=True)(body)
        with pytest.raises(ConversionError, match="the graph's metadata says") as error:
            segment_to_onnx(gm)
    return str(error.value)


def test_output_check_catches_the_example_size_baked_in() -> None:
    message = _with_relu_converter(lambda ctx, args: ctx.add("Reshape", [ctx.name(args.self), _common.ints(ctx, [6, 3])]))
    assert "[6, 3]" in message


def test_output_check_still_catches_a_wrong_static_dim() -> None:
    message = _with_relu_converter(
        lambda ctx, args: ctx.add("Slice", [ctx.name(args.self), *(_common.ints(ctx, [v]) for v in (0, 2, 1))]))
    assert ", 2] float32, the graph's metadata says" in message and ", 3] float32" in message


# ---- the target models -------------------------------------------------------------------------------------------------
def _coverage(partition) -> tuple[int, int, int]:
    """(nodes in TensorRT segments, compute nodes, segments)."""
    in_trt = sum(len(s.nodes) for s in partition.segments_of(Target.TENSORRT))
    return in_trt, len(partition.compute_nodes), len(partition.segments)


@pytest.fixture(scope="module")
def transformer() -> tuple[torch.nn.Module, torch.Tensor, Any]:
    torch.manual_seed(0)
    model = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True).eval()
    return model, torch.randn(2, 16, 64), ({1: Dim("seq", min=2, max=128)},)


_SEQS = [2, 16, 128, *random.Random(0).sample(range(3, 128), 2)]


@pytest.mark.parametrize("min_block_size", [1, 5])
@pytest.mark.slow
def test_transformer_layer_with_dynamic_sequence_stays_in_engines(transformer, min_block_size: int) -> None:
    """At least 80% of the compute nodes in TensorRT (measured: 74 of 74, one segment, at both settings); each
    segment, converted once, uses only what TensorRT parses, and the compiled module (its engines run by ONNX
    Runtime here) matches eager at sizes across the range."""
    model, example, dims = transformer
    gm = trtcheck.lower(model, (example,), dynamic_shapes=dims)
    settings = trtcheck.Settings(min_block_size=min_block_size)
    partition = partition_graph(copy_graph_module(gm), settings)
    in_trt, compute, _ = _coverage(partition)
    assert in_trt >= 0.8 * compute, partition.explain()
    for segment in partition.segments_of(Target.TENSORRT):
        convert_segment(partition.graph_module, segment)
    compiled = trtcheck.compile(model, (example,), settings, lowered=gm)
    assert not compiled.partition.fallbacks
    for seq in _SEQS:
        x = torch.randn(2, seq, 64)
        got = torch.utils._pytree.tree_leaves(compiled.graph_module(x))[0]
        torch.testing.assert_close(got, eager(model, (x,))[0], rtol=1e-4, atol=1e-4, msg=lambda m, seq=seq: f"seq {seq}: {m}")


@pytest.mark.slow
def test_resnet18_with_dynamic_batch_is_one_engine() -> None:
    torch.manual_seed(0)
    model = torchvision.models.resnet18().eval()
    gm = trtcheck.lower(model, (torch.randn(2, 3, 224, 224),), dynamic_shapes=({0: Dim("batch", min=1, max=32)},))
    partition = partition_graph(gm, trtcheck.Settings())
    segment = only_segment(partition)
    assert len(partition.compute_nodes) == len(segment.nodes)  # the one engine holds every compute node
    sess = session(convert_segment(gm, segment))
    for batch in (1, 7, 32):
        x = torch.randn(batch, 3, 224, 224)
        torch.testing.assert_close(run_segment(sess, gm, segment, (x,))[0], eager(model, (x,))[0], rtol=1e-3, atol=1e-3)


def test_unfold_and_a_ceil_mode_average_pool_refuse_a_dynamic_size_they_need() -> None:
    reason = _reason(lambda x: A.unfold.default(x, 1, 3, 2), (randn(2, 8),), ({1: Dim("m", min=6, max=32)},), A.unfold.default)
    assert "at dim 1" in reason and "windows" in reason
    reason = _reason(lambda x: A.avg_pool2d.default(x, [3, 3], [2, 2], [0, 0], True), (randn(1, 2, 8, 8),),
                     ({2: 2 * Dim("h", min=3, max=16)},), A.avg_pool2d.default)
    assert "at dim 2" in reason and "ceil_mode" in reason


def test_an_antialiased_resize_refuses_a_dynamic_spatial_size_and_a_width_of_one() -> None:
    reason = _reason(lambda x: A._upsample_bilinear2d_aa.default(x, [3, 4], False), (randn(1, 2, 8, 8),),
                     ({2: _N},), A._upsample_bilinear2d_aa.default)
    assert "at dim 2" in reason and "resampling matrices" in reason
    gm = export(lambda x: A._upsample_bicubic2d_aa.default(x, [5, 1], False), (randn(1, 2, 8, 8),), None)
    partition = partition_graph(gm, trtcheck.Settings(min_block_size=1))
    node = next(n for n in gm.graph.nodes if n.target == A._upsample_bicubic2d_aa.default)
    assert partition.target_of(node) is Target.TORCH and "width of 1" in partition.reasons[node].detail
