"""Input values as cache keys: copies that later writes cannot reach, and a bitwise comparison.

Work that depends only on a model and its inputs (eager's outputs in ``verify``, the shapes a graph produces
in shape analysis) is kept and reused when the same inputs come again; "the same" must then mean bit for bit.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map


def cloned(value: Any) -> Any:
    """Copies of every Tensor in ``value``: a model that writes into its inputs must not change the next run's."""
    return tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, value)


def same_values(a: Any, b: Any) -> bool:
    """Bitwise equal leaves in the same structure (a NaN never equals itself: such inputs are simply not reused;
    -0.0 is not 0.0, which ``1 / x`` tells apart; tensors on two devices, or with other strides or storage offsets,
    differ: a kept ``cloned`` copy starts at offset 0, so an input that is a view into a larger storage is never
    taken for a kept one, which costs a reuse and nothing else)."""
    leaves_a, spec_a = tree_flatten(a)
    leaves_b, spec_b = tree_flatten(b)
    if spec_a != spec_b:
        return False
    for x, y in zip(leaves_a, leaves_b):
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
                return False
            if x.dtype != y.dtype or x.shape != y.shape or x.layout != y.layout or x.device != y.device:
                return False
            if x.layout == torch.strided and (x.stride() != y.stride() or x.storage_offset() != y.storage_offset()):
                return False  # a view of a transposed input fails where a contiguous one passes
            if not torch.equal(x, y) or (x.is_floating_point() and not torch.equal(torch.signbit(x), torch.signbit(y))):
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True
