"""Constant folding when lowering (trtcheck/lowering/constants.py): what depends only on weights never reaches the
partition, and nothing else is folded: state, randomness, views of a weight, expansions, constructors alone."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import trtcheck
from trtcheck.lowering.constants import propose_folding

A = torch.ops.aten
ONE = trtcheck.Settings(min_block_size=1)


def _targets(gm: torch.fx.GraphModule) -> list[object]:
    return [node.target for node in gm.graph.nodes if node.op == "call_function"]


class StandardizedConv(nn.Conv2d):
    """NFNet's weight standardization: a batch norm on the batch statistics of the weight itself, every call."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = self.weight.reshape(1, self.out_channels, -1)
        weight = F.batch_norm(flat, None, None, training=True, momentum=0.0, eps=1e-5).reshape_as(self.weight)
        return F.conv2d(x, weight * 0.5, self.bias, self.stride, self.padding)


class TwoStandardized(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = StandardizedConv(3, 8, 3, padding=1), StandardizedConv(8, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.relu(self.first(x)))


def test_weight_standardization_is_folded_so_only_the_convolutions_reach_the_partition():
    model, inputs = TwoStandardized().eval(), (torch.randn(2, 3, 12, 12),)
    gm = trtcheck.lower(model, inputs)
    assert set(_targets(gm)) == {A.convolution.default, A.relu.default}, gm.code
    folded = [node for node in gm.graph.nodes if node.op == "get_attr" and node.target.startswith("_folded_")]
    assert len(folded) == 2 and all(node.meta["val"].shape == (8, 3, 3, 3) or node.meta["val"].shape == (4, 8, 3, 3)
                                    for node in folded)
    assert "nn_module_stack" in folded[0].meta  # the folded value keeps its node's provenance
    with torch.no_grad():
        assert torch.equal(gm(*inputs), model(*inputs))  # what eager computes, bit for bit
    report = trtcheck.verify(model, inputs, ONE, backend="onnxruntime")
    assert report.partition.summary().startswith("1 segment: 1 TensorRT (3 compute nodes)"), report.partition.summary()


def test_a_linear_weight_s_transpose_is_not_folded_into_a_second_copy():
    model = nn.Sequential(nn.Linear(8, 4), nn.ReLU()).eval()
    gm = trtcheck.lower(model, (torch.randn(2, 8),))
    assert A.permute.default in _targets(gm) and not any(str(n.target).startswith("_folded_") for n in gm.graph.nodes)


class Stateful(nn.Module):
    """A buffer the forward writes: state, read fresh every call, never a constant."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4))
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1)
        return x * (self.weight.exp() * self.calls)


def test_state_and_random_ops_are_not_folded():
    gm = trtcheck.lower(Stateful().eval(), (torch.randn(2, 4),))
    targets = _targets(gm)
    assert A.exp.default not in targets and targets.count(A.mul.Tensor) == 2, gm.code  # the weight's exp only is folded

    class Noisy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.randn(4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.rand_like(self.weight).exp()

    gm = trtcheck.lower(Noisy(), (torch.randn(2, 4),))
    assert not propose_folding(gm) and A.exp.default in _targets(gm)


def test_an_expansion_larger_than_its_weights_and_a_constructor_alone_are_not_folded():
    class Expanding(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.row = nn.Parameter(torch.randn(1, 512))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            table = self.row.exp().expand(512, 512) * 2  # 262,144 elements from 512
            mask = torch.arange(8.0).exp()  # no weight at all
            return x @ table + mask.sum()

    gm = trtcheck.lower(Expanding(), (torch.randn(3, 512),))
    targets = _targets(gm)
    assert targets.count(A.exp.default) == 1 and A.expand.default in targets, gm.code  # the row's exp only is folded
    assert A.arange.start_step in targets or A.arange.default in targets
    assert not propose_folding(gm)  # what lowering left, it leaves for good: folding again finds nothing


def test_a_model_compiled_at_fp16_reads_the_folded_weight():
    model, inputs = TwoStandardized().eval(), (torch.randn(2, 3, 12, 12),)
    report = trtcheck.verify(model, inputs, trtcheck.Settings(min_block_size=1, precision="fp16"), backend="onnxruntime")
    assert report.passed and report.partition.summary().startswith("1 segment: 1 TensorRT (3 compute nodes)")


def test_an_op_torch_executed_ops_names_is_not_folded_even_from_a_lowering_made_without_it():
    """The user named the op to run in PyTorch: the partition must find it, not a folded constant (and the forced op
    check must not call the op one the model does not call)."""
    model, inputs = TwoStandardized().eval(), (torch.randn(2, 3, 12, 12),)
    forced = trtcheck.Settings(min_block_size=1, torch_executed_ops=["aten::_native_batch_norm_legit.no_stats"])
    partition = trtcheck.partition(model, inputs, forced)
    norms = [n for n in partition.compute_nodes if n.target == A._native_batch_norm_legit.no_stats]
    assert len(norms) == 2 and all(partition.target_of(n).name == "TORCH" for n in norms), partition.explain()
    folded = trtcheck.lower(model, inputs)  # made for settings that force nothing: the norms are folded away
    report = trtcheck.verify(model, inputs, forced, backend="onnxruntime", lowered=folded)
    assert sum(n.target == A._native_batch_norm_legit.no_stats for n in report.partition.compute_nodes) == 2
