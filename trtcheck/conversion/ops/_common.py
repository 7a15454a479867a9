"""Shared pieces of the converters: the one capability check every converter runs, dtype handling.

Every built-in converter is registered through :func:`converter`, which declares next to the converter
what it can take: the dtypes of its tensor inputs and outputs, the arguments that must be constants,
whether it handles dynamic (symbolic) shapes, and the op's own argument check. Its validator composes
those with :func:`engine_refusal` (dtypes a TensorRT segment may hold, static shapes unless declared
dynamic, no SymFloat/SymBool), so no converter can forget the float64 rule; each refusal is a
:class:`Refusal` naming the argument and value at fault. Arguments reach converters and checks bound to
the ATen schema (:class:`BoundArgs`), never as raw ``node.args``.

``dynamic=True`` is a promise that the converter reads no size from metadata that may be symbolic (rank,
dtype and static sizes are fine) or reads sizes through the context's ``int_value``/``shape_list``/
``size_expr``; it then also takes SymInt-valued inputs (``sym_size`` results, SymInt arithmetic), which
are 0-d int64 ONNX values. The default is False: a converter nobody audited for symbolic sizes refuses them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import onnx
import onnx.defs
import torch
import torch.fx
from torch.fx.experimental.symbolic_shapes import statically_known_true

from trtcheck import dtypes as _dtypes
from trtcheck.conversion.arguments import BoundArgs, bind
from trtcheck.conversion.context import OPSET, is_symint, onnx_dtype
from trtcheck.conversion.registry import OpTarget, Refusal, register
from trtcheck.lowering.graph import is_getitem
from trtcheck.lowering.symbols import Ranges, expression_bounds, symbol_ranges

if TYPE_CHECKING:  # pragma: no cover - only for annotations
    from trtcheck.conversion.context import ConversionContext

aten = torch.ops.aten

# The one dtype table (trtcheck.dtypes) decides; these are its sets under the names converters use.
FLOAT: frozenset[torch.dtype] = _dtypes.FLOAT
INT: frozenset[torch.dtype] = _dtypes.INT
NUMERIC: frozenset[torch.dtype] = _dtypes.NUMERIC
BOOL: frozenset[torch.dtype] = _dtypes.BOOL
#: What a TensorRT segment may hold: no float64 (TensorRT has none), int16, int8/uint8 (quantized or
#: I/O-only types there) or complex. ``trtcheck.dtypes.ENGINE_DTYPES``, the table's ``in_engine`` column.
TENSORRT_DTYPES: frozenset[torch.dtype] = _dtypes.ENGINE_DTYPES

#: A converter's own argument check: True accepts, False or a Refusal (with its reason) refuses.
Check = Callable[[BoundArgs], bool | Refusal]
#: A built-in converter: reads its arguments by schema name and returns the ONNX name(s) of its result(s).
BoundConverterFn = Callable[["ConversionContext", BoundArgs], str | Sequence[str]]


def _iter_values(value: Any) -> Iterator[Any]:
    """Every leaf of an argument, looking into (nested) lists and tuples."""
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from _iter_values(item)
    else:
        yield value


def iter_nodes(value: Any) -> Iterator[torch.fx.Node]:
    """Every fx Node in an argument, looking into (nested) lists and tuples."""
    return (v for v in _iter_values(value) if isinstance(v, torch.fx.Node))


def _symbolic(value: Any) -> bool:
    return isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool))


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _dtype_names(dtypes: Iterable[torch.dtype]) -> str:
    return ", ".join(sorted(map(_dtype_name, dtypes)))


def _tensor_refusal(what: str, value: Any, allow_empty: bool = False, dynamic: bool = False,
                    ranges: Ranges | None = None) -> str | None:
    """Why ``value`` cannot live in a TensorRT segment, or None.

    Dense tensors only (a sparse tensor has no ONNX form), with static shapes unless the converter is
    ``dynamic``, and no empty tensors, a corner TensorRT layers handle unevenly: a symbolic size must be
    at least 1 over its whole range (``ranges``, see :func:`_may_be_empty`).
    """
    if not isinstance(value, torch.Tensor):
        return f"{what} is {type(value).__name__}, not a tensor"
    if value.layout != torch.strided:
        return f"{what} is a {value.layout} tensor; ONNX and TensorRT take dense (strided) tensors only"
    if value.dtype not in TENSORRT_DTYPES:
        return (
            f"{what} is {_dtype_name(value.dtype)}, which a TensorRT segment cannot hold "
            f"(it holds {_dtype_names(TENSORRT_DTYPES)})"
        )
    static = all(isinstance(d, int) for d in value.shape)
    if not static and not dynamic:
        return f"{what} has the dynamic shape {list(value.shape)}; converters need static shapes"
    if allow_empty:
        return None
    if static and value.numel() == 0:
        return f"{what} is empty (shape {list(value.shape)})"
    if not static and _may_be_empty(value, ranges or {}):
        return f"{what} may be empty: a size of {list(value.shape)} can be 0 in its range"
    return None


def _may_be_empty(value: torch.Tensor, ranges: Ranges) -> bool:
    """True unless every size is >= 1 over its symbols' ranges.

    The ranges export recorded come first: while tracing, export assumes every size is at least 2, so the
    shape environment alone would call ``Dim(min=0)`` non-empty, yet the program takes 0. Without them (a
    standalone segment module), the shape environment decides; no guard is added either way.
    """
    return not all(_at_least_one(size, ranges) for size in value.shape)


def _at_least_one(size: int | torch.SymInt, ranges: Ranges) -> bool:
    if isinstance(size, int):
        return size >= 1
    expr = size.node.expr
    if ranges and all(str(symbol) in ranges for symbol in expr.free_symbols):
        low, _ = expression_bounds(expr, ranges)
        return low is not None and low >= 1
    return statically_known_true(size >= 1)


def _value_refusal(what: str, value: Any, allow_empty: bool, dynamic: bool, ranges: Ranges) -> str | None:
    """:func:`_tensor_refusal`, except that a ``dynamic`` converter also takes SymInt values (int64 in ONNX)."""
    if dynamic and is_symint(value):
        return None
    if isinstance(value, (torch.SymFloat, torch.SymBool)):
        return f"{what} is a {type(value).__name__} ({value}); only SymInt sizes convert (to int64 values)"
    return _tensor_refusal(what, value, allow_empty, dynamic, ranges)


def output_metas(node: torch.fx.Node) -> list[Any]:
    """The output meta value(s) of ``node`` as a list."""
    value = node.meta.get("val")
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _named_inputs(node: torch.fx.Node, args: BoundArgs | None = None) -> Iterator[tuple[str, torch.fx.Node]]:
    """``(argument name, tensor node)`` for every tensor input, named by the schema when there is one."""
    if args is None and isinstance(node.target, torch._ops.OpOverload):
        args = bind(node)
    if args is not None:
        named: Iterable[tuple[str, Any]] = args.as_dict().items()
    else:  # e.g. a user's plain-function target: positional names
        named = [(f"argument {i}", v) for i, v in enumerate((*node.args, *node.kwargs.values()))]
    for name, value in named:
        for index, producer in enumerate(iter_nodes(value)):
            yield (f"{name}[{index}]" if isinstance(value, (list, tuple)) else name), producer


def engine_refusal(node: torch.fx.Node, args: BoundArgs | None = None, dynamic: bool = False, empty: bool = False) -> str | None:
    """The check shared by every converter: why ``node`` cannot be in a TensorRT segment at all, or None.

    Refuses float64/int8/int16/complex inputs or outputs (``trtcheck.dtypes``' ``in_engine``), sparse or
    empty shapes, symbolic values written into the arguments, SymFloat/SymBool inputs, and, unless the
    converter is ``dynamic``, symbolic shapes and SymInt inputs (e.g. the result of a ``sym_size`` node); an empty
    tensor only where the converter handles one (``empty``: a slice that selects nothing, a ``cat`` reading one).
    ``args``: ``node``'s bound arguments, when the caller has them.
    """
    symbolic = [v for v in _iter_values((node.args, tuple(node.kwargs.values()))) if _symbolic(v)]
    if symbolic:
        return f"symbolic argument {symbolic[0]!r}: converters need values known when converting"
    owner = node.graph.owning_module
    ranges = symbol_ranges(owner) if dynamic and owner is not None else {}
    for name, producer in _named_inputs(node, args):
        reason = _value_refusal(f"input {name} (%{producer.name})", producer.meta.get("val"), empty, dynamic, ranges)
        if reason:
            return reason
    outputs = output_metas(node)
    # Extra outputs may be empty placeholders (batch norm's saved statistics in inference mode).
    for index, value in enumerate(outputs):
        what = "the output" if len(outputs) == 1 else f"output {index}"
        reason = _value_refusal(what, value, index > 0 or empty, dynamic, ranges)
        if reason:
            return reason
    return None


def value_dtype(value: Any) -> torch.dtype:
    """The dtype of a node's ``meta["val"]``: a tensor's own, int64 for a SymInt (its ONNX form)."""
    return torch.int64 if is_symint(value) else value.dtype


def _dtype_refusal(args: BoundArgs, inputs: frozenset[torch.dtype], outputs: frozenset[torch.dtype]) -> str | None:
    for name, producer in _named_inputs(args.node, args):
        dtype = value_dtype(producer.meta["val"])
        if dtype not in inputs:
            return f"input {name} is {_dtype_name(dtype)}; this converter takes {_dtype_names(inputs)}"
    for index, value in enumerate(output_metas(args.node)):
        if value_dtype(value) not in outputs:
            return f"output {index} is {_dtype_name(value_dtype(value))}; this converter produces {_dtype_names(outputs)}"
    return None


def _constant_refusal(args: BoundArgs, constants: Sequence[str]) -> str | None:
    """Why an argument that must be a constant is not. ``constants`` is declared for a family of
    overloads, so a name one overload lacks (``mean.default`` has no ``dim``) is skipped."""
    for name in constants:
        if name in args and any(isinstance(v, torch.fx.Node) for v in _iter_values(args[name])):
            return f"{name} is computed at run time ({args[name]!r}); this converter needs it as a constant"
    return None


def converter(
    *targets: OpTarget,
    dtypes: frozenset[torch.dtype] = TENSORRT_DTYPES,
    outputs: frozenset[torch.dtype] = TENSORRT_DTYPES,
    constants: Sequence[str] = (),
    check: Check | None = None,
    dynamic: bool = False,
    empty: bool = False,
) -> Callable[[BoundConverterFn], BoundConverterFn]:
    """Register a built-in converter ``fn(ctx, args)`` together with what it accepts.

    Its validator is :func:`engine_refusal` + the dtypes its tensor inputs (``dtypes``) and outputs
    (``outputs``) may have + the arguments that must be constants (``constants``, schema names) + the
    op's own ``check(args)``. ``dtypes``/``outputs`` must be dtypes the ONNX ops the converter emits
    accept (a test checks every converter against the ONNX schemas). Arguments are bound to the schema
    once per call (:func:`~trtcheck.conversion.arguments.bind`), for the check and the converter alike.
    ``dynamic``: the converter handles symbolic sizes and SymInt inputs (see the module docstring); its
    ``check`` then refuses, naming the argument and dim, any dynamic size it cannot handle. ``empty``: it handles
    empty tensors among its inputs and outputs (an empty slice is a valid value; a ``cat`` drops one).

    This is the built-in path: the converter is marked ``builtin`` (a crash in its validator is a
    trtcheck bug that verification reports). Users register theirs with ``trtcheck.conversion.register``.
    """

    def validator(node: torch.fx.Node) -> bool | Refusal:
        args = bind(node)
        reason = (engine_refusal(node, args, dynamic, empty) or _dtype_refusal(args, dtypes, outputs)
                  or _constant_refusal(args, constants))
        if reason:
            return Refusal(reason)
        return True if check is None else check(args)

    # The declaration, readable by tests: every dtype claimed must be one the dtype table lets engines hold.
    validator.input_dtypes = dtypes  # type: ignore[attr-defined]
    validator.output_dtypes = outputs  # type: ignore[attr-defined]
    validator.dynamic = dynamic  # type: ignore[attr-defined]

    def decorator(fn: BoundConverterFn) -> BoundConverterFn:
        @functools.wraps(fn)
        def convert(ctx: ConversionContext, node: torch.fx.Node) -> str | Sequence[str]:
            return fn(ctx, bind(node))

        register(*targets, validator=validator, _builtin=True)(convert)
        return fn

    return decorator


def register_table(
    table: Mapping[OpTarget, Any],
    factory: Callable[[Any], BoundConverterFn],
    per_entry: Callable[[OpTarget, Any], dict[str, Any]] | None = None,
    **declared: Any,
) -> None:
    """``converter(target, **declared)(factory(entry))`` for every ``target: entry`` of ``table``.

    The op modules describe families of ops as tables (aten overload -> ONNX op); this registers them all
    one way. ``per_entry(target, entry)`` gives declarations that vary by row (e.g. the accepted dtypes).
    """
    for target, entry in table.items():
        options = {**declared, **(per_entry(target, entry) if per_entry else {})}
        converter(target, **options)(factory(entry))


@functools.cache
def onnx_accepts(op_type: str) -> frozenset[torch.dtype]:
    """The engine dtypes ONNX ``op_type`` takes as data at trtcheck's opset, read from its schema.

    Validators declare their dtypes with this (``dtypes=FLOAT & onnx_accepts("Elu")``) so none can claim
    a dtype the emitted op refuses: opset 19's Elu, Sin or InstanceNormalization have no bfloat16, Celu no
    float16 either, and the checker would reject the whole segment at conversion time.
    """
    allowed = set(onnx.defs.get_schema(op_type, OPSET).type_constraints[0].allowed_type_strs)
    return frozenset(
        d for d in TENSORRT_DTYPES if f"tensor({onnx.TensorProto.DataType.Name(onnx_dtype(d)).lower()})" in allowed
    )


def refuse(reason: str) -> Refusal:
    """A check's "no", with the reason ``partition.explain()`` shows (name the argument and its value)."""
    return Refusal(reason)


def out_meta(node: torch.fx.Node) -> torch.Tensor:
    """The (first) output FakeTensor of a node."""
    value = node.meta["val"]
    return value[0] if isinstance(value, (list, tuple)) else value


def out_dtype(node: torch.fx.Node) -> torch.dtype:
    """Output dtype of a node, from its metadata."""
    return out_meta(node).dtype


def dtype_of(value: Any) -> torch.dtype:
    """dtype of an fx node's tensor (int64 for a SymInt node, its ONNX form), or the default dtype PyTorch
    gives a Python scalar."""
    if isinstance(value, torch.fx.Node):
        return value_dtype(value.meta["val"])
    return torch.tensor(value).dtype


def promoted(a: Any, b: Any) -> torch.dtype:
    """PyTorch's type promotion of two operands (tensor nodes, SymInt nodes or Python scalars).

    Uses torch.result_type on stand-ins so 0-dim tensors and scalars weigh exactly as in eager mode; a
    SymInt node weighs as the Python int it is in eager mode (``x * x.shape[0]`` keeps x's dtype).
    """

    def sample(value: Any) -> Any:
        if isinstance(value, torch.fx.Node):
            meta = value.meta["val"]
            if is_symint(meta):
                return 1
            return torch.empty((1,) if meta.dim() else (), dtype=meta.dtype)
        return value

    sa, sb = sample(a), sample(b)
    if not isinstance(sa, torch.Tensor) and not isinstance(sb, torch.Tensor):
        sa = torch.tensor(sa)
    return torch.result_type(sa, sb)


def cast(ctx: ConversionContext, name: str, source: torch.dtype, target: torch.dtype) -> str:
    """``name`` as ``target`` dtype, emitting a Cast only when the dtype actually changes."""
    if source == target:
        return name
    return ctx.add("Cast", [name], to=onnx_dtype(target))


def operand(ctx: ConversionContext, value: Any, dtype: torch.dtype) -> str:
    """An ONNX name for a node or Python scalar, converted to ``dtype`` (the op's compute dtype)."""
    if isinstance(value, torch.fx.Node):
        return cast(ctx, ctx.name(value), dtype_of(value), dtype)
    return ctx.constant(value, dtype)


def operands(ctx: ConversionContext, values: Iterable[Any], dtype: torch.dtype) -> list[str]:
    """:func:`operand` for several values."""
    return [operand(ctx, v, dtype) for v in values]


def ints(ctx: ConversionContext, values: Sequence[int] | int) -> str:
    """An int64 initializer (shapes, axes, pads: ONNX always wants int64 there)."""
    return ctx.constant(list(values) if not isinstance(values, int) else values, torch.int64)


def norm_dims(dims: Any, rank: int) -> list[int]:
    """Non-negative axes from an int / list of ints that may be negative (None/[] = all axes)."""
    if dims is None:
        return list(range(rank))
    dims = [dims] if isinstance(dims, int) else list(dims)
    if not dims:
        return list(range(rank))
    return sorted(d % max(rank, 1) for d in dims)


def only_first_output_used(args: BoundArgs) -> bool | Refusal:
    """Accepts a node when only ``getitem(node, 0)`` is used: for ops whose extra outputs TensorRT lacks.

    Export leaves dead ``getitem(node, 1)`` nodes (no users) behind; those do not count.
    """
    for user in args.node.users:
        if not is_getitem(user) or (user.args[1] != 0 and user.users):
            which = f"output {user.args[1]}" if is_getitem(user) else "the tuple"
            return Refusal(f"{which} of {args.node.target} is used (by %{user.name}); the ONNX op gives only output 0")
    return True


def dynamic_refusal(args: BoundArgs, name: str, axes: Iterable[int], why: str) -> Refusal | None:
    """A Refusal naming the first of ``axes`` of tensor argument ``name`` whose size is symbolic, or None.

    For ``dynamic`` converters that still need some sizes when converting (a split along a dim, a pool in
    ceil mode): ``why`` says what the size is needed for.
    """
    shape = args.meta(name).shape
    for axis in axes:
        if not isinstance(shape[axis], int):
            return refuse(f"{name} has the dynamic size {shape[axis]} at dim {axis}: {why}")
    return None


def all_ints(*values: Any) -> bool:
    """True when every value (flattening lists) is a plain int: static shapes/sizes only."""
    return all(isinstance(v, int) and not isinstance(v, bool) for v in _iter_values(values))
