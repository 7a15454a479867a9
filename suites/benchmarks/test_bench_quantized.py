"""bench_quantized runs end to end on the smallest quantized zoo entry, and leaves verify as it found it."""

from __future__ import annotations

import pytest

pytest.importorskip("modelopt.torch.quantization", reason="needs nvidia-modelopt: pip install -e '.[quant]'")

from suites.benchmarks import bench_quantized  # after the skip: the benchmark needs the quantized zoo


@pytest.mark.slow
def test_measure_prints_verifys_split_and_the_four_modules_and_puts_verify_back():
    before = (bench_quantized.verify.quantizer_checks, bench_quantized.verify.quantization_costs)
    verify_line, calls_line = bench_quantized.measure("quantized_hf_llama_fp8", calls=1)
    assert verify_line.startswith("quantized_hf_llama_fp8: verify ") and "quantizers built alone" in verify_line
    for label in ("eager float", "eager fake-quant", "engine float", "engine Q/DQ"):
        assert label in calls_line
    assert (bench_quantized.verify.quantizer_checks, bench_quantized.verify.quantization_costs) == before
    assert float(verify_line.split("quantizers built alone ")[1].split(" s")[0]) > 0  # the wrapped step was timed
