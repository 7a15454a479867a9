"""Node predicates: the one definition of each kind of node every phase asks about.

What a compute node is, what counts toward ``min_block_size``, what a ``getitem`` is, which values are
Tensors (the only values an engine takes or returns), which nodes are size computations and which are
control flow. Partitioning, conversion checks, verification and the tools all read these, so that the
counts they print can never disagree. ``is_getitem`` is defined in ``trtcheck.lowering.graph`` (conversion,
below partitioning, asks it too) and re-exported here.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from trtcheck.lowering.graph import is_getitem  # re-exported: see the module docstring
from trtcheck.names import in_branch as in_branch  # re-exported: the spelling of a branch node lives with the names

NOT_SEGMENTED = ("placeholder", "get_attr", "output")


def is_compute(node: torch.fx.Node) -> bool:
    """Nodes that segments hold: everything but graph inputs, constants and the output."""
    return node.op not in NOT_SEGMENTED


def counts_toward_block_size(node: torch.fx.Node) -> bool:
    """``getitem`` only unpacks a result; it does no work an engine could save."""
    return not is_getitem(node)


def is_tensor_value(value: Any) -> bool:
    """True for a Tensor or a list of Tensors: the only values a TensorRT engine can take or return."""
    if isinstance(value, torch.Tensor):
        return True
    return isinstance(value, list) and bool(value) and all(isinstance(v, torch.Tensor) for v in value)


def node_is_tensor(node: torch.fx.Node) -> bool:
    return is_tensor_value(node.meta.get("val"))


def op_name(node: torch.fx.Node) -> str:
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        namespace, _, rest = target.name().partition("::")
        return f"{namespace}::{rest}"
    if is_getitem(node):
        return "prim::TupleIndex"
    return getattr(target, "__name__", str(target))


def target_name(target: object) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    return getattr(target, "__name__", str(target))


def is_size_computation(node: torch.fx.Node) -> bool:
    """A node computing an int or SymInt from sizes: ``aten.sym_size``/``sym_numel``/``sym_stride`` or Python
    arithmetic on SymInts (``operator.mul``, ``torch.sym_max``, ...). Pure and cheap, so recomputing it in
    another segment costs nothing and loses nothing, unlike moving the segment that made it to Torch."""
    if node.op != "call_function" or not isinstance(node.meta.get("val"), (int, torch.SymInt)) or isinstance(node.meta.get("val"), bool):
        return False
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return target.name() in _SIZE_OPS
    return getattr(target, "__module__", None) == "_operator" or target in _SYM_FUNCTIONS


_SIZE_OPS = frozenset({"aten::sym_size.int", "aten::sym_numel", "aten::sym_stride.int", "aten::sym_storage_offset"})


_SYM_FUNCTIONS = frozenset(
    getattr(torch, name) for name in ("sym_max", "sym_min", "sym_sum", "sym_int", "sym_not", "sym_ite") if hasattr(torch, name)
)


@dataclass(frozen=True)
class ControlFlowOp:
    """How one higher-order op hands values to its branches (argument positions of its call)."""

    name: str
    branches: tuple[int, ...]  # the branch GraphModules (get_attr nodes)
    operands: tuple[int, ...]  # the tuples whose concatenation every branch's placeholders receive, in order
    fixed: tuple[int, ...]  # those of ``operands`` every call of a branch receives unchanged (not loop-carried)


# The one list of control-flow ops trtcheck knows. cond(pred, true_fn, false_fn, operands) calls one branch
# with ``operands``; while_loop(cond_fn, body_fn, carried, additional) calls both with carried + additional,
# the carried values changing from one iteration to the next.
CONTROL_FLOW_OPS: dict[Any, ControlFlowOp] = {
    torch.ops.higher_order.cond: ControlFlowOp("torch.cond", branches=(1, 2), operands=(3,), fixed=(3,)),
    torch.ops.higher_order.while_loop: ControlFlowOp("while_loop", branches=(0, 1), operands=(2, 3), fixed=(3,)),
}


# The ops' classes: a type test is what every round of partitioning pays per node, cheaper than hashing targets.
CONTROL_FLOW_TYPES = frozenset(type(op) for op in CONTROL_FLOW_OPS)


def control_flow_op(node: torch.fx.Node) -> ControlFlowOp | None:
    """The ``ControlFlowOp`` ``node`` calls, or None for any other node."""
    return CONTROL_FLOW_OPS.get(node.target) if is_control_flow(node) else None


def is_control_flow(node: torch.fx.Node) -> bool:
    return type(node.target) in CONTROL_FLOW_TYPES and node.op == "call_function"


def any_control_flow(nodes: Iterable[torch.fx.Node]) -> bool:
    """Whether a node of ``nodes`` may be control flow (a target of a control-flow op's type): one C-level scan,
    for the passes that skip their work on the graphs without any (almost all)."""
    return not CONTROL_FLOW_TYPES.isdisjoint(map(type, map(_TARGET, nodes)))


_TARGET = operator.attrgetter("target")


def branch_names(node: torch.fx.Node) -> list[str]:
    """The attribute names of a control-flow node's branch GraphModules (``["true_graph_0", "false_graph_0"]``)."""
    op = control_flow_op(node)
    if op is None:
        return []
    return [node.args[position].target for position in op.branches]


def bound_operands(node: torch.fx.Node) -> list[tuple[Any, bool]]:
    """What each placeholder of a branch of ``node`` receives, in order, and whether it is the same on every call."""
    op = control_flow_op(node)
    if op is None:
        return []
    return [(value, position in op.fixed) for position in op.operands for value in node.args[position]]
