"""Per-node decisions and their reasons, settings spellings, module fallback, and the boundary rules."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.fx

import trtcheck
from suites.partitioning.partitioning_cases import SeedModel, no_lgamma
from trtcheck import ReasonKind, Target
from trtcheck.provenance import module_stack
from trtcheck.testing.random_graphs import supports_all_but

aten = torch.ops.aten


def by_name(partition):
    return {node.name: node for node in partition.compute_nodes}


def where(partition, name):
    node = by_name(partition)[name]
    return partition.target_of(node), partition.reasons[node].kind


def trace(fn, *inputs):
    """An ATen GraphModule from a function written with torch.ops.aten calls."""
    return torch.fx.symbolic_trace(fn), inputs


# --- reasons ------------------------------------------------------------------------------------------


def test_convertible_and_no_converter_reasons(seed_inputs):
    partition = trtcheck.partition(SeedModel(), seed_inputs, trtcheck.Settings(min_block_size=1), no_lgamma)
    assert where(partition, "add") == (Target.TENSORRT, ReasonKind.CONVERTIBLE)
    assert where(partition, "lgamma") == (Target.TORCH, ReasonKind.NO_CONVERTER)
    assert "lgamma" in partition.reasons[by_name(partition)["lgamma"]].detail


@pytest.mark.parametrize(
    "spelling",
    ["aten::mul", "aten.mul", "aten.mul.Tensor", torch.ops.aten.mul, torch.ops.aten.mul.Tensor],
    ids=["ns::op", "ns.op", "ns.op.overload", "packet", "overload"],
)
def test_every_torch_executed_ops_spelling_forces_the_op(seed_inputs, spelling):
    settings = trtcheck.Settings(min_block_size=1, torch_executed_ops=[spelling])
    partition = trtcheck.partition(SeedModel(), seed_inputs, settings, no_lgamma)
    assert where(partition, "mul") == (Target.TORCH, ReasonKind.FORCED_OP)
    assert where(partition, "add") == (Target.TENSORRT, ReasonKind.CONVERTIBLE)


def test_an_overload_name_matches_only_that_overload():
    def fn(x):
        return aten.add.Scalar(aten.add.Tensor(x, x), 2)

    gm, inputs = trace(fn, torch.rand(3))
    settings = trtcheck.Settings(min_block_size=1, torch_executed_ops=["aten.add.Scalar"])
    partition = trtcheck.partition(gm, inputs, settings, support=lambda n: True)
    assert where(partition, "add_tensor")[0] is Target.TENSORRT
    assert where(partition, "add_scalar") == (Target.TORCH, ReasonKind.FORCED_OP)
    settings.torch_executed_ops = ["aten::add"]  # the packet: every overload
    partition = trtcheck.partition(gm, inputs, settings, support=lambda n: True)
    assert {where(partition, n)[1] for n in ("add_tensor", "add_scalar")} == {ReasonKind.FORCED_OP}


def test_forced_op_wins_over_missing_converter_in_the_reason(seed_inputs):
    settings = trtcheck.Settings(min_block_size=1, torch_executed_ops=["aten::lgamma"])
    partition = trtcheck.partition(SeedModel(), seed_inputs, settings, no_lgamma)
    assert where(partition, "lgamma") == (Target.TORCH, ReasonKind.FORCED_OP)


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)) + x)


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 4, 1)
        self.layer1 = torch.nn.Sequential(Block(), Block())
        self.head = torch.nn.Conv2d(4, 2, 1)

    def forward(self, x):
        return self.head(self.layer1(torch.relu(self.stem(x)))).sigmoid()


@pytest.fixture(scope="module")
def net():
    torch.manual_seed(0)
    return Net().eval(), (torch.rand(1, 3, 8, 8),)


def modules_of(node):
    return [path for path, _ in module_stack(node)]


@pytest.mark.parametrize("spec", ["layer1.1", "Block", f"{Block.__module__}.Block"])
def test_module_fallback_by_path_and_by_class(net, spec):
    model, inputs = net
    settings = trtcheck.Settings(min_block_size=1, torch_executed_modules=[spec])
    partition = trtcheck.partition(model, inputs, settings, support=lambda n: True)
    forced = [n for n in partition.compute_nodes if partition.reasons[n].kind is ReasonKind.FORCED_MODULE]
    assert forced, partition.explain()
    expected_paths = {"layer1.1"} if spec == "layer1.1" else {"layer1.0", "layer1.1"}
    for node in partition.compute_nodes:
        inside = bool(expected_paths & set(modules_of(node)))
        assert (partition.target_of(node) is Target.TORCH) == inside, partition.explain([node])
    assert trtcheck.check_invariants(partition, support=lambda n: True) == []


# --- getitem and tuple-returning ops ------------------------------------------------------------------


class TupleOps(torch.nn.Module):
    def forward(self, x):
        values, indices = torch.max(x, dim=1)
        halves = torch.split(x, 2, dim=1)
        return torch.lgamma(values + 1) * 2, indices + 1, halves[0] - halves[1]


def test_getitem_follows_its_producer():
    inputs = (torch.rand(3, 4) + 0.5,)
    partition = trtcheck.partition(TupleOps(), inputs, trtcheck.Settings(min_block_size=1), no_lgamma)
    getitems = [n for n in partition.compute_nodes if n.target is operator.getitem]
    assert len(getitems) == 4
    for node in getitems:
        assert partition.reasons[node].kind is ReasonKind.FOLLOWS_PRODUCER
        assert partition.segment_of(node) is partition.segment_of(node.args[0])
    assert trtcheck.check_invariants(partition, support=no_lgamma) == []
    settings = trtcheck.Settings(min_block_size=1, torch_executed_ops=["aten::max"])
    partition = trtcheck.partition(TupleOps(), inputs, settings, no_lgamma)
    getitems = [n for n in partition.compute_nodes if n.target is operator.getitem]
    max_getitems = [n for n in getitems if n.args[0].target is aten.max.dim]
    assert len(max_getitems) == 2
    for node in max_getitems:
        assert partition.target_of(node) is Target.TORCH
        assert partition.reasons[node].kind is ReasonKind.FOLLOWS_PRODUCER


def test_getitem_does_not_count_toward_min_block_size():
    def fn(x):
        pair = aten.max.dim(x, 1)
        return aten.lgamma.default(operator.getitem(pair, 0)), operator.getitem(pair, 1)

    gm, inputs = trace(fn, torch.rand(3, 4) + 0.5)
    partition = trtcheck.partition(gm, inputs, trtcheck.Settings(min_block_size=2), no_lgamma)
    assert where(partition, "max_dim") == (Target.TORCH, ReasonKind.MIN_BLOCK_SIZE)
    partition = trtcheck.partition(gm, inputs, trtcheck.Settings(min_block_size=1), no_lgamma)
    assert where(partition, "max_dim") == (Target.TENSORRT, ReasonKind.CONVERTIBLE)


# --- non-Tensor boundaries ----------------------------------------------------------------------------


def int_model(x, y):
    size = aten.sym_size.int(x, 0)  # an int
    relu = aten.relu.default(x)
    lg = aten.lgamma.default(relu)  # Torch: finalizes the TensorRT list holding size and relu
    out = aten.add.Scalar(lg, size)  # TensorRT, reads the int made in the first TensorRT segment
    return aten.mul.Tensor(aten.neg.default(out), y)


INT_INPUTS = (torch.rand(2, 3) + 0.5, torch.rand(2, 3))
ALL_BUT_LGAMMA = supports_all_but()


def test_trt_to_trt_non_tensor_is_copied_into_the_consumer():
    gm = torch.fx.symbolic_trace(int_model)
    partition = trtcheck.partition(gm, INT_INPUTS, trtcheck.Settings(min_block_size=1), ALL_BUT_LGAMMA)
    names = [[n.name for n in s.nodes] for s in partition.segments]
    assert [s.target for s in partition.segments] == [Target.TENSORRT, Target.TORCH, Target.TENSORRT]
    assert names[0] == ["relu_default"]  # the original size node had no user left and is gone
    copy = partition.segments[2].nodes[0]
    assert copy.target is aten.sym_size.int and "copy of sym_size_int" in partition.reasons[copy].detail
    assert trtcheck.check_invariants(partition, support=ALL_BUT_LGAMMA) == []
    assert [n.name for n in gm.graph.nodes if n.target is aten.sym_size.int] == ["sym_size_int"]  # user's graph untouched
    assert [n.name for n in partition.graph_module.graph.nodes if n.target is aten.sym_size.int] == [copy.name]


def test_trt_size_computation_read_by_torch_is_copied_into_torch():
    gm = torch.fx.symbolic_trace(int_model)
    settings = trtcheck.Settings(min_block_size=1, torch_executed_ops=["aten.add.Scalar"])
    partition = trtcheck.partition(gm, INT_INPUTS, settings, ALL_BUT_LGAMMA)
    (size,) = [n for n in partition.graph_module.graph.nodes if n.target is aten.sym_size.int]
    assert partition.target_of(size) is Target.TORCH and partition.reasons[size].detail.startswith("copy of sym_size_int")
    assert partition.segment_of(size) is partition.segment_of(next(n for n in size.users))
    assert trtcheck.check_invariants(partition, support=ALL_BUT_LGAMMA) == []


def scale_of(x):
    """An int from a Tensor that is no size computation (a plain Python function): the copy rule leaves it alone."""
    return 2


torch.fx.wrap("scale_of")


def scale_model(x, y):
    relu = aten.relu.default(x)
    return aten.mul.Tensor(aten.add.Scalar(aten.lgamma.default(relu), scale_of(relu)), y)


def test_trt_producer_read_by_torch_falls_back():
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    from trtcheck.partitioning.driver import partition_graph

    gm = torch.fx.symbolic_trace(scale_model)  # not all ATen (scale_of), so partitioned as traced, not exported again
    FakeTensorProp(gm).propagate(*INT_INPUTS)
    settings = trtcheck.Settings(min_block_size=1, torch_executed_ops=["aten.add.Scalar"])
    partition = partition_graph(gm, settings, ALL_BUT_LGAMMA)
    assert where(partition, "scale_of") == (Target.TORCH, ReasonKind.NON_TENSOR_BOUNDARY)
    assert trtcheck.check_invariants(partition, support=ALL_BUT_LGAMMA) == []


def test_torch_producer_read_by_trt_falls_back_and_cascades_through_min_block_size():
    gm = torch.fx.symbolic_trace(int_model)
    settings = trtcheck.Settings(min_block_size=2, torch_executed_ops=["aten::sym_size"])
    partition = trtcheck.partition(gm, INT_INPUTS, settings, ALL_BUT_LGAMMA)
    assert where(partition, "sym_size_int") == (Target.TORCH, ReasonKind.FORCED_OP)
    assert where(partition, "add_scalar") == (Target.TORCH, ReasonKind.NON_TENSOR_BOUNDARY)
    # add_scalar leaving took neg + mul to 2 nodes (still >= 2); relu was left alone, < min_block_size.
    assert where(partition, "relu_default") == (Target.TORCH, ReasonKind.MIN_BLOCK_SIZE)
    assert where(partition, "neg_default") == (Target.TENSORRT, ReasonKind.CONVERTIBLE)
    settings.min_block_size = 3  # now the cascade reaches neg and mul too
    partition = trtcheck.partition(gm, INT_INPUTS, settings, ALL_BUT_LGAMMA)
    assert where(partition, "neg_default") == (Target.TORCH, ReasonKind.MIN_BLOCK_SIZE)
    assert partition.segments_of(Target.TENSORRT) == []
    assert trtcheck.check_invariants(partition, support=ALL_BUT_LGAMMA) == []


def test_non_tensor_graph_input_keeps_its_consumer_in_torch():
    graph = torch.fx.Graph()
    x, n = graph.placeholder("x"), graph.placeholder("n")
    add = graph.call_function(aten.add.Scalar, (x, n))
    graph.output((aten_relu := graph.call_function(aten.relu.default, (add,)),))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    partition = trtcheck.partition(gm, (torch.rand(3), 2), trtcheck.Settings(min_block_size=1), lambda n: True)
    assert where(partition, add.name) == (Target.TORCH, ReasonKind.NON_TENSOR_BOUNDARY)
    assert where(partition, aten_relu.name)[0] is Target.TENSORRT


# --- require_full_compilation -------------------------------------------------------------------------


@pytest.mark.slow
def test_require_full_compilation_gives_one_engine_or_names_the_blockers(seed_inputs):
    settings = trtcheck.Settings(require_full_compilation=True, min_block_size=10)
    partition = trtcheck.partition(SeedModel(), seed_inputs, settings, lambda n: True)
    assert [s.target for s in partition.segments] == [Target.TENSORRT]  # min_block_size does not apply
    with pytest.raises(trtcheck.PartitionError, match=r"(?s)3 node\(s\) must run in PyTorch.*lgamma_2.*no_converter"):
        trtcheck.partition(SeedModel(), seed_inputs, settings, no_lgamma)


# --- bad settings and bad input -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "settings, message",
    [
        (trtcheck.Settings(min_block_size=0), "min_block_size must be >= 1"),
        (trtcheck.Settings(min_block_size=2.5), "min_block_size must be an int"),
        (trtcheck.Settings(torch_executed_ops=["aten::lgama"]), r"unknown op 'aten::lgama'.*Did you mean: .*aten::lgamma"),
        (trtcheck.Settings(torch_executed_ops=["aten.add.Tensr"]), r"has no overload 'Tensr'.*Tensor"),
        (trtcheck.Settings(torch_executed_ops=["relu"]), r"unknown op 'relu'.*aten::relu"),
        (trtcheck.Settings(torch_executed_ops="aten::relu"), r"write \['aten::relu'\]"),
        (trtcheck.Settings(torch_executed_ops=[3]), "must be op names"),
        (trtcheck.Settings(segmentation="greedy"), "segmentation must be one of"),
        (trtcheck.Settings(torch_executed_modules=["layer9"]), r"'layer9' is neither a submodule path"),
        (trtcheck.Settings(torch_executed_modules=["Blok"]), r"Did you mean: .*Block"),
    ],
)
def test_bad_settings_raise_a_clear_error(net, settings, message):
    model, inputs = net
    with pytest.raises(trtcheck.SettingsError, match=message):
        trtcheck.partition(model, inputs, settings, support=lambda n: True)


def test_a_model_that_cannot_be_exported_is_a_lowering_error():
    class DataDependent(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x + 1
            return x - 1

    with pytest.raises(trtcheck.LoweringError, match="(?s)torch.export could not trace DataDependent.*Fix:"):
        trtcheck.partition(DataDependent(), (torch.rand(3),), frontend="export")  # "auto" partitions torch.compile's graphs


def test_wrong_number_of_example_inputs_for_a_graph_module():
    gm = torch.fx.symbolic_trace(int_model)
    with pytest.raises(trtcheck.LoweringError, match="has 2 inputs .* but 1 example"):
        trtcheck.partition(gm, (torch.rand(2),))


def test_support_may_be_an_operator_support_object(seed_inputs):
    from torch.fx.passes.operator_support import create_op_support

    support = create_op_support(lambda modules, node: node.target is not aten.lgamma.default)
    partition = trtcheck.partition(SeedModel(), seed_inputs, trtcheck.Settings(min_block_size=1), support)
    assert len(partition.segments) == 3
    with pytest.raises(TypeError, match="support must be None"):
        trtcheck.partition(SeedModel(), seed_inputs, trtcheck.Settings(min_block_size=1), support=42)


def test_getitem_after_a_boundary_still_joins_its_producer():
    def fn(x):
        relu = aten.relu.default(x)
        pair = aten.max.dim(relu, 1)
        lg = aten.lgamma.default(relu)  # Torch, depends on the TensorRT list: finalizes it
        return aten.add.Tensor(operator.getitem(pair, 0), aten.sum.dim_IntList(lg, [1]))

    gm, inputs = trace(fn, torch.rand(3, 4) + 0.5)
    for segmentation in ("naive", "dependency_aware"):
        settings = trtcheck.Settings(min_block_size=1, segmentation=segmentation)
        partition = trtcheck.partition(gm, inputs, settings, no_lgamma)
        getitem = by_name(partition)["getitem"]
        assert partition.segment_of(getitem) is partition.segment_of(by_name(partition)["max_dim"])
        assert trtcheck.check_invariants(partition, support=no_lgamma) == []
