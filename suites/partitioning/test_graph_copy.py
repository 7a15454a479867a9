"""``copy_graph_module``, the copy every partition of a user's graph with int producers (or dead code) pays for:
node for node what ``torch.fx.Graph.graph_copy`` makes, and the collector as it was (issue 42)."""

from __future__ import annotations

import gc

import torch
import torch.fx

from trtcheck.lowering.graph import copy_graph_module
from trtcheck.testing.random_graphs import OPS, build_graph, random_recipe


def _reference_copy(gm: torch.fx.GraphModule) -> torch.fx.Graph:
    graph = torch.fx.Graph()
    value, output = graph.graph_copy(gm.graph, {}, return_output_node=True)
    graph.output(value, type_expr=getattr(output, "type", None))
    return graph


def _described(graph: torch.fx.Graph) -> list[tuple]:
    return [
        (node.name, node.op, node.target, repr(node.args), repr(node.kwargs), node.type, sorted(node.meta))
        for node in graph.nodes
    ]


def test_copy_graph_module_makes_what_graph_copy_makes_with_its_own_nodes_and_meta():
    gm = build_graph(random_recipe(300, 0.1, 3, tuple(OPS))).graph_module
    copy = copy_graph_module(gm)
    assert _described(copy.graph) == _described(_reference_copy(gm))
    assert len(copy.graph.nodes) == len(gm.graph.nodes)
    for original, new in zip(gm.graph.nodes, copy.graph.nodes, strict=True):
        assert new is not original and new.graph is copy.graph
        assert new.meta is not original.meta and new.meta.get("val") is original.meta.get("val")  # shallow, as node_copy
        assert all(value.graph is copy.graph for value in new.all_input_nodes)
    assert copy.code == gm.code  # the code torch.fx generates for it is the original's
    # The node table and namespace are the copy's own: finding nodes and naming new ones work as on any graph.
    sym_sizes = copy.graph.find_nodes(op="call_function", target=torch.ops.aten.sym_size.int)
    assert sym_sizes and all(node.graph is copy.graph for node in sym_sizes)
    first = next(node for node in copy.graph.nodes if node.op == "call_function")
    with copy.graph.inserting_before(first):
        added = copy.graph.node_copy(first)
    assert added.name != first.name
    copy.graph.lint()


def test_copy_graph_module_leaves_the_collector_as_it_found_it():
    gm = build_graph(random_recipe(50, 0.1, 1, tuple(OPS))).graph_module
    assert gc.isenabled()
    copy_graph_module(gm)
    assert gc.isenabled()
    gc.disable()
    try:
        copy_graph_module(gm)
        assert not gc.isenabled()
    finally:
        gc.enable()
