"""Property tests: partitions of random core-ATen graphs satisfy every invariant, whatever the settings."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

import trtcheck
from trtcheck.partitioning.partition import merge_adjacent
from trtcheck.partitioning.segmentation import dependency_aware, naive
from trtcheck.testing.random_graphs import aten_graphs, called_ops_only, supports_all_but

SUPPORT = supports_all_but()

def layout(partition: trtcheck.Partition) -> tuple:
    """The partition itself, not its printout: per segment its target and node names, every node's reason,
    the fallbacks, and each branch's partition the same way. Two partitions that generate the same code
    but place or explain any node differently differ here."""
    return (
        tuple((segment.target, tuple(node.name for node in segment.nodes)) for segment in partition.segments),
        tuple((node.name, reason) for node, reason in partition.reasons.items()),  # Reason: kind and detail
        tuple(partition.fallbacks),
        tuple((name, layout(sub)) for name, sub in partition.branches.items()),
    )


settings_strategy = st.builds(
    trtcheck.Settings,
    min_block_size=st.integers(1, 4),
    torch_executed_ops=st.lists(st.sampled_from(["aten::relu", "aten.mul.Tensor", "aten.add", "aten::sym_size"]), max_size=2),
    segmentation=st.sampled_from(["naive", "dependency_aware", "optimal"]),
)

# Graphs that read a buffer and an input around in-place writes of them, between ops with and without a
# converter, so that the segmentations have reads to move across the writes.
STATEFUL_OPS = ("read_state", "write_state", "write_input", "relu", "tanh", "add", "mul", "sum", "lgamma")


@given(aten_graphs(), settings_strategy)
def test_random_partitions_are_sound(graph, settings):
    settings = called_ops_only(graph.graph_module, settings)
    partition = trtcheck.partition(graph.graph_module, graph.example_inputs, settings, support=SUPPORT)
    violations = trtcheck.check_invariants(partition, support=SUPPORT)
    assert not violations, "\n".join(map(str, violations)) + "\n" + str(partition)


@given(aten_graphs(min_nodes=3, max_nodes=12, ops=STATEFUL_OPS), st.sampled_from(["naive", "dependency_aware", "optimal"]),
       st.integers(1, 3))
def test_every_segmentation_keeps_reads_and_writes_of_state_in_order(graph, segmentation, min_block_size):
    """Issue 21, defect 1: ``optimal`` ran a Torch segment holding ``cache.copy_(...)`` before an engine still
    reading the old cache. The invariant ``state_order`` (and ``topological``) must hold for every segmentation."""
    settings = trtcheck.Settings(min_block_size=min_block_size, segmentation=segmentation)
    partition = trtcheck.partition(graph.graph_module, graph.example_inputs, settings, support=SUPPORT)
    violations = trtcheck.check_invariants(partition, support=SUPPORT)
    assert not violations, "\n".join(map(str, violations)) + "\n" + str(partition)


@given(aten_graphs(), settings_strategy)
def test_partitioning_is_deterministic(graph, settings):
    settings = called_ops_only(graph.graph_module, settings)
    first = trtcheck.partition(graph.graph_module, graph.example_inputs, settings, support=SUPPORT)
    second = trtcheck.partition(graph.graph_module, graph.example_inputs, settings, support=SUPPORT)
    assert str(first) == str(second)
    assert layout(first) == layout(second)


@given(aten_graphs(), settings_strategy)
def test_dependency_aware_never_more_segments_than_naive_for_the_same_targets(graph, settings):
    settings = called_ops_only(graph.graph_module, settings)
    partition = trtcheck.partition(graph.graph_module, graph.example_inputs, settings, support=SUPPORT)
    targets = {node: segment.target for segment in partition.segments for node in segment.nodes}
    nodes = partition.compute_nodes
    assert len(merge_adjacent(dependency_aware(nodes, targets))) <= len(merge_adjacent(naive(nodes, targets)))


@given(aten_graphs(ops=("relu", "add", "mul", "tanh", "lgamma", "max_dim")))
def test_dependency_aware_never_more_segments_than_naive_without_fallback_cascades(graph):
    # min_block_size=1 and Tensor-only values: no rule moves nodes, so the two strategies see the same targets.
    counts = [
        len(trtcheck.partition(graph.graph_module, graph.example_inputs,
                               trtcheck.Settings(min_block_size=1, segmentation=s), support=SUPPORT).segments)
        for s in ("dependency_aware", "naive")
    ]
    assert counts[0] <= counts[1]


@given(aten_graphs())
def test_partition_does_not_modify_the_users_graph(graph):
    """Same code after partitioning, and nothing the code does not show (node metadata, attributes) changed
    either: partitioning the graph again gives the same partition."""
    before = graph.graph_module.code
    settings = trtcheck.Settings(min_block_size=2)
    first = trtcheck.partition(graph.graph_module, graph.example_inputs, settings, support=SUPPORT)
    assert graph.graph_module.code == before
    second = trtcheck.partition(graph.graph_module, graph.example_inputs, settings, support=SUPPORT)
    assert layout(second) == layout(first)
