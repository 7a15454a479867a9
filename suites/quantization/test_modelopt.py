"""NVIDIA ModelOpt's quantized models (explicit Q/DQ: TensorRT 11's only quantization) compile and verify on CPU.

Needs ``nvidia-modelopt`` (``pip install -e '.[quant]'``; ``dev`` has it): skipped without it, saying so. Models are
quantized with ModelOpt's own configs and calibrated on random data, as a user does before deploying.
"""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
import torch
from torch import nn

import trtcheck
from suites.verification.planted import off_by, planted, run_repro
from trtcheck.lowering.quantized import is_quantize
from trtcheck.partitioning.reasons import Target
from trtcheck.verification.reduce import reduce_model

mtq = pytest.importorskip("modelopt.torch.quantization", reason="needs nvidia-modelopt: pip install -e '.[quant]'")

ONE = trtcheck.Settings(min_block_size=1)
ORT = "onnxruntime"
QUANTIZE = torch.ops.trtcheck.quantize_op.default
BLOCK_QUANTIZE = torch.ops.trtcheck.dynamic_block_quantize_op.default


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(4, 8, 3, padding=1), nn.Conv2d(8, 16, 3, padding=1)

    def forward(self, x):
        return self.c2(torch.relu(self.c1(x)))  # the relu feeds c2's input quantizer


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(32, 64), nn.Linear(64, 16)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


SHAPES = {ConvNet: (2, 4, 16, 16), MLP: (4, 32)}


def quantized(cls: type, config: str) -> tuple[nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(0)
    shape = SHAPES[cls]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = mtq.quantize(cls().eval(), getattr(mtq, config), lambda m: [m(torch.randn(shape)) for _ in range(4)])
    return model, (torch.randn(shape),)


def in_pytorch(partition) -> list[str]:
    return [n.name for s in partition.segments if s.target is Target.TORCH for n in s.nodes if is_quantize(n)]


CASES = [(ConvNet, "INT8_DEFAULT_CFG"), (ConvNet, "FP8_DEFAULT_CFG"), (MLP, "INT8_DEFAULT_CFG"), (MLP, "FP8_DEFAULT_CFG"),
         (MLP, "NVFP4_DEFAULT_CFG")]  # NVFP4: ModelOpt runs it eagerly only with CUDA; verify routes it to trtcheck's op


@pytest.mark.parametrize("cls, config", CASES, ids=[f"{c.__name__}-{cfg.split('_')[0]}" for c, cfg in CASES])
def test_modelopt_models_convert_every_quantizer_and_verify(cls, config):
    model, inputs = quantized(cls, config)
    report = trtcheck.verify(model, inputs, ONE, backend=ORT)
    assert in_pytorch(report.partition) == [] and report.partition.summary().startswith("1 segment")
    assert len(report.quantizers) == 4 and all(check.passed for check in report.quantizers), str(report)
    if config.startswith("INT8") and cls is ConvNet:  # per-channel weights, amax [C, 1, 1, 1]
        weights = [n for n in report.partition.graph_module.graph.nodes if n.target is QUANTIZE and "weight" in n.name + str(n.meta)]
        assert weights


def test_exporting_puts_every_quantizer_back_as_it_was():
    model, inputs = quantized(ConvNet, "INT8_DEFAULT_CFG")
    before = {name: getattr(m, "backend", None) for name, m in model.named_modules()}
    expected = model(*inputs)
    trtcheck.compile(model, inputs, ONE, backend=ORT)
    assert {name: getattr(m, "backend", None) for name, m in model.named_modules()} == before
    assert torch.equal(model(*inputs), expected)


@pytest.mark.parametrize("cls, config, node, module", [
    (ConvNet, "INT8_DEFAULT_CFG", "quantize_op_2", "c2.input_quantizer"),
    (MLP, "FP8_DEFAULT_CFG", "quantize_op", "fc1.input_quantizer"),
    (ConvNet, "FP8_DEFAULT_CFG", "quantize_op_3", "c2.weight_quantizer"),
    (MLP, "NVFP4_DEFAULT_CFG", "dynamic_block_quantize_op_2", "fc2.input_quantizer"),
], ids=["int8-activation", "fp8-activation", "fp8-weight", "nvfp4-activation"])
def test_a_quantizer_converted_two_percent_off_fails_and_is_named_with_its_module_and_line(cls, config, node, module, tmp_path):
    model, inputs = quantized(cls, config)
    target = BLOCK_QUANTIZE if "block" in node else QUANTIZE
    with planted(target, {node}, off_by(1.02)):
        with pytest.raises(trtcheck.VerificationError) as caught:
            trtcheck.verify(model, inputs, ONE, backend=ORT, report_dir=tmp_path)
        assert run_repro(caught.value.report.repro) == 1  # the folder fails alone (the planted converter registered)
    report = caught.value.report
    failing = [check for check in report.quantizers if not check.passed]
    assert [check.node for check in failing] == [node]
    assert module in failing[0].where and f"{__file__.rsplit('/', 1)[-1]}:" in failing[0].where
    assert report.localization is not None and report.localization.culprit is not None
    assert report.localization.culprit.node == node
    with planted(target, {node}, off_by(1.02)):
        reduced = reduce_model(model, inputs, ONE, backend=ORT, out_dir=tmp_path / "reduced")
        assert len(reduced.culprits) == 1 and reduced.culprits[0].nodes[-1] == node, str(reduced)  # trtcheck reduce too,
        assert all(name.startswith("alias") for name in reduced.culprits[0].nodes[:-1])  # with its amax's alias at most
        assert module in reduced.culprits[0].sources[0]
        assert run_repro(reduced.culprits[0].repro) == 1  # its folder fails alone


def test_nvfp4_is_what_modelopts_own_nvfp4_tensor_computes():
    """ModelOpt's NVFP4 fake quantization needs CUDA, but its ``NVFP4QTensor`` (the weights' real quantization, plain
    PyTorch) runs here: trtcheck's op gives its values bit for bit."""
    from modelopt.torch.quantization.qtensor.nvfp4_tensor import NVFP4QTensor

    torch.manual_seed(0)
    weight = torch.randn(64, 128) * torch.rand(64, 1) * 3
    global_scale = NVFP4QTensor.get_weights_scaling_factor_2(weight)
    block_scales, _ = NVFP4QTensor.get_weights_scaling_factor(weight, 16, global_scale)
    packed, _, _ = NVFP4QTensor.quantize(weight, 16, block_scales, global_scale)
    theirs = packed.dequantize(dtype=torch.float32, scale=block_scales, double_scale=global_scale, block_sizes={-1: 16})
    ours = torch.ops.trtcheck.dynamic_block_quantize_op(weight, 16, weight.abs().max(), 4, 2, 8, 4)
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("config", ["INT8_DEFAULT_CFG", "FP8_DEFAULT_CFG"])
def test_an_amax_fifty_times_too_small_passes_as_faithful_and_tops_the_quantizers_that_cost_accuracy(config):
    model, inputs = quantized(ConvNet, config)
    quantizer = model.c2.input_quantizer
    quantizer.amax = quantizer.amax / 50  # a bad calibration: most of c2's input clips
    report = trtcheck.verify(model, inputs, ONE, backend=ORT)  # the engine computes that badly quantized model faithfully
    loss = report.quantization
    assert loss is not None and len(loss.ranked) == 4
    assert loss.ranked[0].node == "quantize_op_2" and "c2.input_quantizer" in loss.ranked[0].where
    assert loss.ranked[0].removed > 0.5 * loss.loss  # leaving it out saves most of what quantizing costs
    assert "quantization costs" in str(report) and "c2.input_quantizer" in str(report).split("quantization costs")[1]


def test_a_saved_quantized_program_loads_and_verifies(tmp_path):
    """A ``.pt2`` calls ModelOpt's ops, which ``torch.export.load`` resolves only once ModelOpt registered them."""
    from modelopt.torch.quantization.utils import export_torch_mode

    model, inputs = quantized(MLP, "FP8_DEFAULT_CFG")
    with torch.no_grad(), export_torch_mode():
        program = torch.export.export(model, inputs)
    path = tmp_path / "fp8_mlp.pt2"
    torch.export.save(program, path)
    script = (f"import trtcheck; report = trtcheck.verify({str(path)!r}, settings=trtcheck.Settings(min_block_size=1), "
              "backend='onnxruntime'); print(report.partition.summary(), len(report.quantizers))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)  # ModelOpt not imported
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1].endswith("0 Torch (0 compute nodes) 4")


def test_the_quantizer_search_finds_the_bad_quantizer_and_its_printed_fix_holds():
    from trtcheck.verification.quant_search import search_quantizers

    model, inputs = quantized(ConvNet, "FP8_DEFAULT_CFG")
    model.c2.input_quantizer.amax = model.c2.input_quantizer.amax / 50
    found = search_quantizers(model, inputs, max_loss=0.1)
    assert found.loss > 0.1 and found.found and found.left_out == ["c2.input_quantizer"], str(found)
    assert "for name in ['c2.input_quantizer']: mtq.disable_quantizer(model, name)" in str(found)
    for path in found.left_out:  # the fix as printed
        mtq.disable_quantizer(model, path)
    report = trtcheck.verify(model, inputs, ONE, backend=ORT)
    assert report.quantization.loss <= 0.1 and len(report.quantizers) == 3
    assert search_quantizers(model, inputs, max_loss=0.1).left_out == []


FACTORY = '''
import torch
import modelopt.torch.quantization as mtq


def build():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16)).eval()
    model = mtq.quantize(model, mtq.FP8_DEFAULT_CFG, lambda m: [m(torch.randn(4, 32)) for _ in range(4)])
    return model, (torch.randn(4, 32),)
'''


def test_the_cli_searches_quantizers_with_precision_quant(tmp_path, monkeypatch, capsys):
    from trtcheck.tools.cli import main

    (tmp_path / "qnet.py").write_text(FACTORY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["precision", "qnet:build", "--quant", "--max-loss", "0.5"]) == 0
    assert "within the bound with every quantizer on: nothing to leave out" in capsys.readouterr().out
    assert main(["precision", "qnet:build", "--quant"]) == 2
    assert "needs --max-loss" in capsys.readouterr().err
