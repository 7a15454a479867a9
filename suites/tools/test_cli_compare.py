"""``trtcheck compare``: every partitioner on one graph (the user's MODEL), or the zoo and random graphs."""

from __future__ import annotations

import pytest

from trtcheck.tools.cli import main


def _rows(output: str) -> dict[str, list[str]]:
    """partitioner -> the row's columns (segs, bound, engines, bytes, ms), from the printed table."""
    rows = {}
    for line in output.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 6 and parts[1] in {"naive", "dependency_aware", "optimal", "capability_based", "splitter_base"}:
            rows[parts[1]] = parts[2:7]
    return rows


def test_compare_a_users_factory_prints_a_row_per_partitioner(factories, capsys):
    assert main(["compare", f"{factories}:build", "--min-block-size", "1"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert set(rows) == {"naive", "dependency_aware", "optimal", "capability_based", "splitter_base"}
    # lgamma has no converter: Linear+relu, lgamma, mul -> 3 segments, 2 engines for optimal at the bound
    segs, bound, engines = (int(v) for v in rows["optimal"][:3])
    assert (segs, bound, engines) == (3, 3, 2)


@pytest.mark.slow
def test_compare_honours_the_settings_and_partitioners(capsys):
    assert main(["compare", "resnet18", "--min-block-size", "1", "--torch-executed-ops", "aten::relu",
                 "--partitioners", "dependency_aware,optimal"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert set(rows) == {"dependency_aware", "optimal"}
    assert int(rows["optimal"][0]) <= int(rows["dependency_aware"][0])
    assert int(rows["optimal"][2]) > 1  # relu forced to PyTorch really split the graph


def test_compare_random_graphs_prints_the_tallies(capsys):
    assert main(["compare", "--random", "4", "--quiet", "--partitioners", "dependency_aware,optimal"]) == 0
    out = capsys.readouterr().out
    assert "segments: row vs column" in out and "optimal 4/4" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["compare"], "nothing to compare"),
        (["compare", "resnet18", "--partitioners", "fastest"], "unknown partitioners ['fastest']"),
        (["compare", "resnet_18"], "resnet18"),  # did-you-mean from the model loader
    ],
)
def test_compare_usage_errors_exit_2_with_the_fix(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_compare_the_zoo_by_name(capsys):
    assert main(["compare", "--zoo", "min_block_size_1", "--models", "seed_lgamma", "--quiet", "--partitioners", "naive,optimal"]) == 0
    out = capsys.readouterr().out
    assert "== zoo: 1 graph/preset pairs ==" in out and "optimal 1/1" in out
