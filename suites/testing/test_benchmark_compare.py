"""pytest-benchmark's own regression check works on trtcheck's zoo benchmarks.

The real ``suites/matrix/test_zoo_benchmarks.py`` runs on one tiny zoo model (seed_lgamma, one preset):
once saved with ``--benchmark-save``, then again with ``--benchmark-compare --benchmark-compare-fail=
median:10%``. A second run whose stitched module was made slower must fail and name the stitched
benchmark (and only it); a second run of the same code must pass.

pytester runs in this process (torch cannot be imported twice, see conftest.py). pytest-benchmark
disables itself under xdist, which it detects by ``PYTEST_XDIST_WORKER``: the variable is removed for
the inner runs, which are not distributed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

MATRIX = Path(__file__).resolve().parents[1] / "matrix"

# Every timed call of the inner suite sleeps FLOOR_S first, so a median is ~10 ms of sleep plus ~0.1 ms of
# model: the 10% threshold then measures the slowdown below, not how busy the shared CPU happens to be.
# TRTCHECK_TEST_SLOWDOWN_S adds that much more to each stitched call (what a slower engine would do).
CONFTEST = '''
import os
import time

import pytest

import trtcheck.testing.timing as timing

FLOOR_S = 0.01


@pytest.fixture(autouse=True)
def steady_and_maybe_slower(request, monkeypatch):
    params = getattr(getattr(request.node, "callspec", None), "params", {})
    variant = params.get("variant", params.get("trtcheck_variant"))
    if variant is None:
        return
    extra = float(os.environ.get("TRTCHECK_TEST_SLOWDOWN_S", "0")) if variant == "stitched" else 0.0
    original = timing.synchronized

    def synchronized(fn, inputs):
        timed = original(fn, inputs)

        def call():
            time.sleep(FLOOR_S + extra)
            return timed()
        return call

    monkeypatch.setattr(timing, "synchronized", synchronized)
'''

GROUP = "seed_lgamma-min_block_size_1"
ARGS = (
    "--trtcheck", "--trtcheck-backend", "onnxruntime",
    "--trtcheck-models", "seed_lgamma", "--trtcheck-settings", "min_block_size_1",
    "--benchmark-min-rounds=10", "--benchmark-columns=median,rounds", "-p", "no:cacheprovider",
)


@pytest.fixture
def zoo_suite(pytester, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("TRTCHECK_TEST_SLOWDOWN_S", raising=False)
    pytester.makeconftest(CONFTEST)
    # The copy gets its own module name: in a full run, this process may have imported suites/matrix's
    # test_zoo_benchmarks already, and an in-process pytester run of a same-named file is an import mismatch.
    for name, copy in (("test_zoo_benchmarks.py", "test_zoo_benchmarks_compared.py"), ("matrix_checks.py", "matrix_checks.py")):
        (pytester.path / copy).write_text((MATRIX / name).read_text())
    storage = pytester.path / "benchmarks"
    return pytester, f"--benchmark-storage=file://{storage}", storage


def saved_baseline(zoo_suite):
    pytester, storage_arg, storage = zoo_suite
    result = pytester.runpytest(*ARGS, storage_arg, "--benchmark-save=baseline")
    result.assert_outcomes(passed=2)
    (saved,) = storage.glob("*/0001_baseline.json")
    benchmarks = json.loads(saved.read_text())["benchmarks"]
    assert {b["group"] for b in benchmarks} == {GROUP}
    assert sorted(b["extra_info"]["variant"] for b in benchmarks) == ["eager", "stitched"]
    assert all(b["stats"]["rounds"] >= 10 for b in benchmarks)
    stitched = next(b for b in benchmarks if b["extra_info"]["variant"] == "stitched")
    assert set(stitched["extra_info"]["profile"]) >= {"total_s", "engine_s", "torch_s", "boundary_s", "per_boundary_s"}
    return saved


def compare(zoo_suite):
    pytester, storage_arg, _ = zoo_suite
    return pytester.runpytest(*ARGS, storage_arg, "--benchmark-compare", "--benchmark-compare-fail=median:10%")


def test_a_slowed_stitched_module_fails_the_comparison(zoo_suite, monkeypatch):
    saved_baseline(zoo_suite)
    monkeypatch.setenv("TRTCHECK_TEST_SLOWDOWN_S", "0.01")  # +100% on the stitched median
    result = compare(zoo_suite)
    assert result.ret != 0
    output = result.stdout.str() + result.stderr.str()
    assert "Performance has regressed" in output
    regressed = [line for line in output.splitlines() if "has failed PercentageRegressionCheck" in line]
    assert len(regressed) == 1 and "stitched" in regressed[0] and "eager" not in regressed[0], regressed


@pytest.mark.slow
def test_an_unchanged_second_run_passes_the_comparison(zoo_suite):
    saved_baseline(zoo_suite)
    result = compare(zoo_suite)
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == 0, output
    assert "Performance has regressed" not in output
    assert "0001_baseline" in output  # it really compared against the saved run
