"""trtcheck's corrections to PyTorch's core-ATen decomposition table.

Lowering runs ``run_decompositions`` with :func:`core_aten_table`: PyTorch's default table with the
entries below replaced. Each replacement fixes a default decomposition that computes something other
than the op it decomposes; everything else is PyTorch's own, so the graph stays what users expect.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch
from torch._decomp import decompositions as _torch_decompositions

from trtcheck.lowering.quantized import quantize_decompositions

aten = torch.ops.aten


def _flash_attention_for_cpu(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``_scaled_dot_product_flash_attention_for_cpu`` with its real second output, the logsumexp.

    PyTorch's decomposition returns the attention weights, shape (N, H, L, S), where the op returns the
    logsumexp of the scaled scores over the keys, shape (N, H, L). The attention output is PyTorch's
    own decomposition; the logsumexp is computed from the same scores (and is dropped again by dead
    code elimination when, as in inference, nothing reads it).
    """
    output, _ = _torch_decompositions.scaled_dot_product_flash_attention_for_cpu(
        query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale
    )
    if key.size(1) != query.size(1):  # grouped-query attention: each key head serves several query heads
        repeats = query.size(1) // key.size(1)
        key = key.repeat_interleave(repeats, dim=1)
    factor = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale
    # In float32 for half/bfloat16 too: the CPU kernel accumulates the scores in float32 and returns the
    # logsumexp in float32 (``_lse_dtype``), so rounding the scores to half first would lose digits it keeps.
    compute = torch.promote_types(query.dtype, torch.float32)
    scores = torch.matmul(query.to(compute), key.to(compute).transpose(-2, -1)) * factor
    if is_causal:
        keep = torch.ones(query.size(-2), key.size(-2), dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(~keep, -math.inf)
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, -math.inf) if attn_mask.dtype == torch.bool else scores + attn_mask
    return output, torch.logsumexp(scores, dim=-1).to(_lse_dtype(query))


def _lse_dtype(query: torch.Tensor) -> torch.dtype:
    """The logsumexp dtype the CPU kernel returns: float32 for half and bfloat16 queries (it accumulates
    in float32 and keeps that), else the query's dtype."""
    return torch.float32 if query.dtype in (torch.float16, torch.bfloat16) else query.dtype


_CORRECTIONS: dict[Any, Any] = {
    aten._scaled_dot_product_flash_attention_for_cpu.default: _flash_attention_for_cpu,
}


# Core ATen ops the default table still decomposes (into arange/abs/index arithmetic) although each is one
# ONNX op that TensorRT's parser takes (Pad, mode reflect or edge): kept whole, they reach their converters.
_KEEP: tuple[Any, ...] = (
    aten.reflection_pad1d.default,
    aten.reflection_pad2d.default,
    aten.reflection_pad3d.default,
    aten.replication_pad2d.default,
    aten.replication_pad3d.default,
)


def core_aten_table(keep: Callable[[Any], bool] | None = None) -> Any:
    """PyTorch's default core-ATen decomposition table, with trtcheck's corrections and ``_KEEP`` kept whole.

    ``keep`` (the ``torch_executed_ops`` matcher) keeps more ops whole: an op forced to PyTorch must survive
    lowering to be forced at all (``linear``, ``softmax``, ``layer_norm`` would otherwise decompose into ops
    the setting never names), as Torch-TensorRT keeps ``torch_executed_ops`` out of its decompositions.
    """
    table = torch.export.default_decompositions()
    for op in _KEEP:
        table.pop(op, None)
    if keep is not None:
        for op in [op for op in table if keep(op)]:
            del table[op]
    for op, decomposition in _CORRECTIONS.items():
        table[op] = decomposition
    table.update(quantize_decompositions())  # ModelOpt's Q/DQ ops as trtcheck's (lowering/quantized.py says why)
    return table


def kept_whole(keep: Callable[[Any], bool] | None) -> frozenset[Any]:
    """The ops of the default table ``keep`` keeps whole: what a lowering made with it differs by."""
    if keep is None:
        return frozenset()
    return frozenset(op for op in _default_ops() if keep(op))


@functools.cache
def _default_ops() -> tuple[Any, ...]:
    """The ops of torch.export's default decomposition table, listed once per process: listing them builds the
    table's every entry (0.08-0.15 s a time, and the matrix asked 3-4 times per verification)."""
    return tuple(torch.export.default_decompositions())


__all__ = ["core_aten_table", "kept_whole"]
