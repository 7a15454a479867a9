"""The converters a failing graph used that are not trtcheck's own, recorded and registered again.

A wrong converter registered in a test (a user's ``register``, an ``override=True`` replacement) is part of a
failure: a repro rerun in a fresh process converts with trtcheck's own and passes. ``user_converters`` records
each such converter of a graph's ops by module, qualified name and source file (a repro folder's
``converters.json``); ``register_recorded_converters`` imports and registers them again before the repro runs,
and says which it cannot and why. It is its own room because both folder formats carry these records and both
scripts (``repro_scripts``) register them, while nothing here reads or writes a folder.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import os
import pathlib
import re
from typing import Any

import torch.fx

from trtcheck.conversion.registry import builtin as builtin_converter
from trtcheck.conversion.registry import builtin_owner, register
from trtcheck.conversion.registry import get as registered_converter
from trtcheck.lowering.graph_file import resolve_global, resolve_op_name


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
    importable only under pytest's path; of a script, its definitions only: ``_definitions``). Returns one line per
    record: what was registered, or why it could not be (a function defined inside another function, a file that
    is gone), so a repro that passes without it says why.
    """
    path = pathlib.Path(path)
    if not path.is_file():
        return []
    lines = []
    for record in json.loads(path.read_text()):
        target = resolve_op_name(record["target"])
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
            owner = builtin_converter(resolve_op_name(record["builtin_of"]))
        except Exception as error:  # noqa: BLE001 - an op this torch lacks: say so, as for a file that is gone
            return None, f"the op {record['builtin_of']} is not known here: {type(error).__name__}: {error}"
        if owner is None:
            return None, f"this trtcheck has no built-in converter of {record['builtin_of']}"
        return getattr(owner, part), ""
    module_name, qualname, file = record["module"], record["qualname"], record["file"]
    if "<locals>" in qualname:
        return None, f"{qualname} is defined inside a function; define it at module level"
    try:
        return resolve_global(module_name, qualname), ""
    except (ImportError, AttributeError):
        pass
    if not file or not pathlib.Path(file).is_file():
        return None, f"module {module_name} is not importable and its file {file} is gone"
    spec = importlib.util.spec_from_file_location(_file_module_name(module_name), file)
    module = importlib.util.module_from_spec(spec)
    try:
        if module_name == "__main__":  # a script: its definitions only, never its top-level calls (its verify)
            exec(_definitions(pathlib.Path(file)), module.__dict__)
        else:
            spec.loader.exec_module(module)
    except Exception as error:  # noqa: BLE001 - the user's module may fail outside its test session; say how
        fix = (" (the script's definitions were run without its top-level code: move the converter into a module of "
               "its own, or put the script's top-level code under `if __name__ == \"__main__\":`)") if module_name == "__main__" else ""
        return None, f"importing {file} failed: {type(error).__name__}: {error}{fix}"
    value: Any = module
    try:
        for part in qualname.split("."):
            value = getattr(value, part)
    except AttributeError:
        return None, f"{file} has no {qualname}"
    return value, ""


_DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _definitions(file: pathlib.Path) -> Any:
    """The code of the script ``file`` without what would run it: its imports, functions and classes (decorators
    included: a ``register`` decorator registers, as it did when the script ran) and assignments that call nothing
    (a converter's constants), but no other statement, so no ``verify`` call and no ``if __name__ == "__main__":``
    block runs. A script without that guard (as the README's examples are written) ran whole again from its
    repro, verifying a second time and writing a second folder."""
    tree = ast.parse(file.read_text(), filename=str(file))
    kept = [statement for statement in tree.body if isinstance(statement, _DEFINITIONS) or (
        isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None
        and not any(isinstance(inner, ast.Call) for inner in ast.walk(statement.value)))]
    return compile(ast.Module(body=kept, type_ignores=[]), str(file), "exec")


def _file_module_name(module_name: str) -> str:
    """The name a converter's module loaded from its file gets: ``trtcheck_repro_`` and ``module_name`` made one
    word of ``[A-Za-z0-9._-]`` (as ``repro.safe_name`` makes folder names)."""
    return "trtcheck_repro_" + (re.sub(r"[^A-Za-z0-9._-]+", "_", module_name).strip("._")[:120] or "repro")
