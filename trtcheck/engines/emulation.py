"""ONNX Runtime's emulation of what its CPU provider lacks: float16/bfloat16 values rounded after every node, TF32, FP4.

The compiler hands every backend a finished graph (``trtcheck.compiler.mixed_precision``: the strongly typed
fp16/bf16 graph TensorRT builds). TensorRT computes its types and TF32 natively; ONNX Runtime's CPU provider has no
kernel for many ops in float16/bfloat16 and computes the fp16 ones it has in float32 *without* rounding between
them (``x*4000/4000`` gives ``x`` where eager gives ``inf``). So the ONNX Runtime backend rewrites the graph it is
given, deciding from the graph's own types (``needs_emulation``) and ``EngineOptions.tf32``:

- ``emulate``: the float16/bfloat16 values computed in float32 and rounded to their own type after every node;
- ``emulate_tf32``: the float32 factors of every MatMul, Gemm, Conv and ConvTranspose rounded to TF32;
- ``emulate_fp4``: TensorRT's NVFP4 quantization (``TRT_FP4DynamicQuantize`` and its two DequantizeLinear, which ONNX
  Runtime 1.32 cannot run: it has no float4 kernel) computed with ordinary float32 ops, exactly.

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

from collections.abc import Mapping

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

from trtcheck.engines.precision import TF32_DROPPED_BITS, round_tf32
from trtcheck.errors import EngineBuildError
from trtcheck.onnx_format.graph import FLOAT, LOW_TYPES, Names, captured, cast, elem_types, subgraphs
from trtcheck.onnx_format.tensorrt_parser import FP4_DYNAMIC_QUANTIZE, TENSORRT_DOMAIN

__all__ = ["TF32_OPS", "emulate", "emulate_fp4", "emulate_tf32", "needs_emulation"]

_DTYPE_ATTRIBUTES = ("to", "dtype")


def _low_inside(graph: onnx.GraphProto) -> bool:
    """True when a subgraph of ``graph`` types a value float16/bfloat16 (its nodes would compute in it)."""
    for subgraph in subgraphs(graph):
        typed = [*subgraph.input, *subgraph.output, *subgraph.value_info]
        if any(v.type.tensor_type.elem_type in LOW_TYPES for v in typed) or any(i.data_type in LOW_TYPES for i in subgraph.initializer):
            return True
        if any(_low_attribute(a) for n in subgraph.node for a in n.attribute) or _low_inside(subgraph):
            return True
    return False


def needs_emulation(model: onnx.ModelProto) -> bool:
    """True when ONNX Runtime must run ``model`` through ``emulate``: the model holds float16/bfloat16 values (a
    mixed-precision graph, or a model that is float16 itself), decided from its own types. Every such value has a
    typed root (a graph input, an initializer, a Constant's value, a Cast's ``to``, a ``dtype``), all checked here."""
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


TF32_OPS: dict[str, tuple[int, ...]] = {"MatMul": (0, 1), "Gemm": (0, 1), "Conv": (0, 1), "ConvTranspose": (0, 1)}
"""ONNX op -> the inputs TF32 rounds: the factors of every product (a Gemm's and a Conv's bias is added in float32).
TensorRT's ``BuilderFlag.TF32`` "allows computations on tensors of type FLOAT to use TF32: it computes inner products
by rounding the inputs to 10-bit mantissas before multiplying, but accumulates the sum using 23-bit mantissas"."""

_SPLITTER = float(2**TF32_DROPPED_BITS + 1)  # Veltkamp's constant: c - (c - x), c = 8193 x, keeps x's top 11 bits
_HUGE, _TINY = 2.0**100, 2.0**-100  # |x| beyond: 8193 x could overflow, or lose bits to the subnormal range
_RESCALE = 2.0**64


def _tf32_array(array: np.ndarray) -> np.ndarray:
    """``round_tf32`` on a float32 numpy array (an initializer's data)."""
    return round_tf32(torch.from_numpy(np.array(array, dtype=np.float32))).numpy()  # a copy: writable


def emulate_tf32(
    model: onnx.ModelProto, weights: Mapping[str, torch.Tensor] | None = None
) -> tuple[onnx.ModelProto, dict[str, torch.Tensor] | None]:
    """``model`` with every float32 input of a MatMul, Gemm, Conv and ConvTranspose (``TF32_OPS``) rounded to TF32, and
    the ``weights`` it needs: what ``EngineOptions.tf32`` makes TensorRT compute, for ONNX Runtime. A weight only products
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
    constants = _Constants(names, "tf32")
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


class _Constants:
    """The constants a rewrite's nodes read (float32 scalars; int64 lists for shapes and axes), one initializer each,
    made on first use and named ``{prefix}_{base}``."""

    def __init__(self, names: Names, prefix: str) -> None:
        self._names, self._prefix = names, prefix
        self._made: dict[str, str] = {}
        self.tensors: list[onnx.TensorProto] = []

    def __call__(self, base: str, value: float | list[int]) -> str:
        if base not in self._made:
            array = np.array(value, dtype=np.int64 if isinstance(value, list) else np.float32)
            tensor = numpy_helper.from_array(array, self._names.value(f"{self._prefix}_{base}"))
            self.tensors.append(tensor)
            self._made[base] = tensor.name
        return self._made[base]


def _tf32_nodes(name: str, result: str, names: Names, constant: _Constants) -> list[onnx.NodeProto]:
    """Nodes computing ``result``, the float32 value ``name`` rounded to TF32, in float32 arithmetic: Veltkamp's split
    ``c - (c - x)`` with ``c = 8193 x`` keeps the 11 leading bits of ``x``, rounded to nearest even; ``x`` is scaled by
    ``2**-64`` (``2**64``) first when ``|x| > 2**100`` (``< 2**-100``) so that ``8193 x`` neither overflows nor falls
    into the subnormal range (powers of two scale exactly), and infinities are passed through (``c - x`` is NaN there)."""
    doc = f"TF32 rounding of {name} (trtcheck.engines.emulation.emulate_tf32: Settings.tf32)"
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


def _is_fp4_quantize(node: onnx.NodeProto) -> bool:
    return node.domain == TENSORRT_DOMAIN and node.op_type == FP4_DYNAMIC_QUANTIZE


def emulate_fp4(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each NVFP4 quantization (``TRT_FP4DynamicQuantize(x, global)`` -> codes, scales; ``scale =
    DequantizeLinear(scales, global)``; ``y = DequantizeLinear(codes, scale, block_size=16)``) replaced by ordinary
    ops computing ``y`` as ``trtcheck.qdq.dynamic_block_quantize_op`` does, in float32: each block's largest magnitude
    over ``6 * global``, saturated at 448 and cast to float8e4m3fn (round to nearest even) and back, times ``global``
    (rounded to ``x``'s type for a float16 ``x``); the block over that scale rounded to E2M1 as a multiple of its
    spacing (0.5 below 2, 1 below 4, 2 above; ``Round`` is half to even), saturating at 6; times the scale. A block
    whose scale is 0 gives zeros. Quantizations whose codes or scales anything else reads are left (ONNX Runtime
    then refuses them). ``model`` is not changed."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    types = elem_types(out)
    names = Names(out)
    constant = _Constants(names, "fp4")
    replaced: dict[int, list[onnx.NodeProto]] = {}
    dropped: set[int] = set()
    for quantize in [node for node in graph.node if _is_fp4_quantize(node)]:
        codes, scales = (readers.get(name, []) for name in quantize.output)
        if len(codes) != 1 or len(scales) != 1 or scales[0].op_type != "DequantizeLinear" or codes[0].op_type != "DequantizeLinear":
            continue
        dequantize = codes[0]
        x, global_scale = quantize.input[0], quantize.input[1]
        dtype = types.get(x, FLOAT)
        replaced[id(quantize)] = _fp4_nodes(x, global_scale, dequantize.output[0], dtype, names, constant)
        dropped |= {id(scales[0]), id(dequantize)}
    if not replaced:
        return out
    body = [new for node in graph.node if id(node) not in dropped for new in replaced.get(id(node), [node])]
    del graph.node[:]
    graph.node.extend(body)
    graph.initializer.extend(constant.tensors)
    if not any(node.domain == TENSORRT_DOMAIN for node in graph.node):
        kept = [opset for opset in out.opset_import if opset.domain != TENSORRT_DOMAIN]
        del out.opset_import[:]
        out.opset_import.extend(kept)
    return out


def _fp4_nodes(x: str, global_scale: str, result: str, dtype: int, names: Names, constant: _Constants) -> list[onnx.NodeProto]:
    """``emulate_fp4``'s nodes for one quantization of ``x`` (of element type ``dtype``) into ``result``."""
    doc = f"NVFP4 quantization of {x} (trtcheck.engines.emulation.emulate_fp4: ONNX Runtime has no FP4 kernel)"
    wide = [("Cast", [x], "wide", {"to": FLOAT})] if dtype != FLOAT else [("Identity", [x], "wide", {})]
    scale_in_type = ([("Cast", ["scale_f32"], "scale_low", {"to": dtype}), ("Cast", ["scale_low"], "scale", {"to": FLOAT})]
                     if dtype != FLOAT else [("Identity", ["scale_f32"], "scale", {})])
    steps = [
        *wide,
        ("Shape", ["wide"], "shape", {}), ("Shape", ["wide"], "outer", {"end": -1}),
        ("Concat", ["outer", constant("blocks16", [-1, 16])], "blocked_shape", {"axis": 0}),
        ("Reshape", ["wide", "blocked_shape"], "blocks", {}),
        ("Abs", ["blocks"], "abs", {}),
        ("ReduceMax", ["abs", constant("last_axis", [-1])], "largest", {"keepdims": 1}),
        ("Mul", [global_scale, constant("six", 6.0)], "six_global", {}),
        ("Div", ["largest", "six_global"], "raw_scale", {}),
        ("Min", ["raw_scale", constant("e4m3_max", 448.0)], "saturated", {}),
        ("Cast", ["saturated"], "scale_e4m3", {"to": TensorProto.FLOAT8E4M3FN}),
        ("Cast", ["scale_e4m3"], "scale_units", {"to": FLOAT}),
        ("Mul", ["scale_units", global_scale], "scale_f32", {}),
        *scale_in_type,
        ("Greater", ["scale", constant("zero", 0.0)], "has_scale", {}),
        ("Where", ["has_scale", "scale", constant("one", 1.0)], "safe", {}),
        ("Div", ["blocks", "safe"], "scaled", {}),
        ("Abs", ["scaled"], "magnitude_raw", {}),
        ("Min", ["magnitude_raw", constant("six", 6.0)], "magnitude", {}),
        ("Less", ["magnitude", constant("two", 2.0)], "below_two", {}),
        ("Less", ["magnitude", constant("four", 4.0)], "below_four", {}),
        ("Where", ["below_four", constant("one", 1.0), constant("two", 2.0)], "spacing_high", {}),
        ("Where", ["below_two", constant("half", 0.5), "spacing_high"], "spacing", {}),
        ("Div", ["magnitude", "spacing"], "steps", {}),
        ("Round", ["steps"], "rounded", {}),
        ("Mul", ["rounded", "spacing"], "e2m1", {}),
        ("Neg", ["e2m1"], "negative", {}),
        ("Less", ["scaled", constant("zero", 0.0)], "is_negative", {}),
        ("Where", ["is_negative", "negative", "e2m1"], "signed", {}),
        ("Where", ["has_scale", "signed", constant("zero", 0.0)], "codes", {}),
        ("Mul", ["codes", "scale"], "values", {}),
        ("Reshape", ["values", "shape"], "values_shaped" if dtype != FLOAT else "out", {}),
        *([("Cast", ["values_shaped"], "out", {"to": dtype})] if dtype != FLOAT else []),
    ]
    produced: dict[str, str] = {}
    nodes = []
    for op, inputs, output, attributes in steps:
        produced[output] = result if output == "out" else names.value(f"{x}__fp4_{output}")
        nodes.append(helper.make_node(op, [produced.get(i, i) for i in inputs], [produced[output]],
                                      name=names.node(f"{x}/fp4_{output}"), doc_string=doc, **attributes))
    return nodes
