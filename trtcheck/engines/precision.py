"""What a precision means for a segment's numbers, and ONNX Runtime's emulation of it on the CPU.

TensorRT 11 is strongly typed only: a reduced precision is no builder flag but the ONNX model's own types, which
``trtcheck.engines.mixed_precision.precision_graph`` writes (float tensors in fp16/bf16, Casts at the boundaries,
the nodes kept in float32). Both backends take that one graph: TensorRT builds it, and ONNX Runtime runs it through
``emulate``, so a CPU verdict at fp16 is a verdict on the graph TensorRT builds. This module holds what the two
backends and the judge share about precision:

- ``unit_roundoff``/``MANTISSA_BITS``/``judged_precision``: what ``verify`` needs to judge a setting (which rounding
  the yardstick applies, and how large one rounding is);
- ``emulate``: the float16/bfloat16 values of a model (a mixed-precision graph, or a model that is float16 itself)
  computed in float32 and rounded to their own type after every node, because ONNX Runtime's CPU provider has no
  kernel for many ops in those types and computes the fp16 ones it has in float32 *without* rounding between them
  (``x*4000/4000`` gives ``x`` where eager gives ``inf``);
- ``emulate_tf32``, ``round_tf32``, ``tf32_rounding``: TF32, the float32 matmul and convolution mode TensorRT (and
  Torch-TensorRT by default) deploys: the inputs of every float32 MatMul, Gemm, Conv and ConvTranspose rounded to
  10 explicit mantissa bits (8-bit exponent, round to nearest even), accumulated in float32; in the ONNX graph for
  ONNX Runtime, and in eager for the judge's yardstick.

``emulate`` in detail:

- **every float16/bfloat16 value between nodes is rounded**: each node computes in float32, and each low-precision
  output ``v`` it produces is rounded by a ``Cast(to=fp16|bf16)`` (``v`` keeps its name and type); its consumers read
  a ``Cast(to=float)`` of it;
- **graph inputs and initializers of a low type are widened** (a weight held by reference, ``weights=``, is widened
  in the mapping instead: its tensor is replaced, its placeholder retyped to float; the placeholder's data is never
  read);
- **attributes that carry a low-precision dtype are retargeted to float32**: ``Cast``'s ``to``, any ``dtype``
  attribute (``EyeLike``, ``RandomNormal``, ...) and a tensor attribute's data (``ConstantOfShape``'s and
  ``Constant``'s ``value``, exactly representable in float32), so every op runs on ONNX Runtime's float32 kernels;
- **float32 values are left alone** (the nodes a mixed-precision graph keeps in float32 compute as it says);
- **the interface keeps its dtypes**: graph inputs and outputs keep their names and element types, so the engine
  binds the same tensors.

What this models: the range (overflow to inf above 65504 in fp16) and the rounding of every low-precision tensor
that crosses from one ONNX node to the next, of inputs and of weights, as TensorRT stores them and as eager PyTorch
does in that dtype. What it does not model: TensorRT's choice of kernels, its layer fusions (a fused
conv+bias+relu rounds once, not after each op; this rounds after each ONNX node), and rounding or accumulation
*inside* a kernel (a MatMul, Conv or ReduceSum here accumulates in float32; a strongly typed TensorRT may accumulate
an fp16 MatMul in fp16, which ``Settings.use_fp32_acc`` rules out). Values ONNX shape inference cannot type are left
as they are. Subgraphs (``If``, ``Loop``) are not rewritten: one that computes in or reads a low-precision value is
refused (``EngineBuildError``: the segment falls back); a mixed-precision graph keeps them float32.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper
from torch.utils._python_dispatch import TorchDispatchMode

from trtcheck.conversion.origins import onnx_origin
from trtcheck.errors import EngineBuildError

__all__ = [
    "LOW_TYPES",
    "MANTISSA_BITS",
    "PRECISION_TYPES",
    "TF32_OPS",
    "emulate",
    "emulate_tf32",
    "judged_precision",
    "needs_emulation",
    "onnx_origin",
    "round_tf32",
    "tf32_rounding",
    "unit_roundoff",
]

PRECISION_TYPES: dict[str, int | None] = {"fp32": None, "fp16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16}
"""``Settings.precision`` -> the ONNX element type float32 values become (None: they stay float32)."""

LOW_TYPES = frozenset({TensorProto.FLOAT16, TensorProto.BFLOAT16})
FLOAT = TensorProto.FLOAT
FLOATS = LOW_TYPES | {FLOAT}
TORCH_TYPES = {TensorProto.FLOAT: torch.float32, TensorProto.FLOAT16: torch.float16, TensorProto.BFLOAT16: torch.bfloat16}
TYPE_NAMES = {TensorProto.FLOAT16: "fp16", TensorProto.BFLOAT16: "bf16", TensorProto.FLOAT: "fp32"}
_DTYPE_ATTRIBUTES = ("to", "dtype")

MANTISSA_BITS: dict[str, int] = {"fp32": 23, "tf32": 10, "fp16": 10, "bf16": 7}
"""Explicit mantissa bits of each precision a setting computes in (``judged_precision``'s names)."""


def unit_roundoff(precision: str) -> float:
    """The largest relative error of one rounding to nearest in ``precision`` (``judged_precision``'s names):
    ``2**-(mantissa bits + 1)``: fp32 ``2**-24``, tf32 and fp16 ``2**-11``, bf16 ``2**-8``. What the judge scales a
    precision's allowance by; tf32 rounds as finely as fp16 but keeps float32's range (no overflow to judge)."""
    try:
        return 2.0 ** -(MANTISSA_BITS[precision] + 1)
    except KeyError:
        raise ValueError(f"precision must be one of {', '.join(MANTISSA_BITS)}, got {precision!r}") from None


def judged_precision(settings: Any) -> str:
    """The precision ``verify`` must judge a module compiled with ``settings`` by: ``"fp16"``/``"bf16"`` for a reduced
    ``Settings.precision`` (its float32 nodes are the minority the judge's yardstick, eager in that dtype, does not
    model either), else ``"tf32"`` when ``Settings.tf32`` (every float32 matmul and convolution rounds its inputs),
    else ``"fp32"``."""
    precision = getattr(settings, "precision", "fp32") or "fp32"
    if precision != "fp32":
        return precision
    return "tf32" if getattr(settings, "tf32", False) else "fp32"


# ---------------------------------------------------------------------------------------------------------------
# ONNX helpers the precision rewrites share


def elem_types(model: onnx.ModelProto) -> dict[str, int]:
    """Every float value's ONNX element type (float32, float16, bfloat16) that the model declares or shape inference finds."""
    return {name: value.type.tensor_type.elem_type for name, value in value_infos(model).items()
            if value.type.tensor_type.elem_type in FLOATS}


def value_infos(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    """Every value's type (and shape, where known) that the model declares or shape inference finds, initializers and
    Constant nodes included."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
    except Exception:  # noqa: BLE001 - inference is best effort: what the model declares still types its values
        inferred = model
    graph = inferred.graph
    infos: dict[str, onnx.ValueInfoProto] = {}
    for value in [*graph.value_info, *graph.input, *graph.output]:
        if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type:
            infos[value.name] = value
    for initializer in graph.initializer:
        infos[initializer.name] = helper.make_tensor_value_info(initializer.name, initializer.data_type, list(initializer.dims))
    for node in graph.node:  # Constant nodes: inference may skip a value it could fold
        if node.op_type == "Constant" and node.output[0] not in infos:
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.TENSOR:
                    infos[node.output[0]] = helper.make_tensor_value_info(node.output[0], attribute.t.data_type, list(attribute.t.dims))
                elif attribute.name in ("value_float", "value_floats"):
                    infos[node.output[0]] = helper.make_tensor_value_info(node.output[0], FLOAT, None)
    return infos


def subgraphs(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
    """The subgraphs the nodes of ``graph`` hold (``If``'s branches, ``Loop``'s and ``Scan``'s bodies)."""
    found = []
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                found.append(attribute.g)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                found.extend(attribute.graphs)
    return found


def captured(graph: onnx.GraphProto) -> set[str]:
    """The values of ``graph`` its subgraphs read by name (they must keep their name and type)."""
    names: set[str] = set()
    for subgraph in subgraphs(graph):
        inner = {v.name for v in subgraph.input} | {i.name for i in subgraph.initializer} | {o for n in subgraph.node for o in n.output}
        names |= {i for n in subgraph.node for i in n.input if i and i not in inner}
        names |= captured(subgraph) - inner
    return names


def _low_inside(graph: onnx.GraphProto) -> bool:
    """True when a subgraph of ``graph`` types a value float16/bfloat16 (its nodes would compute in it)."""
    for subgraph in subgraphs(graph):
        typed = [*subgraph.input, *subgraph.output, *subgraph.value_info]
        if any(v.type.tensor_type.elem_type in LOW_TYPES for v in typed) or any(i.data_type in LOW_TYPES for i in subgraph.initializer):
            return True
        if any(_low_attribute(a) for n in subgraph.node for a in n.attribute) or _low_inside(subgraph):
            return True
    return False


def cast(node_name: str, source: str, result: str, to: int, doc: str = "") -> onnx.NodeProto:
    """A ``Cast`` node, documented (``doc_string``) with why the rewrite put it there."""
    return helper.make_node("Cast", [source], [result], name=node_name, to=to, doc_string=doc)


class Names:
    """Fresh value and node names for a rewrite, deterministic and unique in the model."""

    def __init__(self, model: onnx.ModelProto):
        graph = model.graph
        self._values = {v.name for v in [*graph.input, *graph.output, *graph.value_info]} | {i.name for i in graph.initializer}
        self._values |= {name for node in graph.node for name in [*node.input, *node.output]}
        self._nodes = {node.name for node in graph.node}

    def value(self, base: str) -> str:
        return self._fresh(base, self._values)

    def node(self, base: str) -> str:
        return self._fresh(base, self._nodes)

    @staticmethod
    def _fresh(base: str, taken: set[str]) -> str:
        name, count = base, 0
        while name in taken:
            count += 1
            name = f"{base}_{count}"
        taken.add(name)
        return name


# ---------------------------------------------------------------------------------------------------------------
# ONNX Runtime: low-precision values computed in float32, rounded after every node


def needs_emulation(model: onnx.ModelProto, precision: str) -> bool:
    """True when ONNX Runtime must run ``model`` through ``emulate``: ``precision`` is reduced (its graph,
    ``precision_graph``'s, holds low-precision values), or the model holds float16/bfloat16 values itself."""
    if PRECISION_TYPES[precision] is not None:
        return True
    graph = model.graph
    typed = [*graph.input, *graph.output, *graph.value_info]
    if any(v.type.tensor_type.elem_type in LOW_TYPES for v in typed) or any(i.data_type in LOW_TYPES for i in graph.initializer):
        return True
    return any(_low_attribute(attribute) for node in graph.node for attribute in node.attribute)


def _low_attribute(attribute: onnx.AttributeProto) -> bool:
    if attribute.type == onnx.AttributeProto.INT and attribute.name in _DTYPE_ATTRIBUTES:
        return attribute.i in LOW_TYPES
    return attribute.type == onnx.AttributeProto.TENSOR and attribute.t.data_type in LOW_TYPES


def emulate(
    model: onnx.ModelProto, weights: Mapping[str, torch.Tensor] | None = None
) -> tuple[onnx.ModelProto, dict[str, torch.Tensor] | None]:
    """``model`` rewritten to compute its float16/bfloat16 values in float32 and round each to its own type after every
    node (see the module's doc), and the ``weights`` it needs (those of low-precision placeholders widened to float32,
    the others as given). ``model`` and ``weights`` are not changed. Node and value names are deterministic."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    types = elem_types(out)
    if subgraphs(graph) and (_low_inside(graph) or any(types.get(name) in LOW_TYPES for name in captured(graph))):
        raise EngineBuildError("precision emulation: a subgraph (If, Loop) computing in or reading float16/bfloat16 values "
                               "is not supported")
    names = Names(out)
    new_weights = dict(weights) if weights is not None else None
    reads: dict[str, str] = {}  # low-precision value -> the float32 value its consumers read instead
    head: list[onnx.NodeProto] = []  # Casts widening graph inputs and initializers, first in the graph
    for initializer in graph.initializer:
        if types.get(initializer.name) not in LOW_TYPES:
            continue
        placeholder = initializer.data_location == TensorProto.EXTERNAL and new_weights is not None and initializer.name in new_weights
        if placeholder:  # a weight held by reference: widen its tensor, never read its placeholder's data
            new_weights[initializer.name] = new_weights[initializer.name].detach().to(torch.float32).contiguous()
            initializer.data_type = FLOAT
        else:
            head.append(_widen(initializer.name, names, reads))
    for value in graph.input:
        if types.get(value.name) in LOW_TYPES and value.name not in reads:
            head.append(_widen(value.name, names, reads))

    body: list[onnx.NodeProto] = []
    for node in graph.node:
        for index, name in enumerate(node.input):
            if name in reads:
                node.input[index] = reads[name]
        for attribute in node.attribute:
            _widen_attribute(attribute)
        after: list[onnx.NodeProto] = []
        for index, name in enumerate(node.output):
            target = types.get(name) if name else None
            if target not in LOW_TYPES:
                continue
            raw = names.value(f"{name}__fp32")
            node.output[index] = raw
            widened = names.value(f"{name}__fp32_rounded")  # ``name`` is the rounded value itself
            reads[name] = widened
            after += [cast(names.node(f"{name}/RoundCast"), raw, name, target), cast(names.node(f"{name}/WidenCast"), name, widened, FLOAT)]
        body.append(node)
        body += after
    outputs = {value.name for value in graph.output}
    del graph.node[:]
    graph.node.extend(head + body)
    _drop_unused_widening(graph, outputs)
    return out, new_weights


def _widen(name: str, names: Names, reads: dict[str, str]) -> onnx.NodeProto:
    """The Cast its consumers read the low-precision graph input or initializer ``name`` through, in float32."""
    widened = names.value(f"{name}__rounded")
    reads[name] = widened
    return cast(names.node(f"{name}/WidenCast"), name, widened, FLOAT)


def _widen_attribute(attribute: onnx.AttributeProto) -> None:
    """A low-precision dtype or tensor in a node's attribute retargeted to float32 (the node then computes in it)."""
    if attribute.type == onnx.AttributeProto.INT and attribute.name in _DTYPE_ATTRIBUTES and attribute.i in LOW_TYPES:
        attribute.i = FLOAT
    elif attribute.type == onnx.AttributeProto.TENSOR and attribute.t.data_type in LOW_TYPES:
        tensor = attribute.t
        values = numpy_helper.to_array(tensor).astype("float32")  # exact: every fp16/bf16 value is a float32
        attribute.t.CopyFrom(numpy_helper.from_array(values, tensor.name))


def _drop_unused_widening(graph: onnx.GraphProto, outputs: set[str]) -> None:
    """Widening Casts nobody reads (of a low-precision value read only as a graph output) removed."""
    read = {name for node in graph.node for name in node.input} | outputs
    keep = [node for node in graph.node if not (node.op_type == "Cast" and node.name.endswith("/WidenCast") and node.output[0] not in read)]
    if len(keep) != len(graph.node):
        del graph.node[:]
        graph.node.extend(keep)


# ---------------------------------------------------------------------------------------------------------------
# TF32: float32 products of 10-bit mantissas


TF32_OPS: dict[str, tuple[int, ...]] = {"MatMul": (0, 1), "Gemm": (0, 1), "Conv": (0, 1), "ConvTranspose": (0, 1)}
"""ONNX op -> the inputs TF32 rounds: the factors of every product (a Gemm's and a Conv's bias is added in float32).
TensorRT's ``BuilderFlag.TF32`` "allows computations on tensors of type FLOAT to use TF32: it computes inner products
by rounding the inputs to 10-bit mantissas before multiplying, but accumulates the sum using 23-bit mantissas"."""

_TF32_DROPPED_BITS = 13  # float32's 23 explicit mantissa bits less TF32's 10
_SPLITTER = float(2**_TF32_DROPPED_BITS + 1)  # Veltkamp's constant: c - (c - x), c = 8193 x, keeps x's top 11 bits
_HUGE, _TINY = 2.0**100, 2.0**-100  # |x| beyond: 8193 x could overflow, or lose bits to the subnormal range
_RESCALE = 2.0**64


def round_tf32(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` (float32) rounded to TF32: the nearest float32 with 10 explicit mantissa bits, ties to even; inf and NaN
    kept. Exact bit arithmetic, what ``emulate_tf32`` rounds weights with and what the judge's yardstick
    (``tf32_rounding``) rounds eager's matmul and convolution inputs with. Other dtypes are returned as they are."""
    if tensor.dtype != torch.float32:
        return tensor
    bits = tensor.detach().view(torch.int32).to(torch.int64) & 0xFFFFFFFF  # elementwise: the tensor's layout is kept
    low_bit = (bits >> _TF32_DROPPED_BITS) & 1
    rounded = (bits + (1 << (_TF32_DROPPED_BITS - 1)) - 1 + low_bit) & ~((1 << _TF32_DROPPED_BITS) - 1)
    special = (bits & 0x7F800000) == 0x7F800000  # inf or NaN: rounding would carry into the sign
    rounded = torch.where(special, bits, rounded)
    return torch.where(rounded >= 2**31, rounded - 2**32, rounded).to(torch.int32).view(torch.float32)


def _tf32_array(array: np.ndarray) -> np.ndarray:
    """``round_tf32`` on a float32 numpy array (an initializer's data)."""
    return round_tf32(torch.from_numpy(np.array(array, dtype=np.float32))).numpy()  # a copy: writable


def emulate_tf32(
    model: onnx.ModelProto, weights: Mapping[str, torch.Tensor] | None = None
) -> tuple[onnx.ModelProto, dict[str, torch.Tensor] | None]:
    """``model`` with every float32 input of a MatMul, Gemm, Conv and ConvTranspose (``TF32_OPS``) rounded to TF32, and
    the ``weights`` it needs: what ``Settings.tf32`` makes TensorRT compute, for ONNX Runtime. A weight only products
    read (an initializer, or one held by reference) is rounded once, here (``round_tf32``: exact); any other value goes
    through nodes of float32 arithmetic (``_tf32_nodes``: Veltkamp's split, exact round-to-nearest-even, checked
    against ``round_tf32`` in ``suites/engines``). Each value is rounded once however many products read it; its other
    readers see it unrounded. ``model`` and ``weights`` are not changed."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    types = elem_types(out)
    names = Names(out)
    new_weights = dict(weights) if weights is not None else None
    uses: dict[str, int] = {}
    factor_uses: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1
        for index in TF32_OPS.get(node.op_type, ()):
            name = node.input[index] if index < len(node.input) else ""
            if name and types.get(name) == FLOAT:
                factor_uses[name] = factor_uses.get(name, 0) + 1
    if not factor_uses:
        return out, new_weights
    initializers = {initializer.name: initializer for initializer in graph.initializer}
    rounded: dict[str, str] = {}  # value -> its TF32 version
    for name in sorted(factor_uses):
        initializer = initializers.get(name)
        if initializer is not None and uses[name] == factor_uses[name] and name not in {o.name for o in graph.output}:
            if initializer.data_location != TensorProto.EXTERNAL:
                initializer.CopyFrom(numpy_helper.from_array(_tf32_array(numpy_helper.to_array(initializer)), name))
                rounded[name] = name
                continue
            if new_weights is not None and name in new_weights:  # a weight held by reference: round its tensor
                new_weights[name] = round_tf32(new_weights[name].detach().to(torch.float32).contiguous())
                rounded[name] = name
                continue
        rounded[name] = names.value(f"{name}__tf32")
    runtime = [name for name in sorted(factor_uses) if rounded[name] != name]
    constants = _Tf32Constants(names)
    produced_by = {output: index for index, node in enumerate(graph.node) for output in node.output}
    head: list[onnx.NodeProto] = []
    after: dict[int, list[onnx.NodeProto]] = {}
    for name in runtime:
        at = after.setdefault(produced_by[name], []) if name in produced_by else head
        at.extend(_tf32_nodes(name, rounded[name], names, constants))
    body: list[onnx.NodeProto] = []
    for index, node in enumerate(graph.node):
        for i in TF32_OPS.get(node.op_type, ()):
            if i < len(node.input) and node.input[i] in rounded:
                node.input[i] = rounded[node.input[i]]
        body.append(node)
        body += after.get(index, [])
    graph.initializer.extend(constants.tensors)
    del graph.node[:]
    graph.node.extend(head + body)
    return out, new_weights


class _Tf32Constants:
    """The float32 scalars every TF32 rounding reads, one initializer each, made on first use."""

    def __init__(self, names: Names) -> None:
        self._names = names
        self._made: dict[str, str] = {}
        self.tensors: list[onnx.TensorProto] = []

    def __call__(self, base: str, value: float) -> str:
        if base not in self._made:
            tensor = numpy_helper.from_array(np.array(value, dtype=np.float32), self._names.value(f"tf32_{base}"))
            self.tensors.append(tensor)
            self._made[base] = tensor.name
        return self._made[base]


def _tf32_nodes(name: str, result: str, names: Names, constant: _Tf32Constants) -> list[onnx.NodeProto]:
    """Nodes computing ``result``, the float32 value ``name`` rounded to TF32, in float32 arithmetic: Veltkamp's split
    ``c - (c - x)`` with ``c = 8193 x`` keeps the 11 leading bits of ``x``, rounded to nearest even; ``x`` is scaled by
    ``2**-64`` (``2**64``) first when ``|x| > 2**100`` (``< 2**-100``) so that ``8193 x`` neither overflows nor falls
    into the subnormal range (powers of two scale exactly), and infinities are passed through (``c - x`` is NaN there)."""
    doc = f"TF32 rounding of {name} (trtcheck.engines.precision.emulate_tf32: Settings.tf32)"
    steps = [
        ("Abs", [name], "abs"), ("Greater", ["abs", constant("huge", _HUGE)], "is_huge"),
        ("Less", ["abs", constant("tiny", _TINY)], "is_tiny"),
        ("Where", ["is_tiny", constant("up", _RESCALE), constant("one", 1.0)], "scale_tiny"),
        ("Where", ["is_huge", constant("down", 1.0 / _RESCALE), "scale_tiny"], "scale"),
        ("Div", [constant("one", 1.0), "scale"], "unscale"),
        ("Mul", [name, "scale"], "scaled"), ("Mul", ["scaled", constant("split", _SPLITTER)], "c"),
        ("Sub", ["c", "scaled"], "c_minus_x"), ("Sub", ["c", "c_minus_x"], "high"), ("Mul", ["high", "unscale"], "back"),
        ("IsInf", [name], "is_inf"),
    ]
    produced: dict[str, str] = {}
    nodes = []
    for op, inputs, output in steps:
        produced[output] = names.value(f"{name}__tf32_{output}")
        nodes.append(helper.make_node(op, [produced.get(i, i) for i in inputs], [produced[output]],
                                      name=names.node(f"{name}/tf32_{output}"), doc_string=doc))
    nodes.append(helper.make_node("Where", [produced["is_inf"], name, produced["back"]], [result],
                                  name=names.node(f"{name}/tf32_round"), doc_string=doc))
    return nodes


class Tf32RoundingMode(TorchDispatchMode):
    """Eager's matmuls and convolutions with their float32 factors rounded to TF32 (``round_tf32``), accumulated in
    float32: the yardstick of ``Settings.tf32`` (the judge compares the compiled module's error against float64 with
    this eager's, as it does eager in fp16 for ``precision="fp16"``)."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        factors = _TF32_FACTORS.get(func)
        if factors is not None:
            args = tuple(round_tf32(a) if i in factors and isinstance(a, torch.Tensor) else a for i, a in enumerate(args))
        return func(*args, **kwargs)


_aten = torch.ops.aten
_TF32_FACTORS: dict[Any, frozenset[int]] = {
    _aten.mm.default: frozenset({0, 1}), _aten.bmm.default: frozenset({0, 1}), _aten.addmm.default: frozenset({1, 2}),
    _aten.baddbmm.default: frozenset({1, 2}), _aten.convolution.default: frozenset({0, 1}),
    _aten.dot.default: frozenset({0, 1}), _aten.mv.default: frozenset({0, 1}), _aten.addmv.default: frozenset({1, 2}),
}
"""The ATen ops eager's float32 matmuls and convolutions reach on the CPU (``linear`` and ``matmul`` dispatch to these)
-> the arguments that are their factors (not ``addmm``'s bias). Fused kernels would hide their products from this
mode, so ``tf32_rounding`` turns them off: attention runs PyTorch's math path (its ``bmm``s rounded)."""


@contextlib.contextmanager
def tf32_rounding() -> Iterator[None]:
    """Eager inside computes like a TF32 engine: every float32 factor of an ``mm``, ``bmm``, ``addmm``, ``baddbmm``,
    ``dot``, ``mv``, ``addmv`` and ``convolution`` rounded to TF32 (``round_tf32``), the sums in float32. The judge's
    yardstick for ``Settings.tf32`` (``judged_precision`` "tf32"): eager's own error against float64 under the same
    rounding the engine applies. Fused kernels whose products this cannot see are turned off inside: the
    ``nn.MultiheadAttention``/``TransformerEncoderLayer`` fast path (``torch.backends.mha``) and the fused
    scaled-dot-product attention kernels (only ``SDPBackend.MATH``, whose ``bmm``s are rounded). Measured on
    ``transformer_encoder_dynamic_seq``: with the fast path left on, eager's error was 685 times smaller than the
    TF32 engine's, a yardstick of plain float32."""
    with unfused_attention(), Tf32RoundingMode():
        yield


@contextlib.contextmanager
def unfused_attention() -> Iterator[None]:
    """Eager inside runs attention as the ops it is made of: the ``nn.MultiheadAttention``/``TransformerEncoderLayer``
    fast path (``torch.backends.mha``) off, and scaled-dot-product attention on its math path (``SDPBackend.MATH``).
    For the references that watch eager's ops through a dispatch mode: a fused kernel is one op to the mode, though it
    computes (and an engine rounds) dozens."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with sdpa_kernel([SDPBackend.MATH]):
            yield
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
