"""The pytest plugin (registered through the ``pytest11`` entry point): options, parametrization, fixtures.

It stays thin: options become a ``HarnessConfig``, and fixtures are partial applications of the library's
``trtcheck.compile`` and ``trtcheck.verify``. ``--trtcheck`` turns the verification matrix on; without it,
tests marked ``trtcheck`` (and every test using a trtcheck fixture) are skipped, since they compile models.

Downstream::

    def test_mine(trtcheck_verify):
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()).eval()
        trtcheck_verify(model, (torch.randn(1, 3, 32, 32),))

    def test_speed(trtcheck_benchmark):     # eager and stitched, for trtcheck report
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()).eval()
        trtcheck_benchmark(model, (torch.randn(1, 3, 32, 32),), name="conv_relu")

``pytest --trtcheck`` runs it once per selected preset (``--trtcheck-settings``), and with
``--trtcheck-precision fp32,fp16,bf16`` once per preset and precision (``Settings.precision`` on top of each preset).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import trtcheck  # the root, errors and presets import no torch: the plugin loads in every pytest session
from trtcheck.errors import BackendError, SettingsError, UnmatchedOpError
from trtcheck.presets import DEFAULT_PRESETS, resolve_presets
from trtcheck.settings import PRECISIONS
from trtcheck.text import plural

MARKER = "trtcheck"
FIXTURES = frozenset({
    "trtcheck_settings", "trtcheck_compile", "trtcheck_verify", "trtcheck_model", "trtcheck_preset", "trtcheck_model_entry",
    "trtcheck_lowered", "trtcheck_benchmark", "trtcheck_variant", "trtcheck_precision",
})

# option name -> (ini default, type, help); every option is also an ini setting (trtcheck_backend, ...).
OPTIONS: dict[str, tuple[str, Callable[[str], Any], str]] = {
    "backend": ("auto", str, "engine backend: onnxruntime, tensorrt or auto (TensorRT when it and CUDA exist)"),
    "models": ("*", str, "zoo models to verify: names or globs, comma separated (e.g. 'resnet*,seed_lgamma')"),
    "settings": (",".join(DEFAULT_PRESETS), str, "fallback presets, comma separated, or 'all'"),
    "precision": ("fp32", str, "precisions each preset runs at (Settings.precision), comma separated: fp32, fp16, bf16"),
    "examples": ("10", int, "random graphs per random-graph test (hypothesis max_examples)"),
    "report": ("trtcheck-report", str, "directory for failure repros and artifacts"),
    "seed": ("0", int, "seed of the random inputs used for equivalence"),
}
ALLOW_FALLBACKS_HELP = (
    "let a TensorRT segment whose conversion or engine build failed run in PyTorch instead of failing the test "
    "(default: off, since a model that fell back to PyTorch verifies nothing about its conversion)"
)
LOCALIZE_BUDGET_HELP = (
    "seconds a failing equivalence check may spend localizing its mismatch (the culprit op, its converter, its "
    "local and accumulated error: trtcheck.verification.localize); 0 turns it off (default: 60)"
)
STASH = pytest.StashKey["HarnessConfig"]()


@dataclass(frozen=True)
class HarnessConfig:
    """The resolved ``--trtcheck-*`` options of one pytest session."""

    enabled: bool
    backend: str
    models: tuple[str, ...]
    presets: tuple[Any, ...]
    examples: int
    report_dir: Path
    seed: int
    allow_fallbacks: bool = False
    localize_budget: float = 60.0
    precisions: tuple[str, ...] = ("fp32",)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("trtcheck", "trtcheck: TensorRT/PyTorch partition verification")
    group.addoption("--trtcheck", action="store_true", default=False, help="run the trtcheck verification matrix")
    for name, (default, _, help_text) in OPTIONS.items():
        group.addoption(f"--trtcheck-{name}", dest=f"trtcheck_{name}", default=None, help=f"{help_text} (default: {default})")
        parser.addini(f"trtcheck_{name}", help_text, default=default)
    group.addoption(
        "--trtcheck-allow-fallbacks", dest="trtcheck_allow_fallbacks", action="store_true", default=None, help=ALLOW_FALLBACKS_HELP
    )
    parser.addini("trtcheck_allow_fallbacks", ALLOW_FALLBACKS_HELP, type="bool", default=False)
    group.addoption(
        "--trtcheck-localize-budget", dest="trtcheck_localize_budget", default=None, metavar="SECONDS", help=LOCALIZE_BUDGET_HELP
    )
    parser.addini("trtcheck_localize_budget", LOCALIZE_BUDGET_HELP, default="60")


def _option(config: pytest.Config, name: str) -> Any:
    default, kind, _ = OPTIONS[name]
    value = config.getoption(f"trtcheck_{name}")
    if value is None:
        value = config.getini(f"trtcheck_{name}") or default
    try:
        return kind(value)
    except ValueError:
        raise pytest.UsageError(f"--trtcheck-{name}: expected {kind.__name__}, got {value!r}") from None


def _split(value: str) -> list[str]:
    return [part for part in value.replace(",", " ").split() if part]


def _allow_fallbacks(config: pytest.Config) -> bool:
    flag = config.getoption("trtcheck_allow_fallbacks")
    return bool(config.getini("trtcheck_allow_fallbacks")) if flag is None else bool(flag)


def _localize_budget(config: pytest.Config) -> float:
    value = config.getoption("trtcheck_localize_budget")
    value = config.getini("trtcheck_localize_budget") if value is None else value
    try:
        budget = float(value)
    except ValueError:
        raise pytest.UsageError(f"--trtcheck-localize-budget: expected seconds, got {value!r}") from None
    if budget < 0:
        raise pytest.UsageError(f"--trtcheck-localize-budget: expected seconds >= 0 (0 turns localization off), got {value!r}")
    return budget


def _harness_config(config: pytest.Config) -> HarnessConfig:

    try:
        presets = tuple(resolve_presets(_split(_option(config, "settings"))))
    except SettingsError as error:
        raise pytest.UsageError(f"--trtcheck-settings: {error}") from None
    precisions = tuple(dict.fromkeys(_split(_option(config, "precision"))))
    unknown = [p for p in precisions if p not in PRECISIONS]
    if unknown or not precisions:
        named = ", ".join(map(repr, unknown)) or "none given"
        raise pytest.UsageError(f"--trtcheck-precision: {named}; choose from {', '.join(PRECISIONS)}")
    enabled = config.getoption("trtcheck")
    backend = _option(config, "backend")
    if enabled:  # an explicit backend that cannot run here must stop the session, not pass in PyTorch
        from trtcheck.engines import resolve_backend  # deferred: torch only in sessions that use trtcheck

        try:
            resolve_backend(backend)
        except BackendError as error:
            raise pytest.UsageError(f"--trtcheck-backend: {error}") from None
    report = Path(_option(config, "report"))
    return HarnessConfig(
        enabled=enabled,
        backend=backend,
        models=tuple(_zoo_names(_split(_option(config, "models")))),
        presets=presets,
        examples=_option(config, "examples"),
        report_dir=report if report.is_absolute() else config.rootpath / report,
        seed=_option(config, "seed"),
        allow_fallbacks=_allow_fallbacks(config),
        localize_budget=_localize_budget(config),
        precisions=precisions,
    )


def harness(config: pytest.Config) -> HarnessConfig:
    """The session's resolved options, made on first use: sessions that never touch trtcheck never import torch."""
    if STASH not in config.stash:
        config.stash[STASH] = _harness_config(config)
    return config.stash[STASH]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}: part of the verification matrix; runs only with --trtcheck")
    if config.getoption("trtcheck"):
        harness(config)  # fail fast on a bad option
        share_cores_with_other_workers()
        quiet_torch_trace_log()


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--trtcheck`` under pytest-xdist's default ``--dist load`` (what ``-n N`` means), schedule each zoo
    model's tests on one worker (``trtcheck.testing.scheduling``), so that each model is lowered once; an explicit
    other ``--dist`` is left alone."""
    if not config.getoption("trtcheck") or config.getoption("dist", "no") != "load":
        return None
    from trtcheck.testing.scheduling import ModelScheduling  # deferred: xdist is optional

    return ModelScheduling(config, log, harness(config).models)


def quiet_torch_trace_log() -> bool:
    """Keep torch's structured-trace records out of each failing test's "Captured log" section.

    ``torch.export`` logs dozens of empty DEBUG records to the ``torch.__trace`` logger per model (for
    ``tlparse``); it does not propagate, but pytest attaches its capture handlers to every non-propagating
    logger, so a failure printed ~40 blank ``DEBUG torch.__trace`` lines under the report. Without
    ``TORCH_TRACE`` (or ``TORCH_DTRACE``, ``TORCH_COMPILE_DEBUG``) nothing else reads them, so the logger is
    disabled; with one set it is left alone. Returns whether it was disabled.
    """
    wanted = os.environ.get("TORCH_TRACE") or os.environ.get("TORCH_DTRACE") or os.environ.get("TORCH_COMPILE_DEBUG", "0") != "0"
    if not wanted:
        logging.getLogger("torch.__trace").disabled = True
    return not wanted


def share_cores_with_other_workers() -> int | None:
    """Under pytest-xdist, give this worker its share of the cores for PyTorch (and so for engines).

    Each worker process would otherwise run PyTorch (and each ONNX Runtime session, which follows PyTorch's
    thread count) on every core: ``-n 2`` on 2 cores then runs 4 compute threads whose OpenMP barriers
    wait on each other across processes. Returns the threads set, or None outside xdist workers.
    """
    import os

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if "PYTEST_XDIST_WORKER" not in os.environ or workers <= 1:
        return None
    import torch

    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    threads = max(1, cores // workers)
    torch.set_num_threads(threads)
    return threads


CHECKED_PROPERTY = "trtcheck_checked"
FIGURES_PROPERTY = "trtcheck_figures"  # a passing verification's worst max abs error and fallbacks, for the run's last lines


def _quiet_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Under ``-q`` (or ``--no-header``) pytest shows no header, and without ``-rs`` no skip reasons: the trtcheck
    header lines and each reason trtcheck tests were skipped for (run with --trtcheck; a preset that does not
    apply) are then printed at the end instead, so a quiet run still says what ran and what did not."""
    if config.option.verbose < 0 or config.getoption("no_header", False):
        for line in pytest_report_header(config) or []:
            terminalreporter.write_line(line)
    if set(getattr(terminalreporter, "reportchars", "")) & {"s", "a", "A"}:
        return  # pytest lists the skips itself
    reasons: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        if MARKER in getattr(report, "keywords", {}) and isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
            reason = str(report.longrepr[2]).removeprefix("Skipped: ")
            reasons[reason] = reasons.get(reason, 0) + 1
    for reason, count in reasons.items():
        terminalreporter.write_line(f"trtcheck: {count} skipped: {reason}")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """What each passing ``trtcheck_verify`` call compared (``VerificationReport.checked``): a bare PASSED said
    nothing of the input sets, the worst error and cosine per output, or the engines it checked. Under ``-q`` one
    line says how to see it (quiet asks for less, and the matrix's section alone is 1,500 lines); the run's
    five-second summary (``run_summary``) comes last either way."""
    checked = [
        (report.nodeid, lines)
        for report in terminalreporter.stats.get("passed", [])
        for name, lines in getattr(report, "user_properties", ())
        if name == CHECKED_PROPERTY
    ]
    _quiet_summary(terminalreporter, config)
    if not checked:
        return
    if config.option.verbose < 0:  # -q: the matrix's 200 verifications would print 1,500 lines above the summary
        terminalreporter.write_line(f"trtcheck: {plural(len(checked), 'passing verification')}: what each compared "
                                    "is listed without -q")
    else:
        terminalreporter.section("trtcheck: what passing verifications checked")
        for nodeid, lines in checked:
            terminalreporter.line(nodeid)
            for line in lines:
                terminalreporter.line(f"  {line}")
    for line in run_summary(terminalreporter.stats):
        terminalreporter.write_line(line, bold=True)


def run_summary(stats: Mapping[str, list[Any]]) -> list[str]:
    """The lines a user reads in five seconds at the end of a matrix run: how many verifications passed, failed and
    were skipped, fallbacks, the worst error of a passing one and the slowest test."""
    passed = [
        (report, figures) for report in stats.get("passed", []) if report.when == "call"
        for name, figures in getattr(report, "user_properties", ()) if name == FIGURES_PROPERTY
    ]
    if not passed:
        return []
    failed = [r for r in stats.get("failed", []) if getattr(r, "when", "call") == "call"]
    skipped = len(stats.get("skipped", []))
    worst_report, worst = max(passed, key=lambda item: item[1]["max_abs"])
    slowest = max((report for report, _ in passed), key=lambda report: report.duration)
    fallbacks = sum(figures["fallbacks"] for _, figures in passed)
    return [
        f"trtcheck: {plural(len(passed), 'verification')} passed, {len(failed)} failed, {skipped} skipped; "
        f"fallbacks accepted: {fallbacks}",
        f"trtcheck: worst max abs error of a pass {worst['max_abs']:.3g} ({worst_report.nodeid}); "
        f"slowest {slowest.duration:.1f} s ({slowest.nodeid})",
    ]


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    """With ``--trtcheck``: which engine backend runs (and why, for ``auto``), the versions and the device, and
    the presets, saying which apply to zoo models only (a user's own model has no zoo submodule to force)."""
    if not config.getoption("trtcheck"):
        return None
    from trtcheck.engines import describe_backend  # deferred: torch only in sessions that use trtcheck

    options = harness(config)
    lines = [f"trtcheck: {line}" for line in describe_backend(options.backend).splitlines()]
    zoo_only = [p.name for p in options.presets if p.settings_for(None) is None]
    lines.append(f"trtcheck: presets: {', '.join(p.name for p in options.presets)}" + (
        f" ({', '.join(zoo_only)}: zoo models only, it forces each zoo model's fallback_module; your own models "
        "run under the others)" if zoo_only else ""))
    if options.precisions != ("fp32",):
        lines.append(f"trtcheck: precisions: {', '.join(options.precisions)} (each preset runs at each)")
    if options.allow_fallbacks:
        lines.append("trtcheck: fallbacks to PyTorch allowed (--trtcheck-allow-fallbacks)")
    return lines


def _zoo_names(patterns: list[str]) -> list[str]:
    import trtcheck_zoo as models  # deferred: torch only in sessions that use trtcheck

    names: list[str] = []
    for pattern in patterns:
        matched = models.names(pattern)
        if not matched:
            raise pytest.UsageError(f"--trtcheck-models: {pattern!r} matches no zoo model; known: {', '.join(models.names())}")
        names += [name for name in matched if name not in names]
    return names


def _zoo_entries(names: tuple[str, ...]) -> list[Any]:
    import trtcheck_zoo as models  # deferred: torch only in sessions that use trtcheck

    return [models.get(name) for name in names]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    wants_model = "trtcheck_model_entry" in metafunc.fixturenames
    wants_preset = "trtcheck_preset" in metafunc.fixturenames
    if not (wants_model or wants_preset):
        return
    options = harness(metafunc.config)
    if wants_model and wants_preset:
        pairs = [
            (entry, preset)
            for entry in _zoo_entries(options.models)
            for preset in options.presets
            if preset.settings_for(entry.fallback_module) is not None
        ]
        ids = [f"{entry.name}-{preset.name}" for entry, preset in pairs]
        metafunc.parametrize(("trtcheck_model_entry", "trtcheck_preset"), pairs, ids=ids)
    elif wants_model:
        entries = _zoo_entries(options.models)
        metafunc.parametrize("trtcheck_model_entry", entries, ids=[e.name for e in entries])
    elif wants_preset:  # a user's own model: presets that need a zoo submodule do not apply
        presets = [p for p in options.presets if p.settings_for(None) is not None]
        metafunc.parametrize("trtcheck_preset", presets, ids=[p.name for p in presets])
    if "trtcheck_precision" in metafunc.fixturenames and options.precisions != ("fp32",):  # fp32 alone: ids stay as they were
        metafunc.parametrize("trtcheck_precision", options.precisions)
    if "trtcheck_variant" in metafunc.fixturenames:  # after the presets: a group's two variants run back to back
        from trtcheck.benchmarking import VARIANTS  # deferred: torch only in sessions that use trtcheck

        metafunc.parametrize("trtcheck_variant", VARIANTS)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = None if config.getoption("trtcheck") else pytest.mark.skip(reason="trtcheck verification matrix: run with --trtcheck")
    for item in items:
        if FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(MARKER)
        if skip is not None and item.get_closest_marker(MARKER) is not None:
            item.add_marker(skip)


@pytest.fixture
def trtcheck_config(request: pytest.FixtureRequest) -> HarnessConfig:
    """The session's ``--trtcheck-*`` options."""
    return harness(request.config)


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
    """The current ``Settings.precision`` (parametrized over ``--trtcheck-precision`` when it names more than fp32)."""
    return getattr(request, "param", "fp32")


@pytest.fixture
def trtcheck_settings(trtcheck_preset: Any, trtcheck_precision: str, request: pytest.FixtureRequest) -> Any:
    """The ``trtcheck.Settings`` of the current preset (parametrized over ``--trtcheck-settings``) at the current
    precision (``--trtcheck-precision``), with the nodes a zoo entry needs in float32 there (``ZooEntry.fp32_nodes``)."""
    entry = request.getfixturevalue("trtcheck_model_entry") if "trtcheck_model_entry" in request.fixturenames else None
    settings = trtcheck_preset.settings_for(entry.fallback_module if entry is not None else None)
    if settings is not None and trtcheck_precision != settings.precision:
        kept = list(entry.fp32_nodes.get(trtcheck_precision, ())) if entry is not None else []
        settings = dataclasses.replace(settings, precision=trtcheck_precision, fp32_nodes=kept)  # a zoo entry's own
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
def trtcheck_compile(trtcheck_settings: Any, trtcheck_config: HarnessConfig) -> Callable[..., Any]:
    """``trtcheck.compile`` with the current preset's settings and the session's backend."""
    return _preset_applies(functools.partial(trtcheck.compile, settings=trtcheck_settings, backend=trtcheck_config.backend))


@pytest.fixture
def trtcheck_verify(trtcheck_settings: Any, trtcheck_config: HarnessConfig, request: pytest.FixtureRequest) -> Callable[..., Any]:
    """``trtcheck.verify`` with the current preset, backend, seed, ``--trtcheck-allow-fallbacks`` and
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
        )
        options.update(overrides)
        report = trtcheck.verify(model, example_inputs, **options)
        # user_properties travel with the test's report, from xdist workers too, to the end-of-run summary
        request.node.user_properties.append((CHECKED_PROPERTY, report.checked()))
        worst = max((output.max_abs for comparison in report.comparisons for output in comparison.outputs), default=0.0)
        request.node.user_properties.append((FIGURES_PROPERTY, {"max_abs": worst, "fallbacks": len(report.partition.fallbacks)}))
        return report

    return _preset_applies(run)


@pytest.fixture
def trtcheck_variant(request: pytest.FixtureRequest) -> str:
    """``"eager"`` or ``"stitched"``: which side of a ``trtcheck_benchmark`` group this test times."""
    return request.param


@pytest.fixture
def trtcheck_benchmark(
    trtcheck_settings: Any, trtcheck_preset: Any, trtcheck_config: HarnessConfig, trtcheck_variant: str, benchmark: Any,
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
    from trtcheck.testing import timing  # deferred: torch only in sessions that use trtcheck

    def run(model: Any, example_inputs: Any, *, name: str | None = None, **compile_options: Any) -> Any:
        label = name or request.node.originalname
        # one report group per preset and precision (--trtcheck-precision): "min_block_size_1-fp16" beside fp32's
        precision = getattr(trtcheck_settings, "precision", "fp32")
        preset = trtcheck_preset.name if precision == "fp32" else f"{trtcheck_preset.name}-{precision}"
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
