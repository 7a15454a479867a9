"""Every ONNX node names the fx node it came from and documents its converter, so engine errors map back.

A node is named ``f"{fx_node.name}/{op_type}"`` (``gelu/Mul_1`` for the second Mul of one fx node) and its
``doc_string`` is ``%fx_node (aten target), converter module.function``; ``Could not find an implementation for
Gemm(13) node with name ''`` named nothing a user could act on.
"""

from __future__ import annotations

import re

import onnx
import torch
from torch import nn

import trtcheck
from suites.conversion.converter_harness import export_graph
from trtcheck import conversion as converters
from trtcheck.conversion import segment_to_onnx
from trtcheck.conversion.context import converter_name
from trtcheck.engines import onnxruntime as ort_engine

A = torch.ops.aten
ONE = trtcheck.Settings(min_block_size=1)


class _Block(nn.Module):
    """Several converters, some emitting many nodes per fx node (gelu, batch norm, softmax, floor division)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.norm = nn.BatchNorm2d(4)
        self.linear = nn.Linear(4, 5)

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.relu(self.norm(self.conv(x))).mean((2, 3))
        y = nn.functional.gelu(self.linear(y)).softmax(-1)
        return y * torch.sign(y - 0.2), ids // 3


def _converted() -> tuple[torch.fx.GraphModule, onnx.ModelProto]:
    torch.manual_seed(0)
    args = (torch.randn(2, 3, 6, 6), torch.tensor([-7, 8, -2147483648], dtype=torch.int32))
    gm = export_graph(_Block().eval(), args, decompose=True)
    return gm, segment_to_onnx(gm)


def test_every_node_names_its_fx_node_and_documents_its_converter() -> None:
    gm, model = _converted()
    fx_nodes = {node.name: node for node in gm.graph.nodes}
    names = [node.name for node in model.graph.node]
    assert len(set(names)) == len(names), "ONNX node names must be unique in the model"
    per_fx_node: dict[str, int] = {}
    for node in model.graph.node:
        fx_name, _, op = node.name.partition("/")
        assert fx_name in fx_nodes, f"{node.name!r} ({node.op_type}) names no fx node"
        assert re.fullmatch(rf"{node.op_type}(_[1-9]\d*)?", op), node.name
        fx_node = fx_nodes[fx_name]
        if fx_node.op == "output":
            converter = "trtcheck.conversion.interpreter.segment_to_onnx"
            assert node.doc_string == f"%output (output), converter {converter}"
        else:
            converter = converter_name(converters.get(fx_node.target).fn)
            assert node.doc_string == f"%{fx_name} ({fx_node.target}), converter {converter}"
        assert converter.startswith("trtcheck.conversion.") and "<locals>" not in converter
        per_fx_node[fx_name] = per_fx_node.get(fx_name, 0) + 1
    assert max(per_fx_node.values()) > 3  # several nodes from one fx node: the _1, _2 suffixes were exercised
    assert any(re.fullmatch(r"\w+/Mul_1", name) for name in names)
    onnx.checker.check_model(model, full_check=True)


def test_node_names_are_deterministic() -> None:
    _, first = _converted()
    _, second = _converted()
    assert first.SerializeToString() == second.SerializeToString()


def test_a_factory_made_converter_is_named_by_its_factory() -> None:
    gm = export_graph(lambda x: x * 2.0 + 1.0, (torch.randn(3),))
    model = segment_to_onnx(gm)
    docs = {node.op_type: node.doc_string for node in model.graph.node}
    assert docs["Mul"] == "%mul (aten.mul.Tensor), converter trtcheck.conversion.ops.elementwise._binary.convert"


def test_a_users_converter_is_named_in_its_nodes() -> None:
    def my_relu(ctx, node):
        return ctx.add("Relu", [ctx.name(node.args[0])])

    with converters.Snapshot():
        converters.register(A.relu.default, override=True)(my_relu)
        gm = export_graph(lambda x: torch.relu(x), (torch.randn(3),))
        (relu,) = [node for node in segment_to_onnx(gm).graph.node if node.op_type == "Relu"]
    assert relu.name == "relu/Relu"
    assert relu.doc_string.endswith(f"converter {__name__}.test_a_users_converter_is_named_in_its_nodes.my_relu")


def test_a_segment_onnx_runtime_cannot_run_names_the_fx_node_and_converter_in_its_fallback(monkeypatch) -> None:
    """The issue's example: ONNX Runtime has no bfloat16 Gemm kernel, so the session cannot be created (with the
    engine's bf16 emulation, issue 24, turned off: it computes bf16 models in float32 and runs this one)."""
    monkeypatch.setattr(ort_engine, "needs_emulation", lambda model: False)
    model = nn.Linear(4, 3).to(torch.bfloat16).eval()
    compiled = trtcheck.compile(model, (torch.randn(2, 4, dtype=torch.bfloat16),), ONE, backend="onnxruntime")
    (fallback,) = compiled.partition.fallbacks
    assert "node with name 'addmm/Gemm'" in fallback
    assert "ONNX node 'addmm/Gemm' is %addmm (aten.addmm.default), converter trtcheck.conversion.ops.linear._addmm" in fallback
