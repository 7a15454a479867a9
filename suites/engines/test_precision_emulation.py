"""Reduced precision on ONNX Runtime: every float tensor between nodes rounded like fp16/bf16.

The compiler makes a segment at ``precision="fp16"``/``"bf16"`` its mixed-precision graph (the one TensorRT builds:
``compiler.mixed_precision.precision_graph``), and ``OnnxRuntimeEngine.build`` runs any graph holding
float16/bfloat16 values through ``emulation.emulate``, which computes them in float32 and rounds after every node, at
every input and weight. Each test here fails with the rewrite disabled (``needs_emulation`` patched to False: checked
by hand).
"""

from __future__ import annotations

import onnx
import pytest
import torch
from onnx import TensorProto, helper

import trtcheck
from trtcheck import Settings
from trtcheck.compiler.engine_build import build_segment_engine
from trtcheck.compiler.mixed_precision import precision_graph
from trtcheck.engines import TensorSpec
from trtcheck.engines.emulation import emulate, needs_emulation
from trtcheck.onnx_format.weights import weight_placeholder

F32, F16, BF16 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16
LOW = {"fp16": torch.float16, "bf16": torch.bfloat16}


def model_of(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "segment", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, list(shape))


def engine(model, inputs, outputs, precision="fp32", weights=None):
    return build_segment_engine(model, inputs, outputs, backend="onnxruntime", settings=Settings(precision=precision), weights=weights)


def scalar(name, value, elem):
    return helper.make_tensor(name, elem, [], [value])


def cpu_graph(model, precision, weights=None):
    """What ONNX Runtime runs at ``precision``: the precision graph, its low-precision values emulated."""
    return emulate(*precision_graph(model, Settings(precision=precision), weights))


# ---- whole models, through compile ----------------------------------------------------------------------


class Rescale(torch.nn.Module):
    def forward(self, x):
        return x * 4000 / 4000


def test_fp16_model_overflows_between_nodes_like_eager():
    """``x*4000/4000`` in float16: eager's product overflows to inf; ONNX Runtime's fp16 kernels alone keep it in float32."""
    x = (torch.randn(16, 64, generator=torch.Generator().manual_seed(0)) * 30).half()
    compiled = trtcheck.compile(Rescale(), (x,), Settings(min_block_size=1))
    expected, actual = Rescale()(x), compiled(x)
    assert int(expected.isinf().sum()) > 0
    assert actual.dtype == torch.float16
    assert torch.equal(actual.isinf(), expected.isinf())
    torch.testing.assert_close(actual, expected, rtol=1e-3, atol=1e-3)


def test_fp16_sum_overflows_like_eager():
    """``(x*0.5).sum(-1)/N``: the sum's float16 output is inf in eager, and now compiled too."""

    class Mean(torch.nn.Module):
        def forward(self, x):
            return (x * 0.5).sum(-1) / x.shape[-1]

    x = torch.full((2, 40000), 4.0, dtype=torch.float16)
    compiled = trtcheck.compile(Mean(), (x,), Settings(min_block_size=1))
    assert Mean()(x).isinf().all() and compiled(x).isinf().all()


def test_fp32_model_with_precision_fp16_overflows_like_half_eager():
    x = torch.randn(16, 64, generator=torch.Generator().manual_seed(1)) * 30
    compiled = trtcheck.compile(Rescale(), (x,), Settings(min_block_size=1, precision="fp16"))
    actual, half = compiled(x), Rescale()(x.half())
    assert actual.dtype == torch.float32  # the interface keeps the model's dtype
    assert int(half.isinf().sum()) > 0 and torch.equal(actual.isinf(), half.isinf())
    torch.testing.assert_close(actual, half.float(), rtol=1e-3, atol=1e-3)


def test_bf16_conv_relu_compiles_to_an_engine_and_matches_eager():
    """ONNX Runtime's CPU provider has no bf16 Conv or Relu: without the emulation the segment falls back to PyTorch."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()).to(torch.bfloat16).eval()
    x = torch.randn(2, 3, 12, 12).bfloat16()
    compiled = trtcheck.compile(model, (x,), Settings(min_block_size=1))
    assert compiled.partition.fallbacks == []
    assert compiled.partition.summary().startswith("1 segment: 1 TensorRT")
    with torch.no_grad():
        expected = model(x)
    actual = compiled(x)
    assert actual.dtype == torch.bfloat16
    torch.testing.assert_close(actual, expected, rtol=1.6e-2, atol=1e-2)


# ---- every rewrite rule, on small engines -------------------------------------------------------------------


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_float_outputs_are_rounded_after_every_node(precision):
    """A float32 model under fp16/bf16: each node's output rounded (1 + tiny rounds to 1), the output float32."""
    x, y, z = (TensorSpec(n, (4,), torch.float32) for n in "xyz")
    model = model_of([helper.make_node("Add", ["x", "y"], ["z"])], [vi("x", F32, (4,)), vi("y", F32, (4,))], [vi("z", F32, (4,))])
    tiny = 2.0**-12 if precision == "fp16" else 2.0**-9  # representable, but 1 + tiny is not
    a, b = torch.ones(4), torch.full((4,), tiny)
    (out,) = engine(model, [x, y], [z], precision)(a, b)
    assert out.dtype == torch.float32
    low = LOW[precision]
    torch.testing.assert_close(out, (a.to(low) + b.to(low)).float(), rtol=0, atol=0)
    assert torch.equal(out, torch.ones(4))


def test_overflow_between_nodes_is_inf():
    x, z = TensorSpec("x", (3,), torch.float32), TensorSpec("z", (3,), torch.float32)
    nodes = [helper.make_node("Mul", ["x", "k"], ["p"]), helper.make_node("Div", ["p", "k"], ["z"])]
    model = model_of(nodes, [vi("x", F32, (3,))], [vi("z", F32, (3,))], [scalar("k", 4000.0, F32)])
    a = torch.tensor([1.0, 10.0, 100.0])
    (out,) = engine(model, [x], [z], "fp16")(a)
    assert out.tolist() == [1.0, 10.0, float("inf")]  # 100 * 4000 > 65504


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_graph_inputs_are_rounded(precision):
    """Sub(x, 1) with x = 1 + tiny: 0 when x is rounded first, tiny when it is not."""
    x, z = TensorSpec("x", (2,), torch.float32), TensorSpec("z", (2,), torch.float32)
    model = model_of([helper.make_node("Sub", ["x", "one"], ["z"])], [vi("x", F32, (2,))], [vi("z", F32, (2,))], [scalar("one", 1.0, F32)])
    tiny = 2.0**-12 if precision == "fp16" else 2.0**-9
    (out,) = engine(model, [x], [z], precision)(torch.full((2,), 1 + tiny))
    assert out.tolist() == [0.0, 0.0]


@pytest.mark.parametrize("held", [False, True], ids=["initializer", "weight_by_reference"])
def test_weights_are_rounded(held):
    """Sub(w, x) with w = 1 + 2**-12: rounded to 1 in fp16. A weight held by reference is rounded in ``weights``;
    the caller's tensor and the placeholder's (absent) data are left alone."""
    x, z = TensorSpec("x", (2,), torch.float32), TensorSpec("z", (2,), torch.float32)
    w = torch.full((2,), 1 + 2.0**-12)
    init = weight_placeholder("w", w) if held else helper.make_tensor("w", F32, [2], w.tolist())
    graph = helper.make_graph([helper.make_node("Sub", ["w", "x"], ["z"])], "segment", [vi("x", F32, (2,))], [vi("z", F32, (2,))], [init])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])  # unchecked: a placeholder has no data
    weights = {"w": w} if held else None
    (out,) = engine(model, [x], [z], "fp16", weights=weights)(torch.ones(2))
    assert out.tolist() == [0.0, 0.0]
    if held:
        rewritten, new_weights = cpu_graph(model, "fp16", weights)
        assert torch.equal(w, torch.full((2,), 1 + 2.0**-12))  # the caller's tensor is not changed
        assert new_weights["w"].dtype == torch.float32 and new_weights["w"].tolist() == [1.0, 1.0]
        (placeholder,) = rewritten.graph.initializer
        assert placeholder.data_location == TensorProto.EXTERNAL and not placeholder.raw_data


def test_native_fp16_cast_to_low_is_retargeted():
    """x (float32) -> Cast(to=fp16) -> Mul(y, y) -> Div(., 300): eager gives inf (300**2 > 65504), and so must
    the engine, which computes the Mul in float32 and rounds its output to float16."""
    x, z = TensorSpec("x", (2,), torch.float32), TensorSpec("z", (2,), torch.float16)
    nodes = [
        helper.make_node("Cast", ["x"], ["y"], to=F16),
        helper.make_node("Mul", ["y", "y"], ["s"]),
        helper.make_node("Div", ["s", "k"], ["z"]),
    ]
    model = model_of(nodes, [vi("x", F32, (2,))], [vi("z", F16, (2,))], [scalar("k", 300.0, F16)])
    a = torch.tensor([3.0, 300.0])
    (out,) = engine(model, [x], [z])(a)
    y = a.half()
    assert out.dtype == torch.float16 and torch.equal(out, y * y / 300)
    assert out.isinf().tolist() == [False, True]
    rewritten, _ = emulate(model)
    (cast,) = [n for n in rewritten.graph.node if list(n.output) == ["y__fp32"]]  # the model's Cast, now to float32
    assert cast.op_type == "Cast" and [a.i for a in cast.attribute] == [F32]


def test_constant_of_shape_value_is_widened():
    """ConstantOfShape(value=fp16 4000): its value retargeted to float32, the product overflows like eager."""
    x, z = TensorSpec("x", (3,), torch.float16), TensorSpec("z", (3,), torch.float16)
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("ConstantOfShape", ["shape"], ["k"], value=helper.make_tensor("v", F16, [1], [4000.0])),
        helper.make_node("Mul", ["x", "k"], ["p"]),
        helper.make_node("Div", ["p", "k"], ["z"]),
    ]
    model = model_of(nodes, [vi("x", F16, (3,))], [vi("z", F16, (3,))])
    a = torch.tensor([1.0, 10.0, 100.0], dtype=torch.float16)
    (out,) = engine(model, [x], [z])(a)
    assert torch.equal(out, a * 4000 / 4000) and out.isinf().tolist() == [False, False, True]
    rewritten, _ = emulate(model)
    constant = next(n for n in rewritten.graph.node if n.op_type == "ConstantOfShape")
    assert constant.attribute[0].t.data_type == F32


def test_dtype_attribute_is_widened():
    """EyeLike(dtype=bf16) + x in bfloat16: ONNX Runtime has no bf16 kernel for either; retargeted, it runs."""
    x, z = TensorSpec("x", (3, 3), torch.bfloat16), TensorSpec("z", (3, 3), torch.bfloat16)
    nodes = [helper.make_node("EyeLike", ["x"], ["e"], dtype=BF16), helper.make_node("Add", ["x", "e"], ["z"])]
    model = model_of(nodes, [vi("x", BF16, (3, 3))], [vi("z", BF16, (3, 3))])
    a = torch.randn(3, 3).bfloat16()
    (out,) = engine(model, [x], [z])(a)
    assert out.dtype == torch.bfloat16 and torch.equal(out, a + torch.eye(3, dtype=torch.bfloat16))


def test_bf16_model_runs_in_float32_and_keeps_its_interface():
    """Relu and MatMul have no bf16 kernel on ONNX Runtime's CPU provider; the engine computes them in float32,
    rounds to bf16 after each, and takes and gives bfloat16."""
    a, b, z = TensorSpec("a", (4, 8), torch.bfloat16), TensorSpec("b", (8, 3), torch.bfloat16), TensorSpec("z", (4, 3), torch.bfloat16)
    nodes = [helper.make_node("MatMul", ["a", "b"], ["m"]), helper.make_node("Relu", ["m"], ["z"])]
    model = model_of(nodes, [vi("a", BF16, (4, 8)), vi("b", BF16, (8, 3))], [vi("z", BF16, (4, 3))])
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(4, 8, generator=gen).bfloat16(), torch.randn(8, 3, generator=gen).bfloat16()
    (out,) = engine(model, [a, b], [z])(x, y)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, torch.relu((x.float() @ y.float()).bfloat16()), rtol=0, atol=0)
    rewritten, _ = emulate(model)
    assert [v.type.tensor_type.elem_type for v in [*rewritten.graph.input, *rewritten.graph.output]] == [BF16, BF16, BF16]
    inferred = onnx.shape_inference.infer_shapes(rewritten).graph
    types = {v.name: v.type.tensor_type.elem_type for v in [*inferred.value_info, *inferred.input, *inferred.output]}
    computing = [n for n in rewritten.graph.node if n.op_type != "Cast"]
    assert all(types[name] == F32 for n in computing for name in [*n.input, *n.output])


def test_names_are_deterministic_and_unique():
    """Rewritten twice, the model is byte-identical; new names never collide with the model's own."""
    nodes = [helper.make_node("Mul", ["x", "x"], ["y__fp16"], name="y/RoundCast"), helper.make_node("Add", ["y__fp16", "x"], ["y"])]
    model = model_of(nodes, [vi("x", F32, (2,))], [vi("y", F32, (2,))])
    first, second = cpu_graph(model, "fp16")[0], cpu_graph(model, "fp16")[0]
    assert first.SerializeToString() == second.SerializeToString()
    names = [n.name for n in first.graph.node]
    outputs = [o for n in first.graph.node for o in n.output]
    assert len(set(names)) == len(names) and len(set(outputs)) == len(outputs)
    onnx.checker.check_model(first, full_check=True)
    x, y = TensorSpec("x", (2,), torch.float32), TensorSpec("y", (2,), torch.float32)
    (out,) = engine(model, [x], [y], "fp16")(torch.tensor([300.0, 1.0]))
    assert out.tolist() == [float("inf"), 2.0]  # 300*300 > 65504 once rounded


def test_fp32_model_at_fp32_is_left_alone():
    model = model_of([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F32, (2,))], [vi("y", F32, (2,))])
    assert not needs_emulation(model)
    assert all(needs_emulation(precision_graph(model, Settings(precision=p))[0]) for p in ("fp16", "bf16"))
    half = model_of([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F16, (2,))], [vi("y", F16, (2,))])
    assert needs_emulation(half)
