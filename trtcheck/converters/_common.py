"""Shared pieces of the converters: the one capability check every converter runs, dtype handling.

Every converter is registered through :func:`converter`, which composes its validator from
:func:`tensorrt_can_hold` (dtypes TensorRT has, static shapes, no symbolic arguments), an optional
dtype set for the op's tensor inputs, and the op's own argument check. Keeping that composition in one
place means no converter can forget the float64 rule.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from trtcheck.converters.registry import ConverterFn, OpTarget, register

if TYPE_CHECKING:  # pragma: no cover - the context imports the registry, not vice versa
    from trtcheck.conversion import ConversionContext

aten = torch.ops.aten

FLOAT: frozenset[torch.dtype] = frozenset({torch.float32, torch.float16, torch.bfloat16})
INT: frozenset[torch.dtype] = frozenset({torch.int32, torch.int64})
NUMERIC: frozenset[torch.dtype] = FLOAT | INT
BOOL: frozenset[torch.dtype] = frozenset({torch.bool})
# What TensorRT tensors can be. No float64 (TensorRT has none), no complex, and int8/uint8 only exist
# there as quantized types or network I/O, so they are left to PyTorch as well.
TENSORRT_DTYPES: frozenset[torch.dtype] = NUMERIC | BOOL

Check = Callable[[torch.fx.Node], bool]


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


def _tensor_ok(value: Any, allow_empty: bool = False) -> bool:
    # Static shapes only (converters read shapes from metadata), and no empty tensors, a corner
    # TensorRT layers handle unevenly.
    return (
        isinstance(value, torch.Tensor)
        and value.dtype in TENSORRT_DTYPES
        and all(isinstance(d, int) for d in value.shape)
        and (allow_empty or value.numel() > 0)
    )


def input_metas(node: torch.fx.Node) -> list[torch.Tensor]:
    """The FakeTensor metas of every tensor input of ``node``."""
    return [n.meta.get("val") for n in iter_nodes((node.args, tuple(node.kwargs.values())))]


def tensorrt_can_hold(node: torch.fx.Node) -> bool:
    """The check shared by every converter: TensorRT dtypes, static shapes, no symbolic arguments.

    Rejects float64/complex/int8 inputs or outputs, dynamic (SymInt) or empty shapes, SymInt/SymFloat
    arguments and inputs that are not tensors (e.g. the result of a ``sym_size`` node).
    """
    args = (node.args, tuple(node.kwargs.values()))
    if any(_symbolic(v) for v in _iter_values(args)):
        return False
    if not all(_tensor_ok(meta) for meta in input_metas(node)):
        return False
    outputs = output_metas(node)
    # Extra outputs may be empty placeholders (batch norm's saved statistics in inference mode).
    return bool(outputs) and _tensor_ok(outputs[0]) and all(_tensor_ok(o, allow_empty=True) for o in outputs)


def output_metas(node: torch.fx.Node) -> list[Any]:
    """The output meta value(s) of ``node`` as a list."""
    value = node.meta.get("val")
    return list(value) if isinstance(value, (list, tuple)) else [value]


def converter(
    *targets: OpTarget,
    dtypes: frozenset[torch.dtype] = TENSORRT_DTYPES,
    outputs: frozenset[torch.dtype] = TENSORRT_DTYPES,
    check: Check | None = None,
) -> Callable[[ConverterFn], ConverterFn]:
    """Register a built-in converter whose validator is tensorrt_can_hold + the dtypes its tensor
    inputs (``dtypes``) and outputs (``outputs``) may have + the op's own ``check``.

    This is the built-in path: the converter is marked ``builtin`` (a crash in its validator is a
    trtcheck bug that verification reports). Users register theirs with ``trtcheck.converters.register``.
    """

    def validator(node: torch.fx.Node) -> bool:
        return (
            tensorrt_can_hold(node)
            and all(meta.dtype in dtypes for meta in input_metas(node))
            and all(meta.dtype in outputs for meta in output_metas(node))
            and (check is None or bool(check(node)))
        )

    return register(*targets, validator=validator, _builtin=True)


def arg(node: torch.fx.Node, index: int, name: str, default: Any = None) -> Any:
    """Positional-or-keyword argument ``index``/``name`` of an ATen call, with the schema's default."""
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def out_meta(node: torch.fx.Node) -> torch.Tensor:
    """The (first) output FakeTensor of a node."""
    value = node.meta["val"]
    return value[0] if isinstance(value, (list, tuple)) else value


def out_dtype(node: torch.fx.Node) -> torch.dtype:
    """Output dtype of a node, from its metadata."""
    return out_meta(node).dtype


def rank_of(value: Any) -> int:
    """Rank of an fx node's tensor (0 for Python scalars)."""
    meta = value.meta["val"] if isinstance(value, torch.fx.Node) else None
    return meta.dim() if isinstance(meta, torch.Tensor) else 0


def dtype_of(value: Any) -> torch.dtype:
    """dtype of an fx node's tensor, or the default dtype PyTorch gives a Python scalar."""
    if isinstance(value, torch.fx.Node):
        return value.meta["val"].dtype
    return torch.tensor(value).dtype


def promoted(a: Any, b: Any) -> torch.dtype:
    """PyTorch's type promotion of two operands (tensor nodes or Python scalars).

    Uses torch.result_type on stand-ins so 0-dim tensors and scalars weigh exactly as in eager mode.
    """

    def sample(value: Any) -> Any:
        if isinstance(value, torch.fx.Node):
            meta = value.meta["val"]
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
    from trtcheck.conversion import onnx_dtype  # late: conversion imports the registry

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


def only_first_output_used(node: torch.fx.Node) -> bool:
    """True when only ``getitem(node, 0)`` is used: for ops whose extra outputs TensorRT lacks.

    Export leaves dead ``getitem(node, 1)`` nodes (no users) behind; those do not count.
    """
    return all(
        u.target is operator.getitem and (u.args[1] == 0 or not u.users) for u in node.users
    )


def all_ints(*values: Any) -> bool:
    """True when every value (flattening lists) is a plain int: static shapes/sizes only."""
    return all(isinstance(v, int) and not isinstance(v, bool) for v in _iter_values(values))
