"""``trtcheck.tools.compare``: every partitioner on the same graph and support, and the tallies."""

from __future__ import annotations

import trtcheck
from suites.partitioning.partitioning_cases import SeedModel, no_lgamma
from trtcheck.testing.random_graphs import supports_all_but
from trtcheck.tools.compare import (
    PARTITIONERS,
    Row,
    compare,
    compare_many,
    format_rows,
    format_tally,
    lower_bound_hits,
    random_graph,
    tally,
)

SUPPORT = supports_all_but()


def _by_partitioner(rows):
    return {row.partitioner: row for row in rows}


def test_compare_runs_every_partitioner_on_the_seed_graph(seed_inputs):
    gm = trtcheck.lower(SeedModel(), seed_inputs)
    before = gm.code
    rows = _by_partitioner(compare(gm, seed_inputs, trtcheck.Settings(min_block_size=1), no_lgamma, name="seed"))
    assert set(rows) == set(PARTITIONERS)
    assert gm.code == before  # every partitioner works on a copy
    # The seed's figures: naive 7 segments, dependency-aware and optimal 3 (two engines). torch.fx's two
    # find the same two engines but leave the lgamma nodes in two runs around the first (4 segments).
    assert (rows["naive"].segments, rows["naive"].engines) == (7, 4)
    for name in ("dependency_aware", "optimal"):
        assert (rows[name].segments, rows[name].engines) == (3, 2), name
    for name in ("capability_based", "splitter_base"):
        assert (rows[name].segments, rows[name].engines) == (4, 2), name
    assert rows["optimal"].lower_bound == 3
    assert rows["torch_tensorrt"].segments is None and "skipped" in rows["torch_tensorrt"].note
    assert all(row.seconds is not None and row.boundary_bytes > 0 for name, row in rows.items() if name != "torch_tensorrt")


def test_optimal_never_has_more_engines_than_capability_based_partitioner():
    # min_block_size 1 and Tensor-only values: the setting of issue 13's measurement (200 graphs there, all equal).
    for seed in range(12):
        graph = random_graph(seed)
        rows = _by_partitioner(compare(graph.graph_module, graph.example_inputs, trtcheck.Settings(min_block_size=1), SUPPORT,
                                    partitioners=("optimal", "capability_based")))
        assert rows["optimal"].engines <= rows["capability_based"].engines, seed
        assert rows["optimal"].segments == rows["optimal"].lower_bound, seed


def _row(graph, partitioner, segments, engines):
    return Row(graph, "p", partitioner, segments, engines, 0, 0.0)


def test_tally_counts_worse_equal_better_per_peer():
    rows = [
        _row("a", "x", 3, 2), _row("a", "y", 4, 2),
        _row("b", "x", 5, 3), _row("b", "y", 5, 1),
        Row("b", "p", "z", None, None, None, None, "skipped"),  # did not run: left out
    ]
    result = tally(rows)
    assert result[("x", "y", "segments")] == {"better": 1, "equal": 1}
    assert result[("y", "x", "segments")] == {"worse": 1, "equal": 1}
    assert result[("x", "y", "engines")] == {"equal": 1, "worse": 1}
    assert not any("z" in key for key in result)
    text = format_tally(result, ["x", "y"])
    assert "0/1/1" in text and "1/1/0" in text


def test_lower_bound_hits_and_formatting():
    rows = [Row("a", "p", "x", 3, 1, 10, 0.001, lower_bound=3), Row("b", "p", "x", 4, 2, 10, 0.001, lower_bound=3)]
    assert lower_bound_hits(rows) == {"x": (1, 2)}
    table = format_rows(rows)
    assert table.splitlines()[1].split()[:5] == ["a", "p", "x", "3", "3"]


def test_random_graphs_fit_the_requested_sizes():
    sizes = [sum(1 for n in random_graph(seed).graph_module.graph.nodes if n.op == "call_function") for seed in range(20)]
    assert all(8 <= size <= 80 for size in sizes), sizes


def test_compare_many_prints_the_tallies(capsys):
    assert compare_many(None, random_graphs=3, seed=5, partitioners=("dependency_aware", "optimal", "capability_based"), quiet=True) == 0
    out = capsys.readouterr().out
    assert "random graphs (seeds 5..7): 3 graph/preset pairs" in out
    assert "optimal 3/3" in out  # every graph at the lower bound
