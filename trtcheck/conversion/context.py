"""What a converter sees while it turns one fx node into ONNX nodes: :class:`ConversionContext`.

The context is the small API converters emit through (fresh value names, shared constants,
parameters, dtypes), so that naming, constants and dtypes are handled in one place. It imports no
converter and no registry: the registry, the op modules and the interpreter all import it, never the
other way round, which is what keeps the conversion package free of import cycles.

Sizes of a graph exported with ``dynamic_shapes`` are SymInts (``s0``, ``2*s0``). In ONNX every SymInt
is a 0-d int64 value, computed from the segment's own inputs at run time (``Shape`` + ``Gather`` and
integer arithmetic), so one model serves every size in range: :meth:`ConversionContext.int_value`,
:meth:`~ConversionContext.shape_list` and :meth:`~ConversionContext.size_expr` build those values.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import onnx
import sympy
import torch
import torch.fx
from onnx import TensorProto, helper, numpy_helper
from torch.utils._sympy import functions as symfn

from trtcheck import dtypes
from trtcheck.errors import ConversionError
from trtcheck.onnx_format.origins import node_origin
from trtcheck.onnx_format.weights import weight_placeholder, with_weights

#: The one ONNX opset trtcheck's converters emit: 19, the first with float8 Q/DQ (TensorRT 11's FP8 quantization);
#: Reduce* take their axes as an input there (from 18).
OPSET = 19

_SHARED_CONSTANT_LIMIT = 1024


def _tensor_proto(tensor: torch.Tensor, name: str) -> onnx.TensorProto:
    if tensor.dtype == torch.bfloat16:  # numpy has no bfloat16: onnx converts float32 values itself
        return helper.make_tensor(name, TensorProto.BFLOAT16, list(tensor.shape), tensor.float().flatten().tolist())
    return numpy_helper.from_array(tensor.numpy().copy(order="C"), name)  # copy(): keeps 0-dim shapes


def is_weight(tensor: torch.Tensor) -> bool:
    """True for an initializer the context holds by reference (a *weight*): more than ``_SHARED_CONSTANT_LIMIT``
    elements. Shapes, axes and scalars (what shape inference reads values of) are never weights."""
    return tensor.numel() > _SHARED_CONSTANT_LIMIT


def onnx_dtype(dtype: torch.dtype) -> int:
    """The ONNX element type of a dtype a TensorRT segment may hold; ConversionError for any other."""
    try:
        return dtypes.engine_onnx_type(dtype)
    except dtypes.UnsupportedDtypeError as error:
        raise ConversionError(str(error)) from None


def _static_shape(value: torch.Tensor) -> list[int | str]:
    """Shape for an ONNX value_info: ints for static dims, the symbolic size (``s98``, ``2*s98``) as the
    dim_param of dynamic ones, so that dims sharing a symbol share a name in the ONNX model too."""
    return [d if isinstance(d, int) else str(d) for d in value.shape]


def is_symint(value: Any) -> bool:
    """True for what a SymInt-valued fx node carries as ``meta["val"]``: a SymInt, or a plain int (not bool)."""
    return isinstance(value, torch.SymInt) or (isinstance(value, int) and not isinstance(value, bool))


def int_floor_divide(ctx: ConversionContext, a: str, b: str, dtype: torch.dtype = torch.int64) -> str:
    """Integer division rounded toward -inf (Python's ``//``, ATen's ``floor_divide``) of ``dtype`` (int64 or
    int32) values, exact over the dtype's whole range.

    ONNX's integer Div truncates toward 0 (-7 / 2 = -3, Python says -4). With q = a / b truncated, the
    remainder r = a - q * b is exact (|q * b| <= |a|), and the floor is q - 1 where r is non-zero and its
    sign differs from b's: q + min(sign(r) * sign(b), 0), each sign a Max/Min clamp to [-1, 1] (elementwise
    ops only, which shape-tensor arithmetic takes too). No intermediate overflows: q - 1 is reached only for
    |b| >= 2, where |q| <= |a| / 2. (``(a - a mod b) / b`` did: ``-2147483648 // 3`` gave +715827882.)

    Not covered: ``b == 0`` (the engine's own behaviour: ONNX Runtime fails the run) and ``min / -1``, whose
    quotient does not fit (ONNX Runtime's int64 Div traps there, killing the process): the elementwise
    converters divide by 1 and negate for a divisor of -1 (sizes never divide by -1).
    """
    one, minus_one = ctx.constant(1, dtype), ctx.constant(-1, dtype)

    def sign(value: str) -> str:
        return ctx.add("Min", [ctx.add("Max", [value, minus_one]), one])

    quotient = ctx.add("Div", [a, b])
    remainder = ctx.add("Sub", [a, ctx.add("Mul", [quotient, b])])
    correction = ctx.add("Min", [ctx.add("Mul", [sign(remainder), sign(b)]), ctx.constant(0, dtype)])
    return ctx.add("Add", [quotient, correction])


def value_info(name: str, value: Any) -> onnx.ValueInfoProto:
    """The ONNX declaration (dtype and shape, symbolic dims by name) of a segment input or output whose
    ``meta["val"]`` is ``value``; ConversionError naming the value when it is no Tensor an engine holds.

    Public because the interpreter declares a segment's inputs and outputs with it: the declarations and
    the dtype rule converters apply (:func:`onnx_dtype`) come from this one place.
    """
    if not isinstance(value, torch.Tensor):
        raise ConversionError(f"segment value {name!r} is not a tensor (meta['val'] = {value!r})")
    try:
        dtype = onnx_dtype(value.dtype)
    except ConversionError as exc:
        raise ConversionError(f"segment value {name!r}: {exc}") from None
    return helper.make_tensor_value_info(name, dtype, _static_shape(value))


def describe(node: torch.fx.Node) -> str:
    """``node 'add_1' (call_function aten.add.Tensor)``: how every ConversionError names an fx node.

    Public because the interpreter's errors name nodes too, and they should read like the context's.
    """
    return f"node {node.name!r} ({node.op} {node.target})"


def converter_name(fn: Any) -> str:
    """``trtcheck.conversion.ops.linear._addmm``: a converter function as its module and qualified name, so that an
    engine error can name the code to fix. A function defined in another reads ``outer.inner``, without Python's
    ``<locals>`` (a converter a factory made for a table of ops: ``trtcheck.conversion.ops.elementwise._binary.convert``)."""
    qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    module = getattr(fn, "__module__", None) or type(fn).__module__
    return f"{module}.{qualname.replace('.<locals>.', '.')}"


class ConversionContext:
    """What a converter sees: name lookup for fx nodes, constants, and an ONNX node emitter.

    Every ONNX node is named after the fx node being converted and its op, ``addmm/Gemm`` (``addmm/Mul_1`` for
    the second Mul of one fx node), and its ``doc_string`` names that fx node's ATen target and the converter
    (:func:`node_origin`), so that an engine's error about a node leads back to the graph and to the op: the
    interpreter says which node is being converted (:meth:`converting`). Names are deterministic: the fx node's
    name, the op type and a count in emission order.
    """

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        self.gm = gm
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        # Types of values ONNX shape inference cannot infer (the outputs of TensorRT's own ops), declared by their
        # converters so that every value downstream is typed.
        self.value_infos: list[onnx.ValueInfoProto] = []
        # The tensor of every weight (``is_weight``) by initializer name: ``initializers`` holds a placeholder for
        # each (``weight_placeholder``), so converting copies no weight; the interpreter fills them in or hands the
        # tensors on with the model.
        self.weights: dict[str, torch.Tensor] = {}
        self._values: dict[torch.fx.Node, str | list[str]] = {}
        # fx node names are taken up front so generated names can never collide with them.
        self._used: set[str] = {n.name for n in gm.graph.nodes}
        self._counter = itertools.count()
        self._constants: dict[tuple[Any, ...], str] = {}
        self._shapes: dict[str, str] = {}  # ONNX value -> its Shape
        self._permuted_weights: dict[tuple[str, tuple[int, ...]], str] = {}  # (weight, perm) -> its initializer
        self._sizes: dict[sympy.Expr, str] = {}  # symbolic size -> its 0-d int64 value
        self._symbols: dict[sympy.Symbol, tuple[torch.fx.Node, int, int, int]] | None = None
        self._origin: tuple[str, str] | None = None  # (fx node name, doc_string) of the node being converted
        self._node_names: set[str] = set()
        self._node_counts: dict[str, int] = {}

    # ---- names ---------------------------------------------------------------------------------
    @property
    def taken_names(self) -> frozenset[str]:
        """fx node names and ONNX names generated so far."""
        return frozenset(self._used)

    def fresh(self, base: str) -> str:
        """A value name not used anywhere in the graph yet."""
        while True:
            name = f"{base}_{next(self._counter)}"
            if name not in self._used:
                self._used.add(name)
                return name

    def bind(self, node: torch.fx.Node, names: str | Sequence[str]) -> None:
        """Record the ONNX value name(s) produced for ``node``."""
        self._values[node] = names if isinstance(names, str) else list(names)

    def names(self, node: torch.fx.Node) -> str | list[str]:
        """ONNX value name(s) already produced for an fx node."""
        try:
            return self._values[node]
        except KeyError:
            raise ConversionError(f"{describe(node)} is used before it was converted") from None

    def name(self, arg: Any, dtype: torch.dtype | None = None) -> str:
        """An fx Node's single ONNX name, or an initializer holding a Python scalar/list of ``dtype``."""
        if isinstance(arg, torch.fx.Node):
            names = self.names(arg)
            if not isinstance(names, str):
                raise ConversionError(f"{describe(arg)} has several outputs; use getitem")
            return names
        if dtype is None:
            dtype = torch.tensor(arg).dtype
        return self.constant(arg, dtype)

    def constant(self, value: Any, dtype: torch.dtype) -> str:
        """An initializer holding ``value`` (numpy/torch/python) as ``dtype``.

        Small equal constants (scalars, shapes, axes) are shared; large ones are not hashed.
        """
        if isinstance(value, torch.Tensor):
            tensor = value.detach().to("cpu", dtype).contiguous()
            if is_weight(tensor) and tensor.data_ptr() == value.data_ptr():
                tensor = tensor.clone()  # a converter's own tensor: hold its value of now, as a copied initializer would
        else:
            tensor = torch.as_tensor(value, dtype=dtype).contiguous()
        key = None
        if tensor.numel() <= _SHARED_CONSTANT_LIMIT:
            key = (dtype, tuple(tensor.shape), tensor.view(-1).view(torch.uint8).numpy().tobytes())
            if key in self._constants:
                return self._constants[key]
        name = self.fresh("const")
        self._initializer(name, tensor)
        if key is not None:
            self._constants[key] = name
        return name

    def _initializer(self, name: str, tensor: torch.Tensor) -> None:
        """Add initializer ``name`` holding ``tensor`` (CPU, contiguous): a weight by reference, anything else inline."""
        if is_weight(tensor):
            self.initializers.append(weight_placeholder(name, tensor))
            self.weights[name] = tensor
        else:
            self.initializers.append(_tensor_proto(tensor, name))

    def permuted_weight(self, name: str, perm: Sequence[int]) -> str | None:
        """A weight holding weight ``name`` permuted by ``perm``, by reference like every weight (a view of it); None
        where ``name`` is no weight. One permutation of one weight is made once.

        Why: an engine folds an op on a constant (a ``Transpose`` of a weight) into a new constant when it is
        built, a second copy of that weight in its memory while it builds (ONNX Runtime, folding bert_base's 12
        transposed 768x768 attention-output weights: 2 MiB more kept and 4 MiB more peak, its session alone opened
        in fresh processes on the files either way). A view copies nothing here; its bytes are read, contiguous, when an engine takes
        the weights (``weight_bytes``), so the engine gets the folded weight and never the original."""
        tensor = self.weights.get(name)
        if tensor is None:
            return None
        key = (name, tuple(perm))
        if key not in self._permuted_weights:
            permuted = tensor.permute(*perm)
            self._permuted_weights[key] = permuted_name = self.fresh(f"{name}_permuted")
            self.initializers.append(weight_placeholder(permuted_name, permuted))
            self.weights[permuted_name] = permuted
        return self._permuted_weights[key]

    def parameter(self, node: torch.fx.Node) -> str:
        """The initializer for a get_attr node (a parameter, buffer or lifted constant), named after it."""
        obj: Any = self.gm
        for part in str(node.target).split("."):
            obj = getattr(obj, part)
        if not isinstance(obj, torch.Tensor):
            raise ConversionError(f"{describe(node)} does not refer to a tensor")
        onnx_dtype(obj.dtype)  # a float64 buffer has no place in a TensorRT engine
        self._initializer(node.name, obj.detach().cpu().contiguous())  # the graph's own tensor: no copy
        return node.name

    def add(self, op_type: str, inputs: list[str], num_outputs: int = 1, **attrs: Any) -> str | list[str]:
        """Emit one ONNX node with fresh output names; "" in ``inputs`` marks an omitted optional input."""
        outputs = [self.fresh(op_type.lower()) for _ in range(num_outputs)]
        self.add_node(op_type, inputs, outputs, **attrs)
        return outputs[0] if num_outputs == 1 else outputs

    def add_node(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str], **attrs: Any) -> None:
        """Emit one ONNX node with the given output names (the interpreter's ``output_0``...), named and
        documented after the fx node being converted like every other node."""
        origin, doc = self._origin or ("", "")
        base = f"{origin}/{op_type}" if origin else op_type
        count = self._node_counts.get(base, 0)
        name = base if count == 0 else f"{base}_{count}"
        while name in self._node_names:
            count += 1
            name = f"{base}_{count}"
        self._node_counts[base] = count + 1
        self._node_names.add(name)
        self.nodes.append(helper.make_node(op_type, list(inputs), list(outputs), name=name, doc_string=doc or None, **attrs))

    @contextlib.contextmanager
    def converting(self, node: torch.fx.Node, converter: Any) -> Iterator[None]:
        """While converting ``node`` with ``converter`` (a function, or its name): every node emitted is named
        ``f"{node.name}/{op_type}"`` and documented with :func:`node_origin`."""
        label = converter if isinstance(converter, str) else converter_name(converter)
        previous, self._origin = self._origin, (node.name, node_origin(node, label))
        try:
            yield
        finally:
            self._origin = previous

    # ---- sizes: ints and SymInts as int64 ONNX values ---------------------------------------------
    def shape_of(self, name: str) -> str:
        """The 1-D int64 ``Shape`` of ONNX value ``name`` (one Shape node per value)."""
        if name not in self._shapes:
            self._shapes[name] = self.add("Shape", [name])
        return self._shapes[name]

    def dim_of(self, name: str, axis: int) -> str:
        """Size ``axis`` of ONNX value ``name`` at run time, as a 0-d int64 (``Shape`` + ``Gather``)."""
        return self.add("Gather", [self.shape_of(name), self.constant(axis, torch.int64)], axis=0)

    def int_value(self, arg: Any) -> str:
        """A 0-d int64 ONNX value for an int, a SymInt-valued fx node (its converted value) or a SymInt.

        A SymInt node is read as converted (``sym_size``, ``mul``... of this segment): that is the value
        the model computed, where a SymInt from metadata (``size_expr``) must be rebuilt from the inputs.
        """
        if isinstance(arg, torch.fx.Node):
            if not is_symint(arg.meta.get("val")):
                raise ConversionError(f"{describe(arg)} is used as a size but carries {arg.meta.get('val')!r}, not an int")
            return self.name(arg)
        if isinstance(arg, torch.SymInt):
            return self.size_expr(arg)
        if is_symint(arg):
            return self.constant(int(arg), torch.int64)
        raise ConversionError(f"{arg!r} ({type(arg).__name__}) is not a size: sizes are ints, SymInts or SymInt nodes")

    def shape_list(self, values: Sequence[Any]) -> str:
        """A 1-D int64 shape tensor from ints, SymInts and SymInt-valued nodes: an initializer when every
        entry is a static int, else a ``Concat`` of the runs of static ints and each dynamic entry."""
        values = [_static_int(v) for v in values]
        if all(isinstance(v, int) for v in values):
            return self.constant(list(values), torch.int64)
        pieces: list[str] = []
        run: list[int] = []
        for value in values:
            if isinstance(value, int):
                run.append(value)
                continue
            if run:
                pieces.append(self.constant(run, torch.int64))
                run = []
            pieces.append(self.add("Unsqueeze", [self.int_value(value), self.constant([0], torch.int64)]))
        if run:
            pieces.append(self.constant(run, torch.int64))
        return pieces[0] if len(pieces) == 1 else self.add("Concat", pieces, axis=0)

    def size_expr(self, size: torch.SymInt | int) -> str:
        """A symbolic size found only in metadata (e.g. an output's ``2*s98``), as a 0-d int64 value.

        Each symbol is read from a dimension of one of the segment's inputs (``Shape`` + ``Gather``; a
        dim ``a*s + b`` gives ``s = (dim - b) / a``), and the expression is rebuilt from ``+``, ``*``,
        ``//``, ``%``, min and max. ConversionError when a symbol is no input's dimension: the segment
        cannot know it, so it must not guess (it falls back to PyTorch whole, with this reason).
        """
        expr = sympy.sympify(size.node.expr if isinstance(size, torch.SymInt) else size)
        if expr not in self._sizes:
            self._sizes[expr] = self._emit_size(expr)
        return self._sizes[expr]

    def _emit_size(self, expr: sympy.Expr) -> str:
        if expr.is_Integer:
            return self.constant(int(expr), torch.int64)
        if expr.is_Symbol:
            return self._symbol_value(expr)
        binary = next((op for cls, op in _SIZE_OPS.items() if isinstance(expr, cls)), None)
        if binary is not None and len(expr.args) >= 2:
            return functools.reduce(lambda a, b: binary(self, a, b), [self.size_expr(arg) for arg in expr.args])
        if isinstance(expr, (sympy.Pow, symfn.PowByNatural)) and expr.args[1].is_Integer and int(expr.args[1]) >= 1:
            return self.size_expr(sympy.Mul(*[expr.args[0]] * int(expr.args[1]), evaluate=False))
        if isinstance(expr, symfn.CeilDiv):  # ceil(a / b) = -((-a) // b)
            a, b = (self.size_expr(arg) for arg in expr.args)
            return self.add("Neg", [int_floor_divide(self, self.add("Neg", [a]), b)])
        if isinstance(expr, symfn.ModularIndexing):  # (x // div) % mod
            x, div, mod = (self.size_expr(arg) for arg in expr.args)
            return self.add("Mod", [int_floor_divide(self, x, div), mod], fmod=0)
        raise ConversionError(
            f"the symbolic size {expr} uses {type(expr).__name__}, which has no int64 ONNX form here "
            "(sizes convert from +, *, //, %, min and max over the inputs' dimensions)"
        )

    def _symbol_value(self, symbol: sympy.Symbol) -> str:
        source = self._symbol_sources().get(symbol)
        if source is None:
            dims = {n.name: list(n.meta["val"].shape) for n in self.gm.graph.nodes if n.op == "placeholder"
                    and isinstance(n.meta.get("val"), torch.Tensor)}
            raise ConversionError(
                f"the symbolic size {symbol} is no dimension of this segment's inputs {dims}: the segment cannot "
                "compute it at run time. Fix: keep the node that reads it in the segment that has the input of that "
                "size (e.g. a sym_size node), or make that dimension static"
            )
        node, axis, scale, offset = source
        dim = self.dim_of(self.name(node), axis)
        if offset:
            dim = self.add("Sub", [dim, self.constant(offset, torch.int64)])
        return self.add("Div", [dim, self.constant(scale, torch.int64)]) if scale != 1 else dim  # exact: dim = scale*s + offset

    def _symbol_sources(self) -> dict[sympy.Symbol, tuple[torch.fx.Node, int, int, int]]:
        """``{symbol: (placeholder, axis, a, b)}`` where that input's size ``axis`` is ``a*symbol + b``: a
        plain ``symbol`` where there is one, else the first dimension linear in it."""
        if self._symbols is None:
            plain: dict[sympy.Symbol, tuple[torch.fx.Node, int, int, int]] = {}
            linear: dict[sympy.Symbol, tuple[torch.fx.Node, int, int, int]] = {}
            for node in self.gm.graph.nodes:
                value = node.meta.get("val") if node.op == "placeholder" else None
                for axis, size in enumerate(value.shape if isinstance(value, torch.Tensor) else ()):
                    if isinstance(size, torch.SymInt):
                        _record_symbol(sympy.sympify(size.node.expr), node, axis, plain, linear)
            self._symbols = {**linear, **plain}
        return self._symbols

    @staticmethod
    def meta(arg: Any) -> torch.Tensor | None:
        """``node.meta['val']`` (a FakeTensor) of an fx Node; None for non-nodes or missing metadata."""
        if isinstance(arg, torch.fx.Node):
            value = arg.meta.get("val")
            return value if isinstance(value, torch.Tensor) else None
        return None


def _static_int(value: Any) -> Any:
    """A SymInt whose expression is a number as that int; anything else unchanged."""
    if isinstance(value, torch.SymInt) and sympy.sympify(value.node.expr).is_Integer:
        return int(value.node.expr)
    return value


def _record_symbol(expr: sympy.Expr, node: torch.fx.Node, axis: int, plain: dict, linear: dict) -> None:
    """Note where a symbol can be read: ``expr`` is the size ``axis`` of input ``node``."""
    if expr.is_Symbol:
        plain.setdefault(expr, (node, axis, 1, 0))
        return
    if len(expr.free_symbols) != 1:
        return
    (symbol,) = expr.free_symbols
    if not expr.is_polynomial(symbol):
        return
    coefficients = sympy.Poly(expr, symbol).all_coeffs()
    if len(coefficients) == 2 and all(c.is_Integer for c in coefficients) and coefficients[0] != 0:
        linear.setdefault(symbol, (node, axis, int(coefficients[0]), int(coefficients[1])))


def int_op(op_type: str, **attrs: Any) -> Callable[[ConversionContext, str, str], str]:
    """``(ctx, a, b) -> name`` emitting ONNX ``op_type`` on two int64 values: how sizes are combined."""
    return lambda ctx, a, b: ctx.add(op_type, [a, b], **attrs)


# sympy/torch size functions of two (Add, Mul, Max, Min: or more) arguments -> how to combine two int64 values.
_SIZE_OPS: dict[type, Callable[[ConversionContext, str, str], str]] = {
    sympy.Add: int_op("Add"),
    sympy.Mul: int_op("Mul"),
    symfn.FloorDiv: int_floor_divide,  # CleanDiv (exact division) is a FloorDiv
    symfn.PythonMod: int_op("Mod", fmod=0),
    symfn.Mod: int_op("Mod", fmod=0),  # both operands non-negative: Python's % too
    sympy.Mod: int_op("Mod", fmod=0),
    symfn.Max: int_op("Max"),
    symfn.Min: int_op("Min"),
    sympy.Max: int_op("Max"),
    sympy.Min: int_op("Min"),
}


__all__ = [
    "OPSET",
    "ConversionContext",
    "ConversionError",
    "converter_name",
    "describe",
    "int_floor_divide",
    "int_op",
    "is_symint",
    "is_weight",
    "node_origin",
    "onnx_dtype",
    "value_info",
    "with_weights",  # the weight format is trtcheck.onnx_format.weights'; the compiler's conversion reads it here
]
