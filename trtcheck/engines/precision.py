"""Reduced precision on ONNX Runtime: a segment's ONNX model rewritten to round like fp16/bf16 at every tensor.

TensorRT takes ``Settings.precision`` as a builder flag and then stores every tensor between its layers in
that precision. ONNX Runtime's CPU provider has no such mode, and for a model whose own dtype is float16 it
computes the missing fp16 kernels in float32 *without* rounding between them (``x*4000/4000`` gives
``x`` where eager gives ``inf``), while for bfloat16 most ops have no kernel at all. ``emulate`` rewrites the
model so that it runs in float32 and rounds where TensorRT (and eager in that dtype) would:

- **every float value between nodes is rounded**: each node computes in float32, and each float output
  ``v`` it produces is rounded by a ``Cast(to=fp16|bf16)``; where ``v`` is float32 in the model a
  ``Cast(to=float)`` follows (``v`` keeps its name and type), where ``v`` is float16/bfloat16 in the model
  (a *native* low-precision value) the rounded value is ``v`` itself and its consumers read a
  ``Cast(to=float)`` of it;
- **graph inputs and initializers are rounded** the same way (a weight held by reference, ``weights=``, is
  rounded or widened in the mapping instead: its tensor is replaced, its placeholder retyped to float; the
  placeholder's data is never read);
- **native float16/bfloat16 models compute in float32**: every native low-precision value is computed as
  float32 and rounded to its own dtype after every node, so every op runs on ONNX Runtime's float32 kernels
  (none falls back for want of a bf16 kernel); attributes that carry a low-precision dtype are retargeted to
  float32: ``Cast``'s ``to``, any ``dtype`` attribute (``EyeLike``, ``RandomNormal``, ...) and a tensor
  attribute's data (``ConstantOfShape``'s and ``Constant``'s ``value``, exactly representable in float32);
- **nodes kept in float32** (``Settings.fp32_nodes``, matched by the fx node and ATen op each ONNX node records:
  ``onnx_origin``): their float32 outputs are not rounded, and they read the graph's float32 inputs and
  initializers unrounded, as a TensorRT layer constrained to float32 reads a float32 network input; a value
  another node produced reaches them as that node left it (rounded), as TensorRT's reformat would. A weight
  held by reference is rounded for every reader (its one tensor); natively float16/bfloat16 values stay rounded;
- **the interface keeps its dtypes**: graph inputs and outputs keep their names and element types, so the
  engine binds the same tensors; a float32 output under ``precision="fp16"`` is float32 holding fp16 values.

What this models: the range (overflow to inf above 65504 in fp16) and the rounding of every tensor that
crosses from one ONNX node to the next, of inputs and of weights, as TensorRT stores them in reduced
precision and as eager PyTorch does in that dtype. What it does not model: TensorRT's choice of kernels,
its layer fusions (a fused conv+bias+relu rounds once, not after each op; this rounds after each ONNX node),
layers TensorRT keeps in float32 (its precision flags *allow* lower precision, they do not force it), and
rounding or accumulation *inside* a kernel (a MatMul, Conv or ReduceSum here accumulates in float32, as
TensorRT's fp16 kernels mostly do, but its tactics may differ); nor eager's own per-op choices (PyTorch's
CPU kernels may accumulate in float32 too). Values ONNX shape inference cannot type are left as they are.
Subgraphs (``If``, ``Loop``) are not rewritten: their outputs are rounded, their insides are not, and a native
low-precision model holding one is refused (``EngineBuildError``: the segment falls back, as before).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

from trtcheck.conversion.origins import onnx_origin
from trtcheck.errors import EngineBuildError

__all__ = ["LOW_TYPES", "PRECISION_TYPES", "KeepFp32", "emulate", "needs_emulation", "onnx_origin"]

KeepFp32 = Callable[[str, str], bool]
"""Whether a node stays in float32, asked with its fx node name and ATen target (``names.Fp32Nodes``)."""

PRECISION_TYPES: dict[str, int | None] = {"fp32": None, "fp16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16}
"""``Settings.precision`` -> the ONNX element type float32 values are rounded to (None: not rounded)."""

LOW_TYPES = frozenset({TensorProto.FLOAT16, TensorProto.BFLOAT16})
_FLOAT = TensorProto.FLOAT
_FLOATS = LOW_TYPES | {_FLOAT}
_TORCH = {TensorProto.FLOAT: torch.float32, TensorProto.FLOAT16: torch.float16, TensorProto.BFLOAT16: torch.bfloat16}
_TYPE_NAME = {TensorProto.FLOAT16: "fp16", TensorProto.BFLOAT16: "bf16", TensorProto.FLOAT: "fp32"}
_DTYPE_ATTRIBUTES = ("to", "dtype")


def needs_emulation(model: onnx.ModelProto, precision: str) -> bool:
    """True when ``emulate`` changes ``model``: ``precision`` is reduced, or the model holds float16/bfloat16 values."""
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
    model: onnx.ModelProto, precision: str, weights: Mapping[str, torch.Tensor] | None = None,
    keep_fp32: KeepFp32 | None = None,
) -> tuple[onnx.ModelProto, dict[str, torch.Tensor] | None]:
    """``model`` rewritten to compute in float32 and round every float tensor between nodes like ``precision``
    (see the module's doc), except the outputs of the nodes ``keep_fp32`` keeps, and the ``weights`` it needs
    (those of placeholders rounded or widened to float32, the others as given). ``model`` and ``weights`` are not
    changed. Node and value names are deterministic."""
    if precision not in PRECISION_TYPES:
        raise ValueError(f"precision must be one of {', '.join(PRECISION_TYPES)}, got {precision!r}")
    low = PRECISION_TYPES[precision]
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    types = _elem_types(out)
    subgraphs = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
    if any(attribute.type in subgraphs for node in graph.node for attribute in node.attribute):
        if any(t in LOW_TYPES for t in types.values()):
            raise EngineBuildError("precision emulation: a float16/bfloat16 model with subgraphs (If, Loop) is not supported")
    names = _Names(out)

    def rounding(value: str) -> int | None:
        """The type ``value`` is rounded to: its own if low precision, else ``low`` for float32, else None."""
        elem = types.get(value)
        if elem in LOW_TYPES:
            return elem
        return low if elem == _FLOAT else None

    new_weights = dict(weights) if weights is not None else None
    reads: dict[str, str] = {}  # value -> the float32 value its consumers read instead
    unrounded: set[str] = set()  # float32 graph inputs and initializers: a kept node reads them as they are
    head: list[onnx.NodeProto] = []  # Cast nodes of graph inputs and initializers, first in the graph
    for initializer in graph.initializer:
        target = rounding(initializer.name)
        if target is None:
            continue
        placeholder = initializer.data_location == TensorProto.EXTERNAL and new_weights is not None and initializer.name in new_weights
        if placeholder:  # a weight held by reference: round (or widen) its tensor, never its placeholder's data
            tensor = new_weights[initializer.name].detach()
            new_weights[initializer.name] = tensor.to(_TORCH[target]).to(torch.float32).contiguous()
            initializer.data_type = _FLOAT
        else:
            head += _round_and_widen(initializer.name, target, types[initializer.name], names, reads)
            if types[initializer.name] == _FLOAT:
                unrounded.add(initializer.name)
    for value in graph.input:
        target = rounding(value.name)
        if target is not None and value.name not in reads:
            head += _round_and_widen(value.name, target, types[value.name], names, reads)
            if types[value.name] == _FLOAT:
                unrounded.add(value.name)

    body: list[onnx.NodeProto] = []
    for node in graph.node:
        kept = keep_fp32 is not None and low is not None and keep_fp32(*onnx_origin(node))
        for index, name in enumerate(node.input):
            if name in reads and not (kept and name in unrounded):
                node.input[index] = reads[name]
        for attribute in node.attribute:
            _widen_attribute(attribute)
        after: list[onnx.NodeProto] = []
        for index, name in enumerate(node.output):
            target = rounding(name) if name else None
            if target is None or ((kept or node.op_type == "Identity") and types[name] == _FLOAT):
                continue  # an Identity (an engine output's copy) passes on a value rounded where it was made
            raw = names.value(f"{name}__fp32")
            node.output[index] = raw
            after += _round_output(raw, name, target, types[name], names, reads)
        body.append(node)
        body += after
    outputs = {value.name for value in graph.output}
    del graph.node[:]
    graph.node.extend(head + body)
    _drop_unused_widening(graph, outputs)
    return out, new_weights


def _round_and_widen(name: str, target: int, elem: int, names: _Names, reads: dict[str, str]) -> list[onnx.NodeProto]:
    """Casts reading the graph input or initializer ``name`` (of type ``elem``): its consumers read it rounded to
    ``target`` and in float32 (a native low-precision one only widened: it is rounded already)."""
    nodes = []
    source = name
    if elem == _FLOAT:
        source = names.value(f"{name}__{_TYPE_NAME[target]}")
        nodes.append(_cast(names.node(f"{name}/RoundCast"), name, source, target))
    widened = names.value(f"{name}__rounded")
    nodes.append(_cast(names.node(f"{name}/WidenCast"), source, widened, _FLOAT))
    reads[name] = widened
    return nodes


def _round_output(raw: str, name: str, target: int, elem: int, names: _Names, reads: dict[str, str]) -> list[onnx.NodeProto]:
    """Casts turning a node's float32 output ``raw`` into ``name`` (type ``elem``, rounded to ``target``)."""
    if elem == _FLOAT:  # float32 in the model: round, then back to float32 under its own name
        rounded = names.value(f"{name}__{_TYPE_NAME[target]}")
        return [_cast(names.node(f"{name}/RoundCast"), raw, rounded, target), _cast(names.node(f"{name}/WidenCast"), rounded, name, _FLOAT)]
    widened = names.value(f"{name}__fp32_rounded")  # native low precision: ``name`` is the rounded value itself
    reads[name] = widened
    return [_cast(names.node(f"{name}/RoundCast"), raw, name, target), _cast(names.node(f"{name}/WidenCast"), name, widened, _FLOAT)]


def _cast(node_name: str, source: str, result: str, to: int) -> onnx.NodeProto:
    return helper.make_node("Cast", [source], [result], name=node_name, to=to)


def _widen_attribute(attribute: onnx.AttributeProto) -> None:
    """A low-precision dtype or tensor in a node's attribute retargeted to float32 (the node then computes in it)."""
    if attribute.type == onnx.AttributeProto.INT and attribute.name in _DTYPE_ATTRIBUTES and attribute.i in LOW_TYPES:
        attribute.i = _FLOAT
    elif attribute.type == onnx.AttributeProto.TENSOR and attribute.t.data_type in LOW_TYPES:
        tensor = attribute.t
        values = numpy_helper.to_array(tensor).astype("float32")  # exact: every fp16/bf16 value is a float32
        widened = numpy_helper.from_array(values, tensor.name)
        attribute.t.CopyFrom(widened)


def _drop_unused_widening(graph: onnx.GraphProto, outputs: set[str]) -> None:
    """Widening Casts nobody reads (of a native low-precision value read only as a graph output) removed."""
    read = {name for node in graph.node for name in node.input} | outputs
    keep = [node for node in graph.node if not (node.op_type == "Cast" and node.name.endswith("/WidenCast") and node.output[0] not in read)]
    if len(keep) != len(graph.node):
        del graph.node[:]
        graph.node.extend(keep)


def _elem_types(model: onnx.ModelProto) -> dict[str, int]:
    """Every value's ONNX element type that the model declares or shape inference finds."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
    except Exception:  # noqa: BLE001 - inference is best effort: what the model declares still types its values
        inferred = model
    graph = inferred.graph
    types = {}
    for value in [*graph.value_info, *graph.input, *graph.output]:
        if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type:
            types[value.name] = value.type.tensor_type.elem_type
    for initializer in graph.initializer:
        types[initializer.name] = initializer.data_type
    for node in graph.node:  # Constant nodes: inference may skip a value it could fold
        if node.op_type == "Constant" and node.output[0] not in types:
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.TENSOR:
                    types[node.output[0]] = attribute.t.data_type
                elif attribute.name in ("value_float", "value_floats"):
                    types[node.output[0]] = _FLOAT
    return {name: elem for name, elem in types.items() if elem in _FLOATS}


class _Names:
    """Fresh value and node names for the rewrite, deterministic and unique in the model."""

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
