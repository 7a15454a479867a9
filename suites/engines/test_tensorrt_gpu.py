"""The TensorRT backend on real TensorRT and a CUDA GPU: skipped, with the reason, wherever either is missing.

These are the checks the fake ``tensorrt`` of ``suites/engines/test_engines_tensorrt.py`` cannot make: that
TensorRT's real parser, builder and runtime accept what trtcheck hands them (TensorRT 11: strongly typed networks
built from the mixed-precision graph of ``precision="fp16"``, with ``fp32_nodes`` and ``use_fp32_acc``; TF32), and
compute what eager does. NEVER RUN YET: no machine here has a GPU.
"""

from __future__ import annotations

import onnx
import pytest
import torch
from onnx import helper

import trtcheck
from trtcheck.engines import EngineOptions, TensorRTEngine, TensorSpec, build_engine

REASON = TensorRTEngine.unavailable_reason()
pytestmark = [pytest.mark.tensorrt, pytest.mark.skipif(REASON is not None, reason=f"needs TensorRT and a CUDA GPU: missing {REASON}")]


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x, y):
        h = torch.relu(self.conv(x)).mean(dim=(2, 3))
        return self.linear(h) - y  # two inputs: bound by name, not position


def example(dtype=torch.float32):
    torch.manual_seed(0)
    model = Block().eval().cuda().to(dtype)
    return model, (torch.randn(2, 3, 16, 16, device="cuda", dtype=dtype), torch.randn(2, 4, device="cuda", dtype=dtype))


def test_fp32_matches_eager_and_the_second_build_is_a_cache_hit(tmp_path):
    model, inputs = example()
    settings = trtcheck.Settings(min_block_size=1, engine_cache_dir=str(tmp_path))
    torch.backends.cudnn.allow_tf32 = False
    first = trtcheck.compile(model, inputs, settings, backend="tensorrt")
    assert first.partition.fallbacks == [] and first.engines
    assert all(isinstance(e, TensorRTEngine) and e.cache_event.startswith("stored") for e in first.engines.values())
    with torch.inference_mode():
        torch.testing.assert_close(first(*inputs), model(*inputs), rtol=1e-4, atol=1e-4)
    second = trtcheck.compile(model, inputs, settings, backend="tensorrt")
    assert all(e.cache_event == "hit" for e in second.engines.values())
    with torch.inference_mode():
        torch.testing.assert_close(second(*inputs), first(*inputs), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32-model", "fp16-model"])
def test_fp16_precision_is_within_fp16_tolerance(tmp_path, dtype):
    model, inputs = example(dtype)
    settings = trtcheck.Settings(min_block_size=1, precision="fp16", engine_cache_dir=str(tmp_path))
    report = trtcheck.verify(model, inputs, settings, backend="tensorrt", rtol=1e-2, atol=1e-2)
    assert report.passed, str(report)


def test_an_engine_binds_by_name_and_returns_cpu_results_for_cpu_inputs(tmp_path):
    a, b, out = (TensorSpec(n, (2, 3), torch.float32) for n in ("a", "b", "out"))
    graph = helper.make_graph(
        [helper.make_node("Sub", ["a", "b"], ["out"])], "segment",
        [helper.make_tensor_value_info(s.name, onnx.TensorProto.FLOAT, list(s.shape)) for s in (a, b)],
        [helper.make_tensor_value_info("out", onnx.TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    engine = build_engine(model, [b, a], [out], backend="tensorrt", options=EngineOptions(engine_cache_dir=str(tmp_path)))
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    (result,) = engine(y, x)  # the specs say b first
    assert result.device.type == "cpu"
    torch.testing.assert_close(result, x - y)
    (on_gpu,) = engine(y.cuda(), x.cuda())
    torch.cuda.synchronize()
    torch.testing.assert_close(on_gpu.cpu(), x - y)


@pytest.mark.parametrize("extra", [{}, {"fp32_nodes": ["aten::mean"]}, {"use_fp32_acc": True}], ids=["plain", "fp32_nodes", "use_fp32_acc"])
def test_a_float32_model_builds_from_its_mixed_precision_graph(tmp_path, extra):
    """TensorRT 11 has no FP16 flag: the engine is the strongly typed build of the segment's fp16 graph."""
    model, inputs = example()
    settings = trtcheck.Settings(min_block_size=1, precision="fp16", engine_cache_dir=str(tmp_path), **extra)
    compiled = trtcheck.compile(model, inputs, settings, backend="tensorrt")
    assert compiled.partition.fallbacks == []
    assert all(e.model.graph.node[0].op_type == "Cast" for e in compiled.engines.values())  # the float32 input cast down
    report = trtcheck.verify(model, inputs, settings, backend="tensorrt", rtol=1e-2, atol=1e-2)
    assert report.passed, str(report)


def test_tf32_is_within_tf32s_rounding_and_fp32_is_not_tf32(tmp_path):
    """BuilderFlag.TF32 set (tf32=True) rounds products' factors to 10 bits; cleared (the default), the engine is as
    close to eager float32 (TF32 off in torch) as float32 summation orders."""
    model, inputs = example()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    with torch.inference_mode():
        expected = model(*inputs)
        for tf32, tolerance in ((False, 1e-4), (True, 1e-2)):
            settings = trtcheck.Settings(min_block_size=1, tf32=tf32, engine_cache_dir=str(tmp_path))
            compiled = trtcheck.compile(model, inputs, settings, backend="tensorrt")
            torch.testing.assert_close(compiled(*inputs), expected, rtol=tolerance, atol=tolerance)
