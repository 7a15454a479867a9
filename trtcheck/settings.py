"""``Settings``: the user's fallback knobs, and the resolution of the op and module names they contain.

Names are resolved once, up front, so that a typo is an error that suggests the nearest real names
instead of a setting that silently matches nothing.
"""

from __future__ import annotations

import difflib
import functools
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import torch
import torch.fx

from trtcheck.errors import SettingsError

OpSpec = str | torch._ops.OpOverload | torch._ops.OpOverloadPacket
SEGMENTATIONS = ("naive", "dependency_aware", "optimal")


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
        segmentation: ``"dependency_aware"`` (default, fewer segments), ``"naive"`` (one linear pass) or
            ``"optimal"`` (the fewest segments the graph's dependencies allow, then the fewest bytes crossing
            boundaries; never more segments than ``"dependency_aware"``: ``trtcheck.partitioning.optimal``).
        require_full_compilation: demand exactly one TensorRT segment, or fail naming what prevents it.
        precision: what the TensorRT builder may compute in: ``"fp32"`` (default: the network is built
            strongly typed, every tensor keeps the ONNX model's dtype), ``"fp16"`` or ``"bf16"`` (TensorRT
            may pick kernels of that precision for float32 layers, so results round like that dtype).
            ONNX Runtime always runs the model's own dtypes and ignores it.
        workspace_size: the TensorRT builder's workspace limit in bytes (default 1 GiB); 0 leaves
            TensorRT's own default (the device's memory).
        engine_cache: reuse TensorRT engines built earlier for the same ONNX, TensorRT version, device
            and builder settings (``trtcheck.engines.cache``).
        engine_cache_dir: where cached engines live; None reads ``$TRTCHECK_ENGINE_CACHE_DIR``, else
            ``~/.cache/trtcheck/engines``.
    """

    min_block_size: int = 5
    torch_executed_ops: Sequence[OpSpec] = field(default_factory=list)
    torch_executed_modules: Sequence[str] = field(default_factory=list)
    segmentation: Literal["naive", "dependency_aware", "optimal"] = "dependency_aware"
    require_full_compilation: bool = False
    precision: Literal["fp32", "fp16", "bf16"] = "fp32"
    workspace_size: int = 1 << 30
    engine_cache: bool = True
    engine_cache_dir: str | os.PathLike | None = None

    @classmethod
    def coerce(cls, settings: Any) -> Settings:
        """The validated ``Settings`` that ``compile``, ``partition`` and ``verify`` take as ``settings=``.

        ``None`` gives the defaults; a ``Settings`` is validated and returned as it is (not copied);
        anything else, a dict included, is a ``SettingsError`` that says how to build a ``Settings``.
        Every entry point calls this once, before lowering, so a bad value fails fast and clearly.
        """
        if settings is None:
            settings = cls()
        elif not isinstance(settings, Settings):
            raise _not_settings(settings)
        settings.validate()
        return settings

    def validate(self) -> None:
        """Raise ``SettingsError`` for any value that cannot mean what the user intended.

        Checks types and values, and resolves ``torch_executed_ops`` (op names need no model);
        ``torch_executed_modules`` names are resolved against the model by ``resolve_modules``.
        """
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
        if not isinstance(self.segmentation, str) or self.segmentation not in SEGMENTATIONS:
            close = (
                difflib.get_close_matches(self.segmentation, SEGMENTATIONS, n=1, cutoff=0.4)
                if isinstance(self.segmentation, str) else []
            )
            hint = f": did you mean {close[0]!r}?" if close else ""
            raise SettingsError(
                f"segmentation must be one of {', '.join(map(repr, SEGMENTATIONS))}, "
                f"got {self.segmentation!r}{hint}"
            )
        if not isinstance(self.require_full_compilation, bool):
            raise SettingsError(
                f"require_full_compilation must be True or False, got {self.require_full_compilation!r} "
                f"({type(self.require_full_compilation).__name__})"
            )
        _validate_engine_settings(self)
        for name, what in (("torch_executed_ops", "op names"), ("torch_executed_modules", "module names")):
            value = getattr(self, name)
            if isinstance(value, (str, bytes)):
                raise SettingsError(f"{name} must be a list of {what}, got the single string {value!r}: "
                                    f"write [{value!r}]")
            if not isinstance(value, (list, tuple, set, frozenset)):
                raise SettingsError(
                    f"{name} must be a list of {what}, got {value!r} ({type(value).__name__}): "
                    f"write [] for none, or e.g. [{_EXAMPLES[name]!r}]"
                )
        for spec in self.torch_executed_modules:
            if not isinstance(spec, str):
                raise SettingsError(
                    "torch_executed_modules entries must be strings (a submodule path like 'layer1.0' or a class "
                    f"name like 'BasicBlock'), got {_describe_entry(spec)}"
                )
        resolve_ops(self.torch_executed_ops)


PRECISIONS = ("fp32", "fp16", "bf16")


def _validate_engine_settings(settings: Settings) -> None:
    """The TensorRT builder's settings: ``precision``, ``workspace_size``, ``engine_cache``, ``engine_cache_dir``."""
    precision = settings.precision
    if not isinstance(precision, str) or precision not in PRECISIONS:
        aliases = {"float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16"}
        alias = aliases.get(str(precision).removeprefix("torch.")) if isinstance(precision, (str, torch.dtype)) else None
        hint = f": write {alias!r}" if alias else ""
        raise SettingsError(f"precision must be one of {', '.join(map(repr, PRECISIONS))}, got {precision!r}{hint}")
    size = settings.workspace_size
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise SettingsError(
            f"workspace_size must be a number of bytes >= 0 (0: TensorRT's default), got {size!r} "
            f"({type(size).__name__}); e.g. workspace_size=2 << 30 for 2 GiB"
        )
    if not isinstance(settings.engine_cache, bool):
        raise SettingsError(
            f"engine_cache must be True or False, got {settings.engine_cache!r} ({type(settings.engine_cache).__name__})"
        )
    directory = settings.engine_cache_dir
    if directory is not None and (not isinstance(directory, (str, os.PathLike)) or not os.fspath(directory)):
        raise SettingsError(
            f"engine_cache_dir must be a directory path or None ($TRTCHECK_ENGINE_CACHE_DIR or "
            f"~/.cache/trtcheck/engines), got {directory!r}; engine_cache=False turns the cache off"
        )


_EXAMPLES = {"torch_executed_ops": "aten::relu", "torch_executed_modules": "layer1.0"}
_SETTINGS_FIELDS = tuple(f.name for f in fields(Settings))


def _describe_entry(value: Any) -> str:
    """A non-string ``torch_executed_modules`` entry, and what to write instead when that is clear."""
    if isinstance(value, torch.nn.Module):
        return (f"a {type(value).__name__} module: write its path in the model (like 'layer1.0'), or its class "
                f"name {type(value).__name__!r} for every instance")
    if isinstance(value, type):
        return f"the class {value.__qualname__}: write {value.__name__!r}"
    return f"{value!r} ({type(value).__name__})"


def _not_settings(value: Any) -> SettingsError:
    if isinstance(value, Mapping):
        unknown = [key for key in value if key not in _SETTINGS_FIELDS]
        if unknown:
            hints = []
            for key in unknown:
                close = difflib.get_close_matches(str(key), _SETTINGS_FIELDS, n=1, cutoff=0.6)
                hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            return SettingsError(
                f"settings must be a trtcheck.Settings, got a {type(value).__name__}, and it has keys Settings "
                f"does not know: {', '.join(hints)}; the keys are {', '.join(_SETTINGS_FIELDS)}"
            )
        spelled = ", ".join(f"{key}={item!r}" for key, item in value.items())
        return SettingsError(
            f"settings must be a trtcheck.Settings, got a {type(value).__name__}: write trtcheck.Settings(**d), "
            f"here trtcheck.Settings({spelled})"
        )
    return SettingsError(
        f"settings must be a trtcheck.Settings (or None for the defaults), got {value!r} ({type(value).__name__}): "
        f"write e.g. trtcheck.Settings(min_block_size=3)"
    )


_dataclass_init = Settings.__init__


@functools.wraps(_dataclass_init)
def _settings_init(self: Settings, *args: Any, **kwargs: Any) -> None:
    unknown = [key for key in kwargs if key not in _SETTINGS_FIELDS]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(key, _SETTINGS_FIELDS, n=1, cutoff=0.6)
        hint = f": did you mean {close[0]!r}?" if close else f"; the settings are {', '.join(_SETTINGS_FIELDS)}"
        raise _UnknownSettingError(f"Settings has no setting {key!r}{hint}")
    _dataclass_init(self, *args, **kwargs)


class _UnknownSettingError(SettingsError, TypeError):
    """A misspelled ``Settings(...)`` keyword: a ``SettingsError``, and still the ``TypeError`` Python raises."""


Settings.__init__ = _settings_init  # type: ignore[method-assign]


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


def module_stack(node: torch.fx.Node) -> list[tuple[str, str]]:
    """The ``(qualified path, class qualname)`` of every module enclosing ``node``, outermost first."""
    stack = node.meta.get("nn_module_stack") or {}
    result = []
    for path, cls in stack.values():
        result.append((path, _class_name(cls)))
    return result


def _class_name(cls: Any) -> str:
    return cls if isinstance(cls, str) else f"{cls.__module__}.{cls.__qualname__}"


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
            (path, _class_name(type(module))) for path, module in model.named_modules(remove_duplicate=False)
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
            classes[path] = _class_name(cls)
        used.add(path)
        end = path.find(".")
        while end >= 0:
            used.add(path[:end])
            classes.setdefault(path[:end], None)
            end = path.find(".", end + 1)
    return _ModuleTable(classes, used)


def known_module_names(
    graph: torch.fx.Graph, model: torch.nn.Module | None = None
) -> set[str]:
    """Every module path and class name a ``torch_executed_modules`` entry may use."""
    return _module_table(graph, model).known_names()


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
