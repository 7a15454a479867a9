"""Partitions are what they were before issue 42's optimizations (recorded at 4345836, ``recorded.py``).

``naive`` and ``dependency_aware`` must give the very same segments and reasons; ``optimal`` no more TensorRT
engines than it did, and the lower bound wherever it reached it (its byte tie-breaks may move a node).
The small random graphs run in the default tier; the larger and the exported ones, and the zoo (every model but
the heavy ones, with trtcheck's own converters), in the slow tier.
"""

from __future__ import annotations

import json

import pytest

from suites.partitioning import recorded


def _check(case: recorded.Case, expected: dict) -> None:
    if "build" in expected:
        pytest.skip(f"not buildable when recorded: {expected['build']}")
    mismatches = []
    for label, got in recorded.record(case):
        want = expected[label]
        if "error" in want or "error" in got:
            if want != got:
                mismatches.append(f"{label}: {got} (recorded {want})")
        elif label.startswith("optimal"):
            if got["engines"] > want["engines"] or (want["above_bound"] == 0 and got["above_bound"] != 0):
                mismatches.append(
                    f"{label}: {got['summary']}, {got['above_bound']} above the bound "
                    f"(recorded {want['summary']}, {want['above_bound']})"
                )
        elif got["fingerprint"] != want["fingerprint"]:
            mismatches.append(f"{label}: {got['summary']} (recorded {want['summary']}); the segments or reasons differ")
    assert not mismatches, f"{case.name}:\n" + "\n".join(mismatches)


RANDOM = json.loads(recorded.RANDOM_RECORDING.read_text())


@pytest.mark.parametrize(
    "case", [pytest.param(case, marks=[pytest.mark.slow] if case.slow else []) for case in recorded.random_cases()],
    ids=lambda case: case.name,
)
def test_random_graph_partitions_are_as_recorded(case):
    _check(case, RANDOM[case.name])


@pytest.mark.slow
@pytest.mark.parametrize("case", recorded.zoo_cases(), ids=lambda case: case.name)
def test_zoo_partitions_are_as_recorded(case):
    zoo = json.loads(recorded.ZOO_RECORDING.read_text())
    _check(case, zoo[case.name])


def test_every_case_is_recorded():
    assert sorted(RANDOM) == sorted(case.name for case in recorded.random_cases())
