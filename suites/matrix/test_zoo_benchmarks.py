"""pytest-benchmark timings of the zoo matrix: eager and stitched in one group per model and preset.

Engines are built before timing and warmed up; on CUDA each call is synchronized, since pytest-benchmark's
clock is the host's. Denormals are flushed while timing: random-weight torchvision models produce denormal
activations that slow eager PyTorch on x86 CPUs about 50x (measured on resnet18), which would measure the
CPU's denormal handling instead of partitioning (recorded as ``denormals_flushed`` in ``extra_info``).
"""

from __future__ import annotations

import pytest
import torch

import trtcheck
from trtcheck.benchmarking import VARIANTS, extra_info, flush_denormals
from trtcheck.verification.equivalence import compare

from matrix_checks import zoo_tolerances

pytestmark = pytest.mark.trtcheck
WARMUP = 3
_last: dict = {}  # the last compiled (model, preset): its eager and stitched variants run back to back


def compiled(entry, preset, settings, backend):
    key = (entry.name, preset.name, backend)
    if key not in _last:
        _last.clear()
        model, inputs = entry.build()
        try:
            stitched = trtcheck.compile(model, inputs, settings, backend)
        except trtcheck.PartitionError as error:
            stitched = error
        _last[key] = (model, inputs, stitched)
    return _last[key]


def synchronized(fn, inputs):
    if any(isinstance(x, torch.Tensor) and x.is_cuda for x in inputs):
        def timed():
            result = fn(*inputs)
            torch.cuda.synchronize()
            return result
        return timed
    return lambda: fn(*inputs)


@pytest.mark.parametrize("variant", VARIANTS)
def test_zoo_benchmark(trtcheck_model_entry, trtcheck_preset, trtcheck_settings, trtcheck_config, variant, benchmark):
    model, inputs, stitched = compiled(trtcheck_model_entry, trtcheck_preset, trtcheck_settings, trtcheck_config.backend)
    if isinstance(stitched, trtcheck.PartitionError):
        pytest.skip(f"nothing to time: {trtcheck_model_entry.name} cannot be fully compiled ({str(stitched).splitlines()[0]})")
    benchmark.group = f"{trtcheck_model_entry.name}-{trtcheck_preset.name}"
    # flush_denormals restores the previous flush state afterwards (torch has no getter; it probes the CPU).
    with flush_denormals() as flushed, torch.inference_mode():
        comparison = compare(model(*inputs), stitched(*inputs), **zoo_tolerances(trtcheck_model_entry, model, inputs))
        equivalence = {
            "passed": comparison.passed,
            "max_abs": max((o.max_abs for o in comparison.outputs), default=0.0),
            "cosine": min((o.cosine for o in comparison.outputs), default=1.0),
        }
        benchmark.extra_info.update(
            extra_info(trtcheck_model_entry.name, trtcheck_preset.name, variant, trtcheck_config.backend,
                       stitched, equivalence, denormals_flushed=flushed)
        )
        fn = synchronized(model if variant == "eager" else stitched, inputs)
        for _ in range(WARMUP):
            fn()
        benchmark(fn)
    assert comparison.passed, str(comparison)
    # Timed and recorded either way (the report shows it as a failure), but a fallback is not a pass.
    fallbacks = stitched.partition.fallbacks
    assert trtcheck_config.allow_fallbacks or not fallbacks, (
        f"{len(fallbacks)} TensorRT segment(s) fell back to PyTorch: {fallbacks} (--trtcheck-allow-fallbacks accepts this)"
    )
