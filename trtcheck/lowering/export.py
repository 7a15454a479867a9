"""Lowering: any ``nn.Module`` to a core-ATen ``torch.fx.GraphModule`` with fake-tensor metadata.

Partitioning needs one uniform input: a graph of ATen overloads whose every value carries
``meta["val"]`` (shape and dtype) and whose nodes carry ``nn_module_stack`` (for module fallback).
``torch.export`` followed by ``run_decompositions()`` gives exactly that; a ``GraphModule`` that is
already ATen is taken as it is, and only its missing metadata is filled in.
"""

from __future__ import annotations

import contextlib
import io
import logging
import operator
import os
import re
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.graph import _PyTreeCodeGen, _PyTreeInfo
from torch.fx.passes.fake_tensor_prop import FakeTensorProp
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_unflatten

from trtcheck.errors import ExportRefusedError, LoweringError
from trtcheck.lowering.constants import FOLDED, fold_constants
from trtcheck.lowering.decompositions import core_aten_table, kept_whole
from trtcheck.lowering.graph import copy_graph_module, dead_nodes, is_aten_graph, writes_to
from trtcheck.lowering.inputs import check_dynamic_shapes, check_program_inputs, dim_names_of, program_ranges
from trtcheck.lowering.quantized import quantized_export, register_modelopt_ops
from trtcheck.lowering.symbols import DIM_NAMES, RANGES


def lower(
    model: torch.nn.Module | torch.export.ExportedProgram,
    example_inputs: Sequence[Any],
    example_kwargs: Mapping[str, Any] | None = None,
    *,
    dynamic_shapes: Any = None,
    keep: Callable[[Any], bool] | None = None,
) -> torch.fx.GraphModule:
    """Lower ``model`` to a core-ATen ``GraphModule``; ATen ``GraphModule`` inputs are reused as they are.

    An ATen ``GraphModule`` is returned as it is (only its missing ``meta["val"]`` are filled in): passes
    that need to rewrite a graph they do not own copy it first (``copy_graph_module``), which for large
    graphs costs more than partitioning itself. With ``dynamic_shapes`` it is exported again with them (its
    metadata fixes every size at the example's): a repro folder's saved graph of a dynamic model is such a graph.

    A ``torch.export.ExportedProgram`` (a ``.pt2`` file's content) is lowered as it is, without tracing
    again: only its core-ATen decompositions are run, so the graph is the one the user exported. Example inputs
    that do not fit it (``inputs.check_program_inputs``) are an ``InputMismatchError`` naming what it takes.

    ``dynamic_shapes`` is ``torch.export.export``'s argument (``torch.export.Dim`` per dynamic dimension),
    checked against the inputs before export runs (``inputs.check_dynamic_shapes``: a ``DynamicShapesError``
    names the entry that does not fit): the graph's metadata then carries symbolic sizes, and
    ``gm.meta[RANGES]`` each symbol's range (``symbol_ranges``), which shape analysis and the engines' shape
    profiles are built from.

    ``keep`` (the ``torch_executed_ops`` matcher, ``names.resolve_ops``) keeps the ops it matches out of
    decomposition, so an op forced to PyTorch is still there to force; ``gm.meta[KEPT]`` records which ops of
    the decomposition table were kept, so a lowering made for other settings is not reused for these.
    """
    if isinstance(model, (str, os.PathLike)):
        model = _load_program(model)
    if isinstance(model, torch.export.ExportedProgram):
        if dynamic_shapes is not None:
            raise LoweringError(
                "dynamic_shapes was given with an ExportedProgram: its dynamic dimensions were fixed when it was "
                "exported. Fix: pass dynamic_shapes to torch.export.export instead, or pass the nn.Module"
            )
        check_program_inputs(model, example_inputs, example_kwargs)  # the examples shape analysis will run on
        return _kept(lower_program(model, keep), keep)
    if not isinstance(model, torch.nn.Module):
        raise LoweringError(
            f"expected a torch.nn.Module, torch.fx.GraphModule or torch.export.ExportedProgram, got "
            f"{type(model).__name__}: wrap a function in an nn.Module whose forward calls it"
        )
    if not isinstance(example_inputs, (tuple, list)):
        raise LoweringError(
            f"example_inputs must be a tuple of the model's positional inputs, got {type(example_inputs).__name__}: "
            "write (x,) for a single input"
        )
    if isinstance(model, torch.fx.GraphModule) and is_aten_graph(model) and dynamic_shapes is None:
        return _reuse_aten_graph(model, example_inputs)
    return _kept(_export(model, tuple(example_inputs), dict(example_kwargs or {}), dynamic_shapes, keep), keep)


@dataclass(frozen=True)
class Source:
    """What ``compile`` and ``verify`` work from, for every kind of model they take: ``lowerable`` is what
    lowers (the ``nn.Module``, or the ``ExportedProgram``, lowered as exported), ``eager`` what runs in PyTorch
    (the module, or ``program.module()``), and the example inputs (a program's own when none are given)."""

    lowerable: torch.nn.Module | torch.export.ExportedProgram
    eager: torch.nn.Module
    example_args: tuple
    example_kwargs: dict


def source_of(model: Any, example_inputs: Sequence[Any] | None, example_kwargs: Mapping[str, Any] | None = None) -> Source:
    """The ``Source`` of ``model``: an ``nn.Module``, a ``torch.export.ExportedProgram`` or a ``.pt2`` file's path
    (``torch.export.save``). A program's stored example inputs serve when ``example_inputs`` is None."""
    if isinstance(model, (str, os.PathLike)):
        model = _load_program(model)
    if isinstance(model, torch.export.ExportedProgram):
        if example_inputs is None:
            stored = getattr(model, "example_inputs", None)
            if stored is None:
                raise LoweringError(
                    "the exported program stores no example inputs: pass example_inputs (the tuple it was exported with)"
                )
            example_inputs, example_kwargs = stored[0], {**dict(stored[1] or {}), **dict(example_kwargs or {})}
        if not isinstance(example_inputs, (tuple, list)):
            raise LoweringError(
                f"example_inputs must be a tuple of the program's positional inputs, got {type(example_inputs).__name__}: "
                "write (x,) for a single input"
            )
        check_program_inputs(model, example_inputs, example_kwargs)  # before eager (program.module()) runs on them
        return Source(model, model.module(), tuple(example_inputs), dict(example_kwargs or {}))
    if not isinstance(model, torch.nn.Module):
        raise LoweringError(
            f"expected a torch.nn.Module, torch.export.ExportedProgram or a .pt2 file's path, got {type(model).__name__}: "
            "wrap a function in an nn.Module whose forward calls it"
        )
    if example_inputs is None:
        raise LoweringError(f"example_inputs is required for {type(model).__name__}: the tuple of forward's positional inputs")
    if not isinstance(example_inputs, (tuple, list)):
        raise LoweringError(
            f"example_inputs must be a tuple of the model's positional inputs, got {type(example_inputs).__name__}: "
            "write (x,) for a single input"
        )
    return Source(model, model, tuple(example_inputs), dict(example_kwargs or {}))


KEPT = "trtcheck_kept_whole"
"""``GraphModule.meta`` key: the ops of the decomposition table a lowering kept whole (``core_aten_table(keep)``);
absent from a user's own ATen graph, which trtcheck never decomposed."""


def _kept(gm: torch.fx.GraphModule, keep: Callable[[Any], bool] | None) -> torch.fx.GraphModule:
    gm.meta[KEPT] = kept_whole(keep)
    return gm


def keeps(gm: torch.fx.GraphModule, keep: Callable[[Any], bool] | None) -> bool:
    """Whether lowering ``gm`` kept whole every op of the decomposition table that ``keep`` matches, and folded none
    it matches away (``constants.FOLDED``): a shared lowering (``LoweringCache``) serves settings whose forced ops it
    did not decompose or fold away."""
    if keep is not None and any(keep(op) for op in gm.meta.get(FOLDED, ())):
        return False
    return KEPT not in gm.meta or kept_whole(keep) <= gm.meta[KEPT]


def _load_program(path: str | os.PathLike) -> torch.export.ExportedProgram:
    """A ``.pt2`` file saved by ``torch.export.save``, loaded to be lowered as exported (ModelOpt's quantize ops
    registered first where the program holds them: ``quantized.register_modelopt_ops``)."""
    register_modelopt_ops(path)
    try:
        return torch.export.load(path)
    except Exception as error:  # torch.export.load raises many types for a bad file
        raise LoweringError(
            f"{os.fspath(path)}: not a program saved by torch.export.save ({type(error).__name__}: {_first_lines(error, 1)}); "
            "pass an nn.Module or ExportedProgram, or save one with torch.export.save(torch.export.export(model, args), 'model.pt2')"
        ) from error


def independent_inputs(args: Sequence[Any], kwargs: Mapping[str, Any] | None = None) -> tuple[tuple, dict]:
    """``args`` and ``kwargs`` with every Tensor that shares storage with an earlier one replaced by a copy.

    torch.export specializes a graph to the aliasing it sees: traced with ``(x, x)``, the graph reads one
    input twice and ignores the other, so the compiled module would be wrong for two different tensors.
    Copies make the example inputs independent, which is what a compiled module must accept.
    """
    seen: set[tuple[int, int]] = set()

    def own(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        if value.layout != torch.strided:  # it has no storage to compare, and export cannot take it
            raise LoweringError(
                f"an example input is a {value.layout} tensor (shape {tuple(value.shape)}): trtcheck compiles "
                "models over dense (strided) tensors only. Fix: pass it dense (x.to_dense()) and, if an op "
                "needs it sparse, convert it inside forward; the sparse ops then run in PyTorch"
            )
        storage = value.untyped_storage()
        key = (storage.data_ptr(), storage.nbytes())
        if key in seen and storage.nbytes():
            return value.clone()
        seen.add(key)
        return value

    return torch.utils._pytree.tree_map(own, (tuple(args), dict(kwargs or {})))


def _export(
    model: torch.nn.Module, args: tuple, kwargs: dict, dynamic_shapes: Any = None, keep: Callable[[Any], bool] | None = None
) -> torch.fx.GraphModule:
    if dynamic_shapes is not None:  # before export, whose IndexError or UserError would read as the model's fault
        check_dynamic_shapes(model, args, kwargs, dynamic_shapes)
    # torch.export prints a refused model's partial graph to stderr itself (``partial_fx_graph``, ~30 lines for a
    # two-Linear model): held with the log, for ``--verbose``, as the refusal already says what failed and where.
    with TorchLog() as log, contextlib.redirect_stderr(io.StringIO()) as printed:
        try:
            with quantized_export(model):  # a ModelOpt-quantized model exports as Torch-TensorRT exports it
                program = torch.export.export(model, args, kwargs, dynamic_shapes=dynamic_shapes)
        except Exception as error:  # noqa: BLE001 - torch.export raises many unrelated types
            refused: Exception | None = error
        else:
            refused = None
    if refused is not None:
        try:  # a forward that runs autograd is traced with make_fx: export's log of its refusal is then moot
            return _export_refused(model, args, kwargs, dynamic_shapes, keep, refused)
        except LoweringError as error:
            error.torch_log = "\n".join(filter(None, [log.text(), printed.getvalue().strip()]))
            raise
    log.replay()
    sys.stderr.write(printed.getvalue())
    gm = _module_of(_decompose(program, type(model).__name__, keep), keep)
    if dynamic_shapes is not None:
        gm.meta[DIM_NAMES] = dim_names_of(gm, model, args, kwargs, dynamic_shapes)
    return gm


def _export_refused(
    model: torch.nn.Module, args: tuple, kwargs: dict, dynamic_shapes: Any, keep: Callable[[Any], bool] | None, error: Exception
) -> torch.fx.GraphModule:
    """What torch.export's refusal means: inputs that do not fit the model, a forward running autograd (traced
    with make_fx instead, when it can be), dynamic dimensions the model does not keep, or a model export cannot
    trace; a ``LoweringError`` saying which, with the fix."""
    if _raise_if_inputs_do_not_fit(model, args, kwargs):  # eager ran fine, and ran autograd inside forward
        if dynamic_shapes is None:
            return _trace_through_autograd(model, args, kwargs, error, keep)
        raise LoweringError(
            f"{type(model).__name__}.forward runs autograd (torch.autograd.grad or backward), which torch.export "
            f"cannot trace ({type(error).__name__}: {_first_lines(error, 1)}); trtcheck traces such a forward "
            "with make_fx instead, which takes no dynamic_shapes. Fix: drop dynamic_shapes (compile once per size)"
        ) from error
    if dynamic_shapes is not None and _is_constraint_error(error):
        raise LoweringError(
            f"torch.export could not keep the dynamic dimensions of {type(model).__name__}: "
            f"{type(error).__name__}: {_first_lines(error, 6)}\nFix: follow export's suggestion above (a "
            "narrower Dim range, a static size, or a Dim shared between inputs), or drop that dimension "
            "from dynamic_shapes"
        ) from error
    first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    name, cause = type(model).__name__, _cause(error)
    at = f" at {cause}" if cause else ""
    if _packed_parameters(error):
        raise LoweringError(
            f"torch.export cannot trace {name}: it holds eager-mode quantized modules whose weights are packed "
            f"parameters ({type(error).__name__}: {first_line}), which torch.export cannot capture.\nFix: quantize "
            "for TensorRT with explicit Q/DQ instead (NVIDIA ModelOpt's mtq.quantize on the float model, which "
            "trtcheck verifies: docs/quantization.md), or verify the float model before torch.ao.quantization.convert"
        ) from error
    if _data_dependent(error):
        raise ExportRefusedError(
            f"torch.export could not trace {name}: Python control flow{at} depends on a tensor's values "
            f"({type(error).__name__}: {first_line})\nFix: at that line, express the branch with torch.cond or "
            "torch.where, assert what export cannot know with torch._check, or export the model without that part "
            "(its post-processing, say) and run it in PyTorch after the compiled module"
        ) from error
    custom_op = _op_without_fake_kernel(error)
    if custom_op:  # not an ExportRefusedError: torch.compile's tracing needs the fake kernel too, so "auto" stops here
        raise LoweringError(
            f"torch.export could not trace {name}{at}: the custom op {custom_op} has no fake (meta) kernel, which "
            "export and torch.compile run to know its output's shape and dtype without running it "
            f"({type(error).__name__}: {first_line})"
            f"\nFix: register one, e.g. @torch.library.register_fake(\"{custom_op}\") on a function returning "
            "torch.empty_like(x) (or the output's shape and dtype): the op is then one node of the graph, which runs "
            "in PyTorch (no converter) unless you register a converter for it (docs/api.md)"
        ) from error
    if _untraceable_python(error):
        raise ExportRefusedError(
            f"torch.export could not trace {name}{at}: that line leaves PyTorch for NumPy, which export cannot see into "
            f"({type(error).__name__}: {first_line})\nFix: write it with "
            "torch ops, or wrap it as a custom op (torch.library.custom_op with a register_fake) so that export keeps "
            "it as one node that runs in PyTorch; frontend='auto' verifies such a model across the graph break instead"
        ) from error
    raise ExportRefusedError(
        f"torch.export could not trace {name}{at}: {type(error).__name__}: {first_line}\n"
        "Fix: make the model exportable (no data-dependent Python control flow, no unsupported Python "
        "objects among the inputs; see https://pytorch.org/docs/stable/export.html), check that the "
        "example inputs match forward's signature, or pass a torch.fx.GraphModule of ATen ops instead."
    ) from error


_CAUSED_BY = re.compile(r"Caused by: \(([^()\n]+:\d+ in [^()\n]+)\)")


def _cause(error: BaseException) -> str:
    """Where in the model's code (the user's, or a library's like torchvision's) export's refusal comes from:
    the ``Caused by: (file:line in function)`` a guard error names, else the innermost frame of the traceback
    outside torch and trtcheck; "" when none is known. The refusal once kept only the error's first line, and the
    detectors' one Python ``if`` in ``torchvision/ops/boxes.py`` was nowhere in it."""
    found = _CAUSED_BY.search(str(error))
    if found and not found.group(1).startswith(("_", "torch/", "fx/", "utils/")):  # torch's own frame: look further
        return found.group(1)
    frames = [frame for frame, _ in traceback.walk_tb(error.__traceback__)]
    outside = [frame for frame in frames if not any(part in frame.f_code.co_filename.replace(os.sep, "/")
                                                    for part in ("/torch/", "/trtcheck/", "<"))]
    if not outside:
        return ""
    frame = outside[-1]
    return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"


def _packed_parameters(error: BaseException) -> bool:
    """An eager-mode quantized module (``torch.ao.quantization.convert``) refused for its packed weights."""
    return "PackedParams" in str(error) or "__obj_flatten__" in str(error)


_NO_FAKE = re.compile(
    r"no fake impl registered for <CustomOpDef\(([\w.:]+)\)>"  # torch.library.custom_op without register_fake
    r"|UnsupportedOperatorException: ([\w]+)\.([\w]+)\.\w+"  # torch.library.define'd with a CPU kernel only
    r"|([\w.]+::[\w.]+): attempted to run this operator with Meta tensors"
)


def _op_without_fake_kernel(error: BaseException) -> str:
    """``namespace::name`` of a custom op export refused for having no fake (meta) kernel, or ""."""
    found = _NO_FAKE.search(f"{type(error).__name__}: {error}")
    if not found:
        return ""
    if found.group(2):
        return "" if found.group(2) in ("aten", "prims") else f"{found.group(2)}::{found.group(3)}"
    return found.group(1) or found.group(4)


def _untraceable_python(error: BaseException) -> bool:
    """Code that leaves torch for NumPy: ``.numpy()`` on a traced tensor, or a NumPy function export cannot run."""
    text = str(error)
    return ".numpy() is not supported" in text or ("numpy" in text.lower() and "not supported" in text)


def _data_dependent(error: BaseException) -> bool:
    """A refusal of a Python branch or size on a tensor's values (a guard on a data-dependent expression)."""
    return type(error).__name__ == "GuardOnDataDependentSymNode" or "Could not guard on data-dependent expression" in str(error)


class TorchLog:
    """Holds back what torch's loggers write to stderr while torch.export runs; ``replay`` writes it after all.

    A failed export logs tracebacks of its own (torch 2.14: ~20 lines of "failed while attempting to run meta
    for aten.mm.default" for examples that do not fit a Linear) before raising, and trtcheck's error already
    says what failed and why: on a failure the log goes on the ``LoweringError`` (``torch_log``, which
    ``trtcheck ... --verbose`` prints) instead of stderr; after a success ``replay`` writes it as torch would
    have, in order, so a warning export gave is not lost. Only handlers writing to stderr or stdout are held
    back: a log file (``TORCH_TRACE``, the user's own) gets every record as it comes.
    """

    def __init__(self) -> None:
        self.records: list[tuple[logging.LogRecord, list[logging.Handler]]] = []
        self._swapped: list[tuple[logging.Logger, list[logging.Handler]]] = []

    def __enter__(self) -> TorchLog:
        streams = {id(s) for s in (sys.stderr, sys.__stderr__, sys.stdout, sys.__stdout__) if s is not None}
        names = ["torch", *(n for n in logging.Logger.manager.loggerDict if n.startswith("torch."))]
        for name in names:
            logger = logging.getLogger(name)
            # torch's own handler (``_StderrHandler``) is no StreamHandler: a handler is held by where it writes
            held = [h for h in logger.handlers if not isinstance(h, logging.FileHandler) and id(getattr(h, "stream", None)) in streams]
            if held:
                self._swapped.append((logger, list(logger.handlers)))
                logger.handlers = [h for h in logger.handlers if h not in held] + [_Held(self.records, held)]
        return self

    def __exit__(self, kind: Any, *rest: Any) -> None:
        for logger, handlers in self._swapped:
            logger.handlers = handlers
        self._swapped.clear()
        if kind is not None:  # an exception leaves: nobody will ask for the log, so it is written now
            self.replay()

    def replay(self) -> None:
        """Write every held record to the handlers it was held from, as logging would have."""
        records, self.records[:] = list(self.records), []
        for record, handlers in records:
            for handler in handlers:
                if record.levelno >= handler.level:
                    handler.handle(record)

    def text(self) -> str:
        """The held records, formatted as torch's handlers format them; '' when torch logged nothing."""
        return "\n".join(handlers[0].format(record) for record, handlers in self.records)


class _Held(logging.Handler):
    """Keeps each record a logger would have given ``handlers``, for ``TorchLog``."""

    def __init__(self, records: list[tuple[logging.LogRecord, list[logging.Handler]]], handlers: list[logging.Handler]) -> None:
        super().__init__()
        self.records, self.held = records, handlers

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record, self.held))


def _module_of(program: torch.export.ExportedProgram, keep: Callable[[Any], bool] | None = None) -> torch.fx.GraphModule:
    gm = program.module()
    drop_guards(gm)
    drop_assertions(gm)
    _fill_in_place_values(gm)
    gm.graph.eliminate_dead_code()  # a result nothing reads is no work for an engine (in-place writes are kept)
    gm.recompile()
    fold_constants(gm, keep=keep)  # what depends only on weights is computed once, here (lowering/constants.py)
    gm.meta[RANGES] = program_ranges(program)
    return gm


def _is_constraint_error(error: BaseException) -> bool:
    names = {type(e).__name__ for e in (error, error.__cause__, error.__context__) if e is not None}
    return bool(names & {"ConstraintViolationError", "UserError"}) or "Constraints violated" in str(error)


def _first_lines(error: BaseException, count: int) -> str:
    return "\n".join(str(error).strip().splitlines()[:count]) or type(error).__name__


def lower_program(program: torch.export.ExportedProgram, keep: Callable[[Any], bool] | None = None) -> torch.fx.GraphModule:
    """The core-ATen ``GraphModule`` of an already exported program (no second trace)."""
    return _module_of(_decompose(program, "the exported program", keep), keep)


def _decompose(program: torch.export.ExportedProgram, what: str, keep: Callable[[Any], bool] | None = None) -> torch.export.ExportedProgram:
    """``program`` decomposed to core ATen, surviving PyTorch's decomposition bugs where a repair is known.

    A decomposition can turn a ``view`` of a value that was contiguous when traced into a ``view`` of a
    value that no longer is (torch 2.14: GPT-2's attention, "Cannot view a tensor with shape ... and strides
    ..."). ``reshape`` means the same wherever ``view`` is legal and copies where it is not, so on failure
    every ``aten.view`` of the exported graph becomes ``aten.reshape`` (as Torch-TensorRT's view-to-reshape
    pass does) and decomposition runs again; the user's program is restored afterwards. Only when that fails
    too is it a ``LoweringError``, naming the node, the op and the torch version.
    """
    try:
        return program.run_decompositions(core_aten_table(keep))
    except Exception as error:  # noqa: BLE001 - any failure: repair and retry once, then report the first
        first = error
    views = [node for node in program.graph.nodes if node.target is torch.ops.aten.view.default]
    if views:
        try:
            for node in views:
                node.target = torch.ops.aten.reshape.default
            return program.run_decompositions(core_aten_table(keep))
        except Exception:  # noqa: BLE001 - the repair did not help: the first error is the one to report
            pass
        finally:
            for node in views:
                node.target = torch.ops.aten.view.default
    message = str(first).strip()
    where = next((line.strip() for line in message.splitlines() if line.strip().startswith("While executing")), "")
    raise LoweringError(
        f"decomposing {what} to core ATen failed in torch {torch.__version__}: {type(first).__name__}: "
        f"{message.splitlines()[0] if message else ''}" + (f"\n{where}" if where else "") + "\n"
        "This is a bug of PyTorch's decompositions (torch.export.export(...).run_decompositions() fails the same "
        "way), and retrying with every view as a reshape did not avoid it. Fix: pass torch_executed_ops naming "
        "the op to keep it out of decomposition, or report it to PyTorch with the model"
    ) from first


def _raise_if_inputs_do_not_fit(model: torch.nn.Module, args: tuple, kwargs: dict) -> bool:
    """When export failed, tell "the example inputs do not fit the model" apart from "not exportable"; True
    when eager ran the autograd engine inside ``forward``.

    Eager runs with autograd on, as a user's forward may need it (``torch.autograd.grad`` inside forward:
    physics-informed nets, force fields), so only a failure of eager itself blames the inputs; otherwise
    the caller reports what export refused, or traces a forward that runs autograd another way.
    """
    probe = _AutogradProbe()
    try:
        with torch.enable_grad(), probe:
            model(*args, **kwargs)
    except Exception as error:  # any failure of eager itself means the inputs do not fit
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        shapes = ", ".join(
            f"{tuple(v.shape)} {str(v.dtype).removeprefix('torch.')}" if isinstance(v, torch.Tensor) else repr(v)
            for v in args
        )
        raise LoweringError(
            f"the example inputs do not fit {type(model).__name__}: eager PyTorch itself fails on them with "
            f"{type(error).__name__}: {first_line}\nGiven: ({shapes}). Fix: pass example inputs that "
            f"{type(model).__name__}.forward accepts (right count, shapes and dtypes)"
        ) from error
    return probe.ran_autograd


class _AutogradProbe(TorchDispatchMode):
    """Notes whether any op ran inside the autograd engine (a backward pass) while the mode was active."""

    def __init__(self) -> None:
        super().__init__()
        self.ran_autograd = False

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if not self.ran_autograd and torch._C._current_graph_task_id() != -1:
            self.ran_autograd = True
        return func(*args, **(kwargs or {}))


def _trace_through_autograd(
    model: torch.nn.Module, args: tuple, kwargs: dict, refused: Exception, keep: Callable[[Any], bool] | None = None
) -> torch.fx.GraphModule:
    """The core-ATen graph of a ``forward`` that runs autograd (``torch.autograd.grad`` of an energy, a
    physics-informed loss): torch.export cannot trace it (torch 2.14: "We found a fake tensor in the exported
    program constant's list"), ``make_fx`` can, one level below autograd, so the backward ops it runs are in
    the graph like any other. It follows the example's Python control flow, as export would have refused to,
    so the compiled module serves that path: verify's input sets check it. Parameters become constants of
    the graph; the graph takes and returns the model's own input and output structure."""
    flat, in_spec = tree_flatten((args, kwargs))

    def flat_forward(*leaves: Any) -> Any:
        call_args, call_kwargs = tree_unflatten(list(leaves), in_spec)
        return tree_flatten(model(*call_args, **call_kwargs))[0]

    try:
        gm = make_fx(flat_forward, decomposition_table=core_aten_table(keep), tracing_mode="real")(*flat)
        out_spec = tree_flatten(model(*args, **kwargs))[1]
    except Exception as error:
        raise LoweringError(
            f"{type(model).__name__}.forward runs autograd, which torch.export cannot trace ({type(refused).__name__}: "
            f"{_first_lines(refused, 1)}), and tracing it with make_fx failed too: {type(error).__name__}: "
            f"{_first_lines(error, 1)}\nFix: compute the gradient outside the model and pass it in, or pass a "
            "torch.fx.GraphModule of ATen ops"
        ) from error
    names = [f"arg{i}" for i in range(len(args))] + list(kwargs)  # the top-level inputs, as forward takes them
    gm.graph._codegen = _PyTreeCodeGen(_PyTreeInfo(names, in_spec, out_spec))
    drop_assertions(gm)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    gm.meta[RANGES] = {}
    return gm


def _fill_in_place_values(gm: torch.fx.GraphModule) -> None:
    """Give the in-place writes ``program.module()`` appends for mutated buffers and inputs (``copy_``) the
    ``meta["val"]`` of the value they write into, as every other node has: a lowered graph is then complete,
    and lowering it again reuses it as it is instead of tracing fake tensors through the real buffers."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and "val" not in node.meta and writes_to(node, node.args[0] if node.args else None):
            node.meta["val"] = node.args[0].meta.get("val")


ASSERTIONS = frozenset(
    getattr(getattr(torch.ops.aten, name), overload)
    for name, overload in (
        ("_assert_tensor_metadata", "default"),
        ("_assert_scalar", "default"),
        ("_assert_async", "default"),
        ("_assert_async", "msg"),
        ("sym_constrain_range", "default"),
        ("sym_constrain_range_for_size", "default"),
    )
    if hasattr(torch.ops.aten, name)
)
"""Checks torch.export leaves in a graph (``.to()`` emits ``_assert_tensor_metadata``, data-dependent sizes
``_assert_scalar``): they compute nothing, and what they check of the inputs the compiled module's input
signature checks on every call."""


def drop_assertions(gm: torch.fx.GraphModule) -> None:
    """Remove every assertion node nothing reads (``ASSERTIONS``), as Torch-TensorRT's lowering passes do.

    Left in, each is an op without a converter, so it runs in PyTorch and splits the engine around it (17 of
    them in a small Llama); removed, they are never the reason a segment ends.
    """
    changed = False
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target in ASSERTIONS and not node.users:
            gm.graph.erase_node(node)
            changed = True
    if changed:
        gm.recompile()


def drop_guards(gm: torch.fx.GraphModule) -> None:
    """Remove ``torch.export``'s input-guard call: it checks shapes, not computes, and is no ATen op."""
    for node in list(gm.graph.nodes):
        if node.op == "call_module" and node.target == "_guards_fn" and not node.users:
            gm.graph.erase_node(node)
            if hasattr(gm, "_guards_fn"):
                delattr(gm, "_guards_fn")
    gm.recompile()


def _reuse_aten_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> torch.fx.GraphModule:
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        raise LoweringError(
            f"the GraphModule has {len(placeholders)} inputs ({', '.join(p.name for p in placeholders)}) but "
            f"{len(example_inputs)} example inputs were given: pass one example per placeholder"
        )
    if any("val" not in node.meta for node in gm.graph.nodes if node.op != "output"):
        try:
            FakeTensorProp(gm).propagate(*example_inputs)
        except Exception as error:
            raise LoweringError(
                f"could not infer shapes of the GraphModule from the example inputs: {type(error).__name__}: "
                f"{error}\nFix: pass example inputs whose shapes and dtypes the graph accepts"
            ) from error
    if any(node.op == "call_function" and not node.users and not node.is_impure() for node in gm.graph.nodes):
        # A result nothing reads is no work for an engine (a segment of only a dead sym_size has no output, and
        # ONNX Runtime refuses a model without one): a copy without dead code; the user's graph stays as it is.
        # (No subgraph to clean as well: a graph with cond or while_loop is no ATen graph, and is exported again.)
        gm = copy_graph_module(gm, without=dead_nodes(gm.graph))
    return gm


LOWERING_SECONDS = "trtcheck_lowering_s"  # GraphModule.meta key: how long LoweringCache took to lower it


class LoweringCache:
    """One lowering per model, shared by every setting the model is compiled and verified with.

    ``torch.export`` and the core-ATen decompositions are most of the time ``compile`` takes, and they do
    not depend on the settings: the verification matrix lowers each zoo model once (per process) and
    partitions every preset from a copy (``compile(..., lowered=...)``). With ``twice`` (the default) the
    first request for a key lowers two fresh builds of the model and requires the same graph and the same
    constants: lowering's determinism from scratch, checked once per model instead of once per setting. The
    plugin's matrix cache lowers once (``twice=False``: half its lowering time, to keep the verification matrix
    fast) and the slow tier checks every zoo model's lowering twice instead (``suites/lowering/test_lowering.py``).
    """

    def __init__(self, twice: bool = True) -> None:
        self._graphs: dict[tuple[str, frozenset], torch.fx.GraphModule] = {}
        self.twice = twice

    def get(self, key: str, build: Any, dynamic_shapes: Any = None, keep: Callable[[Any], bool] | None = None) -> torch.fx.GraphModule:
        """The lowered graph of ``build()`` (a callable returning ``(model, example_inputs)``), lowered once
        (with torch.export's ``dynamic_shapes``, when given) per set of ops ``keep`` keeps whole: settings
        forcing only ops that are not decomposed anyway (``relu``) share one lowering."""
        cached = (key, kept_whole(keep))
        if cached not in self._graphs:
            start = time.perf_counter()
            first = _lower_fresh(build, dynamic_shapes, keep)
            first.meta[LOWERING_SECONDS] = time.perf_counter() - start
            difference = _graph_difference(first, _lower_fresh(build, dynamic_shapes, keep)) if self.twice else ""
            if difference:
                raise LoweringError(
                    f"lowering {key} twice from scratch gave different graphs ({difference}): torch.export or a "
                    "decomposition is not deterministic for this model, so no partition of it can be reproduced"
                )
            self._graphs[cached] = first
        return self._graphs[cached]

    def __len__(self) -> int:
        return len(self._graphs)


def _lower_fresh(build: Any, dynamic_shapes: Any = None, keep: Callable[[Any], bool] | None = None) -> torch.fx.GraphModule:
    model, example_inputs = build()
    args, kwargs = independent_inputs(example_inputs)
    return lower(model, args, kwargs, dynamic_shapes=dynamic_shapes, keep=keep)


def _graph_difference(a: torch.fx.GraphModule, b: torch.fx.GraphModule) -> str:
    """'' when ``a`` and ``b`` are the same graph with the same constants, else what differs first."""
    if a.code != b.code:
        return "generated code differs"
    for node_a, node_b in zip(a.graph.nodes, b.graph.nodes):
        if node_a.op == "get_attr":
            value_a, value_b = operator.attrgetter(node_a.target)(a), operator.attrgetter(node_b.target)(b)
            if isinstance(value_a, torch.Tensor) and not (
                isinstance(value_b, torch.Tensor) and value_a.shape == value_b.shape and torch.equal(value_a, value_b)
            ):
                return f"constant {node_a.target} differs"
    return ""
