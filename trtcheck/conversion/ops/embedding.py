"""embedding: rows of ``weight`` picked by ``indices``, an ONNX Gather along axis 0.

``padding_idx``, ``scale_grad_by_freq`` and ``sparse`` change only the gradient (which row receives none,
how it is scaled, its layout), never the forward result, so any value of theirs is accepted. The indices
must be int32/int64; PyTorch raises on an index outside ``[0, num_embeddings)``, so no graph that runs in
eager mode ever gathers a negative one (Gather would count it from the end). Indices of any (dynamic) shape
gather alike: a Hugging Face model with a dynamic sequence length embeds ``int64[batch, seq]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trtcheck.conversion.arguments import BoundArgs
from trtcheck.conversion.ops._common import INT, TENSORRT_DTYPES, aten, converter, onnx_accepts, refuse
from trtcheck.conversion.registry import Refusal

if TYPE_CHECKING:  # pragma: no cover - the context imports the registry, not vice versa
    from trtcheck.conversion.context import ConversionContext

_DTYPES = TENSORRT_DTYPES & onnx_accepts("Gather")


def _embedding_ok(args: BoundArgs) -> bool | Refusal:
    if args.meta("weight").dim() != 2:
        return refuse(f"weight has rank {args.meta('weight').dim()}; embedding takes a 2-D weight")
    if args.meta("indices").dtype not in INT:
        return refuse(f"indices are {args.meta('indices').dtype}, not int32/int64 row numbers")
    return True


@converter(aten.embedding.default, dtypes=_DTYPES, outputs=_DTYPES, check=_embedding_ok, dynamic=True)
def _embedding(ctx: ConversionContext, args: BoundArgs) -> str:
    return ctx.add("Gather", [ctx.name(args.weight), ctx.name(args.indices)], axis=0)
