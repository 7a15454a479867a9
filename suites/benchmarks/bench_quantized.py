"""Quantized zoo models: verify's time, and a stitched INT8/FP8/NVFP4 module against eager fake quantization and the float engine.

    python -m suites.benchmarks.bench_quantized [--models quantized_resnet18_int8,quantized_resnet18_fp8]
                                                [--calls 30] [--skip-verify]

For each quantized zoo entry (``trtcheck_zoo``'s opt-in ``quantized_*`` family, ModelOpt installed): ``verify``'s
wall time at ``min_block_size=1`` on ONNX Runtime, split into what quantization adds (each quantizer built alone,
``verification.quantizers.quantizer_checks``; what each costs, ``quantization_costs``) and the rest; then the median
call of four modules on the example input: eager PyTorch of the float model (the entry's base model), eager PyTorch
of the quantized model (ModelOpt's fake quantization; for NVFP4 on a CPU, where ModelOpt's needs CUDA, trtcheck's
op), the compiled float model and the compiled quantized model
(QuantizeLinear/DequantizeLinear pairs in one ONNX Runtime engine). Denormals are flushed while timing. A
benchmark, not a test: it prints numbers and asserts nothing.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

import trtcheck
import trtcheck_zoo as zoo
from trtcheck.benchmarking import flush_denormals
from trtcheck.lowering.quantized import eager_quantizers

DEFAULT_MODELS = "quantized_resnet18_int8,quantized_resnet18_fp8,quantized_mobilenet_v3_small_int8,quantized_mobilenet_v3_small_fp8"
ONE = trtcheck.Settings(min_block_size=1)
verify = importlib.import_module("trtcheck.verification.verify")  # the module (the package exports the function by its name)


def median_call(module: Callable[..., Any], inputs: tuple, calls: int) -> float:
    """The median seconds of ``calls`` calls of ``module(*inputs)``, after two untimed ones."""
    times = []
    with torch.no_grad():
        for index in range(calls + 2):
            start = time.perf_counter()
            module(*inputs)
            if index >= 2:
                times.append(time.perf_counter() - start)
    return statistics.median(times)


def timed_verify(model: torch.nn.Module, inputs: tuple) -> dict[str, float]:
    """``verify``'s seconds, and how many of them each quantization step took (wrapped where verify calls them)."""
    spent = {"quantizers built alone": 0.0, "quantization costs": 0.0}
    originals = {"quantizer_checks": verify.quantizer_checks, "quantization_costs": verify.quantization_costs}

    def wrap(name: str, label: str) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return originals[name](*args, **kwargs)
            finally:
                spent[label] += time.perf_counter() - start
        return timed

    verify.quantizer_checks = wrap("quantizer_checks", "quantizers built alone")
    verify.quantization_costs = wrap("quantization_costs", "quantization costs")
    try:
        start = time.perf_counter()
        trtcheck.verify(model, inputs, ONE, backend="onnxruntime")
        spent["verify"] = time.perf_counter() - start
    finally:
        verify.quantizer_checks, verify.quantization_costs = originals["quantizer_checks"], originals["quantization_costs"]
    return spent


def measure(name: str, calls: int, with_verify: bool = True) -> list[str]:
    """The lines of one quantized zoo entry: verify's split (``with_verify``), then the four modules' median calls."""
    model, inputs = zoo.get(name).build()
    float_model = zoo.base_model(name)  # the same weights, unquantized
    lines = []
    if with_verify:
        spent = timed_verify(model, inputs)
        rest = spent["verify"] - spent["quantizers built alone"] - spent["quantization costs"]
        lines.append(f"{name}: verify {spent['verify']:.1f} s (quantizers built alone {spent['quantizers built alone']:.1f} s, "
                     f"quantization costs {spent['quantization costs']:.1f} s, the rest {rest:.1f} s)")
    modules = {
        "eager float": float_model,
        "eager fake-quant": model,
        "engine float": trtcheck.compile(float_model, inputs, ONE, backend="onnxruntime"),
        "engine Q/DQ": trtcheck.compile(model, inputs, ONE, backend="onnxruntime"),
    }
    with flush_denormals(), eager_quantizers(model):  # NVFP4 on a CPU: trtcheck's op (ModelOpt's needs CUDA)
        row = {label: median_call(module, inputs, calls) for label, module in modules.items()}
    lines.append(f"{name}: " + ", ".join(f"{label} {seconds * 1e3:.2f}" for label, seconds in row.items()))
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=DEFAULT_MODELS, help="comma-separated quantized zoo entries")
    parser.add_argument("--calls", type=int, default=30, help="timed calls per module (median printed)")
    parser.add_argument("--skip-verify", action="store_true", help="time the calls only")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    if zoo.QUANTIZED_UNAVAILABLE:
        raise SystemExit(zoo.QUANTIZED_UNAVAILABLE)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; median of {args.calls} calls, ms")
    for name in args.models.split(","):
        print("\n".join(measure(name, args.calls, not args.skip_verify)))


if __name__ == "__main__":
    main()
