"""The table of converter cases: (ATen overload(s), function, inputs) run through ONNX Runtime.

Every function calls ATen overloads directly (``torch.ops.aten.x.overload``) so the exported graph
contains exactly the overload under test; ``Case.targets`` lists what must be in the graph.
Every case passes at torch.testing's default tolerances for its output dtype (fp32: rtol 1.3e-6,
atol 1e-5; fp16: rtol 1e-3, atol 1e-5); ``Case.rtol/atol`` exist for a future case that needs looser
ones, which must then say why. (Whole-model tests in test_zoo_models.py are looser, see there.)
Each case builds its own model and ONNX Runtime session once (inputs have static shapes, so there is
nothing to share between cases).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from suites.conversion.converter_harness import bools, nonzero_int, positive, randint, randn, unit

A = torch.ops.aten
F16 = torch.float16
I32 = torch.int32


@dataclass(frozen=True)
class Case:
    id: str
    targets: tuple[Any, ...]
    fn: Callable[..., Any]
    inputs: Callable[[], tuple[Any, ...]]
    decompose: bool = False
    rtol: float | None = None
    atol: float | None = None


CASES: list[Case] = []


def case(case_id: str, targets: Any, fn: Callable[..., Any], inputs: Callable[[], tuple[Any, ...]], **kw: Any
         ) -> None:
    targets = targets if isinstance(targets, tuple) else (targets,)
    CASES.append(Case(case_id, targets, fn, inputs, **kw))


# ---- unary elementwise -----------------------------------------------------------------------------
# (overload, float input factory, int input factory or None, float16 too?)
_UNARY = [
    (A.abs.default, randn, randint, True),
    (A.neg.default, randn, randint, True),
    (A.sign.default, randn, randint, False),
    (A.relu.default, randn, None, True),
    (A.sqrt.default, positive, lambda *s: randint(*s, low=0, high=50), True),
    (A.rsqrt.default, positive, lambda *s: randint(*s, low=1, high=50), False),
    (A.exp.default, randn, randint, False),
    (A.log.default, positive, lambda *s: randint(*s, low=1, high=50), False),
    (A.log2.default, positive, None, False),
    (A.log10.default, positive, None, False),
    (A.log1p.default, positive, None, False),
    (A.expm1.default, randn, None, False),
    (A.reciprocal.default, positive, None, True),
    (A.sin.default, randn, randint, False),
    (A.cos.default, randn, None, False),
    (A.tan.default, unit, None, False),
    (A.asin.default, unit, None, False),
    (A.acos.default, unit, None, False),
    (A.atan.default, randn, None, False),
    (A.sinh.default, randn, None, False),
    (A.cosh.default, randn, None, False),
    (A.asinh.default, randn, None, False),
    (A.acosh.default, lambda *s: positive(*s) + 1, None, False),
    (A.atanh.default, unit, None, False),
    (A.tanh.default, randn, randint, True),
    (A.sigmoid.default, randn, randint, True),
    (A.erf.default, randn, None, False),
    (A.floor.default, lambda *s: randn(*s) * 4, None, False),
    (A.ceil.default, lambda *s: randn(*s) * 4, None, False),
    (A.round.default, lambda *s: torch.tensor([0.5, 1.5, 2.5, -0.5, -2.5, 0.49, 3.7, -3.7]).reshape(*s), None, False),
    (A.trunc.default, lambda *s: randn(*s) * 4, None, False),
    (A.isnan.default, lambda *s: randn(*s).masked_fill(bools(*s), float("nan")), None, False),
    (A.logical_not.default, randn, bools, False),
]

for _op, _make, _make_int, _half in _UNARY:
    _name = str(_op).removeprefix("aten.")
    _shape = (2, 4) if _op != A.round.default else (2, 4)
    case(f"{_name}-f32", _op, lambda x, _op=_op: _op(x), lambda _m=_make, _s=_shape: (_m(*_s),))
    case(f"{_name}-f32-4d", _op, lambda x, _op=_op: _op(x), lambda _m=_make: (_m(2, 4).reshape(1, 2, 2, 2),))
    if _make_int is not None:
        case(f"{_name}-int", _op, lambda x, _op=_op: _op(x), lambda _m=_make_int: (_m(3, 5),))
    if _half:
        case(f"{_name}-f16", _op, lambda x, _op=_op: _op(x), lambda _m=_make: (_m(3, 5).half(),))
case("bitwise_not-bool", A.bitwise_not.default, A.bitwise_not.default, lambda: (bools(3, 4),))
case("abs-i32", A.abs.default, A.abs.default, lambda: (randint(3, 4, dtype=I32),))

# ---- binary arithmetic -----------------------------------------------------------------------------
_BINARY = [A.add.Tensor, A.sub.Tensor, A.mul.Tensor, A.div.Tensor, A.maximum.default, A.minimum.default]
for _op in _BINARY:
    _name = str(_op).removeprefix("aten.")
    case(f"{_name}-f32-broadcast", _op, _op, lambda: (randn(2, 3, 4), positive(3, 1, seed=1)))
    case(f"{_name}-i64", _op, _op, lambda: (randint(3, 4), nonzero_int(3, 4, seed=1)))
    case(f"{_name}-f32-i64-promote", _op, _op, lambda: (randn(3, 4), nonzero_int(4, seed=1)))
    case(f"{_name}-f16", _op, _op, lambda: (randn(3, 4, dtype=F16), positive(3, 4, dtype=F16, seed=1)))
    case(f"{_name}-scalar-first", _op, lambda x, _op=_op: _op(2.5, x) if _op not in
         (A.maximum.default, A.minimum.default) else _op(x, x * 2), lambda: (positive(2, 3),))
for _op in (A.add.Tensor, A.sub.Tensor, A.mul.Tensor, A.div.Tensor):
    _name = str(_op).removeprefix("aten.")
    case(f"{_name}-int-tensor-float-scalar", _op, lambda x, _op=_op: _op(x, 1.5), lambda: (randint(3, 4),))
    case(f"{_name}-0dim", _op, _op, lambda: (randn(3, 4, dtype=F16), positive(seed=2)))
case("add.Tensor-alpha", A.add.Tensor, lambda x, y: A.add.Tensor(x, y, alpha=2.5), lambda: (randn(3), randn(3)))
case("sub.Tensor-alpha-int", A.sub.Tensor, lambda x, y: A.sub.Tensor(x, y, alpha=3),
     lambda: (randint(3), randint(3, seed=1)))
case("add.Scalar", A.add.Scalar, lambda x: A.add.Scalar(x, 2), lambda: (randn(2, 3),))
case("add.Scalar-int", A.add.Scalar, lambda x: A.add.Scalar(x, 2), lambda: (randint(2, 3, dtype=I32),))
case("sub.Scalar", A.sub.Scalar, lambda x: A.sub.Scalar(x, 0.5), lambda: (randn(2, 3),))
case("mul.Scalar", A.mul.Scalar, lambda x: A.mul.Scalar(x, -3), lambda: (randn(2, 3),))
case("mul.Scalar-bool", A.mul.Scalar, lambda x: A.mul.Scalar(x, 2), lambda: (bools(2, 3),))
case("div.Scalar", A.div.Scalar, lambda x: A.div.Scalar(x, 4), lambda: (randn(2, 3),))
case("div.Scalar-int", A.div.Scalar, lambda x: A.div.Scalar(x, 4), lambda: (randint(2, 3),))
case("rsub.Scalar", A.rsub.Scalar, lambda x: A.rsub.Scalar(x, 1.0), lambda: (randn(2, 3),))
case("rsub.Tensor", A.rsub.Tensor, lambda x, y: A.rsub.Tensor(x, y, alpha=2), lambda: (randn(2, 3), randn(3)))
for _mode in ("trunc", "floor"):
    case(f"div.Tensor_mode-{_mode}-f32", A.div.Tensor_mode,
         lambda x, y, m=_mode: A.div.Tensor_mode(x, y, rounding_mode=m), lambda: (randn(4, 5) * 5, randn(5, seed=1)))
    case(f"div.Tensor_mode-{_mode}-int", A.div.Tensor_mode,
         lambda x, y, m=_mode: A.div.Tensor_mode(x, y, rounding_mode=m), lambda: (randint(4, 5) * 3, nonzero_int(4, 5)))
    case(f"div.Scalar_mode-{_mode}", A.div.Scalar_mode,
         lambda x, m=_mode: A.div.Scalar_mode(x, -3, rounding_mode=m), lambda: (randint(4, 5) * 3,))
case("div.Tensor_mode-none", A.div.Tensor_mode, lambda x, y: A.div.Tensor_mode(x, y, rounding_mode=None),
     lambda: (randn(4, 5), positive(5)))
case("floor_divide-int", A.floor_divide.default, A.floor_divide.default, lambda: (randint(4, 5) * 3, nonzero_int(4, 5)))
case("floor_divide-f32", A.floor_divide.default, A.floor_divide.default, lambda: (randn(4, 5) * 5, positive(4, 5)))
case("remainder.Tensor-int", A.remainder.Tensor, A.remainder.Tensor, lambda: (randint(4, 5) * 3, nonzero_int(4, 5)))
case("remainder.Tensor-f32", A.remainder.Tensor, A.remainder.Tensor, lambda: (randn(4, 5) * 5, randn(4, 5, seed=1) + 4))
case("remainder.Scalar", A.remainder.Scalar, lambda x: A.remainder.Scalar(x, -4), lambda: (randint(4, 5),))
case("fmod.Tensor-int", A.fmod.Tensor, A.fmod.Tensor, lambda: (randint(4, 5) * 3, nonzero_int(4, 5)))
case("fmod.Tensor-f32", A.fmod.Tensor, A.fmod.Tensor, lambda: (randn(4, 5) * 5, positive(4, 5)))
case("fmod.Scalar", A.fmod.Scalar, lambda x: A.fmod.Scalar(x, 56), lambda: (randint(8, low=0, high=200),))
case("pow.Tensor_Tensor", A.pow.Tensor_Tensor, A.pow.Tensor_Tensor, lambda: (positive(3, 4), randn(3, 4)))
case("pow.Tensor_Scalar", A.pow.Tensor_Scalar, lambda x: A.pow.Tensor_Scalar(x, 2), lambda: (randn(3, 4),))
case("pow.Tensor_Scalar-half", A.pow.Tensor_Scalar, lambda x: A.pow.Tensor_Scalar(x, 0.5), lambda: (positive(3, 4),))
case("pow.Tensor_Scalar-int", A.pow.Tensor_Scalar, lambda x: A.pow.Tensor_Scalar(x, 3), lambda: (randint(3, 4),))
case("pow.Scalar", A.pow.Scalar, lambda x: A.pow.Scalar(2.0, x), lambda: (randn(3, 4),))

# ---- comparisons and logic -------------------------------------------------------------------------
for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    _tensor, _scalar = getattr(A, _name).Tensor, getattr(A, _name).Scalar
    case(f"{_name}.Tensor-f32", _tensor, _tensor,
         lambda: (randint(3, 4, low=-2, high=2).float(), randint(4, low=-2, high=2, seed=1).float()))
    case(f"{_name}.Tensor-int-float", _tensor, _tensor, lambda: (randint(3, 4, low=-2, high=2), randn(4).round()))
    case(f"{_name}.Scalar-f32", _scalar, lambda x, _s=_scalar: _s(x, 0.0),
         lambda: (randint(3, 4, low=-2, high=2).float(),))
    case(f"{_name}.Scalar-int", _scalar, lambda x, _s=_scalar: _s(x, 1),
         lambda: (randint(3, 4, low=-2, high=3, dtype=I32),))
    case(f"{_name}.Scalar-int-float-scalar", _scalar, lambda x, _s=_scalar: _s(x, 0.5),
         lambda: (randint(3, 4, low=-2, high=3),))
case("eq.Tensor-bool", A.eq.Tensor, A.eq.Tensor, lambda: (bools(3, 4), bools(3, 4, seed=1)))
case("eq.Scalar-neg-inf", A.eq.Scalar, lambda x: A.eq.Scalar(x, -math.inf),
     lambda: (randn(3, 4).masked_fill(bools(3, 4), -math.inf),))
for _op in (A.logical_and.default, A.logical_or.default, A.logical_xor.default):
    _name = str(_op).removeprefix("aten.")
    case(f"{_name}-bool", _op, _op, lambda: (bools(3, 4), bools(4, seed=1)))
    case(f"{_name}-f32", _op, _op,
         lambda: (randint(3, 4, low=-1, high=2).float(), randint(3, 4, low=0, high=2, seed=1)))
for _op in (A.bitwise_and.Tensor, A.bitwise_or.Tensor, A.bitwise_xor.Tensor):
    case(f"{str(_op).removeprefix('aten.')}-bool", _op, _op, lambda: (bools(3, 4), bools(3, 4, seed=1)))

# ---- where / clamp / casts --------------------------------------------------------------------------
case("where.self", A.where.self, A.where.self, lambda: (bools(3, 4), randn(3, 4), randn(4, seed=1)))
case("where.self-promote", A.where.self, A.where.self, lambda: (bools(3, 4), randint(3, 4), randn(1, seed=1)))
case("where.self-0dim", A.where.self, lambda c, y: A.where.self(c, A.scalar_tensor.default(-100.0), y),
     lambda: (bools(2, 5), randn(2, 5)))
case("clamp-both", A.clamp.default, lambda x: A.clamp.default(x, -0.5, 0.5), lambda: (randn(3, 4),))
case("clamp-min", A.clamp.default, lambda x: A.clamp.default(x, 0), lambda: (randn(3, 4),))
case("clamp-max", A.clamp.default, lambda x: A.clamp.default(x, None, 6), lambda: (randn(3, 4) * 10,))
case("clamp-int", A.clamp.default, lambda x: A.clamp.default(x, -3, 4), lambda: (randint(3, 4),))
case("clamp-int-float-bounds", A.clamp.default, lambda x: A.clamp.default(x, -3.5, 4.5), lambda: (randint(3, 4),))
case("clamp-f16", A.clamp.default, lambda x: A.clamp.default(x, -0.5, 0.5), lambda: (randn(3, 4, dtype=F16),))
case("clamp.Tensor", A.clamp.Tensor, A.clamp.Tensor,
     lambda: (randn(3, 4), randn(4, seed=1) - 1, randn(3, 1, seed=2) + 1))
case("clamp_min", A.clamp_min.default, lambda x: A.clamp_min.default(x, 0.25), lambda: (randn(3, 4),))
case("clamp_max", A.clamp_max.default, lambda x: A.clamp_max.default(x, 2), lambda: (randint(3, 4),))
case("hardtanh", A.hardtanh.default, A.hardtanh.default, lambda: (randn(3, 4) * 2,))
case("hardtanh-relu6", A.hardtanh.default, lambda x: A.hardtanh.default(x, 0.0, 6.0), lambda: (randn(3, 4) * 5,))
for _src, _dst in ((torch.float32, torch.float16), (torch.float32, torch.int32), (torch.int64, torch.float32),
                   (torch.bool, torch.float32), (torch.float32, torch.bool), (torch.int64, torch.int32)):
    case(f"_to_copy-{_src}-{_dst}", A._to_copy.default, lambda x, d=_dst: A._to_copy.default(x, dtype=d),
         lambda s=_src: ((randn(3, 4) * 3).to(s),))

# ---- activations -----------------------------------------------------------------------------------
case("gelu-none", A.gelu.default, A.gelu.default, lambda: (randn(2, 3, 4) * 2,))
case("gelu-tanh", A.gelu.default, lambda x: A.gelu.default(x, approximate="tanh"), lambda: (randn(2, 3, 4) * 2,))
case("gelu-f16", A.gelu.default, A.gelu.default, lambda: (randn(2, 3, 4, dtype=F16),))
case("silu", A.silu.default, A.silu.default, lambda: (randn(2, 3, 4) * 3,))
case("hardswish", A.hardswish.default, A.hardswish.default, lambda: (randn(2, 3, 4) * 4,))
case("hardsigmoid", A.hardsigmoid.default, A.hardsigmoid.default, lambda: (randn(2, 3, 4) * 4,))
case("leaky_relu", A.leaky_relu.default, A.leaky_relu.default, lambda: (randn(2, 3, 4),))
case("leaky_relu-slope", A.leaky_relu.default, lambda x: A.leaky_relu.default(x, 0.2), lambda: (randn(2, 3, 4),))
case("elu", A.elu.default, lambda x: A.elu.default(x, 0.7), lambda: (randn(2, 3, 4),))
case("celu", A.celu.default, lambda x: A.celu.default(x, 1.5), lambda: (randn(2, 3, 4),))
case("selu", A.selu.default, A.selu.default, lambda: (randn(2, 3, 4),))
case("softplus", A.softplus.default, A.softplus.default, lambda: (randn(2, 3, 4) * 10,))
case("prelu", A._prelu_kernel.default, A._prelu_kernel.default, lambda: (randn(2, 3, 4, 4), randn(3, 1, 1, seed=1)))
case("prelu-single", A._prelu_kernel.default, A._prelu_kernel.default, lambda: (randn(2, 3, 4), randn(1, seed=1)))
for _op in (A._softmax.default, A._log_softmax.default):
    _name = str(_op).removeprefix("aten.")
    case(f"{_name}-last", _op, lambda x, _op=_op: _op(x, -1, False), lambda: (randn(2, 3, 5) * 3,))
    case(f"{_name}-mid", _op, lambda x, _op=_op: _op(x, 1, False), lambda: (randn(2, 3, 5) * 3,))
    case(f"{_name}-f16", _op, lambda x, _op=_op: _op(x, 0, False), lambda: (randn(4, 3, dtype=F16),))
case("softmax.int", A.softmax.int, lambda x: A.softmax.int(x, 1), lambda: (randn(2, 3, 5),))
case("log_softmax.int", A.log_softmax.int, lambda x: A.log_softmax.int(x, -1), lambda: (randn(2, 3, 5),))

# ---- shapes ------------------------------------------------------------------------------------------
case("view", A.view.default, lambda x: A.view.default(x, [3, -1]), lambda: (randn(2, 3, 4),))
case("view-bool", A.view.default, lambda x: A.view.default(x, [-1]), lambda: (bools(2, 3),))
case("_unsafe_view", A._unsafe_view.default, lambda x: A._unsafe_view.default(x, [4, 6]), lambda: (randn(2, 3, 4),))
case("reshape", A.reshape.default, lambda x: A.reshape.default(x, [2, 12]), lambda: (randint(2, 3, 4),))
case("view_copy", A.view_copy.default, lambda x: A.view_copy.default(x, [24]), lambda: (randn(2, 3, 4),))
case("squeeze.dims", A.squeeze.dims, lambda x: A.squeeze.dims(x, [-2, 0]), lambda: (randn(1, 3, 1, 4),))
case("squeeze.dims-not-one", A.squeeze.dims, lambda x: A.squeeze.dims(x, [1, 2]), lambda: (randn(1, 3, 1, 4),))
case("squeeze.dim", A.squeeze.dim, lambda x: A.squeeze.dim(x, 2), lambda: (randn(1, 3, 1, 4),))
case("squeeze.default", A.squeeze.default, A.squeeze.default, lambda: (randn(1, 3, 1, 4),))
case("unsqueeze", A.unsqueeze.default, lambda x: A.unsqueeze.default(x, -1), lambda: (randn(3, 4),))
case("unsqueeze-0dim", A.unsqueeze.default, lambda x: A.unsqueeze.default(x, 0), lambda: (randn(),))
case("flatten", A.flatten.using_ints, lambda x: A.flatten.using_ints(x, 1, 2), lambda: (randn(2, 3, 4, 5),))
case("permute", A.permute.default, lambda x: A.permute.default(x, [2, 0, -1, 1]), lambda: (randn(2, 3, 4, 5),))
case("transpose", A.transpose.int, lambda x: A.transpose.int(x, 0, -1), lambda: (randint(2, 3, 4),))
case("t", A.t.default, A.t.default, lambda: (randn(3, 4),))
case("expand", A.expand.default, lambda x: A.expand.default(x, [2, -1, 4]), lambda: (randn(1, 3, 1),))
case("expand-new-dims", A.expand.default, lambda x: A.expand.default(x, [5, 3, 4]), lambda: (bools(3, 1),))
case("cat", A.cat.default, lambda x, y: A.cat.default([x, y, x], -1), lambda: (randn(2, 3), randn(2, 1, seed=1)))
case("cat-promote", A.cat.default, lambda x, y: A.cat.default([x, y]), lambda: (randint(2, 3), randn(1, 3)))
case("stack", A.stack.default, lambda x, y: A.stack.default([x, y], 1), lambda: (randn(2, 3), randn(2, 3, seed=1)))
case("split.Tensor", A.split.Tensor, lambda x: A.split.Tensor(x, 2, 1), lambda: (randn(2, 5, 3),))
case("split_with_sizes", A.split_with_sizes.default, lambda x: A.split_with_sizes.default(x, [1, 3, 1], -1),
     lambda: (randn(2, 5),))
case("split_with_sizes-getitem", (A.split_with_sizes.default, operator.getitem),
     lambda x: A.split_with_sizes.default(x, [2, 3], 0)[1] * 2, lambda: (randn(5, 2),))
case("unbind", A.unbind.int, lambda x: A.unbind.int(x, 1), lambda: (randn(2, 3, 4),))
case("slice", A.slice.Tensor, lambda x: A.slice.Tensor(x, 1, 1, -1), lambda: (randn(2, 6, 3),))
case("slice-step", A.slice.Tensor, lambda x: A.slice.Tensor(x, 0, -5, 100, 2), lambda: (randn(7, 2),))
case("slice-default-end", A.slice.Tensor, lambda x: A.slice.Tensor(x, -1, 2), lambda: (randint(2, 6),))
case("select", A.select.int, lambda x: A.select.int(x, 1, -1), lambda: (randn(2, 3, 4),))
case("select-first", A.select.int, lambda x: A.select.int(x, 0, 0), lambda: (randn(3, 4),))
case("clone", A.clone.default, lambda x: A.clone.default(x, memory_format=torch.contiguous_format),
     lambda: (randn(2, 3),))
case("alias", A.alias.default, lambda x: A.alias.default(x) + 1, lambda: (randn(2, 3),))
case("detach", A.detach.default, A.detach.default, lambda: (randn(2, 3),))
case("lift_fresh_copy", A.lift_fresh_copy.default, A.lift_fresh_copy.default, lambda: (randn(2, 3),))
case("dropout-eval", A.dropout.default, lambda x: A.dropout.default(x, 0.5, False), lambda: (randn(2, 3),))
case("constant_pad_nd", A.constant_pad_nd.default, lambda x: A.constant_pad_nd.default(x, [1, 2, 0, 3], 1.5),
     lambda: (randn(2, 3, 4),))
case("constant_pad_nd-zero", A.constant_pad_nd.default, lambda x: A.constant_pad_nd.default(x, [0, 0, 0, 0]),
     lambda: (randn(2, 3, 4),))
case("constant_pad_nd-int", A.constant_pad_nd.default, lambda x: A.constant_pad_nd.default(x, [2, 1], 7),
     lambda: (randint(2, 3),))
case("constant_pad_nd-crop", A.constant_pad_nd.default, lambda x: A.constant_pad_nd.default(x, [0, -1, -2, 1], 0.5),
     lambda: (randn(2, 5, 6),))  # a negative pad crops: the end of the last dim, the start of the one before
case("constant_pad_nd-crop-only", A.constant_pad_nd.default, lambda x: A.constant_pad_nd.default(x, [-1, -1, -1, -1]),
     lambda: (randn(1, 3, 4, 4),))
case("copy", A.copy.default, A.copy.default, lambda: (randn(3, 4), randint(4)))
case("copy-0dim", A.copy.default, A.copy.default, lambda: (randn(3, 4), randn()))
case("slice_scatter", A.slice_scatter.default, lambda x, s: A.slice_scatter.default(x, s, 1, 0, -7),
     lambda: (randn(4, 10), randn(4, 3, seed=1)))
case("slice_scatter-step", A.slice_scatter.default, lambda x, s: A.slice_scatter.default(x, s, 0, 1, None, 2),
     lambda: (randn(7, 3), randn(3, 3, seed=1)))
case("select_scatter", A.select_scatter.default, lambda x, s: A.select_scatter.default(x, s, 1, -2),
     lambda: (randn(2, 5, 3), randn(2, 3, seed=1)))
case("as_strided-identity", A.as_strided.default,
     lambda x: A.as_strided.default(x, [1, 8, 1, 1], [8, 1, 8, 8]), lambda: (randn(1, 8, 1, 1),))
case("as_strided-windows", A.as_strided.default,
     lambda x: A.as_strided.default(x, [3, 4], [2, 1], 1), lambda: (randn(10),))
case("repeat", A.repeat.default, lambda x: A.repeat.default(x, [2, 1, 3]), lambda: (randn(2, 3),))
case("flip", A.flip.default, lambda x: A.flip.default(x, [0, -1]), lambda: (randn(2, 3, 4),))
case("pixel_shuffle", A.pixel_shuffle.default, lambda x: A.pixel_shuffle.default(x, 2), lambda: (randn(1, 8, 3, 2),))

# ---- indexing ---------------------------------------------------------------------------------------
case("index_select", A.index_select.default, lambda x, i: A.index_select.default(x, 1, i),
     lambda: (randn(2, 5, 3), randint(7, low=0, high=5)))
case("index_select-i32", A.index_select.default, lambda x, i: A.index_select.default(x, 0, i),
     lambda: (randn(5, 3), randint(2, low=0, high=5, dtype=I32)))
case("gather", A.gather.default, lambda x, i: A.gather.default(x, 1, i),
     lambda: (randn(3, 5), randint(3, 4, low=0, high=5)))
case("index.Tensor", A.index.Tensor, lambda x, i: A.index.Tensor(x, [i]),
     lambda: (randn(6, 3), randint(4, 2, low=-6, high=6)))
case("index.Tensor-second-dim", A.index.Tensor, lambda x, i: A.index.Tensor(x, [None, i]),
     lambda: (randn(2, 6, 3), randint(5, low=0, high=6)))
case("index.Tensor-two-broadcast", A.index.Tensor, lambda x, i, j: A.index.Tensor(x, [i, j]),
     lambda: (randn(4, 5, 3), randint(3, 1, low=-4, high=4), randint(2, low=-5, high=5, dtype=I32)))
case("index.Tensor-separated", A.index.Tensor, lambda x, i, j: A.index.Tensor(x, [None, i, None, j]),
     lambda: (randn(2, 4, 3, 5), randint(2, low=-4, high=4), randint(2, low=0, high=5)))

# ---- factories --------------------------------------------------------------------------------------
case("full", A.full.default, lambda x: x + A.full.default([2, 3], 1.5, dtype=torch.float32), lambda: (randn(2, 3),))
case("full-int", A.full.default, lambda x: x * A.full.default([3], 2, dtype=torch.int64), lambda: (randint(2, 3),))
case("full_like", A.full_like.default, lambda x: A.full_like.default(x, 7), lambda: (randn(2, 3),))
case("zeros", A.zeros.default, lambda x: x + A.zeros.default([3], dtype=torch.float32), lambda: (randn(2, 3),))
case("ones", A.ones.default, lambda x: x + A.ones.default([3], dtype=torch.int32), lambda: (randint(2, 3, dtype=I32),))
case("zeros_like", A.zeros_like.default, A.zeros_like.default, lambda: (randn(2, 3),))
case("ones_like", A.ones_like.default, lambda x: A.ones_like.default(x, dtype=torch.bool), lambda: (randn(2, 3),))
case("new_zeros", A.new_zeros.default, lambda x: A.new_zeros.default(x, [4]), lambda: (randn(2, 3),))
case("new_ones", A.new_ones.default, lambda x: A.new_ones.default(x, [2, 2]), lambda: (randint(2, 3),))
case("new_full", A.new_full.default, lambda x: A.new_full.default(x, [2, 2], -3.0), lambda: (randn(2, 3),))
case("scalar_tensor", A.scalar_tensor.default, lambda x: x * A.scalar_tensor.default(-100.0, dtype=torch.float32),
     lambda: (randn(2, 3),))
case("arange.default", A.arange.default, lambda x: x + A.arange.default(3), lambda: (randint(2, 3),))
case("arange.start", A.arange.start, lambda x: x + A.arange.start(2, 5), lambda: (randint(2, 3),))
case("arange.start_step", A.arange.start_step, lambda x: x * A.arange.start_step(0.5, 2.0, 0.5), lambda: (randn(2, 3),))

# ---- normalization ----------------------------------------------------------------------------------
case("native_layer_norm", (A.native_layer_norm.default, operator.getitem),
     lambda x, w, b: A.native_layer_norm.default(x, [4], w, b, 1e-5)[0],
          lambda: (randn(2, 3, 4) * 3, randn(4), randn(4)))
case("native_layer_norm-2d-noaffine", A.native_layer_norm.default,
     lambda x: A.native_layer_norm.default(x, [3, 4], None, None, 1e-6)[0], lambda: (randn(2, 3, 4) * 3,))
case("batch_norm-no-training", A._native_batch_norm_legit_no_training.default,
     lambda x, w, b, m, v: A._native_batch_norm_legit_no_training.default(x, w, b, m, v, 0.1, 1e-5)[0],
     lambda: (randn(2, 3, 4, 4), randn(3), randn(3), randn(3), positive(3)))
case("batch_norm-1d-noaffine", A._native_batch_norm_legit_no_training.default,
     lambda x, m, v: A._native_batch_norm_legit_no_training.default(x, None, None, m, v, 0.1, 1e-3)[0],
     lambda: (randn(2, 3, 5), randn(3), positive(3)))
case("native_batch_norm-eval", A.native_batch_norm.default,
     lambda x, w, b, m, v: A.native_batch_norm.default(x, w, b, m, v, False, 0.1, 1e-5)[0],
     lambda: (randn(2, 3, 4, 4), randn(3), randn(3), randn(3), positive(3)))
case("native_group_norm", A.native_group_norm.default,
     lambda x, w, b: A.native_group_norm.default(x, w, b, 2, 6, 20, 3, 1e-5)[0],
     lambda: (randn(2, 6, 4, 5) * 2, randn(6), randn(6)))
case("native_group_norm-noaffine", A.native_group_norm.default,
     lambda x: A.native_group_norm.default(x, None, None, 1, 4, 3, 2, 1e-5)[0], lambda: (randn(1, 4, 3),))

# ---- pooling ----------------------------------------------------------------------------------------
case("max_pool2d_with_indices", A.max_pool2d_with_indices.default,
     lambda x: A.max_pool2d_with_indices.default(x, [3, 3], [2, 2])[0], lambda: (randn(1, 2, 9, 8),))
case("max_pool2d_with_indices-pad", A.max_pool2d_with_indices.default,
     lambda x: A.max_pool2d_with_indices.default(x, [3, 3], [2, 2], [1, 1])[0], lambda: (randn(1, 2, 8, 7),))
case("max_pool2d_with_indices-ceil", A.max_pool2d_with_indices.default,
     lambda x: A.max_pool2d_with_indices.default(x, [3, 3], [2, 2], [0, 0], [1, 1], True)[0],
          lambda: (randn(1, 2, 8, 10),))
case("max_pool2d_with_indices-ceil-pad", A.max_pool2d_with_indices.default,
     lambda x: A.max_pool2d_with_indices.default(x, [2, 2], [2, 2], [1, 1], [1, 1], True)[0],
          lambda: (randn(1, 2, 6, 7),))
case("max_pool2d", A.max_pool2d.default, lambda x: A.max_pool2d.default(x, [2, 2]), lambda: (randn(1, 2, 6, 7),))
case("max_pool3d", A.max_pool3d.default, lambda x: A.max_pool3d.default(x, [2, 2, 2], [2, 1, 2], [1, 0, 1]),
     lambda: (randn(1, 2, 4, 5, 6),))
case("max_pool3d_with_indices", A.max_pool3d_with_indices.default,
     lambda x: A.max_pool3d_with_indices.default(x, [2, 2, 2], [1, 2, 2])[0], lambda: (randn(1, 2, 4, 5, 6),))
case("avg_pool2d", A.avg_pool2d.default, lambda x: A.avg_pool2d.default(x, [3, 3], [1, 1], [1, 1]),
     lambda: (randn(1, 2, 7, 6),))
case("avg_pool2d-exclude-pad", A.avg_pool2d.default,
     lambda x: A.avg_pool2d.default(x, [3, 3], [2, 2], [1, 1], False, False), lambda: (randn(1, 2, 7, 6),))
case("avg_pool2d-stride-default", A.avg_pool2d.default, lambda x: A.avg_pool2d.default(x, [2, 2]),
     lambda: (randn(2, 3, 6, 4),))
case("avg_pool3d", A.avg_pool3d.default, lambda x: A.avg_pool3d.default(x, [2, 2, 2]), lambda: (randn(1, 2, 4, 4, 6),))
case("unfold", A.unfold.default, lambda x: A.unfold.default(x, 2, 3, 2), lambda: (randn(2, 3, 8, 5),))  # halonet's
case("unfold-last-dim-overlapping", A.unfold.default, lambda x: A.unfold.default(x, -1, 4, 1), lambda: (randn(3, 7),))
case("unfold-first-dim-step-past-size", A.unfold.default, lambda x: A.unfold.default(x, 0, 2, 5), lambda: (randn(11, 3),))
case("unfold-int", A.unfold.default, lambda x: A.unfold.default(x, 1, 2, 2), lambda: (randint(2, 6, 3),))
case("unfold-one-dim-whole", A.unfold.default, lambda x: A.unfold.default(x, 0, 5, 1), lambda: (randn(5,),))
case("_upsample_bicubic2d_aa-down", A._upsample_bicubic2d_aa.default,  # timm's naflexvit: F.interpolate(antialias=True)
     lambda x: A._upsample_bicubic2d_aa.default(x, [5, 7], False), lambda: (randn(2, 3, 12, 9),))
case("_upsample_bicubic2d_aa-up-align-corners", A._upsample_bicubic2d_aa.default,
     lambda x: A._upsample_bicubic2d_aa.default(x, [9, 4], True), lambda: (randn(1, 2, 6, 8),))
case("_upsample_bicubic2d_aa-scales", A._upsample_bicubic2d_aa.default,
     lambda x: A._upsample_bicubic2d_aa.default(x, [4, 6], False, 0.4, 0.7), lambda: (randn(1, 2, 12, 9),))
case("_upsample_bilinear2d_aa-scales", A._upsample_bilinear2d_aa.default,
     lambda x: A._upsample_bilinear2d_aa.default(x, [4, 6], False, 0.4, 0.7), lambda: (randn(1, 2, 12, 9),))
case("_upsample_bilinear2d_aa-to-one-align-corners", A._upsample_bilinear2d_aa.default,
     lambda x: A._upsample_bilinear2d_aa.default(x, [1, 3], True), lambda: (randn(2, 2, 7, 10),))
case("_upsample_bicubic2d_aa-from-one-row", A._upsample_bicubic2d_aa.default,
     lambda x: A._upsample_bicubic2d_aa.default(x, [3, 4], False), lambda: (randn(1, 2, 1, 9),))
case("pow.Tensor_Tensor-int-negative-exponents", A.pow.Tensor_Tensor,  # ATen: 1 for 1, +-1 for -1, else 0 (0 too)
     lambda x, y: A.pow.Tensor_Tensor(x, y),
     lambda: (torch.tensor([0, 1, -1, -1, 2, -3, 0, 5]), torch.tensor([-9, -4, -3, -2, -1, -5, 3, 2])))
case("pow.Scalar-int-negative-exponents", A.pow.Scalar, lambda y: A.pow.Scalar(-1, y),  # (eager refuses a Scalar one)
     lambda: (torch.tensor([[-3, -2, 0], [4, -7, 1]]),))
case("avg_pool2d-ceil", A.avg_pool2d.default,  # timm's resnet10t: a last window PyTorch keeps, divided by what it covers
     lambda x: A.avg_pool2d.default(x, [3, 3], [2, 2], [0, 0], True), lambda: (randn(1, 2, 8, 10),))
case("avg_pool2d-ceil-pad-include", A.avg_pool2d.default,
     lambda x: A.avg_pool2d.default(x, [3, 2], [2, 2], [1, 1], True, True), lambda: (randn(2, 3, 6, 7),))
case("avg_pool2d-ceil-pad-exclude", A.avg_pool2d.default,
     lambda x: A.avg_pool2d.default(x, [3, 2], [2, 2], [1, 1], True, False), lambda: (randn(2, 3, 6, 7),))
case("avg_pool2d-ceil-same-size", A.avg_pool2d.default,  # ceil_mode that changes nothing
     lambda x: A.avg_pool2d.default(x, [2, 2], [2, 2], [0, 0], True), lambda: (randn(1, 2, 6, 4),))
case("avg_pool2d-divisor-override", A.avg_pool2d.default,
     lambda x: A.avg_pool2d.default(x, [3, 3], [2, 2], [1, 1], False, True, 2), lambda: (randn(1, 3, 9, 9),))
case("avg_pool2d-divisor-override-ceil-negative", A.avg_pool2d.default,
     lambda x: A.avg_pool2d.default(x, [4, 4], [2, 3], [1, 1], True, False, -2), lambda: (randn(1, 3, 9, 9),))
case("avg_pool3d-ceil-pad-exclude", A.avg_pool3d.default,
     lambda x: A.avg_pool3d.default(x, [2, 3, 2], [2, 2, 3], [1, 1, 0], True, False), lambda: (randn(1, 2, 5, 6, 7),))
case("_adaptive_avg_pool3d-not-a-multiple", A._adaptive_avg_pool3d.default,
     lambda x: A._adaptive_avg_pool3d.default(x, [2, 3, 4]), lambda: (randn(2, 3, 5, 7, 6),))
case("_adaptive_avg_pool3d-unbatched-larger-output", A._adaptive_avg_pool3d.default,
     lambda x: A._adaptive_avg_pool3d.default(x, [3, 4, 2]), lambda: (randn(3, 2, 3, 5),))
case("_native_batch_norm_legit.no_stats", A._native_batch_norm_legit.no_stats,  # F.batch_norm on batch statistics
     lambda x, w, b: A._native_batch_norm_legit.no_stats(x, w, b, True, 0.3, 1e-3)[0], lambda: (randn(3, 4, 5, 2), randn(4), randn(4)))
case("_native_batch_norm_legit.no_stats-no-affine-2d", A._native_batch_norm_legit.no_stats,
     lambda x: A._native_batch_norm_legit.no_stats(x, None, None, True, 0.1, 1e-5)[0], lambda: (randn(6, 3),))
case("_adaptive_avg_pool2d-identity", A._adaptive_avg_pool2d.default,
     lambda x: A._adaptive_avg_pool2d.default(x, [6, 6]), lambda: (randn(1, 3, 6, 6),))
case("_adaptive_avg_pool2d-global", A._adaptive_avg_pool2d.default,
     lambda x: A._adaptive_avg_pool2d.default(x, [1, 1]), lambda: (randn(1, 3, 6, 5),))
case("_adaptive_avg_pool2d-divisible", A._adaptive_avg_pool2d.default,
     lambda x: A._adaptive_avg_pool2d.default(x, [2, 3]), lambda: (randn(1, 3, 6, 6),))
case("adaptive_avg_pool2d", A.adaptive_avg_pool2d.default,
     lambda x: A.adaptive_avg_pool2d.default(x, [2, 2]), lambda: (randn(1, 3, 4, 4),))
case("_adaptive_avg_pool2d-not-a-multiple", A._adaptive_avg_pool2d.default,  # overlapping windows: alexnet's, vgg's
     lambda x: A._adaptive_avg_pool2d.default(x, [3, 5]), lambda: (randn(2, 3, 7, 11),))
case("_adaptive_avg_pool2d-larger-output", A._adaptive_avg_pool2d.default,  # a 5x5 map to vgg's 7x7
     lambda x: A._adaptive_avg_pool2d.default(x, [7, 7]), lambda: (randn(1, 4, 5, 5),))
case("_adaptive_avg_pool2d-unbatched-not-a-multiple", A._adaptive_avg_pool2d.default,
     lambda x: A._adaptive_avg_pool2d.default(x, [4, 3]), lambda: (randn(3, 6, 7),))
case("_adaptive_avg_pool3d", A._adaptive_avg_pool3d.default,
     lambda x: A._adaptive_avg_pool3d.default(x, [1, 2, 1]), lambda: (randn(1, 3, 2, 4, 3),))

# ---- convolution / matmul ---------------------------------------------------------------------------
_CONV = A.convolution.default
case("conv2d", _CONV, lambda x, w, b: _CONV(x, w, b, [1, 1], [1, 1], [1, 1], False, [0, 0], 1),
     lambda: (randn(1, 4, 6, 6), randn(8, 4, 3, 3), randn(8)))
case("conv2d-strided-grouped-dilated-nobias", _CONV,
     lambda x, w: _CONV(x, w, None, [2, 1], [0, 2], [1, 2], False, [0, 0], 2),
     lambda: (randn(2, 4, 7, 7), randn(6, 2, 3, 3)))
case("conv1d", _CONV, lambda x, w, b: _CONV(x, w, b, [1], [2], [1], False, [0], 1),
     lambda: (randn(2, 3, 9), randn(5, 3, 3), randn(5)))
case("conv3d", _CONV, lambda x, w: _CONV(x, w, None, [1, 1, 1], [1, 1, 1], [1, 1, 1], False, [0, 0, 0], 1),
     lambda: (randn(1, 2, 4, 4, 4), randn(3, 2, 3, 3, 3)))
case("conv_transpose2d", _CONV, lambda x, w, b: _CONV(x, w, b, [2, 2], [1, 1], [1, 1], True, [1, 1], 1),
     lambda: (randn(1, 4, 5, 5), randn(4, 3, 3, 3), randn(3)))
case("mm", A.mm.default, A.mm.default, lambda: (randn(3, 5), randn(5, 4)))
case("bmm", A.bmm.default, A.bmm.default, lambda: (randn(2, 3, 5), randn(2, 5, 4)))
case("matmul-broadcast", A.matmul.default, A.matmul.default, lambda: (randn(2, 3, 5), randn(5)))
case("addmm", A.addmm.default, A.addmm.default, lambda: (randn(4), randn(3, 5), randn(5, 4)))
case("addmm-alpha-beta", A.addmm.default, lambda b, x, y: A.addmm.default(b, x, y, beta=0.5, alpha=2),
     lambda: (randn(3, 4), randn(3, 5), randn(5, 4)))
case("baddbmm", A.baddbmm.default, lambda b, x, y: A.baddbmm.default(b, x, y, beta=0.5, alpha=2),
     lambda: (randn(2, 3, 4), randn(2, 3, 5), randn(2, 5, 4)))
case("linear", A.linear.default, A.linear.default, lambda: (randn(2, 3, 5), randn(4, 5), randn(4)))
case("linear-nobias", A.linear.default, A.linear.default, lambda: (randn(3, 5), randn(4, 5)))
case("mm-f16", A.mm.default, A.mm.default, lambda: (randn(3, 5, dtype=F16), randn(5, 4, dtype=F16)))

# ---- reductions -------------------------------------------------------------------------------------
case("sum.dim_IntList", A.sum.dim_IntList, lambda x: A.sum.dim_IntList(x, [0, -1]), lambda: (randn(2, 3, 4),))
case("sum.dim_IntList-keepdim-int32", A.sum.dim_IntList, lambda x: A.sum.dim_IntList(x, [1], True),
     lambda: (randint(2, 3, 4, dtype=I32),))
case("sum.dim_IntList-bool", A.sum.dim_IntList, lambda x: A.sum.dim_IntList(x, [1]), lambda: (bools(2, 3),))
case("sum.default", A.sum.default, A.sum.default, lambda: (randn(2, 3, 4),))
case("mean.dim", A.mean.dim, lambda x: A.mean.dim(x, [-1, -2], True), lambda: (randn(1, 4, 3, 3),))
case("mean.dim-nokeep", A.mean.dim, lambda x: A.mean.dim(x, [2, 3]), lambda: (randn(2, 4, 3, 3),))
case("mean.default", A.mean.default, A.mean.default, lambda: (randn(2, 3),))
case("prod.dim_int", A.prod.dim_int, lambda x: A.prod.dim_int(x, 1), lambda: (positive(2, 3),))
case("prod.default-int", A.prod.default, A.prod.default, lambda: (randint(2, 3, low=1, high=4),))
case("amax", A.amax.default, lambda x: A.amax.default(x, [1], True), lambda: (randn(2, 3, 4),))
case("amax-all", A.amax.default, A.amax.default, lambda: (randint(2, 3),))
case("amin", A.amin.default, lambda x: A.amin.default(x, [0, 2]), lambda: (randn(2, 3, 4),))
case("logsumexp", A.logsumexp.default, lambda x: A.logsumexp.default(x, [1]), lambda: (randn(2, 3, 4),))
case("max.dim", A.max.dim, lambda x: A.max.dim(x, 1), lambda: (randn(2, 5, 3),))
case("min.dim-keepdim", A.min.dim, lambda x: A.min.dim(x, -1, True), lambda: (randn(2, 5, 3),))
case("max.default", A.max.default, A.max.default, lambda: (randn(2, 5),))
case("min.default-int", A.min.default, A.min.default, lambda: (randint(2, 5),))
case("argmax", A.argmax.default, lambda x: A.argmax.default(x, 1), lambda: (randn(2, 5, 3),))
case("argmax-flat", A.argmax.default, A.argmax.default, lambda: (randn(2, 5, 3),))
case("argmax-flat-keepdim", A.argmax.default, lambda x: A.argmax.default(x, None, True), lambda: (randn(2, 5),))
case("argmin", A.argmin.default, lambda x: A.argmin.default(x, 0, True), lambda: (randint(4, 3, low=-100, high=100),))
case("any.dim", A.any.dim, lambda x: A.any.dim(x, -1, True), lambda: (bools(2, 3, 4),))
case("any.dim-float", A.any.dim, lambda x: A.any.dim(x, 0), lambda: (randint(3, 4, low=0, high=2).float(),))
case("any.dims", A.any.dims, lambda x: A.any.dims(x, [0, 1]), lambda: (bools(2, 3, 4),))
case("any.default", A.any.default, A.any.default, lambda: (bools(2, 3),))
case("all.dim", A.all.dim, lambda x: A.all.dim(x, 1), lambda: (torch.rand(3, 4) > 0.2,))
case("all.dims", A.all.dims, lambda x: A.all.dims(x, [1]), lambda: (torch.rand(3, 4) > 0.2,))
case("all.default", A.all.default, A.all.default, lambda: (torch.ones(3, 4, dtype=torch.bool),))
case("var.correction", A.var.correction, lambda x: A.var.correction(x, [1], correction=1, keepdim=True),
     lambda: (randn(2, 5, 3),))
case("var.correction-population", A.var.correction, lambda x: A.var.correction(x, [0, 2], correction=0),
     lambda: (randn(2, 5, 3),))
case("cumsum", A.cumsum.default, lambda x: A.cumsum.default(x, 1), lambda: (randn(2, 5, 3),))
case("cumsum-f16", A.cumsum.default, lambda x: A.cumsum.default(x, -1), lambda: (randn(2, 5, dtype=F16),))
case("cumsum-int32", A.cumsum.default, lambda x: A.cumsum.default(x, 1), lambda: (randint(2, 16, dtype=I32),))

# ---- float16 (ONNX Runtime's CPU kernels permitting; TensorRT runs all of these in fp16) -----------
case("conv2d-f16", _CONV, lambda x, w, b: _CONV(x, w, b, [1, 1], [1, 1], [1, 1], False, [0, 0], 1),
     lambda: (randn(1, 4, 6, 6, dtype=F16), randn(8, 4, 3, 3, dtype=F16) * 0.3, randn(8, dtype=F16)))
case("native_layer_norm-f16", A.native_layer_norm.default,
     lambda x, w, b: A.native_layer_norm.default(x, [4], w, b, 1e-5)[0],
     lambda: (randn(2, 3, 4, dtype=F16), randn(4, dtype=F16), randn(4, dtype=F16)))
case("batch_norm-f16", A._native_batch_norm_legit_no_training.default,
     lambda x, w, b, m, v: A._native_batch_norm_legit_no_training.default(x, w, b, m, v, 0.1, 1e-5)[0],
     lambda: tuple(t.half() for t in (randn(2, 3, 4, 4), randn(3), randn(3), randn(3), positive(3))))
case("max_pool2d_with_indices-f16", A.max_pool2d_with_indices.default,
     lambda x: A.max_pool2d_with_indices.default(x, [3, 3], [2, 2], [1, 1])[0], lambda: (randn(1, 2, 8, 7, dtype=F16),))
case("avg_pool2d-f16", A.avg_pool2d.default, lambda x: A.avg_pool2d.default(x, [3, 3], [1, 1], [1, 1]),
     lambda: (randn(1, 2, 7, 6, dtype=F16),))
case("mean.dim-f16", A.mean.dim, lambda x: A.mean.dim(x, [-1, -2], True), lambda: (randn(1, 4, 3, 3, dtype=F16),))
case("cat-f16", A.cat.default, lambda x, y: A.cat.default([x, y], 0),
     lambda: (randn(2, 3, dtype=F16), randn(1, 3, dtype=F16)))
case("where.self-f16", A.where.self, A.where.self, lambda: (bools(3, 4), randn(3, 4, dtype=F16), randn(4, dtype=F16)))
case("permute-f16", A.permute.default, lambda x: A.permute.default(x, [1, 0]), lambda: (randn(2, 3, dtype=F16),))
case("addmm-f16", A.addmm.default, A.addmm.default,
     lambda: (randn(4, dtype=F16), randn(3, 5, dtype=F16), randn(5, 4, dtype=F16)))
case("bmm-f16", A.bmm.default, A.bmm.default, lambda: (randn(2, 3, 5, dtype=F16), randn(2, 5, 4, dtype=F16)))
case("hardswish-f16", A.hardswish.default, A.hardswish.default, lambda: (randn(2, 3, 4, dtype=F16) * 4,))
case("silu-f16", A.silu.default, A.silu.default, lambda: (randn(2, 3, 4, dtype=F16) * 3,))
case("_to_copy-f16-f32", A._to_copy.default, lambda x: A._to_copy.default(x, dtype=torch.float32),
     lambda: (randn(3, 4, dtype=F16),))

# ---- second shapes / dtypes / argument values for converters with a single case above -------------
case("_unsafe_view-int", A._unsafe_view.default, lambda x: A._unsafe_view.default(x, [-1, 2]), lambda: (randint(4, 3),))
case("reshape-bool", A.reshape.default, lambda x: A.reshape.default(x, [6]), lambda: (bools(2, 3),))
case("view_copy-4d", A.view_copy.default, lambda x: A.view_copy.default(x, [2, 1, 3, 1]), lambda: (randn(6),))
case("squeeze.dim-noop", A.squeeze.dim, lambda x: A.squeeze.dim(x, 1), lambda: (randint(2, 3),))
case("squeeze.default-all-ones", A.squeeze.default, A.squeeze.default, lambda: (randn(1, 1),))
case("flatten-all", A.flatten.using_ints, lambda x: A.flatten.using_ints(x, 0, -1), lambda: (bools(2, 3, 2),))
case("transpose-4d", A.transpose.int, lambda x: A.transpose.int(x, 1, 2), lambda: (randn(1, 2, 3, 4, dtype=F16),))
case("t-1d", A.t.default, A.t.default, lambda: (randn(4),))
case("stack-negative-dim-int", A.stack.default, lambda x, y: A.stack.default([x, y, x], -1),
     lambda: (randint(2, 3), randint(2, 3, seed=1)))
case("split.Tensor-exact", A.split.Tensor, lambda x: A.split.Tensor(x, 3, -1), lambda: (randint(2, 6),))
case("split.Tensor-one-piece", A.split.Tensor, lambda x: A.split.Tensor(x, 8, 0)[0] + 1, lambda: (randn(4, 2),))
case("unbind-dim0-bool", A.unbind.int, A.unbind.int, lambda: (bools(3, 2),))
case("clone-bool", A.clone.default, A.clone.default, lambda: (bools(2, 3),))
case("alias-int", A.alias.default, A.alias.default, lambda: (randint(2, 3),))
case("detach-f16", A.detach.default, lambda x: A.detach.default(x) * 2, lambda: (randn(2, 3, dtype=F16),))
case("lift_fresh_copy-int", A.lift_fresh_copy.default, A.lift_fresh_copy.default, lambda: (randint(3),))
case("dropout-eval-f16", A.dropout.default, lambda x: A.dropout.default(x, 0.1, False),
     lambda: (randn(2, 3, dtype=F16),))
case("flip-int-one-dim", A.flip.default, lambda x: A.flip.default(x, [1]), lambda: (randint(2, 5),))
case("repeat-same-rank-bool", A.repeat.default, lambda x: A.repeat.default(x, [1, 3]), lambda: (bools(2, 2),))
case("pixel_shuffle-r3", A.pixel_shuffle.default, lambda x: A.pixel_shuffle.default(x, 3), lambda: (randn(2, 9, 2, 2),))
case("select_scatter-first", A.select_scatter.default, lambda x, s: A.select_scatter.default(x, s, 0, 0),
     lambda: (randint(3, 4), randint(4, seed=1)))
case("gather-dim0", A.gather.default, lambda x, i: A.gather.default(x, 0, i),
     lambda: (randint(4, 3), randint(2, 3, low=0, high=4)))
case("clamp.Tensor-int", A.clamp.Tensor, A.clamp.Tensor,
     lambda: (randint(3, 4), randint(4, low=-5, high=0), randint(3, 1, low=1, high=5)))
case("clamp_min-int", A.clamp_min.default, lambda x: A.clamp_min.default(x, 1), lambda: (randint(3, 4),))
case("clamp_max-f32", A.clamp_max.default, lambda x: A.clamp_max.default(x, -0.25), lambda: (randn(3, 4),))
case("pow.Tensor_Tensor-int", A.pow.Tensor_Tensor, A.pow.Tensor_Tensor,
     lambda: (randint(3, 4, low=-4, high=4), randint(3, 4, low=0, high=4, seed=1)))
case("pow.Scalar-int-exponent", A.pow.Scalar, lambda x: A.pow.Scalar(3, x), lambda: (randint(3, 4, low=0, high=5),))
case("rsub.Scalar-int", A.rsub.Scalar, lambda x: A.rsub.Scalar(x, 10), lambda: (randint(3, 4),))
case("rsub.Tensor-promote", A.rsub.Tensor, A.rsub.Tensor, lambda: (randint(3, 4), randn(4)))
case("sub.Scalar-int", A.sub.Scalar, lambda x: A.sub.Scalar(x, 3), lambda: (randint(3, 4, dtype=I32),))
case("remainder.Scalar-float", A.remainder.Scalar, lambda x: A.remainder.Scalar(x, 1.5), lambda: (randn(4, 5) * 4,))
case("fmod.Scalar-float", A.fmod.Scalar, lambda x: A.fmod.Scalar(x, -1.5), lambda: (randn(4, 5) * 4,))
case("bitwise_and-1d", A.bitwise_and.Tensor, A.bitwise_and.Tensor, lambda: (bools(7), bools(1, seed=1)))
case("bitwise_or-3d", A.bitwise_or.Tensor, A.bitwise_or.Tensor, lambda: (bools(2, 1, 3), bools(4, 1, seed=1)))
case("bitwise_xor-0dim", A.bitwise_xor.Tensor, A.bitwise_xor.Tensor, lambda: (bools(3), torch.tensor(True)))
case("bitwise_not-3d", A.bitwise_not.default, A.bitwise_not.default, lambda: (bools(2, 1, 3),))
case("hardsigmoid-f16", A.hardsigmoid.default, A.hardsigmoid.default, lambda: (randn(2, 3, dtype=F16) * 4,))
case("elu-default-alpha-4d", A.elu.default, A.elu.default, lambda: (randn(1, 2, 3, 4),))
case("celu-default-alpha", A.celu.default, A.celu.default, lambda: (randn(5),))
case("selu-4d", A.selu.default, A.selu.default, lambda: (randn(1, 2, 3, 4),))
case("softplus-small", A.softplus.default, A.softplus.default, lambda: (randn(7) * 0.1,))
case("softmax.int-f16", A.softmax.int, lambda x: A.softmax.int(x, 0), lambda: (randn(4, 3, dtype=F16),))
case("log_softmax.int-mid", A.log_softmax.int, lambda x: A.log_softmax.int(x, 1), lambda: (randn(2, 4, 3),))
case("full_like-bool", A.full_like.default, lambda x: A.full_like.default(x, True), lambda: (bools(2, 3),))
case("full_like-dtype", A.full_like.default, lambda x: A.full_like.default(x, 3, dtype=torch.int32),
     lambda: (randn(2, 3),))
case("zeros_like-int", A.zeros_like.default, A.zeros_like.default, lambda: (randint(2, 3),))
case("ones_like-f16", A.ones_like.default, A.ones_like.default, lambda: (randn(2, 3, dtype=F16),))
case("zeros-bool", A.zeros.default, lambda x: A.logical_or.default(x, A.zeros.default([2, 3], dtype=torch.bool)),
     lambda: (bools(2, 3),))
case("ones-f32", A.ones.default, lambda x: x * A.ones.default([2, 1], dtype=torch.float32), lambda: (randn(2, 3),))
case("new_zeros-int", A.new_zeros.default, lambda x: A.new_zeros.default(x, [2, 1, 2]), lambda: (randint(2, 3),))
case("new_ones-bool", A.new_ones.default, lambda x: A.new_ones.default(x, [3]), lambda: (bools(2),))
case("new_full-int", A.new_full.default, lambda x: A.new_full.default(x, [4], 5), lambda: (randint(2, dtype=I32),))
case("scalar_tensor-int", A.scalar_tensor.default, lambda x: x + A.scalar_tensor.default(3, dtype=torch.int64),
     lambda: (randint(2, 3),))
case("arange.default-float", A.arange.default, lambda x: x * A.arange.default(3.0), lambda: (randn(2, 3),))
case("arange.start-negative", A.arange.start, lambda x: x + A.arange.start(-3, 0), lambda: (randint(3),))
case("arange.start_step-negative-int", A.arange.start_step, lambda x: x + A.arange.start_step(10, 1, -3),
     lambda: (randint(3),))
case("native_batch_norm-eval-noaffine", A.native_batch_norm.default,
     lambda x, m, v: A.native_batch_norm.default(x, None, None, m, v, False, 0.1, 1e-3)[0],
     lambda: (randn(2, 3, 5), randn(3), positive(3)))
case("max_pool2d-strided-padded", A.max_pool2d.default, lambda x: A.max_pool2d.default(x, [3, 2], [2, 1], [1, 1]),
     lambda: (randn(2, 3, 7, 5),))
case("max_pool3d-ceil", A.max_pool3d.default,
     lambda x: A.max_pool3d.default(x, [2, 2, 2], [2, 2, 2], [0, 0, 0], [1, 1, 1], True),
          lambda: (randn(1, 1, 5, 4, 3),))
case("max_pool3d_with_indices-ceil", A.max_pool3d_with_indices.default,
     lambda x: A.max_pool3d_with_indices.default(x, [3, 3, 3], [2, 2, 2], [1, 1, 1], [1, 1, 1], True)[0],
     lambda: (randn(1, 2, 6, 5, 4),))
case("avg_pool3d-pad-exclude", A.avg_pool3d.default,
     lambda x: A.avg_pool3d.default(x, [3, 3, 3], [2, 2, 2], [1, 1, 1], False, False), lambda: (randn(1, 2, 5, 5, 4),))
case("adaptive_avg_pool2d-global-f16", A.adaptive_avg_pool2d.default,
     lambda x: A.adaptive_avg_pool2d.default(x, [1, 1]), lambda: (randn(1, 3, 4, 6, dtype=F16),))
case("_adaptive_avg_pool3d-identity", A._adaptive_avg_pool3d.default,
     lambda x: A._adaptive_avg_pool3d.default(x, [2, 3, 2]), lambda: (randn(1, 2, 2, 3, 2),))
case("matmul-2d", A.matmul.default, A.matmul.default, lambda: (randn(3, 5), randn(5, 2)))
case("matmul-batched-broadcast", A.matmul.default, A.matmul.default, lambda: (randn(2, 1, 3, 5), randn(4, 5, 2)))
case("baddbmm-default-factors", A.baddbmm.default, A.baddbmm.default,
     lambda: (randn(1, 3, 1), randn(2, 3, 5), randn(2, 5, 4)))
case("sum.default-int32", A.sum.default, A.sum.default, lambda: (randint(2, 3, dtype=I32),))
case("mean.default-4d", A.mean.default, A.mean.default, lambda: (randn(1, 2, 3, 4),))
case("prod.dim_int-keepdim-int", A.prod.dim_int, lambda x: A.prod.dim_int(x, -1, True),
     lambda: (randint(2, 3, low=-3, high=3),))
case("prod.default-f32", A.prod.default, A.prod.default, lambda: (positive(2, 3),))
case("amin-int-keepdim", A.amin.default, lambda x: A.amin.default(x, [-1], True), lambda: (randint(2, 3, 4),))
case("logsumexp-keepdim", A.logsumexp.default, lambda x: A.logsumexp.default(x, [0, 2], True),
     lambda: (randn(2, 3, 4),))
case("max.dim-int-keepdim", A.max.dim, lambda x: A.max.dim(x, 0, True), lambda: (torch.randperm(12).reshape(4, 3),))
case("min.dim-f16", A.min.dim, lambda x: A.min.dim(x, 1), lambda: (torch.randperm(12).reshape(3, 4).half(),))
case("max.default-int32", A.max.default, A.max.default, lambda: (randint(2, 5, dtype=I32),))
case("min.default-f32", A.min.default, A.min.default, lambda: (randn(4, 2),))
case("argmin-flat", A.argmin.default, A.argmin.default, lambda: (randn(3, 4),))
case("any.default-float", A.any.default, A.any.default, lambda: (torch.zeros(3, 2),))
case("any.dims-keepdim-int", A.any.dims, lambda x: A.any.dims(x, [0, 2], True),
     lambda: (randint(2, 3, 2, low=0, high=2),))
case("all.dim-float-keepdim", A.all.dim, lambda x: A.all.dim(x, 0, True),
     lambda: (randint(3, 4, low=0, high=3).float(),))
case("all.dims-all-axes", A.all.dims, lambda x: A.all.dims(x, [0, 1]), lambda: (bools(3, 4),))
case("all.default-false", A.all.default, A.all.default, lambda: (bools(3, 4),))

# The op families added after this table (padding, scatter, sorting, resize, embedding) keep their cases
# beside their tests; every registered overload still has one here.
from suites.conversion.family_cases import FAMILY_CASES  # noqa: E402 - appended after the table it extends

for _family_case in FAMILY_CASES:
    case(*_family_case)

# SymInt arithmetic (sym_size, operator.mul...) needs a dynamic dim to exist; its rows live with the dynamic
# converter tests, which run them across sizes. Here: once each, so every registered target has a case.
from suites.conversion.dynamic_harness import SYMINT_CASES  # noqa: E402 - appended after the table it extends

for _symint_case in SYMINT_CASES:
    case(*_symint_case)
