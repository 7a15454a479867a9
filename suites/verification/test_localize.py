"""Localization: a failing ``verify`` names the op whose own error fails the check, proven on planted bugs.

Each test plants a wrong converter through the public registry API (``planted``) for chosen nodes of a zoo model,
and requires the localization to name exactly that node, its op and the planted converter, whatever the error
does downstream (a relu or a max-pool hiding part of it, the error showing only on some inputs).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import trtcheck
from suites.verification.planted import off_above, off_by, planted
from trtcheck.benchmarking import flush_denormals
from trtcheck.lowering.graph import flat_inputs
from trtcheck.partitioning.extract import segment_module
from trtcheck.partitioning.reasons import Target
from trtcheck.verification.localize import localize
from trtcheck.verification.probes import check_nodes, subgraph_module
from trtcheck.verification.recording import record_eager
from trtcheck.verification.reduce import reduce_compiled
from trtcheck_zoo import registry as zoo

aten = torch.ops.aten
ORT = "onnxruntime"
ONE = trtcheck.Settings(min_block_size=1)


@pytest.fixture(autouse=True)
def _no_denormals():
    """Random-weight zoo models make denormal activations, which slow eager PyTorch 50x on x86 (bench_compile)."""
    with flush_denormals():  # restores the state it found (set_flush_denormal returns support, not the state)
        yield


def _localized(name: str, **options):
    model, inputs = zoo.get(name).build()
    compiled = trtcheck.compile(model, inputs, backend=ORT)
    return localize(compiled, flat_inputs(compiled.partition.graph_module, inputs, {}), ORT, **options)


@pytest.mark.slow
def test_a_failing_verify_names_the_planted_op_and_its_converter_in_its_message():
    model, inputs = zoo.get("resnet18").build()
    with planted(aten.add.Tensor, {"add_3"}, off_by(1.001)):
        with pytest.raises(trtcheck.VerificationError) as caught:
            trtcheck.verify(model, inputs, backend=ORT)
    found = caught.value.report.localization
    assert found is not None and found.culprit is not None, str(caught.value)
    culprit = found.culprit
    assert (culprit.node, culprit.op) == ("add_3", "aten.add.Tensor")
    assert culprit.converter.startswith("suites.verification.planted.planted.")  # the planted function, not the built-in
    assert culprit.survives_isolation and not culprit.ill_conditioned
    assert 0.9e-3 < culprit.local_rel < 1.1e-3  # off by 1.001: its own relative error, not the accumulated one
    assert len(culprit.inputs) == 2 and all(value.nans == value.infs == 0 for value in culprit.inputs)
    message = str(caught.value)
    assert "culprit: add_3 = aten.add.Tensor (segment @0), converted by suites.verification.planted" in message
    assert "this op's converter is wrong" in message and "still fails alone" in message


@pytest.mark.slow
def test_an_error_a_relu_and_a_max_pool_hide_in_part_is_blamed_on_the_op_that_made_it():
    # resnet18 starts convolution -> batch norm -> relu -> max-pool: the wrong convolution's error reaches the output
    # only through the relu (negatives zeroed) and the max (only the largest of each window), yet the culprit is it
    with planted(aten.convolution.default, {"convolution"}, off_by(1.002)):
        found = _localized("resnet18")
    assert found.culprit is not None and found.culprit.node == "convolution", str(found)
    assert found.culprit.op == "aten.convolution.default" and found.culprit.survives_isolation


@pytest.mark.slow
def test_an_op_wrong_only_on_some_inputs_is_named_in_a_transformer():
    # the first feed-forward relu is wrong only where its output exceeds 0.5, on a share of the activations
    with planted(aten.relu.default, {"relu"}, off_above(0.5, 1.01)):
        found = _localized("padded_transformer")
    assert found.culprit is not None and found.culprit.node == "relu", str(found)
    assert found.segments and not found.segments[0].local_passed
    assert found.culprit.inputs[0].high > 0.5  # the input range shows where it goes wrong


@pytest.mark.slow
def test_the_first_of_two_wrong_ops_in_dataflow_order_is_the_culprit():
    with planted(aten.add.Tensor, {"add_5"}, off_by(1.001)), planted(aten.add.Tensor, {"add_1"}, off_by(1.001)):
        found = _localized("resnet18")
    assert found.culprit is not None and found.culprit.node == "add_1", str(found)


class Cancelling(nn.Module):
    """A matmul whose weights sum to zero down each column, fed 3000 + noise: its result is a difference of terms
    of 3000, far below them, so any float32 summation order is as far from float64 as any other."""

    def __init__(self) -> None:
        super().__init__()
        weight = torch.randn(1024, 64, generator=torch.Generator().manual_seed(0))
        self.weight = nn.Parameter(weight - weight.mean(0))

    def forward(self, x):
        return torch.relu(x) @ self.weight


@pytest.mark.slow
def test_an_ill_conditioned_op_is_told_from_a_wrong_converter():
    inputs = (3000 + 1e-3 * torch.randn(4, 1024, generator=torch.Generator().manual_seed(1)),)
    with pytest.raises(trtcheck.VerificationError) as caught:  # without the float64 judge the tolerances fail it
        trtcheck.verify(Cancelling().eval(), inputs, ONE, backend=ORT, reference=False)
    culprit = caught.value.report.localization.culprit
    assert culprit is not None and culprit.op == "aten.mm.default"
    assert culprit.ill_conditioned, str(caught.value.report.localization)
    assert "ill-conditioned on these inputs" in str(caught.value)
    assert trtcheck.verify(Cancelling().eval(), inputs, ONE, backend=ORT).passed  # the float64 judge forgives it


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 8), nn.Linear(8, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)) + x)


def test_localization_is_off_with_a_budget_of_zero_and_cut_short_by_a_tiny_one():
    torch.manual_seed(0)
    model, inputs = Small().eval(), (torch.randn(2, 8),)
    with planted(aten.relu.default, None, off_by(1.01)):
        with pytest.raises(trtcheck.VerificationError) as caught:
            trtcheck.verify(model, inputs, ONE, backend=ORT, localize_budget=0)
        assert caught.value.report.localization is None
        compiled = trtcheck.compile(model, inputs, ONE, backend=ORT)
        found = localize(compiled, list(inputs), ORT, budget=1e-9)
    assert found.cut_short and "cut short by its time budget" in str(found)


def test_a_sub_engine_fed_recorded_values_fails_only_where_the_planted_node_is():
    torch.manual_seed(0)
    model, inputs = Small().eval(), (torch.randn(2, 8),)
    with planted(aten.relu.default, None, off_by(1.01)):
        compiled = trtcheck.compile(model, inputs, ONE, backend=ORT)
        gm = compiled.partition.graph_module
        values = record_eager(gm, list(inputs))
        nodes = {node.name: node for node in gm.graph.nodes}
        assert check_nodes(gm, [nodes["relu"]], values, ORT).failed
        after = [node for node in gm.graph.nodes if node.op == "call_function" and node.name not in ("relu", "addmm")]
        assert not check_nodes(gm, after, values, ORT).failed  # downstream of the bug, fed eager's values: right


@pytest.mark.slow
def test_resnet50_localizes_and_reduces_one_planted_add():
    """The issue's size: a 500-node graph, one wrong add in its middle (bench_localize times the same)."""
    model, inputs = zoo.get("resnet50").build()
    with planted(aten.add.Tensor, {"add_8"}, off_by(1.001)):
        compiled = trtcheck.compile(model, inputs, backend=ORT)
        flat = flat_inputs(compiled.partition.graph_module, inputs, {})
        found = localize(compiled, flat, ORT, budget=None)
        reduction = reduce_compiled(compiled, flat, ORT)
    assert found.culprit is not None and found.culprit.node == "add_8", str(found)
    assert [culprit.nodes for culprit in reduction.culprits] == [["add_8"]], str(reduction)


def test_each_engine_has_its_local_and_accumulated_error_and_the_first_wrong_one_is_the_culprit():
    # relu forced to PyTorch: engine @0 (fc1's addmm), Torch (relu), engine @2 (the add, fc2's addmm)
    torch.manual_seed(0)
    model, inputs = Small().eval(), (torch.randn(2, 8),)
    settings = trtcheck.Settings(min_block_size=1, torch_executed_ops=["aten::relu"])
    with planted(aten.addmm.default, {"addmm"}, off_by(1.01)):  # fc1, in the first engine
        compiled = trtcheck.compile(model, inputs, settings, backend=ORT)
        found = localize(compiled, list(inputs), ORT)
    first, second = found.segments
    assert (first.index, second.index) == (0, 2) and found.culprit_segment == 0, str(found)
    assert not first.local_passed and second.local_passed and not second.accumulated_passed  # @2 inherits @0's error
    assert "ok locally, inherits error" in str(found) and found.culprit.node == "addmm"
    with planted(aten.add.Tensor, None, off_by(1.01)):  # the add, in the second engine: the first is right
        compiled = trtcheck.compile(model, inputs, settings, backend=ORT)
        found = localize(compiled, list(inputs), ORT)
    assert found.segments[0].local_passed and found.segments[0].accumulated_passed and found.culprit_segment == 2
    assert found.culprit.node == "add" and found.culprit.segment == 2, str(found)


def test_a_sub_engine_of_a_segments_nodes_is_cut_as_compile_cuts_the_segment():
    """Localization's sub-engines are cut by ``partitioning.extract``, the function compile converts segments from:
    the nodes of a segment, with its outputs, give the very module compile converted (same inputs, same code)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5)).eval()
    inputs = (torch.randn(2, 3, 8, 8),)
    partition = trtcheck.partition(model, inputs, trtcheck.Settings(min_block_size=1, torch_executed_ops=["aten.relu.default"]))
    gm = partition.graph_module
    values = record_eager(gm, flat_inputs(gm, inputs, {}))
    segments = [s for s in partition.segments if s.target is Target.TENSORRT]
    assert len(segments) == 2  # the convolution, then the linear layer after the relu left in PyTorch
    for segment in segments:
        cut, fed = subgraph_module(gm, segment.nodes, values, segment.outputs)
        assert fed == segment.inputs
        assert cut.code == segment_module(gm, segment).code


class Normed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(16, 32), nn.LayerNorm(32), nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(self.norm(self.fc1(x)))


def test_a_multi_output_culprit_is_judged_against_float64_per_output():
    """Issue 43, item 5: ``native_layer_norm`` returns ``(out, mean, rstd)``; as a culprit it got "no float64 reference
    for this op: the tolerances alone decide" and an accumulated error of nan. Each floating output it hands on (its
    ``getitem``) now has a float64 reference and an accumulated error."""
    import math

    def skewed(ctx, node, out):  # the normalised output 1% off; mean and rstd (unused) as they were
        return [ctx.add("Mul", [out[0], ctx.constant(1.01, node.meta["val"][0].dtype)]), *out[1:]]

    torch.manual_seed(0)
    model, x = Normed().eval(), torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
    with planted(aten.native_layer_norm.default, None, skewed):
        with pytest.raises(trtcheck.VerificationError) as caught:
            trtcheck.verify(model, (x,), ONE, backend=ORT)
    culprit = caught.value.report.localization.culprit
    assert culprit is not None and culprit.op == "aten.native_layer_norm.default", str(caught.value)
    assert culprit.op_float64_error is not None and culprit.eager_error is not None
    assert not culprit.ill_conditioned and culprit.op_float64_error > 100 * culprit.eager_error
    assert math.isfinite(culprit.accumulated_error) and culprit.accumulated_error > 0
    assert "this op's converter is wrong" in str(caught.value) and "no float64 reference" not in str(caught.value)


class ConvBnPool(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn, self.pool = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.MaxPool2d(2)
        self.fc = nn.Linear(4 * 3 * 3, 5)

    def forward(self, x):
        return self.fc(self.pool(self.bn(self.conv(x))).flatten(1))


@pytest.mark.parametrize("op", [aten._native_batch_norm_legit_no_training.default, aten.max_pool2d_with_indices.default],
                         ids=["batch_norm", "max_pool_with_indices"])
def test_other_multi_output_culprits_are_judged_against_float64(op):
    """Issue 43, item 5's other two: batch norm returns ``(out, mean, rstd)``, max-pool ``(values, indices)``. A planted
    error in the first output is named as a wrong converter against float64, with a finite accumulated error."""
    import math

    def skewed(ctx, node, out):  # the first output 1% off; the others as they were
        return [ctx.add("Mul", [out[0], ctx.constant(1.01, node.meta["val"][0].dtype)]), *out[1:]]

    torch.manual_seed(0)
    model, x = ConvBnPool().eval(), torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():  # a batch norm whose statistics are not the identity
        model.bn.running_mean.uniform_(-1, 1), model.bn.running_var.uniform_(0.5, 2)
    with planted(op, None, skewed):
        with pytest.raises(trtcheck.VerificationError) as caught:
            trtcheck.verify(model, (x,), ONE, backend=ORT)
    culprit = caught.value.report.localization.culprit
    assert culprit is not None and culprit.op == str(op), str(caught.value)
    assert culprit.op_float64_error is not None and culprit.eager_error is not None
    assert not culprit.ill_conditioned and math.isfinite(culprit.accumulated_error) and culprit.accumulated_error > 0
    assert "this op's converter is wrong" in str(caught.value) and "no float64 reference" not in str(caught.value)
