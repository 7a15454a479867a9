"""Fuzzing: random core-ATen graphs, in random dtypes, under random presets; shrunk to a minimal failure.

Unlike ``test_random_graph_matrix.py`` (every selected preset, float32, ``--trtcheck-examples`` graphs
each), hypothesis draws the preset and the dtype with the graph, and the number of examples follows the
hypothesis profile (``HYPOTHESIS_PROFILE``, see conftest.py): ``ci`` (the default) runs ``CI_EXAMPLES`` so
that the matrix stays fast, ``nightly`` its 2,000, any other profile its own ``max_examples``::

    HYPOTHESIS_PROFILE=nightly pytest --trtcheck -p no:xdist suites/matrix/test_random_graph_fuzz.py -x -q

A graph passes when ``verify`` finds no invariant violation and no mismatch with eager on two input sets,
and no TensorRT segment fell back to PyTorch because its conversion or engine build failed (a random graph
holds only ops that have converters in every dtype the converters accept, so a fallback is a bug). Under
``full_compilation`` it passes with one engine, or with a ``PartitionError`` naming a node that stops it.
Bugs found here get a plain regression test in ``test_fuzz_regressions.py``.

``test_dynamic_random_graph_fuzz`` does the same for graphs whose dim 0 is dynamic (``dynamic_aten_graphs``:
SymInt flows into view, expand and full), verified with their ``dynamic_shapes`` at the example's size, the
Dim's minimum and maximum and a random size; ``DYNAMIC_CI_EXAMPLES`` graphs under ``ci`` (13 to 25 s on 2
cores), ``DYNAMIC_SHARE`` of the profile's examples otherwise (500 under ``nightly``), float32 and int64.

Tolerances: float32 and int64 graphs are held to ``verify``'s defaults. A float16 (or bfloat16) graph's
``atol`` is the default plus ``REFERENCE_FACTOR`` times eager's own largest error against the exact result
(the graph run in float64, ``trtcheck.verification.reference.float64_outputs``): verify's float16 default (1e-3, one unit in the
last place) cannot hold a chain of up to 15 ops each rounded to 11 bits, where one engine's last-bit
difference in a convolution is multiplied by the products and subtractions that follow. Measured on 120
float16 graphs (onnxruntime 1.32): 13 failed the default tolerance, and in every one of them the stitched
result was at most 1.3 times as far from the exact one as eager was. The bound says "stitched is as accurate
as eager, within a factor": a wrong converter errs by the magnitude of the values and still fails.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import Counter

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, note, reject, settings
from hypothesis import strategies as st

import trtcheck
from suites.matrix.matrix_checks import check_model
from trtcheck.engines import resolve_backend
from trtcheck.errors import UnmatchedOpError
from trtcheck.presets import PRESETS
from trtcheck.testing.random_graphs import DTYPES, aten_graphs, dynamic_aten_graphs
from trtcheck.verification import default_tolerances
from trtcheck.verification.inputs import cloned, random_like
from trtcheck.verification.reference import float64_outputs
from trtcheck.verification.state import restore_state, snapshot_state

pytestmark = pytest.mark.trtcheck

CI_EXAMPLES = 20
NUM_INPUTS = 2
REFERENCE_FACTOR = 5  # |stitched - eager| <= |stitched - exact| + |eager - exact|: 4x eager's error, plus its own
REFERENCE_DTYPES = frozenset({torch.float16, torch.bfloat16})

# Presets that apply to a model without a fallback submodule (all but torch_module).
MODEL_FREE_PRESETS = [preset for preset in PRESETS.values() if preset.settings_for(None) is not None]


def fuzz_examples(ci_examples: int = CI_EXAMPLES, share: float = 1.0) -> int:
    """The active hypothesis profile's ``max_examples``, at most ``ci_examples`` under ``ci``; under any other
    profile ``share`` of it (for graphs that cost more each), never fewer than under ``ci``.

    The profile is the one loaded (conftest.py's ``HYPOTHESIS_PROFILE``, or ``--hypothesis-profile``)."""
    examples = settings.default.max_examples
    if _profile_name() == "ci":
        return min(examples, ci_examples)
    return max(min(examples, ci_examples), round(examples * share))


def _profile_name() -> str:
    get_name = getattr(settings, "get_current_profile_name", None)  # recent hypothesis; else the env variable
    return get_name() if get_name is not None else os.environ.get("HYPOTHESIS_PROFILE", "ci")


def fuzz_dtypes(backend: str) -> tuple[torch.dtype, ...]:
    """Every graph dtype, except bfloat16 on ONNX Runtime: its CPU kernels have none for Relu, Add, Mul,
    MatMul, ReduceSum, ArgMax, ... (measured with onnxruntime 1.32), so every bfloat16 engine build would
    fail and fall back to PyTorch there. TensorRT runs them all."""
    return DTYPES if backend == "tensorrt" else tuple(d for d in DTYPES if d != torch.bfloat16)


def reference_atol(graph, seed: int, num_inputs: int = NUM_INPUTS) -> float | None:
    """``atol`` for a float16/bfloat16 graph (None, verify's default, for the others): the default plus
    ``REFERENCE_FACTOR`` times eager's largest error against the float64 result, on the input sets ``verify``
    compares (the example inputs, and the ``num_inputs - 1`` sets ``random_like`` draws seeded by ``seed``, as
    verify documents)."""
    if graph.dtype not in REFERENCE_DTYPES:
        return None
    generator = torch.Generator().manual_seed(seed)
    worst = 0.0
    state = snapshot_state(graph.graph_module)  # a graph that writes its buffer or inputs: every run from the same start
    for index in range(num_inputs):
        inputs = tuple(graph.example_inputs) if index == 0 else random_like(tuple(graph.example_inputs), generator)
        with torch.no_grad():
            eager = graph.graph_module(*cloned(inputs))
        restore_state(graph.graph_module, state)
        exact_outputs, _ = float64_outputs(graph.graph_module, cloned(inputs), {})
        for value, exact in zip(eager, exact_outputs):
            if value.is_floating_point():
                finite = value.isfinite() & exact.isfinite()
                worst = max(worst, float((value.double() - exact).abs().where(finite, 0).max()))
    return default_tolerances(graph.dtype)[1] + REFERENCE_FACTOR * worst


@contextlib.contextmanager
def preset_applies():
    """A preset forcing an op the random graph does not call does not apply to it (trtcheck refuses a forced op
    that matches nothing: ``UnmatchedOpError``): the example is rejected, as the matrix skips such a preset."""
    try:
        yield
    except UnmatchedOpError:
        reject()


def test_random_graph_fuzz(trtcheck_config, request):
    backend = resolve_backend(trtcheck_config.backend)
    counts: Counter = Counter()

    def verify(model, inputs, *, preset, **options):
        with preset_applies():
            report = trtcheck.verify(
                model, inputs, settings=preset.settings_for(None), backend=backend, seed=trtcheck_config.seed,
                report_dir=trtcheck_config.report_dir, name=f"{request.node.name}-{preset.name}", **options,
            )
        assert not report.partition.fallbacks, f"a TensorRT segment fell back to PyTorch:\n{report}"
        return report

    @settings(max_examples=fuzz_examples(), deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])
    @given(graph=aten_graphs(max_nodes=15, dtypes=fuzz_dtypes(backend), seeds=st.integers(0, 2**16)),
           preset=st.sampled_from(MODEL_FREE_PRESETS))
    def check(graph, preset):
        note(f"preset {preset.name}: {preset.settings_for(None)}")
        atol = reference_atol(graph, trtcheck_config.seed)
        if atol is not None:
            note(f"atol {atol:.3g} (float64 reference)")

        def run(model, inputs, **options):
            return verify(model, inputs, preset=preset, **options)

        check_model(graph.graph_module, graph.example_inputs, preset.settings_for(None), run,
                    num_inputs=NUM_INPUTS, atol=atol)
        counts[preset.name, str(graph.dtype).removeprefix("torch.")] += 1

    start = time.perf_counter()
    check()
    by_preset, by_dtype = Counter(), Counter()
    for (preset, dtype), count in counts.items():
        by_preset[preset] += count
        by_dtype[dtype] += count
    print(f"\nfuzz: {sum(counts.values())} graphs in {time.perf_counter() - start:.0f} s on {backend}; "
          f"presets {dict(sorted(by_preset.items()))}; dtypes {dict(sorted(by_dtype.items()))}")


# ---- dynamic shapes: dim 0 of every input is a torch.export.Dim, shapes are SymInt flows ------------------
DYNAMIC_CI_EXAMPLES = 12  # each lowers twice (compile, determinism) and runs 5 input sets: 1 to 2.5 s a graph
DYNAMIC_SHARE = 0.25  # nightly: 500 graphs, 12 minutes on 2 cores (measured)
DYNAMIC_MAX_NODES = 12
# float16 and bfloat16 are left out: their tolerance is eager's own error against the float64 result on the very
# input sets verify compares (reference_atol), and verify draws a dynamic graph's sets at sizes of its own.
DYNAMIC_DTYPES = (torch.float32, torch.int64)
# Without hypothesis's explain phase: it reruns a shrunk failure some 150 times (minutes at a lowering each) to
# list the lines only failing runs reach, which for a graph are torch.export's internals.
FUZZ_PHASES = tuple(phase for phase in Phase if phase is not Phase.explain)


def test_dynamic_random_graph_fuzz(trtcheck_config, request):
    """Random graphs with a dynamic dim 0 (``strategies.dynamic_aten_graphs``), verified with their
    ``dynamic_shapes`` under every model-free preset: the compiled module must match eager at the example's
    size, at the Dim's minimum and maximum and at a random size in range (``check_model`` requires the min and
    max sets), with no invariant violation and no TensorRT segment fallen back to PyTorch. A node a converter
    refuses (a SymInt op it does not handle yet) runs in PyTorch: coverage, not correctness."""
    backend = resolve_backend(trtcheck_config.backend)
    counts: Counter = Counter()

    @settings(max_examples=fuzz_examples(DYNAMIC_CI_EXAMPLES, DYNAMIC_SHARE), deadline=None, database=None, phases=FUZZ_PHASES,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])
    @given(graph=dynamic_aten_graphs(max_nodes=DYNAMIC_MAX_NODES, dtypes=DYNAMIC_DTYPES, seeds=st.integers(0, 2**16)),
           preset=st.sampled_from(MODEL_FREE_PRESETS))
    def check(graph, preset):
        note(f"preset {preset.name}: {preset.settings_for(None)}; dim 0 in {graph.dim_range}, example {graph.batch}")

        def run(model, inputs, **options):
            with preset_applies():
                report = trtcheck.verify(
                    model, inputs, settings=preset.settings_for(None), backend=backend, seed=trtcheck_config.seed,
                    report_dir=trtcheck_config.report_dir, name=f"{request.node.name}-{preset.name}", **options,
                )
            assert not report.partition.fallbacks, f"a TensorRT segment fell back to PyTorch:\n{report}"
            note(f"input sets: {'; '.join(report.input_sets)}")
            return report

        check_model(graph.model, graph.example_inputs, preset.settings_for(None), run,
                    num_inputs=NUM_INPUTS, dynamic_shapes=graph.dynamic_shapes)
        counts[preset.name, str(graph.dtype).removeprefix("torch.")] += 1

    start = time.perf_counter()
    check()
    print(f"\ndynamic fuzz: {sum(counts.values())} graphs in {time.perf_counter() - start:.0f} s on {backend}; "
          f"{dict(sorted(counts.items()))}")
