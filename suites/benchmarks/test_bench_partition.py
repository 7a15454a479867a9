"""``bench_partition --phases``: where a partition's time goes, the figures docs/performance.md quotes (issue 42)."""

from __future__ import annotations

import pytest

from suites.benchmarks import bench_partition


def _phase_functions() -> list[object]:
    return [getattr(*bench_partition.phase_owner(module_name, path)) for module_name, path in bench_partition.PHASES]


def test_phases_times_each_phase_and_puts_every_function_back(capsys):
    originals = _phase_functions()
    bench_partition.main(["--sizes", "1500", "--phases"])
    printed = capsys.readouterr().out
    blocks = printed.split("phases of one partition, ")[1:]
    assert len(blocks) == 2 * (1 + len(bench_partition.OPTIMAL_SETTINGS))  # each family, each strategy
    for block in blocks:  # every partition lowers, decides and runs the rounds
        for label in ("driver.lower", "driver.initial_targets", "driver._settle", "driver._Facts.segment"):
            assert label in block, block
    with_ints = [block for block in blocks if block.startswith("with-ints")]
    assert all("export.copy_graph_module" in block for block in with_ints)  # its dead code: a copy without it
    assert any("optimal._structure" in block and "optimal._levels" in block for block in blocks)
    assert _phase_functions() == originals  # every one of them put back


def test_phases_puts_every_function_back_when_one_cannot_be_timed(monkeypatch):
    originals = _phase_functions()
    monkeypatch.setattr(bench_partition, "PHASES", (*bench_partition.PHASES, ("trtcheck.partitioning.driver", "no_such_phase")))
    with pytest.raises(AttributeError, match="no_such_phase"):
        bench_partition.phases(1500, "tensor", bench_partition.trtcheck.Settings())
    monkeypatch.undo()
    assert _phase_functions() == originals
