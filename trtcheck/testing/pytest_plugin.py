"""The pytest plugin (registered through the ``pytest11`` entry point): its options and hooks.

It stays thin, as pytest-benchmark's ``plugin`` does over its fixture, session and table modules: the options
resolve into the run's ``TrtcheckSession`` (``session``), the fixtures are partial applications of the library's
``trtcheck.compile`` and ``trtcheck.verify`` (``fixtures``, registered here through ``pytest_plugins``), and the
header and terminal summary are ``summary``'s. ``--trtcheck`` turns the verification matrix on; without it, tests
marked ``trtcheck`` (and every test using a trtcheck fixture) are skipped, since they compile models.

Downstream::

    def test_mine(trtcheck_verify):
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()).eval()
        trtcheck_verify(model, (torch.randn(1, 3, 32, 32),))

    def test_speed(trtcheck_benchmark):     # eager and stitched, for trtcheck report
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()).eval()
        trtcheck_benchmark(model, (torch.randn(1, 3, 32, 32),), name="conv_relu")

``pytest --trtcheck`` runs it once per selected preset (``--trtcheck-settings``), and with
``--trtcheck-precision fp32,fp16,bf16,tf32`` once per preset and precision (``Settings.precision`` on top of each preset;
``tf32``: fp32 with ``Settings.tf32``, ids ending ``-tf32``).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import pytest

from trtcheck.testing.session import (
    ALLOW_FALLBACKS_HELP,
    FIXTURES,
    LOCALIZE_BUDGET_HELP,
    MARKER,
    OPTIONS,
    HarnessConfig,
    TrtcheckOptions,
    session_of,
)
from trtcheck.testing.summary import header_lines, terminal_summary

pytest_plugins = ["trtcheck.testing.fixtures"]  # the fixtures, a plugin of their own: registered with this one

__all__ = ["HarnessConfig", "TrtcheckOptions", "quiet_torch_trace_log", "share_cores_with_other_workers"]


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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}: part of the verification matrix; runs only with --trtcheck")
    if config.getoption("trtcheck"):
        session_of(config)  # fail fast on a bad option: the session resolves the options
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

    return ModelScheduling(config, log, session_of(config).options.models)


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


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    """With ``--trtcheck``: the backend, versions, device, presets and precisions (``summary.header_lines``)."""
    return header_lines(session_of(config).options) if config.getoption("trtcheck") else None


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """What each passing ``trtcheck_verify`` call compared, then the run's five-second summary
    (``summary.terminal_summary``)."""
    terminal_summary(terminalreporter, config, session_of(config).options if config.getoption("trtcheck") else None)


def _zoo_entries(names: tuple[str, ...]) -> list[Any]:
    import trtcheck_zoo as models  # deferred: torch only in sessions that use trtcheck

    return [models.get(name) for name in names]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    wants_model = "trtcheck_model_entry" in metafunc.fixturenames
    wants_preset = "trtcheck_preset" in metafunc.fixturenames
    if not (wants_model or wants_preset):
        return
    options = session_of(metafunc.config).options
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
