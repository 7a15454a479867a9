"""Produce real pytest-benchmark JSON files for the report tests, by running a tiny benchmark suite.

The report reads files written by pytest-benchmark with ``extra_info`` from
``trtcheck.benchmarking.extra_info``; testing it on hand-written JSON would only test our idea of that
format. So the fixtures come from actual ``pytest --benchmark-json`` runs of ``BENCH_TEST`` below, on
small zoo models compiled by ``trtcheck.compile``. Knobs (environment variables read by the generated
suite, each ``MODEL=VALUE``) turn a run into a regression or a run "from another machine", through the
same mechanisms a real change would go through:

* ``TRTCHECK_REPORT_SLOWDOWN=MODEL=SECONDS``: that model's stitched module sleeps this long per call;
* ``TRTCHECK_REPORT_EXTRA_TORCH_OPS=MODEL=OP``: an op added to that model's ``torch_executed_ops`` in
  every preset, which splits its graph into more segments;
* ``TRTCHECK_REPORT_NODE``: the ``machine_info.node`` pytest-benchmark records (through its
  ``pytest_benchmark_update_machine_info`` hook);
* ``TRTCHECK_REPORT_BROKEN_CONVERTER=MODEL=OP``: while that model compiles, the converter of ``OP``
  (``aten.relu.default``) raises, so the TensorRT segments holding it fall back to PyTorch.

    python -m suites.report.report_runs OUT_DIR      # writes baseline.json, slower.json, ... by hand
    python -m suites.report.report_runs --record     # re-records the runs the default tier reads (RECORDED)

The default tier reads recorded runs (``RECORDED``: real files of this suite, ~50 s to make on two cores); the
slow tier makes them again and checks that their structure is still the recordings'.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CONFTEST = '''
import os


def pytest_benchmark_update_machine_info(config, machine_info):
    node = os.environ.get("TRTCHECK_REPORT_NODE")
    if node:
        machine_info["node"] = node
'''

BENCH_TEST = '''
import dataclasses
import os
import time

import pytest
import torch

import trtcheck_zoo as models
import trtcheck
import trtcheck.conversion as converters
from trtcheck.benchmarking import extra_info
from trtcheck.presets import PRESETS
from trtcheck.runtime.profiling import profile

CASES = [("seed_lgamma", "min_block_size_1"), ("seed_lgamma", "torch_add"), ("residual_unsupported", "min_block_size_1")]
SLOW_MODEL, _, SLOWDOWN = os.environ.get("TRTCHECK_REPORT_SLOWDOWN", "=0").partition("=")
SPLIT_MODEL, _, EXTRA_TORCH_OP = os.environ.get("TRTCHECK_REPORT_EXTRA_TORCH_OPS", "=").partition("=")
BROKEN_MODEL, _, BROKEN_OP = os.environ.get("TRTCHECK_REPORT_BROKEN_CONVERTER", "=").partition("=")


def broken_converter(ctx, node):
    raise RuntimeError(f"{BROKEN_OP} converter broken on purpose (TRTCHECK_REPORT_BROKEN_CONVERTER)")
# Random weights make denormal activations, which slow eager PyTorch on x86 ~50x (see bench_compile.py).
torch.set_flush_denormal(True)


@pytest.fixture(scope="module", params=CASES, ids=lambda case: "-".join(case))
def compiled(request):
    name, preset = request.param
    entry = models.get(name)
    model, inputs = entry.build()
    settings = PRESETS[preset].settings_for(entry.fallback_module)
    if name == SPLIT_MODEL:
        settings = dataclasses.replace(settings, torch_executed_ops=[*settings.torch_executed_ops, EXTRA_TORCH_OP])
    with converters.Snapshot():
        if name == BROKEN_MODEL:
            op = torch.ops
            for part in BROKEN_OP.split("."):
                op = getattr(op, part)
            converters.register(op, override=True)(broken_converter)
        stitched = trtcheck.compile(model, inputs, settings, backend="onnxruntime")
    with torch.inference_mode():
        expected, actual = model(*inputs), stitched(*inputs)
    difference = (expected - actual).abs().max().item()
    cosine = torch.nn.functional.cosine_similarity(expected.flatten(), actual.flatten(), dim=0).item()
    equivalence = {"passed": difference < 1e-4, "max_abs": difference, "cosine": cosine}
    timed = profile(stitched, inputs).to_dict()  # where a stitched call's time goes (not slowed by SLOWDOWN)
    return name, preset, model, inputs, stitched, equivalence, timed


@pytest.mark.parametrize("variant", ["eager", "stitched"])
def test_model(benchmark, compiled, variant):
    name, preset, model, inputs, stitched, equivalence, timed = compiled
    benchmark.group = f"{name}-{preset}"
    benchmark.extra_info.update(extra_info(
        name, preset, variant, "onnxruntime", stitched, equivalence, denormals_flushed=True,
        profile=timed if variant == "stitched" else None,
    ))

    def stitched_call():
        if name == SLOW_MODEL:
            time.sleep(float(SLOWDOWN))
        return stitched(*inputs)

    call = stitched_call if variant == "stitched" else lambda: model(*inputs)
    with torch.inference_mode():
        for _ in range(3):  # first calls initialize kernels lazily (measured: 57 ms, then 0.1 ms)
            call()
        benchmark(call)


def test_not_trtcheck(benchmark):
    """A benchmark without trtcheck's extra_info: the report must ignore it and say so."""
    benchmark(sum, range(100))
'''

# Few, short rounds: the report tests check what the report does with timings, not the timings.
BENCHMARK_ARGS = (
    "--benchmark-min-rounds=5",
    "--benchmark-max-time=0.02",
    "--benchmark-warmup=off",
    "--benchmark-save-data",  # every round, which the regression check's rank test reads
    "-p",
    "no:cacheprovider",
    "-p",
    "no:xdist",
    "-q",
)


@dataclass(frozen=True)
class RunSpec:
    """One benchmark run: its output name and the knobs that make it differ from the baseline."""

    name: str
    env: dict[str, str] = field(default_factory=dict)


# In this order (pytest-benchmark stamps each file with the time it was written, and the report orders
# runs by that time): the baseline first.
# "changed" regresses two ways at once, on different models, so one run tests both flags separately:
# SLOW_MODEL gets slower (5 ms per call on a module that takes well under 1 ms), SPLIT_MODEL gets more
# segments (aten::relu forced to PyTorch: 3 -> 8). "rerun" changes nothing: the same commit twice must flag nothing.
SLOW_MODEL = "seed_lgamma"
SPLIT_MODEL = "residual_unsupported"
RUNS = (
    RunSpec("baseline"),
    RunSpec("changed", {"TRTCHECK_REPORT_SLOWDOWN": f"{SLOW_MODEL}=0.005", "TRTCHECK_REPORT_EXTRA_TORCH_OPS": f"{SPLIT_MODEL}=aten::relu"}),
    RunSpec("other_machine", {"TRTCHECK_REPORT_NODE": "some-other-host"}),
    RunSpec("rerun"),  # the baseline's commit and settings again, run beside the others: what noise looks like
)


def write_suite(directory: Path) -> None:
    """The benchmark suite as files: a test module and a conftest with the machine-info hook."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (directory / "test_report_bench.py").write_text(textwrap.dedent(BENCH_TEST))


def run_benchmarks(directory: Path, spec: RunSpec, timeout: float = 300) -> Path:
    """Run the suite once (a fresh pytest process, as a user would) and return its JSON file."""
    suite = directory / "suite"
    if not (suite / "test_report_bench.py").exists():
        write_suite(suite)
    output = directory / f"{spec.name}.json"
    env = {**os.environ, **spec.env, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_ADDOPTS", None)
    command = [sys.executable, "-m", "pytest", str(suite), f"--benchmark-json={output}", "--rootdir", str(suite), *BENCHMARK_ARGS]
    done = subprocess.run(command, cwd=suite, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0 or not output.exists():
        raise RuntimeError(f"benchmark run {spec.name!r} failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return output


def generate(directory: Path) -> dict[str, Path]:
    """Every run of ``RUNS`` as ``{name: json path}``: the baseline first, then the others side by side.

    Only the baseline needs to come first (the report tests pair every other run with it explicitly), so
    the rest run concurrently, which keeps the session fixture near 15 s on two cores.
    """
    first, *rest = RUNS
    paths = {first.name: run_benchmarks(directory, first)}
    with ThreadPoolExecutor(max_workers=len(rest)) as pool:
        for spec, path in zip(rest, pool.map(lambda spec: run_benchmarks(directory, spec), rest)):
            paths[spec.name] = path
    return paths


RECORDED = Path(__file__).resolve().parent / "recorded"
"""The runs the default tier's report tests read (``RECORDED / "baseline.json.gz"``, ...): real runs of ``RUNS``,
recorded with ``--record``. The slow tier runs them again and requires the same structure
(``suites/report/test_report_recordings.py``), so a change to what a run writes cannot pass on stale files."""


def record(directory: Path = RECORDED) -> dict[str, Path]:
    """Run ``RUNS`` and keep each file, gzipped, in ``directory``: what ``recorded`` hands the report tests."""
    import gzip
    import shutil
    import tempfile

    directory.mkdir(parents=True, exist_ok=True)
    kept = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name, path in generate(Path(scratch)).items():
            kept[name] = directory / f"{name}.json.gz"
            with open(path, "rb") as source, gzip.GzipFile(kept[name], "wb", mtime=0) as target:
                shutil.copyfileobj(source, target)
    return kept


def recorded(directory: Path) -> dict[str, Path]:
    """The recorded runs unpacked into ``directory``, by run name (``RUNS``)."""
    import gzip

    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for spec in RUNS:
        paths[spec.name] = directory / f"{spec.name}.json"
        with gzip.open(RECORDED / f"{spec.name}.json.gz", "rb") as source:
            paths[spec.name].write_bytes(source.read())
    return paths


if __name__ == "__main__":
    # python -m suites.report.report_runs OUT_DIR    the runs, as JSON files in OUT_DIR
    # python -m suites.report.report_runs --record   the runs, recorded for the default tier (RECORDED)
    made = record() if sys.argv[1] == "--record" else generate(Path(sys.argv[1]))
    for name, path in made.items():
        print(name, path)
