"""What the names in ``Settings`` mean: ``torch_executed_ops`` resolved against PyTorch's op registry, and
``torch_executed_modules`` against a lowered graph's module stacks.

``Settings`` itself holds values (``trtcheck.settings`` imports no torch, so the ``trtcheck`` command's
parser and the pytest plugin load without it); every entry point resolves the names with
``checked_settings`` before any work, so a typo is an error that suggests the nearest real names instead
of a setting that silently matches nothing. Where a node came from in the user's code (its module stack, file and
line) is ``trtcheck.provenance``'s; its ``from_source`` and ``node_source`` are importable from here too, where
``trtcheck.verification``'s reduce and localize import them.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from trtcheck.errors import SettingsError
from trtcheck.provenance import class_name, from_source, node_source  # noqa: F401
from trtcheck.settings import Autocast, Settings

OpSpec = str | torch._ops.OpOverload | torch._ops.OpOverloadPacket


@dataclass(frozen=True)
class OpMatcher:
    """Resolved ``torch_executed_ops``: packets match every overload, overloads match only themselves.

    ``specs`` keeps each entry as the user wrote it with what it resolved to, so that an entry matching no
    node of the lowered graph is named as written (``unmatched``)."""

    packets: frozenset[torch._ops.OpOverloadPacket]
    overloads: frozenset[torch._ops.OpOverload]
    specs: tuple[tuple[str, Any], ...] = ()

    def __call__(self, target: Any) -> bool:
        if not (self.overloads or self.packets) or not isinstance(target, torch._ops.OpOverload):
            return False
        return target in self.overloads or target.overloadpacket in self.packets

    def unmatched(self, graphs: Iterable[torch.fx.Graph]) -> list[str]:
        """The entries that match no node of ``graphs`` (a lowered graph and its branches), as written."""
        if not self.specs:
            return []
        found: set[Any] = set()
        for graph in graphs:
            for node in graph.nodes:
                if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
                    found.update((node.target, node.target.overloadpacket))
        return [spec for spec, op in self.specs if op not in found]


@functools.lru_cache(maxsize=1)
def _known_op_names() -> tuple[str, ...]:
    """Every registered op as ``ns::name`` and ``ns::name.overload``, for suggestions."""
    names: set[str] = set()
    for qualified in torch._C._dispatch_get_all_op_names():
        names.add(qualified)
        names.add(qualified.split(".", 1)[0])
    return tuple(sorted(names))


def _unknown_op(spec: str, why: str, setting: str = "torch_executed_ops") -> SettingsError:
    normalized = spec.replace("::", ".").split(".")
    guess = f"{normalized[0]}::{'.'.join(normalized[1:])}" if len(normalized) > 1 else f"aten::{spec}"
    close = difflib.get_close_matches(guess, _known_op_names(), n=5, cutoff=0.6)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    return SettingsError(f"{setting}: unknown op {spec!r} ({why}).{hint}")


def resolve_op(spec: OpSpec, setting: str = "torch_executed_ops") -> torch._ops.OpOverload | torch._ops.OpOverloadPacket:
    """Turn one ``torch_executed_ops`` entry (or another ``setting``'s op name) into the overload or packet it names."""
    if isinstance(spec, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return spec
    if not isinstance(spec, str):
        raise SettingsError(
            f"{setting} entries must be op names or torch.ops objects, got {spec!r} ({type(spec).__name__})"
        )
    if "::" in spec:
        namespace, _, rest = spec.partition("::")
        parts = [namespace, *rest.split(".")]
    else:
        parts = spec.split(".")
    if len(parts) == 1:
        raise _unknown_op(spec, "write it with its namespace, e.g. 'aten::add'", setting)
    if len(parts) > 3 or not all(parts):
        raise _unknown_op(spec, "expected 'ns::op', 'ns.op' or 'ns.op.overload'", setting)
    namespace, op_name, *overload = parts
    try:
        packet = getattr(getattr(torch.ops, namespace), op_name)
    except (AttributeError, RuntimeError):
        raise _unknown_op(spec, f"no op {op_name!r} in namespace {namespace!r}", setting) from None
    if not overload:
        return packet
    try:
        return getattr(packet, overload[0])
    except (AttributeError, RuntimeError):
        raise SettingsError(
            f"{setting}: {packet} has no overload {overload[0]!r}; its overloads are "
            f"{', '.join(packet.overloads())}"
        ) from None


def resolve_ops(specs: Iterable[OpSpec]) -> OpMatcher:
    """Resolve every ``torch_executed_ops`` entry, failing on the first unknown one."""
    packets, overloads, written = set(), set(), []
    for spec in specs:
        op = resolve_op(spec)
        (packets if isinstance(op, torch._ops.OpOverloadPacket) else overloads).add(op)
        written.append((spec if isinstance(spec, str) else str(spec), op))
    return OpMatcher(frozenset(packets), frozenset(overloads), tuple(written))


def in_branch(path: str, name: str) -> str:
    """``name`` (a node's, or a nested branch's) under the branch path ``path`` that ``Partition.walk`` yields:
    ``true_graph_0/add``, or ``add`` itself at the top (``path`` empty). The one spelling every report, error, key
    and setting uses, so a name read from one (``explain``, a build error, the graph view) finds the node in another
    (``Settings.fp32_nodes`` takes it too)."""
    return f"{path}/{name}" if path else name


@dataclass(frozen=True)
class Fp32Nodes:
    """Resolved ``Settings.fp32_nodes``: node names of the lowered graph, and ops (an entry with ``::`` or ``.``)
    written as the strings ``str(op)`` gives (``"aten.add"`` for a packet, ``"aten.add.Tensor"`` for an overload),
    so that an engine can match the ATen target its ONNX nodes record (``conversion.node_origin``) without torch."""

    names: frozenset[str] = frozenset()
    ops: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.names or self.ops)

    def __call__(self, node_name: str, target: str) -> bool:
        """Whether the node ``node_name`` calling ``target`` (``"aten.add.Tensor"``) stays in float32."""
        return node_name in self.names or target in self.ops or target.rsplit(".", 1)[0] in self.ops

    def unmatched(self, graphs: Iterable[tuple[str, torch.fx.Graph]]) -> list[str]:
        """The entries that match no node of ``graphs`` (each with its branch path, as ``Partition.walk`` yields
        them): names no node has, spelled as trtcheck prints them (``false_graph_0/mul_1`` in a branch), and ops no
        node calls."""
        seen_names: set[str] = set()
        seen_ops: set[str] = set()
        for path, graph in graphs:
            for node in graph.nodes:
                if node.op == "call_function":
                    seen_names.add(in_branch(path, node.name))
                    if isinstance(node.target, torch._ops.OpOverload):
                        seen_ops.update((str(node.target), str(node.target.overloadpacket)))
        return sorted(self.names - seen_names) + sorted(self.ops - seen_ops)

    def in_branch(self, name: str) -> Fp32Nodes:
        """These entries as a branch graph ``name`` matches them: its nodes by the names under ``name/`` (the path
        stripped: ``false_graph_0/mul_1`` is that branch's ``mul_1``), and every op. A bare name is a node of the
        graph the entries were written for, never of a branch: one spelling for one node."""
        prefix = f"{name}/"
        return Fp32Nodes(frozenset(entry[len(prefix):] for entry in self.names if entry.startswith(prefix)), self.ops)

    def entries(self) -> list[str]:
        """The entries as ``Settings.fp32_nodes`` holds them: node names, then ops as ``str(op)`` spells them."""
        return sorted(self.names) + sorted(self.ops)


def is_op_name(spec: str) -> bool:
    """An ``fp32_nodes`` entry naming an op (``aten::add``, ``aten.add.Tensor``), not a node (``add_1``)."""
    return "::" in spec or "." in spec


def resolve_fp32_nodes(specs: Iterable[str], setting: str = "fp32_nodes") -> Fp32Nodes:
    """``Settings.fp32_nodes`` resolved: op names checked against PyTorch's registry (a typo suggests the nearest
    real names), node names kept as they are (checked against the lowered graph by the partitioner). ``setting``:
    the field an error names, the one the user wrote."""
    names, ops = set(), set()
    for spec in specs:
        if is_op_name(spec):
            ops.add(str(resolve_op(spec, setting)))
        else:
            names.add(spec)
    return Fp32Nodes(frozenset(names), frozenset(ops))


class ModuleMatcher:
    """Resolved ``torch_executed_modules``: answers "which forced module encloses this node?".

    ``paths`` maps each forced module path to the entry the user wrote for it (a path, or a class name
    that resolved to the paths of its instances). A node lies inside a forced module when a path ``p`` of
    its ``nn_module_stack`` equals a forced path ``f`` or starts with ``f + "."``: so a container that
    forward never calls itself (an ``nn.ModuleList`` iterated in a loop) forces every module inside it.
    Lookups are memoized by stack path, of which a graph has few however many nodes it has; a call costs a
    dict lookup per enclosing module.
    """

    __slots__ = ("_memo", "paths")

    def __init__(self, paths: Mapping[str, str] | None = None) -> None:
        self.paths: dict[str, str] = dict(paths or {})
        self._memo: dict[str, str | None] = {}

    def __call__(self, node: torch.fx.Node) -> str | None:
        """The entry of ``torch_executed_modules`` that forces ``node`` (its outermost forced module), or None."""
        if not self.paths:
            return None
        stack = node.meta.get("nn_module_stack")
        if not stack:
            return None
        memo = self._memo
        for entry in stack.values():
            path = entry[0]
            spec = memo.get(path, memo)
            if spec is memo:
                spec = memo[path] = self.forcing(path)
            if spec is not None:
                return spec  # type: ignore[return-value]
        return None

    def forcing(self, path: str) -> str | None:
        """The entry forcing the module at ``path``: the outermost forced path among it and its ancestors."""
        at = path.find("@")  # "lin@1", a repeated call, should such a suffix ever reach the path
        if at >= 0:
            path = path[:at]
        paths = self.paths
        end = path.find(".")
        while end >= 0:
            spec = paths.get(path[:end])
            if spec is not None:
                return spec
            end = path.find(".", end + 1)
        return paths.get(path)

    def __repr__(self) -> str:
        return f"ModuleMatcher({self.paths!r})"


# ``GraphModule.meta`` key: the model's ``{path: class qualname}``, recorded when names are first resolved
# against the model, so that a later resolution from the graph alone (``check_invariants``) still knows
# modules that no node's ``nn_module_stack`` names, such as an ``nn.ModuleList`` forward only iterates.
MODULE_CLASSES_META = "trtcheck_module_classes"


@dataclass
class _ModuleTable:
    classes: dict[str, str | None]  # every known module path -> its class qualname (None: only seen as an ancestor)
    used: set[str]  # paths some node lies inside: stack paths and their dotted ancestors

    def paths_of_class(self) -> dict[str, list[str]]:
        by_class: dict[str, list[str]] = {}
        for path, cls_name in self.classes.items():
            if cls_name is not None:
                for name in {cls_name, cls_name.rsplit(".", 1)[-1]}:
                    by_class.setdefault(name, []).append(path)
        return by_class

    def known_names(self) -> set[str]:
        names = {path for path in self.classes if path}
        names.update(self.paths_of_class())
        return names


def _module_table(graph: torch.fx.Graph, model: torch.nn.Module | None) -> _ModuleTable:
    classes: dict[str, str | None] = {}
    owner = getattr(graph, "owning_module", None)
    meta = getattr(owner, "meta", None)
    if model is not None and not isinstance(model, torch.fx.GraphModule):
        classes.update(
            (path, class_name(type(module))) for path, module in model.named_modules(remove_duplicate=False)
        )
        if isinstance(meta, dict):
            meta[MODULE_CLASSES_META] = dict(classes)
    elif isinstance(meta, dict) and isinstance(meta.get(MODULE_CLASSES_META), dict):
        classes.update(meta[MODULE_CLASSES_META])
    stack_paths: dict[str, Any] = {}
    for node in graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if stack:
            for path, cls in stack.values():
                if path not in stack_paths:
                    stack_paths[path] = cls
    used: set[str] = set()
    for path, cls in stack_paths.items():
        if classes.get(path) is None:
            classes[path] = class_name(cls)
        used.add(path)
        end = path.find(".")
        while end >= 0:
            used.add(path[:end])
            classes.setdefault(path[:end], None)
            end = path.find(".", end + 1)
    return _ModuleTable(classes, used)


def resolve_modules(
    specs: Iterable[str], graph: torch.fx.Graph, model: torch.nn.Module | None = None
) -> ModuleMatcher:
    """Resolve every ``torch_executed_modules`` entry to the module paths it forces.

    An entry is a submodule path (``"layer1.0"``, or a container such as ``"blocks"``: everything inside
    it) or a class name, short or qualified (every instance of the class, and everything inside each).
    Class names and paths come from ``model.named_modules()`` when ``model`` is a plain ``nn.Module``
    (recorded in the graph module's ``meta`` for later resolutions from the graph alone), and from the
    nodes' ``nn_module_stack``. An entry that names nothing is a ``SettingsError`` suggesting near names;
    so is one that names a real module inside which no node lies (forward never calls it).
    """
    specs = list(specs)
    if not specs:
        return ModuleMatcher()
    table = _module_table(graph, model)
    by_class = table.paths_of_class()
    forced: dict[str, str] = {}
    for spec in specs:
        if not isinstance(spec, str):
            raise SettingsError(f"torch_executed_modules entries must be strings, got {spec!r} ({type(spec).__name__})")
        targets = set(by_class.get(spec, ()))
        if spec and spec in table.classes:
            targets.add(spec)
        if not targets:
            close = difflib.get_close_matches(spec, sorted(table.known_names()), n=5, cutoff=0.5)
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
            raise SettingsError(
                f"torch_executed_modules: {spec!r} is neither a submodule path (like 'layer1.0') nor a module "
                f"class name of this model.{hint}"
            )
        if not targets & table.used:
            raise _never_called(spec, sorted(targets), table)
        for path in sorted(targets):
            forced.setdefault(path, spec)
    return ModuleMatcher(forced)


def _never_called(spec: str, targets: list[str], table: _ModuleTable) -> SettingsError:
    if targets == [spec]:
        what = f"{spec!r} is a submodule of this model"
    else:
        shown = ", ".join(repr(path) for path in targets[:5]) + (", ..." if len(targets) > 5 else "")
        what = f"{spec!r} is a module class of this model ({len(targets)} instance(s): {shown})"
    called = sorted(path for path in table.used if path)
    close = difflib.get_close_matches(targets[0], called, n=3, cutoff=0.5)
    hint = f" Modules forward does call nearby: {', '.join(close)}." if close else ""
    return SettingsError(
        f"torch_executed_modules: {what}, but no node of the lowered graph lies inside it: forward never calls "
        f"it (or everything it computes was traced away), so the entry would force nothing. Remove it, or name "
        f"a module forward calls.{hint}"
    )


def resolve_autocast_ops(specs: Iterable[str]) -> Fp32Nodes:
    """``Autocast.excluded_ops`` resolved as ``fp32_nodes`` resolves its op entries (a typo suggests the nearest real
    names); Torch-TensorRT's spelling ``"torch.ops.aten.flatten.using_ints"`` is accepted too."""
    ops = [spec.removeprefix("torch.ops.") for spec in specs]
    for spec in ops:
        if not is_op_name(spec):
            raise SettingsError(f"Autocast.excluded_ops entries are op names like 'aten::softmax' or 'aten.flatten.using_ints', "
                                f"got {spec!r}; keep a node by its name with Autocast.excluded_nodes or Settings.fp32_nodes")
    return resolve_fp32_nodes(ops, "Autocast.excluded_ops")


def checked_settings(settings: Settings | None) -> Settings:
    """``Settings.coerce(settings)`` with its op names resolved: what ``partition``, ``compile`` and ``verify``
    call first, so a bad value or an unknown op fails before anything is lowered."""
    settings = Settings.coerce(settings)
    resolve_ops(settings.torch_executed_ops)
    resolve_fp32_nodes(settings.fp32_nodes)
    policy = Autocast.of(settings.autocast)
    if policy is not None:
        resolve_autocast_ops(policy.excluded_ops)
    return settings
