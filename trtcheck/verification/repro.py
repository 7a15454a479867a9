"""Repro: everything needed to rerun one failing check, written to a folder a developer can run or attach.

This module is the one place that writes and reads the two folder formats: ``write_repro`` / ``load_repro`` (a
failing ``verify``'s folder, which ``trtcheck reduce`` reads back) and ``write_subgraph_repro`` /
``load_subgraph_repro`` (one culprit ``reduce`` found). ``write_repro`` writes ``<directory>/<name>/``:

- ``graph.py``: the graph's readable code (``print_readable``), for reading only;
- ``model.pt``: the ``GraphModule``; ``load_graph_module(path)`` gives it back;
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

``model.pt`` and ``subgraph.pt`` are ``trtcheck.lowering.graph_file``'s format (the graph with its node metadata,
which a plain ``torch.save`` of a ``GraphModule`` loses); an ``ExportedProgram`` is stored as its ``.module()`` (the
form trtcheck partitions). ``converters.json`` is ``recorded_converters``'s record, and the two ``repro.py`` scripts
are ``repro_scripts``'s templates: this module writes and reads the folders, each of those is a room of its own.
"""

from __future__ import annotations

import dataclasses
import enum
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
from trtcheck.errors import ReproWriteWarning, TrtcheckError
from trtcheck.lowering.export import drop_guards
from trtcheck.lowering.graph_file import load_graph_module, save_graph_module
from trtcheck.names import resolve_modules
from trtcheck.settings import Settings

# register_recorded_converters: a repro.py written by an older trtcheck imports it from here, with load_repro
from trtcheck.verification.recorded_converters import register_recorded_converters as register_recorded_converters
from trtcheck.verification.recorded_converters import user_converters
from trtcheck.verification.repro_scripts import SCRIPT, SUBGRAPH_SCRIPT


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
        atomic_write(folder / "repro.py", SCRIPT.format(backend=backend, failure=_first_line(failure)))
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
    model = load_graph_module(folder / "model.pt")
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
    # fresh process that runs repro.py converts with trtcheck's own and passes
    atomic_write(folder / "converters.json", json.dumps(user_converters(module), indent=2) + "\n")
    atomic_write(folder / "repro.py", SUBGRAPH_SCRIPT.format(name=safe_name(folder.name), count=len(config.get("nodes", ()))))
    return folder


def load_subgraph_repro(folder: str | os.PathLike) -> tuple[torch.fx.GraphModule, tuple, dict[str, Any]]:
    """The module, the values at its inputs and the config a ``write_subgraph_repro`` folder holds."""
    folder = pathlib.Path(folder)
    module = load_graph_module(folder / "subgraph.pt")
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
    values). A symbolic shape is not stored (``graph_file``), and a lowered graph recomputes it, but a reduced
    culprit is converted as it is: without it the engine has no shape or dtype for that value."""
    if all("val" in node.meta for node in module.graph.nodes if node.op not in ("output", "get_attr")):
        return
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        fakes = [mode.from_tensor(value) if isinstance(value, torch.Tensor) else value for value in inputs]
    FakeTensorProp(module, mode).propagate_dont_convert_inputs(*fakes)



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
