"""The interpreter: one TensorRT segment (a standalone fx GraphModule) -> one checked ONNX model.

trtcheck does not trust an exporter it did not write: every ATen overload is lowered by a converter
from :mod:`trtcheck.conversion.ops`, and the resulting ONNX model is what TensorRT's ONNX parser (or
ONNX Runtime on machines without a GPU) executes.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Any

import onnx
import torch
import torch.fx
from onnx import helper

from trtcheck.conversion import registry
from trtcheck.conversion.context import OPSET, ConversionContext, describe, value_info
from trtcheck.errors import ConversionError
from trtcheck.onnx_format.tensorrt_parser import TENSORRT_DOMAIN
from trtcheck.onnx_format.weights import with_weights

# The dict ``held_weights`` yields while it is active (else None): see there.
_HELD: contextvars.ContextVar[dict[str, torch.Tensor] | None] = contextvars.ContextVar("trtcheck_held_weights", default=None)


@contextlib.contextmanager
def held_weights() -> Iterator[dict[str, torch.Tensor]]:
    """While active, ``segment_to_onnx`` returns its model with the weights left out: each weight initializer
    (``is_weight``: more than 1024 elements) is a placeholder (``weight_placeholder``: dtype, dims, data external
    in memory) and its tensor, the graph's own (no copy), goes into the dict this yields, by initializer name.
    ``with_weights(model, weights)`` is the self-contained model; engines take the two apart (``build_engine``'s
    ``weights``), so that compiling copies each weight once, into its engine. One segment per activation."""
    weights: dict[str, torch.Tensor] = {}
    token = _HELD.set(weights)
    try:
        yield weights
    finally:
        _HELD.reset(token)


def _convert_node(ctx: ConversionContext, node: torch.fx.Node, accepted: Mapping[str, Any]) -> None:
    converter = registry.get(node.target)
    if converter is None:
        raise ConversionError(f"no converter for {describe(node)}")
    if accepted.get(node.name) is not converter:  # partitioning's verdict stands while its converter is registered
        judged = converter.judge(node)
        if not judged:
            error, reason = judged.error, judged.reason
            why = f": {reason}" if reason else (f" (its validator raised {type(error).__name__}: {error})" if error else "")
            raise ConversionError(f"the converter for {node.target} rejects {describe(node)}{why}")
    try:
        with ctx.converting(node, converter.fn):
            result = converter.fn(ctx, node)
    except ConversionError:
        raise
    except Exception as exc:  # a converter bug must name the node it failed on
        raise ConversionError(f"converting {describe(node)} failed: {exc}") from exc
    ctx.bind(node, result)


def _live(
    nodes: list[onnx.NodeProto], initializers: list[onnx.TensorProto], outputs: list[str]
) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """The nodes and initializers the graph outputs depend on, in their order.

    A converter may leave a value unused (``addmm`` reads a transposed weight directly, leaving the
    ``permute`` node's Transpose behind); dead nodes would still be optimized, and mis-optimized, by the
    engine, so they are dropped here rather than in every converter.
    """
    needed = set(outputs)
    live: list[onnx.NodeProto] = []
    for node in reversed(nodes):
        if any(name in needed for name in node.output):
            live.append(node)
            needed.update(name for name in node.input if name)
    live.reverse()
    return live, [t for t in initializers if t.name in needed]


def _shown(elem_type: int, dims: list[int | str]) -> str:
    return f"{dims} {onnx.helper.tensor_dtype_to_np_dtype(elem_type).name if elem_type else '?'}"


def _check_outputs(model: onnx.ModelProto, results: list[torch.fx.Node]) -> None:
    """ConversionError naming the first output whose ONNX shape or dtype differs from the graph's metadata.

    The outputs are declared from the metadata (``value_info``), so what the converters computed is
    inferred on a copy whose outputs declare nothing, with data propagation: that sees through a
    ``Shape -> Concat -> Reshape`` that the checker's own inference leaves unknown (and then accepts),
    and would otherwise reach the engine and fail only when the compiled module runs. A model the
    inference cannot get through is left to the checker, which reports it.

    Dims are compared one by one: a static dim must be the metadata's, and a dim the metadata says is
    dynamic (a dim_param such as ``s98``) must not come out static, which would be the example's size
    baked into the model (one engine must serve every size in range). A dynamic dim inferred as some
    symbol cannot be compared (inference names what it cannot relate to the inputs ``unk__0``).
    """
    bare = onnx.ModelProto()
    bare.CopyFrom(model)  # weight-free (``_weightless``): a cheap copy
    for output in bare.graph.output:
        output.ClearField("type")
    try:
        inferred = onnx.shape_inference.infer_shapes(bare, check_type=True, strict_mode=True, data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError):
        return
    for index, (declared, got, result) in enumerate(zip(model.graph.output, inferred.graph.output, results)):
        want_type = declared.type.tensor_type
        if not got.type.HasField("tensor_type"):
            continue
        got_type = got.type.tensor_type
        want_dims = _dims(want_type)
        got_dims = [d if d != "" else "?" for d in _dims(got_type)]
        wrong_type = got_type.elem_type not in (0, want_type.elem_type)
        if wrong_type or (got_type.HasField("shape") and _shape_differs(want_dims, got_dims)):
            raise ConversionError(
                f"output {index} (%{result.name}): the converted ONNX gives {_shown(got_type.elem_type, got_dims)}, "
                f"the graph's metadata says {_shown(want_type.elem_type, want_dims)}"
            )


def _dims(tensor_type: onnx.TypeProto.Tensor) -> list[int | str]:
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in tensor_type.shape.dim]


def _shape_differs(want: list[int | str], got: list[int | str]) -> bool:
    """True when the inferred dims ``got`` contradict the declared ``want``: another rank, another static
    size, or a static size where the metadata has a dynamic one."""
    if len(want) != len(got):
        return True
    return any(isinstance(g, int) and (not isinstance(w, int) or w != g) for w, g in zip(want, got))


def segment_to_onnx(gm: torch.fx.GraphModule, opset: int = OPSET, accepted: Mapping[str, Any] | None = None) -> onnx.ModelProto:
    """Convert a standalone one-segment GraphModule to a checked ONNX model.

    Graph inputs are the placeholders (same names), outputs are ``output_0``, ``output_1``, ... in the
    order of the fx output node. Raises ConversionError for any node that cannot be converted.
    Converters target exactly ``OPSET`` (19: Reduce* axes as inputs, float8 Q/DQ), so no other opset is accepted.
    ``accepted``: node name -> the converter whose validator partitioning ran on that node and which accepted
    it (``Reason.converter``); such a node is not judged again while that converter is still the registered one
    (validators were a tenth of the matrix's time, run once to partition and again to convert).
    """
    if opset != OPSET:
        raise ValueError(f"trtcheck's converters emit ONNX opset {OPSET} only, not {opset}")
    ctx = ConversionContext(gm)
    inputs: list[onnx.ValueInfoProto] = []
    outputs: list[onnx.ValueInfoProto] = []
    output_nodes: list[torch.fx.Node] = []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            inputs.append(value_info(node.name, node.meta.get("val")))
            ctx.bind(node, node.name)
        elif node.op == "get_attr":
            ctx.bind(node, ctx.parameter(node))
        elif node.op == "call_function":
            _convert_node(ctx, node, accepted or {})
        elif node.op == "output":
            results = node.args[0]
            if isinstance(results, torch.fx.Node) or not isinstance(results, (tuple, list)):
                results = (results,)
            for index, result in enumerate(results):
                if not isinstance(result, torch.fx.Node):
                    raise ConversionError(f"segment output {index} is {result!r}, not a tensor node")
                name = f"output_{index}"
                if name in ctx.taken_names:
                    raise ConversionError(f"segment value name {name!r} clashes with an ONNX output name")
                # Always an Identity: outputs may alias inputs, constants or each other.
                with ctx.converting(node, segment_to_onnx):
                    ctx.add_node("Identity", [ctx.name(result)], [name])
                outputs.append(value_info(name, result.meta.get("val")))
                output_nodes.append(result)
        else:
            raise ConversionError(f"unsupported {describe(node)} in a segment")
    nodes, initializers = _live(ctx.nodes, ctx.initializers, [o.name for o in outputs])
    weights = {t.name: ctx.weights[t.name] for t in initializers if t.name in ctx.weights}
    model = _model(helper.make_graph(nodes, "trtcheck_segment", inputs, outputs, initializers, value_info=ctx.value_infos), opset)
    checked = _weightless(model, weights)
    _check_outputs(checked, output_nodes)
    try:
        onnx.checker.check_model(checked, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise ConversionError(f"the ONNX model of this segment is invalid: {exc}") from exc
    held = _HELD.get()
    if held is None:
        return with_weights(model, weights)
    held.clear()
    held.update(weights)
    return model


BLOCK_OPSET = 23
"""The opset a segment holding NVFP4 is declared at: float4e2m1 DequantizeLinear (and ``block_size``, from 21)."""
_RENAMED_AT_20 = {"GridSample": {"mode": {b"bilinear": b"linear", b"bicubic": b"cubic"}}}
"""What the converters emit at opset 19 and opset 20 spells otherwise (the only change between 19 and 23 to ops
trtcheck emits that is not a new type): rewritten where a segment is declared at ``BLOCK_OPSET``."""


def _blocked(graph: onnx.GraphProto) -> bool:
    """The segment quantizes in blocks (TensorRT's FP4 ops): it needs ``BLOCK_OPSET``."""
    return any(node.domain == TENSORRT_DOMAIN for node in graph.node)


def _model(graph: onnx.GraphProto, opset: int) -> onnx.ModelProto:
    """The model of ``graph`` at ``opset``: 19 and IR 9 (float8 types; older runtimes load it), or ``BLOCK_OPSET`` and
    IR 11 with TensorRT's own domain for a segment that quantizes in blocks (its opset-19 spellings renamed)."""
    if not _blocked(graph):
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="trtcheck")
        model.ir_version = min(model.ir_version, 9)
        return model
    for node in graph.node:
        for attribute in node.attribute:
            renamed = _RENAMED_AT_20.get(node.op_type, {}).get(attribute.name, {})
            if attribute.s in renamed:
                attribute.s = renamed[attribute.s]
    imports = [helper.make_opsetid("", BLOCK_OPSET), helper.make_opsetid(TENSORRT_DOMAIN, 1)]
    model = helper.make_model(graph, opset_imports=imports, producer_name="trtcheck")
    model.ir_version = min(model.ir_version, 11)
    return model


def _weightless(model: onnx.ModelProto, weights: dict[str, torch.Tensor]) -> onnx.ModelProto:
    """``model`` (weights as placeholders) with every weight a graph input of its dtype and shape instead: what the
    checker and shape inference read. They type every node alike either way (a weight's values are never read:
    shapes and axes are no weights), and skip the serialization and parsing of hundreds of megabytes of data
    (converting vit_b_16 spent 12 s of 21 in ``SerializeToString``); the weights' data needs no check, being
    exactly their tensors' bytes."""
    graph = model.graph
    declared = [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in graph.initializer if t.name in weights]
    kept = [t for t in graph.initializer if t.name not in weights]
    return _model(helper.make_graph(list(graph.node), graph.name, [*graph.input, *declared], list(graph.output), kept,
                                    value_info=list(graph.value_info)), OPSET)


__all__ = ["OPSET", "held_weights", "segment_to_onnx"]
