"""``provenance.node_source``: where in the user's code a node came from (culprits and fallback reasons name the
user's source: the module path and the file and line torch.export kept)."""

from __future__ import annotations

import pathlib

import torch

import trtcheck
from trtcheck.provenance import node_source


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.fc(x))  # LINE_OF_BLOCK


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([Block(), Block()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x.relu()  # LINE_OF_NET


def _line(marker: str) -> int:
    lines = pathlib.Path(__file__).read_text().splitlines()
    return next(number for number, text in enumerate(lines, 1) if text.rstrip().endswith(marker))


def test_a_node_names_its_innermost_module_and_the_users_line_not_torchs():
    nodes = {node.name: node for node in trtcheck.lower(Net().eval(), (torch.randn(2, 4),)).graph.nodes}
    here = __file__
    # addmm is made inside torch.nn.Linear's forward: the user's frame is Block's line, not linear.py's
    assert node_source(nodes["addmm_1"]) == f"layers.1.fc (Linear), {here}:{_line('LINE_OF_BLOCK')}"
    assert node_source(nodes["tanh"]) == f"layers.0 (Block), {here}:{_line('LINE_OF_BLOCK')}"
    assert node_source(nodes["relu"]) == f"the model itself (Net), {here}:{_line('LINE_OF_NET')}"


def test_a_node_torch_export_kept_nothing_for_has_no_source():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    node = graph.call_function(torch.ops.aten.relu.default, (x,))
    assert node_source(node) == ""


def test_explain_names_where_each_node_came_from():
    """``Partition.explain``'s line per node ends with its source, so a fallback reason points at the user's code."""
    partition = trtcheck.partition(Net().eval(), (torch.randn(2, 4),), trtcheck.Settings(torch_executed_ops=["aten::relu"]))
    (line,) = [line for line in partition.explain().splitlines() if line.startswith("relu (aten::relu)")]
    assert line.endswith(f"[from the model itself (Net), {__file__}:{_line('LINE_OF_NET')}]"), line


class Branches(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda t: t.relu(), lambda t: t.sigmoid(), (x,))  # LINE_OF_COND


def test_a_branch_node_is_not_sourced_to_code_torch_fx_generated():
    """A re-traced branch graph's stack trace is torch.fx's generated forward (``<eval_with_key>.N``), no line the user
    wrote: the user's frame before it, the ``torch.cond`` call, is the source (torch.export keeps no line inside the
    branch function); before, explain said '[from <eval_with_key>.6:6]'."""
    partition = trtcheck.partition(Branches().eval(), (torch.randn(2, 4),), trtcheck.Settings(min_block_size=1))
    text = partition.explain()
    expected = f"true_graph_0/relu (aten::relu): TensorRT - convertible [from {__file__}:{_line('LINE_OF_COND')}]"
    assert expected in text.splitlines(), text
    assert "eval_with_key" not in text
