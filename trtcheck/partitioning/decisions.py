"""Per-node decisions: which target each compute node starts with, and why.

The user's word comes first (a forced op or module runs in Torch even when a converter exists), then
convertibility. ``operator.getitem`` has no decision of its own: it always runs where the tuple it
indexes was produced, so a multi-output op never leaves a tuple on a segment boundary.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Union

import torch
import torch.fx
from torch.fx.passes.operator_support import OperatorSupportBase

from trtcheck.partitioning.partition import Reason, ReasonKind, Target
from trtcheck.settings import ModuleMatcher, OpMatcher

SupportFn = Callable[[torch.fx.Node], bool]
Support = Union[None, SupportFn, OperatorSupportBase]


def support_function(support: Support) -> SupportFn:
    """Normalize the ``support`` argument of ``partition`` to a predicate over nodes."""
    if support is None:
        from trtcheck.converters import is_convertible  # importing populates the registry

        return is_convertible
    if isinstance(support, OperatorSupportBase):
        return lambda node: bool(support.is_node_supported({}, node))
    if callable(support):
        return support
    raise TypeError(
        f"support must be None (trtcheck's converter registry), a callable (torch.fx.Node) -> bool, or a "
        f"torch.fx.passes.operator_support.OperatorSupportBase; got {type(support).__name__}"
    )


def is_getitem(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target is operator.getitem


def decide(
    node: torch.fx.Node, supports: SupportFn, forced_ops: OpMatcher, forced_modules: ModuleMatcher
) -> tuple[Target, Reason]:
    """The initial target of one compute node (``getitem`` excluded: see ``follow_producers``)."""
    if forced_ops(node.target):
        return Target.TORCH, Reason(ReasonKind.FORCED_OP, f"{node.target} is in torch_executed_ops")
    module = forced_modules(node)
    if module is not None:
        return Target.TORCH, Reason(ReasonKind.FORCED_MODULE, f"inside {module!r} (torch_executed_modules)")
    try:
        supported = bool(supports(node))
    except Exception as error:  # noqa: BLE001 - a failing support check means "not convertible"
        return Target.TORCH, Reason(ReasonKind.NO_CONVERTER, f"support check raised {type(error).__name__}: {error}")
    if not supported:
        return Target.TORCH, Reason(ReasonKind.NO_CONVERTER, f"no converter accepts {_describe(node)}")
    return Target.TENSORRT, Reason(ReasonKind.CONVERTIBLE)


def _describe(node: torch.fx.Node) -> str:
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        name = str(target)
    else:
        name = getattr(target, "__name__", str(target))
    value = node.meta.get("val")
    dtype = getattr(value, "dtype", None)
    return f"{name}" + (f" on {dtype}" if dtype is not None else "")


def follow_producers(
    nodes: list[torch.fx.Node], targets: dict[torch.fx.Node, Target], reasons: dict[torch.fx.Node, Reason]
) -> None:
    """Give every ``getitem`` its producer's target (in place)."""
    for node in nodes:
        if is_getitem(node):
            producer = node.args[0]
            target = targets.get(producer, Target.TORCH)  # indexing a graph input: nothing to compile
            targets[node] = target
            reasons[node] = Reason(ReasonKind.FOLLOWS_PRODUCER, f"indexes {producer.name}")
