"""pytest-benchmark timings of the zoo matrix: eager and stitched in one group per model and preset.

How a variant is timed and what it records (warm-up, rounds, CUDA synchronization, flushed denormals, the
profile) is ``trtcheck.testing.timing``, shared with the ``trtcheck_benchmark`` fixture downstream suites use.
The zoo adds its own lowering cache and its tolerances.
"""

from __future__ import annotations

import pytest

import trtcheck
from suites.matrix.matrix_checks import zoo_tolerances
from trtcheck.benchmarking import VARIANTS
from trtcheck.errors import UnmatchedOpError
from trtcheck.lowering.export import LOWERING_SECONDS
from trtcheck.testing.timing import assert_timed_result_holds, benchmark_variant, compile_once

pytestmark = pytest.mark.trtcheck


def compiled(entry, preset, settings, backend, lowered):
    """Compiled from the model's one lowering per process (``trtcheck_lowered``); its compile times then carry
    the seconds that lowering took, so the report's compile-time plot still shows every phase."""
    result = compile_once(
        (entry.name, preset.name, settings.precision, backend), entry.build, settings, backend,
        tolerances=lambda model, inputs: zoo_tolerances(entry, model, inputs), lowered=lowered,
    )
    if not isinstance(result.stitched, trtcheck.PartitionError):
        result.stitched.compile_times.lowering = lowered.meta.get(LOWERING_SECONDS, 0.0)
    return result


@pytest.mark.parametrize("variant", VARIANTS)
def test_zoo_benchmark(trtcheck_model_entry, trtcheck_preset, trtcheck_settings, trtcheck_config, variant, benchmark, request):
    if "detection" in trtcheck_model_entry.tags:
        pytest.skip("a detector runs under torch.compile (docs/graph-breaks.md): its timings are "
                    "suites/benchmarks/bench_detection.py's, not this lowering's")
    lowered = request.getfixturevalue("trtcheck_lowered")
    try:
        result = compiled(trtcheck_model_entry, trtcheck_preset, trtcheck_settings, trtcheck_config.backend, lowered)
    except UnmatchedOpError as error:  # torch_relu on a model without a relu: as the matrix, skipped saying why
        pytest.skip(f"the preset does not apply to this model: {str(error).removeprefix('torch_executed_ops: ').split('. ')[0]}")
    if isinstance(result.stitched, trtcheck.PartitionError):
        pytest.skip(f"nothing to time: {trtcheck_model_entry.name} cannot be fully compiled ({str(result.stitched).splitlines()[0]})")
    benchmark_variant(benchmark, result, model=trtcheck_model_entry.name, preset=trtcheck_preset.name, variant=variant,
                      backend=trtcheck_config.backend, min_rounds=request.config.getoption("benchmark_min_rounds"))
    assert_timed_result_holds(result, f"{trtcheck_model_entry.name}/{trtcheck_preset.name}", trtcheck_config.allow_fallbacks)
