"""ONNX element types and graph helpers the precision rewrites share: the compiler's mixed-precision graph and
ONNX Runtime's emulation of it read the same types, make fresh names and Casts the same way."""

from __future__ import annotations

import onnx
import torch
from onnx import TensorProto, helper

__all__ = [
    "FLOAT", "FLOATS", "LOW_TYPES", "PRECISION_TYPES", "TORCH_TYPES", "TYPE_NAMES",
    "Names", "captured", "cast", "elem_types", "subgraphs", "value_infos",
]

PRECISION_TYPES: dict[str, int | None] = {"fp32": None, "fp16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16}
"""``Settings.precision`` -> the ONNX element type float32 values become (None: they stay float32)."""

LOW_TYPES = frozenset({TensorProto.FLOAT16, TensorProto.BFLOAT16})
FLOAT = TensorProto.FLOAT
FLOATS = LOW_TYPES | {FLOAT}
TORCH_TYPES = {TensorProto.FLOAT: torch.float32, TensorProto.FLOAT16: torch.float16, TensorProto.BFLOAT16: torch.bfloat16}
TYPE_NAMES = {TensorProto.FLOAT16: "fp16", TensorProto.BFLOAT16: "bf16", TensorProto.FLOAT: "fp32"}


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
