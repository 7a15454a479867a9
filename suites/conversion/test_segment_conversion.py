"""segment_to_onnx: graph interface (names, dtypes), constants, outputs, and its errors."""

from __future__ import annotations

import onnx
import pytest
import torch

from suites.conversion.converter_harness import bools, check, export_graph, randint, randn
from trtcheck.conversion import OPSET, ConversionError, segment_to_onnx

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
    assert model.opset_import[0].version == OPSET == 19  # float8 Q/DQ
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


# --- what the engine would only fold: permuted weights, no-op views, fills that broadcast (issue 25) ----------
class _PermutedWeight(torch.nn.Module):
    """``x @ weight.T`` as ATen writes a linear layer on a 3-D input: bmm with the permuted weight expanded."""

    def __init__(self, perm: list[int], shape: tuple[int, ...]) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(*shape, generator=torch.Generator().manual_seed(0)))
        self.perm = perm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = A.permute.default(self.weight, self.perm)
        return A.bmm.default(x, A.expand.default(w, [x.shape[0], *w.shape[-2:]]) if w.dim() == 2 else w)


@pytest.mark.parametrize(("perm", "shape"), [([1, 0], (48, 40)), ([0, 2, 1], (2, 48, 40))], ids=["2d", "3d"])
def test_a_permuted_weight_is_a_weight_of_its_own_not_a_transpose(perm, shape) -> None:
    """ONNX Runtime folds a Transpose of a weight into a second copy while it builds the session; the converted
    model holds the permuted weight instead, a view of the parameter (no copy while converting), and computes the
    same. Two conversions stay the same model (``SegmentOnnx.same_as`` compares the views' memory)."""
    from trtcheck.compiler.convert import SegmentOnnx
    from trtcheck.conversion.interpreter import held_weights

    module = _PermutedWeight(perm, shape)
    result = check(module, (torch.randn(2, 7, 40),), targets=[A.permute.default])
    assert "Transpose" not in {node.op_type for node in result.model.graph.node}
    weights = [t for t in result.model.graph.initializer if list(t.dims) == [*shape[:-2], 40, 48]]
    assert len(weights) == 1, [list(t.dims) for t in result.model.graph.initializer]
    with held_weights() as held:
        first = SegmentOnnx(segment_to_onnx(result.gm), dict(held))
    (view,) = first.weights.values()
    parameter = next(t for name, t in result.gm.named_parameters())
    assert view.data_ptr() == parameter.data_ptr() and not view.is_contiguous()  # the parameter's memory, permuted
    with held_weights() as held:
        second = SegmentOnnx(segment_to_onnx(result.gm), dict(held))
    assert first.same_as(second)
    torch.testing.assert_close(torch.from_numpy(onnx.numpy_helper.to_array(first.full().graph.initializer[0]).copy()),
                               parameter.detach().permute(perm))


def test_a_permuted_input_is_still_a_transpose() -> None:
    result = check(lambda x: A.permute.default(x, [1, 0]), (torch.randn(48, 40),))
    assert [node.op_type for node in result.model.graph.node] == ["Transpose", "Identity"]


def test_a_view_or_expand_to_its_own_shape_emits_no_node() -> None:
    """A no-op node would only cost the engine's optimizer time (and keep it from fusing across it)."""
    result = check(lambda x: A.relu.default(A.expand.default(A.view.default(x, [2, 3]), [2, 3])), (torch.randn(2, 3),))
    assert [node.op_type for node in result.model.graph.node] == ["Relu", "Identity"]
    result = check(lambda x: (A.view.default(x, [2, 3]), A.view.default(x, [3, 2]), A.expand.default(x, [4, 2, 3])),
                   (torch.randn(2, 3),))
    assert sorted(node.op_type for node in result.model.graph.node) == ["Expand", "Identity", "Identity", "Identity", "Reshape"]


@pytest.mark.parametrize(("fn", "args", "expands"), [
    (lambda c, x: A.where.self(c, A.full_like.default(x, 0.5), x), (bools(3, 4), randn(3, 4)), 0),
    (lambda c, x: A.where.self(c, x, A.zeros_like.default(x)), (bools(3, 4), randn(3, 4)), 0),
    (lambda c, x: A.where.self(c, A.full.default([3, 4], 1.5), A.full.default([3, 4], -2.0)), (bools(3, 4), randn(3, 4)), 0),
    # the fill gives the output its shape: it stays full-size
    (lambda c, x: A.where.self(c, A.full.default([3, 4], 2.0), x), (bools(3, 1), randn(3, 1)), 1),
    (lambda c, x: A.where.self(c, x, A.full.default([2, 3, 4], 2.0)), (bools(3, 4), randn(3, 4)), 1),
    # bool and integer fills: the fill's own dtype, then the output's
    (lambda c, b: A.where.self(c, A.ones_like.default(b), b), (bools(3, 4), bools(3, 4, seed=1)), 0),
    (lambda c, i, x: A.where.self(c, A.full_like.default(i, 3), x), (bools(3, 4), randint(3, 4), randn(3, 4)), 0),
], ids=["full_like-self", "zeros_like-other", "both", "shape-from-fill", "rank-from-fill", "bool", "int-into-float"])
def test_where_takes_a_fill_as_its_scalar_where_the_other_operands_give_the_shape(fn, args, expands) -> None:
    """ONNX Runtime folds Expand(scalar) into a full-size constant (bert_base's mask: 1.5 MiB a session)."""
    result = check(fn, args, targets=[A.where.self])
    assert [node.op_type for node in result.model.graph.node].count("Expand") == expands
