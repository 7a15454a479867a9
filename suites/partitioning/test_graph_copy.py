"""``copy_graph_module``, the copy every partition of a user's graph with int producers (or dead code) pays for:
node for node what ``torch.fx.Graph.graph_copy`` makes, and the collector as it was (issue 42)."""

from __future__ import annotations

import contextlib
import gc

import pytest
import torch
import torch.fx

from trtcheck.lowering.graph import copy_graph_module, dead_nodes
from trtcheck.testing.random_graphs import OPS, build_graph, random_recipe


def _reference_copy(gm: torch.fx.GraphModule) -> torch.fx.Graph:
    graph = torch.fx.Graph()
    value, output = graph.graph_copy(gm.graph, {}, return_output_node=True)
    graph.output(value, type_expr=getattr(output, "type", None))
    return graph


def _reference_copy_module(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    return torch.fx.GraphModule(gm, _reference_copy(gm))


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
    # Nodes added later are named as in graph_copy's graph (the namespace's counts per base name are its).
    fresh, reference = copy_graph_module(gm).graph, _reference_copy(gm)
    for graph in (fresh, reference):
        for node in [node for node in graph.nodes if node.op == "call_function"][::7]:
            with graph.inserting_before(node):
                graph.node_copy(node)
    assert _described(fresh) == _described(reference)


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


def _with_dead_code() -> torch.fx.GraphModule:
    """A dead chain, a dead node read only by dead nodes, and an unread in-place write (impure: it stays)."""
    aten = torch.ops.aten
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    kept = graph.call_function(aten.relu.default, (x,))
    dead = graph.call_function(aten.mul.Tensor, (x, 2))
    graph.call_function(aten.neg.default, (graph.call_function(aten.sin.default, (dead,)),))
    graph.call_function(aten.copy_.default, (x, kept))  # writes into x: a side effect, not dead code
    graph.output(kept)
    return torch.fx.GraphModule(torch.nn.Module(), graph)


@pytest.mark.parametrize("seed", [2, 4, 6])  # random graphs with 4, 6 and 9 dead nodes
def test_a_copy_without_dead_nodes_is_the_copy_eliminate_dead_code_leaves(seed):
    """Lowering's one-pass copy without dead code (issue 42) against what it replaced: a full copy, then
    ``Graph.eliminate_dead_code``; the same nodes, and the same names for nodes added later."""
    graphs = [build_graph(random_recipe(300, 0.1, seed, tuple(OPS))).graph_module] + ([_with_dead_code()] if seed == 2 else [])
    for gm in graphs:
        dead = dead_nodes(gm.graph)
        assert dead
        reference = _reference_copy_module(gm)
        assert reference.graph.eliminate_dead_code() == bool(dead)
        copy = copy_graph_module(gm, without=dead)
        assert _described(copy.graph) == _described(reference.graph)
        copy.graph.lint()
        for graph in (copy.graph, reference.graph):  # a new node named after a dead one is renamed in both
            last = [node for node in graph.nodes if node.op == "call_function"][-1]
            with graph.inserting_before(last):
                graph.node_copy(last)
                for node in dead:
                    graph.create_node("call_function", torch.ops.aten.relu.default, (last.args[0],), name=node.name)
        assert _described(copy.graph) == _described(reference.graph)  # dead names stay taken, as in the reference


def test_dead_nodes_are_a_dead_chain_and_what_only_it_reads_never_a_side_effect():
    assert {node.name for node in dead_nodes(_with_dead_code().graph)} == {"mul_tensor", "sin_default", "neg_default"}


def test_nodes_added_to_a_copy_are_named_as_in_graph_copy_s_even_with_gaps_in_the_numbers():
    """The copy's namespace counts per base name as ``create_name`` does (the number of the last name with that base),
    so a name added later skips past gaps as in graph_copy's graph."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    values = [graph.create_node("call_function", torch.ops.aten.relu.default, (x,), name=name) for name in ("relu", "relu_5", "relu_2")]
    graph.output(tuple(values))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    copy, reference = copy_graph_module(gm).graph, _reference_copy(gm)
    for graph in (copy, reference):
        first = next(node for node in graph.nodes if node.op == "call_function")
        with graph.inserting_before(first):
            graph.node_copy(first)
    assert _described(copy) == _described(reference)
    assert [node.name for node in copy.nodes if node.op == "call_function"] == ["relu_3", "relu", "relu_5", "relu_2"]


def test_dead_nodes_decide_random_ops_as_eliminate_dead_code_does_under_torch_compile_s_tracing():
    """A dead ``rand`` is a side effect to ``eliminate_dead_code`` (kept) except inside torch.compile's tracing, where
    inductor's ``fallback_random`` (False by default) lets it go: ``dead_nodes`` decides as it does, in both."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.call_function(torch.ops.aten.rand.default, ([2],))
    graph.output(graph.call_function(torch.ops.aten.relu.default, (x,)))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    for context, dead in ((contextlib.nullcontext(), set()), (torch._guards.tracing(torch._guards.TracingContext(None)), {"rand_default"})):
        with context:
            reference = copy_graph_module(gm)
            reference.graph.eliminate_dead_code()
            kept = {node.name for node in reference.graph.nodes}
            assert {node.name for node in gm.graph.nodes} - kept == {node.name for node in dead_nodes(gm.graph)} == dead
