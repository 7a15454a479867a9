"""Where a converted ONNX node came from: the one format, with its writer and its readers.

Every ONNX node trtcheck's converters emit is named ``{fx node}/{op type}`` (``addmm/Gemm``) and carries, as its
``doc_string``, the fx node, its ATen target and the converter (``%addmm (aten.addmm.default), converter
trtcheck.conversion.ops.linear._addmm``). The converters write it (``node_origin``, through the
``ConversionContext``); the mixed-precision rewrite reads which fx node and target a node came from (``onnx_origin``,
to keep ``fp32_nodes`` in float32); engines keep every node's (``node_origins``) and their errors, and the
stitched module's, quote it (``explain_node_names``). One module, so the writer and the parsers cannot drift; it
sits below conversion and engines so that reading it loads no converter.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

import onnx

if TYPE_CHECKING:
    import torch.fx

__all__ = ["explain_node_names", "node_origin", "node_origins", "onnx_origin"]


def node_origin(node: torch.fx.Node, converter: str) -> str:
    """``%addmm (aten.addmm.default), converter trtcheck.conversion.ops.linear._addmm``: the ``doc_string`` of every
    ONNX node converted from fx node ``node`` by ``converter``, which engine errors quote."""
    target = node.target if node.op == "call_function" else node.op
    return f"%{node.name} ({target}), converter {converter}"


_ORIGIN = re.compile(r"^%(?P<name>\S+) \((?P<target>[^)]*)\)")


def onnx_origin(node: onnx.NodeProto) -> tuple[str, str]:
    """The fx node an ONNX node was converted from and its ATen target (``"native_layer_norm"``,
    ``"aten.native_layer_norm.default"``), from its ``doc_string`` (``node_origin``); a node without one: the part
    of its name before ``/``, and no target."""
    found = _ORIGIN.match(node.doc_string or "")
    if found:
        return found["name"], found["target"]
    return node.name.split("/", 1)[0], ""


def node_origins(model: onnx.ModelProto) -> dict[str, str]:
    """``{ONNX node name: doc_string}`` of the nodes trtcheck's converters named and documented: ``addmm/Gemm`` ->
    ``%addmm (aten.addmm.default), converter trtcheck.conversion.ops.linear._addmm``."""
    return {node.name: node.doc_string for node in model.graph.node if node.name and node.doc_string}


_NODE_NAME = re.compile(r"[A-Za-z_]\w*/[A-Za-z]\w*")  # fx node name / op type (_count)


def explain_node_names(message: str, origins: Mapping[str, str]) -> str:
    """What the converted ONNX nodes an engine's ``message`` names came from (``ONNX node 'addmm/Gemm' is %addmm
    (aten.addmm.default), converter ...``), for an error message; "" when it names none of ``origins``."""
    named = dict.fromkeys(name for name in _NODE_NAME.findall(message) if name in origins)
    return "; ".join(f"ONNX node {name!r} is {origins[name]}" for name in named)
