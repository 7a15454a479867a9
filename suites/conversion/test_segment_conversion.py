"""segment_to_onnx: graph interface (names, dtypes), constants, outputs, and its errors."""

from __future__ import annotations

import onnx
import pytest
import torch

from suites.conversion.converter_harness import check, export_graph
from trtcheck.conversion import ConversionError, segment_to_onnx

A = torch.ops.aten


def test_inputs_keep_placeholder_names_and_outputs_are_numbered() -> None:
    gm = export_graph(lambda x, y: (A.add.Tensor(x, y), A.mul.Tensor(x, y)),
                      (torch.randn(2, 3), torch.randn(2, 3, dtype=torch.float16)))
    model = segment_to_onnx(gm)
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    assert [i.name for i in model.graph.input] == placeholders
    assert [o.name for o in model.graph.output] == ["output_0", "output_1"]
    x_type = model.graph.input[0].type.tensor_type
    assert x_type.elem_type == onnx.TensorProto.FLOAT
    assert [d.dim_value for d in x_type.shape.dim] == [2, 3]
    assert model.graph.input[1].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    assert model.opset_import[0].version == 17
    onnx.checker.check_model(model, full_check=True)


def test_outputs_may_be_inputs_or_repeated() -> None:
    result = check(lambda x, y: (x, A.relu.default(y), A.relu.default(y), x), (torch.randn(3), torch.randn(4)))
    # ep.module() deduplicates repeated outputs itself; the converter must cope either way: one ONNX
    # output per graph output, each its own name (check() already compared the values with eager).
    assert [o.name for o in result.model.graph.output] == ["output_0", "output_1", "output_2", "output_3"]


def test_same_node_twice_in_output_node() -> None:
    gm = export_graph(lambda x: A.relu.default(x), (torch.randn(3),))
    output = next(n for n in gm.graph.nodes if n.op == "output")
    relu = output.args[0][0]
    placeholder = next(n for n in gm.graph.nodes if n.op == "placeholder")
    output.args = ((relu, relu, placeholder),)
    model = segment_to_onnx(gm)
    assert [o.name for o in model.graph.output] == ["output_0", "output_1", "output_2"]


def test_multi_output_op_both_outputs() -> None:
    check(lambda x: A.max.dim(x, 1), (torch.randn(3, 5),))


def test_parameters_become_initializers() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 2),
    ).eval()
    model[1].running_mean.uniform_(-1, 1)
    model[1].running_var.uniform_(0.5, 2)
    result = check(model, (torch.randn(2, 3, 8, 8),), decompose=True)
    assert len(result.model.graph.input) == 1
    assert len(result.model.graph.initializer) >= 6
    assert any(n.op == "get_attr" for n in result.gm.graph.nodes)


def test_missing_converter_raises_naming_the_op() -> None:
    gm = export_graph(lambda x: A.relu.default(A.lgamma.default(x)), (torch.rand(3) + 1,))
    with pytest.raises(ConversionError, match="lgamma") as error:
        segment_to_onnx(gm)
    assert "no converter" in str(error.value)


def test_rejected_node_raises_naming_the_op() -> None:
    gm = export_graph(lambda x: A.gelu.default(x), (torch.ones(3, dtype=torch.int32),))
    with pytest.raises(ConversionError, match=r"converter for aten\.gelu\.default rejects node 'gelu'"):
        segment_to_onnx(gm)


def test_float64_segment_input_raises_naming_it() -> None:
    gm = export_graph(lambda x: A.add.Tensor(x, x), (torch.randn(3, dtype=torch.float64),))
    with pytest.raises(ConversionError, match="float64"):
        segment_to_onnx(gm)


def test_unsupported_node_kind_raises() -> None:
    gm = export_graph(lambda x: A.relu.default(x), (torch.randn(3),))
    relu = next(n for n in gm.graph.nodes if n.target == A.relu.default)
    relu.target = torch.relu  # not an ATen overload: no converter
    with pytest.raises(ConversionError, match="relu"):
        segment_to_onnx(gm)


def test_bfloat16_constants_convert() -> None:
    """ONNX Runtime's CPU provider lacks most bf16 kernels, so this only checks the model itself."""
    gm = export_graph(lambda x: A.mul.Tensor(A.add.Tensor(x, 1.5), A.full.default([3], 2.0, dtype=torch.bfloat16)),
                      (torch.randn(3, dtype=torch.bfloat16),))
    model = segment_to_onnx(gm)
    bf16 = [t for t in model.graph.initializer if t.data_type == onnx.TensorProto.BFLOAT16]
    scalars = [onnx.numpy_helper.to_array(t) for t in bf16]
    assert sorted(float(v) for v in scalars) == [1.5, 2.0]


def test_large_parameters_are_not_shared_but_named() -> None:
    layer = torch.nn.Linear(64, 64)
    result = check(torch.nn.Sequential(layer, torch.nn.ReLU(), layer).eval(), (torch.randn(2, 64),), decompose=True)
    # Export may keep an unused get_attr for the second alias of the shared layer: the model drops it.
    get_attrs = {n.name for n in result.gm.graph.nodes if n.op == "get_attr" and n.users}
    assert get_attrs, "no parameters in the graph: the subset check below would hold vacuously"
    assert get_attrs <= {t.name for t in result.model.graph.initializer}
