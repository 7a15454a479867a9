"""``InputSignature``: what a compiled module accepts, checked on every call before any engine runs.

torch.export specializes its graph to the example: static shapes, dtypes, the device, the layout its
views were traced on, and the value of every non-Tensor input (``k: float`` becomes a constant). The
export guards that checked this are dropped with lowering, so the compiled module checks it itself:
a call that differs gets an ``InputMismatchError`` naming the input and the fix, never a wrong result
or a raw error from generated code.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch
import torch.fx
from torch.utils._pytree import keystr, tree_flatten, tree_flatten_with_path, tree_is_leaf, tree_unflatten

from trtcheck.errors import InputMismatchError
from trtcheck.lowering.inputs import same_value
from trtcheck.lowering.sizes import Size, SizeCheck, SymbolicSize, describe_sizes, symbolic_size
from trtcheck.lowering.symbols import dim_names, symbol_ranges
from trtcheck.runtime.stitch import dim_order, restride, restride_in_order


@dataclass(frozen=True)
class _TensorLeaf:
    shape: torch.Size
    dtype: torch.dtype
    device: torch.device
    stride: tuple[int, ...] | None  # the layout the graph was traced on; None when any layout will do
    sizes: tuple[Size, ...] | None = None  # with a dynamic size: every size, static or not
    order: tuple[int, ...] | None = None  # dynamic: the example's dims from outermost to innermost in memory


@dataclass(frozen=True)
class _ValueLeaf:
    value: Any


@dataclass(frozen=True)
class _Binding:
    """How the example call bound to ``forward``'s parameters, so that any call binding the same way runs.

    A user may pass a tensor by keyword (``m(x=x)``), or a default explicitly (``m(x, scale=1.0)`` or
    ``m(x, 1.0)``): Python binds each to the same parameters, and so does this, rearranging the call into the
    example's positional and keyword layout. A parameter the example left at its default was specialized to
    that default by torch.export, so a call may pass it only with that value (the value check says so).
    """

    signature: inspect.Signature
    positional: tuple[str, ...]  # the parameters the example passed by position, in order
    keywords: tuple[str, ...]  # those it passed by keyword

    @classmethod
    def of(cls, model: Any, args: tuple, kwargs: dict) -> _Binding | None:
        try:
            signature = inspect.signature(model.forward)
            bound = signature.bind(*args, **kwargs)
        except (TypeError, ValueError, AttributeError):
            return None
        kinds = {name: parameter.kind for name, parameter in signature.parameters.items()}
        if any(kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD) for kind in kinds.values()):
            return None  # *args/**kwargs bind calls of any shape: only the example's own structure is safe
        positional = tuple(list(bound.arguments)[: len(args)])
        return cls(signature, positional, tuple(kwargs))

    def as_example(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """The call's inputs in the example's layout; the call as it was when it does not bind (the structure
        check then names the mismatch)."""
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError:
            return args, kwargs
        given = dict(bound.arguments)
        for name, parameter in self.signature.parameters.items():
            if name in given and name not in self.positional and name not in self.keywords:
                default = parameter.default
                if default is inspect.Parameter.empty or not same_value(given[name], default):
                    raise InputMismatchError(
                        f"input {name!r} is {given[name]!r}, but the module was compiled with it left at its default "
                        f"({default!r}): torch.export made that value a constant of the graph. Compile again with "
                        f"{name}={given[name]!r} among the example inputs"
                    )
        bound.apply_defaults()
        return tuple(bound.arguments[name] for name in self.positional), {name: bound.arguments[name] for name in self.keywords}


class InputSignature:
    """What a compiled module accepts: the example inputs' structure, Tensor specs and non-Tensor values.

    torch.export specializes its graph to the example: static shapes, dtypes, the device, the layout its
    views were traced on, and the value of every non-Tensor input (``k: float`` becomes a constant). The
    export guards that checked this are dropped with lowering, so the compiled module checks it itself,
    before any engine runs: a call that differs gets an ``InputMismatchError`` naming the input and the
    fix, never a wrong result or a raw error from generated code.
    """

    def __init__(
        self, args: Sequence[Any], kwargs: Mapping[str, Any], names: Sequence[str], graph_module: torch.fx.GraphModule | None = None,
        binding: _Binding | None = None,
    ) -> None:
        leaves, self.spec = tree_flatten((tuple(args), dict(kwargs)))
        self.binding = binding
        # The common call, positional leaves only, is checked without flattening (the hot path of every call).
        self._flat = not kwargs and all(tree_is_leaf(arg) for arg in args)
        self.names = tuple(names)
        metas = _placeholder_metas(graph_module, len(leaves))
        ranges = symbol_ranges(graph_module) if graph_module is not None else {}
        self.dim_names = dim_names(graph_module) if graph_module is not None else {}
        self.leaves = tuple(
            _tensor_leaf(x, meta, ranges, self.dim_names) if isinstance(x, torch.Tensor) else _ValueLeaf(x)
            for x, meta in zip(leaves, metas)
        )
        # Every size of every dynamic input, checked together after the loop over the inputs (``SizeCheck``): a
        # size derived from a symbol that a later input sets (``a`` of 2*s rows before ``b`` of s) is checked too.
        self._dynamic = tuple(i for i, leaf in enumerate(self.leaves) if isinstance(leaf, _TensorLeaf) and leaf.sizes is not None)
        self.dynamic = bool(self._dynamic)
        self._sizes = SizeCheck(
            [self.leaves[i].sizes for i in self._dynamic], [self.names[i] for i in self._dynamic], ranges, self.dim_names
        ) if self.dynamic else None

    @classmethod
    def of(
        cls, model: torch.nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any] | None = None, *,
        graph_module: torch.fx.GraphModule | None = None,
    ) -> InputSignature:
        """The signature of ``model`` called with ``args``/``kwargs``; with ``graph_module`` (the lowered graph, one
        placeholder per flat input), sizes its metadata holds as symbols accept their ranges."""
        kwargs = dict(kwargs or {})
        return cls(args, kwargs, _leaf_names(model, tuple(args), kwargs), graph_module, _Binding.of(model, tuple(args), kwargs))

    def symbol_ranges(self) -> dict[sympy.Symbol, tuple[int, int | None]]:
        """Every symbol that is a whole input size, with its range: what ``verify`` draws sizes from."""
        found: dict[sympy.Symbol, tuple[int, int | None]] = {}
        for leaf in self.leaves:
            if isinstance(leaf, _TensorLeaf) and leaf.sizes is not None:
                for size in leaf.sizes:
                    if isinstance(size, SymbolicSize) and isinstance(size.expr, sympy.Symbol):
                        found.setdefault(size.expr, (size.min, size.max))
        return found

    def shape_for(self, index: int, values: Mapping[sympy.Symbol, int]) -> tuple[int, ...]:
        """Flat input ``index``'s shape with every symbol set to ``values`` (its example shape when static)."""
        leaf = self.leaves[index]
        assert isinstance(leaf, _TensorLeaf)
        if leaf.sizes is None:
            return tuple(leaf.shape)
        return tuple(size if isinstance(size, int) else int(size.expr.xreplace(values)) for size in leaf.sizes)

    def describe(self) -> str:
        return ", ".join(f"{name}: {_describe_leaf(leaf)}" for name, leaf in zip(self.names, self.leaves))

    def check(self, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        """``InputMismatchError`` on a mismatch; else None when the call can run as it is, or the inputs to run
        with instead: bound as the example was (``m(x=x)`` for an example given as ``(x,)``), or laid out as
        the graph was traced."""
        if self._flat and not kwargs and len(args) == len(self.leaves):
            leaves, spec = list(args), self.spec
        else:
            leaves, spec = tree_flatten((args, kwargs))
        rebound = False
        if spec != self.spec and self.binding is not None:
            args, kwargs = self.binding.as_example(args, kwargs)
            leaves, spec = tree_flatten((args, kwargs))
            rebound = True
        restrided = False
        shapes = []  # of the dynamic inputs, in order: their sizes are checked together, after the loop
        if spec != self.spec:
            raise InputMismatchError(
                f"the compiled module takes ({self.describe()}), but was called with {len(args)} positional and "
                f"{len(kwargs)} keyword input(s) of another structure ({_describe_call(leaves)}). Call it like the "
                "model was called with the example inputs"
            )
        for index, (value, expected) in enumerate(zip(leaves, self.leaves)):
            if isinstance(expected, _TensorLeaf):
                if not isinstance(value, torch.Tensor):
                    raise self._mismatch(index, f"expected a Tensor, got {type(value).__name__} {value!r}")
                if expected.sizes is not None:
                    if value.dtype != expected.dtype or value.device != expected.device or value.dim() != len(expected.sizes):
                        raise self._mismatch(index, f"expected {_describe_leaf(expected)}, got {_describe_leaf(value)}")
                    shapes.append(value.shape)
                    if expected.order is not None and value.numel() > 1:
                        if expected.order == tuple(range(value.dim())):  # contiguous (size-1 strides are free)
                            laid_out = value.contiguous()
                        else:
                            laid_out = restride_in_order(value, expected.order)
                        if laid_out is not value:
                            leaves[index], restrided = laid_out, True
                    continue
                if value.shape != expected.shape or value.dtype != expected.dtype or value.device != expected.device:
                    raise self._mismatch(index, f"expected {_describe_leaf(expected)}, got {_describe_leaf(value)}")
                if expected.stride is not None and value.stride() != expected.stride and value.numel() > 1:
                    leaves[index], restrided = restride(value, expected.stride), True
            elif not same_value(value, expected.value):
                raise InputMismatchError(
                    f"input {self.names[index]!r} is {value!r}, but the module was compiled with "
                    f"{self.names[index]}={expected.value!r}: torch.export made that value a constant of the graph. "
                    f"Compile again with {self.names[index]}={value!r} (one compiled module per value), or pass it "
                    "as a 0-d tensor to make it a real input"
                )
        if self._sizes is not None:
            found = self._sizes.mismatch(shapes)
            if found is not None:
                raise self._mismatch(self._dynamic[found[0]], found[1])
        if restrided:
            return tree_unflatten(leaves, self.spec)
        return (tuple(args), dict(kwargs)) if rebound else None

    def _mismatch(self, index: int, what: str) -> InputMismatchError:
        return InputMismatchError(
            f"input {self.names[index]!r}: {what}. The module was compiled for the example inputs "
            f"({self.describe()}): call it with inputs like those, or compile again with examples of the new "
            "shape, dtype or device" + (" (or with dynamic_shapes covering the new size)" if not self.dynamic else
            " (or with a torch.export.Dim whose range covers the new size)")
        )


def _placeholder_metas(gm: torch.fx.GraphModule | None, count: int) -> list[Any]:
    """The metadata of each of ``gm``'s placeholders (one per flat input); Nones when there is no graph or
    its placeholders do not line up with the inputs."""
    if gm is None:
        return [None] * count
    metas = [node.meta.get("val") for node in gm.graph.nodes if node.op == "placeholder"]
    return metas if len(metas) == count else [None] * count


def _tensor_leaf(example: torch.Tensor, meta: Any, ranges: Mapping[str, tuple[int, int | None]], names: Mapping[str, str]) -> _TensorLeaf:
    """A static input keeps the example's strides, which views in the graph were traced on; a dynamic one its
    ``dim_order`` (``range(dim)`` when contiguous: the strides of size-1 dims are free). Neither where any layout
    will do (``dim_order`` is None: expanded, or a single value)."""
    order = dim_order(example.shape, example.stride())
    if not isinstance(meta, torch.Tensor) or all(isinstance(d, int) for d in meta.shape) or meta.dim() != example.dim():
        return _TensorLeaf(example.shape, example.dtype, example.device, None if order is None else tuple(example.stride()))
    if order is not None and example.is_contiguous():
        order = tuple(range(example.dim()))
    sizes = tuple(symbolic_size(d, ranges, names) for d in meta.shape)
    return _TensorLeaf(example.shape, example.dtype, example.device, None, sizes, order)


def _describe_leaf(leaf: Any) -> str:
    if isinstance(leaf, _TensorLeaf) and leaf.sizes is not None:
        return f"Tensor{describe_sizes(leaf.sizes)} {str(leaf.dtype).removeprefix('torch.')} on {leaf.device}"
    if isinstance(leaf, (_TensorLeaf, torch.Tensor)):
        return f"Tensor{list(leaf.shape)} {str(leaf.dtype).removeprefix('torch.')} on {leaf.device}"
    if isinstance(leaf, _ValueLeaf):
        return repr(leaf.value)
    return repr(leaf)


def _describe_call(leaves: list[Any]) -> str:
    return ", ".join(_describe_leaf(leaf) for leaf in leaves) or "nothing"


def _leaf_names(model: torch.nn.Module, args: tuple, kwargs: dict) -> list[str]:
    """A readable name per flat input (``x``, ``xs[2]``, ``k``), from forward's signature where it binds."""
    try:
        bound = inspect.signature(model.forward).bind(*args, **kwargs)
        named: Any = dict(bound.arguments)
        params = inspect.signature(model.forward).parameters
        for name, param in params.items():  # *args and **kwargs are bound as a tuple and a dict
            if param.kind is inspect.Parameter.VAR_POSITIONAL and name in named:
                named.update({f"{name}[{i}]": v for i, v in enumerate(named.pop(name))})
            elif param.kind is inspect.Parameter.VAR_KEYWORD and name in named:
                named.update(named.pop(name))
    except (TypeError, ValueError):
        named = {**{f"args[{i}]": a for i, a in enumerate(args)}, **kwargs}
    names = []
    for name, value in named.items():
        paths, _ = tree_flatten_with_path(value)
        names += [name + keystr(path) for path, _ in paths]
    leaves, _ = tree_flatten((args, kwargs))
    if len(names) != len(leaves):  # defaults bound differently: fall back to positions
        return [f"input {i}" for i in range(len(leaves))]
    return names
