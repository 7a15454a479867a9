"""The trtcheck session: one pytest run's resolved ``--trtcheck-*`` options, and what its tests collect.

``TrtcheckSession`` is made once per run, on first use (``session_of``), and kept in the run's ``config.stash``:
a run that never touches trtcheck never resolves its options, and so never imports torch (the zoo's names are
resolved through ``trtcheck_zoo``). What the tests collect, each passing ``trtcheck_verify`` call's checked lines and
figures, travels as ``user_properties`` of the test's report, which pytest-xdist carries from the workers to the
controller; ``TrtcheckSession.record`` writes them and ``checked`` / ``figures`` read them back, so their format is
this module's alone. The terminal summary (``summary``) prints them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from trtcheck.errors import BackendError, SettingsError
from trtcheck.presets import DEFAULT_PRESETS, resolve_presets
from trtcheck.settings import PRECISIONS

PLUGIN_PRECISIONS: tuple[str, ...] = (*PRECISIONS, "tf32")
"""What ``--trtcheck-precision`` takes: each ``Settings.precision``, and "tf32": ``Settings(precision="fp32",
tf32=True)`` (``fixtures.settings_at``), judged against eager under TF32 rounding; its ids and report groups end in
``-tf32`` as fp16's end in ``-fp16``."""

# option name -> (ini default, type, help); every option is also an ini setting (trtcheck_backend, ...).
OPTIONS: dict[str, tuple[str, Callable[[str], Any], str]] = {
    "backend": ("auto", str, "engine backend: onnxruntime, tensorrt or auto (TensorRT when it and CUDA exist)"),
    "models": ("*", str, "zoo models to verify: names or globs, comma separated (e.g. 'resnet*,seed_lgamma')"),
    "settings": (",".join(DEFAULT_PRESETS), str, "fallback presets, comma separated, or 'all'"),
    "precision": ("fp32", str, "precisions each preset runs at, comma separated: fp32, fp16, bf16 (Settings.precision), "
                  "tf32 (fp32 with Settings.tf32)"),
    "examples": ("10", int, "random graphs per random-graph test (hypothesis max_examples)"),
    "report": ("trtcheck-report", str, "directory for failure repros and artifacts"),
    "seed": ("0", int, "seed of the random inputs used for equivalence"),
    "frontend": ("auto", str, "how a model becomes graphs: auto (torch.export, and torch.compile's graphs where export "
                 "refuses the model), export or compile (docs/graph-breaks.md)"),
}
ALLOW_FALLBACKS_HELP = (
    "let a TensorRT segment whose conversion or engine build failed run in PyTorch instead of failing the test "
    "(default: off, since a model that fell back to PyTorch verifies nothing about its conversion)"
)
LOCALIZE_BUDGET_HELP = (
    "seconds a failing equivalence check may spend localizing its mismatch (the culprit op, its converter, its "
    "local and accumulated error: trtcheck.verification.localize); 0 turns it off (default: 60)"
)

MARKER = "trtcheck"  # the marker of every test the plugin runs only with --trtcheck

CHECKED_PROPERTY = "trtcheck_checked"
FIGURES_PROPERTY = "trtcheck_figures"  # a passing verification's worst max abs error and fallbacks, for the run's last lines


@dataclass(frozen=True)
class TrtcheckOptions:
    """The resolved ``--trtcheck-*`` options of one pytest session (``session_of(config).options``)."""

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
    frontend: str = "auto"



HarnessConfig = TrtcheckOptions
"""The former name of ``TrtcheckOptions``, kept for suites that import it."""

FIXTURES = frozenset({
    "trtcheck_settings", "trtcheck_compile", "trtcheck_verify", "trtcheck_model", "trtcheck_preset", "trtcheck_model_entry",
    "trtcheck_lowered", "trtcheck_benchmark", "trtcheck_variant", "trtcheck_precision",
})
"""The fixtures that make a test part of the verification matrix (marked ``trtcheck``: run only with ``--trtcheck``);
``trtcheck_preset`` and ``trtcheck_model_entry`` are parametrized by the plugin's ``pytest_generate_tests``. Defined here, not
beside the fixtures, so that the plugin need not import ``fixtures``: pytest imports that module itself (``pytest_plugins``),
and a module imported before pytest does cannot have its asserts rewritten (a ``PytestAssertRewriteWarning`` in every
run, an error under ``filterwarnings = error``)."""


class TrtcheckSession:
    """One pytest run's trtcheck state: ``options`` (its ``TrtcheckOptions``), and the reading and writing of what its
    tests collect (module docstring)."""

    def __init__(self, options: TrtcheckOptions) -> None:
        self.options = options

    @staticmethod
    def record(node: pytest.Item, report: Any) -> None:
        """Keep what a passing ``verify`` call (``report``, a ``VerificationReport`` or ``GraphBreakReport``) checked on the test ``node``:
        its ``checked()`` lines, and its worst max abs error and fallbacks for the run's last lines."""
        node.user_properties.append((CHECKED_PROPERTY, report.checked()))
        worst = max((output.max_abs for comparison in report.comparisons for output in comparison.outputs), default=0.0)
        node.user_properties.append((FIGURES_PROPERTY, {"max_abs": worst, "fallbacks": len(report.fallbacks())}))

    @staticmethod
    def checked(stats: Mapping[str, list[Any]]) -> list[tuple[str, list[str]]]:
        """Each passing test's node id and the lines its verifications checked, from the terminal reporter's
        ``stats`` (every report, from xdist workers too)."""
        return [
            (report.nodeid, lines)
            for report in stats.get("passed", [])
            for name, lines in getattr(report, "user_properties", ())
            if name == CHECKED_PROPERTY
        ]

    @staticmethod
    def figures(stats: Mapping[str, list[Any]]) -> list[tuple[Any, dict[str, Any]]]:
        """Each passing verification's test report (its call) and figures (``max_abs``, ``fallbacks``)."""
        return [
            (report, figures) for report in stats.get("passed", []) if report.when == "call"
            for name, figures in getattr(report, "user_properties", ()) if name == FIGURES_PROPERTY
        ]


STASH = pytest.StashKey[TrtcheckSession]()


def session_of(config: pytest.Config) -> TrtcheckSession:
    """The run's session, made on first use: sessions that never touch trtcheck never import torch."""
    if STASH not in config.stash:
        config.stash[STASH] = TrtcheckSession(_resolved_options(config))
    return config.stash[STASH]


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


def _resolved_options(config: pytest.Config) -> TrtcheckOptions:
    try:
        presets = tuple(resolve_presets(_split(_option(config, "settings"))))
    except SettingsError as error:
        raise pytest.UsageError(f"--trtcheck-settings: {error}") from None
    precisions = tuple(dict.fromkeys(_split(_option(config, "precision"))))
    unknown = [p for p in precisions if p not in PLUGIN_PRECISIONS]
    if unknown or not precisions:
        named = ", ".join(map(repr, unknown)) or "none given"
        raise pytest.UsageError(f"--trtcheck-precision: {named}; choose from {', '.join(PLUGIN_PRECISIONS)}")
    enabled = config.getoption("trtcheck")
    backend = _option(config, "backend")
    if enabled:  # an explicit backend that cannot run here must stop the session, not pass in PyTorch
        from trtcheck.engines import resolve_backend  # deferred: torch only in sessions that use trtcheck

        try:
            resolve_backend(backend)
        except BackendError as error:
            raise pytest.UsageError(f"--trtcheck-backend: {error}") from None
    frontend = _option(config, "frontend")
    if frontend not in ("auto", "export", "compile"):
        raise pytest.UsageError(f"--trtcheck-frontend: {frontend!r}; choose from auto, export, compile")
    report = Path(_option(config, "report"))
    return TrtcheckOptions(
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
        frontend=frontend,
    )


def _zoo_names(patterns: list[str]) -> list[str]:
    import trtcheck_zoo as models  # deferred: torch only in sessions that use trtcheck

    names: list[str] = []
    for pattern in patterns:
        matched = models.names(pattern)
        if not matched:
            raise pytest.UsageError(f"--trtcheck-models: {pattern!r} matches no zoo model; known: {', '.join(models.names())}")
        names += [name for name in matched if name not in names]
    return names
