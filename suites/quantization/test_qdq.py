"""trtcheck's quantizer op computes what TensorRT's Q/DQ layers compute, and its converter builds them (no ModelOpt
needed: these models call ``trtcheck.quantize_op`` themselves, as a ModelOpt model does once lowered)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

import trtcheck
from trtcheck import qdq
from trtcheck.partitioning.reasons import Target

ONE = trtcheck.Settings(min_block_size=1)
ORT = "onnxruntime"


def ort_qdq(x: torch.Tensor, scale: torch.Tensor, zero_type: int, axis: int | None = None) -> torch.Tensor:
    """ONNX Runtime's QuantizeLinear -> DequantizeLinear of ``x`` (float32): the arithmetic TensorRT's parser builds."""
    per_axis = scale.dim() == 1
    zero = helper.make_tensor("zero", zero_type, list(scale.shape), [0] * scale.numel())
    attrs = {"axis": axis} if per_axis else {}
    graph = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"], **attrs),
         helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"], **attrs)],
        "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor("scale", TensorProto.FLOAT, list(scale.shape), scale.tolist() if per_axis else [float(scale)]), zero],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return torch.from_numpy(session.run(None, {"x": x.numpy()})[0])


def awkward_values(amax: float) -> torch.Tensor:
    """Random values, values past amax (saturation), and exact ties of INT8's rounding (k + 0.5 steps)."""
    torch.manual_seed(0)
    step = amax / 127
    ties = (torch.arange(-20, 20, dtype=torch.float32) + 0.5) * step
    return torch.cat([torch.randn(4000) * amax / 2, torch.tensor([amax * 3, -amax * 3, 0.0, -0.0]), ties])


@pytest.mark.parametrize("fmt, zero_type", [(qdq.INT8, TensorProto.INT8), (qdq.FP8, TensorProto.FLOAT8E4M3FN)], ids=["int8", "fp8"])
def test_the_op_is_bit_exact_with_onnx_runtimes_q_dq_per_tensor(fmt, zero_type):
    amax = torch.tensor(2.7)
    x = awkward_values(2.7)
    ours = qdq.quantize_op(x, amax, fmt.num_bits, fmt.exponent_bits, False, False)
    theirs = ort_qdq(x, qdq.scale_of(amax, fmt, torch.float32), zero_type)
    assert torch.equal(ours, theirs)


def test_int8_per_channel_on_axis_0_is_bit_exact_with_onnx_runtime():
    torch.manual_seed(1)
    w = torch.randn(8, 4, 3, 3)
    amax = w.abs().amax(dim=(1, 2, 3), keepdim=True) * 0.8  # some values saturate
    ours = qdq.quantize_op(w, amax, 8, 0, False, False)
    theirs = ort_qdq(w, qdq.scale_of(amax, qdq.INT8, torch.float32).reshape(-1), TensorProto.INT8, axis=0)
    assert torch.equal(ours, theirs)


def test_in_float64_the_codes_are_decided_in_float64_and_agree_with_float32_but_at_ties():
    x = awkward_values(2.7)[:4000]
    amax = torch.tensor(2.7)
    wide = qdq.quantize_op(x.double(), amax, 8, 0, False, False)
    assert wide.dtype == torch.float64
    steps = qdq.steps_apart(qdq.quantize_op(x, amax, 8, 0, False, False), wide, amax, qdq.INT8)
    assert qdq.agree(steps) and float(steps.max()) <= 1


def test_steps_apart_tells_a_flipped_tie_from_a_scale_two_percent_off():
    torch.manual_seed(2)
    x, amax = torch.randn(2000), torch.tensor(3.0)
    for fmt in (qdq.INT8, qdq.FP8):
        right = qdq.quantize_op(x, amax, fmt.num_bits, fmt.exponent_bits, False, False)
        flipped = qdq.flip_nearest_tie(x, right, amax, fmt)
        one = qdq.steps_apart(flipped, right, amax, fmt)
        assert int((one > 0).sum()) == 1 and float(one.max()) == pytest.approx(1.0), fmt  # one value, one step
        assert qdq.agree(one)
        off = qdq.steps_apart(right * 1.02, right, amax, fmt)
        assert not qdq.agree(off), fmt


def test_a_tiny_amax_quantizes_to_zeros_and_an_unknown_format_is_refused():
    x = torch.randn(10)
    assert torch.equal(qdq.quantize_op(x, torch.tensor(0.0), 8, 0, False, False), torch.zeros(10))
    with pytest.raises(NotImplementedError, match="neither INT8"):
        qdq.quantize_op(x, torch.tensor(1.0), 4, 0, False, False)


class Quantized(nn.Module):
    """Two Linear layers with their input and weight quantized as ModelOpt's lowered graphs hold them."""

    def __init__(self, fmt: qdq.QuantFormat = qdq.INT8, weight_amax: str = "channel", unsigned: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 8)
        self.fmt, self.unsigned = fmt, unsigned
        self.register_buffer("a1", torch.tensor(3.0))
        self.register_buffer("a2", torch.tensor(2.0))
        amax = {"channel": lambda w: w.abs().amax(dim=1, keepdim=True), "tensor": lambda w: w.abs().max(),
                "axis1": lambda w: w.abs().amax(dim=0, keepdim=True)}[weight_amax]
        self.register_buffer("w1", amax(self.fc1.weight.detach()))
        self.register_buffer("w2", amax(self.fc2.weight.detach()))

    def q(self, x, amax):
        return torch.ops.trtcheck.quantize_op(x, amax, self.fmt.num_bits, self.fmt.exponent_bits, self.unsigned, False)

    def forward(self, x):
        h = torch.relu(nn.functional.linear(self.q(x, self.a1), self.q(self.fc1.weight, self.w1), self.fc1.bias))
        return nn.functional.linear(self.q(h, self.a2), self.q(self.fc2.weight, self.w2), self.fc2.bias)


def quantizers_in_pytorch(partition) -> list[str]:
    return [node.name for segment in partition.segments if segment.target is Target.TORCH for node in segment.nodes
            if node.target is torch.ops.trtcheck.quantize_op.default]


@pytest.mark.parametrize("fmt, weights", [(qdq.INT8, "channel"), (qdq.INT8, "tensor"), (qdq.FP8, "tensor")],
                         ids=["int8-per-channel", "int8-per-tensor", "fp8"])
def test_every_quantizer_converts_and_verify_passes_with_each_checked_alone(fmt, weights):
    model = Quantized(fmt, weights).eval()
    inputs = (torch.randn(4, 16),)
    report = trtcheck.verify(model, inputs, ONE, backend=ORT)
    assert quantizers_in_pytorch(report.partition) == []
    assert len(report.quantizers) == 4 and all(check.passed and check.mismatched == 0 for check in report.quantizers)
    assert "4 quantizers built alone" in str(report)


@pytest.mark.parametrize("fmt, weights, unsigned, reason", [
    (qdq.FP8, "channel", False, "FP8 per channel"),
    (qdq.INT8, "axis1", False, "per channel on axis 0 only"),
    (qdq.INT8, "tensor", True, "unsigned=True"),
], ids=["fp8-per-channel", "int8-axis-1", "unsigned"])
def test_what_torch_tensorrt_cannot_build_runs_in_pytorch_with_the_reason(fmt, weights, unsigned, reason):
    model = Quantized(fmt, weights, unsigned).eval()
    partition = trtcheck.partition(model, (torch.randn(4, 16),), ONE)
    refused = quantizers_in_pytorch(partition)
    assert refused, partition.explain()
    assert reason in partition.explain()
    trtcheck.verify(model, (torch.randn(4, 16),), ONE, backend=ORT)  # in PyTorch, the arithmetic is the same op's


def test_the_onnx_is_q_dq_with_the_formats_zero_point():
    from trtcheck.conversion import segment_to_onnx
    from trtcheck.lowering import lower

    model_amax = Quantized(qdq.FP8, "tensor").eval()
    gm = lower(model_amax, (torch.randn(4, 16),))
    model = segment_to_onnx(gm)
    ops = [node.op_type for node in model.graph.node]
    assert ops.count("QuantizeLinear") == ops.count("DequantizeLinear") == 4
    initializers = {init.name: init for init in model.graph.initializer}
    quantizers = [node for node in model.graph.node if node.op_type == "QuantizeLinear"]
    assert {initializers[node.input[2]].data_type for node in quantizers} == {TensorProto.FLOAT8E4M3FN}
    scales = sorted(float(numpy_helper.to_array(initializers[node.input[1]])) for node in quantizers)
    weight_scales = [float(amax) / 448 for amax in (model_amax.w1, model_amax.w2)]
    assert np.allclose(scales, sorted([3.0 / 448, 2.0 / 448, *weight_scales]), rtol=1e-7)  # amax / 448, in float32


def test_unsigned_int8_divides_by_255_as_modelopts_own_arithmetic_does():
    """Only ModelOpt has unsigned INT8 (the converter refuses it: TensorRT's INT8 is signed), so in PyTorch the op must
    compute ModelOpt's ``round(x * 255 / amax) * amax / 255``."""
    out = qdq.quantize_op(torch.tensor([0.5, 1.5, -0.3]), torch.tensor(1.0), 8, 0, True, False)
    assert torch.allclose(out, torch.tensor([128 / 255, 1.0, 0.0]))


def test_a_scale_float16_cannot_hold_quantizes_to_zeros_not_to_inf():
    x = torch.tensor([1e-6, -2e-6, 0.0], dtype=torch.float16)
    out = qdq.quantize_op(x, torch.tensor(1e-6), 8, 0, False, False)  # amax / 127 is below float16's smallest value
    assert torch.equal(out, torch.zeros(3, dtype=torch.float16))


def test_one_tie_is_rounding_even_in_a_tensor_of_few_values():
    assert qdq.within_ties(1.0, 1, 128) and not qdq.within_ties(1.0, 2, 128) and not qdq.within_ties(1.3, 1, 128)


def test_a_float_only_piece_of_a_quantized_model_is_judged_by_float32s_rule_on_itself():
    """A segment or sub-engine without a quantizer was once judged against the whole quantized model, which does not
    take its inputs: no reference, and float32 rounding beyond the tolerances failed it."""
    from trtcheck.lowering import lower
    from trtcheck.verification.judge import Judge

    judge = Judge().for_graph(lower(Quantized().eval(), (torch.randn(4, 16),)))
    assert judge.quantized
    piece = torch.fx.symbolic_trace(lambda x: ((x + 1e4) - 1e4,))  # a tuple, as a segment returns; eager cancels
    x = torch.randn(64)
    (expected,) = piece(x)
    actual = x.clone()  # float64's answer: far beyond the tolerances from eager's, and nearer float64 than eager
    comparison, unjudged = judge.judge_engine(piece, [x], [expected], [actual])
    assert unjudged == "" and comparison.passed, str(comparison)


def test_a_float64_model_run_again_starts_from_the_buffers_its_cast_left():
    from trtcheck.verification.reference import Float64Model

    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", torch.zeros(()))

        def forward(self, x):
            self.count.add_(1)
            return x * self.count

    wide = Float64Model(Counter(), reused=True)
    first, second = wide.run((torch.ones(2),), {})[0], wide.run((torch.ones(2),), {})[0]
    assert torch.equal(first, second) and first.dtype == torch.float64


# NVFP4: E2M1 values in blocks of 16, E4M3 block scales under a float32 global scale (TensorRT's DynamicQuantize).

def test_e2m1_rounds_to_nearest_even_and_saturates_at_six():
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -5.0])
    assert qdq.round_e2m1(ties).tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, -0.0, -4.0]  # each tie to the even code
    assert qdq.round_e2m1(torch.tensor([0.26, 1.3, 2.6, 5.1, 7.0, -100.0])).tolist() == [0.5, 1.5, 3.0, 6.0, 6.0, -6.0]


def nvfp4_values(rows: int = 64) -> torch.Tensor:
    """Random blocks, a block of zeros, a block far past the calibrated amax (its E4M3 scale saturates), a block of
    tiny values (its scale underflows to 0) and blocks of exact E2M1 ties."""
    torch.manual_seed(0)
    x = torch.randn(rows, 64)
    x[1, :16] = 0.0
    x[2, 16:32] *= 500.0
    x[3, 32:48] = 1e-9
    x[4, :16] = torch.tensor([6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0] * 2)  # the scale is 1 global unit per code
    return x


def ort_fp4(x: torch.Tensor, amax: float) -> torch.Tensor:
    """The NVFP4 ONNX trtcheck's converter writes, run on ONNX Runtime through the emulation its engine applies."""
    from trtcheck.conversion import segment_to_onnx
    from trtcheck.engines.emulation import emulate_fp4
    from trtcheck.lowering import lower

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("amax", torch.tensor(amax))

        def forward(self, x):
            return torch.ops.trtcheck.dynamic_block_quantize_op(x, 16, self.amax, 4, 2, 8, 4)

    model = segment_to_onnx(lower(Block().eval(), (x,)))
    assert {opset.domain: opset.version for opset in model.opset_import} == {"": 23, "trt": 1}
    assert [node.op_type for node in model.graph.node if node.domain == "trt"] == ["TRT_FP4DynamicQuantize"]
    session = ort.InferenceSession(emulate_fp4(model).SerializeToString(), providers=["CPUExecutionProvider"])
    return torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["float32", "float16"])
def test_the_nvfp4_onnx_on_onnx_runtime_is_the_op_bit_for_bit(dtype):
    x = nvfp4_values().to(dtype)
    amax = 6.0 * 448.0 / 448.0  # a global scale of 1/448: block 4's scale is exactly one E4M3 unit
    ours = qdq.dynamic_block_quantize_op(x, 16, torch.tensor(amax), 4, 2, 8, 4)
    assert torch.equal(ort_fp4(x, amax), ours)
    assert torch.equal(ours[1, :16], torch.zeros(16, dtype=dtype)) and torch.equal(ours[3, 32:48], torch.zeros(16, dtype=dtype))
    assert ours.float().abs().max() <= 6 * 448 * (amax / (6 * 448)) * 1.0001  # the saturated block stays at 6 x 448 units


def test_nvfp4_in_float64_picks_the_scales_float32_picks():
    x = nvfp4_values()
    wide = qdq.dynamic_block_quantize_op(x.double(), 16, torch.tensor(3.0), 4, 2, 8, 4)
    narrow = qdq.dynamic_block_quantize_op(x, 16, torch.tensor(3.0), 4, 2, 8, 4)
    steps = qdq.steps_apart(narrow, wide, torch.tensor(3.0), qdq.NVFP4)
    assert qdq.agree(steps) and float(steps.max()) < 1e-3


def test_steps_apart_tells_an_nvfp4_flipped_tie_from_a_scale_two_percent_off():
    x, amax = nvfp4_values(), torch.tensor(3.0)
    right = qdq.dynamic_block_quantize_op(x, 16, amax, 4, 2, 8, 4)
    one = qdq.steps_apart(qdq.flip_nearest_tie(x, right, amax, qdq.NVFP4), right, amax, qdq.NVFP4)
    assert float(one.max()) == pytest.approx(1.0) and int((one > qdq.APART).sum()) == 1 and qdq.agree(one)
    assert not qdq.agree(qdq.steps_apart(right * 1.02, right, amax, qdq.NVFP4))


class Nvfp4(nn.Module):
    """An NVFP4 Linear as ModelOpt's lowered graphs hold it, on an input of any rank."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(32, 16)
        self.register_buffer("a", torch.tensor(3.0))
        self.register_buffer("w", self.fc.weight.detach().abs().max())

    def forward(self, x):
        q = torch.ops.trtcheck.dynamic_block_quantize_op
        return nn.functional.linear(q(x, 16, self.a, 4, 2, 8, 4), q(self.fc.weight, 16, self.w, 4, 2, 8, 4), self.fc.bias)


def test_an_nvfp4_linear_converts_and_verifies_in_2d_and_3d():
    for shape in [(4, 32), (2, 3, 32)]:
        report = trtcheck.verify(Nvfp4().eval(), (torch.randn(shape),), ONE, backend=ORT)
        assert report.partition.summary().startswith("1 segment: 1 TensorRT") and len(report.quantizers) == 2, str(report)


def test_nvfp4_on_a_4d_input_runs_in_pytorch_saying_tensorrt_takes_2d_or_3d():
    model, inputs = Nvfp4().eval(), (torch.randn(2, 2, 3, 32),)
    partition = trtcheck.partition(model, inputs, ONE)
    explained = partition.explain()
    assert "dynamic_block_quantize_op (trtcheck::dynamic_block_quantize_op): Torch" in explained
    assert "takes 2D or 3D inputs" in explained, explained
    trtcheck.verify(model, inputs, ONE, backend=ORT)
