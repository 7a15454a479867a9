"""Partitions of random graphs with a dynamic dim 0 (``strategies.dynamic_aten_graphs``): sound, with every SymInt
kept inside its segment. No engines: each graph is lowered once (torch.export with its ``Dim``), then partitioned
at min_block_size 1 and 3, with the converter registry and with ``supports_all_but()``.

The registry decides what it decides today (SymInt converters are work in progress: a node it refuses runs in
PyTorch); ``supports_all_but()`` claims every node but lgamma and digamma convertible, ``sym_size`` and the SymInt
arithmetic included, so the non-Tensor boundary rule is exercised whatever the converters accept.
"""

from __future__ import annotations

import operator

import pytest
import torch
import torch.fx
from hypothesis import HealthCheck, event, given, settings

import trtcheck
from suites.matrix.test_random_graph_fuzz import FUZZ_PHASES, fuzz_examples
from trtcheck import Target
from trtcheck.lowering.graph import copy_graph_module
from trtcheck.lowering.symbols import symbol_ranges
from trtcheck.partitioning.driver import partition_graph
from trtcheck.partitioning.partition import Partition, Segment
from trtcheck.testing.random_graphs import DYNAMIC_ONLY, OPS, Step, build_dynamic_graph, dynamic_aten_graphs, supports_all_but

CI_EXAMPLES = 10  # one torch.export each (0.4 to 2 s on 2 cores), then four partitions
SHARE = 0.25
BLOCK_SIZES = (1, 3)
SUPPORTS = {"registry": None, "all_but_unsupported": supports_all_but()}
DTYPES = (torch.float32, torch.int64)


def is_symbolic(value) -> bool:
    return isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool))


def non_tensor_crossings(partition: Partition) -> list[str]:
    """Values that enter or leave a TensorRT segment and are not Tensors (nor lists of Tensors): a SymInt there is
    a size the engine would have to take or return as a value. Written apart from ``check_invariants``'s
    ``tensor_boundary`` rule, so that a bug in one does not hide a bug in the other: the crossings come from
    the graph's own edges (a node's inputs and users outside the segment), not from ``Segment.inputs`` and
    ``Segment.outputs``, which the rule reads."""
    found = []
    for index, segment in enumerate(partition.segments):
        if segment.target is not Target.TENSORRT:
            continue
        inside = set(segment.nodes)
        entering = dict.fromkeys(arg for node in segment.nodes for arg in node.all_input_nodes if arg not in inside)
        leaving = [node for node in segment.nodes if any(user not in inside for user in node.users)]
        for kind, values in (("input", entering), ("output", leaving)):
            for value in values:
                val = value.meta.get("val")
                tensors = isinstance(val, torch.Tensor) or (
                    isinstance(val, list) and bool(val) and all(isinstance(v, torch.Tensor) for v in val))
                if not tensors:
                    found.append(f"TensorRT segment @{index} {kind} {value.name} is {type(val).__name__} {val}")
    return found


def symint_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [node for node in gm.graph.nodes if node.op == "call_function" and is_symbolic(node.meta.get("val"))]


def assert_dim_stays_symbolic(graph, lowered: torch.fx.GraphModule) -> None:
    """Every input's dim 0 is a symbol whose range is the Dim's: export neither specialized nor narrowed it.

    Usually one symbol for all inputs; torch.export (2.14) gives inputs the graph never relates a symbol each
    when the Dim's range is 1..2 (``[relu(x1)]`` over x0, x1), still with the Dim's range."""
    placeholders = [node for node in lowered.graph.nodes if node.op == "placeholder"]
    sizes = [node.meta["val"].shape[0] for node in placeholders]
    assert all(isinstance(size, torch.SymInt) for size in sizes), f"dim 0 specialized: {sizes}\n{lowered.code}"
    assert symbol_ranges(lowered) == {str(size): graph.dim_range for size in sizes}


def partitions_of(lowered: torch.fx.GraphModule):
    for name, support in SUPPORTS.items():
        for size in BLOCK_SIZES:
            settings = trtcheck.Settings(min_block_size=size)
            yield f"{name}, min_block_size={size}", support, partition_graph(copy_graph_module(lowered), settings, support)


@pytest.mark.slow  # 6 s on 2 cores (25 s when they are busy); 500 graphs under the nightly profile, about 3 min
@settings(max_examples=fuzz_examples(CI_EXAMPLES, SHARE), deadline=None, suppress_health_check=[HealthCheck.too_slow],
          phases=FUZZ_PHASES)
@given(dynamic_aten_graphs(max_nodes=12, dtypes=DTYPES))
def test_dynamic_partitions_are_sound_and_keep_symints_inside(graph):
    lowered = graph.lower()
    assert_dim_stays_symbolic(graph, lowered)
    flows = symint_nodes(lowered)
    event(f"SymInt nodes after export: {'some' if flows else 'none'}")
    for what, support, partition in partitions_of(lowered):
        violations = trtcheck.check_invariants(partition, support=support)
        assert not violations, f"{what}:\n" + "\n".join(map(str, violations)) + f"\n{partition}"
        crossings = non_tensor_crossings(partition)
        assert not crossings, f"{what}:\n" + "\n".join(crossings) + f"\n{partition}"
        if flows:
            inside = [node for node in symint_nodes(partition.graph_module) if partition.target_of(node) is Target.TENSORRT]
            event(f"{what}: SymInt nodes inside TensorRT segments: {'some' if inside else 'none'}")


# ---- what the generator gives: SymInt flows that export keeps ---------------------------------------------
EVERY_SHAPE_OP = [Step("sum"), Step("batch_mean"), Step("reshape"), Step("matmul", 0, 1), Step("cat", 0, 2),
                  Step("batch_cat", 1, 3), Step("batch_full", 2), Step("conv", 4), Step("max_dim", 1),
                  Step("size", 0), Step("sym_floordiv"), Step("sym_mul"), Step("sym_add", 0, 1), Step("add_scalar", 0, 0),
                  Step("mul_scalar", 1, 1)]  # ints: n, n // 2 (export keeps it: it is no multiple), 3 * (n // 2), their sum


@pytest.fixture(scope="module")
def every_shape_op():
    graph = build_dynamic_graph(EVERY_SHAPE_OP, batch=3, dim_range=(1, 8))
    return graph, graph.lower()


def test_the_lowered_graph_computes_shapes_from_symints(every_shape_op):
    """torch.export keeps dim 0 symbolic and writes the shape arguments as SymInt flows: ``sym_size.int`` of an
    input, int arithmetic on it (``operator.mul``, ``operator.floordiv``, ``operator.add``), read by view, expand,
    full and the scalar ops."""
    graph, lowered = every_shape_op
    assert_dim_stays_symbolic(graph, lowered)
    flows = symint_nodes(lowered)
    assert {node.target for node in flows} >= {torch.ops.aten.sym_size.int, operator.mul, operator.floordiv, operator.add}
    readers = {user.target for node in flows for user in node.users if user.op == "call_function"}
    aten = torch.ops.aten
    assert readers >= {aten.view.default, aten.expand.default, aten.full.default, aten.add.Scalar, aten.mul.Scalar}


def test_every_dynamic_only_op_is_in_the_shape_op_recipe():
    assert {step.op for step in EVERY_SHAPE_OP} >= set(DYNAMIC_ONLY) | {"reshape", "matmul", "cat", "conv"}
    assert not set(DYNAMIC_ONLY) & set(OPS)  # static graphs (aten_graphs, benchmarks) are what they always were


@pytest.mark.parametrize("block_size", BLOCK_SIZES)
@pytest.mark.parametrize("support", list(SUPPORTS))
def test_the_shape_op_recipe_partitions_soundly(every_shape_op, support, block_size):
    graph, lowered = every_shape_op
    settings = trtcheck.Settings(min_block_size=block_size)
    partition = partition_graph(copy_graph_module(lowered), settings, SUPPORTS[support])
    assert trtcheck.check_invariants(partition, support=SUPPORTS[support]) == []
    assert non_tensor_crossings(partition) == []


def test_a_symint_crossing_into_tensorrt_is_caught(every_shape_op):
    """The checks above see a broken partition: a copy of a sound one in which a ``sym_size`` (a SymInt) runs
    alone in PyTorch and every other node in one TensorRT segment, so the SymInt enters that segment."""
    _, lowered = every_shape_op
    partition = partition_graph(copy_graph_module(lowered), trtcheck.Settings(min_block_size=1), SUPPORTS["all_but_unsupported"])
    size = next(node for node in partition.graph_module.graph.nodes if node.target is torch.ops.aten.sym_size.int)
    others = [node for node in partition.compute_nodes if node is not size]
    broken = Partition(partition.graph_module, [Segment(Target.TORCH, [size]), Segment(Target.TENSORRT, others)],
                       dict(partition.reasons), partition.settings)
    assert any(size.name in line and "input" in line for line in non_tensor_crossings(broken))
    assert any(v.rule == "tensor_boundary" and v.node == size.name for v in trtcheck.check_invariants(broken, support=lambda node: True))
