"""Reflection and replication padding: ONNX ``Pad`` in ``reflect`` and ``edge`` mode.

aten's ``padding`` lists (begin, end) pairs from the last dim backwards, as ``constant_pad_nd`` does;
ONNX wants every begin, then every end, over all dims. PyTorch's reflect leaves the edge value out
(``[1, 2, 3]`` padded by 2 on the left is ``[3, 2, 1, 2, 3]``), as does ONNX's (numpy's) ``reflect``;
``replicate`` repeats the edge value, which is ONNX's ``edge``. Negative padding (cropping; PyTorch
accepts it for replication) is refused: TensorRT's parser takes only non-negative pads in these modes.
TensorRT's Pad takes FP and INT32/INT64 data, not bool.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trtcheck.conversion.arguments import BoundArgs
from trtcheck.conversion.ops._common import NUMERIC, all_ints, aten, converter, ints, onnx_accepts, refuse
from trtcheck.conversion.registry import Refusal

if TYPE_CHECKING:  # pragma: no cover - the context imports the registry, not vice versa
    from trtcheck.conversion.context import ConversionContext

_DTYPES = NUMERIC & onnx_accepts("Pad")

# overload -> (ONNX mode, number of padded trailing dims)
_MODES = {
    aten.reflection_pad1d.default: ("reflect", 1),
    aten.reflection_pad2d.default: ("reflect", 2),
    aten.reflection_pad3d.default: ("reflect", 3),
    aten.replication_pad2d.default: ("edge", 2),
    aten.replication_pad3d.default: ("edge", 3),
}


def _padding_ok(args: BoundArgs) -> bool | Refusal:
    padding = list(args.padding)
    if not all_ints(padding):
        return refuse(f"padding {args.padding!r} is not all ints")
    if any(p < 0 for p in padding):
        return refuse(f"padding {padding} has a negative pad (a crop); only non-negative padding is converted")
    _, spatial = _MODES[args.node.target]
    rank = args.meta("self").dim()
    if len(padding) != 2 * spatial or rank not in (spatial + 1, spatial + 2):
        return refuse(f"padding {padding} on a rank-{rank} input does not fit {args.node.target}")
    return True


@converter(*_MODES, dtypes=_DTYPES, outputs=_DTYPES, constants=("padding",), check=_padding_ok)
def _pad(ctx: ConversionContext, args: BoundArgs) -> str:
    mode, _ = _MODES[args.node.target]
    rank = args.meta("self").dim()
    padding = list(args.padding)
    begins, ends = [0] * rank, [0] * rank
    for i in range(len(padding) // 2):  # pair i pads dim rank-1-i
        begins[rank - 1 - i], ends[rank - 1 - i] = padding[2 * i], padding[2 * i + 1]
    return ctx.add("Pad", [ctx.name(args.self), ints(ctx, begins + ends)], mode=mode)
