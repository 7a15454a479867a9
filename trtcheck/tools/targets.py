"""What a ``trtcheck`` command checks: a zoo name, the user's own factory, or a saved ``torch.export`` program.

    trtcheck partition resnet18                      # a zoo entry (trtcheck_zoo)
    trtcheck partition path/to/mine.py:build         # a function in a Python file
    trtcheck partition mypackage.models:build        # a function in an importable module
    trtcheck verify exported.pt2                     # torch.export.save(...) output

A factory takes no arguments and returns ``(model, example_inputs)``, ``example_inputs`` being the tuple
of ``forward``'s positional inputs, which is what a zoo factory returns too. A ``.pt2`` file holds an
``ExportedProgram``; it is lowered as it is, with the example inputs torch.export stored in it.

Every way a model spec can be wrong (no such file, no such attribute, a factory that raises or returns the
wrong thing, an unknown zoo name) is a ``ModelLoadError`` naming the problem and the fix: the command line
is where a user first meets trtcheck, and a traceback from inside ``importlib`` explains nothing.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import logging
import os
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from trtcheck.errors import LoweringError, ModelLoadError
from trtcheck.lowering.quantized import register_modelopt_ops

__all__ = ["MODEL_FORMS", "LoadedModel", "ModelLoadError", "load_model"]

MODEL_FORMS = (
    "a zoo name (resnet18), path/to/file.py:factory, package.module:factory, or a .pt2 file saved with "
    "torch.export.save"
)

Model = torch.nn.Module | torch.export.ExportedProgram


@dataclass
class LoadedModel:
    """A loaded model: its display name, the model (or ``ExportedProgram``) and its example inputs.

    ``input_sets`` are extra valid input sets for a model whose inputs are constrained (a zoo entry's
    ``input_sets``), None when random inputs drawn like the examples are fine.
    """

    name: str
    model_or_program: Model
    example_inputs: tuple[Any, ...]
    example_kwargs: dict[str, Any] = field(default_factory=dict)
    input_sets: list[tuple[Any, ...]] | None = None

    @property
    def is_program(self) -> bool:
        return isinstance(self.model_or_program, torch.export.ExportedProgram)

    def eager_model(self) -> torch.nn.Module:
        """What eager PyTorch runs: the model, or the program as a module (``ExportedProgram.module()``)."""
        if self.is_program:
            return self.model_or_program.module()
        return self.model_or_program


def load_model(spec: str) -> LoadedModel:
    """Load ``spec``: a ``.pt2`` file, ``file.py:factory``, ``package.module:factory`` or a zoo name."""
    if not isinstance(spec, str) or not spec.strip():
        raise ModelLoadError(f"no model given: pass {MODEL_FORMS}")
    spec = spec.strip()
    if spec.endswith(".pt2"):
        return _load_program(Path(spec))
    if ":" in spec:
        location, _, attribute = spec.rpartition(":")
        if not location or not attribute:
            raise ModelLoadError(f"{spec!r}: write the module or file before ':' and the factory after it, e.g. model.py:build")
        if _looks_like_file(location):
            module = _import_file(Path(location))
        else:
            module = _import_module(location)
        factory = _attribute(module, attribute, spec)
        return _call_factory(factory, spec)
    if _looks_like_file(spec):
        path = Path(spec)
        hint = f" ({path}: no such file)" if not path.exists() else ""
        raise ModelLoadError(
            f"{spec!r} is a file, but the factory is missing{hint}: write {spec}:FACTORY, FACTORY being a function "
            "returning (model, example_inputs)"
        )
    return _load_zoo(spec)


def _looks_like_file(location: str) -> bool:
    return location.endswith(".py") or "/" in location or os.sep in location


# --- .pt2 -----------------------------------------------------------------------------------------------


def _load_program(path: Path) -> LoadedModel:
    if not path.is_file():
        raise ModelLoadError(
            f"{path}: no such file; save a program with torch.export.save(torch.export.export(model, args), {str(path)!r})"
        )
    try:
        register_modelopt_ops(path)  # a quantized program calls ModelOpt's ops, which load only once registered
    except LoweringError as error:
        raise ModelLoadError(str(error)) from None
    logger = logging.getLogger("torch.export")  # it logs a traceback before raising for a bad file
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        program = torch.export.load(path)
    except Exception as error:  # noqa: BLE001 - torch.export.load raises many types for a bad file
        raise ModelLoadError(
            f"{path}: not a program saved by torch.export.save ({type(error).__name__}: {_first_line(error)}); "
            "save one with torch.export.save(torch.export.export(model, args), 'model.pt2')"
        ) from None
    finally:
        logger.setLevel(level)
    stored = getattr(program, "example_inputs", None)
    if stored is None:
        raise ModelLoadError(
            f"{path}: the program stores no example inputs (saved by a torch without them, or with "
            "example_inputs=None), so trtcheck cannot run it; re-export with torch 2.4+ "
            "(torch.export.export(model, args) keeps args), or pass a factory instead: file.py:factory "
            "returning (model, example_inputs)"
        )
    args, kwargs = stored
    return LoadedModel(path.name, program, tuple(args), dict(kwargs or {}))


# --- factories ------------------------------------------------------------------------------------------


def _import_file(path: Path) -> Any:
    if not path.is_file():
        raise ModelLoadError(f"{path}: no such file (write path/to/file.py:factory, the path relative to {Path.cwd()})")
    path = path.resolve()
    # A unique name per file: two files called model.py must not replace each other in sys.modules.
    name = f"trtcheck_model_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModelLoadError(f"{path}: not a Python file Python can import; name it *.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name while it runs
    with _on_path(path.parent):  # like `python file.py`: the file's own folder is importable
        try:
            spec.loader.exec_module(module)
        except BaseException as error:
            sys.modules.pop(name, None)
            if isinstance(error, KeyboardInterrupt):
                raise
            raise ModelLoadError(
                f"{path}: importing it raised {type(error).__name__}: {_first_line(error)}{_where(error, path)}\n"
                f"Fix the file (python {path} shows the full traceback)"
            ) from None
    return module


def _import_module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name and (name == error.name or name.startswith(error.name + ".")):
            raise ModelLoadError(
                f"no module named {error.name!r} (from {name}:...): install the package, run trtcheck from the "
                "folder that holds it, or give a file path: path/to/file.py:factory"
            ) from None
        raise ModelLoadError(f"importing {name} raised ModuleNotFoundError: {error}; install {error.name!r}") from None
    except Exception as error:  # noqa: BLE001 - whatever the user's module raises, said plainly
        raise ModelLoadError(
            f"importing {name} raised {type(error).__name__}: {_first_line(error)}{_where(error)}\n"
            f"Fix the module (python -c 'import {name}' shows the full traceback)"
        ) from None


def _attribute(module: Any, attribute: str, spec: str) -> Any:
    value = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            public = [n for n in dir(value) if not n.startswith("_")]
            close = difflib.get_close_matches(part, public, n=3, cutoff=0.5)
            callables = [
                n
                for n in public
                if callable(getattr(value, n, None)) and getattr(getattr(value, n), "__module__", None) == getattr(module, "__name__", None)
            ]
            hint = (
                f"; did you mean {', '.join(map(repr, close))}?"
                if close
                else (f"; it defines {', '.join(callables[:8])}" if callables else "")
            )
            where = getattr(module, "__file__", None) or getattr(module, "__name__", "the module")
            raise ModelLoadError(f"{spec}: {where} has no attribute {part!r}{hint}")
        value = getattr(value, part)
    return value


def _call_factory(factory: Any, spec: str) -> LoadedModel:
    if isinstance(factory, (torch.nn.Module, torch.export.ExportedProgram)) or not callable(factory):
        raise ModelLoadError(
            f"{spec} is a {type(factory).__name__}, not a factory: point at a function taking no arguments that "
            "returns (model, example_inputs), e.g. def build(): return MyModel().eval(), (torch.randn(1, 3),)"
        )
    try:
        result = factory()
    except Exception as error:  # noqa: BLE001 - the user's factory failing is their bug, said plainly
        raise ModelLoadError(
            f"{spec}: the factory raised {type(error).__name__}: {_first_line(error)}{_where(error)}\n"
            "Fix the factory: it must take no arguments and return (model, example_inputs)"
        ) from None
    model, inputs = _check_result(result, spec)
    return LoadedModel(spec, model, inputs)


def _check_result(result: Any, spec: str) -> tuple[Model, tuple[Any, ...]]:
    shape = "return (model, example_inputs), example_inputs being a tuple of forward's positional inputs: (x,) for one"
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        got = f"a {type(result).__name__}" if not isinstance(result, (tuple, list)) else f"{len(result)} values"
        raise ModelLoadError(f"{spec}: the factory returned {got}, not (model, example_inputs): {shape}")
    model, inputs = result
    if not isinstance(model, (torch.nn.Module, torch.export.ExportedProgram)):
        raise ModelLoadError(f"{spec}: the factory's model is a {type(model).__name__}, not a torch.nn.Module: {shape}")
    if isinstance(inputs, torch.Tensor):
        raise ModelLoadError(f"{spec}: example_inputs is a Tensor, not a tuple of inputs: return model, (x,)")
    if not isinstance(inputs, (tuple, list)):
        raise ModelLoadError(f"{spec}: example_inputs is a {type(inputs).__name__}, not a tuple: {shape}")
    return model, tuple(inputs)


# --- the zoo --------------------------------------------------------------------------------------------


def _load_zoo(name: str) -> LoadedModel:
    import trtcheck_zoo as models  # deferred: the zoo (torchvision) only for zoo names

    try:
        entry = models.get(name)
    except KeyError:
        close = difflib.get_close_matches(name, models.names(), n=3, cutoff=0.5)
        hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
        raise ModelLoadError(
            f"no zoo model named {name!r}{hint}. A model is {MODEL_FORMS} "
            "(zoo names: python -c 'import trtcheck_zoo; print(trtcheck_zoo.names())')"
        ) from None
    model, inputs = entry.build()
    input_sets = entry.input_sets() if entry.input_sets is not None else None
    return LoadedModel(name, model, tuple(inputs), input_sets=input_sets)


# --- helpers --------------------------------------------------------------------------------------------


class _on_path:
    """Put a folder first on ``sys.path`` for the duration (unless it is there already)."""

    def __init__(self, folder: Path) -> None:
        self.folder = str(folder)

    def __enter__(self) -> None:
        self.added = self.folder not in sys.path
        if self.added:
            sys.path.insert(0, self.folder)

    def __exit__(self, *exc: object) -> None:
        if self.added and self.folder in sys.path:
            sys.path.remove(self.folder)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else "(no message)"


def _where(error: BaseException, path: Path | None = None) -> str:
    """`` (at file.py:12)``: the innermost frame outside trtcheck, which is where the user's bug is."""
    if isinstance(error, SyntaxError) and error.filename:
        return f" (at {error.filename}:{error.lineno})"
    frames = [f for f in traceback.extract_tb(error.__traceback__) if "trtcheck/tools/targets.py" not in f.filename.replace(os.sep, "/")]
    frames = [f for f in frames if "importlib" not in f.filename] or frames
    if not frames:
        return ""
    frame = frames[-1]
    return f" (at {frame.filename}:{frame.lineno})"

