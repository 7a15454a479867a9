"""The seed's worked example, exactly: naive gives its 7 segments, dependency-aware its 3."""

from __future__ import annotations

import pytest

import trtcheck
from suites.partitioning.partitioning_cases import SeedModel, no_lgamma
from trtcheck import Target

TRT, TORCH = Target.TENSORRT, Target.TORCH


def layout(partition):
    return [(segment.target, [node.name for node in segment.nodes]) for segment in partition.segments]


def test_naive_gives_the_seeds_seven_segments(seed_inputs):
    partition = trtcheck.partition(SeedModel(), seed_inputs, trtcheck.Settings(min_block_size=1, segmentation="naive"), no_lgamma)
    assert layout(partition) == [
        (TRT, ["add"]),
        (TORCH, ["lgamma"]),
        (TRT, ["mul"]),
        (TORCH, ["lgamma_1"]),
        (TRT, ["div"]),
        (TORCH, ["lgamma_2"]),
        (TRT, ["cat"]),
    ]


def test_dependency_aware_gives_the_seeds_three_segments(seed_inputs):
    partition = trtcheck.partition(SeedModel(), seed_inputs, trtcheck.Settings(min_block_size=1), no_lgamma)
    assert layout(partition) == [
        (TRT, ["add", "mul", "div"]),
        (TORCH, ["lgamma", "lgamma_1", "lgamma_2"]),
        (TRT, ["cat"]),
    ]
    first, second, third = partition.segments
    assert [v.name for v in first.inputs] == ["x", "y"]
    assert [v.name for v in second.inputs] == ["x", "y", "div"]
    assert [v.name for v in third.inputs] == ["lgamma", "lgamma_1", "lgamma_2", "add", "mul"]
    assert [v.name for v in third.outputs] == ["cat"]


def test_printing_follows_the_seeds_format(seed_inputs):
    partition = trtcheck.partition(SeedModel(), seed_inputs, trtcheck.Settings(min_block_size=1), no_lgamma)
    text = str(partition)
    assert text.splitlines()[:3] == ["Segment Block @0:", "    Target: TensorRT", "    Graph: graph(%x : Tensor,"]
    assert "Segment Block @1:\n    Target: Torch\n    Graph: graph(%x : Tensor," in text
    assert "%lgamma_2 : Tensor = aten::lgamma(%div)" in text
    assert "%cat : Tensor = aten::cat([%lgamma, %lgamma_1, %lgamma_2, %add, %mul])" in text
    assert text.count("Segment Block @") == 3


@pytest.mark.parametrize("segmentation", ["naive", "dependency_aware"])
def test_seed_partitions_are_sound(seed_inputs, segmentation):
    settings = trtcheck.Settings(min_block_size=1, segmentation=segmentation)
    partition = trtcheck.partition(SeedModel(), seed_inputs, settings, no_lgamma)
    assert trtcheck.check_invariants(partition, support=no_lgamma) == []


def test_min_block_size_three_sends_the_lone_cat_to_torch(seed_inputs):
    partition = trtcheck.partition(SeedModel(), seed_inputs, trtcheck.Settings(min_block_size=3), no_lgamma)
    assert layout(partition) == [
        (TRT, ["add", "mul", "div"]),
        (TORCH, ["lgamma", "lgamma_1", "lgamma_2", "cat"]),
    ]
    cat = next(n for n in partition.compute_nodes if n.name == "cat")
    assert partition.reasons[cat].kind is trtcheck.ReasonKind.MIN_BLOCK_SIZE
