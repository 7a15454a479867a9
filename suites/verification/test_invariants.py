"""``check_invariants`` catches partitions broken by hand, one rule at a time, naming node, segment and rule."""

from __future__ import annotations

import operator

import pytest
import torch

import trtcheck
from trtcheck import Segment, Target

aten = torch.ops.aten


class Seed(torch.nn.Module):
    def forward(self, x, y):
        return torch.cat([torch.lgamma(x), torch.lgamma(y), torch.lgamma(x / y), x + y, x * y], 0)


def no_lgamma(node):
    return node.target is not aten.lgamma.default


@pytest.fixture
def partition():
    x = torch.rand(2, 3) + 0.5
    p = trtcheck.partition(Seed(), (x, x + 1), trtcheck.Settings(min_block_size=1), no_lgamma)
    assert trtcheck.check_invariants(p, support=no_lgamma) == []
    return p


def rules(partition, **kwargs):
    return {v.rule for v in trtcheck.check_invariants(partition, support=no_lgamma, **kwargs)}


def test_a_dropped_node_is_caught(partition):
    dropped = partition.segments[0].nodes.pop()
    violations = trtcheck.check_invariants(partition, support=no_lgamma)
    assert any(v.rule == "placement" and v.node == dropped.name for v in violations)


def test_a_node_in_two_segments_is_caught(partition):
    partition.segments[2].nodes.insert(0, partition.segments[0].nodes[0])
    assert "placement" in rules(partition)


def test_segments_out_of_order_are_caught(partition):
    partition.segments.reverse()
    violations = trtcheck.check_invariants(partition, support=no_lgamma)
    assert any(v.rule == "topological" and "before it is computed" in v.message for v in violations)


def test_an_unsupported_node_in_tensorrt_is_caught(partition):
    torch_segment = partition.segments[1]
    torch_segment.target = Target.TENSORRT
    violations = [v for v in trtcheck.check_invariants(partition, support=no_lgamma) if v.rule == "unsupported"]
    assert violations and violations[0].segment == 1 and violations[0].node.startswith("lgamma")
    assert "[unsupported] segment @1, node lgamma" in str(violations[0])


def test_a_forced_op_in_tensorrt_is_caught(partition):
    partition.settings.torch_executed_ops = ["aten::mul"]
    assert "forced_op" in rules(partition)


def test_a_small_tensorrt_segment_is_caught(partition):
    partition.settings.min_block_size = 2  # the lone cat segment is now too small
    assert "min_block_size" in rules(partition)


def test_mergeable_neighbours_are_caught(partition):
    first = partition.segments[0]
    partition.segments[0:1] = [Segment(Target.TENSORRT, first.nodes[:1]), Segment(Target.TENSORRT, first.nodes[1:])]
    assert "merge" in rules(partition)
    partition.segments[0].do_not_merge = True
    assert "merge" not in rules(partition)


def test_a_non_tensor_boundary_is_caught():
    def fn(x):
        pair = aten.max.dim(x, 1)
        return aten.neg.default(operator.getitem(pair, 0))

    gm = torch.fx.symbolic_trace(fn)
    p = trtcheck.partition(gm, (torch.rand(2, 3),), trtcheck.Settings(min_block_size=1), lambda n: True)
    (segment,) = p.segments
    max_node, getitem, neg = segment.nodes
    p.segments = [Segment(Target.TENSORRT, [max_node]), Segment(Target.TENSORRT, [getitem, neg], do_not_merge=True)]
    violations = trtcheck.check_invariants(p, support=lambda n: True)
    assert any(v.rule == "tensor_boundary" and v.node == "max_dim" and "tuple" in v.message for v in violations)


def test_a_forced_module_in_tensorrt_is_caught():
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU(), torch.nn.Linear(3, 3))
    settings = trtcheck.Settings(min_block_size=1, torch_executed_modules=["1"])
    p = trtcheck.partition(model, (torch.rand(2, 3),), settings, lambda n: True)
    assert trtcheck.check_invariants(p, support=lambda n: True) == []
    for segment in p.segments:
        segment.target = Target.TENSORRT
    assert "forced_module" in {v.rule for v in trtcheck.check_invariants(p, support=lambda n: True)}
