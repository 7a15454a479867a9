"""``bench_partition --phases``: where a partition's time goes, the figures docs/performance.md quotes (issue 42)."""

from __future__ import annotations

import trtcheck.lowering.export
import trtcheck.partitioning.driver
from suites.benchmarks import bench_partition


def test_phases_times_each_phase_and_puts_every_function_back(capsys):
    originals = (trtcheck.partitioning.driver.lower, trtcheck.partitioning.driver._Facts.segment,
                 trtcheck.lowering.export.copy_graph_module)
    bench_partition.main(["--sizes", "1500", "--phases"])
    printed = capsys.readouterr().out
    blocks = printed.split("phases of one partition, ")[1:]
    assert len(blocks) == 2 * (1 + len(bench_partition.OPTIMAL_SETTINGS))  # each family, each strategy
    for block in blocks:  # every partition lowers, decides and runs the rounds; the collector is reported
        for label in ("driver.lower", "driver.initial_targets", "driver._settle", "driver._Facts.segment", "CPython's collector"):
            assert label in block, block
    with_ints = [block for block in blocks if block.startswith("with-ints")]
    assert all("export.copy_graph_module" in block for block in with_ints)  # its dead code: a copy without it
    assert any("optimal._structure" in block and "optimal._levels" in block for block in blocks)
    assert originals == (trtcheck.partitioning.driver.lower, trtcheck.partitioning.driver._Facts.segment,
                         trtcheck.lowering.export.copy_graph_module)
