"""Lowering: any ``nn.Module`` to a core-ATen ``torch.fx.GraphModule`` with fake-tensor metadata.

Partitioning needs one uniform input: a graph of ATen overloads whose every value carries
``meta["val"]`` (shape and dtype) and whose nodes carry ``nn_module_stack`` (for module fallback).
``torch.export`` followed by ``run_decompositions()`` gives exactly that; a ``GraphModule`` that is
already ATen is taken as it is, and only its missing metadata is filled in.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.fx
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from trtcheck.decompositions import core_aten_table
from trtcheck.errors import LoweringError

try:  # generates a graph's Python code on first use, not on every change: partitioning 100k nodes
    from torch.fx._lazy_graph_module import _LazyGraphModule as _GraphModule  # needs no code at all
except ImportError:  # pragma: no cover - older or newer torch without it
    _GraphModule = torch.fx.GraphModule


def writes_to(user: torch.fx.Node, value: torch.fx.Node) -> bool:
    """True when ``user`` calls an ATen overload whose schema marks the argument ``value`` as written."""
    target = user.target
    if user.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    for index, argument in enumerate(target._schema.arguments):
        if argument.alias_info is not None and argument.alias_info.is_write:
            given = user.args[index] if index < len(user.args) else user.kwargs.get(argument.name)
            if given is value:
                return True
    return False


def is_mutable_state(node: torch.fx.Node) -> bool:
    """A ``get_attr`` the graph writes into: a buffer that ``forward`` updates (``self.n.add_(1)``).

    Such a value is state, not a constant: an engine that baked it in at build time would read the
    value of the first call forever, so it crosses segment boundaries as an input instead.
    """
    return node.op == "get_attr" and any(writes_to(user, node) for user in node.users)


def is_aten_graph(gm: torch.fx.GraphModule) -> bool:
    """True when every compute node of ``gm`` calls an ATen overload (or picks a tuple element)."""
    return all(
        node.op in ("placeholder", "get_attr", "output")
        or (node.op == "call_function" and (isinstance(node.target, torch._ops.OpOverload) or node.target is operator.getitem))
        for node in gm.graph.nodes
    )


def lower(
    model: torch.nn.Module | torch.export.ExportedProgram,
    example_inputs: Sequence[Any],
    example_kwargs: Mapping[str, Any] | None = None,
    *,
    dynamic_shapes: Any = None,
) -> torch.fx.GraphModule:
    """Lower ``model`` to a core-ATen ``GraphModule``; ATen ``GraphModule`` inputs are reused as they are.

    An ATen ``GraphModule`` is returned as it is (only its missing ``meta["val"]`` are filled in): passes
    that need to rewrite a graph they do not own copy it first (``copy_graph_module``), which for large
    graphs costs more than partitioning itself.

    A ``torch.export.ExportedProgram`` (a ``.pt2`` file's content) is lowered as it is, without tracing
    again: only its core-ATen decompositions are run, so the graph is the one the user exported.

    ``dynamic_shapes`` is ``torch.export.export``'s argument (``torch.export.Dim`` per dynamic dimension):
    the graph's metadata then carries symbolic sizes, and ``gm.meta[RANGES]`` each symbol's range
    (``symbol_ranges``), which shape analysis and the engines' shape profiles are built from.
    """
    if isinstance(model, torch.export.ExportedProgram):
        if dynamic_shapes is not None:
            raise LoweringError(
                "dynamic_shapes was given with an ExportedProgram: its dynamic dimensions were fixed when it was "
                "exported. Fix: pass dynamic_shapes to torch.export.export instead, or pass the nn.Module"
            )
        return lower_program(model)
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
    if isinstance(model, torch.fx.GraphModule) and is_aten_graph(model):
        if dynamic_shapes is not None:
            raise LoweringError(
                "dynamic_shapes was given with an ATen GraphModule, which is used as it is (its metadata decides "
                "its shapes). Fix: pass the nn.Module, or an ExportedProgram exported with dynamic_shapes"
            )
        return _reuse_aten_graph(model, example_inputs)
    return _export(model, tuple(example_inputs), dict(example_kwargs or {}), dynamic_shapes)


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


def own_mutable_state(gm: torch.fx.GraphModule) -> None:
    """Give ``gm`` its own copy of every buffer its graph writes into (``self.n.add_(1)``).

    ``torch.export`` shares the model's parameters and buffers with the lowered module, so running the
    lowered graph would update the user's model too: compiling and calling must leave the model as it was.
    """
    for node in gm.graph.nodes:
        if is_mutable_state(node):
            owner_path, _, name = node.target.rpartition(".")
            owner = gm.get_submodule(owner_path)
            value = getattr(owner, name)
            copy = value.detach().clone()
            if name in owner._buffers:
                owner._buffers[name] = copy
            elif name in owner._parameters:
                owner._parameters[name] = torch.nn.Parameter(copy, requires_grad=value.requires_grad)
            else:
                setattr(owner, name, copy)


def _export(model: torch.nn.Module, args: tuple, kwargs: dict, dynamic_shapes: Any = None) -> torch.fx.GraphModule:
    try:
        program = torch.export.export(model, args, kwargs, dynamic_shapes=dynamic_shapes)
    except Exception as error:  # torch.export raises many unrelated types
        _raise_if_inputs_do_not_fit(model, args, kwargs)
        if dynamic_shapes is not None and _is_constraint_error(error):
            raise LoweringError(
                f"torch.export could not keep the dynamic dimensions of {type(model).__name__}: "
                f"{type(error).__name__}: {_first_lines(error, 6)}\nFix: follow export's suggestion above (a "
                "narrower Dim range, a static size, or a Dim shared between inputs), or drop that dimension "
                "from dynamic_shapes"
            ) from error
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise LoweringError(
            f"torch.export could not trace {type(model).__name__}: {type(error).__name__}: {first_line}\n"
            "Fix: make the model exportable (no data-dependent Python control flow, no unsupported Python "
            "objects among the inputs; see https://pytorch.org/docs/stable/export.html), check that the "
            "example inputs match forward's signature, or pass a torch.fx.GraphModule of ATen ops instead."
        ) from error
    try:
        program = program.run_decompositions(core_aten_table())
    except Exception as error:
        raise LoweringError(
            f"decomposing {type(model).__name__} to core ATen failed: {type(error).__name__}: {error}"
        ) from error
    gm = _module_of(program)
    if dynamic_shapes is not None:
        gm.meta[DIM_NAMES] = _dim_names(gm, model, args, kwargs, dynamic_shapes)
    return gm


RANGES = "trtcheck_symbol_ranges"
"""``GraphModule.meta`` key: ``{symbol name: (min, max)}`` of every symbol (None: unbounded that way; only a
data-dependent value, never a Dim's size, is unbounded below)."""


def _module_of(program: torch.export.ExportedProgram) -> torch.fx.GraphModule:
    gm = program.module()
    _drop_guards(gm)
    ranges = {}
    for symbol, bounds in program.range_constraints.items():
        # A data-dependent value (``.item()``, tensor_split's indices) may be unbounded below: None, like above.
        ranges[str(symbol)] = (
            int(bounds.lower) if _finite(bounds.lower) else None,
            int(bounds.upper) if _finite(bounds.upper) else None,
        )
    gm.meta[RANGES] = ranges
    return gm


def size_hint(size: int | torch.SymInt) -> int:
    """The example's value of one size of a lowered graph's metadata, read without a guard.

    ``int(size)`` (or ``size.numel()``, ``size > 1``) on a SymInt installs a guard in the shape environment
    that every copy of a lowering shares, replacing the symbol by the example's size for good: later
    engines, signatures and checks then see a static graph (``shape_analysis.specialized_symbols``).
    An unbacked size (a data-dependent one, with no example value) reads as 0.
    """
    if isinstance(size, int):
        return size
    hint = size.node.hint
    return int(hint) if hint is not None else 0


def value_bytes(node: torch.fx.Node) -> int:
    """Bytes of the value ``node`` produces at the example's sizes (0 for a non-Tensor): what crossing a
    segment boundary moves, for the partitioner's costs and the benchmarks' ``boundary_bytes`` alike."""
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor):
        return 0
    count = 1
    for size in value.shape:
        count *= size_hint(size)
    return count * value.element_size()


def expression_bounds(expr: Any, ranges: Mapping[str, tuple[int | None, int | None]]) -> tuple[int | None, int | None]:
    """(min, max) of a sympy expression over its symbols' ``ranges`` (None: unbounded that way); a symbol
    without a range counts as any size (at least 0, no max)."""
    from torch.utils._sympy.numbers import int_oo
    from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

    bounds = {}
    for symbol in expr.free_symbols:
        low, high = ranges.get(str(symbol), (0, None))
        bounds[symbol] = ValueRanges(-int_oo if low is None else low, int_oo if high is None else high)
    bound = bound_sympy(expr, bounds)
    return (int(bound.lower) if _finite(bound.lower) else None, int(bound.upper) if _finite(bound.upper) else None)


def _finite(bound: Any) -> bool:
    return bool(getattr(bound, "is_finite", True)) and str(bound) not in ("oo", "-oo", "int_oo", "-int_oo")


def symbol_ranges(gm: torch.fx.GraphModule) -> dict[str, tuple[int | None, int | None]]:
    """``{symbol name: (min, max)}`` of the dynamic sizes in ``gm``'s metadata (empty for static graphs)."""
    return dict(gm.meta.get(RANGES, {}))


DIM_NAMES = "trtcheck_dim_names"
"""``GraphModule.meta`` key: ``{symbol name: the torch.export.Dim's name}`` (``{"s17": "batch"}``)."""


def dim_names(gm: torch.fx.GraphModule) -> dict[str, str]:
    """The user's name of each symbol (its ``torch.export.Dim``'s), where lowering could tell; messages use it."""
    return dict(gm.meta.get(DIM_NAMES, {}))


def _dim_names(gm: torch.fx.GraphModule, model: torch.nn.Module, args: tuple, kwargs: dict, dynamic_shapes: Any) -> dict[str, str]:
    """Pair each input size that export made a plain symbol with the Dim the user gave for it. Best effort:
    ``dynamic_shapes`` mirrors the inputs (a tuple like ``args``, or a dict by parameter name); any other
    form names nothing, and messages then show the symbol alone."""
    import inspect

    import sympy

    try:
        if isinstance(dynamic_shapes, dict):
            bound = inspect.signature(model.forward).bind(*args, **kwargs)
            pairs = [(value, dynamic_shapes.get(name)) for name, value in bound.arguments.items()]
        else:
            pairs = list(zip(args, dynamic_shapes))
    except (TypeError, ValueError):
        return {}
    specs: list[Any] = []

    def walk(value: Any, spec: Any) -> None:
        if isinstance(value, torch.Tensor):
            specs.append(spec)
        elif isinstance(value, (tuple, list)):
            for index, item in enumerate(value):
                walk(item, spec[index] if isinstance(spec, (tuple, list)) and index < len(spec) else None)
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(item, spec.get(key) if isinstance(spec, dict) else None)

    for value, spec in pairs:
        walk(value, spec)
    metas = [node.meta.get("val") for node in gm.graph.nodes if node.op == "placeholder"]
    tensors = [m for m in metas if isinstance(m, torch.Tensor)]
    names: dict[str, str] = {}
    for meta, spec in zip(tensors, specs):
        dims = spec.items() if isinstance(spec, dict) else enumerate(spec) if isinstance(spec, (tuple, list)) else ()
        for dim, dim_spec in dims:
            name = getattr(dim_spec, "__name__", None)
            if name and isinstance(dim, int) and dim < meta.dim():
                size = meta.shape[dim]
                if isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol):
                    names.setdefault(str(size.node.expr), name)
    return names


def _is_constraint_error(error: BaseException) -> bool:
    names = {type(e).__name__ for e in (error, error.__cause__, error.__context__) if e is not None}
    return bool(names & {"ConstraintViolationError", "UserError"}) or "Constraints violated" in str(error)


def _first_lines(error: BaseException, count: int) -> str:
    return "\n".join(str(error).strip().splitlines()[:count]) or type(error).__name__


def lower_program(program: torch.export.ExportedProgram) -> torch.fx.GraphModule:
    """The core-ATen ``GraphModule`` of an already exported program (no second trace)."""
    try:
        program = program.run_decompositions(core_aten_table())
    except Exception as error:
        raise LoweringError(f"decomposing the exported program to core ATen failed: {type(error).__name__}: {error}") from error
    return _module_of(program)


def _raise_if_inputs_do_not_fit(model: torch.nn.Module, args: tuple, kwargs: dict) -> None:
    """When export failed, tell "the example inputs do not fit the model" apart from "not exportable"."""
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 - any failure of eager itself means the inputs do not fit
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


def _drop_guards(gm: torch.fx.GraphModule) -> None:
    """Remove ``torch.export``'s input-guard call: it checks shapes, not computes, and is no ATen op."""
    for node in list(gm.graph.nodes):
        if node.op == "call_module" and node.target == "_guards_fn" and not node.users:
            gm.graph.erase_node(node)
            if hasattr(gm, "_guards_fn"):
                delattr(gm, "_guards_fn")
    gm.recompile()


def copy_graph_module(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm`` with its own graph (nodes copied, ``meta`` shared), code generated lazily."""
    graph = torch.fx.Graph()
    output = graph.graph_copy(gm.graph, {}, return_output_node=True)
    if isinstance(output, tuple):  # graph_copy returns (value, output_node) with return_output_node
        output_value, output_node = output
        graph.output(output_value, type_expr=getattr(output_node, "type", None))
    copy = _GraphModule(gm, graph)
    copy.meta.update(gm.meta)  # the symbol ranges of a dynamic graph travel with every copy
    copy.graph._codegen = gm.graph._codegen
    copy.recompile()
    return copy


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
    return gm


LOWERING_SECONDS = "trtcheck_lowering_s"  # GraphModule.meta key: how long LoweringCache took to lower it


class LoweringCache:
    """One lowering per model, shared by every setting the model is compiled and verified with.

    ``torch.export`` and the core-ATen decompositions are most of the time ``compile`` takes, and they do
    not depend on the settings: the verification matrix lowers each zoo model once (per process) and
    partitions every preset from a copy (``compile(..., lowered=...)``). The first request for a key
    lowers two fresh builds of the model and requires the same graph and the same constants: lowering's
    determinism from scratch, checked once per model instead of once per setting.
    """

    def __init__(self) -> None:
        self._graphs: dict[str, torch.fx.GraphModule] = {}

    def get(self, key: str, build: Any, dynamic_shapes: Any = None) -> torch.fx.GraphModule:
        """The lowered graph of ``build()`` (a callable returning ``(model, example_inputs)``), lowered once
        (with torch.export's ``dynamic_shapes``, when given)."""
        if key not in self._graphs:
            start = time.perf_counter()
            first = _lower_fresh(build, dynamic_shapes)
            first.meta[LOWERING_SECONDS] = time.perf_counter() - start
            second = _lower_fresh(build, dynamic_shapes)
            difference = _graph_difference(first, second)
            if difference:
                raise LoweringError(
                    f"lowering {key} twice from scratch gave different graphs ({difference}): torch.export or a "
                    "decomposition is not deterministic for this model, so no partition of it can be reproduced"
                )
            self._graphs[key] = first
        return self._graphs[key]

    def __len__(self) -> int:
        return len(self._graphs)


def _lower_fresh(build: Any, dynamic_shapes: Any = None) -> torch.fx.GraphModule:
    model, example_inputs = build()
    args, kwargs = independent_inputs(example_inputs)
    return lower(model, args, kwargs, dynamic_shapes=dynamic_shapes)


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
