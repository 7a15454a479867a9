"""The summary heading ``Partition.explain()``: op coverage, engines and every Torch node grouped by reason.

Each reason kind that can put a node in Torch is provoked here, and the summary must name it with the
detail a user acts on (the op without a converter, the validator that refused and what it was shown, the
non-Tensor value, the block size, the conversion error).
"""

from __future__ import annotations

import torch
import torch.fx
from torch import nn

import trtcheck
from suites.partitioning.partitioning_cases import SeedModel
from trtcheck import conversion as converters
from trtcheck.partitioning.explain import ExplainSummary
from trtcheck.testing.random_graphs import supports_all_but

aten = torch.ops.aten


def test_coverage_engines_and_groups_of_the_seed(seed_inputs):
    settings = trtcheck.Settings(min_block_size=1, torch_executed_ops=["aten::mul"])
    partition = trtcheck.partition(SeedModel(), seed_inputs, settings)
    summary = ExplainSummary.of(partition)
    assert (summary.tensorrt_nodes, summary.compute_nodes) == (3, 7)
    assert [(engine.index, engine.nodes) for engine in summary.engines] == [(0, 2), (2, 1)]
    text = partition.explain_summary()
    assert text.splitlines()[:2] == [
        "op coverage: 42.9% (3 of 7 compute nodes in TensorRT)",
        "engines: 2 (nodes per engine: @0: 2, @2: 1)",
    ]
    assert "  forced op (torch_executed_ops) (1):\n    aten.mul.Tensor is in torch_executed_ops: mul" in text
    assert "    no converter for aten.lgamma.default: lgamma, lgamma_1, lgamma_2" in text
    explained = partition.explain()
    assert explained.startswith(text) and "lgamma_2 (aten::lgamma): Torch - no_converter" in explained


def test_every_torch_node_is_listed_exactly_once(seed_inputs):
    partition = trtcheck.partition(SeedModel(), seed_inputs, trtcheck.Settings(min_block_size=2))
    summary = ExplainSummary.of(partition)
    listed = [name for group in summary.torch_groups for name in group.nodes]
    in_torch = [n.name for s in partition.segments_of(trtcheck.Target.TORCH) for n in s.nodes]
    assert sorted(listed) == sorted(in_torch) and len(set(listed)) == len(listed)
    assert summary.torch_nodes + summary.tensorrt_nodes == summary.compute_nodes


class Float64Sin(nn.Module):
    def forward(self, x):
        return torch.lgamma(x.double().sin()).float() + 1


def test_a_validator_refusal_is_told_apart_from_a_missing_converter():
    partition = trtcheck.partition(Float64Sin(), (torch.rand(2, 3) + 0.5,), trtcheck.Settings(min_block_size=1))
    groups = {group.nodes: group for group in ExplainSummary.of(partition).torch_groups}
    assert groups[("lgamma",)].detail == "no converter for aten.lgamma.default"
    refused = groups[("sin",)]
    assert refused.kind is trtcheck.ReasonKind.NO_CONVERTER
    assert refused.detail.startswith("the aten.sin.default converter's validator refused float64[2, 3] -> float64[2, 3]")


def test_a_raising_validator_is_its_own_group():
    def crashes(node):
        raise KeyError("val")

    with converters.Snapshot():
        converters.register(aten.neg.default, validator=crashes, override=True)(lambda ctx, node: None)
        gm = torch.fx.symbolic_trace(lambda x: aten.neg.default(aten.relu.default(x)))
        partition = trtcheck.partition(gm, (torch.rand(3),), trtcheck.Settings(min_block_size=1))
    assert "  a converter's validator raised (1):\n    aten.neg.default validator raised KeyError: 'val'" in partition.explain_summary()


def int_model(x, y):
    size = aten.sym_size.int(x, 0)
    return aten.mul.Tensor(aten.add.Scalar(aten.lgamma.default(aten.relu.default(x)), size), y)


def test_a_non_tensor_boundary_names_the_value_that_caused_it():
    gm = torch.fx.symbolic_trace(int_model)
    settings = trtcheck.Settings(min_block_size=1, torch_executed_ops=["aten.add.Scalar"])
    partition = trtcheck.partition(gm, (torch.rand(2, 3), torch.rand(2, 3)), settings, supports_all_but())
    text = partition.explain_summary()
    assert "  non-Tensor value on a TensorRT boundary (1):" in text
    # sym_size is a size computation: it is recomputed in the Torch segment that reads it, said with its value
    assert "copy of sym_size_int = 2 (int): a size computation recomputed in the Torch segment" in text


def test_block_too_small_names_the_size(seed_inputs):
    partition = trtcheck.partition(SeedModel(), seed_inputs, trtcheck.Settings(min_block_size=3))
    text = partition.explain_summary()
    assert "  block too small (min_block_size) (1):\n    its TensorRT segment had 1 compute node < min_block_size=3: cat" in text


def test_a_failed_conversion_is_its_own_group():
    def broken(ctx, node):
        raise RuntimeError("broken on purpose")

    class AddMul(nn.Module):
        def forward(self, x, y):
            return (x + y) * y - x

    with converters.Snapshot():
        converters.register(aten.add.Tensor, override=True)(broken)
        stitched = trtcheck.compile(AddMul(), (torch.rand(3), torch.rand(3)), trtcheck.Settings(min_block_size=1), backend="onnxruntime")
    text = stitched.partition.explain_summary()
    assert "  conversion or engine build failed (3):" in text
    assert text.startswith("op coverage: 0.0% (0 of 3 compute nodes in TensorRT)")
    (group,) = ExplainSummary.of(stitched.partition).torch_groups
    assert group.kind is trtcheck.ReasonKind.CONVERSION_FAILED and group.nodes == ("add", "mul", "sub")
    assert "broken on purpose" in group.detail


class _MaxTimesTwo(torch.nn.Module):
    def forward(self, x):
        values, _ = torch.max(x, dim=1)  # aten.max.dim and the getitem unpacking it
        return values * 2


def test_every_count_uses_one_definition_of_a_compute_node():
    """Engine sizes, op coverage, the segment line and min_block_size's reason count the same nodes (getitem
    not among them), so "nodes per engine: @0: 2" at min_block_size=1 and "had 2 compute nodes" at 3 agree."""
    inputs = (torch.rand(2, 3),)
    one = trtcheck.partition(_MaxTimesTwo(), inputs, trtcheck.Settings(min_block_size=1))
    assert one.summary() == "1 segment: 1 TensorRT (2 compute nodes), 0 Torch (0 compute nodes)"
    assert one.explain_summary().splitlines()[:2] == [
        "op coverage: 100.0% (2 of 2 compute nodes in TensorRT)",
        "engines: 1 (nodes per engine: @0: 2)",
    ]
    three = trtcheck.partition(_MaxTimesTwo(), inputs, trtcheck.Settings(min_block_size=3))
    assert three.summary() == "1 segment: 0 TensorRT (0 compute nodes), 1 Torch (2 compute nodes)"
    text = three.explain_summary()
    assert "op coverage: 0.0% (0 of 2 compute nodes in TensorRT)" in text
    assert "its TensorRT segment had 2 compute nodes < min_block_size=3: max_1, mul" in text, text
    assert "getitem" not in text  # not a compute node: it runs where the tuple it indexes was made
