"""``Settings``: the user's fallback knobs, and the resolution of the op and module names they contain.

Names are resolved once, up front, so that a typo is an error that suggests the nearest real names
instead of a setting that silently matches nothing.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Union

import torch
import torch.fx

from trtcheck.errors import SettingsError

OpSpec = Union[str, torch._ops.OpOverload, torch._ops.OpOverloadPacket]
SEGMENTATIONS = ("naive", "dependency_aware")


@dataclass
class Settings:
    """How a model is split between TensorRT and PyTorch (the seed's "automatic fallback" knobs).

    Attributes:
        min_block_size: the fewest compute nodes (``operator.getitem`` not counted) a TensorRT segment may
            have; smaller runs fall back to PyTorch, since an engine call costs more than it saves.
        torch_executed_ops: ops forced to PyTorch. Accepts ``"aten::add"``, ``"aten.add"``,
            ``"aten.add.Tensor"``, ``torch.ops.aten.add`` and ``torch.ops.aten.add.Tensor``; a name
            without an overload matches every overload.
        torch_executed_modules: submodules forced to PyTorch, by class name (``"BasicBlock"`` or its
            qualified ``"torchvision.models.resnet.BasicBlock"``) or by qualified path (``"layer1.0"``).
        segmentation: ``"dependency_aware"`` (default, fewer segments) or ``"naive"`` (one linear pass).
        require_full_compilation: demand exactly one TensorRT segment, or fail naming what prevents it.
    """

    min_block_size: int = 5
    torch_executed_ops: Sequence[OpSpec] = field(default_factory=list)
    torch_executed_modules: Sequence[str] = field(default_factory=list)
    segmentation: Literal["naive", "dependency_aware"] = "dependency_aware"
    require_full_compilation: bool = False

    def validate(self) -> None:
        """Raise ``SettingsError`` for any value that cannot mean what the user intended."""
        if isinstance(self.min_block_size, bool) or not isinstance(self.min_block_size, int):
            raise SettingsError(
                f"min_block_size must be an int >= 1, got {self.min_block_size!r} "
                f"({type(self.min_block_size).__name__})"
            )
        if self.min_block_size < 1:
            raise SettingsError(
                f"min_block_size must be >= 1, got {self.min_block_size}: use 1 to keep every convertible "
                "node in TensorRT, or a larger value to drop small TensorRT segments"
            )
        if self.segmentation not in SEGMENTATIONS:
            raise SettingsError(
                f"segmentation must be one of {', '.join(map(repr, SEGMENTATIONS))}, got {self.segmentation!r}"
            )
        for name in ("torch_executed_ops", "torch_executed_modules"):
            if isinstance(getattr(self, name), (str, bytes)):
                raise SettingsError(f"{name} must be a list of names, got the single string {getattr(self, name)!r}: "
                                    f"write [{getattr(self, name)!r}]")
        resolve_ops(self.torch_executed_ops)


@dataclass(frozen=True)
class OpMatcher:
    """Resolved ``torch_executed_ops``: packets match every overload, overloads match only themselves."""

    packets: frozenset[torch._ops.OpOverloadPacket]
    overloads: frozenset[torch._ops.OpOverload]

    def __call__(self, target: Any) -> bool:
        if not (self.overloads or self.packets) or not isinstance(target, torch._ops.OpOverload):
            return False
        return target in self.overloads or target.overloadpacket in self.packets


@functools.lru_cache(maxsize=1)
def _known_op_names() -> tuple[str, ...]:
    """Every registered op as ``ns::name`` and ``ns::name.overload``, for suggestions."""
    names: set[str] = set()
    for qualified in torch._C._dispatch_get_all_op_names():
        names.add(qualified)
        names.add(qualified.split(".", 1)[0])
    return tuple(sorted(names))


def _unknown_op(spec: str, why: str) -> SettingsError:
    normalized = spec.replace("::", ".").split(".")
    guess = f"{normalized[0]}::{'.'.join(normalized[1:])}" if len(normalized) > 1 else f"aten::{spec}"
    close = difflib.get_close_matches(guess, _known_op_names(), n=5, cutoff=0.6)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    return SettingsError(f"torch_executed_ops: unknown op {spec!r} ({why}).{hint}")


def resolve_op(spec: OpSpec) -> torch._ops.OpOverload | torch._ops.OpOverloadPacket:
    """Turn one ``torch_executed_ops`` entry into the overload or packet it names."""
    if isinstance(spec, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return spec
    if not isinstance(spec, str):
        raise SettingsError(
            f"torch_executed_ops entries must be op names or torch.ops objects, got {spec!r} ({type(spec).__name__})"
        )
    if "::" in spec:
        namespace, _, rest = spec.partition("::")
        parts = [namespace, *rest.split(".")]
    else:
        parts = spec.split(".")
    if len(parts) == 1:
        raise _unknown_op(spec, "write it with its namespace, e.g. 'aten::add'")
    if len(parts) > 3 or not all(parts):
        raise _unknown_op(spec, "expected 'ns::op', 'ns.op' or 'ns.op.overload'")
    namespace, op_name, *overload = parts
    try:
        packet = getattr(getattr(torch.ops, namespace), op_name)
    except (AttributeError, RuntimeError):
        raise _unknown_op(spec, f"no op {op_name!r} in namespace {namespace!r}") from None
    if not overload:
        return packet
    try:
        return getattr(packet, overload[0])
    except (AttributeError, RuntimeError):
        raise SettingsError(
            f"torch_executed_ops: {packet} has no overload {overload[0]!r}; its overloads are "
            f"{', '.join(packet.overloads())}"
        ) from None


def resolve_ops(specs: Iterable[OpSpec]) -> OpMatcher:
    """Resolve every ``torch_executed_ops`` entry, failing on the first unknown one."""
    packets, overloads = set(), set()
    for spec in specs:
        op = resolve_op(spec)
        (packets if isinstance(op, torch._ops.OpOverloadPacket) else overloads).add(op)
    return OpMatcher(frozenset(packets), frozenset(overloads))


def module_stack(node: torch.fx.Node) -> list[tuple[str, str]]:
    """The ``(qualified path, class qualname)`` of every module enclosing ``node``, outermost first."""
    stack = node.meta.get("nn_module_stack") or {}
    result = []
    for path, cls in stack.values():
        cls_name = cls if isinstance(cls, str) else f"{cls.__module__}.{cls.__qualname__}"
        result.append((path, cls_name))
    return result


@dataclass(frozen=True)
class ModuleMatcher:
    """Resolved ``torch_executed_modules``: answers "which forced module encloses this node?"."""

    names: frozenset[str]

    def __call__(self, node: torch.fx.Node) -> str | None:
        if not self.names:
            return None
        for path, cls_name in module_stack(node):
            for candidate in (path, cls_name, cls_name.rsplit(".", 1)[-1]):
                if candidate in self.names:
                    return candidate
        return None


def known_module_names(
    graph: torch.fx.Graph, model: torch.nn.Module | None = None
) -> set[str]:
    """Every module path and class name a ``torch_executed_modules`` entry may use."""
    names: set[str] = set()
    if model is not None and not isinstance(model, torch.fx.GraphModule):
        for path, module in model.named_modules():
            cls = type(module)
            names.update({path, cls.__name__, f"{cls.__module__}.{cls.__qualname__}"})
    for node in graph.nodes:
        for path, cls_name in module_stack(node):
            names.update({path, cls_name, cls_name.rsplit(".", 1)[-1]})
    names.discard("")
    return names


def resolve_modules(
    specs: Iterable[str], graph: torch.fx.Graph, model: torch.nn.Module | None = None
) -> ModuleMatcher:
    """Check every ``torch_executed_modules`` entry names a real submodule path or class of the model."""
    specs = list(specs)
    if not specs:
        return ModuleMatcher(frozenset())
    known = known_module_names(graph, model)
    for spec in specs:
        if not isinstance(spec, str):
            raise SettingsError(f"torch_executed_modules entries must be strings, got {spec!r}")
        if spec not in known:
            close = difflib.get_close_matches(spec, sorted(known), n=5, cutoff=0.5)
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
            raise SettingsError(
                f"torch_executed_modules: {spec!r} is neither a submodule path (like 'layer1.0') nor a module "
                f"class name of this model.{hint}"
            )
    return ModuleMatcher(frozenset(specs))
