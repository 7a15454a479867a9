"""The plugin's fixtures: partial applications of the library's ``trtcheck.compile`` and ``trtcheck.verify``.

``trtcheck_verify`` and ``trtcheck_compile`` apply the current preset's settings (``trtcheck_settings``: the preset
``pytest_generate_tests`` parametrizes ``trtcheck_preset`` over, at ``trtcheck_precision``) and the session's
backend, seed and budgets (``trtcheck_config``); ``trtcheck_benchmark`` times a user's model as the zoo's benchmarks
time theirs; ``trtcheck_model`` and ``trtcheck_lowered`` serve the zoo's entries (``trtcheck_model_entry``). The
plugin module registers this one (``pytest_plugins``). Nothing here imports torch before a fixture runs: the plugin
loads in every pytest session.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import pytest

import trtcheck  # the root, errors and presets import no torch: the plugin loads in every pytest session
from trtcheck.errors import UnmatchedOpError
from trtcheck.testing.session import FIXTURES, TrtcheckOptions, TrtcheckSession, session_of  # noqa: F401 - FIXTURES: its old home


@pytest.fixture
def trtcheck_config(request: pytest.FixtureRequest) -> TrtcheckOptions:
    """The session's ``--trtcheck-*`` options."""
    return session_of(request.config).options


@pytest.fixture
def trtcheck_model(trtcheck_model_entry: Any) -> tuple[Any, tuple]:
    """A freshly built zoo model and its example inputs (parametrized over ``--trtcheck-models``)."""
    return trtcheck_model_entry.build()


@pytest.fixture(scope="session")
def _trtcheck_lowering_cache() -> Any:
    from trtcheck.lowering.export import LoweringCache  # deferred: torch only in sessions that use trtcheck

    return LoweringCache(twice=False)  # the slow tier lowers each zoo model twice (suites/lowering)


class _LatestEagerCache:
    """One ``EagerCache`` per zoo model, for the latest model only: the matrix runs a model's presets back to back
    on one worker (``scheduling``), and an older model's cache would only hold its weights' snapshot in memory."""

    def __init__(self) -> None:
        self.name: str | None = None
        self.cache: Any = None

    def get(self, name: str) -> Any:
        from trtcheck.verification.eager_cache import EagerCache  # deferred: torch only in sessions that use trtcheck

        if name != self.name:
            self.name, self.cache = name, EagerCache()
        return self.cache


@pytest.fixture(scope="session")
def _trtcheck_eager_caches() -> _LatestEagerCache:
    return _LatestEagerCache()


@pytest.fixture
def trtcheck_lowered(trtcheck_model_entry: Any, trtcheck_settings: Any, _trtcheck_lowering_cache: Any) -> Any:
    """The zoo model's lowered graph, made once per process (per xdist worker) and shared by every preset that
    keeps the same ops whole: pass it as ``lowered=`` to ``trtcheck_verify`` / ``trtcheck_compile``. Lowering is
    most of compile time. Verify checks that partitioning and conversion from it are deterministic; that lowering
    itself is (two fresh lowerings alike) is checked by this repository's slow tier for every zoo model, not here."""
    from trtcheck.names import resolve_ops  # deferred: torch only in sessions that use trtcheck

    entry = trtcheck_model_entry
    keep = resolve_ops(trtcheck_settings.torch_executed_ops)
    return _trtcheck_lowering_cache.get(entry.name, entry.build, getattr(entry, "dynamic_shapes", None), keep)


@pytest.fixture
def trtcheck_precision(request: pytest.FixtureRequest) -> str:
    """The current precision, one of ``PLUGIN_PRECISIONS``: a ``Settings.precision``, or "tf32" (fp32 with
    ``Settings.tf32``); parametrized over ``--trtcheck-precision`` when it names more than fp32."""
    return getattr(request, "param", "fp32")


@pytest.fixture
def trtcheck_settings(trtcheck_preset: Any, trtcheck_precision: str, request: pytest.FixtureRequest) -> Any:
    """The ``trtcheck.Settings`` of the current preset (parametrized over ``--trtcheck-settings``) at the current
    precision (``--trtcheck-precision``: ``settings_at``), with the nodes a zoo entry needs in float32 there
    (``ZooEntry.fp32_nodes``)."""
    entry = request.getfixturevalue("trtcheck_model_entry") if "trtcheck_model_entry" in request.fixturenames else None
    settings = trtcheck_preset.settings_for(entry.fallback_module if entry is not None else None)
    if settings is None:
        return None
    return settings_at(settings, trtcheck_precision, entry.fp32_nodes.get(trtcheck_precision, ()) if entry is not None else ())


def settings_at(settings: trtcheck.Settings, precision: str, fp32_nodes: Any = ()) -> trtcheck.Settings:
    """A preset's ``settings`` at one of ``--trtcheck-precision``'s precisions (``PLUGIN_PRECISIONS``): "fp16"/"bf16"
    set ``Settings.precision`` with ``fp32_nodes`` (a zoo entry's own, for that precision), "tf32" is
    ``precision="fp32"`` with ``tf32=True`` (what TensorRT and Torch-TensorRT deploy by default: not a precision of
    its own but float32 with TF32 matmuls and convolutions), "fp32" keeps the preset's. ``settings`` is not changed."""
    if precision == "tf32":
        return dataclasses.replace(settings, precision="fp32", fp32_nodes=[], tf32=True)
    if precision != settings.precision:
        return dataclasses.replace(settings, precision=precision, fp32_nodes=list(fp32_nodes))
    return settings


def _preset_applies(call: Callable[..., Any]) -> Callable[..., Any]:
    """``call`` (compile or verify), where a preset forcing an op the model does not call is skipped with the
    reason: presets are generic (``torch_relu`` meets models without a relu), and trtcheck refuses a forced op
    that matches nothing (``UnmatchedOpError``) rather than let it force nothing silently."""

    @functools.wraps(call)
    def run(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # a failing test shows its own line and trtcheck's report, not trtcheck's frames
        try:
            return call(*args, **kwargs)
        except UnmatchedOpError as error:
            pytest.skip(f"the preset does not apply to this model: {str(error).removeprefix('torch_executed_ops: ').split('. ')[0]}")

    return run


@pytest.fixture
def trtcheck_compile(trtcheck_settings: Any, trtcheck_config: TrtcheckOptions) -> Callable[..., Any]:
    """``trtcheck.compile`` with the current preset's settings and the session's backend."""
    return _preset_applies(functools.partial(trtcheck.compile, settings=trtcheck_settings, backend=trtcheck_config.backend,
                                             frontend=trtcheck_config.frontend))


@pytest.fixture
def trtcheck_verify(trtcheck_settings: Any, trtcheck_config: TrtcheckOptions, request: pytest.FixtureRequest) -> Callable[..., Any]:
    """``trtcheck.verify`` with the current preset, backend, seed, frontend, ``--trtcheck-allow-fallbacks`` and
    ``--trtcheck-localize-budget``; a failure writes a repro to the report dir, its message localizes a mismatch.

    A zoo model's presets share eager's outputs (``verify(eager_cache=)``): a zoo entry builds the same model every
    time, and the cache still checks weights and inputs bitwise. A user's own model gets no shared cache: two of its
    tests may differ in what neither its weights nor its repr show."""
    entry = request.getfixturevalue("trtcheck_model_entry") if "trtcheck_model_entry" in request.fixturenames else None
    eager_cache = request.getfixturevalue("_trtcheck_eager_caches").get(entry.name) if entry is not None else None

    def run(model: Any, example_inputs: Any, **overrides: Any) -> Any:
        __tracebackhide__ = True
        options = dict(
            settings=trtcheck_settings,
            backend=trtcheck_config.backend,
            seed=trtcheck_config.seed,
            report_dir=trtcheck_config.report_dir,
            name=request.node.name,
            allow_fallbacks=trtcheck_config.allow_fallbacks,
            localize_budget=trtcheck_config.localize_budget,
            eager_cache=eager_cache,
            frontend=trtcheck_config.frontend,
        )
        options.update(overrides)
        report = trtcheck.verify(model, example_inputs, **options)
        TrtcheckSession.record(request.node, report)  # travels with the test's report, from xdist workers too
        return report

    return _preset_applies(run)


@pytest.fixture
def trtcheck_variant(request: pytest.FixtureRequest) -> str:
    """``"eager"`` or ``"stitched"``: which side of a ``trtcheck_benchmark`` group this test times."""
    return request.param


@pytest.fixture
def trtcheck_benchmark(
    trtcheck_settings: Any, trtcheck_preset: Any, trtcheck_config: TrtcheckOptions, trtcheck_variant: str, benchmark: Any,
    request: pytest.FixtureRequest,
) -> Callable[..., Any]:
    """Time the user's own model as the zoo's benchmarks time theirs: ``trtcheck_benchmark(model, example_inputs)``.

    The test runs once per preset and variant (eager, stitched); both land in the pytest-benchmark group
    ``{name}-{preset}`` with ``trtcheck.benchmarking.extra_info`` and the stitched call's profile, so
    ``pytest --trtcheck -p no:xdist --benchmark-json=out.json`` then ``trtcheck report out.json --out rep/``
    report it. ``name`` defaults to the test's name; ``compile_options`` go to ``trtcheck.compile``. The model
    is compiled once per group; stitched outputs that differ from eager, or a fallback (unless
    ``--trtcheck-allow-fallbacks``), fail the test after timing. Returns the compiled module.
    """
    from trtcheck.benchmarking import preset_label  # deferred: torch only in sessions that use trtcheck
    from trtcheck.testing import timing  # deferred: torch only in sessions that use trtcheck
    from trtcheck.verification.judge import judged_precision  # deferred: torch only in sessions that use trtcheck

    def run(model: Any, example_inputs: Any, *, name: str | None = None, **compile_options: Any) -> Any:
        label = name or request.node.originalname
        # one report group per preset and precision (--trtcheck-precision): "min_block_size_1-fp16" beside fp32's
        preset = preset_label(trtcheck_preset.name, judged_precision(trtcheck_settings))  # "-tf32" for Settings.tf32
        params = getattr(getattr(request.node, "callspec", None), "params", {})
        # One group per test, preset and the user's own parameters: the eager and the stitched test share it.
        key = (request.node.path, request.node.originalname, label,
               tuple((k, id(v)) for k, v in sorted(params.items()) if k != "trtcheck_variant"), trtcheck_config.backend)
        result = timing.compile_once(key, lambda: (model, tuple(example_inputs)), trtcheck_settings, trtcheck_config.backend,
                                     **compile_options)
        if isinstance(result.stitched, trtcheck.PartitionError):
            reason = str(result.stitched).splitlines()[0]
            pytest.skip(f"nothing to time: {label} cannot be compiled under {preset} ({reason})")
        timing.benchmark_variant(benchmark, result, model=label, preset=preset, variant=trtcheck_variant,
                                 backend=trtcheck_config.backend, min_rounds=request.config.getoption("benchmark_min_rounds"))
        __tracebackhide__ = True
        timing.assert_timed_result_holds(result, f"{label}/{preset}", trtcheck_config.allow_fallbacks)
        return result.stitched

    return _preset_applies(run)
