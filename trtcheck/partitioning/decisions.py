"""Per-node decisions: which target each compute node starts with, and why.

The user's word comes first (a forced op or module runs in Torch even when a converter exists), then
convertibility. ``operator.getitem`` has no decision of its own: it always runs where the tuple it
indexes was produced, so a multi-output op never leaves a tuple on a segment boundary.

A support check that raises (a converter's validator, or a user's ``support`` callable) never breaks
partitioning: the node runs in Torch with reason ``VALIDATOR_ERROR`` naming the error, not
``NO_CONVERTER``, so a bug in a validator cannot pass for a refusal.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable

import torch
import torch.fx
from torch.fx.passes.operator_support import OperatorSupportBase

from trtcheck.partitioning.partition import Reason, ReasonKind, Target
from trtcheck.settings import ModuleMatcher, OpMatcher

SupportFn = Callable[[torch.fx.Node], bool]
Support = SupportFn | OperatorSupportBase | None


def support_function(support: Support) -> SupportFn:
    """Normalize the ``support`` argument of ``partition`` to a predicate over nodes."""
    if support is None:
        from trtcheck.conversion import is_convertible  # importing populates the registry

        return is_convertible
    if isinstance(support, OperatorSupportBase):
        return lambda node: bool(support.is_node_supported({}, node))
    if callable(support):
        return support
    raise TypeError(
        f"support must be None (trtcheck's converter registry), a callable (torch.fx.Node) -> bool, or a "
        f"torch.fx.passes.operator_support.OperatorSupportBase; got {type(support).__name__}"
    )


@functools.cache
def _registry():
    from trtcheck.conversion import registry  # importing the package populates the registry

    return registry


def _registry_is_convertible() -> SupportFn:
    return _registry().is_convertible


def _registry_check_node():
    return _registry().check_node


def check_support(node: torch.fx.Node, supports: SupportFn) -> tuple[bool, str | None]:
    """``(supported, error)``: ``error`` describes the exception the support check raised, if any.

    For the converter registry (``support=None``) it names the converter:
    ``"aten.relu.default validator raised KeyError: 'val'"``; for any other predicate,
    ``"support check raised KeyError: 'val'"``. A check that raised counts as unsupported.
    """
    check_node = _registry_check_node() if supports is _registry_is_convertible() else None
    if check_node is not None:
        supported, exc = check_node(node)
        if exc is None:
            return supported, None
        return False, f"{_target_name(node.target)} validator raised {type(exc).__name__}: {exc}"
    try:
        return bool(supports(node)), None
    except Exception as exc:  # noqa: BLE001 - a failing support check means "not convertible", never a crash
        return False, f"support check raised {type(exc).__name__}: {exc}"


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
    supported, error = check_support(node, supports)
    if error is not None:
        return Target.TORCH, Reason(ReasonKind.VALIDATOR_ERROR, error)
    if not supported:
        return Target.TORCH, Reason(ReasonKind.NO_CONVERTER, _refusal(node, supports))
    return Target.TENSORRT, Reason(ReasonKind.CONVERTIBLE)


def _refusal(node: torch.fx.Node, supports: SupportFn) -> str:
    """Why an unsupported node is: no converter for its overload, or a converter whose validator said no.

    The two call for different fixes (register a converter, or change the dtypes/arguments the existing
    one refuses), so the registry case names which one it was and what the validator was shown.
    """
    if supports is _registry_is_convertible() and node.op == "call_function":
        if _registry().get(node.target) is None:
            return f"no converter for {_target_name(node.target)}"
        why = _registry().refusal(node)
        because = f": {why}" if why else ""
        return f"the {_target_name(node.target)} converter's validator refused {_signature(node)}{because}"
    return f"no converter accepts {_describe(node)}"


def _signature(node: torch.fx.Node) -> str:
    """``float64[2, 3], 2 -> float64[2, 3]``: the inputs and output a validator judged."""

    def show(value: object) -> str:
        if isinstance(value, torch.fx.Node):
            value = value.meta.get("val", value.name)
        if isinstance(value, torch.Tensor):
            return f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}"
        if isinstance(value, (list, tuple)):
            return "[" + ", ".join(map(show, value)) + "]"
        return repr(value)

    arguments = [show(a) for a in node.args] + [f"{k}={show(v)}" for k, v in node.kwargs.items()]
    return f"{', '.join(arguments)} -> {show(node.meta.get('val'))}"


def _target_name(target: object) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    return getattr(target, "__name__", str(target))


def _describe(node: torch.fx.Node) -> str:
    name = _target_name(node.target)
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
