"""Stitching: one runnable ``GraphModule`` from engines and Torch segments, in the partition's order.

Each TensorRT segment becomes a single ``call_module`` of an ``EngineModule`` followed by one ``getitem``
per output; each Torch segment's original ATen nodes are copied as they are. The stitched graph keeps the
lowered graph's placeholders and code generator (``torch.export``'s pytree specs), so the stitched module
has the model's own calling convention and output structure (tuples, lists, dicts).
"""

from __future__ import annotations

import copy
import inspect
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch
import torch.fx
from torch.utils._pytree import keystr, tree_flatten, tree_flatten_with_path, tree_is_leaf, tree_unflatten
from torch.utils.flop_counter import flop_registry

from trtcheck.engines import Engine
from trtcheck.errors import EngineRuntimeError, SettingsError, TrtcheckError
from trtcheck.lowering import dim_names, size_hint, symbol_ranges
from trtcheck.partitioning.partition import Partition, Segment, Target


class InputMismatchError(TrtcheckError, ValueError):
    """The compiled module was called with inputs that differ from the example inputs it was compiled for."""


class EngineModule(torch.nn.Module):
    """An engine as a submodule, so ``print(stitched)`` lists it and ``named_modules`` finds it."""

    def __init__(self, engine: Engine, segment_index: int) -> None:
        super().__init__()
        self.engine = engine
        self.segment_index = segment_index

    def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        try:
            return self.engine(*tensors)
        except ValueError as error:  # the engine's input check: name the segment and the fix
            raise InputMismatchError(
                f"engine of TensorRT segment @{self.segment_index}: {error}. trtcheck builds engines for the "
                "shapes and dtypes of the example inputs (and the ranges of their torch.export.Dim): call the "
                "compiled module with inputs like those, or compile again with examples of the new shape "
                "(or dynamic_shapes covering it)"
            ) from error
        except Exception as error:  # noqa: BLE001 - a run-time failure must name the engine that failed
            raise EngineRuntimeError(
                f"the {self.engine.backend} engine of TensorRT segment @{self.segment_index} failed while running: "
                f"{type(error).__name__}: {error}. Compile with torch_executed_ops naming this segment's ops "
                "to keep them in PyTorch, and report the segment (trtcheck.verify writes a repro)"
            ) from error

    def extra_repr(self) -> str:
        inputs = ", ".join(f"{s.name}: {list(s.shape)} {str(s.dtype).removeprefix('torch.')}" for s in self.engine.inputs)
        return f"backend={self.engine.backend}, segment=@{self.segment_index}, inputs=({inputs}), outputs={len(self.engine.outputs)}"


SEGMENT_META = "trtcheck_segment"
"""``node.meta`` key of every stitched node that runs a segment (an engine call, its ``getitem``s and
``restride``s, a Torch segment's copied nodes): the index of that segment (``trtcheck.profile`` reads it)."""


def stitch(partition: Partition, engines: Mapping[int, Engine]) -> torch.fx.GraphModule:
    """Build the stitched module; ``engines`` maps the index of every TensorRT segment to its engine."""
    source = partition.graph_module
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    attributes: dict[str, object] = {}  # every get_attr and call_module target of the stitched graph

    def lookup(node: torch.fx.Node) -> torch.fx.Node:
        if node not in env and node.op == "get_attr":  # constants are copied where first used
            env[node] = graph.node_copy(node)
            attributes[node.target] = operator.attrgetter(node.target)(source)
        return env[node]

    for node in source.graph.nodes:
        if node.op == "placeholder":
            env[node] = graph.node_copy(node)
    for index, segment in enumerate(partition.segments):
        if segment.target is Target.TENSORRT:
            name = f"trt_engine_{index}"
            attributes[name] = EngineModule(engines[index], index)
            _call_engine(graph, name, segment, env, lookup, index)
        else:
            for node in segment.nodes:
                env[node] = graph.node_copy(node, lookup)
                env[node].meta[SEGMENT_META] = index
    output = next(node for node in reversed(source.graph.nodes) if node.op == "output")
    graph.node_copy(output, lookup)
    graph._codegen = copy.deepcopy(source.graph._codegen)

    stitched = torch.fx.GraphModule(attributes, graph, class_name="StitchedModule")  # sets the pytree specs
    stitched.partition = partition
    return stitched


def _call_engine(graph: torch.fx.Graph, name: str, segment: Segment, env: dict, lookup, index: int) -> None:
    call = graph.call_module(name, tuple(lookup(value) for value in segment.inputs))
    call.meta[SEGMENT_META] = index
    for position, value in enumerate(segment.outputs):
        item = graph.call_function(operator.getitem, (call, position))
        item.meta = {**value.meta, SEGMENT_META: index}
        stride = recorded_stride(value)
        if stride is not None:  # the consumers were traced with this layout (views depend on it)
            if isinstance(stride, DimOrder):
                item = graph.call_function(restride_in_order, (item, stride.dims))
            else:
                item = graph.call_function(restride, (item, stride))
            item.meta = {**value.meta, SEGMENT_META: index}
        env[value] = item


@dataclass(frozen=True)
class DimOrder:
    """A layout for values of dynamic shape: the dims from outermost to innermost in memory. Their strides
    depend on the sizes of each call, so the layout is kept as an order and made dense for the call's sizes."""

    dims: tuple[int, ...]

    def __str__(self) -> str:
        return f"dims {list(self.dims)} outermost first"


def recorded_stride(value: torch.fx.Node) -> tuple[int, ...] | DimOrder | None:
    """The layout export recorded for ``value`` when it is not the contiguous one an engine returns, else None:
    its strides, or for a value of dynamic shape a ``DimOrder``.

    Engines return contiguous tensors, but the Torch ops after them were traced on the layout eager
    produced: ``view`` of a transposed tensor is legal only with the transposed strides, and
    ``as_strided`` reads memory by them. Values crossing out of an engine get that layout back.
    A symbolic layout is judged on its hints (the example's sizes) and never compared as symbols: a
    comparison would install a guard that specializes the graph's shared metadata to the example's size.
    """
    meta = value.meta.get("val")
    if not isinstance(meta, torch.Tensor):
        return None
    if not all(isinstance(d, int) for d in (*meta.shape, *meta.stride())):
        return _symbolic_layout(meta)
    if meta.numel() <= 1 or meta.is_contiguous():
        return None
    stride = tuple(int(s) for s in meta.stride())
    # An expanded layout (stride 0) cannot be written to; a contiguous tensor is as good for every view.
    return None if 0 in stride else stride


def _symbolic_layout(meta: torch.Tensor) -> DimOrder | None:
    shape, stride = [size_hint(d) for d in meta.shape], [size_hint(s) for s in meta.stride()]
    if 0 in stride or 0 in shape or max(shape, default=1) <= 1:
        return None
    order = tuple(sorted(range(len(shape)), key=lambda d: (-stride[d], d)))
    if _strides_in_order(shape, order) != tuple(stride):
        return None  # not dense in any order (a slice of a larger value): any layout the engine gives will do
    return None if order == tuple(range(len(shape))) else DimOrder(order)


def restride(tensor: torch.Tensor, stride: tuple[int, ...]) -> torch.Tensor:
    """``tensor``'s values laid out with ``stride`` (a copy, made only where the layout differs)."""
    if tensor.stride() == stride:
        return tensor
    return torch.empty_strided(tensor.shape, stride, dtype=tensor.dtype, device=tensor.device).copy_(tensor)


def restride_in_order(tensor: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    """``tensor`` laid out densely with ``dims`` outermost first (a ``DimOrder``), for this call's sizes."""
    return restride(tensor, _strides_in_order(tensor.shape, dims))


RESTRIDES = (restride, restride_in_order)
"""The functions a stitched graph calls to give an engine output its recorded layout."""


@dataclass(frozen=True)
class _Size:
    """A dynamic size of an input: its expression over export's symbols and its range."""

    expr: sympy.Expr
    min: int
    max: int | None
    label: str = ""  # the expression in the user's Dim names ("batch", "2*seq"), else the symbols'
    alias: str = ""  # the Dim's name when it is not the symbol's own: one Dim may be two symbols (see check)

    def __str__(self) -> str:
        return f"{self.label or self.expr} in [{self.min}, {'inf' if self.max is None else self.max}]"


@dataclass(frozen=True)
class _TensorLeaf:
    shape: torch.Size
    dtype: torch.dtype
    device: torch.device
    stride: tuple[int, ...] | None  # the layout the graph was traced on; None when any layout will do
    sizes: tuple[int | _Size, ...] | None = None  # with a dynamic size: every size, static or not
    order: tuple[int, ...] | None = None  # dynamic: the example's dims from outermost to innermost in memory


@dataclass(frozen=True)
class _ValueLeaf:
    value: Any


class InputSignature:
    """What a compiled module accepts: the example inputs' structure, Tensor specs and non-Tensor values.

    torch.export specializes its graph to the example: static shapes, dtypes, the device, the layout its
    views were traced on, and the value of every non-Tensor input (``k: float`` becomes a constant). The
    export guards that checked this are dropped with lowering, so the compiled module checks it itself,
    before any engine runs: a call that differs gets an ``InputMismatchError`` naming the input and the
    fix, never a wrong result or a raw error from generated code.
    """

    def __init__(
        self, args: Sequence[Any], kwargs: Mapping[str, Any], names: Sequence[str], graph_module: torch.fx.GraphModule | None = None
    ) -> None:
        leaves, self.spec = tree_flatten((tuple(args), dict(kwargs)))
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
        self.dynamic = any(isinstance(leaf, _TensorLeaf) and leaf.sizes is not None for leaf in self.leaves)

    @classmethod
    def of(
        cls, model: torch.nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any] | None = None, *,
        graph_module: torch.fx.GraphModule | None = None,
    ) -> InputSignature:
        """The signature of ``model`` called with ``args``/``kwargs``; with ``graph_module`` (the lowered graph, one
        placeholder per flat input), sizes its metadata holds as symbols accept their ranges."""
        kwargs = dict(kwargs or {})
        return cls(args, kwargs, _leaf_names(model, tuple(args), kwargs), graph_module)

    def symbol_ranges(self) -> dict[sympy.Symbol, tuple[int, int | None]]:
        """Every symbol that is a whole input size, with its range: what ``verify`` draws sizes from."""
        found: dict[sympy.Symbol, tuple[int, int | None]] = {}
        for leaf in self.leaves:
            if isinstance(leaf, _TensorLeaf) and leaf.sizes is not None:
                for size in leaf.sizes:
                    if isinstance(size, _Size) and isinstance(size.expr, sympy.Symbol):
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

    def check(self, args: tuple, kwargs: dict) -> list[Any] | None:
        """``InputMismatchError`` on a mismatch; the flat inputs when one needed the example's layout, else None."""
        if self._flat and not kwargs and len(args) == len(self.leaves):
            leaves, spec = list(args), self.spec
        else:
            leaves, spec = tree_flatten((args, kwargs))
        restrided = False
        symbols: dict[sympy.Symbol, tuple[int, int]] = {}  # symbol -> (value, the flat input that set it)
        aliases: dict[str, tuple[int, int]] = {}  # Dim name -> the same
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
                    self._check_sizes(index, value, expected.sizes, symbols, aliases)
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
            elif not _same_value(value, expected.value):
                raise InputMismatchError(
                    f"input {self.names[index]!r} is {value!r}, but the module was compiled with "
                    f"{self.names[index]}={expected.value!r}: torch.export made that value a constant of the graph. "
                    f"Compile again with {self.names[index]}={value!r} (one compiled module per value), or pass it "
                    "as a 0-d tensor to make it a real input"
                )
        return leaves if restrided else None

    def _check_sizes(self, index: int, value: torch.Tensor, sizes: Sequence[int | _Size], symbols: dict, aliases: dict) -> None:
        """Each size of ``value`` against the compiled one: static sizes exactly, a symbol within its range and
        equal wherever it or its Dim recurs (in this input or an earlier one), an expression (``2*s0``) to its
        value. ``symbols`` and ``aliases`` (by Dim name) hold the sizes earlier inputs set."""
        derived = []
        for dim, (size, got) in enumerate(zip(sizes, value.shape)):
            if isinstance(size, int):
                if got != size:
                    raise self._mismatch(index, f"dim {dim} is {got}, but it is static: {size} in every call")
                continue
            if not isinstance(size.expr, sympy.Symbol):
                derived.append((dim, size, got))
                continue
            if got < size.min or (size.max is not None and got > size.max):
                raise self._mismatch(index, f"dim {dim} is {got}, outside the range of {size}")
            seen = symbols.setdefault(size.expr, (got, index))
            # One Dim given for several inputs is one size, also where export made it two symbols (it does for
            # some small ranges): the user's name is checked as well as the symbol.
            if size.alias and seen[0] == got:
                seen = aliases.setdefault(size.alias, seen)
            if seen[0] != got:
                raise self._mismatch(
                    index, f"dim {dim} is {got}, but it is {size.label or size.expr}, which {self.names[seen[1]]!r} set to {seen[0]}"
                )
        values = {symbol: value for symbol, (value, _) in symbols.items()}
        for dim, size, got in derived:
            if size.expr.free_symbols <= values.keys():
                want = int(size.expr.xreplace(values))
                if got != want:
                    raise self._mismatch(index, f"dim {dim} is {got}, but it is {size.label or size.expr} = {want} for these inputs")

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
    if not isinstance(meta, torch.Tensor) or all(isinstance(d, int) for d in meta.shape) or meta.dim() != example.dim():
        return _TensorLeaf(example.shape, example.dtype, example.device, _layout(example))
    sizes = tuple(_size(d, ranges, names) for d in meta.shape)
    return _TensorLeaf(example.shape, example.dtype, example.device, None, sizes, _order(example))


def _size(size: int | torch.SymInt, ranges: Mapping[str, tuple[int, int | None]], names: Mapping[str, str]) -> int | _Size:
    if isinstance(size, int):
        return size
    from trtcheck.shape_analysis import dim_range, named  # it imports this package's engines

    bounds = dim_range(size, ranges)
    label = named(size.node.expr, names)
    alias = label if isinstance(size.node.expr, sympy.Symbol) and label != str(size.node.expr) else ""
    return _Size(size.node.expr, bounds.min, bounds.max, label, alias)


def _order(example: torch.Tensor) -> tuple[int, ...] | None:
    """The example's dims from largest stride to smallest: its layout, for any sizes (``range(dim)`` when
    contiguous; None when expanded or a single value, where any layout will do, as ``_layout`` says)."""
    if example.numel() <= 1 or 0 in example.stride():
        return None
    if example.is_contiguous():
        return tuple(range(example.dim()))
    return tuple(sorted(range(example.dim()), key=lambda d: (-example.stride(d), d)))


def _strides_in_order(shape: Sequence[int], order: Sequence[int]) -> tuple[int, ...]:
    """Dense strides for ``shape`` with its dims laid out in ``order`` (outermost first)."""
    strides = [0] * len(shape)
    step = 1
    for dim in reversed(order):
        strides[dim] = step
        step *= max(shape[dim], 1)
    return tuple(strides)


def _layout(example: torch.Tensor) -> tuple[int, ...] | None:
    """The example's strides, which views in the graph were traced on; None for expanded (stride 0) layouts."""
    stride = tuple(example.stride())
    return None if 0 in stride or example.numel() <= 1 else stride


def _same_value(value: Any, expected: Any) -> bool:
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


def _describe_leaf(leaf: Any) -> str:
    if isinstance(leaf, _TensorLeaf) and leaf.sizes is not None:
        sizes = ", ".join(
            str(s) if isinstance(s, int) else f"{s.label or s.expr} in {s.min}..{'inf' if s.max is None else s.max}" for s in leaf.sizes
        )
        return f"Tensor[{sizes}] {str(leaf.dtype).removeprefix('torch.')} on {leaf.device}"
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


TORCH_THREADS_AUTO = "auto"


def check_torch_threads(value: Any) -> None:
    """Refuse a ``torch_threads`` that is not ``"auto"``, None or a positive int, naming the choices."""
    if value is None or value == TORCH_THREADS_AUTO:
        return
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return
    raise SettingsError(
        f"torch_threads must be 'auto' (one PyTorch thread while engines run, when PyTorch's segments are only "
        f"memory-bound ops), None (leave torch.get_num_threads() as it is) or a positive int, got {value!r}"
    )


def is_compute_bound(node: torch.fx.Node) -> bool:
    """True for ops whose time grows with arithmetic, not memory traffic: those PyTorch's flop counter
    counts (``mm``, ``addmm``, ``bmm``, ``convolution``, attention), which gain from every core."""
    return node.op == "call_function" and getattr(node.target, "overloadpacket", None) in flop_registry


def auto_torch_threads(stitched: torch.fx.GraphModule) -> int | None:
    """PyTorch's thread count for calls of ``stitched`` under ``torch_threads="auto"``: 1 when it runs an
    engine and every op it runs in PyTorch (control-flow branches included) is memory-bound, else None.

    Why (issue 10, measured in ``suites/benchmarks/bench_segments.py``): after every parallel op PyTorch's
    OpenMP workers spin for about 10 ms (libgomp's default wait policy, read once at start-up), so the
    engine that follows a Torch segment shares the cores with a spinning thread. resnet18 with relu forced
    to PyTorch (18 engines) ran at 1.2-1.3x eager's time; with PyTorch on one thread for its segments, at
    0.8x. A memory-bound op loses little on one thread (a relu of 1x64x112x112: 87 against 76 us on two);
    a convolution or matmul in PyTorch would lose up to half, so a module with one keeps PyTorch's threads.
    """
    modules = list(stitched.modules())
    if not any(isinstance(module, EngineModule) for module in modules):
        return None
    for module in modules:
        if isinstance(module, torch.fx.GraphModule) and any(is_compute_bound(node) for node in module.graph.nodes):
            return None
    return 1


class CompiledModule(torch.nn.Module):
    """What ``trtcheck.compile`` returns: called like the model, with the partition and engines at hand.

    Inputs are checked against the example inputs before anything runs (``InputSignature``); the
    stitched ``graph_module`` then runs engines and Torch segments in order and updates the model's
    mutable buffers (its own copies) as eager would.

    ``torch_threads``: PyTorch's thread count during a call (``torch.set_num_threads``, restored when the
    call returns or raises), or None to leave it alone; ``trtcheck.compile(torch_threads="auto")`` picks it
    (``auto_torch_threads``). It is PyTorch's process-wide setting: other threads running PyTorch at the
    same time see it too. Engines keep the threads they were built with.
    """

    def __init__(
        self,
        graph_module: torch.fx.GraphModule,
        signature: InputSignature,
        compile_times: Any,
        conversion: Any,
        torch_threads: int | str | None = None,
    ) -> None:
        super().__init__()
        self.graph_module = graph_module
        self.signature = signature
        self.compile_times = compile_times
        self.conversion = conversion  # the partition as made and the ONNX of each segment, before any fallback
        self.torch_threads = auto_torch_threads(graph_module) if torch_threads == TORCH_THREADS_AUTO else torch_threads

    @property
    def partition(self) -> Partition:
        return self.graph_module.partition

    @property
    def engines(self) -> dict[int, Engine]:
        """The engine of every TensorRT segment, by segment index."""
        return {module.segment_index: module.engine for module in self.graph_module.children() if isinstance(module, EngineModule)}

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(self.graph_module, args, kwargs)

    def call(self, graph_module: torch.nn.Module, args: tuple, kwargs: dict) -> Any:
        """One call as ``forward`` makes it, running ``graph_module`` (the stitched graph, or an instrumented
        copy of it: ``trtcheck.profile``): inputs checked, then PyTorch's thread count set for the call."""
        leaves = self.signature.check(args, kwargs)
        if leaves is not None:
            args, kwargs = tree_unflatten(leaves, self.signature.spec)
        if self.torch_threads is None:
            return graph_module(*args, **kwargs)
        previous = torch.get_num_threads()
        if self.torch_threads == previous:
            return graph_module(*args, **kwargs)
        torch.set_num_threads(self.torch_threads)
        try:
            return graph_module(*args, **kwargs)
        finally:
            torch.set_num_threads(previous)
