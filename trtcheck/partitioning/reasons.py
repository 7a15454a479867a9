"""Where a node runs (``Target``) and why (``Reason``): the vocabulary every partitioning rule writes in.

Every compute node of a partition has exactly one final reason, so ``explain()`` can always say why a
node is where it is, and a reader can tell the user's word from a converter gap from a partitioning rule.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Target(str, enum.Enum):
    """Where a node or segment runs."""

    TENSORRT = "tensorrt"
    TORCH = "torch"

    @property
    def display(self) -> str:
        return "TensorRT" if self is Target.TENSORRT else "Torch"


class ReasonKind(str, enum.Enum):
    """Why a node runs where it runs; every node of a partition has exactly one final reason."""

    CONVERTIBLE = "convertible"  # a converter exists and accepts the node: TensorRT
    NO_CONVERTER = "no_converter"  # no converter, or its validator rejects the node
    VALIDATOR_ERROR = "validator_error"  # a converter's validator raised: a bug in it, not a refusal
    FORCED_OP = "forced_op"  # the op is in torch_executed_ops
    FORCED_MODULE = "forced_module"  # the node lies inside a module of torch_executed_modules
    NON_TENSOR_BOUNDARY = "non_tensor_boundary"  # linked to Torch through a non-Tensor value
    MIN_BLOCK_SIZE = "min_block_size"  # its TensorRT run was shorter than min_block_size
    FOLLOWS_PRODUCER = "follows_producer"  # operator.getitem runs where the tuple it indexes was made
    CONVERSION_FAILED = "conversion_failed"  # its TensorRT segment failed to convert or build: PyTorch
    CONTROL_FLOW = "control_flow"  # torch.cond / while_loop: its own Torch segment; its branches are partitioned apart


@dataclass(frozen=True)
class Reason:
    kind: ReasonKind
    detail: str = ""
    # The converter whose validator accepted the node (a registry verdict): conversion does not ask it again. Not part
    # of what a reason says, so two reasons compare by kind and detail alone.
    converter: Any = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.kind.value}: {self.detail}" if self.detail else self.kind.value
