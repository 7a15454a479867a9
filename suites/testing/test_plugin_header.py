"""``pytest --trtcheck`` says which engine runs: the backend (and, for ``auto``, why), versions and device."""

from __future__ import annotations

import sys

import pytest
import torch

PASSING = """
def test_nothing():
    pass
"""


@pytest.fixture
def no_tensorrt(monkeypatch):
    """pytester runs in this process: make ``import tensorrt`` fail there, whatever is installed."""
    monkeypatch.setitem(sys.modules, "tensorrt", None)


def test_the_header_names_the_backend_auto_chose_and_why(pytester, no_tensorrt):
    pytester.makepyfile(test_plain=PASSING)
    result = pytester.runpytest("--trtcheck")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "trtcheck: engine backend: onnxruntime (auto: tensorrt cannot run here, missing the `tensorrt` package*; using onnxruntime)",
        f"trtcheck: versions: torch {torch.__version__}, onnxruntime *, tensorrt not installed; device: *",
    ])


def test_the_header_names_an_explicit_backend(pytester):
    pytester.makepyfile(test_plain=PASSING)
    result = pytester.runpytest("--trtcheck", "--trtcheck-backend", "onnxruntime")
    result.stdout.fnmatch_lines(["trtcheck: engine backend: onnxruntime (requested explicitly)", "trtcheck: versions: torch *"])


def test_without_the_flag_there_is_no_header(pytester):
    pytester.makepyfile(test_plain=PASSING)
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    assert "engine backend" not in result.stdout.str()


def test_xdist_workers_share_the_cores(monkeypatch):
    """Each of N xdist workers runs PyTorch (and so its engines) on cores // N threads, never on every core."""
    import os

    import torch

    from trtcheck.testing.pytest_plugin import share_cores_with_other_workers

    before = torch.get_num_threads()
    try:
        monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
        assert share_cores_with_other_workers() is None  # not a worker: nothing changes
        monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
        cores = len(os.sched_getaffinity(0))
        for workers in (2, 4 * cores):
            monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(workers))
            assert share_cores_with_other_workers() == max(1, cores // workers) == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
