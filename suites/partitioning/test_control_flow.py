"""Control flow: a ``torch.cond`` / ``while_loop`` node is a Torch segment of its own, its branches are partitioned.

The node gets reason ``control_flow`` and a ``do_not_merge`` segment holding it and the ``getitem`` of its
result; every branch graph is partitioned with the same settings into ``Partition.branches``, with the
parent's parameters inlined as constants of a copy (mutable state and loop-carried values stay inputs).
The printout, ``explain()`` and the invariants recurse into branches; each new invariant is shown to fire
on a partition corrupted by hand.
"""

from __future__ import annotations

import operator

import pytest
import torch
from torch import nn
from torch._higher_order_ops.while_loop import while_loop

import trtcheck
from trtcheck import ReasonKind, Segment, Target
from trtcheck.partitioning.control_flow import isolate_control_flow
from trtcheck.partitioning.explain import ExplainSummary
from trtcheck.partitioning.nodes import counts_toward_block_size, is_control_flow
from trtcheck.tools.graph_html import partition_html
from trtcheck_zoo.control_flow_models import CondBranches, LoopBody

aten = torch.ops.aten
BRANCHES = {"true_graph_0", "false_graph_0"}


class NestedCond(nn.Module):
    """A cond inside the true branch of a cond."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def inner_true(h):
            return (torch.relu(self.a(h)) * 2.0 + h,)

        def inner_false(h):
            return (torch.sigmoid(self.b(h)) - h,)

        def outer_true(h):
            return (torch.tanh(torch.cond((h * h).mean() > 1.0, inner_true, inner_false, (h,))[0]),)

        def outer_false(h):
            return (h * 3.0 - 1.0,)

        return torch.cond(x.sum() > 0, outer_true, outer_false, (x,))[0]


class StatefulCond(nn.Module):
    """A buffer read inside both branches and updated after the cond: mutable state, never a constant."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.register_buffer("count", torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def positive(x, count):
            return (torch.relu(self.linear(x)) * count + 1.0,)

        def negative(x, count):
            return (torch.sigmoid(self.linear(x)) - count,)

        y = torch.cond(x.sum() > 0, positive, negative, (x, self.count))[0]
        self.count.add_(1)
        return y


class CarriedBuffer(nn.Module):
    """A while_loop whose carried value starts as a buffer: loop-carried, so never inlined as a constant."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.register_buffer("h0", torch.randn(2, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def more(i, h):
            return i < 3

        def step(i, h):
            return i + 1, torch.tanh(self.linear(h)) + x

        return while_loop(more, step, (torch.zeros((), dtype=torch.int64), self.h0))[1]


def _partition(model, settings=None, inputs=None):
    torch.manual_seed(0)
    inputs = inputs if inputs is not None else (torch.randn(4 if isinstance(model, (CondBranches, LoopBody)) else 2, 8),)
    return trtcheck.partition(model.eval(), inputs, settings or trtcheck.Settings(min_block_size=1))


def _node(partition, name):
    return next(node for node in partition.graph_module.graph.nodes if node.name == name)


def _segment_of_flow(partition):
    (segment,) = [s for s in partition.segments if any(map(is_control_flow, s.nodes))]
    return partition.segments.index(segment), segment


def _ops(segment):
    return [node.target for node in segment.nodes]


# --- the control-flow node in the parent ------------------------------------------------------------------


@pytest.mark.parametrize("segmentation", ["dependency_aware", *(pytest.param(s, marks=pytest.mark.slow) for s in ("naive", "optimal"))])
def test_cond_is_a_do_not_merge_torch_segment_with_its_getitem(segmentation):
    partition = _partition(CondBranches(), trtcheck.Settings(min_block_size=1, segmentation=segmentation))
    index, segment = _segment_of_flow(partition)
    assert segment.target is Target.TORCH and segment.do_not_merge
    assert [node.name for node in segment.nodes] == ["cond", "getitem"]
    reason = partition.reasons[_node(partition, "cond")]
    assert reason.kind is ReasonKind.CONTROL_FLOW
    assert "torch.cond" in reason.detail and "true_graph_0, false_graph_0 are partitioned separately" in reason.detail
    assert partition.reasons[_node(partition, "getitem")].kind is ReasonKind.FOLLOWS_PRODUCER
    # the predicate is a Tensor made by an engine; the segments around the cond are engines too
    assert [s.target for s in partition.segments] == [Target.TENSORRT, Target.TORCH, Target.TENSORRT]
    assert trtcheck.check_invariants(partition) == []


def test_neighbouring_torch_segments_stay_apart_from_the_cond():
    # min_block_size 5: the head's two ops fall back to Torch right after the cond's Torch segment
    partition = _partition(CondBranches(), trtcheck.Settings(min_block_size=5))
    assert [s.target for s in partition.segments] == [Target.TENSORRT, Target.TORCH, Target.TORCH]
    assert [node.name for node in partition.segments[1].nodes] == ["cond", "getitem"]
    assert [node.name for node in partition.segments[2].nodes] == ["permute_1", "addmm_1"]
    assert trtcheck.check_invariants(partition) == []


@pytest.mark.slow
def test_isolation_splits_a_torch_segment_around_the_node_and_keeps_its_getitems():
    partition = _partition(CondBranches(), trtcheck.Settings(min_block_size=5))
    merged = Segment(Target.TORCH, [node for segment in partition.segments[1:] for node in segment.nodes])
    merged.nodes.insert(0, _node(partition, "tanh"))  # a node before the cond, in the same Torch segment
    pieces = isolate_control_flow([merged])
    assert [[n.name for n in piece.nodes] for piece in pieces] == [["tanh"], ["cond", "getitem"], ["permute_1", "addmm_1"]]
    assert [piece.do_not_merge for piece in pieces] == [False, True, False]


def test_while_loop_is_a_do_not_merge_torch_segment():
    partition = _partition(LoopBody())
    _, segment = _segment_of_flow(partition)
    assert segment.do_not_merge and [node.name for node in segment.nodes] == ["while_loop", "getitem_1"]
    assert partition.reasons[segment.nodes[0]].kind is ReasonKind.CONTROL_FLOW
    assert set(partition.branches) == {"while_loop_cond_graph_0", "while_loop_body_graph_0"}
    body = partition.branches["while_loop_body_graph_0"]
    assert [s.target for s in body.segments] == [Target.TENSORRT]  # i + 1 and the cell's 5 ops: one engine
    assert aten.relu.default in _ops(body.segments[0])
    assert trtcheck.check_invariants(partition) == []


def test_require_full_compilation_names_the_cond():
    with pytest.raises(trtcheck.PartitionError, match=r"cond \(cond\): Torch - control_flow"):
        _partition(CondBranches(), trtcheck.Settings(require_full_compilation=True))


# --- branches ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_each_branch_is_partitioned_with_the_same_settings():
    partition = _partition(CondBranches(), trtcheck.Settings(min_block_size=5))
    assert set(partition.branches) == BRANCHES
    true, false = partition.branches["true_graph_0"], partition.branches["false_graph_0"]
    assert true.settings is partition.settings and false.settings is partition.settings
    assert _ops(true.segments[0]) == [aten.permute.default, aten.addmm.default, aten.relu.default, aten.mul.Tensor,
                                      aten.add.Tensor, aten.tanh.default]
    assert [s.target for s in true.segments] == [Target.TENSORRT] == [s.target for s in false.segments]
    assert aten.sigmoid.default in _ops(false.segments[0])


def test_a_forced_op_inside_a_branch_runs_in_torch():
    partition = _partition(CondBranches(), trtcheck.Settings(min_block_size=1, torch_executed_ops=["aten::relu"]))
    true = partition.branches["true_graph_0"]
    assert [s.target for s in true.segments] == [Target.TENSORRT, Target.TORCH, Target.TENSORRT]
    (relu,) = true.segments[1].nodes
    assert relu.target is aten.relu.default and true.reasons[relu].kind is ReasonKind.FORCED_OP
    assert trtcheck.check_invariants(partition) == []


@pytest.mark.slow
def test_a_forced_module_enclosing_the_cond_forces_both_branches():
    partition = _partition(CondBranches(), trtcheck.Settings(min_block_size=1, torch_executed_modules=["gate"]))
    assert partition.reasons[_node(partition, "cond")].kind is ReasonKind.FORCED_MODULE  # the user's word first
    _, segment = _segment_of_flow(partition)
    assert segment.do_not_merge  # still a segment of its own: stitching copies it whole
    for name, sub in partition.branches.items():
        assert [s.target for s in sub.segments] == [Target.TORCH], name
        assert {sub.reasons[node].detail for node in sub.compute_nodes} == {"inside 'gate' (torch_executed_modules)"}
    assert trtcheck.check_invariants(partition) == []


def test_parameters_are_inlined_into_a_copy_of_the_branch():
    partition = _partition(CondBranches())
    original = partition.graph_module.true_graph_0
    code = original.code
    branch = partition.branches["true_graph_0"].graph_module
    assert branch is not original
    constants = {node.name: node for node in branch.graph.nodes if node.op == "get_attr"}
    assert set(constants) == {"gate_up_bias", "gate_up_weight"}
    weight = operator.attrgetter(constants["gate_up_weight"].target)(branch)
    assert weight is partition.graph_module.gate.up.weight  # the same tensor: no copy of the weights
    segment = partition.branches["true_graph_0"].segments[0]
    assert constants["gate_up_weight"] in segment.constants and constants["gate_up_weight"] not in segment.inputs
    # the copy takes every operand still (its parameter placeholders are unused); the original is unchanged
    placeholders = [node for node in branch.graph.nodes if node.op == "placeholder"]
    assert len(placeholders) == len(_node(partition, "cond").args[3])
    assert [p.name for p in placeholders if not p.users] == ["p_gate_up_bias", "p_gate_up_weight", "p_gate_down_bias",
                                                             "p_gate_down_weight"]
    assert original.code == code and all(p.users for p in original.graph.nodes if p.name == "p_gate_up_weight")


@pytest.mark.slow
def test_a_users_graph_module_and_its_branches_are_left_as_they_were():
    model, inputs = CondBranches().eval(), (torch.randn(4, 8),)
    lowered = trtcheck.lower(model, inputs)
    before = (lowered.code, lowered.true_graph_0.code, lowered.false_graph_0.code)
    partition = trtcheck.partition(lowered, inputs, trtcheck.Settings(min_block_size=1))
    assert partition.branches["true_graph_0"].graph_module is not lowered.true_graph_0
    assert (lowered.code, lowered.true_graph_0.code, lowered.false_graph_0.code) == before


@pytest.mark.slow
def test_mutable_state_stays_an_input_of_the_branch():
    partition = _partition(StatefulCond())
    for name in BRANCHES:
        sub = partition.branches[name]
        constants = {node.name for node in sub.graph_module.graph.nodes if node.op == "get_attr"}
        assert constants == {"linear_bias", "linear_weight"}, name  # the parameters inlined, the buffer not
        (segment,) = sub.segments
        assert "b_count" in [value.name for value in segment.inputs], name
    assert trtcheck.check_invariants(partition) == []


@pytest.mark.slow
def test_a_loop_carried_constant_stays_an_input_of_the_body():
    partition = _partition(CarriedBuffer())
    body = partition.branches["while_loop_body_graph_0"]
    constants = {node.name for node in body.graph_module.graph.nodes if node.op == "get_attr"}
    assert constants == {"linear_bias", "linear_weight"}  # additional inputs inlined, h0 (carried) not
    assert {"arg0_1", "arg1_1", "arg4_1"} <= {value.name for value in body.segments[0].inputs}


@pytest.mark.slow
def test_nested_conds_are_partitioned_recursively():
    partition = _partition(NestedCond())
    outer = partition.branches["true_graph_0"]
    assert set(partition.branches) == BRANCHES and set(outer.branches) == BRANCHES
    inner = outer.branches["true_graph_0"]
    assert aten.relu.default in _ops(inner.segments[0]) and inner.segments[0].target is Target.TENSORRT
    # the inner branch's weights were operands of the outer branch (its placeholders), inlined twice over
    assert {node.name for node in inner.graph_module.graph.nodes if node.op == "get_attr"} == {"a_bias", "a_weight"}
    _, segment = _segment_of_flow(outer)
    assert segment.do_not_merge and outer.reasons[segment.nodes[0]].kind is ReasonKind.CONTROL_FLOW
    assert trtcheck.check_invariants(partition) == []


# --- printout and explain ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_printout_lists_each_branch_indented_under_its_name():
    text = str(_partition(NestedCond()))
    assert "\nSub-partition true_graph_0 (a branch of %cond):\n    Segment Block @0:\n        Target: TensorRT" in text
    assert "\n    Sub-partition true_graph_0 (a branch of %cond):\n        Segment Block @0:" in text  # nested, deeper
    assert "\nSub-partition false_graph_0 (a branch of %cond):\n" in text


@pytest.mark.slow
def test_explain_names_branch_nodes_with_their_branch():
    partition = _partition(NestedCond(), trtcheck.Settings(min_block_size=1, torch_executed_ops=["aten::sigmoid"]))
    lines = partition.explain().splitlines()
    assert any(line.startswith("true_graph_0/true_graph_0/relu (aten::relu): TensorRT - convertible [from ") for line in lines)
    assert any(line.startswith("true_graph_0/false_graph_0/sigmoid (aten::sigmoid): Torch - forced_op") for line in lines)
    assert any(line.startswith("cond (cond): Torch - control_flow: torch.cond runs in PyTorch") for line in lines)
    inner = partition.branches["true_graph_0"].branches["true_graph_0"]
    (relu,) = [n for n in inner.compute_nodes if n.target is aten.relu.default]
    assert partition.explain([relu]).startswith("true_graph_0/true_graph_0/relu (aten::relu): TensorRT - convertible [from ")


@pytest.mark.slow
def test_the_summary_counts_branch_nodes_and_engines():
    partition = _partition(CondBranches(), trtcheck.Settings(min_block_size=5))
    summary = ExplainSummary.of(partition)
    # compute nodes as min_block_size counts them: the getitem of the cond's result is not one
    parent = sum(map(counts_toward_block_size, partition.compute_nodes))
    inside = sum(sum(map(counts_toward_block_size, sub.compute_nodes)) for sub in partition.branches.values())
    assert (summary.compute_nodes, summary.branch_nodes, summary.branches) == (parent + inside, inside, 2)
    assert [engine.label for engine in summary.engines] == ["@0", "true_graph_0@0", "false_graph_0@0"]
    text = partition.explain_summary().splitlines()
    assert text[0] == (
        f"op coverage: {summary.coverage:.1f}% (18 of 21 compute nodes in TensorRT; 13 of them in 2 branch graphs "
        "of control flow, each counted once)"
    )
    assert text[1] == "engines: 3 (nodes per engine: @0: 5, true_graph_0@0: 6, false_graph_0@0: 7)"
    assert partition.summary().endswith("; in 2 branch graphs: 2 segments: 2 TensorRT (13 compute nodes), 0 Torch (0 compute nodes)")


@pytest.mark.slow
def test_summary_groups_name_branch_nodes_with_their_branch():
    partition = _partition(CondBranches(), trtcheck.Settings(min_block_size=1, torch_executed_ops=["aten::relu"]))
    groups = {group.kind: group.nodes for group in ExplainSummary.of(partition).torch_groups}
    assert groups[ReasonKind.FORCED_OP] == ("true_graph_0/relu",)
    assert groups[ReasonKind.CONTROL_FLOW] == ("cond",)


@pytest.mark.slow
def test_the_html_page_draws_the_parent_and_sums_up_branches():
    partition = _partition(CondBranches(), trtcheck.Settings(min_block_size=5))
    page = partition_html(partition)
    assert page.count('class="legend" data-segment=') == len(partition.segments)  # one entry per drawn segment
    assert "engine @0: 5 compute nodes" in page and "true_graph_0@0: 6" in page  # branch engines: in the summary line


# --- invariants, each fired on a partition corrupted by hand ----------------------------------------------


@pytest.fixture
def cond_partition():
    partition = _partition(CondBranches(), trtcheck.Settings(min_block_size=5))
    assert trtcheck.check_invariants(partition) == []
    return partition


def _violations(partition, rule):
    return [v for v in trtcheck.check_invariants(partition) if v.rule == rule]


def test_a_control_flow_node_in_tensorrt_is_caught(cond_partition):
    cond_partition.segments[1].target = Target.TENSORRT
    (violation, *_) = _violations(cond_partition, "control_flow")
    assert (violation.segment, violation.node) == (1, "cond") and "in a TensorRT segment" in violation.message


@pytest.mark.slow
def test_a_control_flow_segment_without_do_not_merge_is_caught(cond_partition):
    cond_partition.segments[1].do_not_merge = False
    messages = [v.message for v in _violations(cond_partition, "control_flow")]
    assert messages == ["the segment of a control-flow node is not do_not_merge"]
    assert "merge" in {v.rule for v in trtcheck.check_invariants(cond_partition)}  # and it now could merge


@pytest.mark.slow
def test_a_control_flow_node_merged_with_other_nodes_is_caught(cond_partition):
    cond, head = cond_partition.segments[1], cond_partition.segments.pop(2)
    cond.nodes += head.nodes
    (violation,) = _violations(cond_partition, "control_flow")
    assert violation.message == "control-flow node merged with other nodes (permute_1, addmm_1)"


@pytest.mark.slow
def test_a_getitem_away_from_its_control_flow_node_is_caught(cond_partition):
    getitem = cond_partition.segments[1].nodes.pop()
    cond_partition.segments[2].nodes.insert(0, getitem)
    (violation,) = _violations(cond_partition, "control_flow")
    assert violation.node == "cond" and "getitem(s) getitem of its result lie in other segments" in violation.message


@pytest.mark.slow
def test_a_missing_or_stray_subpartition_is_caught(cond_partition):
    false = cond_partition.branches.pop("false_graph_0")
    (violation,) = _violations(cond_partition, "subpartition")
    assert violation.node == "cond" and "branch false_graph_0 has no sub-partition" in violation.message
    cond_partition.branches["false_graph_0"] = false
    cond_partition.branches["elsewhere"] = false
    (violation,) = _violations(cond_partition, "subpartition")
    assert violation.branch == "elsewhere" and "no control-flow node" in violation.message


def test_violations_inside_a_branch_name_the_branch(cond_partition):
    cond_partition.branches["true_graph_0"].segments[0].nodes.pop()  # drop the branch's tanh
    (violation,) = _violations(cond_partition, "placement")
    assert (violation.branch, violation.node) == ("true_graph_0", "tanh_1")
    assert str(violation) == "[placement] branch true_graph_0, node tanh_1: compute node in no segment"


@pytest.mark.slow
def test_violations_of_a_nested_branch_name_its_path():
    partition = _partition(NestedCond())
    inner = partition.branches["true_graph_0"].branches["false_graph_0"]
    dropped = inner.segments[0].nodes.pop()
    violations = trtcheck.check_invariants(partition)
    assert {v.branch for v in violations} == {"true_graph_0/false_graph_0"}
    assert ("placement", dropped.name) in {(v.rule, v.node) for v in violations}


@pytest.mark.slow
def test_forced_modules_are_checked_inside_branches():
    partition = _partition(CondBranches(), trtcheck.Settings(min_block_size=1, torch_executed_modules=["gate"]))
    partition.branches["false_graph_0"].segments[0].target = Target.TENSORRT
    violations = _violations(partition, "forced_module")
    assert violations and {v.branch for v in violations} == {"false_graph_0"}


def test_the_former_name_of_branches_still_reads_them_and_says_it_is_deprecated():
    partition = _partition(CondBranches(), trtcheck.Settings(min_block_size=1))
    with pytest.warns(DeprecationWarning, match="Partition.branches"):
        assert partition.subpartitions is partition.branches
    with pytest.warns(DeprecationWarning, match="branches="):
        again = partition.with_fallbacks(subpartitions=partition.branches)
    assert again.branches == partition.branches
