"""An engine error that names an ONNX node (``addmm/Gemm``) says which ATen node and converter made it.

trtcheck's converters name every node ``fxname/Op`` and put ``%fxname (aten target), converter module.fn`` in
its ``doc_string``; the ONNX Runtime engine's build error and the stitched engine's run-time error look the
names up there, so the user learns which op to keep in PyTorch and which converter to fix.
"""

from __future__ import annotations

import pytest
import torch
from onnx import helper

import trtcheck
from trtcheck.engines import EngineBuildError, TensorSpec, build_engine
from trtcheck.errors import EngineRuntimeError
from trtcheck.onnx_format.origins import explain_node_names, node_origins

_GEMM = "%addmm (aten.addmm.default), converter trtcheck.conversion.ops.linear._addmm"


def _int_gemm(make_model):
    specs = [TensorSpec(n, (2, 2), torch.int32) for n in ("a", "b", "c")]
    node = helper.make_node("Gemm", ["a", "b"], ["c"], name="addmm/Gemm", doc_string=_GEMM)
    return make_model([node], specs[:2], specs[2:]), specs


def test_node_origins_and_their_explanation(make_model):
    model, _ = _int_gemm(make_model)
    origins = node_origins(model)
    assert origins == {"addmm/Gemm": _GEMM}
    assert explain_node_names("Gemm(13) node with name 'addmm/Gemm'", origins) == f"ONNX node 'addmm/Gemm' is {_GEMM}"
    assert explain_node_names("node with name ''", origins) == ""
    assert explain_node_names("a/Gemm and addmm/Gemm_1", origins) == ""  # names of no node of this model


def test_a_session_onnx_runtime_cannot_create_names_the_aten_node_and_converter(make_model):
    """ONNX Runtime's CPU provider has no int32 Gemm (bfloat16 runs now, emulated in float32: issue 24): its message
    names the node, the engine's says what it is."""
    model, specs = _int_gemm(make_model)
    with pytest.raises(EngineBuildError) as info:
        build_engine(model, specs[:2], specs[2:], backend="onnxruntime")
    message = str(info.value)
    assert "node with name 'addmm/Gemm'" in message and f"ONNX node 'addmm/Gemm' is {_GEMM}" in message


class _FloorDivide(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x // y


def test_a_run_time_engine_error_names_the_aten_node_and_converter():
    """ONNX Runtime fails an integer division by zero (eager raises too), naming the Div node of %div."""
    x, y = torch.tensor([5, 7]), torch.tensor([2, 3])
    compiled = trtcheck.compile(_FloorDivide(), (x, y), trtcheck.Settings(min_block_size=1), backend="onnxruntime")
    assert not compiled.partition.fallbacks
    with pytest.raises(EngineRuntimeError) as info:
        compiled(x, torch.tensor([0, 3]))
    message = str(info.value)
    assert "Name:'div/Div'" in message
    assert "ONNX node 'div/Div' is %div (aten.div.Tensor_mode), converter trtcheck.conversion.ops.elementwise._div_mode" in message
