"""``bench_partition --phases`` (where a partition's time goes) and ``--floor`` (what merely reading each node costs): the
figures docs/performance.md quotes (issue 42)."""

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


def test_floor_times_every_pass_of_both_families_and_their_ratio(capsys):
    times = bench_partition.access_floor([300, 900], repeat=1)
    printed = capsys.readouterr().out.splitlines()
    passes = [label for label, _ in bench_partition.FLOOR_PASSES]
    assert {key for key in times} == {(f, p, s) for f in bench_partition.FAMILIES for p in passes for s in (300, 900)}
    assert all(seconds > 0 for seconds in times.values())
    assert len(printed) == len(bench_partition.FAMILIES) * len(passes)
    for line in printed:  # each row names its pass and ends with the ratio of the largest size to the smallest
        assert any(label in line for label in passes) and line.endswith("x)") and "(900/300: " in line, line


def test_the_copy_floor_makes_every_node_again_and_leaves_the_graph_it_copies_as_it_was():
    graph = bench_partition.make_graph(300, bench_partition.FAMILIES["with-ints"]).graph_module.graph
    users = {node: dict(node.users) for node in graph.nodes}
    made = bench_partition._new_nodes(graph, [], [])
    assert list(made) == [node for node in graph.nodes if node.op != "output"]
    assert all(new is not node and new.target is node.target for node, new in made.items())
    new_nodes = set(made.values())
    assert any(new.all_input_nodes for new in new_nodes)
    for new in new_nodes:  # each new node reads new nodes only, so no node of the original gained a user
        assert all(value in new_nodes for value in new.all_input_nodes)
    assert {node: dict(node.users) for node in graph.nodes} == users
