"""The converter registry: what "a converter exists" means when partitioning.

A node may run in TensorRT only when a converter is registered for its exact ATen overload *and* that
converter's validator accepts the node (dtypes, ranks, argument values). Keeping the validator next to
the converter means partitioning and conversion can never disagree about what is convertible.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

if TYPE_CHECKING:  # pragma: no cover
    from trtcheck.conversion.context import ConversionContext



@dataclass(frozen=True)
class Refusal:
    """A validator's "no" with its reason, e.g. ``output_padding (2, 3) not below stride (3, 2): ...``.

    Falsy, so a validator may return it wherever it returns ``False``: every caller that asks "is this
    convertible?" keeps working, while partitioning shows the reason (``partition.explain()``) instead
    of a bare "the validator refused", which would leave the user guessing which argument to change.
    """

    reason: str

    def __bool__(self) -> bool:
        return False

    def __str__(self) -> str:
        return self.reason


# A converter emits ONNX nodes for one fx node and returns the ONNX value name(s) of its result(s):
# one name for a Tensor result, a sequence of names for a tuple/list result.
ConverterFn = Callable[["ConversionContext", torch.fx.Node], str | Sequence[str]]
# True accepts the node; False or a Refusal (which names the reason) refuses it; raising is a bug.
Validator = Callable[[torch.fx.Node], bool | Refusal]
OpTarget = torch._ops.OpOverload | Callable[..., Any]


@dataclass(frozen=True)
class Converter:
    """One registered converter: the ATen overload it handles, the function and its capability check.

    ``builtin`` is True for trtcheck's own converters (registered while ``trtcheck.conversion.ops`` is
    imported, through ``_common.converter``) and False for anything registered later through
    :func:`register`, including a user's ``override=True`` replacement of a built-in one. A built-in
    validator that raises is a trtcheck bug, which ``check_invariants`` reports (rule ``validator_error``).
    """

    target: OpTarget
    fn: ConverterFn
    validator: Validator | None = None
    builtin: bool = False

    def judge(self, node: torch.fx.Node) -> Verdict:
        """Run the validator once on ``node``: accepted, refused (with the validator's ``Refusal`` reason, if
        it gave one), or broken (the exception it raised: a bug, never to be mistaken for a refusal)."""
        if self.validator is None:
            return Verdict(True, converter=self)
        try:
            answer = self.validator(node)
        except Exception as error:  # noqa: BLE001 - a validator crash must mean "not convertible", never a crash
            return Verdict(False, error=error, converter=self)
        if answer:
            return Verdict(True, converter=self)
        return Verdict(False, reason=answer.reason if isinstance(answer, Refusal) else None, converter=self)


@dataclass(frozen=True)
class Verdict:
    """Whether a node converts, and if not why: the one answer partitioning, conversion and the tools read.

    ``error`` is what a validator raised (then ``accepted`` is False); ``reason`` why a refused node was
    refused (a validator's ``Refusal``, or "no converter for ..."); ``converter`` the converter that judged,
    None when none is registered. Truthy when accepted, so it reads as the bool it answers.
    """

    accepted: bool
    error: Exception | None = None
    reason: str | None = None
    converter: Converter | None = None

    def __bool__(self) -> bool:
        return self.accepted


_REGISTRY: dict[OpTarget, Converter] = {}
_BUILTINS: dict[OpTarget, Converter] = {}  # trtcheck's own, as registered: an override or ``unregister`` leaves them


def register(
    *targets: OpTarget, validator: Validator | None = None, override: bool = False, _builtin: bool = False
) -> Callable[[ConverterFn], ConverterFn]:
    """Decorator registering ``fn`` as the converter of each ATen overload in ``targets``.

    Registering an overload twice is an error unless ``override=True``: a user replacing a built-in
    converter says so explicitly, and a typo cannot silently shadow one. ``_builtin`` is for trtcheck's
    own converters only (``_common.converter`` passes it); whatever a user registers is not built-in.
    """
    if not targets:
        raise TypeError("register() needs at least one ATen overload, e.g. torch.ops.aten.relu.default")

    def decorator(fn: ConverterFn) -> ConverterFn:
        for target in targets:
            if isinstance(target, torch._ops.OpOverloadPacket):
                raise TypeError(
                    f"register() takes overloads, not packets: use {target}.default or another overload "
                    f"of {target} ({', '.join(target.overloads())})"
                )
            if target in _REGISTRY and not override:
                raise ValueError(f"a converter for {target} is already registered; pass override=True")
            _REGISTRY[target] = Converter(target, fn, validator, builtin=_builtin)
            if _builtin:
                _BUILTINS[target] = _REGISTRY[target]
        return fn

    return decorator


def unregister(target: OpTarget) -> Converter | None:
    """Remove and return the converter for ``target`` (None when there was none)."""
    return _REGISTRY.pop(target, None)


def get(target: OpTarget) -> Converter | None:
    """The converter registered for ``target``, or None."""
    return _REGISTRY.get(target)


def builtin(target: OpTarget) -> Converter | None:
    """trtcheck's own converter of ``target`` (None when it has none), whatever has been registered over it since."""
    return _BUILTINS.get(target)


def builtin_owner(fn: Any, part: str) -> OpTarget | None:
    """The op whose built-in converter has ``fn`` as its ``part`` ("fn" or "validator"), or None: how a repro
    records a user's override that reuses a built-in piece (``register(op, override=True,
    validator=saved.validator)``), which is a closure no other process can import by name."""
    if fn is None:
        return None
    for target, converter in _BUILTINS.items():
        if getattr(converter, part) is fn:
            return target
    return None


def registered_targets() -> frozenset[OpTarget]:
    """Every target with a registered converter."""
    return frozenset(_REGISTRY)


def verdict(node: torch.fx.Node) -> Verdict:
    """The registry's answer for ``node``, its converter's validator run once: the one entry point."""
    if node.op != "call_function":
        return Verdict(False, reason=f"a {node.op} node is not an op call")
    converter = _REGISTRY.get(node.target)
    if converter is None:
        name = str(node.target) if isinstance(node.target, torch._ops.OpOverload) else getattr(node.target, "__name__", str(node.target))
        return Verdict(False, reason=f"no converter for {name}")
    return converter.judge(node)


def is_convertible(node: torch.fx.Node) -> bool:
    """True when a registered converter accepts ``node`` (``verdict(node)`` as a bool): the default
    ``support`` predicate, for callers that compose it with their own (``lambda n: ... and is_convertible(n)``)."""
    return verdict(node).accepted


class Snapshot:
    """Context manager restoring the registry on exit: for tests that register throwaway converters.

    It restores trtcheck's own converters too (a throwaway registered the built-in way, as trtcheck's tests do),
    so what ``builtin`` and ``builtin_owner`` answer afterwards is what they answered before."""

    def __enter__(self) -> Snapshot:
        self._saved = dict(_REGISTRY)
        self._saved_builtins = dict(_BUILTINS)
        return self

    def __exit__(self, *exc: object) -> None:
        _REGISTRY.clear()
        _REGISTRY.update(self._saved)
        _BUILTINS.clear()
        _BUILTINS.update(self._saved_builtins)


# ``operator.getitem`` picks one result of a multi-output op; its "conversion" is an index into the
# producer's ONNX outputs, which the conversion context resolves itself. It is convertible only when
# it selects from a converted tuple, i.e. when its producer is convertible.
def _getitem_validator(node: torch.fx.Node) -> bool:
    producer = node.args[0]
    return isinstance(producer, torch.fx.Node) and is_convertible(producer)


def _convert_getitem(ctx: ConversionContext, node: torch.fx.Node) -> str:
    producer, index = node.args
    names = ctx.names(producer)
    if isinstance(names, str):
        raise TypeError(f"getitem on a single-output value {producer.name}")
    return names[index]


register(operator.getitem, validator=_getitem_validator, _builtin=True)(_convert_getitem)
