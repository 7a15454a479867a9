"""A segment's ONNX model in mixed precision: the graph both backends build for ``precision="fp16"``/``"bf16"``.

A compile step, so it lives in the compiler: it rewrites ONNX by ``Settings`` (``precision``, ``fp32_nodes``,
``use_fp32_acc``, ``autocast``) and resolves op names (``trtcheck.names``), neither of which an engine may know; it
imports only ``onnx_format``, ``names`` and ``settings``, so it is the compiler's lowest module, and
``engine_build`` applies it once per segment before handing the finished graph to ``build_engine``.

TensorRT 11 removed weak typing (``BuilderFlag.FP16``/``BF16``, ``OBEY_PRECISION_CONSTRAINTS``, per-layer
precisions): every network is strongly typed, so a reduced precision must be written into the ONNX model before the
build, as NVIDIA's ModelOpt AutoCast and Torch-TensorRT's Autocast do. ``precision_graph`` writes it:

- **float32 values between nodes become the low type**: every node not kept in float32 reads and writes fp16/bf16
  (its float32 weights converted once, here, finite values beyond fp16's range clamped to +-65504 as AutoCast does:
  ``to_low``; a ``Constant``'s value, a ``ConstantOfShape`` value, a ``Cast``'s ``to`` and a ``dtype`` attribute
  retargeted);
- **the engine's I/O keeps its dtypes**: a float32 graph input is read through a ``Cast`` to the low type, a float32
  graph output is written through a ``Cast`` back (``keep_io_types``, as the segment's specs demand);
- **nodes kept in float32** read float32 (a ``Cast`` back from the low type where their input was low) and write
  float32 (a ``Cast`` down for a low reader): ``Settings.fp32_nodes`` (matched by the fx node and ATen target each ONNX
  node records: ``onnx_format.origins.onnx_origin``), ``Settings.autocast``'s rules, and trtcheck's own rules: a node
  with no input or output TensorRT's ONNX parser takes in the low type (``TENSORRT_ONNX_TYPES``: ``Range``, for one)
  or, for an op outside that table, ONNX's schema does not; a node holding a subgraph (``If``, ``Loop``);
- **a float16/bfloat16 model's own float32 stays float32**: where the segment holds low-precision values of the model's
  own (its weights, inputs or casts), the nodes it computes in float32 (an RMSNorm's upcast) are the model's explicit
  dtypes, kept as eager computes them; ``precision`` lowers a float32 model, never a typed one;
- **inputs the op's schema fixes to float32** (``Resize``'s scales) stay float32 inside a low node;
- **``Settings.use_fp32_acc``**: each low ``MatMul``/``Gemm`` reads its inputs rounded to the low type but as float32,
  computes in float32 and casts its result down (Torch-TensorRT's ``use_fp32_acc``);
- a weight that a kept node reads stays float32 and its low readers read a ``Cast`` of it; a value is cast at most
  once to each type, however many nodes read it.

Every node keeps its name and ``doc_string`` (the origins engine errors quote); each Cast is named after the value it
converts (``relu_2/ToFp16``) and documented with why it is there. ONNX Runtime then runs this same graph through
``engines.emulation.emulate`` (its fp16 nodes computed in float32 and rounded after each), so its verdict is on the
graph TensorRT builds.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

from trtcheck.names import resolve_autocast_ops, resolve_fp32_nodes
from trtcheck.onnx_format.graph import FLOAT, LOW_TYPES, PRECISION_TYPES, TORCH_TYPES, TYPE_NAMES, Names, captured, cast, value_infos
from trtcheck.onnx_format.origins import onnx_origin
from trtcheck.onnx_format.tensorrt_parser import TENSORRT_ONNX_TYPES
from trtcheck.settings import Autocast, Settings

__all__ = ["MixedPrecision", "autocast_keeps", "precision_graph", "to_low", "to_mixed_precision"]

KeepFp32 = Callable[[str, str], bool]
"""Whether a node stays in float32, asked with its fx node name and ATen target (``names.Fp32Nodes``)."""

_ONNX_NAMES = {TensorProto.FLOAT16: "FLOAT16", TensorProto.BFLOAT16: "BFLOAT16"}
_CAST_SUFFIX = {TensorProto.FLOAT16: "ToFp16", TensorProto.BFLOAT16: "ToBf16", FLOAT: "ToFloat"}
_ACCUMULATING = frozenset({"MatMul", "Gemm"})
_TYPE_AGNOSTIC = {"Shape": {0}, "Size": {0}, "Cast": {0}}  # inputs read in whatever type they have
_DTYPE_OPS = frozenset({"EyeLike", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Cast"})

LOW, F32, ROUNDED = "low", "fp32", "rounded"
"""The versions of a float32 value a reader may need: in the low type, in float32, or rounded to the low type and read
as float32 (``use_fp32_acc``)."""


@dataclass
class MixedPrecision:
    """``to_mixed_precision``'s result: the model, the weights it needs, and every node kept in float32 with why."""

    model: onnx.ModelProto
    weights: dict[str, torch.Tensor] | None
    kept: dict[str, str] = field(default_factory=dict)
    """ONNX node name -> why it stays float32 (``"Settings.fp32_nodes"``, ``"Autocast: ..."``, trtcheck's own rule)."""


def precision_graph(
    model: onnx.ModelProto, settings: Settings | None, weights: Mapping[str, torch.Tensor] | None = None
) -> tuple[onnx.ModelProto, dict[str, torch.Tensor] | None]:
    """The segment's model as both backends build it under ``settings`` (``Settings.precision``, ``fp32_nodes``,
    ``use_fp32_acc``, ``autocast``; None: the defaults), and its ``weights`` (by reference, or None): ``model``
    itself at ``"fp32"``, its mixed-precision graph (``to_mixed_precision``) at ``"fp16"``/``"bf16"``."""
    precision = (settings.precision if settings is not None else None) or "fp32"
    if settings is None or PRECISION_TYPES[precision] is None:
        return model, dict(weights) if weights is not None else None
    keep = resolve_fp32_nodes(settings.fp32_nodes or ())
    mixed = to_mixed_precision(
        model, precision, weights, keep=keep or None, fp32_accumulation=bool(settings.use_fp32_acc),
        autocast=Autocast.of(settings.autocast),
    )
    return mixed.model, mixed.weights


def to_mixed_precision(
    model: onnx.ModelProto,
    precision: str,
    weights: Mapping[str, torch.Tensor] | None = None,
    *,
    keep: KeepFp32 | None = None,
    fp32_accumulation: bool = False,
    autocast: Autocast | None = None,
) -> MixedPrecision:
    """``model`` (float32, possibly with float16/bfloat16 parts) rewritten to compute in ``precision`` ("fp16" or
    "bf16") as the module's doc says, keeping in float32 the nodes ``keep`` names (by fx node and ATen target),
    those ``autocast``'s rules keep, and those trtcheck's rules must; ``fp32_accumulation``: MatMul and Gemm compute in
    float32 on low-precision inputs. ``model`` and ``weights`` are not changed; names are deterministic."""
    low = PRECISION_TYPES.get(precision)
    if low is None:
        raise ValueError(f"to_mixed_precision makes fp16 or bf16 graphs, got precision {precision!r}")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    infos = value_infos(out)
    f32 = {name for name, info in infos.items() if info.type.tensor_type.elem_type == FLOAT}
    opset = next((o.version for o in out.opset_import if o.domain in ("", "ai.onnx")), 17)
    names = Names(out)
    new_weights = dict(weights) if weights is not None else None
    initializers = {initializer.name: initializer for initializer in graph.initializer}
    graph_inputs = {value.name for value in graph.input if value.name not in initializers}
    pinned = {value.name for value in graph.output if value.name in f32} | captured(graph)  # must stay float32 by name
    typed = any(info.type.tensor_type.elem_type in LOW_TYPES for info in infos.values())  # a float16/bfloat16 model

    # 1. Each node's mode: "low", "fp32" (kept, with why), "acc" (use_fp32_acc), or "as is" (no float32 data).
    policy = {**_rounded_once(graph), **(autocast_keeps(graph, infos, autocast) if autocast is not None else {})}
    positions = [_positions(node, opset) for node in graph.node]
    modes: list[str] = []
    kept: dict[str, str] = {}
    made_fp32 = graph_inputs & f32  # float32 values made in float32: the engine's inputs, kept nodes' outputs
    for index, (node, where) in enumerate(zip(graph.node, positions)):
        kinds = [kind for name, kind in zip([*node.input, *node.output], [*where.inputs, *where.outputs]) if name in f32]
        if all(kind == "any" for kind in kinds) and not (node.op_type in _DTYPE_OPS and _makes_float32(node)):
            modes.append("as is")
            continue
        if node.op_type == "Identity" and node.input and node.input[0] in made_fp32:
            # an Identity computes nothing: it hands a float32 value on as it is (the engine's outputs are Identities of
            # the values they return, and a kept node's result cast down on its way out would undo fp32_nodes)
            modes.append("fp32")
            made_fp32.update(name for name in node.output if name in f32)
            continue
        why = _why_float32(node, index, where, low, opset, keep, policy, f32, typed)
        if why is not None:
            modes.append("fp32")
            kept[node.name] = why
            made_fp32.update(name for name in node.output if name in f32)
        else:
            modes.append("acc" if fp32_accumulation and node.op_type in _ACCUMULATING else "low")

    # 2. Which version of each float32 value its readers need, and the type each value is made in ("home").
    wants: dict[str, set[str]] = {}
    reads: list[list[str | None]] = []  # per node, per input: the version it reads (None: the value as it is made)
    for node, mode, where in zip(graph.node, modes, positions):
        row: list[str | None] = []
        for i, name in enumerate(node.input):
            version = _version(mode, where.inputs[i]) if name in f32 else None
            row.append(version)
            if version is not None:
                wants.setdefault(name, set()).add(version)
        reads.append(row)
    for name in pinned:
        wants.setdefault(name, set()).add(F32)

    def only_low(name: str) -> bool:
        return bool(wants.get(name)) and F32 not in wants[name]

    home: dict[str, str] = dict.fromkeys(graph_inputs & f32, F32)
    for name in initializers.keys() & f32:
        home[name] = LOW if only_low(name) and _convertible(initializers[name], new_weights) else F32
    for node, mode, where in zip(graph.node, modes, positions):
        for i, name in enumerate(node.output):
            if name in f32:
                if node.op_type == "Constant":  # a constant is made in the type its readers want, like a weight
                    home[name] = LOW if mode == "low" and only_low(name) else F32
                else:
                    home[name] = LOW if mode in ("low", "acc") and where.outputs[i] == "data" else F32

    # 3. Rewrite: convert weights and attributes, then give each value the versions its readers need, each made once,
    # right after the value itself.
    for name, initializer in initializers.items():
        if home.get(name) == LOW:
            _convert_initializer(initializer, low, new_weights)
    for node, mode in zip(graph.node, modes):
        if mode == "low" and (node.op_type != "Constant" or home.get(node.output[0]) == LOW):
            _retarget_attributes(node, low)
    producer = {output: index for index, node in enumerate(graph.node) for output in node.output if output}
    head: list[onnx.NodeProto] = []
    made_after: dict[int, list[onnx.NodeProto]] = {}
    version_names: dict[tuple[str, str], str] = {}

    def place(name: str) -> list[onnx.NodeProto]:
        return made_after.setdefault(producer[name], []) if name in producer else head

    def add_cast(name: str, source: str, to: int, why: str, base: str | None = None) -> str:
        base = base or name
        result = names.value(f"{base}__{TYPE_NAMES[to]}")
        place(name).append(cast(names.node(f"{base}/{_CAST_SUFFIX[to]}"), source, result, to, _doc(name, to, why)))
        return result

    def ensure(name: str, version: str) -> str:
        """The name of ``name``'s ``version``, made (by Casts) on first use."""
        if (name, version) not in version_names:
            if version == ROUNDED:
                if home[name] == LOW:
                    result = ensure(name, F32)
                else:
                    why = "use_fp32_acc: read rounded, in float32"
                    result = add_cast(name, ensure(name, LOW), FLOAT, why, f"{name}__{TYPE_NAMES[low]}")
            else:
                to = low if version == LOW else FLOAT
                why = "a float32 node reads it" if to == FLOAT else "a low-precision node reads it"
                result = add_cast(name, version_names[(name, home[name])], to, why)
            version_names[(name, version)] = result
        return version_names[(name, version)]

    for name in sorted(home, key=lambda n: (producer.get(n, -1), n)):
        made = name
        index = producer.get(name)
        if index is not None and modes[index] == "acc" and home[name] == LOW:  # float32 result, cast down
            raw = names.value(f"{name}__fp32_acc")
            _rename_output(graph.node[index], name, raw)
            made = names.value(f"{name}__{TYPE_NAMES[low]}") if name in pinned else name
            place(name).append(cast(names.node(f"{name}/{_CAST_SUFFIX[low]}"), raw, made, low,
                                    _doc(name, low, "use_fp32_acc: the product accumulated in float32")))
        elif index is not None and home[name] == LOW and name in pinned:  # made in the low type, kept float32 by name
            made = names.value(f"{name}__{TYPE_NAMES[low]}")
            _rename_output(graph.node[index], name, made)
        version_names[(name, home[name])] = made
        if home[name] == LOW and name in pinned:
            place(name).append(cast(names.node(f"{name}/{_CAST_SUFFIX[FLOAT]}"), made, name, FLOAT,
                                    _doc(name, FLOAT, "the engine's output keeps its dtype")))
            version_names[(name, F32)] = name
    for node, row in zip(graph.node, reads):
        for i, version in enumerate(row):
            if version is not None and node.input[i] in home:
                node.input[i] = ensure(node.input[i], version)
    body: list[onnx.NodeProto] = []
    for index, node in enumerate(graph.node):
        body.append(node)
        body += made_after.get(index, [])
    del graph.node[:]
    graph.node.extend(head + body)
    _drop_stale_value_info(graph, {name for name, where in home.items() if where == LOW})
    return MixedPrecision(out, new_weights, kept)


# ---------------------------------------------------------------------------------------------------------------
# Which positions of a node are its data, and why a node stays float32


@dataclass(frozen=True)
class _Positions:
    """Per input and output of a node: ``"data"`` (a float type variable of its schema that admits the low types),
    ``"fixed"`` (a type its schema fixes, like ``Resize``'s float32 scales), or ``"any"`` (read as it is: ``Shape``)."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


def _positions(node: onnx.NodeProto, opset: int) -> _Positions:
    schema = _schema(node.op_type, node.domain, opset)
    agnostic = _TYPE_AGNOSTIC.get(node.op_type, set())
    if schema is None:
        return _Positions(("fixed",) * len(node.input), ("fixed",) * len(node.output))
    data_vars = {c.type_param_str for c in schema.type_constraints if "tensor(float16)" in c.allowed_type_strs}

    def kinds(formals: Sequence[Any], count: int, agnostic_indices: set[int]) -> tuple[str, ...]:
        result = []
        for index in range(count):
            formal = formals[min(index, len(formals) - 1)] if formals else None
            if index in agnostic_indices:
                result.append("any")
            elif formal is not None and formal.type_str in data_vars:
                result.append("data")
            else:
                result.append("fixed")
        return tuple(result)

    return _Positions(kinds(schema.inputs, len(node.input), agnostic), kinds(schema.outputs, len(node.output), set()))


_ELEMENTWISE = frozenset({
    "Abs", "Add", "Ceil", "Clip", "Cos", "Div", "Erf", "Exp", "Floor", "Log", "Max", "Min", "Mul", "Neg", "Pow",
    "Reciprocal", "Relu", "Round", "Sigmoid", "Sign", "Sin", "Softplus", "Sqrt", "Sub", "Tanh", "Where",
})


def _rounded_once(graph: onnx.GraphProto) -> dict[int, str]:
    """The nodes of every ATen op its converter wrote as several elementwise ONNX nodes (GELU's Div, Erf, Add, Mul,
    Mul; ``rsqrt``'s Sqrt and Reciprocal), by index, with why they stay float32: the op is computed in float32 and
    rounded once, at its output, as eager computes it in fp16 (float32 inside, one rounding) and as TensorRT's
    pointwise fusion computes such a chain. Rounded after each of its nodes, a correct GELU erred up to 8.8x eager's
    own error at fp16 on an all-zeros input, and failed."""
    groups: dict[str, list[int]] = {}
    for index, node in enumerate(graph.node):
        fx, _ = onnx_origin(node)
        if fx:
            groups.setdefault(fx, []).append(index)
    found: dict[int, str] = {}
    for fx, indices in groups.items():
        ops = [graph.node[index].op_type for index in indices]
        if len(ops) > 1 and all(op in _ELEMENTWISE for op in ops):
            why = (f"trtcheck: one of the {len(ops)} elementwise ONNX nodes of {fx}, computed in float32 and rounded once "
                   "at its output, as eager and TensorRT's pointwise fusion round it")
            found.update(dict.fromkeys(indices, why))
    return found


@functools.lru_cache(maxsize=512)
def _schema(op_type: str, domain: str, opset: int) -> Any:
    try:
        return onnx.defs.get_schema(op_type, opset, domain or "")
    except Exception:  # noqa: BLE001 - a custom op: no schema, so nothing of it is retyped
        return None


def _why_float32(
    node: onnx.NodeProto, index: int, positions: _Positions, low: int, opset: int, keep: KeepFp32 | None,
    policy: Mapping[int, str], f32: set[str], typed: bool = False,
) -> str | None:
    """Why ``node`` stays float32, or None when it computes in the low type. ``typed``: the segment holds float16 or
    bfloat16 values of the model's own, so its float32 data is the model's explicit choice (a Llama RMSNorm upcast
    in a float16 model), kept as eager computes it: ``precision`` lowers a float32 model, never a typed one."""
    if any(attribute.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for attribute in node.attribute):
        return f"trtcheck: its subgraph ({node.op_type}) is not rewritten"
    if keep is not None and keep(*onnx_origin(node)):
        return "Settings.fp32_nodes"
    if typed and any(name in f32 for name, kind in zip([*node.input, *node.output], [*positions.inputs, *positions.outputs])
                     if kind == "data"):
        return "the model's own float32: a float16/bfloat16 model computes this node in float32 itself"
    if index in policy:
        return policy[index]
    allowed = TENSORRT_ONNX_TYPES.get(node.op_type)
    if allowed is not None and _ONNX_NAMES[low] not in allowed:
        return f"trtcheck: TensorRT's ONNX parser takes no {_ONNX_NAMES[low]} {node.op_type} (only {', '.join(sorted(allowed))})"
    data = [name for name, kind in zip([*node.input, *node.output], [*positions.inputs, *positions.outputs])
            if kind == "data" and name in f32]
    if not data and not (node.op_type in _DTYPE_OPS and _makes_float32(node)):
        return f"trtcheck: ONNX's {node.op_type} fixes the type of its float32 values"
    if allowed is not None:
        return None
    schema = _schema(node.op_type, node.domain, opset)
    low_type = "tensor(float16)" if low == TensorProto.FLOAT16 else "tensor(bfloat16)"
    if schema is not None and not any(low_type in c.allowed_type_strs for c in schema.type_constraints):
        return f"trtcheck: ONNX's {node.op_type} (opset {opset}) takes no {_ONNX_NAMES[low]}"
    return None


def _makes_float32(node: onnx.NodeProto) -> bool:
    """A node whose float32 output type comes from an attribute (``Cast(to=FLOAT)``, ``EyeLike(dtype=FLOAT)``)."""
    return any(a.name in ("to", "dtype") and a.type == onnx.AttributeProto.INT and a.i == FLOAT for a in node.attribute)


def _version(mode: str, kind: str) -> str | None:
    """Which version of a float32 value a node of ``mode`` reads at a position of ``kind`` (None: as it is made)."""
    if mode == "as is" or kind == "any":
        return None
    if mode == "fp32" or kind == "fixed":
        return F32
    return ROUNDED if mode == "acc" else LOW


# ---------------------------------------------------------------------------------------------------------------
# Torch-TensorRT's Autocast rules on a segment's ONNX nodes


_REDUCTIONS = {
    "aten.convolution.default", "aten.conv1d.default", "aten.conv2d.default", "aten.conv3d.default",
    "aten.matmul", "aten.matmul.default", "aten.dot.default", "aten.mm.default", "aten.mv.default", "aten.bmm.default",
    "aten.scaled_dot_product_attention.default",
}
"""The targets Torch-TensorRT's ``DepthOfReductionRule`` measures (``aten.addmm`` is not among them)."""


def autocast_keeps(graph: onnx.GraphProto, infos: Mapping[str, onnx.ValueInfoProto], policy: Autocast) -> dict[int, str]:
    """Node index -> why ``policy`` (Torch-TensorRT's Autocast rules, ``Autocast``) keeps it in float32. The rules are
    Torch-TensorRT's, asked of the fx node each ONNX node came from (``onnx_origin``): every ONNX node of a kept fx
    node is kept."""
    ops = resolve_autocast_ops(policy.excluded_ops)
    patterns = [re.compile(p) for p in policy.excluded_nodes]
    origins = [onnx_origin(node) for node in graph.node]
    producer = {output: origins[index][0] for index, node in enumerate(graph.node) for output in node.output}
    initializers = {initializer.name for initializer in graph.initializer}
    fx_inputs: dict[str, set[str]] = {}
    for node, (fx, _) in zip(graph.node, origins):  # a segment input is named after the fx node that makes it
        sources = {producer.get(name, name) for name in node.input if name and name not in initializers}
        fx_inputs.setdefault(fx, set()).update(sources - {fx})
    reasons: dict[str, str] = {}
    for node, (fx, target) in zip(graph.node, origins):
        if fx in reasons:
            continue
        why = None
        if any(p.match(fx) for p in patterns):
            why = "Autocast: excluded_nodes"
        elif ops(fx, target):
            why = "Autocast: excluded_ops"
        elif policy.calibration and policy.max_output_threshold is not None:
            threshold, magnitudes = policy.max_output_threshold, policy.calibration
            loud = [name for name in sorted(fx_inputs.get(fx, set()) | {fx}) if abs(magnitudes.get(name, 0.0)) > threshold]
            if loud:
                why = f"Autocast: max_output_threshold ({', '.join(loud)} beyond {policy.max_output_threshold:g} on calibration data)"
        if why is None and policy.max_depth_of_reduction is not None and target in _REDUCTIONS:
            depth = _reduction_depth(node, target, infos)
            if depth is not None and depth > policy.max_depth_of_reduction:
                why = f"Autocast: max_depth_of_reduction ({depth} > {policy.max_depth_of_reduction})"
        if why is not None:
            reasons[fx] = why
    return {index: reasons[fx] for index, (fx, _) in enumerate(origins) if fx in reasons}


def _reduction_depth(node: onnx.NodeProto, target: str, infos: Mapping[str, onnx.ValueInfoProto]) -> int | None:
    """How many elements ``node`` (an ONNX MatMul, Gemm or Conv of a reduction's fx node) sums over, from the shapes
    its inputs have; None for its other nodes, and where shapes are unknown."""
    def dims(name: str) -> list[int] | None:
        info = infos.get(name)
        if info is None or not info.type.tensor_type.HasField("shape"):
            return None
        values = [d.dim_value if d.HasField("dim_value") else -1 for d in info.type.tensor_type.shape.dim]
        return values if all(v >= 0 for v in values) else None

    if node.op_type in ("Conv", "ConvTranspose") and len(node.input) > 1:
        weight = dims(node.input[1])
        return None if weight is None or len(weight) < 3 else int(weight[1] * np.prod(weight[2:]))
    if node.op_type in ("MatMul", "Gemm"):
        first = dims(node.input[0])
        if first is None or not first:
            return None
        if target == "aten.scaled_dot_product_attention.default":
            return first[-1] * (first[1] if len(first) == 4 else 1)
        transposed = node.op_type == "Gemm" and any(a.name == "transA" and a.i for a in node.attribute)
        return first[0] if transposed else first[-1]
    return None


# ---------------------------------------------------------------------------------------------------------------
# Rewriting pieces


def _doc(value: str, to: int, why: str) -> str:
    return f"{TYPE_NAMES[to]} cast of {value} ({why}: trtcheck.compiler.mixed_precision)"


def _rename_output(node: onnx.NodeProto, old: str, new: str) -> None:
    for i, name in enumerate(node.output):
        if name == old:
            node.output[i] = new


def _convertible(initializer: onnx.TensorProto, weights: Mapping[str, torch.Tensor] | None) -> bool:
    """An initializer whose data is here (or a placeholder whose tensor is in ``weights``): it can be converted."""
    return initializer.data_location != TensorProto.EXTERNAL or (weights is not None and initializer.name in weights)


def _convert_initializer(initializer: onnx.TensorProto, low: int, weights: dict[str, torch.Tensor] | None) -> None:
    """A float32 initializer (or the tensor of its placeholder, in ``weights``) converted to ``low`` (``to_low``)."""
    if initializer.data_location == TensorProto.EXTERNAL:
        assert weights is not None
        weights[initializer.name] = to_low(weights[initializer.name].detach(), low).contiguous()
        initializer.data_type = low
        return
    initializer.CopyFrom(_low_tensor(numpy_helper.to_array(initializer), initializer.name, low))


_FP16_MAX = float(torch.finfo(torch.float16).max)


def to_low(tensor: torch.Tensor, low: int) -> torch.Tensor:
    """A float32 weight or constant in ``low``, rounded to nearest even; in fp16, finite values beyond its range are
    clamped to +-65504 (as ModelOpt AutoCast does, and TensorRT 10 did converting weights for ``BuilderFlag.FP16``:
    a mask constant of ``finfo(float32).min`` stays a large negative number, not -inf); infinities stay infinite (AutoCast
    clips them too). Unlike AutoCast, a nonzero value below fp16's smallest subnormal rounds to zero (AutoCast replaces
    it with +6e-8, whatever its sign)."""
    tensor = tensor.to(torch.float32)
    if low == TensorProto.FLOAT16:
        tensor = torch.where(tensor.isinf(), tensor, tensor.clamp(-_FP16_MAX, _FP16_MAX))
    return tensor.to(TORCH_TYPES[low])


def _low_tensor(array: np.ndarray, name: str, low: int) -> onnx.TensorProto:
    """``array`` (float32) as a TensorProto of ``low`` (``to_low``; torch converts: numpy has no bfloat16)."""
    tensor = to_low(torch.from_numpy(np.array(array, dtype=np.float32)), low)  # a copy: writable
    proto = onnx.TensorProto()
    proto.name = name
    proto.data_type = low
    proto.dims.extend(array.shape)
    proto.raw_data = tensor.view(torch.int16).numpy().tobytes()
    return proto


def _retarget_attributes(node: onnx.NodeProto, low: int) -> None:
    """A low node's float32 attributes in the low type: ``to``/``dtype`` FLOAT, a float tensor (``Constant``'s and
    ``ConstantOfShape``'s ``value``), ``Constant``'s ``value_float(s)``."""
    if node.op_type == "ConstantOfShape" and not any(a.name == "value" for a in node.attribute):  # default: float32 0
        node.attribute.append(helper.make_attribute("value", _low_tensor(np.zeros(1, dtype=np.float32), "", low)))
    for attribute in list(node.attribute):
        if attribute.type == onnx.AttributeProto.INT and attribute.name in ("to", "dtype") and attribute.i == FLOAT:
            attribute.i = low
        elif attribute.type == onnx.AttributeProto.TENSOR and attribute.t.data_type == FLOAT:
            attribute.t.CopyFrom(_low_tensor(numpy_helper.to_array(attribute.t), attribute.t.name, low))
        elif node.op_type == "Constant" and attribute.name in ("value_float", "value_floats"):
            values = np.array(attribute.f if attribute.name == "value_float" else list(attribute.floats), dtype=np.float32)
            node.attribute.remove(attribute)
            node.attribute.append(helper.make_attribute("value", _low_tensor(values, "", low)))


def _drop_stale_value_info(graph: onnx.GraphProto, retyped: set[str]) -> None:
    """value_info entries of values now made in the low type (or renamed) dropped: a stale float32 type would
    contradict the graph; backends infer the types again."""
    produced = {o for node in graph.node for o in node.output} | {i.name for i in graph.initializer} | {v.name for v in graph.input}
    keep = [v for v in graph.value_info if v.name not in retyped and v.name in produced]
    if len(keep) != len(graph.value_info):
        del graph.value_info[:]
        graph.value_info.extend(keep)
