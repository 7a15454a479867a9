"""Per-node decisions: which target each compute node starts with, and why.

The user's word comes first (a forced op or module runs in Torch even when a converter exists), then
convertibility. ``operator.getitem`` has no decision of its own: it always runs where the tuple it
indexes was produced, so a multi-output op never leaves a tuple on a segment boundary.

A support check that raises (a converter's validator, or a user's ``support`` callable) never breaks
partitioning: the node runs in Torch with reason ``VALIDATOR_ERROR`` naming the error, not
``NO_CONVERTER``, so a bug in a validator cannot pass for a refusal.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.fx
from torch.fx.passes.operator_support import OperatorSupportBase

from trtcheck.names import ModuleMatcher, OpMatcher
from trtcheck.partitioning.nodes import CONTROL_FLOW_TYPES, branch_names, control_flow_op, is_control_flow, is_getitem, target_name
from trtcheck.partitioning.reasons import Reason, ReasonKind, Target

if TYPE_CHECKING:  # the registry is imported when it is asked (``support_check_of(None)``): see ``_UserSupportCheck``
    from trtcheck.conversion import Verdict

SupportFn = Callable[[torch.fx.Node], bool]
Support = SupportFn | OperatorSupportBase | None
SupportCheck = Callable[[torch.fx.Node], "Verdict"]
"""Whether one node may run in TensorRT, and why not: what ``decide`` asks of each node. The registry's ``verdict``,
or a user's ``support`` wrapped by ``support_check_of``."""

_CONVERTIBLE = Reason(ReasonKind.CONVERTIBLE)  # frozen: every node a user's support accepts shares it


class _UserSupportCheck:
    """A user's ``support`` as a ``SupportCheck``. Kept apart from the registry's: asking it needs no converter, so a
    process that partitions with its own support never imports the converters (and ONNX with them, which is most of
    a process's first partition: docs/performance.md#partitioning), and ``initial_targets`` asks ``ask`` directly,
    without a ``Verdict``."""

    __slots__ = ("ask",)

    def __init__(self, ask: SupportFn) -> None:
        self.ask = ask

    def __call__(self, node: torch.fx.Node) -> Verdict:
        from trtcheck.conversion import Verdict  # deferred: a user's support check never loads the converters (onnx)

        try:
            return Verdict(bool(self.ask(node)))
        except Exception as error:  # noqa: BLE001 - a failing support check means "not convertible", never a crash
            return Verdict(False, error=error)


def support_check_of(support: Support) -> SupportCheck:
    """The ``support`` argument of ``partition`` as a ``SupportCheck``: ``None`` for trtcheck's converter registry
    (``conversion.verdict``, which names the converter and why it refused), a callable ``(Node) -> bool``, or
    a ``torch.fx.passes.operator_support.OperatorSupportBase``. A user's check that raises is a verdict with
    its ``error``, never a crash."""
    if support is None:
        from trtcheck.conversion import verdict  # deferred: the converters (onnx), loaded only where they are asked

        return verdict
    if isinstance(support, OperatorSupportBase):
        return _UserSupportCheck(lambda node: support.is_node_supported({}, node))
    if callable(support):
        return _UserSupportCheck(support)
    raise TypeError(
        f"support must be None (trtcheck's converter registry), a callable (torch.fx.Node) -> bool, or a "
        f"torch.fx.passes.operator_support.OperatorSupportBase; got {type(support).__name__}"
    )


judge_with = support_check_of  # the former name, kept while trtcheck.verification.invariants imports it


def initial_targets(
    nodes: list[torch.fx.Node], check: SupportCheck, forced_ops: OpMatcher, forced_modules: ModuleMatcher
) -> tuple[dict[torch.fx.Node, Target], dict[torch.fx.Node, Reason]]:
    """Every compute node's target and reason before any partitioning rule: ``decide`` for each, then every
    ``getitem`` follows its producer.

    The common case (nothing forced, no control flow, a user's ``support``) asks the support check alone, in
    one loop: at 100k nodes, ``decide``'s calls and a ``Verdict`` per node cost more than the rest of a round."""
    targets: dict[torch.fx.Node, Target] = {}
    reasons: dict[torch.fx.Node, Reason] = {}
    getitems = []
    plain = isinstance(check, _UserSupportCheck) and not (forced_ops.packets or forced_ops.overloads) and not forced_modules.paths
    ask = check.ask if isinstance(check, _UserSupportCheck) else None
    trt, torch_target, convertible = Target.TENSORRT, Target.TORCH, _CONVERTIBLE
    for node in nodes:
        if node.target is operator.getitem and node.op == "call_function":  # ``is_getitem``, inlined
            getitems.append(node)
            continue
        if plain and type(node.target) not in CONTROL_FLOW_TYPES:  # ``decide``, inlined for a user's support with nothing forced
            try:
                accepted = bool(ask(node))  # type: ignore[misc]
            except Exception as error:  # noqa: BLE001 - a failing support check means "not convertible", never a crash
                targets[node] = torch_target
                reasons[node] = Reason(ReasonKind.VALIDATOR_ERROR, f"support check raised {type(error).__name__}: {error}")
                continue
            if accepted:
                targets[node], reasons[node] = trt, convertible
            else:
                targets[node], reasons[node] = torch_target, Reason(ReasonKind.NO_CONVERTER, f"no converter accepts {_describe(node)}")
            continue
        targets[node], reasons[node] = decide(node, check, forced_ops, forced_modules)
    follow_producers(getitems, targets, reasons)
    return targets, reasons


def decide(
    node: torch.fx.Node, check: SupportCheck, forced_ops: OpMatcher, forced_modules: ModuleMatcher
) -> tuple[Target, Reason]:
    """The initial target of one compute node (``getitem`` excluded: see ``follow_producers``): the user's word
    first, then control flow (its own Torch segment; its branches are partitioned apart), then the support check."""
    if forced_ops(node.target):
        return Target.TORCH, Reason(ReasonKind.FORCED_OP, f"{node.target} is in torch_executed_ops")
    module = forced_modules(node)
    if module is not None:
        return Target.TORCH, Reason(ReasonKind.FORCED_MODULE, f"inside {module!r} (torch_executed_modules)")
    if is_control_flow(node):
        return Target.TORCH, control_flow_reason(node)
    verdict = check(node)
    if verdict.error is not None:
        error = f"{type(verdict.error).__name__}: {verdict.error}"
        if verdict.converter is not None:
            return Target.TORCH, Reason(ReasonKind.VALIDATOR_ERROR, f"{target_name(node.target)} validator raised {error}")
        return Target.TORCH, Reason(ReasonKind.VALIDATOR_ERROR, f"support check raised {error}")
    if not verdict:
        return Target.TORCH, Reason(ReasonKind.NO_CONVERTER, _refusal(node, verdict))
    if verdict.converter is None:
        return Target.TENSORRT, _CONVERTIBLE
    return Target.TENSORRT, Reason(ReasonKind.CONVERTIBLE, converter=verdict.converter)


def _refusal(node: torch.fx.Node, verdict: Verdict) -> str:
    """Why an unsupported node is: no converter for its overload, or a converter whose validator said no.

    The two call for different fixes (register a converter, or change the dtypes/arguments the existing
    one refuses), so the registry's verdict names which one it was and what the validator was shown.
    """
    if verdict.converter is not None:
        because = f": {verdict.reason}" if verdict.reason else ""
        return f"the {target_name(node.target)} converter's validator refused {_signature(node)}{because}"
    if verdict.reason is not None and node.op == "call_function":
        return verdict.reason
    return f"no converter accepts {_describe(node)}"


def _signature(node: torch.fx.Node) -> str:
    """``float64[2, 3], 2 -> float64[2, 3]``: the inputs and output a validator was shown."""

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


def _describe(node: torch.fx.Node) -> str:
    name = target_name(node.target)
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


def control_flow_reason(node: torch.fx.Node) -> Reason:
    op = control_flow_op(node)
    assert op is not None, f"{node.name} is not a control-flow node"
    return Reason(
        ReasonKind.CONTROL_FLOW,
        f"{op.name} runs in PyTorch as a segment of its own (do_not_merge); its branches "
        f"{', '.join(branch_names(node))} are partitioned separately (Partition.branches)",
    )
