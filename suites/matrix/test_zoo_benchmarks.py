"""pytest-benchmark timings of the zoo matrix: eager and stitched in one group per model and preset.

Engines are built before timing and warmed up by pytest-benchmark itself (``benchmark.pedantic``'s
``warmup_rounds``: the first calls initialize kernels lazily, 57 ms against 0.1 ms measured); each variant
then runs ``ROUNDS`` timed rounds of one call (more with ``--benchmark-min-rounds``; ``--benchmark-max-time``
does not apply to pedantic runs). On CUDA each call is
synchronized, since pytest-benchmark's clock is the host's. The stitched variant also records where its
time goes (``trtcheck.profile``: engine, Torch and boundary time per call) in ``extra_info["profile"]``.
Denormals are flushed while timing: random-weight torchvision models produce denormal activations that
slow eager PyTorch on x86 CPUs about 50x (measured on resnet18), which would measure the CPU's denormal
handling instead of partitioning (recorded as ``denormals_flushed`` in ``extra_info``).
"""

from __future__ import annotations

import pytest
import torch

import trtcheck
from suites.matrix.matrix_checks import zoo_tolerances
from trtcheck.benchmarking import VARIANTS, extra_info, flush_denormals
from trtcheck.lowering.export import LOWERING_SECONDS
from trtcheck.runtime.profiling import profile as profile_call
from trtcheck.verification.equivalence import compare_outputs

pytestmark = pytest.mark.trtcheck
WARMUP = 3  # rounds pytest-benchmark runs untimed before timing
ROUNDS = 20  # timed rounds of one call each, at least; --benchmark-min-rounds raises it
_last: dict = {}  # the last compiled (model, preset): its eager and stitched variants run back to back


def compiled(entry, preset, settings, backend, lowered):
    """Compiled from the model's one lowering per process (``trtcheck_lowered``); its compile times then carry
    the seconds that lowering took, so the report's compile-time plot still shows every phase."""
    key = (entry.name, preset.name, backend)
    if key not in _last:
        _last.clear()
        model, inputs = entry.build()
        try:
            stitched = trtcheck.compile(model, inputs, settings, backend, lowered=lowered)
            stitched.compile_times.lowering = lowered.meta.get(LOWERING_SECONDS, 0.0)
        except trtcheck.PartitionError as error:
            _last[key] = (model, inputs, error, None)
            return _last[key]
        # Compared once, right after compiling: timing calls then advance a stateful model's buffers (a call
        # counter) on the eager side and the stitched side by different numbers of calls.
        with flush_denormals(), torch.inference_mode():
            comparison = compare_outputs(model(*inputs), stitched(*inputs), **zoo_tolerances(entry, model, inputs))
        _last[key] = (model, inputs, stitched, comparison)
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
def test_zoo_benchmark(
    trtcheck_model_entry, trtcheck_preset, trtcheck_settings, trtcheck_config, trtcheck_lowered, variant, benchmark, request
):
    model, inputs, stitched, comparison = compiled(
        trtcheck_model_entry, trtcheck_preset, trtcheck_settings, trtcheck_config.backend, trtcheck_lowered
    )
    if isinstance(stitched, trtcheck.PartitionError):
        pytest.skip(f"nothing to time: {trtcheck_model_entry.name} cannot be fully compiled ({str(stitched).splitlines()[0]})")
    benchmark.group = f"{trtcheck_model_entry.name}-{trtcheck_preset.name}"
    # flush_denormals restores the previous flush state afterwards (torch has no getter; it probes the CPU).
    with flush_denormals() as flushed, torch.inference_mode():
        equivalence = {
            "passed": comparison.passed,
            "max_abs": max((o.max_abs for o in comparison.outputs), default=0.0),
            "cosine": min((o.cosine for o in comparison.outputs), default=1.0),
        }
        # Profiling times 20 calls: only worth it when timings are kept (pytest-benchmark is off under xdist).
        profile = profile_call(stitched, inputs).to_dict() if variant == "stitched" and not benchmark.disabled else None
        benchmark.extra_info.update(
            extra_info(trtcheck_model_entry.name, trtcheck_preset.name, variant, trtcheck_config.backend,
                       stitched, equivalence, denormals_flushed=flushed, profile=profile)
        )
        fn = synchronized(model if variant == "eager" else stitched, inputs)
        rounds = max(ROUNDS, request.config.getoption("benchmark_min_rounds"))
        benchmark.pedantic(fn, warmup_rounds=WARMUP, rounds=rounds, iterations=1)
    assert comparison.passed, str(comparison)
    # Timed and recorded either way (the report shows it as a failure), but a fallback is not a pass.
    fallbacks = stitched.partition.fallbacks
    assert trtcheck_config.allow_fallbacks or not fallbacks, (
        f"{len(fallbacks)} TensorRT segment(s) fell back to PyTorch: {fallbacks} (--trtcheck-allow-fallbacks accepts this)"
    )
