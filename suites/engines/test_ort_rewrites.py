"""ONNX Runtime's graph rewrites that change what a graph computes stay off in trtcheck's engines.

``ReluQuantRewrite`` drops a Relu feeding a QuantizeLinear with a float8 zero point (TensorRT 11's FP8), at ONNX
Runtime's default optimization level: an FP8 engine would then pass negatives through where TensorRT's Relu zeroes
them (``engines.onnxruntime.WRONG_REWRITES``).
"""

from __future__ import annotations

import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

from trtcheck.engines import TensorSpec, build_engine
from trtcheck.engines.onnxruntime import WRONG_REWRITES

X = torch.tensor([-3.0, -0.5, 0.5, 3.0])


def relu_into_quantizer(zero_point_type: int):
    """Relu -> QuantizeLinear(scale 0.5: each input on the grid) -> DequantizeLinear, zero point ``zero_point_type``: a quantized input
    after an activation, as ModelOpt's FP8 convolutions export it."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", "scale", "zero"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "relu_q", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [helper.make_tensor("scale", TensorProto.FLOAT, [], [0.5]), helper.make_tensor("zero", zero_point_type, [], [0])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize("zero_point_type", [TensorProto.FLOAT8E4M3FN, TensorProto.INT8], ids=["fp8", "int8"])
def test_a_relu_feeding_a_quantizer_zeroes_the_negatives_in_trtchecks_engine(zero_point_type):
    spec_in, spec_out = TensorSpec("x", (4,), torch.float32), TensorSpec("y", (4,), torch.float32)
    engine = build_engine(relu_into_quantizer(zero_point_type), [spec_in], [spec_out], backend="onnxruntime")
    assert engine(X)[0].tolist() == [0.0, 0.0, 0.5, 3.0]


def test_onnx_runtime_at_its_default_level_drops_that_relu_which_is_why_the_rewrite_is_off():
    """The defect itself, in a plain session: the reason ``WRONG_REWRITES`` exists. When an ONNX Runtime release no
    longer has it, this says so (and the guard may go)."""
    model = relu_into_quantizer(TensorProto.FLOAT8E4M3FN).SerializeToString()
    plain = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    (wrong,) = plain.run(None, {"x": X.numpy()})
    if wrong.tolist() == [0.0, 0.0, 0.5, 3.0]:
        pytest.skip(f"onnxruntime {ort.__version__} keeps the Relu: {WRONG_REWRITES} may no longer be needed")
    assert wrong.tolist() == [-3.0, -0.5, 0.5, 3.0]
    guarded = ort.InferenceSession(model, providers=["CPUExecutionProvider"], disabled_optimizers=WRONG_REWRITES)
    assert guarded.run(None, {"x": X.numpy()})[0].tolist() == [0.0, 0.0, 0.5, 3.0]
