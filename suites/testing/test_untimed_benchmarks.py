"""This repository's conftest deselects the zoo benchmarks where pytest-benchmark times nothing (README command (1)
under ``-n 2`` is then the verification matrix alone, as docs/development.md says)."""

from __future__ import annotations

import pathlib
from types import SimpleNamespace

import pytest

ROOT_CONFTEST = pathlib.Path(__file__).parents[2] / "conftest.py"


@pytest.fixture
def root_conftest(pytestconfig):
    """The repository's conftest as pytest loaded it (importing it again would load its hypothesis profile again)."""
    (module,) = [p for p in pytestconfig.pluginmanager.get_plugins() if getattr(p, "__file__", None) == str(ROOT_CONFTEST)]
    return module


def _config(**options):
    defaults = {"dist": "no", "benchmark_disable": False, "benchmark_enable": False}
    defaults.update(options)
    return SimpleNamespace(getoption=lambda name, default=None: defaults.get(name, default))


def _item(marked: bool, fixtures: tuple[str, ...]):
    return SimpleNamespace(get_closest_marker=lambda name: object() if marked and name == "trtcheck" else None, fixturenames=fixtures)


ZOO_BENCHMARK = _item(True, ("trtcheck_model_entry", "benchmark"))


@pytest.mark.parametrize(
    ("config", "item", "untimed"),
    [
        (_config(dist="load"), ZOO_BENCHMARK, True),  # -n 2: xdist turns pytest-benchmark off
        (_config(dist="load"), _item(False, ("trtcheck_lowered", "benchmark")), True),  # marked by the plugin later
        (_config(benchmark_disable=True), ZOO_BENCHMARK, False),  # documented: run once, untimed, its checks kept
        (_config(), ZOO_BENCHMARK, False),  # -p no:xdist: timed, kept
        (_config(dist="load"), _item(True, ("trtcheck_model_entry",)), False),  # a verification: kept
        (_config(dist="load"), _item(False, ("benchmark",)), False),  # a plain benchmark: runs once, as pytest-benchmark does
    ],
    ids=["xdist", "xdist_unmarked", "disabled", "timed", "verification", "plain_benchmark"],
)
def test_only_zoo_benchmarks_that_time_nothing_are_deselected(config, item, untimed, monkeypatch, root_conftest) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert root_conftest._untimed_benchmark(config, item) is untimed


def test_an_xdist_worker_deselects_them_too(monkeypatch, root_conftest) -> None:
    """A worker's own config does not carry ``dist`` (only the controller's does): its environment tells."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    assert root_conftest._untimed_benchmark(_config(), ZOO_BENCHMARK)


def test_the_collection_hook_deselects_them_and_keeps_the_rest(monkeypatch, root_conftest) -> None:
    """Wired into ``pytest_collection_modifyitems``, reported to pytest as deselected, the other items kept in order."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    deselected = []
    config = _config()
    config.option = SimpleNamespace(markexpr="trtcheck")
    config.hook = SimpleNamespace(pytest_deselected=lambda items: deselected.extend(items))
    verification, plain = _item(True, ("trtcheck_model_entry",)), _item(False, ("benchmark",))
    items = [verification, ZOO_BENCHMARK, plain]
    root_conftest.pytest_collection_modifyitems(config, items)
    assert items == [verification, plain] and deselected == [ZOO_BENCHMARK]
