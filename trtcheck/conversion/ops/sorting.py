"""topk and sort as ONNX TopK, for the values output only.

Which of several equal elements comes first is where TopK and PyTorch can disagree: ONNX Runtime puts the
lower index first, TensorRT's TopK promises no order, and PyTorch's ``sort`` (unstable by contract, stable
on CPU) and ``topk`` promise none either. The values are the same whatever order ties take, so these
converters claim a node only when its indices output is unused (the usual ``x.sort().values``,
``torch.msort``, ``x.topk(k).values``); a used indices output is refused with its reason.

NaN: PyTorch orders NaN above every number (last ascending, first descending, picked first by a
largest-topk), which no comparison-based TopK does. TopK therefore runs on ``x`` with NaN replaced by
+inf, and the positions the NaNs take in PyTorch's result (the last ``n_nan`` of an ascending/smallest
selection over ``n`` elements, i.e. positions >= n - n_nan, or the first ``n_nan`` of a descending one) are
set back to NaN: that is exact, since after NaN -> +inf those positions hold +inf (ties among +inf and
former NaNs are equal values). Signed zeros compare equal, so ``-0.0``/``0.0`` may swap places, as they may
in PyTorch.

Refused: ``sorted=False`` (PyTorch then returns the k values in an order of its own), 0-d inputs, and
dtypes other than float32/float16 (TensorRT's TopK takes FP data; opset 19's TopK has no bfloat16).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from trtcheck.conversion.arguments import BoundArgs
from trtcheck.conversion.context import onnx_dtype
from trtcheck.conversion.ops._common import (
    FLOAT,
    aten,
    converter,
    ints,
    only_first_output_used,
    onnx_accepts,
    out_meta,
    refuse,
)
from trtcheck.conversion.registry import Refusal

if TYPE_CHECKING:  # pragma: no cover - the context imports the registry, not vice versa
    from trtcheck.conversion.context import ConversionContext

_DTYPES = FLOAT & onnx_accepts("TopK")


def _values_only(args: BoundArgs) -> bool | Refusal:
    if args.meta("self").dim() == 0:
        return refuse("self is 0-d; ONNX TopK takes rank >= 1")
    if "sorted" in args and not args.sorted:
        return refuse("sorted=False: PyTorch returns the k values in an unspecified order")
    verdict = only_first_output_used(args)
    if not verdict:
        return refuse(f"{verdict.reason}: the order of tied elements, and so the indices, may differ from PyTorch's")
    return True


def _top(ctx: ConversionContext, args: BoundArgs, k: int, largest: bool) -> list[str]:
    x = ctx.name(args.self)
    meta = args.meta("self")
    dtype = meta.dtype
    axis = args.dim % meta.dim()
    n = meta.shape[axis]
    is_nan = ctx.add("IsNaN", [x])
    keys = ctx.add("Where", [is_nan, ctx.constant(float("inf"), dtype), x])
    values = ctx.add("TopK", [keys, ints(ctx, [k])], num_outputs=2, axis=axis, largest=int(largest), sorted=1)[0]
    # NaNs per slice, and each output position along the axis, broadcast against the values
    counts = ctx.add("ReduceSum", [ctx.add("Cast", [is_nan], to=onnx_dtype(torch.int64)), ints(ctx, [axis])],
                     keepdims=1)
    shape = [1] * meta.dim()
    shape[axis] = k
    positions = ctx.constant(torch.arange(k).reshape(shape), torch.int64)
    if largest:
        nan_here = ctx.add("Less", [positions, counts])
    else:
        nan_here = ctx.add("GreaterOrEqual", [positions, ctx.add("Sub", [ctx.constant(n, torch.int64), counts])])
    return [ctx.add("Where", [nan_here, ctx.constant(float("nan"), dtype), values]), ""]


@converter(aten.topk.default, dtypes=_DTYPES, outputs=_DTYPES | {torch.int64},
           constants=("k", "dim", "largest", "sorted"), check=_values_only)
def _topk(ctx: ConversionContext, args: BoundArgs) -> list[str]:
    return _top(ctx, args, args.k, bool(args.largest))


@converter(aten.sort.default, dtypes=_DTYPES, outputs=_DTYPES | {torch.int64}, constants=("dim", "descending"),
           check=_values_only)
def _sort(ctx: ConversionContext, args: BoundArgs) -> list[str]:
    return _top(ctx, args, out_meta(args.node).shape[args.dim % args.meta("self").dim()], bool(args.descending))
