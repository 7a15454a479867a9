"""The recorded benchmark runs the default tier's report tests read are still what a run writes today.

``bench_files`` hands the report tests runs recorded once (``report_runs.record``); a change to what a run
writes (``trtcheck.benchmarking.extra_info``, pytest-benchmark's format) would leave them testing a format
that no longer exists. This slow-tier test makes the runs again and requires the same structure: the same
benchmarks, each with the same keys (recursively) and kinds of values, in ``extra_info``, ``stats``,
``machine_info`` and the file itself. Timings and the machine's own values may differ; their shape may not.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from suites.report.report_runs import RUNS


def shape(value: Any) -> Any:
    """The structure of a parsed JSON value: dicts keep their keys, lists the set of their items' shapes,
    scalars their kind (an int and a float are both numbers: a time may round to either)."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return sorted({json.dumps(shape(item), sort_keys=True) for item in value})
    if isinstance(value, bool) or value is None:
        return type(value).__name__
    if isinstance(value, (int, float)):
        return "number"
    return type(value).__name__


def structure(path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    benchmarks = {(b["group"], b["name"]): {k: shape(v) for k, v in b.items() if k != "stats"} | {"stats": sorted(b["stats"])}
                  for b in data["benchmarks"]}
    return {"file": sorted(data), "machine_info": sorted(data["machine_info"]), "benchmarks": benchmarks}


@pytest.mark.slow
@pytest.mark.parametrize("run", [spec.name for spec in RUNS])
def test_the_recorded_runs_have_the_structure_a_run_writes_today(run, bench_files, live_bench_files):
    recorded, live = structure(bench_files[run]), structure(live_bench_files[run])
    assert recorded["file"] == live["file"] and recorded["machine_info"] == live["machine_info"]
    assert recorded["benchmarks"].keys() == live["benchmarks"].keys(), "re-record: python -m suites.report.report_runs --record"
    for key, benchmark in live["benchmarks"].items():
        assert recorded["benchmarks"][key] == benchmark, (
            f"{run} {key}: a run writes another structure than the recording: re-record with "
            "python -m suites.report.report_runs --record"
        )
