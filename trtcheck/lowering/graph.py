"""Graph facts every later phase needs from a lowered graph: which ``get_attr`` is mutable state, whether a
graph is already core ATen, which node is a ``getitem``, and cheap copies of a ``GraphModule``.

They live with lowering because lowering itself needs them (it gives the lowered module its own copy of
every buffer the graph writes into), and every phase above reads them from here.
"""

from __future__ import annotations

import contextlib
import gc
import math
import operator
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.fx

try:  # generates a graph's Python code on first use, not on every change: partitioning 100k nodes
    from torch.fx._lazy_graph_module import _LazyGraphModule as _GraphModule  # needs no code at all
except ImportError:  # pragma: no cover - older or newer torch without it
    _GraphModule = torch.fx.GraphModule


def writes_to(user: torch.fx.Node, value: torch.fx.Node) -> bool:
    """True when ``user`` calls an ATen overload whose schema marks the argument ``value`` as written."""
    target = user.target
    if user.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    for index, argument in enumerate(target._schema.arguments):
        if argument.alias_info is not None and argument.alias_info.is_write:
            given = user.args[index] if index < len(user.args) else user.kwargs.get(argument.name)
            if given is value:
                return True
    return False


_WRITTEN_ARGUMENTS: dict[object, tuple[tuple[int, str], ...]] = {}  # per overload: the (position, name) it writes


def written_values(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The values ``node`` writes into in place (``copy_``'s ``self``, ``index_copy_``'s ``self``): an ATen
    overload whose schema marks an argument as written. Cached per overload: this is asked of every node."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return []
    written = _WRITTEN_ARGUMENTS.get(target)
    if written is None:
        written = _WRITTEN_ARGUMENTS[target] = tuple(
            (index, argument.name)
            for index, argument in enumerate(target._schema.arguments)
            if argument.alias_info is not None and argument.alias_info.is_write
        )
    found = []
    for index, name in written:
        given = node.args[index] if index < len(node.args) else node.kwargs.get(name)
        if isinstance(given, torch.fx.Node):
            found.append(given)
    return found


_METADATA_READS = frozenset({
    torch.ops.aten.sym_size.int, torch.ops.aten.sym_stride.int, torch.ops.aten.sym_numel.default,
    torch.ops.aten.sym_storage_offset.default, torch.ops.aten.dim.default,
})
"""Ops that read a value's metadata, never its elements: not reads of the state an in-place write changes."""


def state_order(nodes: Sequence[torch.fx.Node]) -> dict[torch.fx.Node, list[torch.fx.Node]]:
    """The orderings among ``nodes`` that no data edge carries: around an in-place write of a value (a buffer or
    an input ``forward`` updates: ``cache.index_copy_(...)`` becomes a ``copy_`` into it), every read or write
    of that value before it in graph order must stay before it, and every one after it after it (a ``sym_size``
    reads the shape, which no in-place write changes: it is free to move, or a copy of it could never join the
    user the copy rule places it beside).

    A read of the old value does not depend on the write that follows it, nor a read of the new value on the
    write before it, so a segmentation that reorders nodes along data edges alone may run a Torch segment
    holding the write before an engine still reading the old value. Returns, per node, the nodes that must
    run before it besides its inputs; segmentations and the topological check treat them like inputs.
    """
    writers = [(node, values) for node in nodes if (values := written_values(node))]
    if not writers:  # the common case, and the one the partitioner's rounds pay for on every large graph
        return {}
    position = {node: index for index, node in enumerate(nodes)}
    extra: dict[torch.fx.Node, list[torch.fx.Node]] = {}
    for writer, values in writers:
        for value in values:
            for other in value.users:
                if other is writer or other not in position or other.target in _METADATA_READS:
                    continue  # a size or stride: an in-place write keeps the shape, so the read may go anywhere
                if position[other] < position[writer]:
                    extra.setdefault(writer, []).append(other)
                else:
                    extra.setdefault(other, []).append(writer)
    return extra


def is_mutable_state(node: torch.fx.Node) -> bool:
    """A ``get_attr`` the graph writes into: a buffer that ``forward`` updates (``self.n.add_(1)``).

    Such a value is state, not a constant: an engine that baked it in at build time would read the
    value of the first call forever, so it crosses segment boundaries as an input instead.
    """
    return node.op == "get_attr" and any(writes_to(user, node) for user in node.users)


def is_getitem(node: torch.fx.Node) -> bool:
    """True for ``operator.getitem``: the node that picks one result of a multi-output op.

    The one definition every phase asks (``trtcheck.partitioning.nodes`` re-exports it). It lives here,
    in the lowest phase that needs it, so that conversion, which may not import partitioning, reads the
    same test as partitioning and the tools.
    """
    return node.op == "call_function" and node.target is operator.getitem


def is_aten_graph(gm: torch.fx.GraphModule) -> bool:
    """True when every compute node of ``gm`` calls an ATen overload (or picks a tuple element)."""
    return all(
        node.op in ("placeholder", "get_attr", "output")
        or (node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload))
        or is_getitem(node)
        for node in gm.graph.nodes
    )


def own_mutable_state(gm: torch.fx.GraphModule) -> None:
    """Give ``gm`` its own copy of every buffer its graph writes into (``self.n.add_(1)``).

    ``torch.export`` shares the model's parameters and buffers with the lowered module, so running the
    lowered graph would update the user's model too: compiling and calling must leave the model as it was.
    The copies never require grad: a parameter ``forward`` updates in place (``nn.Embedding(max_norm=...)``
    renormalizes its weight) would make every call with autograd on fail ("a leaf Variable that requires
    grad is being used in an in-place operation"), and a compiled module is for inference.
    """
    for node in gm.graph.nodes:
        if is_mutable_state(node):
            owner_path, _, name = node.target.rpartition(".")
            owner = gm.get_submodule(owner_path)
            value = getattr(owner, name)
            copy = value.detach().clone()
            if name in owner._buffers:
                owner._buffers[name] = copy
            elif name in owner._parameters:
                owner._parameters[name] = torch.nn.Parameter(copy, requires_grad=False)
            else:
                setattr(owner, name, copy)


def graph_module(root: torch.nn.Module, graph: torch.fx.Graph) -> torch.fx.GraphModule:
    """``torch.fx.GraphModule(root, graph)`` whose Python code is generated when it is first called, not now: most
    graphs trtcheck builds are read (converted, partitioned), never run, and generating and compiling the code was a
    tenth of the verification matrix's time (516 segment modules, 8 s of 101)."""
    return _GraphModule(root, graph)


def copy_graph_module(gm: torch.fx.GraphModule, without: Collection[torch.fx.Node] = frozenset()) -> torch.fx.GraphModule:
    """A copy of ``gm`` with its own graph (nodes copied, each ``meta`` a shallow copy), code generated lazily.

    ``without``: nodes left out of the copy, every user of each among them too (``dead_nodes``: lowering's copy
    without dead code is one pass, not a copy and then ``eliminate_dead_code``, which lints the graph and asks
    every node whether it is impure: as long as the copy itself at 100k nodes, the size partitioning's time targets
    are set at, docs/performance.md#partitioning).

    Each node is made as ``Graph.create_node`` makes it (the same name through the graph's namespace, the same
    insertion and node table), its ``meta`` a shallow copy as ``Graph.node_copy`` makes it, set before the node
    enters the table; ``graph_copy`` instead checks every argument of every node for a raw SymInt (a pytree walk
    per node, only ever a warning) and sets ``meta`` through ``Node.__setattr__``, which re-keys the node table:
    three times slower, and the copy of a user's 100k-node graph was most of partitioning it. The
    collector is paused while the copy is made (each full collection would walk the half-built graph: 2.5 s
    became 10-23 s at 100k nodes on a loaded machine). A torch.fx without these internals gets ``graph_copy``.
    """
    with gc_paused():
        try:
            graph = _copied_graph(gm.graph, without)
        except (AttributeError, TypeError):  # pragma: no cover - another torch.fx
            graph = torch.fx.Graph()
            output = graph.graph_copy(gm.graph, {}, return_output_node=True)
            left_out = {node.name for node in without}  # graph_copy copies every node: drop those again, users first
            for node in reversed(graph.nodes):
                if node.name in left_out:
                    graph.erase_node(node)
            if isinstance(output, tuple):  # graph_copy returns (value, output_node) with return_output_node
                output_value, output_node = output
                graph.output(output_value, type_expr=getattr(output_node, "type", None))
        copy = graph_module(gm, graph)
        copy.meta.update(gm.meta)  # the symbol ranges of a dynamic graph travel with every copy
        copy.graph._codegen = gm.graph._codegen
        copy.recompile()
    return copy


def _copied_graph(source: torch.fx.Graph, without: Collection[torch.fx.Node] = frozenset()) -> torch.fx.Graph:
    """The nodes of ``source`` but ``without`` in a new graph, as ``copy_graph_module`` describes."""
    graph = torch.fx.Graph()
    create_name = graph._graph_namespace.create_name
    associate = graph._graph_namespace.associate_name_with_obj
    insert, table_insert = graph._insert, graph._find_nodes_lookup_table.insert
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    get, map_arg, node_type, set_attribute = env.__getitem__, torch.fx.node.map_arg, torch.fx.Node, object.__setattr__
    count = 0
    for node in source.nodes:
        if node.op == "output":
            graph.output(map_arg(node.args[0], get), type_expr=getattr(node, "type", None))
            break
        if without and node in without:  # left out, its name kept taken: later names are those a full copy gets
            create_name(node.name, None)
            continue
        name = create_name(node.name, None)
        new = node_type(graph, name, node.op, node.target, map_arg(node.args, get), map_arg(node.kwargs, get), node.type)
        set_attribute(new, "meta", dict(node.meta))  # node_copy's copy.copy of the dict; no table entry yet to re-key
        associate(name, new)
        insert(new)
        table_insert(new)
        count += 1
        env[node] = new
    graph._len += count
    return graph


def dead_nodes(graph: torch.fx.Graph) -> set[torch.fx.Node]:
    """The nodes ``Graph.eliminate_dead_code`` would erase from ``graph`` (not its subgraphs'): a node no live node
    reads that has no side effect (``Node.is_impure``, asked only of such nodes). One walk from the output back,
    with no lint: the copy that leaves them out (``copy_graph_module(without=...)``) costs no more than a copy."""
    impure_random = _impure_random()
    dead: set[torch.fx.Node] = set()
    for node in reversed(graph.nodes):
        users = node.users
        if users and not all(user in dead for user in users):
            continue
        if not node.is_impure(impure_random):
            dead.add(node)
    return dead


def _impure_random() -> bool:
    """Whether a random op counts as a side effect, as ``eliminate_dead_code`` decides it: yes, except inside
    torch.compile's tracing, where inductor's ``fallback_random`` says."""
    if torch._guards.TracingContext.try_get() is None:
        return True
    from torch._inductor import config  # only under torch.compile, which has imported it already

    return bool(config.fallback_random)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: copying or partitioning a graph allocates many small acyclic objects
    next to a large graph, and each full collection walks the whole graph (measured: half of the time of
    partitioning 100k nodes)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def flat_inputs(gm: torch.fx.GraphModule, args: Sequence[Any], kwargs: Mapping[str, Any] | None) -> list[Any]:
    """The model's inputs flattened the way the lowered graph's placeholders take them."""
    if getattr(gm.graph._codegen, "pytree_info", None) is None:  # placeholders take the arguments as they are
        return list(args)
    leaves, _ = torch.utils._pytree.tree_flatten((tuple(args), dict(kwargs or {})))
    return leaves


_ALIASES = frozenset({torch.ops.aten.detach.default, torch.ops.aten.alias.default, torch.ops.aten.clone.default,
                      torch.ops.aten.lift_fresh_copy.default})


def constant_tensor(value: Any) -> torch.Tensor | None:
    """The tensor ``value`` always holds when it is a graph's constant: a ``get_attr`` node (a buffer, parameter or
    lifted constant), seen through ``detach``/``clone``/``alias`` (ModelOpt's exported amax is a detached buffer);
    None for anything computed at run time. What a converter reads to make a constant of it (a quantizer's scale)."""
    while isinstance(value, torch.fx.Node) and value.op == "call_function" and value.target in _ALIASES:
        value = value.args[0]
    if not isinstance(value, torch.fx.Node) or value.op != "get_attr" or value.graph.owning_module is None:
        return None
    found: Any = value.graph.owning_module
    for part in str(value.target).split("."):
        found = getattr(found, part, None)
    return found.detach() if isinstance(found, torch.Tensor) else None


def past_range_constant(node: torch.fx.Node, largest: float) -> tuple[float, list[str]] | None:
    """A finite constant ``node`` computes with that is beyond ``largest`` (a scalar argument, or the largest magnitude
    of a constant tensor: a lifted ``get_attr``, seen through ``clone``/``detach``/``alias``), and the nodes that keep
    it exact in float32: the pass-through nodes it comes through, then ``node``; or None. Its activations stay in
    range (``x / 1e5`` is small), so no activation shows it, but the reduced-precision graph clamps the constant
    (``compiler.mixed_precision.to_low``) and the node computes another function: ``x / 65504``. A pass-through node itself
    computes nothing and is no finding of its own."""
    if node.op != "call_function" or constant_tensor(node) is not None:
        return None
    for arg in node.args:
        if isinstance(arg, float) and math.isfinite(arg) and abs(arg) > largest:
            return arg, [node.name]
        value = constant_tensor(arg) if isinstance(arg, torch.fx.Node) else None
        if value is None or not value.is_floating_point():
            continue
        finite = value[value.isfinite()]
        if finite.numel() and float(finite.abs().max()) > largest:
            chain, through = [node.name], arg
            while through.op == "call_function":
                chain.insert(0, through.name)
                through = through.args[0]
            return float(finite[finite.abs().argmax()]), chain
    return None
