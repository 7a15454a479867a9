"""Localization inside control flow: a wrong converter in a ``torch.cond`` branch or a ``while_loop`` body is named.

The cond or loop node runs in PyTorch, its branches are compiled on their own, with their own engines. Localization
used to re-run the node in PyTorch on the lowered branches, so a branch engine's error vanished from the
accumulated path and no engine failed locally: "the mismatch is rounding accumulated across engines" (issue 43,
item 4). Each test plants a wrong converter (``planted``) and requires ``verify``'s localization to name the planted
node, where it is (which branch, which iteration) and its local error; and a bug outside the branches must still be
blamed on the top-level op, with no branch engine failing.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch._higher_order_ops.while_loop import while_loop

import trtcheck
from suites.verification.planted import off_above, off_by, planted, run_repro
from trtcheck.verification.reduce import reduce_model
from trtcheck_zoo import registry as zoo

aten = torch.ops.aten
ORT = "onnxruntime"
ONE = trtcheck.Settings(min_block_size=1)


def _localization(model: nn.Module, inputs: tuple, target, nodes: set[str] | None, transform=None):
    """``verify`` of ``model`` with ``target``'s converter planted wrong for ``nodes``: it must fail; its localization."""
    with planted(target, nodes, transform or off_by(1.01)):
        with pytest.raises(trtcheck.VerificationError) as caught:
            trtcheck.verify(model, inputs, ONE, backend=ORT)
    found = caught.value.report.localization
    assert found is not None, str(caught.value)
    return found, str(caught.value)


@pytest.mark.parametrize(("op", "node", "branch"), [
    ("tanh", "tanh_1", "true_graph_0"),  # positive: tanh(relu(up(h)) * 0.5 + h)
    ("exp", "exp", "false_graph_0"),  # negative: sigmoid(down(h)) * 2 - exp(h * 0.5)
])
def test_a_wrong_converter_in_a_cond_branch_is_the_culprit_named_with_its_branch(op, node, branch):
    model, inputs = zoo.get("cond_branches").build()
    found, message = _localization(model, inputs, getattr(aten, op).default, {node})
    culprit = found.culprit
    where = f"branch {branch} of cond (node cond)"
    assert culprit is not None and (culprit.node, culprit.op) == (node, f"aten.{op}.default"), message
    assert culprit.where == found.culprit_where == where and culprit.survives_isolation and not culprit.ill_conditioned
    assert 0.9e-2 < culprit.local_rel < 1.1e-2 and culprit.local_error > 0  # off by 1.01: its own error
    assert culprit.converter.startswith("suites.verification.planted.planted.")
    assert f"culprit: {node} = aten.{op}.default (segment @0) in {where}, converted by suites.verification.planted" in message
    inside = [segment for segment in found.segments if segment.where]
    assert [segment.where for segment in inside] == [where] and not inside[0].local_passed, message
    # the engine after the cond is right, and inherits the compiled branch's error (it ran the branch's engine)
    after = found.segments[-1]
    assert after.where == "" and after.local_passed and not after.accumulated_passed and after.accumulated > 1e-4, message
    assert "rounding accumulated across engines" not in message


def test_a_wrong_converter_in_a_while_loop_body_is_the_culprit_named_with_its_iteration():
    model, inputs = zoo.get("while_loop_body").build()  # body: i + 1, tanh(relu(cell(h)) + h), 3 iterations
    found, message = _localization(model, inputs, aten.tanh.default, {"tanh"})
    culprit = found.culprit
    where = "the body of while_loop (node while_loop), iteration 1"
    assert culprit is not None and (culprit.node, culprit.op) == ("tanh", "aten.tanh.default"), message
    assert culprit.where == where and culprit.survives_isolation and 0.9e-2 < culprit.local_rel < 1.1e-2
    assert f"culprit: tanh = aten.tanh.default (segment @0) in {where}, converted by" in message
    after = found.segments[-1]  # the head, after the loop, inherits the compiled body's error
    assert after.where == "" and after.local_passed and not after.accumulated_passed, message


@pytest.mark.slow  # the default tier keeps a cond branch, a loop body and a top-level bug
def test_a_wrong_loop_condition_is_the_culprit_though_it_hands_on_no_floating_value():
    """The condition's segment is one ``lt`` whose bool output is all it hands on: the sub-engines compare floating
    values only, so this used to end in "fails as one engine but not as a sub-engine (a fusion)", no culprit."""

    def negated(ctx, node, out):  # i < 3 read as i >= 3: the compiled loop stops before its first iteration
        return ctx.add("Not", [out])

    model, inputs = zoo.get("while_loop_body").build()
    found, message = _localization(model, inputs, aten.lt.Scalar, {"lt"}, negated)
    culprit = found.culprit
    assert culprit is not None and (culprit.node, culprit.op) == ("lt", "aten.lt.Scalar"), message
    assert culprit.where == "the condition of while_loop (node while_loop), iteration 1" and culprit.survives_isolation
    assert culprit.local_error == 1 and "(a fusion)" not in message, message
    assert "the compiled module's loop while_loop stops at iteration 1" in message, message


class Doubling(nn.Module):
    """A loop whose body doubles its carried value, in (0, 1) on entry: the body's relu sees values below 2, 4, 8
    in iterations 1, 2, 3, so a converter wrong only above 4.5 is wrong from iteration 3 on."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def more(i: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
            return i < 4

        def step(i: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return i + 1, torch.relu(h * 2.0)

        _, h = while_loop(more, step, (torch.zeros((), dtype=torch.int64), torch.sigmoid(x)))
        return h + 1.0


@pytest.mark.slow  # the default tier keeps a cond branch, a loop body and a top-level bug
def test_a_loop_body_wrong_only_in_a_later_iteration_names_that_iteration():
    torch.manual_seed(0)
    inputs = (torch.randn(4, 8),)
    found, message = _localization(Doubling().eval(), inputs, aten.relu.default, {"relu"}, off_above(4.5, 1.01))
    culprit = found.culprit
    assert culprit is not None and culprit.node == "relu", message
    assert culprit.where == "the body of while_loop (node while_loop), iteration 3", message
    assert culprit.inputs[0].high > 4.5  # the input range shows the values it goes wrong on
    body = [segment for segment in found.segments if segment.where.startswith("the body")]
    assert [segment.local_passed for segment in body] == [False], message


class Nested(nn.Module):
    """A cond inside a loop body: the culprit is two graphs down, in the cond's branch at the loop's first iteration."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def more(i: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
            return i < 2

        def step(i: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            g = torch.cond(h.sum() > -1e9, lambda h: (torch.tanh(self.fc(h)) + h,), lambda h: (torch.sigmoid(h),), (h,))
            return i + 1, g[0] * 0.5

        _, h = while_loop(more, step, (torch.zeros((), dtype=torch.int64), x))
        return h + 1.0


@pytest.mark.slow  # the default tier keeps a cond branch, a loop body and a top-level bug
def test_a_wrong_converter_in_a_cond_inside_a_loop_body_is_named_with_both_places():
    torch.manual_seed(0)
    found, message = _localization(Nested().eval(), (torch.randn(4, 8),), aten.tanh.default, None)
    where = "branch true_graph_0 of cond (node cond), in the body of while_loop (node while_loop), iteration 1"
    assert found.culprit is not None and (found.culprit.node, found.culprit.where) == ("tanh", where), message
    assert [segment.local_passed for segment in found.segments if segment.where == where] == [False], message


def test_a_wrong_top_level_op_of_a_model_with_a_cond_is_named_and_no_branch_engine_is_blamed():
    model, inputs = zoo.get("cond_branches").build()  # stem's tanh, before the cond, in the top-level engine @0
    found, message = _localization(model, inputs, aten.tanh.default, {"tanh"})
    culprit = found.culprit
    assert culprit is not None and (culprit.node, culprit.where, culprit.segment) == ("tanh", "", 0), message
    assert found.culprit_where == "" and "culprit: tanh = aten.tanh.default (segment @0), converted by" in message
    inside = [segment for segment in found.segments if segment.where]
    assert inside and all(segment.local_passed for segment in inside), message  # the branch is right on eager's values
    assert not all(segment.accumulated_passed for segment in inside), message  # and inherits the stem's error
    assert math.isfinite(culprit.local_error) and culprit.local_error > 0


@pytest.mark.slow  # the default tier keeps a cond branch, a loop body and a top-level bug
def test_a_wrong_op_that_flips_a_conds_predicate_is_named_and_the_flip_is_said():
    def negated(ctx, node, out):  # the stem's tanh negated: the predicate h.sum() > 0 flips on every input
        return ctx.add("Neg", [out])

    model, inputs = zoo.get("cond_branches").build()
    found, message = _localization(model, inputs, aten.tanh.default, {"tanh"}, negated)
    assert found.culprit is not None and (found.culprit.node, found.culprit.where) == ("tanh", ""), message
    assert "the compiled module's predicate of cond differs from eager's" in message, message


@pytest.mark.parametrize(("name", "node", "where"), [
    ("cond_branches", "tanh_1", "branch true_graph_0 of cond (node cond)"),
    ("while_loop_body", "tanh", "the body of while_loop (node while_loop), iteration 1"),
])
def test_reduce_of_a_mismatch_inside_a_branch_reduces_it_there_to_a_repro_that_fails_until_fixed(tmp_path, name, node, where):
    """``reduce`` found no top-level set failing and said it could not reduce inside branches; it now reduces the
    branch localization found the culprit in, on eager's values there, to a repro that fails while the bug is in."""
    model, inputs = zoo.get(name).build()
    with planted(aten.tanh.default, {node}, off_by(1.01)):
        reduction = reduce_model(model, inputs, ONE, ORT, out_dir=tmp_path)
        assert [(culprit.nodes, culprit.where) for culprit in reduction.culprits] == [([node], where)], str(reduction)
        assert f"1 node(s) in {where}: {node} = aten.tanh.default" in str(reduction)
        assert run_repro(reduction.culprits[0].repro) == 1  # FAIL with the bug
    assert run_repro(reduction.culprits[0].repro) == 0  # PASS once the built-in converter is back
    assert reduction.failed and "cannot reduce inside" not in str(reduction)
