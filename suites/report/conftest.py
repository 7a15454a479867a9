"""Real pytest-benchmark files for the report tests.

``bench_files``: the runs recorded in ``suites/report/recorded`` (``report_runs.RUNS``, real files of a real
benchmark suite, ``python -m suites.report.report_runs --record``), unpacked once per worker. ``live_bench_files``:
the same runs made now (``report_runs.generate`` runs the suite four times, ~50 s on two cores; under
pytest-xdist the first worker writes them into the directory the workers share, under a file lock, and the
others read them): the slow tier's check that the recordings still have the structure a run writes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from suites.report import report_runs


@pytest.fixture(scope="session")
def bench_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``{"baseline": path, "changed": path, "other_machine": path, "rerun": path}``: real benchmark runs, recorded."""
    return report_runs.recorded(tmp_path_factory.mktemp("recorded_bench_runs"))


@pytest.fixture(scope="session")
def live_bench_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``bench_files``' runs, made now by real benchmark runs."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by all workers of this session
    directory = root / "report_bench_runs"
    with FileLock(str(root / "report_bench_runs.lock")):
        done = directory / "done.json"
        if done.exists():
            return {name: Path(path) for name, path in json.loads(done.read_text()).items()}
        paths = report_runs.generate(directory)
        done.write_text(json.dumps({name: str(path) for name, path in paths.items()}))
        return paths


@pytest.fixture
def derive(tmp_path: Path) -> Callable[..., Path]:
    """Write a variant of a real benchmark file: ``derive(source, name, edit)`` where ``edit(data)``
    changes the parsed JSON in place. Used only for what a run cannot be made to produce on demand
    (an exact 15% slowdown, a broken file); everything else comes straight from ``bench_files``."""

    def make(source: Path, name: str, edit: Callable[[dict[str, Any]], None]) -> Path:
        data = json.loads(Path(source).read_text())
        edit(data)
        target = tmp_path / name
        target.write_text(json.dumps(data))
        return target

    return make
