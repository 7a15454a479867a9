"""TF32: ``Settings(tf32=True)`` as TensorRT computes it and as the judge's yardstick must.

TensorRT sets ``BuilderFlag.TF32`` by default, and Torch-TensorRT leaves it set (``disable_tf32=False``): a float32
engine most users deploy multiplies 10-bit mantissas (8-bit exponent, round to nearest even) and accumulates in
float32. ONNX Runtime emulates it (``emulation.emulate_tf32``: the factors of every float32 MatMul, Gemm, Conv and
ConvTranspose rounded), eager under ``verification.reference.tf32_rounding`` is the same rounding for the judge.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import trtcheck
from trtcheck import Settings
from trtcheck.engines import EngineOptions, TensorSpec, build_engine
from trtcheck.engines.emulation import emulate_tf32
from trtcheck.engines.precision import MANTISSA_BITS, round_tf32, unit_roundoff
from trtcheck.onnx_format.weights import weight_placeholder
from trtcheck.verification.judge import judged_precision
from trtcheck.verification.reference import tf32_rounding

F32 = TensorProto.FLOAT


def reference_rne(values: np.ndarray) -> np.ndarray:
    """Round float32 ``values`` to 10 explicit mantissa bits, ties to even, by integer arithmetic in numpy (not the
    code under test's torch arithmetic): inf and NaN are left as they are."""
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0xFFF + ((bits >> 13) & 1)) & ~np.uint64(0x1FFF)
    special = (bits & 0x7F800000) == 0x7F800000
    return np.where(special, bits, rounded).astype(np.uint32).view(np.float32)


def samples() -> np.ndarray:
    """Random bit patterns, each also as an exact tie and just below one, plus the edges: zeros, subnormals, the largest
    finite values (which round to inf), infinities, tiny and huge magnitudes (the emulation's rescaled ranges)."""
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32)
    ties = (bits & ~np.uint32(0x1FFF)) | np.uint32(0x1000)
    below = (bits & ~np.uint32(0x1FFF)) | np.uint32(0x0FFF)
    edges = np.array([0.0, -0.0, 1.0, 1 + 2**-11, 1 + 3 * 2**-11, 3.4e38, -3.4e38, np.inf, -np.inf, 1e-40, 2.0**-100, 2.0**101,
                      65504.0, 1e30, 1e-30], dtype=np.float32)
    values = np.concatenate([bits.view(np.float32), ties.view(np.float32), below.view(np.float32), edges])
    return values[~np.isnan(values)]


def test_round_tf32_is_round_to_nearest_even_on_10_mantissa_bits():
    values = samples()
    rounded = round_tf32(torch.from_numpy(values)).numpy()
    np.testing.assert_array_equal(rounded.view(np.uint32), reference_rne(values).view(np.uint32))
    assert round_tf32(torch.tensor([1 + 2**-11, 1 + 3 * 2**-11, 1 + 2**-10])).tolist() == [1.0, 1 + 2**-9, 1 + 2**-10]
    assert torch.isnan(round_tf32(torch.tensor([float("nan")]))).all()
    half = torch.tensor([1.5], dtype=torch.float16)
    assert round_tf32(half) is half  # only float32 is rounded


def identity_matmul(n: int) -> onnx.ModelProto:
    """y = x @ [[1]]: the product of x's TF32 rounding and an exact 1, so y is the rounding itself."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "one"], ["y"], name="mm/MatMul")], "segment",
        [helper.make_tensor_value_info("x", F32, [n, 1])], [helper.make_tensor_value_info("y", F32, [n, 1])],
        [numpy_helper.from_array(np.ones((1, 1), dtype=np.float32), "one")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_onnx_rounding_of_a_computed_value_is_exact():
    """Veltkamp's split in float32 arithmetic on ONNX Runtime: bit-identical to round-to-nearest-even, ties, the
    rescaled tiny and huge ranges and the infinities included."""
    values = samples()
    values = values[np.isfinite(values) | np.isinf(values)]
    values = values[np.abs(values) >= 2.0**-126]  # subnormals: rounded twice by the rescaling (documented)
    values = values[np.abs(values) < 3.4e38]  # the largest floats round to inf: x @ 1 is fine, the split's 8193x is rescaled
    model, _ = emulate_tf32(identity_matmul(len(values)))
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"x": values.reshape(-1, 1)})
    np.testing.assert_array_equal(y.reshape(-1).view(np.uint32), reference_rne(values).view(np.uint32))


def test_weights_are_rounded_once_and_other_readers_see_values_unrounded():
    """A weight only products read is rounded in place (an initializer, or a tensor held by reference); x, read by the
    MatMul and by an Add, is rounded for the MatMul only; Gemm's bias is not a factor."""
    w = torch.full((2, 2), 1 + 2**-12)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm/MatMul"), helper.make_node("Add", ["m", "x"], ["y"], name="add/Add")]
    for held in (False, True):
        init = weight_placeholder("w", w) if held else numpy_helper.from_array(w.numpy(), "w")
        graph = helper.make_graph(nodes, "segment", [helper.make_tensor_value_info("x", F32, [2, 2])],
                                  [helper.make_tensor_value_info("y", F32, [2, 2])], [init])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        weights = {"w": w} if held else None
        rounded, new_weights = emulate_tf32(model, weights)
        if held:
            assert torch.equal(new_weights["w"], torch.ones(2, 2)) and torch.equal(w, torch.full((2, 2), 1 + 2**-12))
        else:
            (wi,) = [i for i in rounded.graph.initializer if i.name == "w"]
            assert numpy_helper.to_array(wi).tolist() == [[1.0, 1.0], [1.0, 1.0]]
        (mm,) = [n for n in rounded.graph.node if n.name == "mm/MatMul"]
        (add,) = [n for n in rounded.graph.node if n.name == "add/Add"]
        assert mm.input[0] == "x__tf32" and mm.input[1] == "w" and list(add.input) == ["m", "x"]
        x, y = TensorSpec("x", (2, 2), torch.float32), TensorSpec("y", (2, 2), torch.float32)
        engine = build_engine(model, [x], [y], backend="onnxruntime", options=EngineOptions(tf32=True), weights=weights)
        a = torch.full((2, 2), 1 + 2**-11 + 2**-13)  # rounds up to 1 + 2**-10 in TF32
        expected = round_tf32(a) @ torch.ones(2, 2) + a
        torch.testing.assert_close(engine(a)[0], expected, rtol=0, atol=0)


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.linear = torch.nn.Linear(8, 5)

    def forward(self, x):
        return self.linear(torch.relu(self.conv(x)).mean((2, 3)))


def test_compiled_tf32_matches_eager_under_tf32_rounding_not_float32():
    """The engine (ONNX Runtime, emulated) is as far from eager float32 as TF32 puts it, and as close to eager under
    ``tf32_rounding`` as two float32 summation orders."""
    torch.manual_seed(0)
    model, x = Net().eval(), torch.randn(2, 3, 10, 10)
    compiled = trtcheck.compile(model, (x,), Settings(min_block_size=1, tf32=True), backend="onnxruntime")
    assert compiled.partition.fallbacks == []
    with torch.no_grad():
        exact, actual = model(x), compiled(x)
        with tf32_rounding():
            yardstick = model(x)
    plain = trtcheck.compile(model, (x,), Settings(min_block_size=1), backend="onnxruntime")
    float32_noise = float((plain(x) - exact).abs().max())  # two float32 summation orders
    assert float((actual - exact).abs().max()) > 20 * float32_noise  # TF32 rounds factors to 2**-11
    torch.testing.assert_close(actual, yardstick, rtol=1e-5, atol=max(2 * float32_noise, 1e-7))


def test_tf32_rounding_rounds_eager_matmul_and_convolution_factors():
    a, b = torch.randn(4, 6), torch.randn(6, 3)
    bias = torch.randn(3)
    with tf32_rounding():
        mm, addmm = a @ b, torch.addmm(bias, a, b)
        linear = torch.nn.functional.linear(a, b.t(), bias)
        conv = torch.nn.functional.conv2d(a.reshape(1, 1, 4, 6), b[:3].reshape(1, 1, 3, 3))
    assert torch.equal(mm, round_tf32(a) @ round_tf32(b))
    assert torch.equal(addmm, torch.addmm(bias, round_tf32(a), round_tf32(b)))  # the bias is not rounded
    torch.testing.assert_close(linear, torch.nn.functional.linear(round_tf32(a), round_tf32(b.t()), bias), rtol=0, atol=0)
    assert torch.equal(conv, torch.nn.functional.conv2d(round_tf32(a).reshape(1, 1, 4, 6), round_tf32(b[:3]).reshape(1, 1, 3, 3)))
    assert not torch.equal(a @ b, mm)


@pytest.mark.parametrize(("settings", "judged"), [
    (Settings(), "fp32"), (Settings(tf32=True), "tf32"), (Settings(precision="fp16"), "fp16"),
    (Settings(precision="bf16", tf32=True), "bf16"),
])
def test_what_the_judge_must_judge_by(settings, judged):
    assert judged_precision(settings) == judged


def test_unit_roundoffs():
    assert unit_roundoff("tf32") == unit_roundoff("fp16") == 2.0**-11 and MANTISSA_BITS["tf32"] == 10
    assert unit_roundoff("fp32") == 2.0**-24 and unit_roundoff("bf16") == 2.0**-8
    with pytest.raises(ValueError, match="precision must be one of"):
        unit_roundoff("fp8")


def test_tf32_rounding_reaches_fused_attention():
    """An eval TransformerEncoderLayer takes PyTorch's fused fast path, which hides its matmuls from a dispatch mode: the
    yardstick then stayed plain float32 (transformer_encoder_dynamic_seq: eager 685x closer to float64 than the TF32
    engine). Inside ``tf32_rounding`` the fast path and the fused attention kernels are off, and restored after."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, batch_first=True).eval()
    x = torch.randn(2, 5, 16)
    before = torch.backends.mha.get_fastpath_enabled()
    with torch.no_grad():
        plain = layer(x)
        with tf32_rounding():
            assert not torch.backends.mha.get_fastpath_enabled()
            rounded = layer(x)
        with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.MATH]):
            torch.backends.mha.set_fastpath_enabled(False)
            try:
                unrounded_math = layer(x)
            finally:
                torch.backends.mha.set_fastpath_enabled(before)
    assert torch.backends.mha.get_fastpath_enabled() == before
    float32_noise = float((unrounded_math - plain).abs().max())
    assert float((rounded - plain).abs().max()) > 20 * max(float32_noise, 1e-7)
