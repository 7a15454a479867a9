"""What lowering checks of its inputs before torch.export runs: ``dynamic_shapes``, and an ``ExportedProgram``'s examples.

A malformed ``dynamic_shapes`` (a dim the input lacks, a name ``forward`` does not take, a value that is not a
``Dim``) reaches torch.export as an ``IndexError`` or a ``UserError`` from deep inside it, which says nothing
of ``dynamic_shapes`` or reads as the model's fault; ``check_dynamic_shapes`` refuses it first, naming the entry,
the input, its rank and the fix. An ``ExportedProgram`` fixes its inputs' shapes and dtypes when exported, so
examples that do not fit it fail later with a raw torch error, or worse, pass (another static size of the
same rank); ``check_program_inputs`` refuses them, naming what the program takes.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import sympy
import torch
import torch.fx
from torch.utils._pytree import tree_flatten

from trtcheck.errors import DynamicShapesError, InputMismatchError
from trtcheck.lowering.sizes import SizeCheck, describe_sizes, symbolic_size
from trtcheck.lowering.symbols import finite


def check_dynamic_shapes(model: torch.nn.Module, args: tuple, kwargs: dict, dynamic_shapes: Any) -> None:
    """``DynamicShapesError`` where ``dynamic_shapes`` does not fit ``model``'s inputs; nothing when it does.

    Checks what torch.export would refuse (or misread) about the form: the top level (a tuple with one entry
    per input, or a dict by ``forward``'s parameter names), nested inputs' structure, each Tensor's entry (a dict
    ``{dim: Dim}`` of dims it has, or a tuple with one entry per dim) and each value (a ``Dim``, ``Dim.AUTO`` /
    ``STATIC`` / ``DYNAMIC``, None, or the example's own size), and that every example size is in its Dim's
    range. A negative dim is refused too (torch.export reads ``-1`` as the last dim only by accident of list
    indexing): dims are written as torch.export names them, counted from 0. Inputs that do not bind to
    ``forward`` are not checked here: lowering reports them as inputs that do not fit the model.
    """
    for name, where, tensor, spec in _tensor_entries(model, args, kwargs, dynamic_shapes):
        _check_tensor_entry(name, where, tensor, spec)


def dim_names_of(gm: torch.fx.GraphModule, model: torch.nn.Module, args: tuple, kwargs: dict, dynamic_shapes: Any) -> dict[str, str]:
    """``{symbol: Dim name}``: each input size that export made a symbol (or a Dim derived from one, ``2*seq``)
    paired with the Dim the user gave for it, pairing ``dynamic_shapes`` with the placeholders in flat order."""
    specs = [spec for _, _, _, spec in _tensor_entries(model, args, kwargs, dynamic_shapes, check=False)]
    tensors = [node.meta["val"] for node in gm.graph.nodes if node.op == "placeholder" and isinstance(node.meta.get("val"), torch.Tensor)]
    names: dict[str, str] = {}
    for meta, spec in zip(tensors, specs):
        dims = spec.items() if isinstance(spec, dict) else enumerate(spec) if isinstance(spec, (tuple, list)) else ()
        for dim, dim_spec in dims:
            if not (isinstance(dim, int) and 0 <= dim < meta.dim()) or not isinstance(dim_spec, torch.export.Dim):
                continue
            size = meta.shape[dim]
            if not isinstance(size, torch.SymInt):
                continue
            root = getattr(dim_spec, "root", None)  # a derived Dim (2*seq) names the symbol it derives from
            symbols = size.node.expr.free_symbols
            if root is None and isinstance(size.node.expr, sympy.Symbol):
                names.setdefault(str(size.node.expr), dim_spec.__name__)
            elif root is not None and len(symbols) == 1 and not isinstance(size.node.expr, sympy.Symbol):
                names.setdefault(str(next(iter(symbols))), root.__name__)
    return names


def _tensor_entries(
    model: torch.nn.Module, args: tuple, kwargs: dict, dynamic_shapes: Any, check: bool = True
) -> Iterator[tuple[str, str, torch.Tensor, Any]]:
    """``(input name, where in dynamic_shapes, tensor, its entry)`` per Tensor input, in flat order; with ``check``
    a ``DynamicShapesError`` where the structure does not fit the inputs, else such inputs are left out."""
    try:
        bound = inspect.signature(model.forward).bind(*args, **kwargs).arguments
    except (TypeError, ValueError):
        return  # the inputs do not bind to forward: lowering says so, naming the inputs
    what = f"{type(model).__name__}.forward"
    inputs = ", ".join(bound)
    if isinstance(dynamic_shapes, dict):
        unknown = [key for key in dynamic_shapes if key not in bound]
        if check and unknown:
            raise DynamicShapesError(
                f"dynamic_shapes names {unknown[0]!r}, which is not an input of {what} (its inputs: {inputs}). Fix: key "
                "dynamic_shapes by forward's parameter names, or give a tuple with one entry per input, in order"
            )
        missing = [name for name in bound if name not in dynamic_shapes]
        if check and missing:
            raise DynamicShapesError(
                f"dynamic_shapes has no entry for input {missing[0]!r} of {what} (its inputs: {inputs}). Fix: give every "
                "input an entry, None for a static one"
            )
        pairs = [(name, value, dynamic_shapes.get(name), f"dynamic_shapes[{name!r}]") for name, value in bound.items()]
    elif isinstance(dynamic_shapes, (tuple, list)):
        if check and len(dynamic_shapes) != len(bound):
            raise DynamicShapesError(
                f"dynamic_shapes has {_count(len(dynamic_shapes), 'entry', 'entries')}, but {what} takes "
                f"{_count(len(bound), 'input', 'inputs')} ({inputs}) here. Fix: give one entry per input, in order, "
                "None for a static one"
            )
        pairs = [(name, value, spec, f"dynamic_shapes[{i}]") for i, ((name, value), spec) in enumerate(zip(bound.items(), dynamic_shapes))]
    else:
        if check:
            raise DynamicShapesError(
                f"dynamic_shapes is a {type(dynamic_shapes).__name__}, not a tuple with one entry per input of {what} "
                f"({inputs}) or a dict by their names. Fix: e.g. dynamic_shapes=({{0: Dim('batch')}}, ...), None for a "
                "static input"
            )
        return
    for name, value, spec, where in pairs:
        yield from _walk(name, value, spec, where, check)


def _walk(name: str, value: Any, spec: Any, where: str, check: bool) -> Iterator[tuple[str, str, torch.Tensor, Any]]:
    """The Tensors of one (possibly nested) input with their entries; None stands for every size static."""
    if isinstance(value, torch.Tensor):
        yield name, where, value, spec
        return
    if isinstance(value, (tuple, list)):
        if spec is not None and not (isinstance(spec, (tuple, list)) and len(spec) == len(value)):
            if check:
                got = f"has {_count(len(spec), 'entry', 'entries')}" if isinstance(spec, (tuple, list)) else f"is a {type(spec).__name__}"
                raise DynamicShapesError(
                    f"{where} {got} for input {name!r}, a {type(value).__name__} of {len(value)}. Fix: give a "
                    f"{type(value).__name__} with one per item (None for a static one), or None"
                )
            return
        for index, item in enumerate(value):
            yield from _walk(f"{name}[{index}]", item, None if spec is None else spec[index], f"{where}[{index}]", check)
    elif isinstance(value, dict):
        if spec is not None and not (isinstance(spec, dict) and set(spec) == set(value)):
            if check:
                raise DynamicShapesError(
                    f"{where} does not match input {name!r}, a dict with keys {sorted(value, key=str)}. Fix: give a dict "
                    "with those keys (None for a static one), or None"
                )
            return
        for key, item in value.items():
            yield from _walk(f"{name}[{key!r}]", item, None if spec is None else spec[key], f"{where}[{key!r}]", check)


def _check_tensor_entry(name: str, where: str, tensor: torch.Tensor, spec: Any) -> None:
    rank, shape = tensor.dim(), tuple(tensor.shape)
    has = f"which has {_count(rank, 'dim', 'dims')} (shape {shape})"
    valid = f"0 to {rank - 1}" if rank else "none: give it None"
    if spec is None:
        return
    if isinstance(spec, dict):
        for dim in spec:
            if not isinstance(dim, int) or isinstance(dim, bool):
                raise DynamicShapesError(
                    f"{where} has the key {dim!r}, not a dim index of input {name!r}, {has}. Fix: key each Dim by a dim "
                    f"of {name!r}, {valid}"
                )
            if not 0 <= dim < rank:
                counted = f"; dims are counted from 0: write {rank + dim} for {'the last' if dim == -1 else f'dim {dim}'}"
                raise DynamicShapesError(
                    f"{where} gives dim {dim} of input {name!r}, {has}. Fix: key each Dim by a dim of {name!r}, {valid}"
                    + (counted if -rank <= dim < 0 else "")
                )
        entries = list(spec.items())
    elif isinstance(spec, (tuple, list)):
        if len(spec) != rank:
            raise DynamicShapesError(
                f"{where} has {_count(len(spec), 'entry', 'entries')} for input {name!r}, {has}. Fix: give one per dim "
                "(None for a static one), or a dict {dim: Dim} of the dynamic ones"
            )
        entries = list(enumerate(spec))
    else:
        dim_given = isinstance(spec, torch.export.Dim)
        example = f"{{0: {spec!r}}} for its dim 0" if dim_given else "{0: Dim('batch')}, or None for a static input"
        raise DynamicShapesError(
            f"{where} (input {name!r} of shape {shape}) is {spec!r}, not a dict {{dim: Dim}} or a tuple with one entry per "
            f"dim. Fix: e.g. {example}"
        )
    for dim, value in entries:
        _check_dim_entry(name, f"{where}[{dim}]", dim, value, shape[dim])


def _check_dim_entry(name: str, where: str, dim: int, value: Any, size: int) -> None:
    """One dim's entry: a Dim whose range holds the example's size, a hint, None, or the example's size itself."""
    if value is None or isinstance(value, type(torch.export.Dim.AUTO)):  # Dim.AUTO, STATIC or DYNAMIC: export decides
        return
    if isinstance(value, torch.export.Dim):
        low, high = int(value.min), value.max
        high = int(high) if finite(high) else None
        if size < low or (high is not None and size > high):
            label = getattr(value, "__name__", repr(value))
            raise DynamicShapesError(
                f"the example's dim {dim} of input {name!r} is {size}, outside the range [{low}, {'inf' if high is None else high}] "
                f"of Dim {label!r} ({where}). Fix: pass an example inside the range, or a Dim whose range holds {size}"
            )
        return
    if isinstance(value, int) and not isinstance(value, bool):
        if value != size:
            raise DynamicShapesError(
                f"{where} fixes dim {dim} of input {name!r} to {value}, but the example's dim {dim} is {size}. Fix: give "
                f"{size} (or None: static at the example's size), or a Dim for a size that varies"
            )
        return
    hint = f"Dim({value!r})" if isinstance(value, str) else "Dim('name')"
    raise DynamicShapesError(
        f"{where} (dim {dim} of input {name!r}) is {value!r}, a {type(value).__name__}, not a torch.export.Dim. Fix: write "
        f"torch.export.{hint} for a dynamic dim (Dim.AUTO to let export decide), None for a static one"
    )


def _count(number: int, one: str, many: str) -> str:
    return f"{number} {one if number == 1 else many}"


# --- an ExportedProgram's example inputs -------------------------------------------------------------------------


def program_ranges(program: torch.export.ExportedProgram) -> dict[str, tuple[int | None, int | None]]:
    """``{symbol: (min, max)}`` of ``program``'s dynamic sizes (None: unbounded that way; a data-dependent value,
    ``.item()`` or tensor_split's indices, may be unbounded below too)."""
    return {
        str(symbol): (int(bounds.lower) if finite(bounds.lower) else None, int(bounds.upper) if finite(bounds.upper) else None)
        for symbol, bounds in program.range_constraints.items()
    }


def check_program_inputs(program: torch.export.ExportedProgram, args: Sequence[Any], kwargs: Mapping[str, Any] | None = None) -> None:
    """``InputMismatchError`` unless ``args``/``kwargs`` fit ``program``: its input structure, and per Tensor its
    dtype, rank and sizes (static ones exactly, dynamic ones in their ranges and relations, as its guards
    would check them), per other input the value it was exported with (a constant of the graph)."""
    from torch.export.graph_signature import InputKind

    placeholders = [node for node in program.graph.nodes if node.op == "placeholder"]  # one per input spec, in order
    users = [node for node, spec in zip(placeholders, program.graph_signature.input_specs) if spec.kind == InputKind.USER_INPUT]
    names = [node.name for node in users]  # forward's parameter names (xs_0 for xs[0])
    metas = [node.meta.get("val") for node in users]
    in_spec = program.call_spec.in_spec
    kwargs = dict(kwargs or {})
    if in_spec is not None and in_spec.num_children == 2 and kwargs:  # keyword inputs in the program's order
        order = list(in_spec.child(1).context or [])
        kwargs = {**{key: kwargs[key] for key in order if key in kwargs}, **kwargs}
    leaves, spec = tree_flatten((tuple(args), kwargs))

    def takes() -> str:
        return ", ".join(f"{name}: {_describe(meta, program)}" for name, meta in zip(names, metas))

    fix = (
        "Fix: pass example inputs like the ones it was exported with (program.example_inputs holds them, and serves when "
        "example_inputs is None), or export it again for these inputs (with dynamic_shapes for sizes that vary)"
    )
    if len(leaves) != len(names) or (in_spec is not None and spec != in_spec):
        given = ", ".join(_describe(leaf) for leaf in leaves) or "nothing"
        other = " of another structure" if len(leaves) == len(names) else ""
        raise InputMismatchError(
            f"the example inputs do not fit the exported program: it takes {_count(len(names), 'input', 'inputs')} "
            f"({takes()}), but was given {len(leaves)}{other} ({given}). {fix}"
        )
    sized: list[tuple[int, Any]] = []
    for index, (name, meta, value) in enumerate(zip(names, metas, leaves)):
        if isinstance(meta, torch.Tensor):
            if not isinstance(value, torch.Tensor) or value.dtype != meta.dtype or value.dim() != meta.dim():
                given = _describe(value) if isinstance(value, torch.Tensor) else f"{value!r}, a {type(value).__name__}"
                raise InputMismatchError(
                    f"the example inputs do not fit the exported program: input {name!r} is {given}, but the program takes "
                    f"{_describe(meta, program)}. It takes ({takes()}). {fix}"
                )
            sized.append((index, value.shape))
        elif isinstance(meta, (int, float, bool, str)) and not same_value(value, meta):
            raise InputMismatchError(
                f"the example inputs do not fit the exported program: input {name!r} is {value!r}, but the program was "
                f"exported with {name}={meta!r}, a constant of its graph. {fix}"
            )
    ranges = program_ranges(program)
    tensors = [names[index] for index, _ in sized]
    check = SizeCheck([[symbolic_size(d, ranges, {}) for d in metas[index].shape] for index, _ in sized], tensors, ranges)
    found = check.mismatch([shape for _, shape in sized])
    if found is not None:
        raise InputMismatchError(
            f"the example inputs do not fit the exported program: input {tensors[found[0]]!r}: {found[1]}. It takes ({takes()}). {fix}"
        )


def _describe(value: Any, program: torch.export.ExportedProgram | None = None) -> str:
    """``Tensor[s0 in 2..16, 3] float32`` (a program's placeholder, with its ranges), or a value's repr."""
    if isinstance(value, torch.Tensor):
        ranges = program_ranges(program) if program is not None else {}
        return f"Tensor{describe_sizes([symbolic_size(d, ranges, {}) for d in value.shape])} {str(value.dtype).removeprefix('torch.')}"
    return repr(value)


def same_value(value: Any, expected: Any) -> bool:
    """Whether a non-Tensor input is the value a graph was exported with (which made it a constant): of its type
    (an int for a float, or the reverse, counts as a number; a bool does not), and equal."""
    if type(value) is not type(expected) and not (
        isinstance(value, (int, float))
        and isinstance(expected, (int, float))
        and not isinstance(value, bool)
        and not isinstance(expected, bool)
    ):
        return False
    try:
        return bool(value == expected)
    except Exception:  # noqa: BLE001 - an uncomparable value is not the example's
        return False
