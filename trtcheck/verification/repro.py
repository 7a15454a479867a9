"""Repro: everything needed to rerun one failing check, written to a folder a developer can run or attach.

This module is the one place that writes and reads the two folder formats: ``write_repro`` / ``load_repro`` (a
failing ``verify``'s folder, which ``trtcheck reduce`` reads back) and ``write_subgraph_repro`` /
``load_subgraph_repro`` (one culprit ``reduce`` found). ``write_repro`` writes ``<directory>/<name>/``:

- ``graph.py``: the graph's readable code (``print_readable``), for reading only;
- ``model.pt``: the ``GraphModule``; ``torch.load(path, weights_only=False)`` gives it back;
- ``inputs.pt``: the inputs (``torch.save`` of a tuple);
- ``settings.json``: the ``Settings`` (ops as their names, e.g. ``"aten.add.Tensor"``);
- ``failure.txt``: what failed;
- ``converters.json``: the converters the graph's ops use that are not trtcheck's own (a user's ``register``,
  an ``override=True`` replacement), by module, name and file, which ``repro.py`` registers again first: a
  wrong converter registered in a test is part of the failure, and without it the repro passes;
- ``verify.json``: ``verify``'s other arguments (``dynamic_shapes`` with each Dim's name and range, ``rtol``,
  ``atol``, ``allow_fallbacks``, ``reference``, and ``name``, so the repro's report is titled as the failing one was);
- ``input_sets.pt``: the input sets ``verify`` compared after the example and the example again (the random
  ones it drew, at the sizes it drew for a dynamic model), passed back as ``inputs=``;
- ``localization.txt``: where the mismatch comes from (``verify``'s localization), when it was localized;
- ``repro.py``: ``python repro.py`` reruns ``trtcheck.verify`` on them (``load_repro``); ``--dry-run`` only loads
  and describes them.

A reduced culprit's folder (``write_subgraph_repro``) holds ``subgraph.pt`` (its nodes as a ``GraphModule``, saved
as ``model.pt`` is), ``inputs.pt`` (the real values at the cut), ``settings.json`` (backend, tolerances, the nodes
and ops, the failure), ``graph.py`` and ``repro.py``, which prints FAIL or PASS (``reduce.check_subgraph``).

How ``model.pt`` stores the graph, and why not plain ``torch.save(graph_module)``: the ``GraphModule`` of
``torch.export(...).module()`` does not pickle at all (it holds a local lambda), and an ordinary
``GraphModule`` pickles as its *Python code*, which is re-traced on load: the node metadata is lost
(``nn_module_stack``, which ``torch_executed_modules`` matches, and ``meta["val"]``, the shapes and dtypes
partitioning reads), and the pytree input flattening is re-traced into the graph (an input ``d["z"]``
becomes a ``getitem`` node). A repro that partitions differently reproduces nothing. So ``model.pt`` holds
the graph itself: each node's op, name, target (an ATen op by its name: ``OpOverload``s do not pickle),
args and kwargs; its ``nn_module_stack`` and ``stack_trace``; its ``meta["val"]`` as shape, stride, dtype
and device, rebuilt as fake tensors on load; the graph's code generator (which keeps the pytree in/out
specs, so the loaded module takes and returns the same structures); and the parameters, buffers,
constants and submodules its nodes use. The pickle's reducer is ``_rebuild_graph_module`` in this module,
so loading needs trtcheck importable, which running the repro needs anyway. A symbolic (dynamic) shape
is not stored: that node's ``meta["val"]`` is left out, and lowering recomputes it from the inputs.
An ``ExportedProgram`` is accepted too, and stored as its ``.module()`` (the form trtcheck partitions).
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import importlib.util
import inspect
import json
import operator
import os
import pathlib
import re
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.export.dynamic_shapes import Dim, _DerivedDim, _DimHint, _StaticDim

from trtcheck.atomic import atomic_write
from trtcheck.conversion.registry import builtin as builtin_converter
from trtcheck.conversion.registry import builtin_owner, register
from trtcheck.conversion.registry import get as registered_converter
from trtcheck.errors import ReproWriteWarning, TrtcheckError
from trtcheck.lowering.export import drop_guards
from trtcheck.names import resolve_modules
from trtcheck.settings import Settings

FORMAT = 1


def _standalone(settings: Settings, graph_module: torch.fx.GraphModule) -> Settings:
    """``settings`` with ``torch_executed_modules`` as the module paths they resolved to.

    A class name such as ``"ModuleList"`` resolves through the model's own module tree, which the saved
    graph no longer has; the paths it forced resolve from the graph's ``nn_module_stack`` alone.
    """
    if not settings.torch_executed_modules:
        return settings
    paths = resolve_modules(settings.torch_executed_modules, graph_module.graph).paths
    return dataclasses.replace(settings, torch_executed_modules=sorted(paths))


def write_repro(
    directory: str | os.PathLike,
    graph_module: torch.fx.GraphModule | torch.export.ExportedProgram,
    inputs: Sequence[Any],
    settings: Settings,
    backend: str,
    failure: str,
    name: str = "repro",
    *,
    input_sets: Sequence[Sequence[Any]] | None = None,
    options: Mapping[str, Any] | None = None,
    localization: str | None = None,
) -> pathlib.Path | None:
    """Write a standalone reproduction of a failing check into ``directory/<name>/``; return that folder.

    ``name`` (a pytest node id, say) is made safe for any filesystem; an existing folder of that name is overwritten
    file by file, each file atomically (written aside, then renamed over the old one), so a reader never sees a
    half-written file. The folder can be moved: ``repro.py`` finds its files next to itself. ``input_sets`` (the
    sets ``verify`` compared after the example and the example again) and ``options`` (its other arguments:
    ``dynamic_shapes``, ``rtol``, ``atol``, ``allow_fallbacks``, ``reference``) are what ``repro.py`` calls
    ``verify`` with again: a failure on a random size of a dynamic model reproduces only with the Dims, and a
    failure on a drawn set only with that set. ``localization`` (``str`` of verify's ``Localization``) is written as
    ``localization.txt``. When the folder cannot be written (``OSError``: an unwritable or
    uncreatable directory, a full disk), a ``ReproWriteWarning`` says so and None is returned: the failure being
    reported matters more than its repro, so it is never replaced by an I/O error.
    """
    if isinstance(graph_module, torch.export.ExportedProgram):
        graph_module = graph_module.module()
        drop_guards(graph_module)
    folder = pathlib.Path(directory) / safe_name(name)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(folder / "graph.py", graph_module.print_readable(print_output=False))
        save_graph_module(graph_module, folder / "model.pt")
        atomic_write(folder / "inputs.pt", lambda file: torch.save(tuple(inputs), file))
        atomic_write(folder / "settings.json", json.dumps(settings_to_json(_standalone(settings, graph_module)), indent=2) + "\n")
        atomic_write(folder / "failure.txt", failure if failure.endswith("\n") else failure + "\n")
        atomic_write(folder / "converters.json", json.dumps(user_converters(graph_module), indent=2) + "\n")
        atomic_write(folder / "verify.json", json.dumps(options_to_json(options or {}), indent=2) + "\n")
        if input_sets is not None:
            atomic_write(folder / "input_sets.pt", lambda file: torch.save([tuple(s) for s in input_sets], file))
        else:
            (folder / "input_sets.pt").unlink(missing_ok=True)  # an earlier failure's, in a folder of this name
        if localization is not None:
            atomic_write(folder / "localization.txt", localization if localization.endswith("\n") else localization + "\n")
        else:
            (folder / "localization.txt").unlink(missing_ok=True)
        atomic_write(folder / "repro.py", _SCRIPT.format(backend=backend, failure=_first_line(failure)))
    except OSError as error:
        reason = error.strerror or str(error)
        warnings.warn(
            ReproWriteWarning(
                f"trtcheck: could not write the repro to {folder}: {error}. The check's result is unaffected; "
                "point the report directory (--trtcheck-report, or verify(report_dir=...)) somewhere writable",
                folder, reason,
            ),
            stacklevel=2,
        )
        return None
    return folder


@dataclasses.dataclass
class ReproCase:
    """What a repro folder recorded of a failing ``verify`` call (``load_repro``)."""

    model: torch.fx.GraphModule
    example_inputs: tuple
    settings: Settings
    input_sets: list[tuple] | None  # the sets compared after the examples; None: an older folder, drawn again
    dynamic_shapes: Any
    rtol: float | None = None  # the tolerances verify was given (None: the dtype's defaults)
    atol: float | None = None
    options: dict[str, Any] = dataclasses.field(default_factory=dict)  # every recorded keyword of verify (verify.json)
    not_recorded: list[str] = dataclasses.field(default_factory=list)  # what verify.json could not hold, and why
    failure: str = ""  # failure.txt


def load_repro(folder: str | os.PathLike) -> ReproCase:
    """The graph, inputs, settings, compared input sets and ``verify``'s recorded keywords (Dims and tolerances among
    them) of a folder ``write_repro`` wrote: what its ``repro.py`` verifies again, and ``trtcheck reduce repro_dir/``
    reduces. A folder without ``model.pt``, ``inputs.pt`` or ``settings.json`` is a ``TrtcheckError`` saying so."""
    folder = pathlib.Path(folder)
    missing = [name for name in ("model.pt", "inputs.pt", "settings.json") if not (folder / name).is_file()]
    if missing:
        raise TrtcheckError(f"{folder} is not a trtcheck repro folder: it has no {', '.join(missing)}")
    model = torch.load(folder / "model.pt", weights_only=False)
    inputs = tuple(torch.load(folder / "inputs.pt", weights_only=False))
    sets = torch.load(folder / "input_sets.pt", weights_only=False) if (folder / "input_sets.pt").is_file() else None
    stored = json.loads((folder / "verify.json").read_text()) if (folder / "verify.json").is_file() else {}
    options, not_recorded = options_from_json(stored)
    settings = Settings(**json.loads((folder / "settings.json").read_text()))
    failure = (folder / "failure.txt").read_text() if (folder / "failure.txt").is_file() else ""
    return ReproCase(model, inputs, settings, sets, options.get("dynamic_shapes"), options.get("rtol"), options.get("atol"),
                     options, not_recorded, failure)


def write_subgraph_repro(
    folder: str | os.PathLike, module: torch.fx.GraphModule, inputs: Sequence[Any], config: Mapping[str, Any]
) -> pathlib.Path:
    """Write one reduced culprit (``reduce``): ``module`` (its nodes cut out), fed ``inputs`` (the real values at the
    cut), with ``config`` (``backend``, ``rtol``, ``atol``, ``failure``, ``nodes``, ``ops``) as a standalone folder
    whose ``repro.py`` prints FAIL (exit 1) or PASS (exit 0). Returns the folder."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = {**config, "dims": _symbolic_sizes(module)}  # a dynamic model's sizes at the cut, for reading
    atomic_write(folder / "graph.py", module.print_readable(print_output=False))
    save_graph_module(module, folder / "subgraph.pt")
    atomic_write(folder / "inputs.pt", lambda file: torch.save(tuple(inputs), file))
    atomic_write(folder / "settings.json", json.dumps(dict(config), indent=2) + "\n")
    # the converters the culprit's ops had when it failed (a user's register, an override): without them the
    # fresh process that runs repro.py converts with trtcheck's own and passes (issue 43, item 8)
    atomic_write(folder / "converters.json", json.dumps(user_converters(module), indent=2) + "\n")
    atomic_write(folder / "repro.py", _SUBGRAPH_SCRIPT.format(name=safe_name(folder.name), count=len(config.get("nodes", ()))))
    return folder


def load_subgraph_repro(folder: str | os.PathLike) -> tuple[torch.fx.GraphModule, tuple, dict[str, Any]]:
    """The module, the values at its inputs and the config a ``write_subgraph_repro`` folder holds."""
    folder = pathlib.Path(folder)
    module = torch.load(folder / "subgraph.pt", weights_only=False)  # a torch.fx.GraphModule
    inputs = tuple(torch.load(folder / "inputs.pt", weights_only=False))
    _restore_values(module, inputs)
    return module, inputs, json.loads((folder / "settings.json").read_text())


def _symbolic_sizes(module: torch.fx.GraphModule) -> dict[str, list[str]]:
    """Each placeholder of ``module`` whose ``meta["val"]`` has a symbolic size (a dynamic model's Dim), as its
    sizes' names (``["s0", "8"]``): what a reduced repro of a dynamic model was cut at."""
    sizes = {}
    for node in module.graph.find_nodes(op="placeholder"):
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor) and any(not isinstance(size, int) for size in value.shape):
            sizes[node.name] = [str(size) for size in value.shape]
    return sizes


def _restore_values(module: torch.fx.GraphModule, inputs: Sequence[Any]) -> None:
    """Give every node of a loaded subgraph its ``meta["val"]`` again, at the sizes of ``inputs`` (its recorded
    values). A symbolic shape is not stored (module docstring), and a lowered graph recomputes it, but a reduced
    culprit is converted as it is: without it the engine has no shape or dtype for that value (issue 43, item 9)."""
    if all("val" in node.meta for node in module.graph.nodes if node.op not in ("output", "get_attr")):
        return
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        fakes = [mode.from_tensor(value) if isinstance(value, torch.Tensor) else value for value in inputs]
    FakeTensorProp(module, mode).propagate_dont_convert_inputs(*fakes)


def user_converters(graph_module: torch.fx.GraphModule) -> list[dict[str, Any]]:
    """The registered converters of the graph's ops (branch graphs included) that are not trtcheck's own, as
    ``{"target", "converter", "validator"}`` records (each callable by module, qualified name and source file)."""
    records: dict[str, dict[str, Any]] = {}
    for module in graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            converter = registered_converter(node.target) if node.op == "call_function" else None
            if converter is not None and not converter.builtin and str(node.target) not in records:
                records[str(node.target)] = {
                    "target": str(node.target),
                    "converter": _callable_record(converter.fn, "fn"),
                    "validator": _callable_record(converter.validator, "validator") if converter.validator is not None else None,
                }
    return list(records.values())


def _callable_record(fn: Any, part: str) -> dict[str, Any]:
    """``fn`` by module, qualified name and file; and, when it is the ``part`` ("fn" or "validator") of one of
    trtcheck's own converters (an override keeping the built-in validator, the README's pattern), ``builtin_of``:
    that op's name, so the loading process re-attaches its own built-in one (a closure, not importable by name)."""
    try:
        file = inspect.getsourcefile(fn)
    except TypeError:  # a builtin or C function
        file = None
    record = {"module": getattr(fn, "__module__", None), "qualname": getattr(fn, "__qualname__", repr(fn)), "file": file}
    owner = builtin_owner(fn, part)
    if owner is not None:
        record["builtin_of"] = str(owner)
    return record


def register_recorded_converters(path: str | os.PathLike) -> list[str]:
    """Register again the converters ``converters.json`` recorded (``repro.py`` calls it before verifying).

    Each callable is imported by its module name, else loaded from its recorded file (a test module is
    importable only under pytest's path). Returns one line per record: what was registered, or why it could
    not be (a function defined inside another function, a file that is gone), so a repro that passes without
    it says why.
    """
    path = pathlib.Path(path)
    if not path.is_file():
        return []
    lines = []
    for record in json.loads(path.read_text()):
        target = _resolve_op_name(record["target"])
        converter, why = _load_callable(record["converter"], "fn")
        validator, why_validator = _load_callable(record["validator"], "validator") if record["validator"] else (None, "")
        name = _callable_name(record["converter"])
        if converter is None or (record["validator"] and validator is None):
            lines.append(
                f"NOT registered: the failure used {name} for {record['target']}, which cannot be imported here "
                f"({why or why_validator}); register it before running this script, or the failure may not reproduce"
            )
            continue
        register(target, validator=validator, override=True)(converter)
        lines.append(f"registered {name} for {record['target']} (not one of trtcheck's own converters)")
    return lines


def _callable_name(record: dict[str, Any]) -> str:
    if record.get("builtin_of"):
        return f"trtcheck's own converter of {record['builtin_of']}"
    return f"{record['module']}.{record['qualname']}"


def _load_callable(record: dict[str, Any], part: str) -> tuple[Any, str]:
    if record.get("builtin_of"):  # a piece of a built-in converter: this process's own one of that op
        try:
            owner = builtin_converter(_resolve_op_name(record["builtin_of"]))
        except Exception as error:  # noqa: BLE001 - an op this torch lacks: say so, as for a file that is gone
            return None, f"the op {record['builtin_of']} is not known here: {type(error).__name__}: {error}"
        if owner is None:
            return None, f"this trtcheck has no built-in converter of {record['builtin_of']}"
        return getattr(owner, part), ""
    module_name, qualname, file = record["module"], record["qualname"], record["file"]
    if "<locals>" in qualname:
        return None, f"{qualname} is defined inside a function; define it at module level"
    try:
        return _resolve_global(module_name, qualname), ""
    except (ImportError, AttributeError):
        pass
    if not file or not pathlib.Path(file).is_file():
        return None, f"module {module_name} is not importable and its file {file} is gone"
    spec = importlib.util.spec_from_file_location(f"trtcheck_repro_{safe_name(module_name)}", file)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # noqa: BLE001 - the user's module may fail outside its test session; say how
        return None, f"importing {file} failed: {type(error).__name__}: {error}"
    value: Any = module
    try:
        for part in qualname.split("."):
            value = getattr(value, part)
    except AttributeError:
        return None, f"{file} has no {qualname}"
    return value, ""


def save_graph_module(graph_module: torch.fx.GraphModule, path: pathlib.Path) -> None:
    """``torch.save`` ``graph_module`` to ``path`` (atomically) as its nodes, code generator and state, not as its
    class: a GraphModule pickles by its generated code's module, which the loading process does not have, so the
    file loads with trtcheck alone, without the model's code."""
    saved = _SavedGraphModule(graph_module)
    atomic_write(path, lambda file: torch.save(saved, file))


def safe_name(name: str) -> str:
    """``name`` as one folder name valid everywhere: ``[A-Za-z0-9._-]``, at most 120 characters."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")[:120]
    return cleaned or "repro"


def settings_to_json(settings: Settings) -> dict[str, Any]:
    """``dataclasses.asdict(settings)`` made JSON: ops by name (``str(op)``), which ``Settings`` accepts back."""

    def plain(value: Any) -> Any:
        if isinstance(value, (str, int, float, bool)) or value is None:
            return value
        if isinstance(value, enum.Enum):
            return plain(value.value)
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, (list, tuple, set, frozenset)):
            return [plain(v) for v in value]
        return str(value)  # torch.ops.aten.add.Tensor -> "aten.add.Tensor"

    return plain(dataclasses.asdict(settings))


def options_to_json(options: Mapping[str, Any]) -> dict[str, Any]:
    """``verify``'s keyword arguments as JSON; ``dynamic_shapes`` by ``dynamic_shapes_to_json``. One that cannot be
    stored (a Dim derived by a non-linear function) is left out and named under ``"not_recorded"``, which
    ``repro.py`` prints."""
    stored: dict[str, Any] = {}
    for key, value in options.items():
        try:
            if key == "dynamic_shapes":
                value = dynamic_shapes_to_json(value)
            elif key in ("rtol", "atol") and value is not None:
                value = float(value)  # verify takes a tensor or numpy scalar as well
            stored[key] = json.loads(json.dumps(value))
        except (TypeError, ValueError) as error:
            stored.setdefault("not_recorded", []).append(f"{key}: {error}")
    return stored


def options_from_json(stored: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``options_to_json``'s record back as ``verify``'s keyword arguments, and what could not be recorded."""
    options = {key: value for key, value in stored.items() if key != "not_recorded"}
    if "dynamic_shapes" in options:
        options["dynamic_shapes"] = dynamic_shapes_from_json(options["dynamic_shapes"])
    return options, list(stored.get("not_recorded", []))


def dynamic_shapes_to_json(spec: Any) -> Any:
    """torch.export's ``dynamic_shapes`` as JSON: each ``Dim`` as its name and range (an unbounded maximum as
    None), a derived Dim (``2 * batch + 1``) as its root with scale and offset, a hint (``Dim.AUTO``) by name,
    and containers tagged (``{"tuple": [...]}``, ``{"dict": [[key, value], ...]}``) so that a dict's int keys
    (dim indices) and a tuple stay what they were."""
    def bound(value: Any) -> int | None:
        try:
            return operator.index(value)  # an int, a numpy integer
        except TypeError:
            return None  # torch's unbounded maximum is sympy's int_oo

    if spec is None or (isinstance(spec, int) and not isinstance(spec, bool)):
        return spec
    if isinstance(spec, _DimHint):
        return {"hint": spec.type.name, "min": bound(spec.min), "max": bound(spec.max)}
    if isinstance(spec, _DerivedDim):
        offset = spec.fn(0)
        return {"derived": dynamic_shapes_to_json(spec.root), "scale": spec.fn(1) - offset, "offset": offset}
    if isinstance(spec, _StaticDim):
        return int(spec.min)
    if isinstance(spec, Dim):
        return {"Dim": spec.__name__, "min": bound(spec.min), "max": bound(spec.max)}
    if isinstance(spec, dict):
        return {"dict": [[key, dynamic_shapes_to_json(value)] for key, value in spec.items()]}
    if isinstance(spec, (tuple, list)):
        return {"tuple" if isinstance(spec, tuple) else "list": [dynamic_shapes_to_json(value) for value in spec]}
    raise TypeError(f"cannot record {spec!r} of dynamic_shapes")


def dynamic_shapes_from_json(stored: Any) -> Any:
    """``dynamic_shapes_to_json``'s record back as ``dynamic_shapes``: Dims of one name are one Dim object."""
    dims: dict[str, Any] = {}

    def decode(value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        if "hint" in value:
            hint = getattr(Dim, value["hint"])
            bounds = {key: value[key] for key in ("min", "max") if value[key] is not None}
            return hint(**bounds) if bounds else hint
        if "derived" in value:
            root = decode(value["derived"])
            dim = root * value["scale"] if value["scale"] != 1 else root
            return dim + value["offset"] if value["offset"] else dim
        if "Dim" in value:
            bounds = {key: value[key] for key in ("min", "max") if value[key] is not None}
            return dims.setdefault(value["Dim"], Dim(value["Dim"], **bounds))
        if "dict" in value:
            return {key: decode(item) for key, item in value["dict"]}
        if "tuple" in value:
            return tuple(decode(item) for item in value["tuple"])
        return [decode(item) for item in value["list"]]

    return decode(stored)


def _first_line(text: str) -> str:
    line = next((line for line in text.strip().splitlines() if line.strip()), "")
    return line.replace('"""', "'''")[:200].replace("\\", "\\\\")


class _NodeRef:
    """An argument that is another node's value, by that node's name."""

    def __init__(self, name: str) -> None:
        self.name = name


class _OpRef:
    """An ``OpOverload``/``OpOverloadPacket`` or a higher-order op (``torch.cond``: unpicklable) by its qualified name."""

    def __init__(self, op: torch._ops.OpOverload | torch._ops.OpOverloadPacket | torch._ops.HigherOrderOperator) -> None:
        self.name = f"{op.namespace}.{op.name()}" if isinstance(op, torch._ops.HigherOrderOperator) else str(op)


class _GlobalRef:
    """A module-level callable (``operator.getitem``, a builtin) by module and qualified name."""

    def __init__(self, fn: Any) -> None:
        self.module, self.qualname = fn.__module__ or "builtins", fn.__qualname__
        if _resolve_global(self.module, self.qualname) is not fn:
            raise ValueError(f"cannot store {fn!r} in a repro: it is not reachable as {self.module}.{self.qualname}")


class _MemoryFormatRef:
    """A ``torch.memory_format`` by name: ``torch.save`` cannot pickle them (core ATen's ``clone`` takes one)."""

    def __init__(self, memory_format: torch.memory_format) -> None:
        self.name = str(memory_format).removeprefix("torch.")


class _ValueRef:
    """A node's ``meta["val"]`` tensor: what a fake tensor needs, without the tensor."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.shape, self.stride = tuple(int(s) for s in tensor.shape), tuple(int(s) for s in tensor.stride())
        self.dtype, self.device = tensor.dtype, str(tensor.device)


def _resolve_global(module: str, qualname: str) -> Any:
    value: Any = importlib.import_module(module)
    for part in qualname.split("."):
        value = getattr(value, part)
    return value


def _encode(value: Any) -> Any:
    """Node references, ops and callables in args/kwargs to picklable references."""

    def one(item: Any) -> Any:
        if isinstance(item, torch.fx.Node):
            return _NodeRef(item.name)
        if isinstance(item, (torch._ops.OpOverload, torch._ops.OpOverloadPacket, torch._ops.HigherOrderOperator)):
            return _OpRef(item)
        if isinstance(item, torch.memory_format):
            return _MemoryFormatRef(item)
        if callable(item) and not isinstance(item, (type, torch.nn.Module)) and hasattr(item, "__qualname__"):
            return _GlobalRef(item)
        return item

    return torch.fx.node.map_aggregate(value, one)


def _decode(value: Any, nodes: dict[str, torch.fx.Node]) -> Any:
    def one(item: Any) -> Any:
        if isinstance(item, _NodeRef):
            return nodes[item.name]
        if isinstance(item, _OpRef):
            return _resolve_op_name(item.name)
        if isinstance(item, _GlobalRef):
            return _resolve_global(item.module, item.qualname)
        if isinstance(item, _MemoryFormatRef):
            return getattr(torch, item.name)
        return item

    return torch.fx.node.map_aggregate(value, one)


def _resolve_op_name(name: str) -> Any:
    """``"aten.add.Tensor"`` (``str`` of an overload) or ``"aten.add"`` (of a packet) back to the op."""
    value: Any = torch.ops
    for part in name.split("."):
        value = getattr(value, part)
    return value


def _encode_val(value: Any) -> Any:
    """``meta["val"]`` with tensors as ``_ValueRef``; raises ``TypeError`` for symbolic shapes."""
    def one(item: Any) -> Any:
        if isinstance(item, torch.Tensor):
            if any(not isinstance(s, int) for s in (*item.shape, *item.stride())):
                raise TypeError("symbolic shape")
            return _ValueRef(item)
        if isinstance(item, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            raise TypeError("symbolic value")
        return item

    return torch.fx.node.map_aggregate(value, one)


def _decode_val(value: Any, mode: FakeTensorMode) -> Any:
    def one(item: Any) -> Any:
        if isinstance(item, _ValueRef):
            with mode:
                return torch.empty_strided(item.shape, item.stride, dtype=item.dtype, device=item.device)
        return item

    return torch.fx.node.map_aggregate(value, one)


def _node_meta(node: torch.fx.Node) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    stack = node.meta.get("nn_module_stack")
    if stack:  # classes as qualified names: settings.module_stack reads either
        meta["nn_module_stack"] = {
            key: (path, cls if isinstance(cls, str) else f"{cls.__module__}.{cls.__qualname__}")
            for key, (path, cls) in stack.items()
        }
    if isinstance(node.meta.get("stack_trace"), str):
        meta["stack_trace"] = node.meta["stack_trace"]
    if "val" in node.meta:
        try:
            meta["val"] = _encode_val(node.meta["val"])
        except TypeError:
            pass  # recomputed from the inputs by lowering
    return meta


class _SavedGraphModule:
    """Pickles as ``_rebuild_graph_module(payload)``: the graph's nodes, code generator and state."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        nodes, state = [], {}
        for node in gm.graph.nodes:
            target = node.target
            if node.op == "call_function":
                target = _encode(target)
            elif node.op in ("get_attr", "call_module"):
                value = _owned_attribute(gm, target)  # a cond's branch is a GraphModule: saved the same way
                state[target] = _SavedGraphModule(value) if isinstance(value, torch.fx.GraphModule) else value
            nodes.append((node.op, node.name, target, _encode(node.args), _encode(node.kwargs), _node_meta(node)))
        self.payload = {"format": FORMAT, "nodes": nodes, "state": state, "codegen": gm.graph._codegen}

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _rebuild_graph_module, (self.payload,)


def _owned_attribute(gm: torch.fx.GraphModule, target: str) -> Any:
    value: Any = gm
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _rebuild_graph_module(payload: dict[str, Any]) -> torch.fx.GraphModule:
    """Rebuild the ``GraphModule`` a ``_SavedGraphModule`` described (the unpickler calls this)."""
    if payload.get("format") != FORMAT:
        raise ValueError(f"model.pt has repro format {payload.get('format')!r}; this trtcheck reads {FORMAT}")
    graph = torch.fx.Graph()
    nodes: dict[str, torch.fx.Node] = {}
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    for op, name, target, args, kwargs, meta in payload["nodes"]:
        if op == "call_function":
            target = _decode(target, nodes)
        if op == "output":
            node = graph.output(_decode(args, nodes)[0])
        else:
            node = graph.create_node(op, target, _decode(args, nodes), _decode(kwargs, nodes), name=name)
        meta = dict(meta)
        if "val" in meta:
            meta["val"] = _decode_val(meta["val"], mode)
        node.meta.update(meta)
        nodes[node.name] = node
    graph._codegen = payload["codegen"]
    return torch.fx.GraphModule(payload["state"], graph)


_SCRIPT = '''\
#!/usr/bin/env python
"""Reproduce a failing trtcheck check: {failure}

Run from anywhere: ``python repro.py`` reruns the check (raising ``trtcheck.VerificationError`` while the
bug is there); ``python repro.py --dry-run`` only loads the model, inputs and settings and describes them.
The full failure is in failure.txt; graph.py shows the graph's code. Written by trtcheck.verification.repro.
"""

import argparse
import pathlib

import torch

import trtcheck
from trtcheck.verification.repro import load_repro, register_recorded_converters

HERE = pathlib.Path(__file__).resolve().parent
BACKEND = {backend!r}


def describe(value):
    if isinstance(value, torch.Tensor):
        return f"Tensor(shape={{tuple(value.shape)}}, dtype={{value.dtype}}, device={{value.device}})"
    if isinstance(value, (list, tuple)):
        return type(value).__name__ + "(" + ", ".join(describe(v) for v in value) + ")"
    if isinstance(value, dict):
        return "{{" + ", ".join(f"{{k!r}}: {{describe(v)}}" for k, v in value.items()) + "}}"
    return repr(value)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="load and describe everything, verify nothing")
    args = parser.parse_args(argv)

    case = load_repro(HERE)  # every file of this folder, read by the module that wrote it
    model, inputs, settings = case.model, case.example_inputs, case.settings  # a torch.fx.GraphModule, its inputs
    options, not_recorded, given = case.options, case.not_recorded, case.input_sets  # dynamic_shapes, rtol...
    print("recorded failure:", case.failure.strip().splitlines()[0])
    converters = register_recorded_converters(HERE / "converters.json")  # the user's own, as when it failed
    for line in converters:
        print("converter:", line)
    for line in not_recorded:
        print("NOT recorded, so not passed to verify:", line)
    if args.dry_run:
        nodes = list(model.graph.nodes)
        ops = sum(node.op == "call_function" for node in nodes)
        print(f"model: {{type(model).__name__}} with {{len(nodes)}} nodes ({{ops}} calls)")
        for index, value in enumerate(inputs):
            print(f"input {{index}}: {{describe(value)}}")
        print(f"settings: {{settings!r}}")
        print(f"verify options: {{options!r}}")
        print(f"input sets besides the example: {{len(given) if given is not None else 'drawn by verify'}}")
        print(f"backend: {{BACKEND}}")
        print("dry run: trtcheck.verify not called")
        return 0
    report = trtcheck.verify(model, inputs, settings=settings, backend=BACKEND, inputs=given, **options)
    print(report)
    missing = [line for line in converters if line.startswith("NOT registered")]
    print("verify passed: the failure did not reproduce" + (f" ({{len(missing)}} of its converters could not be registered: see above)"
                                                             if missing else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
'''


_SUBGRAPH_SCRIPT = '''\
#!/usr/bin/env python
"""{name}: {count} node(s) of a lowered graph whose engine differs from PyTorch, reduced by trtcheck.

``python repro.py`` converts subgraph.pt to ONNX, builds its engine on the recorded backend, runs it on the real
values recorded at its inputs (inputs.pt) and compares every output with PyTorch's (the tolerances and backend
are in settings.json); prints the comparison, then FAIL (exit 1) or PASS (exit 0). Needs trtcheck, not the
model's code. Written by trtcheck.verification.repro.
"""

import pathlib

from trtcheck.conversion import Snapshot
from trtcheck.verification.reduce import check_subgraph
from trtcheck.verification.repro import load_subgraph_repro, register_recorded_converters

HERE = pathlib.Path(__file__).resolve().parent


def main():
    module, inputs, config = load_subgraph_repro(HERE)  # the nodes as a torch.fx.GraphModule, the values at its inputs
    print("nodes:", ", ".join(f"{{n}} = {{o}}" for n, o in zip(config["nodes"], config["ops"])))
    with Snapshot():  # the user's converters (converters.json), registered for this check only
        converters = register_recorded_converters(HERE / "converters.json")  # as when it failed
        for line in converters:
            print("converter:", line)
        comparison = check_subgraph(module, inputs, config["backend"], config["rtol"], config["atol"])
    print(comparison)
    missing = [line for line in converters if line.startswith("NOT registered")]
    if comparison.passed and missing:
        print(f"({{len(missing)}} of the failure's converters could not be registered: see above)")
    print("PASS" if comparison.passed else "FAIL")
    return 0 if comparison.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
'''
