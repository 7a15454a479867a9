"""Timing a model's eager and stitched variants with pytest-benchmark, one group per model and preset.

The zoo's benchmarks (``suites/matrix/test_zoo_benchmarks.py``) and the ``trtcheck_benchmark`` fixture a
downstream suite uses both time through here, so a downstream ``--benchmark-json`` file carries the same
``extra_info`` (``trtcheck.benchmarking.extra_info``) and profile as the zoo's and ``trtcheck report`` reads
it the same way.

Engines are built before timing and warmed up by pytest-benchmark itself (``benchmark.pedantic``'s
``warmup_rounds``: the first calls initialize kernels lazily, 57 ms against 0.1 ms measured); each variant
then runs ``ROUNDS`` timed rounds of one call (more with ``--benchmark-min-rounds``; ``--benchmark-max-time``
does not apply to pedantic runs). On CUDA each call is synchronized, since pytest-benchmark's clock is the
host's. The stitched variant also records where its time goes (``trtcheck.profile``) under ``"profile"``.
Denormals are flushed while timing: random-weight models produce denormal activations that slow eager
PyTorch on x86 CPUs about 50x (measured on resnet18), which would measure the CPU's denormal handling
instead of partitioning (recorded as ``denormals_flushed``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import torch

from trtcheck.benchmarking import extra_info, flush_denormals, preset_label
from trtcheck.compiler.pipeline import compile as compile_model
from trtcheck.errors import PartitionError
from trtcheck.runtime.module import CompiledModule
from trtcheck.runtime.profiling import profile as profile_call
from trtcheck.settings import Settings
from trtcheck.verification.equivalence import Comparison
from trtcheck.verification.inputs import cloned
from trtcheck.verification.judge import Judge

__all__ = ["ROUNDS", "WARMUP", "Compiled", "assert_timed_result_holds", "benchmark_variant", "compile_once", "equivalence_info",
           "synchronized"]

WARMUP = 3  # rounds pytest-benchmark runs untimed before timing
ROUNDS = 20  # timed rounds of one call each, at least; --benchmark-min-rounds raises it


@dataclass
class Compiled:
    """One model compiled under one preset, shared by the eager and stitched benchmarks of its group.

    ``stitched`` is the ``PartitionError`` when the preset cannot compile the model (``full_compilation`` on a
    model with an unsupported op): there is nothing to time then, and both variants skip with it.
    ``comparison`` is eager against stitched on the example inputs, made right after compiling: timing calls
    then advance a stateful model's buffers (a call counter) by different numbers of calls on each side.
    """

    model: torch.nn.Module
    inputs: tuple[Any, ...]
    stitched: CompiledModule | PartitionError
    comparison: Comparison | None
    precision: str = "fp32"  # what the judge judged at ("tf32" for Settings.tf32), in ``extra_info``


_last: dict[Hashable, Compiled] = {}  # the last group compiled: its eager and stitched tests run back to back


def compile_once(
    key: Hashable,
    build: Callable[[], tuple[torch.nn.Module, tuple[Any, ...]]],
    settings: Settings,
    backend: str,
    tolerances: Callable[[torch.nn.Module, tuple[Any, ...]], dict[str, Any]] | None = None,
    **compile_options: Any,
) -> Compiled:
    """The group ``key``'s model compiled, once for its two variants: only the last group is kept, since a
    group's variants run one after the other and a compiled zoo model holds hundreds of MB of engines.

    ``build`` makes ``(model, example_inputs)``; ``tolerances(model, inputs)`` the ``compare_outputs``
    tolerances (default: per dtype); ``compile_options`` go to ``trtcheck.compile`` (``lowered=``, ...). Outputs are
    judged as verify judges them (``Judge.of(settings)``: beyond the tolerances against float64, below float32 against
    eager at that precision).
    """
    if key not in _last:
        _last.clear()
        model, inputs = build()
        inputs = tuple(inputs)
        try:
            stitched = compile_model(model, inputs, settings, backend, **compile_options)
        except PartitionError as error:
            _last[key] = Compiled(model, inputs, error, None, Judge.of(settings).precision)
            return _last[key]
        # no_grad, not inference_mode: a model that runs autograd inside forward (a force field) enables grad there.
        with flush_denormals(), torch.no_grad():
            judge = Judge.of(settings, **(tolerances(model, inputs) if tolerances is not None else {}))
            judge = judge.for_graph(stitched.partition.graph_module)  # a quantized model: verify's rule for it
            actual = stitched(*cloned(inputs))  # each side its own copy: a model may update an input in place (a KV cache)
            expected = model(*cloned(inputs))
            comparison = judge.compare(expected, actual)
            judge.judge_call(comparison, model, inputs, {}, expected, actual)  # no reference: the tolerances decide
        _last[key] = Compiled(model, inputs, stitched, comparison, judge.precision)
    return _last[key]


def equivalence_info(comparison: Comparison) -> dict[str, Any]:
    """What a benchmark records of eager against stitched: passed, the largest abs error, the lowest cosine."""
    return {
        "passed": comparison.passed,
        "max_abs": max((o.max_abs for o in comparison.outputs), default=0.0),
        "cosine": min((o.cosine for o in comparison.outputs), default=1.0),
    }


def synchronized(fn: Callable[..., Any], inputs: tuple[Any, ...]) -> Callable[[], Any]:
    """``fn(*inputs)`` as a timed call: on CUDA it waits for the device, since pytest-benchmark times the host."""
    if any(isinstance(x, torch.Tensor) and x.is_cuda for x in inputs):
        def timed() -> Any:
            result = fn(*inputs)
            torch.cuda.synchronize()
            return result
        return timed
    return lambda: fn(*inputs)


def benchmark_variant(
    benchmark: Any, compiled: Compiled, *, model: str, preset: str, variant: str, backend: str, min_rounds: int | None = None
) -> None:
    """Time one variant (``"eager"`` or ``"stitched"``) of ``compiled`` with pytest-benchmark's ``benchmark``
    fixture, in the group ``{model}-{preset}`` (``{model}-{preset}-{precision}`` below fp32), recording
    ``trtcheck.benchmarking.extra_info``.

    The caller skips first when ``compiled.stitched`` is a ``PartitionError``, and asserts
    ``compiled.comparison.passed`` after: a wrong result is timed and recorded (the report shows it as a
    failure), then fails the test.
    """
    stitched = compiled.stitched
    assert isinstance(stitched, CompiledModule) and compiled.comparison is not None, "nothing to time: the preset did not compile"
    benchmark.group = f"{model}-{preset_label(preset, compiled.precision)}"
    with flush_denormals() as flushed, torch.no_grad():
        # Profiling runs 20 calls: only worth it when timings are kept (pytest-benchmark is off under xdist).
        profile = profile_call(stitched, compiled.inputs).to_dict() if variant == "stitched" and not benchmark.disabled else None
        benchmark.extra_info.update(
            extra_info(model, preset, variant, backend, stitched, equivalence_info(compiled.comparison),
                       denormals_flushed=flushed, profile=profile, precision=compiled.precision)
        )
        fn = synchronized(compiled.model if variant == "eager" else stitched, compiled.inputs)
        benchmark.pedantic(fn, warmup_rounds=WARMUP, rounds=max(ROUNDS, min_rounds or 0), iterations=1)


def assert_timed_result_holds(compiled: Compiled, label: str, allow_fallbacks: bool) -> None:
    """After timing: a stitched module whose outputs differ from eager, or that fell back to PyTorch, fails.

    Both are timed and recorded first (the report shows them as failures), but neither is a pass.
    """
    __tracebackhide__ = True  # the failure is the message, not this function
    stitched = compiled.stitched
    assert isinstance(stitched, CompiledModule) and compiled.comparison is not None
    assert compiled.comparison.passed, f"{label}: the stitched module's outputs differ from eager's\n{compiled.comparison}"
    fallbacks = stitched.partition.fallbacks
    assert allow_fallbacks or not fallbacks, (
        f"{label}: {len(fallbacks)} TensorRT segment(s) fell back to PyTorch: {fallbacks} (--trtcheck-allow-fallbacks accepts this)"
    )
